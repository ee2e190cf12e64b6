"""Loading the CUDA backend's shared library (``libhemlp_cuda.so``, built by ``scripts/build_cuda.sh``) with ctypes.

The library has a C interface (csrc/cuda/hemlp_cuda.h), so it needs neither Python headers nor the CPU core to
build or load. It is looked for at ``$HEMLP_CUDA_LIB``, then beside this package (an installed build), then in the
checkout's ``build/cuda/``. Every call's status is checked here: a nonzero code becomes a typed error.
"""
from __future__ import annotations

import ctypes
import os
import sys
import threading
from pathlib import Path

from hemlp.errors import DeviceError, LevelError, ParameterError

LIB_NAME = "libhemlp_cuda.so"
_lock = threading.Lock()
_state: dict = {}

c_u64p = ctypes.POINTER(ctypes.c_uint64)
c_i64p = ctypes.POINTER(ctypes.c_int64)
vp = ctypes.c_void_p

# name -> (restype, argtypes)
SIGNATURES = {
    "hg_last_error": (ctypes.c_char_p, []),
    "hg_device_info": (ctypes.c_int, [ctypes.POINTER(ctypes.c_int), ctypes.c_char_p, ctypes.c_int,
                                      ctypes.POINTER(ctypes.c_size_t)]),
    "hg_mem_info": (ctypes.c_int, [ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]),
    "hg_context_create": (ctypes.c_int, [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, c_u64p, c_u64p,
                                         ctypes.c_int, ctypes.POINTER(vp)]),
    "hg_context_destroy": (None, [vp]),
    "hg_sync": (ctypes.c_int, [vp]),
    "hg_buffer_alloc": (ctypes.c_int, [vp, ctypes.c_size_t, ctypes.POINTER(vp)]),
    "hg_buffer_free": (None, [vp]),
    "hg_upload": (ctypes.c_int, [vp, vp, ctypes.c_size_t, c_u64p, ctypes.c_size_t]),
    "hg_download": (ctypes.c_int, [vp, vp, ctypes.c_size_t, c_u64p, ctypes.c_size_t]),
    "hg_copy": (ctypes.c_int, [vp, vp, vp, ctypes.c_size_t]),
    "hg_copy_strided": (ctypes.c_int, [vp, vp, ctypes.c_size_t, ctypes.c_size_t, vp, ctypes.c_size_t,
                                       ctypes.c_size_t, ctypes.c_size_t, ctypes.c_size_t]),
    "hg_ntt": (ctypes.c_int, [vp, vp, ctypes.c_int, ctypes.c_int, ctypes.c_int]),
    "hg_add": (ctypes.c_int, [vp, vp, vp, vp, ctypes.c_int]),
    "hg_sub": (ctypes.c_int, [vp, vp, vp, vp, ctypes.c_int]),
    "hg_mul": (ctypes.c_int, [vp, vp, vp, vp, ctypes.c_int]),
    "hg_negate": (ctypes.c_int, [vp, vp, vp, ctypes.c_int]),
    "hg_tensor": (ctypes.c_int, [vp, vp, vp, vp, vp, vp, vp, vp, ctypes.c_int]),
    "hg_rescale": (ctypes.c_int, [vp, vp, ctypes.c_int, vp]),
    "hg_mul_scalar": (ctypes.c_int, [vp, vp, vp, ctypes.c_int, c_u64p]),
    "hg_add_scalar": (ctypes.c_int, [vp, vp, vp, ctypes.c_int, c_u64p]),
    "hg_add_mul_scalar": (ctypes.c_int, [vp, vp, vp, ctypes.c_int, c_u64p]),
    "hg_permute": (ctypes.c_int, [vp, vp, ctypes.c_uint64, vp, ctypes.c_int]),
    "hg_key_upload": (ctypes.c_int, [vp, ctypes.c_int, ctypes.c_int, ctypes.c_uint64, c_u64p, c_u64p,
                                     ctypes.POINTER(vp)]),
    "hg_key_free": (None, [vp]),
    "hg_key_switch": (ctypes.c_int, [vp, vp, ctypes.c_int, vp, vp, vp]),
    "hg_relinearize": (ctypes.c_int, [vp, vp, vp, vp, ctypes.c_int, vp, vp, vp]),
    "hg_mul_relin_rescale": (ctypes.c_int, [vp, vp, vp, vp, vp, ctypes.c_int, vp, vp, vp]),
    "hg_apply_galois": (ctypes.c_int, [vp, vp, vp, ctypes.c_int, vp, vp, vp]),
    "hg_apply_galois_hoisted": (ctypes.c_int, [vp, vp, vp, ctypes.c_int, ctypes.c_int, ctypes.POINTER(vp),
                                               ctypes.POINTER(vp), ctypes.POINTER(vp)]),
    "hg_lintrans_create": (ctypes.c_int, [vp, ctypes.c_int, c_u64p, ctypes.c_int, ctypes.c_int,
                                          ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int),
                                          ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(vp)]),
    "hg_lintrans_free": (None, [vp]),
    "hg_lintrans_steps": (ctypes.c_int, [vp, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int64)]),
    "hg_lintrans_apply": (ctypes.c_int, [vp, vp, vp, vp, ctypes.POINTER(vp), ctypes.POINTER(vp), ctypes.c_int, vp,
                                         vp]),
    "hg_encaps_upload": (ctypes.c_int, [vp, ctypes.c_int, c_u64p, c_u64p, c_u64p, c_u64p, ctypes.POINTER(vp)]),
    "hg_encaps_free": (None, [vp]),
    "hg_dense_to_sparse": (ctypes.c_int, [vp, vp, vp, vp, vp, vp]),
    "hg_mod_raise": (ctypes.c_int, [vp, vp, vp, vp, ctypes.c_int, vp, vp]),
    "hg_mul_monomial": (ctypes.c_int, [vp, vp, ctypes.c_int, ctypes.c_uint64, vp]),
    "hg_gemm_plan_create": (ctypes.c_int, [vp, c_i64p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                           ctypes.POINTER(vp)]),
    "hg_gemm_plan_free": (None, [vp]),
    "hg_pcmm_mlwe": (ctypes.c_int, [vp, vp, ctypes.c_int, ctypes.POINTER(vp), ctypes.POINTER(vp), ctypes.c_int,
                                    ctypes.c_int, ctypes.c_int64, ctypes.POINTER(vp), ctypes.c_int, ctypes.POINTER(vp),
                                    ctypes.POINTER(vp)]),
    "hg_gemm_apply": (ctypes.c_int, [vp, vp, vp, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_uint64,
                                     vp, ctypes.c_size_t]),
}


