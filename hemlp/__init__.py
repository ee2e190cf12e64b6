"""hemlp: privacy-preserving ML inference on RNS-CKKS encrypted matrices.

Layers (data flows one way): compiler -> planner -> runtime -> linalg / ckks -> hemlp._core (C++).
Submodules are imported lazily so that pure-Python layers (the planner) work even
before the native core is built.
"""
from hemlp.errors import *  # noqa: F401,F403  (typed exceptions are part of the public API)

__version__ = "0.1.0"

# In a source checkout, hemlp.models and hemlp.datasets live in the top-level models/ and
# datasets/ folders (setup.py maps them the same way for installed copies).
import os as _os

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

    if name in {"ckks", "linalg", "planner", "bench"}:
        return importlib.import_module(f"hemlp.{name}")
    if name in {"compile", "load"}:  # from hemlp.compile import compile, load
        return getattr(importlib.import_module("hemlp.compile"), name)
    raise AttributeError(f"module 'hemlp' has no attribute {name!r}")
