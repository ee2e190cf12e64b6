"""Serving overhead and throughput of ``hemlp serve`` on loopback.

    python -m hemlp.bench serve [--clients 1,4,16] [--ray-replicas 1,2] [--json bench/serve_N14.json]

The demo's MLP (hemlp.models "mlp", 784 inputs, 10 classes, seeded weights; the serving path does not depend on the
weights) compiled for batch size 1 at the default 128-bit preset, served from a fresh server: the standard library's
threading server, then Ray Serve with each ``--ray-replicas`` count, measured through Ray's HTTP proxy and through
the replicas' direct port (hemlp.serving.ray_serve: the same replicas, without the proxy). Each client (a thread of this process) keygens
and uploads its evaluation keys once, untimed, then sends single-image requests back to back, through both APIs:
``infer`` (POST /v1/infer) and ``jobs`` (POST /v1/jobs, then a long poll of the result). A level of n clients sends
``--requests`` requests per client, at most ``--level-requests`` in all (16 clients: 2 each). Reported per level:
requests per second over the level, and the p50 / p99 latency of one request as the client sees it (encrypt, send,
evaluate, receive, decrypt).

The baseline is the same request in process (encrypt, run, decrypt; no HTTP), ``--local-block`` of them before each
level and after the last, so that the machine's noise (other processes, clock changes) reaches both alike. The serving
overhead of a level is a ratio: its p50 over the in-process p50 and its p99 over the in-process p99 (with several
clients it includes the queueing behind the other clients' requests: one process evaluates one request at a time).

Throughput against replicas (``--replay-clients``): a load generator replays requests encrypted once (two per client
identity, built before any level), so that the clients, which share the machine's cores with the server, cost little
CPU: each of n threads sends its bodies back to back on one kept-alive connection (``--replay-requests`` in all) and
compares every answer with the in-process run of the same ciphertext, byte for byte. Reported per level: requests
per second, p50 / p99, and the CPU seconds per request of the server (this process and the processes it started:
the threading server's threads, or Ray's processes, replicas and proxy included; the replay threads' own CPU
subtracted) and of the replaying clients, with the machine's CPU use over the level (every process: a busy machine
shows). Requests per second of server CPU is throughput per core: what replicas on idle cores would add.
"""
from __future__ import annotations

import http.client
import os
import shutil
import statistics
import tempfile
import threading
import time
import warnings
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np

from hemlp.apps.bench import report

HELP = ("hemlp serve on loopback (threading server, Ray Serve replicas): requests/s and p50/p99 latency at 1..16 "
        "clients, through /v1/infer and jobs, as a ratio to the same request in process")


def add_arguments(p) -> None:
    p.add_argument("--clients", default="1,4,16", help="comma-separated concurrent client counts")
    p.add_argument("--requests", type=int, default=8, help="requests per client at each level")
    p.add_argument("--level-requests", type=int, default=32,
                   help="requests of one level at most (per client: at least 2)")
    p.add_argument("--apis", default="infer,jobs", help="the APIs measured: infer (POST /v1/infer), jobs")
    p.add_argument("--ray-replicas", default="",
                   help="comma-separated Ray Serve replica counts to measure after the threading server (e.g. 1,2)")
    p.add_argument("--local-block", type=int, default=2, help="in-process requests before each level and at the end")
    p.add_argument("--replay-clients", default="",
                   help="comma-separated client counts of the replay load test (requests encrypted once, replayed; "
                        "e.g. 1,2,4): throughput and CPU per request against replicas")
    p.add_argument("--replay-requests", type=int, default=24, help="requests of one replay level")
    p.add_argument("--threads", type=int, default=1,
                   help="native threads per evaluation: in process, in the threading server and in each replica")
    p.add_argument("--preset", default=None, help="CKKS preset (default: the compiler's 128-bit choice)")
    p.add_argument("--json", default=None)


def _model(preset):
    import torch

    import hemlp
    from hemlp.models import build

    torch.manual_seed(0)
    model = build("mlp", (1, 28, 28), 10, seed=0).eval()
    x = np.random.default_rng(0).uniform(0, 1, (256, 1, 28, 28))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kw = dict(preset=preset, allow_insecure=preset.startswith("test-")) if preset else {}
        return hemlp.compile(model, x[:1], calibration=x, batch_size=1, **kw), x


