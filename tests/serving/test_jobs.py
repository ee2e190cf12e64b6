"""hemlp serve's asynchronous jobs (POST /v1/jobs, GET /v1/jobs/ID[/result]): a job's result is /v1/infer's and an
in-process run's, bit for bit; a job not yet done answers 409, an unknown one 404, a full queue 503; a hostile body
is refused at submission with /v1/infer's answer and leaves no job; the store's bounds and leases; two services
sharing one store (the Ray Serve design) and Ray Serve itself with two replicas."""
import json
import threading
import time

import numpy as np
import pytest

from hemlp.runtime.artifacts import EncryptedBatch
from hemlp.serving import Client, ServerError
from hemlp.serving.http import LocalServer
from hemlp.serving.jobs import MAX_ATTEMPTS, MemoryJobStore
from hemlp.serving.service import MemoryKeyStore
from tests.serving.conftest import make_service

EMPTY = dict(queued=0, running=0, finished=0)


def _keys(svc, cm):
    sk, ek = cm.keygen()
    status, _, body = svc.handle("POST", "/v1/keys", {}, ek.to_bytes(cm.context))
    assert status == 201
    return sk, ek, json.loads(body)["key_id"]


def _until(pred, timeout=60.0):
    t0 = time.monotonic()
    while not pred():
        assert time.monotonic() - t0 < timeout, "timed out"
        time.sleep(0.01)


def test_job_round_trip_equals_infer_and_a_local_run(served):
    cm, x, d, _ = served
    svc = make_service(d)
    try:
        sk, ek, key_id = _keys(svc, cm)
        ct = cm.encrypt(x[:4], sk).to_bytes()
        status, ctype, body = svc.handle("POST", "/v1/jobs", {"key": key_id}, ct)
        assert (status, ctype) == (202, "application/json")
        reply = json.loads(body)
        job_id = reply["job_id"]
        assert reply["status"] == "queued" and len(job_id) >= 24        # secrets.token_urlsafe(18): 144 bits
        status, ctype, result = svc.handle("GET", f"/v1/jobs/{job_id}/result", {"wait": "60"}, b"")
        assert (status, ctype) == (200, "application/octet-stream")
        assert result == svc.handle("POST", "/v1/infer", {"key": key_id}, ct)[2]
        assert result == cm.run(EncryptedBatch.from_bytes(ct, cm), ek).to_bytes()
        # kept until fetched once: then 410, its status says so; unknown ids 404 on both routes
        st = json.loads(svc.handle("GET", f"/v1/jobs/{job_id}", {}, b"")[2])
        assert st == dict(job_id=job_id, status="done", fetched=True)
        status, _, body = svc.handle("GET", f"/v1/jobs/{job_id}/result", {}, b"")
        assert status == 410 and json.loads(body)["error"] == "ResultFetched"
        for path in ("/v1/jobs/nosuchjob", "/v1/jobs/nosuchjob/result", f"/v1/jobs/{job_id[:-1]}x"):
            status, _, body = svc.handle("GET", path, {}, b"")
            assert status == 404 and json.loads(body)["error"] == "UnknownJob", path
        for method, path, want in (("GET", "/v1/jobs", 405), ("POST", f"/v1/jobs/{job_id}", 405),
                                   ("GET", f"/v1/jobs/{job_id}/result", 400)):
            status, _, body = svc.handle(method, path, {"wait": "soon"}, b"")
            assert status == want, (method, path, body)
        # the client over HTTP: submit / result, and infer_many (10 samples at batch size 4: three jobs)
        with LocalServer(svc, port=0) as srv:
            client = Client(srv.url, d / "client", allow_insecure=True)
            assert client.server["jobs"] == dict(max_queued=32, max_finished=128)
            job = client.submit(x[4:8])
            assert client.status(job)["status"] in ("queued", "running", "done")
            y = client.result(job, timeout=60)
            assert np.max(np.abs(y - cm.simulate(x[4:8]))) < 2.0 ** -16
            assert client.status(job)["status"] == "done"
            y = client.infer_many(x[:10], progress=False)
            assert y.shape == (10, 3) and np.max(np.abs(y - cm.simulate(x[:10]))) < 2.0 ** -16
            y = client.infer(x[:6])                     # more than one batch: through jobs as well
            assert np.max(np.abs(y - cm.simulate(x[:6]))) < 2.0 ** -16
            with pytest.raises(ServerError) as e:
                client.result("nosuchjob")
            assert e.value.status == 404 and e.value.name == "UnknownJob"
    finally:
        svc.close()


