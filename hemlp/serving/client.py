"""The client of ``hemlp serve``: ``Client(url, model)`` holds the secret key, uploads the evaluation keys once, and
``infer(x)`` encrypts, sends, receives and decrypts. ``submit(x)`` / ``result(job_id)`` do the same through the
server's job queue (POST /v1/jobs, then a long poll of GET /v1/jobs/ID/result), and ``infer_many(xs)`` splits many
samples into model batches and keeps several jobs in flight, with a progress bar. Standard library HTTP only (the
client needs no server packages): one kept-alive connection per thread, and an encrypted batch is sent part by part
while a second thread computes its checksum (no joined copy of the body; the socket writes, the server's reads and
the client's SHA-256 run at once, the seal sent last). ``model``: the
client artefact directory (or any compiled model: it uses only the plan, parameters and ranges)."""
from __future__ import annotations

import hashlib
import http.client
import json
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import numpy as np

from hemlp.errors import HemlpError, KeyMismatchError, ShapeError
from hemlp.progress import progress as progress_bar

__all__ = ["Client", "ServerError", "ServerUnavailableError", "JobTimeoutError"]


class ServerUnavailableError(HemlpError, ConnectionError):
    """No server answers at the client's URL."""


class JobTimeoutError(HemlpError, TimeoutError):
    """A job did not finish within the client's timeout; it is still on the server."""


class ServerError(HemlpError):
    """The server refused a request: its HTTP status, error name and message."""

    def __init__(self, status: int, name: str, message: str):
        super().__init__(f"{name} ({status}): {message}")
        self.status, self.name, self.detail = status, name, message


#: retries of an inference after a server error (5xx: a replica dying mid-request, a gateway) or a dropped
#: connection, with backoff; inference is pure, so a retry can only cost time
RETRIES = 3
#: seconds one GET /v1/jobs/ID/result?wait= may hold its request (the server caps it at 30 s)
LONG_POLL_S = 20.0
#: jobs infer_many keeps in flight (at most the server's queue bound): the next batch is encrypted and queued
#: while the server evaluates, and replicas take them in parallel
WINDOW = 8
#: threads hashing uploads while they are sent (hashlib releases the GIL), shared by a process's clients
_HASHERS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="hemlp-upload-sha256")


def _digest(parts: list) -> bytes:
    h = hashlib.sha256()
    for b in parts:
        h.update(b)
    return h.digest()


class _HashedWhileSent:
    """A serialize.SealedStream sent with its SHA-256 computed by another thread meanwhile (the stream's own
    iteration hashes each part before handing it out, so the socket waits for the hash): the same bytes, the seal
    last. Iterated anew for each try of a retried request."""

    def __init__(self, stream):
        self.stream = stream

    def __len__(self) -> int:
        return len(self.stream)

    def __bytes__(self) -> bytes:
        return bytes(self.stream)

    def __iter__(self):
        head, bufs = self.stream.head, self.stream.bufs
        if not all(isinstance(b, (bytes, bytearray, memoryview)) for b in bufs):
            yield from self.stream                  # seals still being hashed (PendingSeal): the stream's order
            return
        seal = _HASHERS.submit(_digest, [head, *bufs])
        yield head
        yield from bufs
        yield seal.result()


