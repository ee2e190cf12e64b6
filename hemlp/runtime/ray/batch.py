"""RayItems: the items of a resumable batch job (hemlp.runtime.jobs) as Ray tasks, whole items in parallel.

The other axis than RayProgram's: each item (an encrypted batch file's bytes) runs in-process in one worker
(``job.process``). The job is put once and shared by every task; at most two items per CPU are in flight, so the
memory the driver holds stays bounded. Only the driver reads inputs and writes outputs (the callbacks of
``run``): workers on other nodes need no shared disk.
"""
from __future__ import annotations

from hemlp import _core
from hemlp.errors import SerializationError
from hemlp.runtime.ray.session import TASK_RETRIES, check_task_cpus, ray_session, task_threads
from hemlp.runtime.retry import transient

__all__ = ["RayItems", "process_item"]


def process_item(job, data: bytes, threads: int = 1) -> bytes:
    """Runs in a worker: pure (bytes in, bytes out), so a retried attempt gives the same result."""
    _core.set_num_threads(threads)
    return job.process(data)


class RayItems:
    """An executor of jobs.run_batch on the running Ray, a cluster at `address`, or a local Ray of num_workers
    CPUs started for the run (see ray_session). A task that dies (a lost worker) or raises is re-run as a new
    attempt until the item has used up its retries; an input that cannot be read counts as a failed attempt. A
    deterministic failure (a typed hemlp error, see hemlp.runtime.retry) is not retried. threads: native threads
    per item, each task holding as many CPUs (default 1: items in parallel; more for a model whose keys fill a
    node's memory, e.g. N16 bootstrapping, one item per node on all its cores)."""

    def __init__(self, address: str | None = None, num_workers: int | None = None, threads: int = 1):
        self.address, self.num_workers = address, num_workers
        self.threads = task_threads(threads, "threads per item")

    def run(self, job, todo, retries: int, read, done, failed) -> None:
        if not todo:   # every item is done already: no Ray to start or join
            return
        with ray_session(self.address, self.num_workers) as ray:
            check_task_cpus(ray, self.threads)
            task = ray.remote(num_cpus=self.threads, max_retries=TASK_RETRIES, retry_exceptions=False)(process_item)
            job_ref = ray.put(job)  # weights / model shipped once, shared by every task
            # bounded memory in flight: two items per task slot
            width = 2 * max(1, int(ray.cluster_resources().get("CPU", 1)) // self.threads)
            queue = [(p, 1) for p in reversed(todo)]
            running = {}

            def submit():
                while queue and len(running) < width:
                    path, attempt = queue.pop()
                    try:
                        data = read(path)
                    except SerializationError as exc:
                        if attempt <= retries and transient(exc):
                            queue.insert(0, (path, attempt + 1))
                        else:
                            failed(path, exc, attempt)
                        continue
                    running[task.remote(job_ref, data, self.threads)] = (path, attempt)

            submit()
            while running:
                ready, _ = ray.wait(list(running), num_returns=1)
                path, attempt = running.pop(ready[0])
                try:
                    out = ray.get(ready[0])
                except ray.exceptions.RayError as exc:
                    if attempt <= retries and transient(exc):
                        queue.append((path, attempt + 1))
                    else:
                        failed(path, exc, attempt)
                else:
                    done(path, out, attempt)
                submit()
