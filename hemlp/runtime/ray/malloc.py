"""Opt-in malloc tuning of Ray worker processes (glibc): one arena, large arrays from the heap, no trimming.

Off by default. RayProgram(tune_malloc=True), run_on_ray(..., tune_malloc=True) or HEMLP_RAY_TUNE_MALLOC=1 in the
driver's environment turn it on; the driver passes the choice in every task's spec and the task tunes its
worker process once (``tune_malloc``). ``python -m hemlp.bench ray --model mlp`` turns it on and records it.
"""
from __future__ import annotations

import ctypes
import os

__all__ = ["tune_malloc", "tune_malloc_requested", "malloc_tuned", "TUNE_MALLOC_ENV"]

_MALLOC_TUNED: list = []

#: set to 1 to turn the tuning on where no explicit tune_malloc= option is given (RayProgram, run_on_ray, and so
#: CompiledModel.run(runtime="ray")); read by the driver, which passes the choice to its tasks
TUNE_MALLOC_ENV = "HEMLP_RAY_TUNE_MALLOC"


def tune_malloc_requested(option: bool | None = None) -> bool:
    """The driver's choice: `option` when given, else whether TUNE_MALLOC_ENV is set to 1 / true / yes."""
    if option is not None:
        return bool(option)
    return os.environ.get(TUNE_MALLOC_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def malloc_tuned() -> bool:
    """Whether this process has tuned its malloc (the tasks report it in their statistics)."""
    return bool(_MALLOC_TUNED)


def tune_malloc() -> None:
    """Once per worker process, when the driver asked for it: glibc serves large arrays from the heap and keeps
    freed memory (M_MMAP_MAX = 0, M_TRIM_THRESHOLD = 2 GiB). Otherwise every array above 32 MB (a limb of a
    layer's product, a block) is a fresh mmap whose pages fault in one by one on first touch, every task
    (measured here: 1.1 GB in 3.7 s fresh vs 0.09 s reused, on a VM under load). The in-process runtime never
    allocates such arrays (its ciphertexts are 0.8 MB each). And one arena (M_ARENA_MAX = 1): the native kernels' OpenMP threads allocate scratch per call
    (the PCMM's per-thread GEMM output, 16 MB at N = 2^14), and a thread's own arena gave that memory back to the
    kernel between calls whatever the trim threshold (measured, 784-128-64-10 at batch 8 192 in a 2-thread task:
    about 10 k page faults and 0.2 CPU seconds per run more than with one arena; the in-process runtime, on
    glibc's defaults, faults none).

    Opt-in because it changes the whole worker process for the rest of its life (every later task in it, hemlp's
    or not, allocates under these settings; a worker's heap then keeps its peak size): turn it on for a cluster
    that runs hemlp only."""
    if _MALLOC_TUNED:
        return
    _MALLOC_TUNED.append(True)
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(-8, 1)            # M_ARENA_MAX
        libc.mallopt(-4, 0)            # M_MMAP_MAX
        libc.mallopt(-1, 2**31 - 1)    # M_TRIM_THRESHOLD
    except (OSError, AttributeError):  # not glibc: nothing to tune
        pass
