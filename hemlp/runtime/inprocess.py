"""InProcessItems: the items of a resumable batch job (hemlp.runtime.jobs) one after the other in this process,
each on every core (`hemlp batch --runtime local`).

An item is one encrypted batch: its products parallelise over ciphertexts and RNS limbs in the native core, so
one item on all cores finishes sooner than one item per core would, and holds one item's memory instead of one
per core. The caller's thread setting is restored afterwards.
"""
from __future__ import annotations

from hemlp.runtime.jobs import LocalItems
from hemlp.runtime.ray.session import usable_cores   # (imports no Ray: the package imports ray only when used)
from hemlp.threads import get_num_threads, set_num_threads

__all__ = ["InProcessItems", "usable_cores"]


class InProcessItems(LocalItems):
    """An executor of jobs.run_batch: every item in this process on `threads` native threads (default: every
    usable core). Retries as LocalItems."""

    def __init__(self, threads: int | None = None):
        if threads is not None and int(threads) < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self.threads = int(threads) if threads else usable_cores()

    def run(self, job, todo, retries: int, read, done, failed) -> None:
        if not todo:
            return
        before = get_num_threads()
        set_num_threads(self.threads)
        try:
            super().run(job, todo, retries, read, done, failed)
        finally:
            set_num_threads(before)
