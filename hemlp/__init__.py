"""hemlp: privacy-preserving ML inference on RNS-CKKS encrypted matrices.

Layers (data flows one way): compiler -> planner -> runtime -> linalg / ckks -> hemlp._core (C++).
Submodules are imported lazily so that pure-Python layers (the planner) work even
before the native core is built.
"""
import os as _os

# OpenMP threads that spin at barriers collapse when other processes share the cores (seen
# here: 2-thread ops 8x slower on a loaded machine). Sleeping waiters cost microseconds per
# region instead. Set before the native core (and its OpenMP runtime) loads; users may override.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from hemlp.errors import *  # noqa: E402,F401,F403  (typed exceptions are part of the public API)

__version__ = "0.1.0"

# In a source checkout, hemlp.models and hemlp.datasets live in the top-level models/ and
# datasets/ folders (setup.py maps them the same way for installed copies).

_repo = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isdir(_os.path.join(_repo, "csrc")) and _os.path.isdir(_os.path.join(_repo, "models")):
    __path__.append(_repo)


def set_num_threads(n: int) -> None:
    """Threads used by the native core (OpenMP over RNS limbs / ciphertexts) and by BLAS."""
    from hemlp import _core

    _core.set_num_threads(int(n))


def get_num_threads() -> int:
    from hemlp import _core

    return _core.get_num_threads()


def __getattr__(name):  # lazy submodules: hemlp.ckks, hemlp.linalg, ...
    import importlib

    if name in {"ckks", "linalg", "planner", "bench", "baselines"}:
        return importlib.import_module(f"hemlp.{name}")
    if name in {"compile", "load"}:  # from hemlp.compile import compile, load
        return getattr(importlib.import_module("hemlp.compile"), name)
    raise AttributeError(f"module 'hemlp' has no attribute {name!r}")