def test_not_done_is_409_and_a_full_queue_503(served):
    """The evaluation lock held: the first job runs (waits on it), the second waits in the queue of one, a third is
    refused with 503 Busy; released, both finish."""
    cm, x, d, _ = served
    svc = make_service(d, max_queued_jobs=1)
    try:
        sk, _, key_id = _keys(svc, cm)
        cts = [cm.encrypt(x[4 * i: 4 * i + 4], sk).to_bytes() for i in range(3)]
        with svc.eval_lock:
            first = json.loads(svc.handle("POST", "/v1/jobs", {"key": key_id}, cts[0])[2])["job_id"]
            _until(lambda: svc.jobs.status(first)["status"] == "running")
            for query in ({}, {"wait": "0.2"}):
                status, _, body = svc.handle("GET", f"/v1/jobs/{first}/result", query, b"")
                assert status == 409 and json.loads(body)["error"] == "JobNotDone", body
            status, _, body = svc.handle("POST", "/v1/jobs", {"key": key_id}, cts[1])
            assert status == 202
            second = json.loads(body)["job_id"]
            st = json.loads(svc.handle("GET", f"/v1/jobs/{second}", {}, b"")[2])
            assert st == dict(job_id=second, status="queued", position=1)
            status, _, body = svc.handle("POST", "/v1/jobs", {"key": key_id}, cts[2])
            err = json.loads(body)
            assert status == 503 and err["error"] == "Busy" and "retry later" in err["message"]
            assert svc.jobs.counts() == dict(queued=1, running=1, finished=0)
        for job_id, ct in ((first, cts[0]), (second, cts[1])):
            status, _, body = svc.handle("GET", f"/v1/jobs/{job_id}/result", {"wait": "60"}, b"")
            assert status == 200 and body == svc.handle("POST", "/v1/infer", {"key": key_id}, ct)[2]
    finally:
        svc.close()


def test_hostile_job_bodies_get_the_answer_of_infer_and_leave_no_job(served):
    cm, x, d, other = served
    svc = make_service(d)
    sk, _, key_id = _keys(svc, cm)
    ct = cm.encrypt(x[:4], sk).to_bytes()
    result = svc.handle("POST", "/v1/infer", {"key": key_id}, ct)[2]
    o_sk, _ = other.keygen()
    bodies = [({}, ct), ({"key": "0" * 32}, ct), ({"key": key_id}, b""), ({"key": key_id}, ct[:-100]),
              ({"key": key_id}, bytes(reversed(ct))), ({"key": key_id}, other.encrypt(x[:4], o_sk).to_bytes()),
              ({"key": key_id}, result), ({"key": key_id}, cm.encrypt(x[:4], cm.keygen()[0]).to_bytes()),
              ({"key": key_id}, b"\x00" * 1000)]
    for query, body in bodies:
        want = svc.handle("POST", "/v1/infer", query, body)
        got = svc.handle("POST", "/v1/jobs", query, body)
        assert 400 <= got[0] < 500 and got[0] == want[0], (got, want[:2])
        assert json.loads(got[2])["error"] == json.loads(want[2])["error"]
    assert svc.jobs.counts() == EMPTY


def test_job_store_bounds_retention_and_leases():
    store = MemoryJobStore(max_queued=2, max_finished=2)
    ids = [store.submit("k", b"body%d" % i) for i in range(2)]
    assert store.submit("k", b"full") is None and len(set(ids)) == 2
    assert [store.status(j)["position"] for j in ids] == [1, 2]
    for j in ids:
        assert store.claim("w", 0)[0] == j
        store.finish(j, "w", result=b"out-" + j.encode())
    assert store.claim("w", 0) is None
    third = store.submit("k", b"body")
    store.claim("w", 0)
    store.finish(third, "w", error=dict(status=404, error="UnknownKey", message="evicted"))
    assert store.status(ids[0]) is None                 # the oldest finished job evicted (max_finished=2)
    assert store.take_result(ids[1]) == (dict(job_id=ids[1], status="done", fetched=True), b"out-" + ids[1].encode())
    assert store.take_result(ids[1])[1] is None         # handed out once
    assert store.status(third) == dict(job_id=third, status="failed", error="UnknownKey", message="evicted",
                                       http_status=404)
    # a worker silent past its lease loses its job: queued again once, then failed
    store = MemoryJobStore(lease_s=0.2)
    job = store.submit("k", b"body")
    for attempt in range(1, MAX_ATTEMPTS + 1):
        assert store.claim(f"w{attempt}", 0)[0] == job and store.status(job)["status"] == "running"
        time.sleep(0.3)
    st = store.wait(job, 1.0)
    assert st["status"] == "failed" and st["error"] == "WorkerLost" and st["http_status"] == 503
    store.finish(job, "w1", result=b"late")             # a lost worker's late answer changes nothing
    assert store.take_result(job)[1] is None
    # a heartbeat keeps the lease; a job requeued after a loss keeps its place ahead of later jobs
    store = MemoryJobStore(lease_s=0.3)
    a = store.submit("k", b"a")
    store.claim("w1", 0)
    b = store.submit("k", b"b")
    for _ in range(4):
        time.sleep(0.1)
        store.heartbeat("w1")
    assert store.status(a)["status"] == "running"
    time.sleep(0.4)
    assert store.status(a) == dict(job_id=a, status="queued", position=1) and store.status(b)["position"] == 2


