"""hemlp serve: a real HTTP round trip with the Python client (the server's result = an in-process run, bit for bit),
hostile requests answered with typed 4xx errors that change nothing, the HTTP layer's length checks, and Ray Serve
with two replicas sharing one key upload."""
import json
import socket

import numpy as np
import pytest

import hemlp
from hemlp.serving import Client, ModelService, ServerError
from hemlp.serving.client import ServerUnavailableError
from hemlp.runtime.artifacts import EncryptedBatch
from hemlp.serving.http import LocalServer
from tests.serving.conftest import free_port
from tests.serving.conftest import make_service as _service


def test_round_trip_equals_an_in_process_run(served):
    cm, x, d, _ = served
    svc = _service(d)
    with LocalServer(svc, port=0) as srv:
        client = Client(srv.url, d / "client", allow_insecure=True)
        meta = client.describe()
        assert meta["model_id"] == cm.model_id and meta["input_shape"] == [16] and meta["security"] == "INSECURE"
        y = client.infer(x[:4])
        assert np.max(np.abs(y - cm.simulate(x[:4]))) < 2.0 ** -16
        # the same ciphertext through the server and through run() here: the same bytes
        ct = client.model.encrypt(x[4:8], client.secret_key)
        status, _, body = svc.handle("POST", "/v1/infer", {"key": client.key_id}, ct.to_bytes())
        assert status == 200
        ek = svc._keys(client.key_id)
        local = cm.run(EncryptedBatch.from_bytes(ct.to_bytes(), cm), ek).to_bytes()
        assert body == local
        # a second client, its own keys: both served, neither key set used for the other's ciphertexts
        other = Client(srv.url, d / "client", allow_insecure=True)
        y2 = other.infer(x[8:12])
        assert other.key_id != client.key_id
        assert np.max(np.abs(y2 - cm.simulate(x[8:12]))) < 2.0 ** -16
        with pytest.raises(ServerError) as e:       # client 1's ciphertext with client 2's keys
            other._request("POST", f"/v1/infer?key={other.key_id}", ct.to_bytes())
        assert e.value.status == 409 and e.value.name == "KeyMismatchError"


