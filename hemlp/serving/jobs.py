"""Asynchronous inference jobs of ``hemlp serve``: a bounded queue of submitted batches, their status, and their
encrypted results until fetched.

``MemoryJobStore`` holds every job of a server: in the process of the threading server, or in one Ray actor that
every Ray Serve replica calls (hemlp.serving.ray_serve), so a job submitted through one replica can be polled and
fetched through any other. ``JobWorker`` is the thread in each serving process (each replica) that takes the next
queued job from the store, runs it and stores its result: replicas share one queue, and an idle replica takes the
next job whoever received it.

Limits: at most ``max_queued`` jobs wait (a submission beyond is refused: the caller answers 503, retry later);
at most ``max_finished`` finished jobs are kept, oldest out first, and a result is kept until it is fetched once or
evicted. A worker that stops sending heartbeats for ``lease_s`` seconds (a replica killed mid-job) loses its job:
it is queued again once (inference is pure, so a second run gives the same result), then failed as ``WorkerLost``.
The store never raises to its callers (the shared store answers through a Ray actor): it returns None or a status.
"""
from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict, deque

from hemlp.errors import ParameterError

__all__ = ["MemoryJobStore", "JobWorker", "DEFAULT_MAX_QUEUED_JOBS", "DEFAULT_MAX_FINISHED_JOBS", "MAX_ATTEMPTS",
           "DEFAULT_LEASE_S", "HEARTBEAT_S"]

#: jobs waiting to run, per server (each holds its encrypted input batch in memory)
DEFAULT_MAX_QUEUED_JOBS = 32
#: finished jobs kept (with their unfetched results), oldest evicted first
DEFAULT_MAX_FINISHED_JOBS = 128
#: runs of one job at most: a worker lost mid-job gives it back to the queue once
MAX_ATTEMPTS = 2
#: a worker silent this long is lost (its heartbeat comes every HEARTBEAT_S from a thread of its own, so a long
#: evaluation, which releases the GIL, does not count as silence)
DEFAULT_LEASE_S = 60.0
HEARTBEAT_S = 5.0

QUEUED, RUNNING, DONE, FAILED = "queued", "running", "done", "failed"