class Client:
    """``Client(url, model)``: see the module docstring. An inference is idempotent (the same ciphertext gives the
    same result), so it is retried after a server error (5xx) or a dropped connection, and re-sends the keys once
    when the server no longer holds them (evicted, or a restarted key store). A submission to a full job queue (503
    Busy) is retried with backoff for up to ``timeout`` seconds."""

    def __init__(self, url: str, model, allow_insecure: bool = False, timeout: float = 600.0, keys=None):
        import hemlp

        self.url = url.rstrip("/")
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"the server URL must be http(s)://host[:port][/prefix], got {url!r}")
        self._https, self._host, self._port, self._prefix = (parts.scheme == "https", parts.hostname, parts.port,
                                                             parts.path)
        # an HTTP(S) proxy from the environment for this host: urllib's way (it honours it), a connection a request
        proxy = urllib.request.getproxies().get(parts.scheme)
        self._via_proxy = bool(proxy) and not urllib.request.proxy_bypass(parts.hostname)
        self._local = threading.local()          # this thread's kept-alive connection
        self.model = model if hasattr(model, "keygen") else hemlp.load(model, allow_insecure=allow_insecure)
        self.timeout = float(timeout)
        self.server = meta = self.describe()
        if meta["model_id"] != self.model.model_id:
            raise KeyMismatchError(f"the server at {self.url} serves model {meta['model_id']}, this client holds "
                                   f"{self.model.model_id}: use the client artefact of the model it serves")
        # keys: (secret key, evaluation keys) of this model's keygen() to use (default: made on first use)
        self.secret_key, self._eval_keys = keys if keys is not None else (None, None)
        self.key_id = None
        #: samples per request: the model's batch size (infer and infer_many split larger inputs into such batches)
        self.batch_size = max(1, min(self.model.capacity, self.model.batch_size))

    def _request(self, method: str, path: str, body=None) -> tuple[str, bytes]:
        """(content type, body) of one request; body: bytes, or a serialize.SealedStream sent part by part as it is
        hashed. ServerError for an answer >= 400, ServerUnavailableError when no server answers."""
        if self._via_proxy:
            status, ctype, data = self._urllib(method, path, body)
        else:
            status, ctype, data = self._send(method, path, body)
        if status >= 400:
            try:
                err = json.loads(data)
                name, message = err.get("error", "Error"), err.get("message", "")
            except (ValueError, AttributeError):
                name, message = "HTTPError", data[:200].decode(errors="replace")
            raise ServerError(status, name, message)
        return ctype, data

    def _unavailable(self, reason) -> ServerUnavailableError:
        return ServerUnavailableError(f"no hemlp server answers at {self.url} ({reason}): start it with "
                                      "`hemlp serve MODEL_DIR`, or check the URL")

    def _send(self, method: str, path: str, body) -> tuple[int, str, bytes]:
        headers = {} if body is None else {"Content-Type": "application/octet-stream",
                                           "Content-Length": str(len(body))}
        for fresh in (False, True):
            conn = getattr(self._local, "conn", None)
            reused = conn is not None and not fresh
            if not reused:
                self.close()
                cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
                conn = self._local.conn = cls(self._host, self._port, timeout=self.timeout)
            try:
                conn.request(method, self._prefix + path, body=body, headers=headers)
                r = conn.getresponse()
                data = r.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                    ConnectionAbortedError) as e:
                self.close()
                if reused:           # the server closed the idle connection: once more on a new one
                    continue
                raise self._unavailable(e) from None
            except (OSError, http.client.HTTPException) as e:
                self.close()
                raise self._unavailable(e) from None
            if r.will_close:
                self.close()
            return r.status, r.getheader("Content-Type", ""), data
        raise AssertionError("unreachable")

    def _urllib(self, method: str, path: str, body) -> tuple[int, str, bytes]:
        data = None if body is None else body if isinstance(body, bytes) else bytes(body)
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/octet-stream"} if body is not None else {})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return r.status, r.headers.get("Content-Type", ""), r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers.get("Content-Type", ""), e.read()
        except (urllib.error.URLError, ConnectionError, TimeoutError, http.client.HTTPException) as e:
            raise self._unavailable(getattr(e, "reason", e)) from None

    def close(self) -> None:
        """Close this thread's connection to the server (the next request opens another)."""
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def describe(self) -> dict:
        """The served model's public description (GET /v1/model)."""
        return json.loads(self._request("GET", "/v1/model")[1])

    def connect(self) -> str:
        """Keygen (once) and upload the evaluation keys (once); returns their key id on the server."""
        if self.secret_key is None:
            self.secret_key, self._eval_keys = self.model.keygen(verbose=False)
        if self.key_id is None:
            self._upload(self._eval_keys)
        return self.key_id

    def _upload(self, eval_keys) -> None:
        reply = json.loads(self._request("POST", "/v1/keys", eval_keys.to_bytes(self.model.context))[1])
        self.key_id = reply["key_id"]

    def _post_batch(self, route: str, body) -> bytes:
        """POST an encrypted batch (bytes or a SealedStream) to /v1/infer or /v1/jobs with the retries of the class
        docstring."""
        resent, attempt, busy = False, 0, 0
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                return self._request("POST", f"{route}?key={self.key_id}", body)[1]
            except ServerError as e:
                if e.name == "UnknownKey" and not resent:        # evicted: upload the same keys again
                    resent = True
                    self._upload(self._eval_keys)
                    continue
                if e.name == "Busy" and time.monotonic() < deadline:    # a full job queue: later
                    time.sleep(min(5.0, 0.2 * 2 ** busy))
                    busy += 1
                    continue
                if e.status < 500 or attempt == RETRIES:
                    raise
            except ServerUnavailableError:
                if attempt == RETRIES:
                    raise
            time.sleep(0.5 * 2 ** attempt)
            attempt += 1

    def _decode(self, data: bytes) -> np.ndarray:
        from hemlp.runtime.artifacts import EncryptedBatch

        out = EncryptedBatch.from_bytes(data, self.model)
        if out.stage != "output" or out.model_id != self.model.model_id:
            raise ServerError(502, "BadResult", "the server's reply is not an encrypted result of this model")
        return self.model.decrypt(out, self.secret_key)

    def infer(self, x, progress: bool | None = None) -> np.ndarray:
        """Encrypt x (batch, *input_shape), evaluate on the server, decrypt: the outputs (batch, *output_shape).
        One request for up to ``batch_size`` samples; more go through ``infer_many`` (jobs, with ``progress``)."""
        x = np.asarray(x)
        if x.ndim == len(self.model.input_shape) + 1 and len(x) > self.batch_size:
            return self.infer_many(x, progress=progress)
        self.connect()
        body = _HashedWhileSent(self.model.encrypt(x, self.secret_key).to_stream())
        return self._decode(self._post_batch("/v1/infer", body))

    # ---- jobs
    def submit(self, x) -> str:
        """Encrypt one batch (at most ``batch_size`` samples) and queue it on the server: its job id (unguessable;
        pass it to ``result``)."""
        self.connect()
        body = _HashedWhileSent(self.model.encrypt(np.asarray(x), self.secret_key).to_stream())
        return json.loads(self._post_batch("/v1/jobs", body))["job_id"]

    def status(self, job_id: str) -> dict:
        """The job's status on the server: {"job_id", "status": queued | running | done | failed, ...}."""
        return json.loads(self._request("GET", f"/v1/jobs/{job_id}")[1])

    def result(self, job_id: str, wait: bool = True, timeout: float | None = None) -> np.ndarray | None:
        """The decrypted outputs of a submitted job. wait=True: until it is done (long polls, backoff between them),
        JobTimeoutError after ``timeout`` seconds (None: no limit; the job stays on the server, ask again);
        wait=False: None while it is not done. A failed job raises its ServerError (the answer /v1/infer would have
        given). A result is handed out once: the server forgets it then."""
        deadline = None if timeout is None else time.monotonic() + float(timeout)
        pause, attempt = 0.05, 0
        while True:
            hold = 0.0
            if wait:          # the long poll ends well within the client's own request timeout
                hold = min(LONG_POLL_S, self.timeout / 2)
                if deadline is not None:
                    hold = min(hold, max(0.0, deadline - time.monotonic()))
            try:
                query = f"?wait={hold:.3f}" if hold > 0 else ""
                return self._decode(self._request("GET", f"/v1/jobs/{job_id}/result{query}")[1])
            except ServerError as e:
                if e.name == "JobNotDone":
                    if not wait:
                        return None
                else:
                    if e.status < 500 or attempt == RETRIES:
                        raise
                    failed = self._failure(job_id)     # the job's own failure, or a gateway's: retry that
                    if failed is not None:
                        raise failed from None
                    attempt += 1
            except ServerUnavailableError:
                if attempt == RETRIES:
                    raise
                attempt += 1
            if deadline is not None and time.monotonic() >= deadline:
                raise JobTimeoutError(f"job {job_id} is not done after {timeout} s; it is still on the server: call "
                                      "result(job_id) again later") from None
            time.sleep(pause if deadline is None else min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(1.0, pause * 2)

    def _failure(self, job_id: str) -> ServerError | None:
        try:
            st = self.status(job_id)
        except HemlpError:
            return None
        if st.get("status") != "failed":
            return None
        return ServerError(int(st["http_status"]), st["error"], f"job {job_id} failed: {st['message']}")

    def infer_many(self, xs, progress: bool | None = None, window: int | None = None,
                   timeout: float | None = None) -> np.ndarray:
        """``infer`` for any number of samples: split into batches of ``batch_size``, each a job, ``window`` of them
        in flight (default 8, at most the server's queue bound), results in order. progress: a bar of batches on
        stderr (None: only on a terminal). timeout: seconds per job (None: no limit). A job whose keys the server
        forgot before it ran is submitted again, once."""
        xs = np.asarray(xs)
        chunks = [xs[i:i + self.batch_size] for i in range(0, len(xs), self.batch_size)]
        if not chunks:
            raise ShapeError(f"infer_many needs at least one sample, got an array of shape {xs.shape}")
        limit = (self.server.get("jobs") or {}).get("max_queued", WINDOW)
        window = max(1, min(int(window or WINDOW), int(limit)))
        outs: list = [None] * len(chunks)
        pending: deque = deque()
        resubmitted: set = set()
        nxt = 0
        with progress_bar(f"encrypted inference of {len(xs)} samples", total=len(chunks), verbose=progress,
                          unit="batch") as bar:
            while nxt < len(chunks) or pending:
                while nxt < len(chunks) and len(pending) < window:
                    pending.append((nxt, self.submit(chunks[nxt])))
                    nxt += 1
                i, job_id = pending.popleft()
                try:
                    outs[i] = self.result(job_id, timeout=timeout)
                except ServerError as e:
                    if e.name != "UnknownKey" or i in resubmitted:
                        raise
                    resubmitted.add(i)                 # the keys were evicted before it ran: queue it again
                    pending.appendleft((i, self.submit(chunks[i])))
                    continue
                bar.update(1)
        return np.concatenate(outs)