def test_hostile_requests_get_typed_errors_and_change_nothing(served):
    cm, x, d, other = served
    svc = _service(d, max_body_bytes=64 << 20)
    sk, ek = cm.keygen()
    keys = ek.to_bytes(cm.context)
    status, _, body = svc.handle("POST", "/v1/keys", {}, keys)
    assert status == 201
    key_id = json.loads(body)["key_id"]
    ct = cm.encrypt(x[:4], sk).to_bytes()
    good = svc.handle("POST", "/v1/infer", {"key": key_id}, ct)
    o_sk, o_ek = other.keygen()
    cases = [
        (("GET", "/v1/nothing", {}, b""), 404, "NotFound"),
        (("GET", "/v1/keys", {}, b""), 405, "MethodNotAllowed"),
        (("POST", "/v1/keys", {}, b""), 400, "EmptyBody"),
        (("POST", "/v1/keys", {}, keys[: len(keys) // 2]), 400, "SerializationError"),
        (("POST", "/v1/keys", {}, b"\x00" * 1000), 400, "SerializationError"),
        (("POST", "/v1/keys", {}, o_ek.to_bytes(other.context)), 409, "KeyMismatchError"),   # another model's
        (("POST", "/v1/infer", {}, ct), 400, "MissingKeyId"),
        (("POST", "/v1/infer", {"key": "0" * 32}, ct), 404, "UnknownKey"),
        (("POST", "/v1/infer", {"key": key_id}, b""), 400, "EmptyBody"),
        (("POST", "/v1/infer", {"key": key_id}, ct[:-100]), 400, "SerializationError"),
        (("POST", "/v1/infer", {"key": key_id}, bytes(reversed(ct))), 400, "SerializationError"),
        (("POST", "/v1/infer", {"key": key_id}, other.encrypt(x[:4, :16], o_sk).to_bytes()), 409, None),
        (("POST", "/v1/infer", {"key": key_id}, good[2]), 400, None),              # a result, not an input
        (("POST", "/v1/infer", {"key": key_id}, cm.encrypt(x[:4], cm.keygen()[0]).to_bytes()), 409,
         "KeyMismatchError"),                                                         # another key pair
        (("POST", "/v1/keys", {}, b"x" * ((64 << 20) + 1)), 413, "PayloadTooLarge"),
    ]
    for request, status, name in cases:
        got, ctype, body = svc.handle(*request)
        err = json.loads(body)
        assert ctype == "application/json" and 400 <= got < 500, (request[:2], got, err)
        if status is not None:
            assert got == status, (request[:2], got, err)
        if name is not None:
            assert err["error"] == name, (request[:2], err)
        assert "Traceback" not in err["message"]
    # nothing else happened: the same request gives the same bytes, and the key store holds the one upload
    assert svc.handle("POST", "/v1/infer", {"key": key_id}, ct) == good
    assert list(svc.key_store._keys) == [key_id]


def test_http_length_checks(served):
    cm, x, d, _ = served
    svc = _service(d, max_body_bytes=1 << 16)
    with LocalServer(svc, port=0) as srv:
        host, port = srv.httpd.server_address[:2]

        def raw(request: bytes) -> tuple[int, dict]:
            with socket.create_connection((host, port), timeout=30) as s:
                s.sendall(request)
                s.shutdown(socket.SHUT_WR)
                data = b""
                while chunk := s.recv(65536):
                    data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            return int(head.split()[1]), json.loads(body)

        assert raw(b"POST /v1/keys HTTP/1.1\r\nHost: x\r\n\r\n") == (411, raw(
            b"POST /v1/keys HTTP/1.1\r\nHost: x\r\n\r\n")[1])
        status, err = raw(b"POST /v1/keys HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\nabc")
        assert status == 413 and err["error"] == "PayloadTooLarge"
        status, err = raw(b"POST /v1/keys HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc")
        assert status == 400 and err["error"] == "TruncatedBody"
        status, err = raw(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status == 200 and err == dict(status="ok", model_id=cm.model_id)
    with pytest.raises(ServerUnavailableError, match="hemlp serve"):
        Client(srv.url, d / "client", allow_insecure=True)


def test_client_refuses_a_server_of_another_model(served):
    cm, x, d, other = served
    other_dir = d / "other"
    other.save(other_dir)
    with LocalServer(ModelService(other_dir, allow_insecure=True), port=0) as srv:
        with pytest.raises(hemlp.errors.KeyMismatchError, match="serves model"):
            Client(srv.url, d / "client", allow_insecure=True)


def test_ray_serve_two_replicas_share_one_key_upload(served, ray_serve_urls):
    import ray

    cm, x, d, _ = served
    url, direct = ray_serve_urls
    client = Client(url, d / "client", allow_insecure=True)
    for i in range(6):          # requests spread over both replicas; the keys were uploaded once
        y = client.infer(x[4 * i: 4 * i + 4])
        assert np.max(np.abs(y - cm.simulate(x[4 * i: 4 * i + 4]))) < 2.0 ** -16
    with pytest.raises(ServerError) as e:
        client._request("POST", "/v1/infer?key=" + "0" * 32, b"junk")
    assert e.value.status == 404 and e.value.name == "UnknownKey"
    # the body as pieces of a chunked upload (no Content-Length), as one, or announced above the limit (refused
    # before it is read)
    import http.client
    from urllib.parse import urlsplit

    host, port = urlsplit(url).hostname, urlsplit(url).port
    body = client.model.encrypt(x[:4], client.secret_key).to_bytes()
    answers = []
    for chunked in (True, False):
        conn = http.client.HTTPConnection(host, port, timeout=300)
        conn.request("POST", f"/v1/infer?key={client.key_id}",
                     body=(body[i:i + 5000] for i in range(0, len(body), 5000)) if chunked else body)
        r = conn.getresponse()
        answers.append((r.status, r.read()))
        conn.close()
    assert answers[0] == answers[1] and answers[0][0] == 200
    assert np.max(np.abs(client._decode(answers[0][1]) - cm.simulate(x[:4]))) < 2.0 ** -16
    with socket.create_connection((host, port), timeout=60) as s:
        s.sendall(f"POST /v1/infer?key={client.key_id} HTTP/1.1\r\nHost: x\r\nContent-Length: {(1 << 30) + 1}"
                  "\r\n\r\n".encode())
        head = b""
        while b"PayloadTooLarge" not in head and (chunk := s.recv(65536)):
            head += chunk
    assert head.split()[1] == b"413" and b"PayloadTooLarge" in head
    # the replicas' direct port (no Ray proxy): the same keys (one store), the same answers, the same refusals
    with Client(direct, client.model, keys=(client.secret_key, client._eval_keys)) as near:
        assert near.describe() == client.describe()
        assert near.connect() == client.key_id
        for i in range(4):                           # a new connection each time: the kernel picks the replica
            near.close()
            assert np.max(np.abs(near.infer(x[4 * i: 4 * i + 4]) - cm.simulate(x[4 * i: 4 * i + 4]))) < 2.0 ** -16
        with pytest.raises(ServerError) as e:
            near._request("POST", "/v1/infer?key=" + "0" * 32, b"junk")
        assert e.value.status == 404 and e.value.name == "UnknownKey"
    dhost, dport = urlsplit(direct).hostname, urlsplit(direct).port
    with socket.create_connection((dhost, dport), timeout=60) as s:
        s.sendall(f"POST /v1/infer?key={client.key_id} HTTP/1.1\r\nHost: x\r\nContent-Length: {(1 << 30) + 1}"
                  "\r\n\r\n".encode())
        head = b""
        while b"PayloadTooLarge" not in head and (chunk := s.recv(65536)):
            head += chunk
    assert head.split()[1] == b"413"
    # a replica killed while requests run: each request is answered correctly (retried) or fails with a typed
    # error, never with a wrong result
    import threading

    replicas = [a for a in ray.util.list_named_actors(all_namespaces=True) if "HemlpModel" in a["name"]]
    assert len(replicas) == 2
    results, errors = [], []

    def requests():
        for i in range(8):
            try:
                results.append((i, client.infer(x[4 * i: 4 * i + 4])))
            except hemlp.errors.HemlpError as exc:
                errors.append(exc)

    t = threading.Thread(target=requests)
    t.start()
    ray.kill(ray.get_actor(replicas[0]["name"], namespace=replicas[0]["namespace"]), no_restart=True)
    t.join(timeout=600)
    assert not t.is_alive() and len(results) + len(errors) == 8 and len(results) >= 6, errors
    for i, y in results:
        assert np.max(np.abs(y - cm.simulate(x[4 * i: 4 * i + 4]))) < 2.0 ** -16


def test_cli_serve_and_infer(served, tmp_path):
    """`hemlp serve --no-ray` in one process, `hemlp infer --url` in another (more samples than the batch size: jobs):
    the decrypted outputs as in-process."""
    import os
    import subprocess
    import sys
    import time
    import urllib.request
    from pathlib import Path

    cm, x, d, _ = served
    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(repo))
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "hemlp.apps.cli", "serve", "--no-ray", "--insecure", "--port",
                               str(port), str(d / "server")], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                urllib.request.urlopen(url + "/v1/health", timeout=1).read()
                break
            except OSError:
                assert server.poll() is None, server.stderr.read().decode()
                time.sleep(0.1)
        np.save(tmp_path / "x.npy", x[:10])      # 10 samples, batch size 4: three jobs (hemlp infer's progress)
        r = subprocess.run([sys.executable, "-m", "hemlp.apps.cli", "infer", "--insecure", "--json", "--url", url,
                            str(d / "client"), "-i", str(tmp_path / "x.npy"), "-o", str(tmp_path / "y.npy")],
                           env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["command"] == "infer" and out["shape"] == [10, 3]
        y = np.load(tmp_path / "y.npy")
        assert np.max(np.abs(y - cm.simulate(x[:10]))) < 2.0 ** -10   # standard decryption noise in a fresh process
        r = subprocess.run([sys.executable, "-m", "hemlp.apps.cli", "infer", "--insecure", "--url",
                            "http://127.0.0.1:1", str(d / "client"), "-i", str(tmp_path / "x.npy"), "-o",
                            str(tmp_path / "z.npy")], env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 2 and "no hemlp server answers" in r.stderr and "Traceback" not in r.stderr
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_endpoints_under_mutated_bodies(served):
    """The fuzzers' mutations (tests/fuzz/targets.mutate, checksums recomputed so the parsers meet the edits) of a real
    key upload and a real request: every answer is a typed 4xx (or a 200 for an edit that still parses), never a 500,
    and the service answers the original request with the same bytes afterwards."""
    from hemlp.fhe.serialize import recompute_checksums
    from tests.fuzz.targets import JSON_TOKENS, mutate

    cm, x, d, _ = served
    svc = _service(d, max_body_bytes=64 << 20, max_keys=100)     # mutated keys that still parse are new key sets
    sk, ek = cm.keygen()
    keys = ek.to_bytes(cm.context)
    key_id = json.loads(svc.handle("POST", "/v1/keys", {}, keys)[2])["key_id"]
    ct = cm.encrypt(x[:4], sk).to_bytes()
    good = svc.handle("POST", "/v1/infer", {"key": key_id}, ct)
    rng = np.random.default_rng(5)
    seen = set()
    for i in range(160):
        path, body, query = ("/v1/keys", keys, {}) if i % 4 == 0 else ("/v1/infer", ct, {"key": key_id})
        data = recompute_checksums(mutate(body, rng, JSON_TOKENS))
        status, ctype, out = svc.handle("POST", path, query, data)
        assert status in (200, 201) or 400 <= status < 500, (i, status, out[:300])
        if status >= 400:
            seen.add(json.loads(out)["error"])
    assert "SerializationError" in seen
    assert svc.handle("POST", "/v1/infer", {"key": key_id}, ct) == good


def test_client_re_uploads_evicted_keys_and_retries_gateway_errors(served):
    """A server that forgot the keys (one key set kept, another client's upload evicted them) gets them again from
    the client, once; a 503 from a restarting replica is retried; the answers stay correct."""
    cm, x, d, _ = served
    svc = _service(d, max_keys=1)
    with LocalServer(svc, port=0) as srv:
        a = Client(srv.url, d / "client", allow_insecure=True)
        b = Client(srv.url, d / "client", allow_insecure=True)
        a.connect()
        b.connect()                                    # evicts a's keys (max_keys=1)
        y = a.infer(x[:4])                             # 404 UnknownKey -> a re-uploads, then succeeds
        assert np.max(np.abs(y - cm.simulate(x[:4]))) < 2.0 ** -16
        calls = {"n": 0}
        handle = svc.handle

        def flaky(*args):
            calls["n"] += 1
            if calls["n"] == 1:
                return 503, "application/json", json.dumps(dict(error="Unavailable", message="restarting")).encode()
            return handle(*args)

        svc.handle = flaky
        y = a.infer(x[4:8])
        assert calls["n"] == 2 and np.max(np.abs(y - cm.simulate(x[4:8]))) < 2.0 ** -16


def _as_received(svc, method, path, query, body: bytes, piece: int = 4096):
    """body as the HTTP servers hand it to handle(): through the service's Receiver, in pieces."""
    r = svc.receiver(method, path, query, len(body))
    for i in range(0, len(body), piece):
        r.feed(body[i:i + piece])
    return r.finish()


def test_bodies_read_as_they_arrive_get_the_answers_of_bytes(served):
    """What the servers pass to handle() (the body hashed, and an encrypted batch's ciphertexts imported, as the
    pieces arrive) gets the same answers as the same bytes: the result bit for bit, every hostile or mutated body's
    typed error, and a key upload's key id."""
    from hemlp.fhe.serialize import recompute_checksums
    from hemlp.runtime.artifacts import BatchReader
    from tests.fuzz.targets import JSON_TOKENS, mutate

    cm, x, d, other = served
    svc = _service(d, max_body_bytes=64 << 20, max_keys=100)
    sk, ek = cm.keygen()
    keys = ek.to_bytes(cm.context)
    status, _, body = svc.handle("POST", "/v1/keys", {}, _as_received(svc, "POST", "/v1/keys", {}, keys))
    assert status == 201 and json.loads(body)["key_id"] == json.loads(svc.handle("POST", "/v1/keys", {}, keys)[2])[
        "key_id"]
    key_id = json.loads(body)["key_id"]
    query = {"key": key_id}
    ct = cm.encrypt(x[:4], sk).to_bytes()
    received = _as_received(svc, "POST", "/v1/infer", query, ct, 1000)
    assert isinstance(received.watcher, BatchReader)          # keys loaded here: read as it arrives
    assert svc.handle("POST", "/v1/infer", query, received) == svc.handle("POST", "/v1/infer", query, ct)
    assert svc.receiver("POST", "/v1/infer", {"key": "0" * 32}, len(ct)).watcher is None    # unknown keys: no work
    o_sk, _ = other.keygen()
    rng = np.random.default_rng(11)
    bodies = [ct[:-1] + bytes([ct[-1] ^ 1]), ct[:-100], bytes(reversed(ct)), b"\0" * 1000,
              other.encrypt(x[:4, :16], o_sk).to_bytes(), cm.encrypt(x[:4], cm.keygen()[0]).to_bytes(),
              svc.handle("POST", "/v1/infer", query, ct)[2]]
    bodies += [recompute_checksums(mutate(ct, rng, JSON_TOKENS)) for _ in range(30)]
    for path in ("/v1/infer", "/v1/jobs"):
        for data in bodies:
            want = svc.handle("POST", path, query, data)
            got = svc.handle("POST", path, query, _as_received(svc, "POST", path, query, data, 777))
            if path == "/v1/jobs" and want[0] == 202:
                assert got[0] == 202
            else:
                assert got == want, (path, want[:2], got[:2])
    svc.close()


def test_client_keeps_its_connection_and_reopens_a_closed_one(served):
    """One connection per client thread for every request (keep-alive, also after a refusal); one dropped while
    idle is replaced on the next request, and the answers stay correct."""
    cm, x, d, _ = served
    with LocalServer(_service(d), port=0) as srv:
        with Client(srv.url, d / "client", allow_insecure=True) as client:
            y = client.infer(x[:4])
            conn = client._local.conn
            assert conn is not None and np.max(np.abs(y - cm.simulate(x[:4]))) < 2.0 ** -16
            client.infer(x[4:8])
            client.describe()
            assert client._local.conn is conn                  # the same connection throughout
            with pytest.raises(ServerError):
                client._request("POST", "/v1/infer?key=" + "0" * 32, b"junk")   # a 4xx keeps the connection
            assert client._local.conn is conn
            conn.sock.shutdown(socket.SHUT_RDWR)                     # dropped while idle
            assert np.max(np.abs(client.infer(x[4:8]) - cm.simulate(x[4:8]))) < 2.0 ** -16
            assert client._local.conn is not conn and client._local.conn is not None
        assert client._local.conn is None                           # closed with the client


def test_client_goes_through_an_environment_proxy(served, monkeypatch):
    """With an HTTP proxy in the environment for the server's host, the client sends through it (urllib's way, a
    connection per request), as before keep-alive: here the server itself, which takes absolute request URLs."""
    cm, x, d, _ = served
    with LocalServer(_service(d), port=0) as srv:
        for name in ("no_proxy", "NO_PROXY", "HTTP_PROXY"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("http_proxy", srv.url)
        client = Client(srv.url, d / "client", allow_insecure=True)
        assert client._via_proxy
        assert np.max(np.abs(client.infer(x[:4]) - cm.simulate(x[:4]))) < 2.0 ** -16
        with pytest.raises(ServerError) as e:
            client._request("POST", "/v1/infer?key=" + "0" * 32, b"junk")
        assert e.value.status == 404 and e.value.name == "UnknownKey"
        monkeypatch.setenv("no_proxy", "127.0.0.1")
        assert not Client(srv.url, d / "client", allow_insecure=True)._via_proxy