def candidate_paths() -> list[Path]:
    """Where the library is looked for, in order."""
    paths = []
    if os.environ.get("HEMLP_CUDA_LIB"):
        paths.append(Path(os.environ["HEMLP_CUDA_LIB"]))
    here = Path(__file__).resolve().parent
    paths.append(here / LIB_NAME)
    paths.append(here.parent.parent / "build" / "cuda" / LIB_NAME)
    return paths


def _load():
    for path in candidate_paths():
        if path.is_file():
            try:
                lib = ctypes.CDLL(str(path))
            except OSError as e:
                return None, f"{path} exists but does not load ({e}); rebuild it with scripts/build_cuda.sh"
            for name, (res, args) in SIGNATURES.items():
                fn = getattr(lib, name)
                fn.restype, fn.argtypes = res, args
            return lib, str(path)
    where = ", ".join(str(p) for p in candidate_paths())
    return None, (f"the CUDA backend is not built (looked for {where}); build it with scripts/build_cuda.sh on a "
                  "machine with nvcc (make cuda)")


def library():
    """The loaded library; DeviceError naming the fix when it is not built or does not load."""
    with _lock:
        if "lib" not in _state:
            _state["lib"], _state["where"] = _load()
    if _state["lib"] is None:
        raise DeviceError(_state["where"])
    return _state["lib"]


def device_info() -> dict:
    """{'available': bool, 'reason': str, 'name', 'count', 'memory_bytes', 'library'}: costs no device work."""
    try:
        lib = library()
    except DeviceError as e:
        return {"available": False, "reason": str(e), "count": 0}
    count, total = ctypes.c_int(0), ctypes.c_size_t(0)
    name = ctypes.create_string_buffer(256)
    if lib.hg_device_info(ctypes.byref(count), name, 256, ctypes.byref(total)) != 0:
        return {"available": False, "reason": f"CUDA: {lib.hg_last_error().decode()}", "count": 0}
    if count.value == 0:
        return {"available": False, "reason": "no CUDA device", "count": 0, "library": _state["where"]}
    return {"available": True, "reason": "", "count": count.value, "name": name.value.decode(),
            "memory_bytes": total.value, "library": _state["where"]}


def free_memory_bytes() -> int:
    """The device's free memory now (bytes); DeviceError naming the fix without a device or library."""
    free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
    check(library().hg_mem_info(ctypes.byref(free), ctypes.byref(total)), "memory info")
    return int(free.value)


def release(obj, free: str) -> None:
    """Free obj.handle with the library's function `free`, once. Nothing is freed at interpreter exit: the device
    context may be gone by then, and the driver reclaims everything with the process."""
    if getattr(obj, "handle", None) and not sys.is_finalizing():
        getattr(library(), free)(obj.handle)
    obj.handle = None


def check(code: int, what: str) -> None:
    """Raise the typed error for a nonzero status of a library call."""
    if code == 0:
        return
    msg = f"{what}: {library().hg_last_error().decode()}"
    if code == 1:
        raise (LevelError if "level" in msg else ParameterError)(msg)
    if code == 3:
        raise DeviceError(msg + " (device memory exhausted: free device ciphertexts or keys, or use a smaller batch)")
    raise DeviceError(msg)
