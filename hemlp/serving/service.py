"""The encrypted-inference service behind ``hemlp serve``: one compiled model (the server artefact), evaluation keys
uploaded once per client and named by their content hash, ciphertexts in, ciphertexts out.

``ModelService.handle(method, path, query, body)`` is the whole HTTP API, independent of the server that carries it
(Ray Serve in hemlp.serving.ray_serve, or the standard library's threading HTTP server in hemlp.serving.http); the
body is bytes, or the serialize.Received those servers make of it (hashed as it arrived: the container's checksum
check compares that digest with the seal, and the key id is that SHA-256, without a second pass over the bytes):

    GET  /v1/health            {"status": "ok", "model_id": ...}
    GET  /v1/model             the model's public description: shapes, batch size, preset and security, layout,
                               expected key / ciphertext sizes, the body limit
    POST /v1/keys              body: the evaluation keys (``EvalKeys.to_bytes``) -> 201 {"key_id": sha256 of the body}
    POST /v1/infer?key=ID      body: an encrypted input batch (``EncryptedBatch.to_bytes``) -> 200, the encrypted
                               result batch (application/octet-stream)
    POST /v1/jobs?key=ID       body: as /v1/infer, checked as /v1/infer checks it -> 202 {"job_id", "status": "queued"}
                               (503 Busy: the queue is full, retry later); hemlp.serving.jobs runs it
    GET  /v1/jobs/ID           {"job_id", "status": queued (with "position") | running | done | failed (with the
                               "error", "message" and "http_status" /v1/infer would have answered)}
    GET  /v1/jobs/ID/result    [?wait=S: hold the request up to S seconds (at most 30) until the job ends] -> 200,
                               the encrypted result, once; 409 JobNotDone before, 410 ResultFetched after, 404
                               UnknownJob (never submitted, or evicted), a failed job's own error

Every failure is a typed JSON error ``{"error": <exception name>, "message": ...}`` with a 4xx status that says
whose fault it is (400 a malformed or corrupted body, 404 an unknown key id, job id or route, 405 a method, 409 keys
or ciphertexts of another model or key pair, 413 a body over the limit), or 503 Busy for a full job queue; nothing
else happens: the keys, the jobs and the model stay as they were, and no traceback or secret leaves the server (it
holds none: the client keeps its secret key).
"""
from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from pathlib import Path

from hemlp.errors import (ClientArtefactError, ContextMismatchError, EncodingError, HemlpError, KeyMismatchError,
                          LevelError, MissingKeyError, ParameterError, ScaleMismatchError, SerializationError,
                          ShapeError)
from hemlp.serving.jobs import DEFAULT_MAX_FINISHED_JOBS, DEFAULT_MAX_QUEUED_JOBS, JobWorker, MemoryJobStore
from hemlp.threads import get_num_threads

__all__ = ["ModelService", "MemoryKeyStore", "HttpError", "error_answer", "DEFAULT_MAX_BODY_BYTES", "DEFAULT_MAX_KEYS",
           "MAX_WAIT_S"]

#: the largest request body accepted (evaluation keys of a bootstrapped N = 2^16 plan are several GiB: raise it there)
DEFAULT_MAX_BODY_BYTES = 1 << 30
#: evaluation-key sets kept loaded, least recently used out first
DEFAULT_MAX_KEYS = 8

#: exception type -> HTTP status: the client's fault, each with its own code
STATUS = ((KeyMismatchError, 409), (MissingKeyError, 409), (ContextMismatchError, 409),
          (SerializationError, 400), (ShapeError, 400), (EncodingError, 400), (ParameterError, 400),
          (LevelError, 400), (ScaleMismatchError, 400))
#: the longest a GET /v1/jobs/ID/result?wait=S holds its request (a long poll; the client asks again after)
MAX_WAIT_S = 30.0
#: decoded input batches of submitted jobs a process keeps for its own worker (the oldest out first when full):
#: a job run where it was submitted is not fetched, hashed and imported a second time
PREPARED_JOBS = 4
#: ... and their bodies' bytes at most (an imported batch takes about twice its seeded upload)
PREPARED_BYTES = 256 << 20
JOB_PATH = re.compile(r"/v1/jobs/([^/]{1,200})(/result)?")


class HttpError(HemlpError):
    """A request the service refuses, with its HTTP status."""

    def __init__(self, status: int, message: str, name: str | None = None):
        super().__init__(message)
        self.status, self.name = int(status), name or type(self).__name__