def test_two_services_share_one_store(served):
    """The Ray Serve design without Ray: replicas share the key store and the job store, so a job submitted to one
    is run by whichever is free and polled and fetched through the other."""
    cm, x, d, _ = served
    keys, jobs = MemoryKeyStore(), MemoryJobStore()
    a = make_service(d, key_store=keys, job_store=jobs)
    b = make_service(d, key_store=keys, job_store=jobs)
    try:
        sk, _, key_id = _keys(a, cm)
        b.start_jobs()
        cts = [cm.encrypt(x[4 * i: 4 * i + 4], sk).to_bytes() for i in range(2)]
        answers = {}
        with a.eval_lock:        # a's worker takes one job and waits on its lock: b's worker runs the other
            job_ids = [json.loads(a.handle("POST", "/v1/jobs", {"key": key_id}, ct)[2])["job_id"] for ct in cts]
            _until(lambda: jobs.counts()["finished"] == 1)
            done = [i for i, j in enumerate(job_ids)
                    if json.loads(b.handle("GET", f"/v1/jobs/{j}", {}, b"")[2])["status"] == "done"]
            assert len(done) == 1
            answers[done[0]] = b.handle("GET", f"/v1/jobs/{job_ids[done[0]]}/result", {}, b"")
        answers[1 - done[0]] = b.handle("GET", f"/v1/jobs/{job_ids[1 - done[0]]}/result", {"wait": "60"}, b"")
        for i, (status, _, body) in answers.items():
            assert status == 200 and body == b.handle("POST", "/v1/infer", {"key": key_id}, cts[i])[2]
    finally:
        a.close()
        b.close()


def test_ray_serve_jobs_on_two_replicas(served, ray_serve_url):
    """Jobs over HTTP through Ray Serve's proxy: each request (submit, polls, fetch) may land on either replica."""
    cm, x, d, _ = served
    client = Client(ray_serve_url, d / "client", allow_insecure=True)
    y = client.infer_many(x[:24], progress=False)        # six jobs in flight at once
    assert np.max(np.abs(y - cm.simulate(x[:24]))) < 2.0 ** -16
    results = {}

    def one(i):
        job = client.submit(x[4 * i: 4 * i + 4])
        results[i] = (client.status(job)["status"], client.result(job, timeout=120))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert sorted(results) == [0, 1, 2, 3]
    for i, (status, y) in results.items():
        assert status in ("queued", "running", "done")
        assert np.max(np.abs(y - cm.simulate(x[4 * i: 4 * i + 4]))) < 2.0 ** -16
    with pytest.raises(ServerError) as e:
        client.result("nosuchjob")
    assert e.value.status == 404 and e.value.name == "UnknownJob"


def test_a_job_goes_back_to_its_submitter_without_its_body():
    """The worker of the process that submitted a job (which keeps the batch it decoded) claims it without the
    body; any other worker gets the body; body() gives it until the job ends."""
    store = MemoryJobStore()
    mine = store.submit("k", b"one", "w1")
    theirs = store.submit("k", b"two", "w1")
    assert store.claim("w1", 0) == (mine, "k", None) and store.body(mine) == b"one"
    assert store.claim("w2", 0) == (theirs, "k", b"two")
    store.finish(mine, "w1", result=b"r")
    assert store.body(mine) is None and store.body("nosuchjob") is None


def test_the_shared_store_keeps_its_own_copy_of_a_body():
    """The job-store actor's store copies the array it is handed (a view of Ray's object store, which belongs to
    the replica that sent it)."""
    from hemlp.serving.ray_serve import SharedJobStore

    src = np.frombuffer(b"encrypted batch", np.uint8)
    store = SharedJobStore()
    job = store.submit("k", src, "w1")
    kept = store.body(job)
    assert bytes(kept) == b"encrypted batch" and not np.shares_memory(kept, src)


def test_jobs_beyond_the_kept_batches_read_their_bodies(served):
    """More jobs queued than a process keeps decoded (service.PREPARED_JOBS): the first run from the batches
    decoded at submission, the rest from the store's bytes; every result is /v1/infer's, bit for bit."""
    from hemlp.serving.service import PREPARED_JOBS

    cm, x, d, _ = served
    svc = make_service(d)
    try:
        sk, _, key_id = _keys(svc, cm)
        cts = [cm.encrypt(x[(4 * i) % 96: (4 * i) % 96 + 4], sk).to_bytes() for i in range(PREPARED_JOBS + 3)]
        with svc.eval_lock:        # the worker waits: every job is queued (or held) before any runs
            job_ids = [json.loads(svc.handle("POST", "/v1/jobs", {"key": key_id}, ct)[2])["job_id"] for ct in cts]
        for ct, job_id in zip(cts, job_ids):
            status, _, body = svc.handle("GET", f"/v1/jobs/{job_id}/result", {"wait": "60"}, b"")
            assert status == 200 and body == svc.handle("POST", "/v1/infer", {"key": key_id}, ct)[2]
    finally:
        svc.close()