def _percentile(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


def _ints(text: str) -> list[int]:
    return [int(c) for c in text.split(",") if c.strip()]


class _Server:
    """One server under test: the threading server in this process, or Ray Serve with ``replicas`` replicas."""

    def __init__(self, kind: str, replicas: int, model_dir: Path, max_keys: int, insecure: bool, threads: int):
        self.kind, self.replicas = kind, replicas
        if kind == "threading":
            from hemlp.serving import ModelService
            from hemlp.serving.http import LocalServer

            self.service = ModelService(model_dir, insecure, max_keys=max_keys, threads=threads)
            self.srv = LocalServer(self.service, port=0).start()
            self.urls = {None: self.srv.url}
        else:
            import socket

            from hemlp.serving.ray_serve import serve, start_ray

            start_ray()                         # a local Ray, its workers (the replicas) at normal priority
            ports = []
            for _ in range(2):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", 0))
                    ports.append(s.getsockname()[1])
            url = serve(model_dir, port=ports[0], replicas=replicas, allow_insecure=insecure, max_keys=max_keys,
                        blocking=False, threads=threads, direct_port=ports[1])
            # the same replicas through Ray's HTTP proxy, and through their own (direct) port
            self.urls = {"proxy": url, "direct": f"http://127.0.0.1:{ports[1]}"}

    def close(self) -> None:
        if self.kind == "threading":
            self.srv.close()
            self.service.close()
        else:
            from ray import serve as ray_serve

            ray_serve.shutdown()


def _level(clients, api: str, per_client: int, x, paired=None) -> tuple[list, float]:
    """Latencies of every request of one level, and its wall-clock seconds. paired (one client): a function of a
    sample index run after each request, untimed here (the in-process request of the same sample)."""
    lat: list = []
    lock = threading.Lock()

    def work(c, k):
        for j in range(per_client):
            i = (k * per_client + j) % len(x)
            t0 = time.perf_counter()
            if api == "infer":
                c.infer(x[i:i + 1])
            else:
                c.result(c.submit(x[i:i + 1]))
            with lock:
                lat.append(time.perf_counter() - t0)
            if paired is not None:
                paired(i)

    threads = [threading.Thread(target=work, args=(c, k)) for k, c in enumerate(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return lat, time.perf_counter() - t0


def _cpu_ticks(pid) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])         # utime + stime


def _tree_cpu_s() -> float:
    """CPU seconds of this process and of every process it started (a local Ray's processes), Linux /proc."""
    children: dict = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(entry))
    total, todo = 0, [os.getpid()]
    while todo:
        pid = todo.pop()
        try:
            total += _cpu_ticks(pid)
        except OSError:
            continue
        todo += children.get(pid, [])
    return total / os.sysconf("SC_CLK_TCK")