class MemoryKeyStore:
    """Evaluation keys (serialised, or loaded) by key id, in this process (bounded: least recently used out first)."""

    def __init__(self, max_keys: int = DEFAULT_MAX_KEYS):
        self.max_keys = int(max_keys)
        self._keys: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def put(self, key_id: str, data: bytes) -> None:
        with self._lock:
            self._keys[key_id] = data
            self._keys.move_to_end(key_id)
            while len(self._keys) > self.max_keys:
                self._keys.popitem(last=False)

    def get(self, key_id: str):
        with self._lock:
            data = self._keys.get(key_id)
            if data is not None:
                self._keys.move_to_end(key_id)
            return data


def _json(status: int, obj) -> tuple[int, str, bytes]:
    return status, "application/json", json.dumps(obj).encode()


def error_answer(e: Exception) -> dict:
    """The typed answer to a failed request: {"status", "error", "message"}; a failure that is not hemlp's own
    refusal is a generic 500 (no traceback or internal detail leaves the server)."""
    if isinstance(e, HttpError):
        return dict(status=e.status, error=e.name, message=str(e))
    if isinstance(e, HemlpError):
        status = next((code for cls, code in STATUS if isinstance(e, cls)), 400)
        return dict(status=status, error=type(e).__name__, message=str(e))
    return dict(status=500, error="InternalError", message=f"the server failed on this request ({type(e).__name__}); "
                                                           "see its log")


