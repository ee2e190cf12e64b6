"""Which machine this process runs on, as far as costs go: the CPU model and the SIMD path of hemlp's kernels.

The planner's cost profiles (hemlp.planner.cost_model) are keyed by these two, and the benchmarks record them
(``machine.cpu.model``, ``machine.simd.path`` in every bench/*.json). A foundation module: it imports no other hemlp
module; the native core is asked for its SIMD path only when it can be loaded, so the pure-Python planner still
works before the core is built.
"""
from __future__ import annotations

import os
import platform
from functools import lru_cache
from pathlib import Path

__all__ = ["cpu_model", "simd_path", "SIMD_PATHS"]

#: the native core's kernel families, fastest first (csrc/ring/simd.cpp)
SIMD_PATHS = ("avx512", "avx2", "scalar")


@lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo "model name"; elsewhere platform.processor() or the architecture)."""
    model = platform.processor() or platform.machine()
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return model
    for line in text.splitlines():
        key, _, val = (s.strip() for s in line.partition(":"))
        if key == "model name" and val:
            return val
    return model


def _flags_path() -> str:
    """The best SIMD path the CPU flags allow (HEMLP_SIMD honoured): what the core would pick, for a process
    without the built core."""
    forced = os.environ.get("HEMLP_SIMD", "").strip()
    if forced in SIMD_PATHS:
        return forced
    try:
        flags = next((ln.partition(":")[2].split() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                      if ln.startswith("flags")), [])
    except OSError:
        flags = []
    # the core's rule (csrc/ring/simd.cpp: cpu_has, detect)
    if {"avx512f", "avx512dq"} <= set(flags) and os.environ.get("HEMLP_DISABLE_AVX512", "") in ("", "0"):
        return "avx512"
    return "avx2" if {"avx2", "fma", "bmi2"} <= set(flags) else "scalar"


@lru_cache(maxsize=1)
def simd_path() -> str:
    """The SIMD kernels hemlp's native core runs in this process ("avx512", "avx2" or "scalar"; HEMLP_SIMD forces
    one); without a loadable core, the path the CPU flags allow."""
    try:
        from hemlp._core import ring
        return str(ring.simd_path())
    except Exception:  # noqa: BLE001 - no core built (or a bad HEMLP_SIMD the core reports itself): the flags decide
        return _flags_path()
