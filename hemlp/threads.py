"""Threads of the native core (OpenMP over RNS limbs / ciphertexts) and of BLAS."""
from __future__ import annotations

__all__ = ["set_num_threads", "get_num_threads"]


def set_num_threads(n: int) -> None:
    """Threads used by the native core and by BLAS (hemlp._core is loaded on first use, so `import hemlp` and the
    pure-Python planner work before the native core is built)."""
    from hemlp import _core

    _core.set_num_threads(int(n))


def get_num_threads() -> int:
    from hemlp import _core

    return _core.get_num_threads()