class ModelService:
    """One compiled model served over the API above. ``key_store``: where uploaded keys live (default: this
    process; hemlp.serving.ray_serve shares one store among replicas); ``job_store``: where jobs wait and finish
    (default: a MemoryJobStore of ``max_queued_jobs`` / ``max_finished_jobs`` in this process; Ray Serve shares one).
    The job worker thread starts with the first job (or ``start_jobs()``); ``close()`` stops it. ``threads``: native
    threads per evaluation (None: the native default of the thread that evaluates: every core, or a Ray actor's
    CPUs; the count is per OS thread, so set_num_threads in the thread that built the service does not reach the
    server's request and job threads)."""

    def __init__(self, model_dir, allow_insecure: bool = False, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                 max_keys: int = DEFAULT_MAX_KEYS, key_store=None, job_store=None,
                 max_queued_jobs: int = DEFAULT_MAX_QUEUED_JOBS, max_finished_jobs: int = DEFAULT_MAX_FINISHED_JOBS,
                 threads: int | None = None):
        import hemlp

        self.model_dir = Path(model_dir)
        self.model = hemlp.load(self.model_dir, allow_insecure=allow_insecure)
        if self.model.client_only:
            raise ClientArtefactError(f"{self.model_dir} is a client artefact (no weights): serve the server artefact "
                                      "(compiled.save(dir) without client=True)")
        self.model.prepare(verbose=False)                     # encode the weights once, for every request
        self.max_body_bytes, self.max_keys = int(max_body_bytes), int(max_keys)
        self.threads = None if threads is None else int(threads)
        self.key_store = key_store if key_store is not None else MemoryKeyStore(max_keys)
        self.jobs = job_store if job_store is not None else MemoryJobStore(max_queued_jobs, max_finished_jobs)
        self._loaded = MemoryKeyStore(max_keys)               # key id -> EvalKeys, this process's cache
        #: one evaluation at a time per process (requests and jobs alike: they share the native core's threads)
        self.eval_lock = threading.Lock()
        self._worker = None
        self._worker_lock = threading.Lock()
        self._prepared: OrderedDict = OrderedDict()          # job id -> (body size, its checked EncryptedBatch)
        self._prepared_lock = threading.Lock()

    def start_jobs(self) -> None:
        """Start this process's job worker (once): it runs queued jobs, whichever process queued them."""
        with self._worker_lock:
            if self._worker is None:
                self._worker = JobWorker(self.jobs, self._execute).start()

    def close(self) -> None:
        """Stop the job worker (after its current job); queued jobs stay in the store."""
        with self._worker_lock:
            if self._worker is not None:
                self._worker.stop()
                self._worker = None

    # ---- the API
    def receiver(self, method: str, path: str, query: dict, size: int | None):
        """The Receiver for a request's body of `size` bytes (None: unknown), whose finish() the server passes to
        handle(): the body copied once and hashed as it arrives; for an encrypted batch sent to /v1/infer or
        /v1/jobs under keys this process has loaded, its ciphertexts are also imported as they arrive
        (BatchReader: handle() makes every check of the body all the same, and uses that work only when they
        pass)."""
        from hemlp.fhe.serialize import Receiver
        from hemlp.runtime.artifacts import BatchReader

        watcher = None
        if (method.upper() == "POST" and (path.rstrip("/") in ("/v1/infer", "/v1/jobs")) and size is not None
                and 0 < size <= self.max_body_bytes and self._loaded.get(str(query.get("key"))) is not None):
            watcher = BatchReader(self.model)
        return Receiver(size, watcher)

    def handle(self, method: str, path: str, query: dict, body: bytes) -> tuple[int, str, bytes]:
        """(status, content type, body) of one request; never raises."""
        try:
            return self._route(method.upper(), path.rstrip("/") or "/", query, body)
        except Exception as e:  # noqa: BLE001 - a request must never take the service down or leak a traceback
            err = error_answer(e)
            return _json(err.pop("status"), err)

    def _route(self, method, path, query, body):
        routes = {"/v1/health": ("GET", self._health), "/v1/model": ("GET", self._meta),
                  "/v1/keys": ("POST", self._put_keys), "/v1/infer": ("POST", self._infer),
                  "/v1/jobs": ("POST", self._submit), "/v1/jobs/ID": ("GET", self._job_status),
                  "/v1/jobs/ID/result": ("GET", self._job_result)}
        job = JOB_PATH.fullmatch(path)
        if job is not None:
            path, query = "/v1/jobs/ID" + (job.group(2) or ""), dict(query, job_id=job.group(1))
        if path not in routes:
            raise HttpError(404, f"no route {path!r}; the API: " + ", ".join(f"{m} {p}" for p, (m, _) in
                                                                                routes.items()), "NotFound")
        want, fn = routes[path]
        if method != want:
            raise HttpError(405, f"{path} takes {want}, not {method}", "MethodNotAllowed")
        if len(body) > self.max_body_bytes:
            raise HttpError(413, f"the body has {len(body)} bytes, above this server's limit of {self.max_body_bytes}",
                            "PayloadTooLarge")
        return fn(query, body)

    def _health(self, query, body):
        return _json(200, dict(status="ok", model_id=self.model.model_id))

    def _meta(self, query, body):
        return _json(200, self.describe())

    def describe(self) -> dict:
        """What a client may know before sending anything: the plan's public side."""
        m, info = self.model, self.model.plan.info
        r = m.plan.resources
        return dict(model_id=m.model_id, input_shape=list(m.input_shape), output_shape=list(m.output_shape),
                    batch_size=m.batch_size, preset=m.preset, security=info.get("security"), layout=m.layout,
                    N=info.get("N"), max_body_bytes=self.max_body_bytes, jobs=self.jobs.limits(),
                    native_threads=self.threads if self.threads is not None else get_num_threads(),
                    expected_bytes=None if r is None else dict(eval_keys=r.eval_key_bytes, upload=r.upload_bytes,
                                                               download=r.download_bytes))

    def _put_keys(self, query, body):
        from hemlp.fhe.serialize import sha256
        from hemlp.runtime.artifacts import EvalKeys

        if not body:
            raise HttpError(400, "the body is empty: send the evaluation keys (EvalKeys.to_bytes / eval.keys)",
                            "EmptyBody")
        key_id = sha256(body).hex()[:32]
        keys = EvalKeys.from_bytes(body, self.model)          # checks format, checksum, model and parameters
        self.key_store.put(key_id, bytes(body))
        self._loaded.put(key_id, keys)
        return _json(201, dict(key_id=key_id))

    def _keys(self, key_id: str):
        from hemlp.runtime.artifacts import EvalKeys

        keys = self._loaded.get(key_id)
        if keys is not None:
            return keys
        data = self.key_store.get(key_id)
        if data is None:
            raise HttpError(404, f"no evaluation keys with id {key_id!r} on this server (evicted or never "
                                 "uploaded): POST them to /v1/keys first", "UnknownKey")
        keys = EvalKeys.from_bytes(data, self.model)
        self._loaded.put(key_id, keys)
        return keys

    def _request(self, query, body):
        """The named keys and the decoded input batch of /v1/infer and /v1/jobs, checked as run() checks them before
        any work: a refused job is refused at submission, with /v1/infer's answer."""
        from hemlp.runtime.artifacts import EncryptedBatch

        key_id = query.get("key")
        if not key_id:
            raise HttpError(400, "name the evaluation keys: POST /v1/infer?key=<key_id from /v1/keys> (or "
                                 "/v1/jobs?key=...)", "MissingKeyId")
        key_id = str(key_id)
        keys = self._keys(key_id)
        if not body:
            raise HttpError(400, "the body is empty: send an encrypted input batch (compiled.encrypt(...).to_bytes())",
                            "EmptyBody")
        ct = EncryptedBatch.from_bytes(body, self.model)
        # CompiledModel.run's checks before any work, here so that a job is refused when it is submitted
        self.model.check_run(ct, keys)
        return key_id, keys, ct

    def _evaluate(self, keys, ct) -> bytes:
        """The encrypted result of one checked batch, one evaluation at a time in this process."""
        with self.eval_lock:
            return self.model.run(ct, keys, threads=self.threads).to_bytes()

    def _infer(self, query, body):
        _, keys, ct = self._request(query, body)
        return 200, "application/octet-stream", self._evaluate(keys, ct)

    # ---- jobs (hemlp.serving.jobs)
    def _submit(self, query, body):
        import numpy as np

        from hemlp.fhe.serialize import Received

        key_id, _, ct = self._request(query, body)
        # a view (a Received's buffer is its own and read-only: no copy), as an array: a shared store's actor
        # takes it through Ray's object store, not pickled
        data = np.frombuffer(body.data if isinstance(body, Received) else body, np.uint8)
        self.start_jobs()
        # held while the job is queued, so this process's worker, which may claim it at once, finds its batch
        with self._prepared_lock:
            job_id = self.jobs.submit(key_id, data, self._worker.worker_id)
            if job_id is not None and len(data) <= PREPARED_BYTES:
                self._prepared[job_id] = (len(data), ct)
                while (len(self._prepared) > PREPARED_JOBS
                       or sum(n for n, _ in self._prepared.values()) > PREPARED_BYTES):
                    self._prepared.popitem(last=False)
        if job_id is None:
            raise HttpError(503, f"the job queue is full ({self.jobs.limits()['max_queued']} jobs waiting): retry "
                                 "later", "Busy")
        return _json(202, dict(job_id=job_id, status="queued"))

    def _job_status(self, query, body):
        return _json(200, self._known(query["job_id"], self.jobs.status(query["job_id"])))

    def _job_result(self, query, body):
        job_id = query["job_id"]
        try:
            wait = min(MAX_WAIT_S, max(0.0, float(query.get("wait", 0))))
        except ValueError:
            raise HttpError(400, f"wait={query.get('wait')!r}: give seconds, e.g. wait=10", "BadRequest") from None
        if wait > 0:
            self._known(job_id, self.jobs.wait(job_id, wait))
        status, data = self.jobs.take_result(job_id)
        status = self._known(job_id, status)
        if data is not None:
            return 200, "application/octet-stream", data
        if status["status"] == "failed":
            raise HttpError(status["http_status"], f"job {job_id} failed: {status['message']}", status["error"])
        if status["status"] == "done":
            raise HttpError(410, f"the result of job {job_id} was already fetched (a result is kept until fetched "
                                 "once): submit the batch again", "ResultFetched")
        where = f" ({status['position']} in the queue)" if "position" in status else ""
        raise HttpError(409, f"job {job_id} is {status['status']}{where}: ask again later, or with ?wait=<seconds>",
                        "JobNotDone")

    @staticmethod
    def _known(job_id, status):
        if status is None:
            raise HttpError(404, f"no job {job_id!r} on this server (never submitted, or evicted: a server keeps its "
                                 "latest finished jobs only)", "UnknownJob")
        return status

    def _execute(self, job_id: str, key_id: str, body):
        """A job on the worker thread: (result bytes, None) or (None, the error /v1/infer would have answered).
        body: its bytes, or None for a job this process submitted: the batch it decoded and checked then, or,
        if it no longer keeps it, the store's copy of the bytes."""
        from hemlp.runtime.artifacts import EncryptedBatch

        try:
            with self._prepared_lock:
                _, ct = self._prepared.pop(job_id, (None, None))
            keys = self._keys(key_id)
            if ct is None:
                body = body if body is not None else self.jobs.body(job_id)
                if body is None:                # finished meanwhile: a lost worker's job, run again elsewhere
                    raise HttpError(404, f"no job {job_id!r} to run on this server", "UnknownJob")
                ct = EncryptedBatch.from_bytes(memoryview(body), self.model)     # bytes or a uint8 array
            return self._evaluate(keys, ct), None
        except Exception as e:  # noqa: BLE001 - a job's failure is its answer, the worker carries on
            return None, error_answer(e)
