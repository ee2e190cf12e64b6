"""What both Ray drivers (RayProgram, RayExecutor) hold: the connected Ray, the worker count they plan for, the
options they share, their statistics, and the relinearisation key they ship to the workers once per run."""
from __future__ import annotations

import hashlib

from hemlp.runtime.ray.malloc import tune_malloc_requested
from hemlp.runtime.ray.session import import_ray

__all__ = ["RayDriver", "relin_bytes", "bootstrap_key_bytes"]

_LAST_RLK: list = []  # [(relin key, its bytes, their SHA-256)]: the driver's last key sent


def relin_bytes(relin_key) -> tuple:
    """The relinearisation key's bytes and digest (the workers cache the decoded key by it), kept for the last key:
    a batch job's runs send the same key, and serialising and hashing it cost ~20 ms a run here."""
    if not _LAST_RLK or _LAST_RLK[0][0] is not relin_key:
        data = relin_key.to_bytes()
        _LAST_RLK[:] = [(relin_key, data, hashlib.sha256(data).hexdigest())]
    return _LAST_RLK[0][1:]


def bootstrap_key_bytes(keys, ctx) -> tuple:
    """The bootstrapping keys' bytes and digest (the workers build their Bootstrapper once per digest), serialised
    anew for each run and kept by nobody here: the caller puts them and drops them. At N16 they are 3.3-11.4 GiB,
    which a cache would hold in the driver for as long as the process lives (a run serialises them once, in seconds,
    next to minutes of work; StagedKeys avoids the bytes altogether)."""
    data = keys.to_bytes(ctx)
    return data, hashlib.sha256(data).hexdigest()


class RayDriver:
    """The state RayExecutor and RayProgram share; they need a connected Ray (hemlp.runtime.ray.ray_session).

    tune_malloc: None (default: HEMLP_RAY_TUNE_MALLOC) or a bool, whether the tasks tune their worker's malloc
    (hemlp.runtime.ray.malloc; off by default)."""

    def __init__(self, num_workers: int | None = None, grid=None, cts_per_task: int | None = None,
                 threads_per_task: int = 1, tune_malloc: bool | None = None):
        ray = import_ray()
        if not ray.is_initialized():
            raise RuntimeError(f"{type(self).__name__} needs a connected Ray: use it inside "
                               "hemlp.runtime.ray.ray_session")
        self.ray = ray
        self.num_workers = int(num_workers or max(1, int(ray.cluster_resources().get("CPU", 1))))
        self.grid, self.cts_per_task, self.threads = grid, cts_per_task, int(threads_per_task)
        self.tune_malloc = tune_malloc_requested(tune_malloc)
        self.stats: dict = {}
        self._rlk = None      # (relin key object, digest, [ref]) of this run