class MemoryJobStore:
    """The jobs of one server, in this process (see the module docstring). ``lease_s=None``: workers are never
    declared lost (they live in the store's own process, which they cannot outlive)."""

    def __init__(self, max_queued: int = DEFAULT_MAX_QUEUED_JOBS, max_finished: int = DEFAULT_MAX_FINISHED_JOBS,
                 lease_s: float | None = None):
        if int(max_queued) < 1 or int(max_finished) < 1:
            raise ParameterError(f"a job store keeps >= 1 queued and >= 1 finished jobs, got max_queued={max_queued}, "
                                 f"max_finished={max_finished} (hemlp serve --max-queued-jobs / --max-finished-jobs)")
        self.max_queued, self.max_finished = int(max_queued), int(max_finished)
        self.lease_s = None if lease_s is None else float(lease_s)
        self._jobs: dict[str, dict] = {}
        self._queue: deque = deque()
        self._finished: OrderedDict = OrderedDict()       # job id -> None, in finishing order
        self._seen: dict[str, float] = {}                 # worker -> its last heartbeat
        self._cond = threading.Condition()

    def limits(self) -> dict:
        return dict(max_queued=self.max_queued, max_finished=self.max_finished)

    def counts(self) -> dict:
        with self._cond:
            running = sum(1 for j in self._jobs.values() if j["status"] == RUNNING)
            return dict(queued=len(self._queue), running=running, finished=len(self._finished))

    # ---- the API side
    def submit(self, key_id: str, body, origin: str | None = None) -> str | None:
        """Queue a validated job (body: its bytes, any buffer): its unguessable id, or None when the queue is full.
        origin: the worker id of the process that submitted it, which keeps the batch it decoded: claim() gives
        that worker no body (body() fetches it, should it need it after all)."""
        with self._cond:
            self._reap()
            if len(self._queue) >= self.max_queued:
                return None
            job_id = secrets.token_urlsafe(18)
            self._jobs[job_id] = dict(status=QUEUED, key_id=key_id, body=body, result=None, error=None, worker=None,
                                      attempts=0, fetched=False, origin=origin)
            self._queue.append(job_id)
            self._cond.notify_all()
            return job_id

    def status(self, job_id: str) -> dict | None:
        """The job's public status (None: unknown or evicted)."""
        with self._cond:
            self._reap()
            return self._public(job_id)

    def wait(self, job_id: str, timeout: float) -> dict | None:
        """The status once the job has finished, or after ``timeout`` seconds (a long poll)."""
        deadline = time.monotonic() + max(0.0, float(timeout))
        with self._cond:
            while True:
                self._reap()
                job = self._jobs.get(job_id)
                left = deadline - time.monotonic()
                if job is None or job["status"] in (DONE, FAILED) or left <= 0:
                    return self._public(job_id)
                # woken by finish(); the cap re-checks leases while a lost worker's job waits for its requeue
                self._cond.wait(min(left, self.lease_s or left))

    def take_result(self, job_id: str) -> tuple[dict | None, bytes | None]:
        """(status, the result bytes): the result once, when done; the store forgets it then."""
        with self._cond:
            self._reap()
            job = self._jobs.get(job_id)
            if job is None or job["status"] != DONE or job["fetched"]:
                return self._public(job_id), None
            data, job["result"], job["fetched"] = job["result"], None, True
            return self._public(job_id), data

    def _public(self, job_id: str) -> dict | None:
        job = self._jobs.get(job_id)
        if job is None:
            return None
        out = dict(job_id=job_id, status=job["status"])
        if job["status"] == QUEUED:
            out["position"] = self._queue.index(job_id) + 1
        elif job["status"] == DONE:
            out["fetched"] = job["fetched"]
        elif job["status"] == FAILED:
            err = job["error"]
            out.update(error=err["error"], message=err["message"], http_status=err["status"])
        return out

    # ---- the worker side
    def claim(self, worker: str, timeout: float) -> tuple | None:
        """The next queued job for ``worker``, (job id, key id, body), waiting up to ``timeout`` seconds for one;
        body None: the worker's own process submitted it (see submit)."""
        deadline = time.monotonic() + max(0.0, float(timeout))
        with self._cond:
            self._seen[worker] = time.monotonic()
            while True:
                self._reap()
                if self._queue:
                    job_id = self._queue.popleft()
                    job = self._jobs[job_id]
                    job.update(status=RUNNING, worker=worker, attempts=job["attempts"] + 1)
                    return job_id, job["key_id"], None if job["origin"] == worker else job["body"]
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)

    def body(self, job_id: str):
        """A queued or running job's body (None once it has finished, or for an unknown job)."""
        with self._cond:
            job = self._jobs.get(job_id)
            return None if job is None else job["body"]

    def heartbeat(self, worker: str) -> None:
        with self._cond:
            self._seen[worker] = time.monotonic()

    def finish(self, job_id: str, worker: str, result: bytes | None = None, error: dict | None = None) -> None:
        """Record a job's result, or its error (``status``, ``error``, ``message``: the answer /v1/infer would have
        given). A job already finished (by a worker declared lost that came back) keeps its first outcome."""
        with self._cond:
            self._seen[worker] = time.monotonic()
            job = self._jobs.get(job_id)
            if job is None or job["status"] in (DONE, FAILED):
                return
            if job_id in self._queue:           # requeued after a lease expiry, then finished by its first worker
                self._queue.remove(job_id)
            self._end(job_id, job, result, error)

    def _end(self, job_id, job, result, error) -> None:
        job.update(status=DONE if error is None else FAILED, result=result, error=error, body=None)
        self._finished[job_id] = None
        while len(self._finished) > self.max_finished:
            old, _ = self._finished.popitem(last=False)
            del self._jobs[old]
        self._cond.notify_all()

    def _reap(self) -> None:
        """Jobs of workers silent for lease_s: queued again (first loss) or failed (a second)."""
        if self.lease_s is None:
            return
        now = time.monotonic()
        lost = {w for w, t in self._seen.items() if now - t > self.lease_s}
        if not lost:
            return
        for w in lost:
            del self._seen[w]
        for job_id, job in list(self._jobs.items()):
            if job["status"] != RUNNING or job["worker"] not in lost:
                continue
            if job["attempts"] < MAX_ATTEMPTS:
                job.update(status=QUEUED, worker=None)
                self._queue.appendleft(job_id)      # ahead of later jobs: it was submitted first
            else:
                self._end(job_id, job, None, dict(
                    status=503, error="WorkerLost", message=f"the server process running this job stopped "
                    f"{MAX_ATTEMPTS} times (a replica restarted, or the job exhausts its memory): submit it again"))
        self._cond.notify_all()


class JobWorker:
    """A thread that runs a store's queued jobs one after another: ``execute(job_id, key_id, body) -> (result
    bytes, None) or (None, error dict)`` never raises; ``body`` is what the store's claim() gave (None for a job
    this worker's own process submitted: MemoryJobStore.submit's origin). A second thread sends the heartbeats
    while a job runs."""

    def __init__(self, store, execute, name: str = "hemlp-jobs"):
        self.store, self.execute = store, execute
        self.worker_id = secrets.token_hex(8)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._loop, name=name, daemon=True),
                         threading.Thread(target=self._beat, name=name + "-heartbeat", daemon=True)]

    def start(self) -> "JobWorker":
        for t in self._threads:
            t.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout)

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                self.store.heartbeat(self.worker_id)
            except Exception:  # noqa: BLE001 - a shared store restarting: the next beat tries again
                pass

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                job = self.store.claim(self.worker_id, 1.0)       # short, so stop() is seen within a second
            except Exception:  # noqa: BLE001 - a shared store unreachable for a moment: try again, never die
                self._stop.wait(1.0)
                continue
            if job is None:
                continue
            job_id, key_id, body = job
            result, error = self.execute(job_id, key_id, body)
            try:
                self.store.finish(job_id, self.worker_id, result, error)
            except Exception:  # noqa: BLE001 - the store unreachable: if it lives on, the lease requeues the job
                self._stop.wait(1.0)