def _machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot (/proc/stat)."""
    with open("/proc/stat") as f:
        v = [int(t) for t in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return (sum(v) - idle) / os.sysconf("SC_CLK_TCK"), sum(v) / os.sysconf("SC_CLK_TCK")


def _replay_level(url: str, bodies: list, n: int, total: int) -> dict:
    """n threads, each replaying a client identity's pre-encrypted (key id, body, expected result) on one kept-alive
    connection (thread k: identity k modulo their number), ``total`` requests in all; every answer compared with the
    in-process result."""
    parts = urlsplit(url)
    per = max(1, total // n)
    lat, client_cpu, bad = [], [0.0], []
    lock = threading.Lock()

    def work(k):
        key_id, reqs = bodies[k % len(bodies)]          # more replaying threads than identities: shared
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=600)
        c0 = time.thread_time()
        mine = []
        for j in range(per):
            body, expected = reqs[j % len(reqs)]
            t0 = time.perf_counter()
            conn.request("POST", f"/v1/infer?key={key_id}", body=body,
                         headers={"Content-Type": "application/octet-stream", "Content-Length": str(len(body))})
            r = conn.getresponse()
            data = r.read()
            mine.append(time.perf_counter() - t0)
            if r.status != 200 or data != expected:
                with lock:
                    bad.append((r.status, data[:200]))
        conn.close()
        with lock:
            lat.extend(mine)
            client_cpu[0] += time.thread_time() - c0

    threads = [threading.Thread(target=work, args=(k,)) for k in range(n)]
    cpu0, (busy0, all0) = _tree_cpu_s(), _machine_busy()
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    cpu1, (busy1, all1) = _tree_cpu_s(), _machine_busy()
    if bad:
        raise RuntimeError(f"{len(bad)} replayed requests did not answer the in-process result: {bad[0]}")
    server_cpu = cpu1 - cpu0 - client_cpu[0]
    return dict(clients=n, requests=len(lat), requests_per_second=len(lat) / wall, p50_s=_percentile(lat, 0.5),
                p99_s=_percentile(lat, 0.99), wall_s=wall, server_cpu_s_per_request=server_cpu / len(lat),
                client_cpu_s_per_request=client_cpu[0] / len(lat), server_cores_busy=server_cpu / wall,
                requests_per_server_cpu_s=len(lat) / server_cpu, machine_cpu_busy=(busy1 - busy0) / (all1 - all0),
                verified=len(lat))


def _stages(cm, client_model, x, sk, ek, repeats: int = 7) -> dict:
    """CPU seconds (this process, all its threads; median of ``repeats``) of each stage of one request, measured
    alone: what the client and a server do in process, and what serving adds (the body's SHA-256, once on each
    side; the server's parse: its SHA-256 and the import of the ciphertexts, which expands their seeded halves; the
    loopback transfer, both sides' copies)."""
    import hashlib
    import socket

    from hemlp.runtime.artifacts import EncryptedBatch

    def cpu(fn):
        times = []
        for _ in range(repeats):
            t0 = time.process_time()
            fn()
            times.append(time.process_time() - t0)
        return statistics.median(times)

    ct = client_model.encrypt(x[:1], sk)
    body = ct.to_bytes()
    parsed = EncryptedBatch.from_bytes(body, cm)
    out = cm.run(parsed, ek)
    result = out.to_bytes()

    def loopback():
        a, b = socket.socketpair()
        buf = memoryview(bytearray(len(body)))
        reader = threading.Thread(target=_drain, args=(b, buf))
        reader.start()
        a.sendall(body)
        reader.join()
        a.close()
        b.close()

    return dict(upload_bytes=len(body), result_bytes=len(result), repeats=repeats,
                encrypt_s=cpu(lambda: client_model.encrypt(x[:1], sk)),
                body_sha256_s=cpu(lambda: hashlib.sha256(body).digest()),
                to_stream_s=cpu(lambda: ct.to_stream()),
                parse_s=cpu(lambda: EncryptedBatch.from_bytes(body, cm)),
                run_s=cpu(lambda: cm.run(parsed, ek)),
                loopback_s=cpu(loopback),
                result_to_bytes_s=cpu(out.to_bytes),
                result_parse_s=cpu(lambda: EncryptedBatch.from_bytes(result, client_model)),
                decrypt_s=cpu(lambda: client_model.decrypt(out, sk)))


def _drain(sock, buf) -> None:
    got = 0
    while got < len(buf):
        n = sock.recv_into(buf[got:])
        if not n:
            break
        got += n


def main(args) -> int:
    d = Path(tempfile.mkdtemp(prefix="hemlp-serve-bench-"))      # the model's server and client folders
    try:
        return measure(args, d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def measure(args, d: Path) -> int:
    import hemlp
    from hemlp.serving import Client

    busy = report.busy_warning()
    hemlp.set_num_threads(args.threads)
    cm, x = _model(args.preset)
    insecure = cm.plan.info["security"] == "INSECURE"
    cm.save(d / "server")
    cm.save(d / "client", client=True)
    levels = _ints(args.clients)
    apis = [a for a in args.apis.split(",") if a]
    if not set(apis) <= {"infer", "jobs"}:
        raise SystemExit(f"--apis: infer and/or jobs, got {args.apis!r}")
    servers = [("threading", 1)] + [("ray-serve", r) for r in _ints(args.ray_replicas)]
    # one key pair per client identity, made once (untimed) and uploaded to each server
    client_model = hemlp.load(d / "client", allow_insecure=insecure)
    t0 = time.perf_counter()
    # the replay's threads share the identities beyond 4 (each identity's keys are tens of MB on every server)
    identities = max(levels + [min(4, n) for n in _ints(args.replay_clients)])
    keys = [client_model.keygen(verbose=False) for _ in range(identities)]
    keygen_s = (time.perf_counter() - t0) / len(keys)
    sk, ek = keys[0]
    local: list = []

    def local_one(i):
        t0 = time.perf_counter()
        cm.decrypt(cm.run(cm.encrypt(x[i:i + 1], sk), ek), sk)
        return time.perf_counter() - t0

    def local_block():
        block = [local_one(i) for i in range(args.local_block)]
        local.extend(block)
        return block

    local_block()                           # warm: the first in-process request encodes the weights
    local.clear()
    stages = _stages(cm, client_model, x, sk, ek)
    replay_levels = _ints(args.replay_clients)
    replay, run_only = [], []
    if replay_levels:
        from hemlp.runtime.artifacts import EncryptedBatch

        # two requests per client identity, encrypted once; the result each must give: the in-process run's bytes
        for k, (sk_k, ek_k) in enumerate(keys[:min(len(keys), max(replay_levels))]):
            reqs = []
            for j in range(2):
                body = client_model.encrypt(x[2 * k + j:2 * k + j + 1], sk_k).to_bytes()
                t0 = time.perf_counter()
                out = cm.run(EncryptedBatch.from_bytes(body, cm), ek_k)
                run_only.append(time.perf_counter() - t0)
                reqs.append((body, out.to_bytes()))
            replay.append(reqs)
    results = []
    try:
        for kind, replicas in servers:
            server = _Server(kind, replicas, d / "server", max(16, 2 * identities), insecure, args.threads)
            try:
                for ingress, url in server.urls.items():
                    clients = [Client(url, client_model, allow_insecure=insecure, keys=k) for k in keys]
                    for c in clients:
                        c.connect()             # key upload, untimed
                    # warm, untimed: a serving process loads a client's keys on its first request from that client
                    _level(clients, "infer", 2, x)
                    rows = []
                    for n in replay_levels:
                        lv = _replay_level(url, [(c.key_id, reqs) for c, reqs in zip(clients, replay)], n,
                                           args.replay_requests)
                        rows.append(dict(api="replay", **lv))
                        print(kind, replicas, ingress or "", rows[-1], flush=True)
                    for api in apis:
                        for n in levels:
                            before = local_block()
                            per_client = max(2, min(args.requests, args.level_requests // n))
                            # one client: each request followed by the same request in process, the pair's
                            # ratio taken under the same load (the machine's load drifts over a level)
                            pairs: list = []
                            paired = None if n > 1 else (lambda i: pairs.append(local_one(i)))
                            lat, wall = _level(clients[:n], api, per_client, x, paired)
                            row = dict(api=api, clients=n, requests=len(lat),
                                       requests_per_second=len(lat) / (sum(lat) if pairs else wall),
                                       p50_s=_percentile(lat, 0.5), p99_s=_percentile(lat, 0.99), samples=lat,
                                       in_process_before_s=before)
                            if pairs:
                                row.update(in_process_paired_s=pairs, overhead_paired_p50=statistics.median(
                                    [a / b for a, b in zip(lat, pairs)]))
                            rows.append(row)
                            print(kind, replicas, ingress or "", {k: v for k, v in rows[-1].items()
                                                                  if not isinstance(v, list)}, flush=True)
                    native = clients[0].describe().get("native_threads")
                    for c in clients:
                        c.close()
                    results.append(dict(server=kind, replicas=replicas, server_native_threads=native, rows=rows,
                                        **({} if ingress is None else dict(ingress=ingress))))
            finally:
                server.close()
        local_block()
    finally:
        if any(kind == "ray-serve" for kind, _ in servers):
            import ray

            ray.shutdown()
    p50, p99 = _percentile(local, 0.5), _percentile(local, 0.99)
    for s in results:
        for r in s["rows"]:
            if r["api"] != "replay":
                r["overhead_p50"], r["overhead_p99"] = r["p50_s"] / p50, r["p99_s"] / p99
    payload = dict(
        measured=True, command="python -m hemlp.bench serve " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v not in (None, "") and k != "json"),
        preset=cm.preset, security=cm.plan.info["security"], layout=cm.layout, batch_size=1,
        native_threads=args.threads,
        keygen_s=keygen_s, eval_key_bytes=len(ek.to_bytes(cm.context)),
        in_process=dict(requests=len(local), median_s=statistics.median(local), p50_s=p50, p99_s=p99, samples=local),
        stages_cpu=stages,
        **(dict(in_process_run=dict(requests=len(run_only), median_s=statistics.median(run_only),
                                    samples=run_only)) if run_only else {}),
        servers=results, notes=[
            "latency: encrypt + send + evaluate + receive + decrypt as the client sees it, loopback; clients are "
            "threads of the benchmark process, so their encryption and decryption share the machine's cores with "
            "the servers; a serving process evaluates one request at a time (threading server: this process; Ray "
            "Serve: one per replica, each an actor of --threads CPUs), with --threads native threads",
            "Ray Serve: ingress 'proxy' = through Ray's HTTP proxy (the body reaches the replica through Ray); "
            "'direct' = the same replicas' own port (hemlp serve --direct-port: shared by the node's replicas, "
            "the kernel spreading connections over them)",
            "overhead_p50 / overhead_p99: the level's p50 / p99 over the in-process p50 / p99 (same request, no "
            "HTTP), the in-process requests interleaved with the levels",
            "stages_cpu: each stage of one request alone, CPU seconds of this process (all threads), median of "
            "its repeats; serving adds body_sha256_s on each side (client and server), parse_s (the server's "
            "SHA-256 and import), loopback_s, result_to_bytes_s and result_parse_s to what the in-process request "
            "does (encrypt_s, run_s, decrypt_s)",
            "one client: each request is followed by the same sample's request in process "
            "(in_process_paired_s); overhead_paired_p50 is the median of the pairs' ratios (both under the same "
            "load), requests_per_second the served requests over their own seconds",
            *(["api 'replay': requests encrypted once and replayed by the benchmark's threads on kept-alive "
               "connections, every answer equal to the in-process run of the same ciphertext byte for byte "
               "('verified'); server_cpu_s_per_request: CPU of this process and the processes it started (Ray's "
               "included) minus the replaying threads' own, per request; machine_cpu_busy: the whole machine's CPU "
               "use over the level, every process counted (1.0 = all cores); in_process_run: run() alone on the "
               "replayed ciphertexts, no encryption or decryption"] if replay_levels else [])])
    report.publish(payload, "serve", args.json, report.machine_info(), busy, _print)
    return 0


def _print(payload) -> None:
    rows = []
    for s in payload["servers"]:
        name = "threading" if s["server"] == "threading" else f"Ray Serve x{s['replicas']}" + (
            ", direct" if s.get("ingress") == "direct" else "")
        for r in s["rows"]:
            rows.append([name, r["api"], r["clients"], r["requests"], f"{r['requests_per_second']:.2f}",
                         f"{r['p50_s'] * 1e3:.0f}", f"{r['p99_s'] * 1e3:.0f}",
                         f"{r['overhead_p50']:.2f}x / {r['overhead_p99']:.2f}x" + (
                             f" (paired {r['overhead_paired_p50']:.2f}x)" if "overhead_paired_p50" in r else "")
                         if "overhead_p50" in r else
                         f"server {r['server_cpu_s_per_request'] * 1e3:.0f} ms CPU/req, "
                         f"machine {r['machine_cpu_busy'] * 100:.0f} %"])
    ip = payload["in_process"]
    report.table(["server", "api", "clients", "requests", "req/s", "p50 ms", "p99 ms", "vs in-process p50 / p99"],
                 rows, title=f"hemlp serve ({payload['preset']}, {payload['security']}, loopback); in process: "
                             f"p50 {ip['p50_s'] * 1e3:.0f} ms, p99 {ip['p99_s'] * 1e3:.0f} ms over {ip['requests']}")
    for note in payload["notes"]:
        print("note:", note)
