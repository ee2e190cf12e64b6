"""Table printing and JSON writing shared by every ``hemlp.bench`` subcommand.

Every JSON file a benchmark writes has the same envelope::

    {"schema": "hemlp-bench/1", "subcommand": "core", "machine": {...}, ...payload...}

``machine`` records what is needed to compare two files: CPU model and cores, the SIMD path of
hemlp's kernels (``machine.simd.path``: avx512 / avx2 / scalar), Python/numpy, BLAS
(threadpoolctl when installed, else numpy's build config), date, git commit, and the environment
variables that change the speed (OPENBLAS_*, OMP_*, MKL_*, HEMLP_*).
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

SCHEMA = "hemlp-bench/1"
REPO_ROOT = Path(__file__).resolve().parents[3]
TMP_ROOT = Path(tempfile.gettempdir()).resolve()
_ENV_PREFIXES = ("OPENBLAS_", "OMP_", "MKL_", "GOTO", "HEMLP_", "KMP_")


# ----------------------------------------------------------------------------- machine info
def _cpuinfo() -> dict:
    info = {"model": platform.processor() or platform.machine(), "logical_cores": os.cpu_count()}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return info
    physical = set()
    phys_id = core_id = None
    flags = ""
    for line in text.splitlines():
        if ":" not in line:
            continue
        key, _, val = (s.strip() for s in line.partition(":"))
        if key == "model name" and info["model"] in ("", platform.machine(), platform.processor()):
            info["model"] = val
        elif key == "physical id":
            phys_id = val
        elif key == "core id":
            core_id = val
            physical.add((phys_id, core_id))
        elif key == "flags" and not flags:
            flags = val
    if physical:
        info["physical_cores"] = len(physical)
    wanted = ("avx2", "avx512f", "avx512ifma", "bmi2", "adx", "fma")
    info["simd_flags"] = [f for f in wanted if f in flags.split()]
    try:
        info["affinity_cores"] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        pass
    return info


def _git() -> dict:
    def run(*args):
        try:
            r = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                               timeout=10)
            return r.stdout.strip() if r.returncode == 0 else None
        except (OSError, subprocess.SubprocessError):
            return None
    commit = run("rev-parse", "HEAD")
    status = run("status", "--porcelain", "--untracked-files=no")
    if os.environ.get("HEMLP_GIT_COMMIT"):
        # a copy of the tree whose .git is not the tree's history (a lent GPU machine): the commit the caller names
        return {"commit": os.environ["HEMLP_GIT_COMMIT"], "dirty": None, "source": "HEMLP_GIT_COMMIT",
                "local_git_head": commit}
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def _blas() -> dict:
    out = {}
    try:
        import numpy as np
        out["numpy"] = np.__version__
    except ImportError:
        return {"numpy": None}
    try:
        from threadpoolctl import threadpool_info
        out["threadpools"] = [
            {k: d.get(k) for k in ("user_api", "internal_api", "version", "num_threads",
                                   "threading_layer", "architecture", "filepath")}
            for d in threadpool_info()
        ]
    except ImportError:
        out["threadpools"] = "threadpoolctl not installed"
    except Exception as e:  # noqa: BLE001 - never let machine info break a benchmark
        out["threadpools"] = f"threadpoolctl failed: {e}"
    try:
        cfg = np.show_config(mode="dicts")  # numpy >= 1.25
        deps = cfg.get("Build Dependencies", {})
        out["numpy_blas"] = {k: {kk: v.get(kk) for kk in ("name", "version", "found")}
                             for k, v in deps.items() if isinstance(v, dict)}
    except Exception:  # noqa: BLE001
        pass
    return out


def process_status_bytes(field: str, pid: int | str = "self") -> int | None:
    """One memory field of a process's /proc status (VmRSS, VmHWM, RssAnon, ...) in bytes; None where it cannot be
    read (not Linux, no such field)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def load_average() -> list[float] | None:
    """1/5/15-minute load average: a benchmark on a busy machine is not comparable."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def busy_warning() -> str | None:
    """A warning when other processes use the CPU (1-minute load above 0.5)."""
    la = load_average()
    if la and la[0] > 0.5:
        return (f"machine busy before the benchmark (load average {la[0]:.2f}): other processes "
                "compete for the cores; multi-thread timings especially are unreliable")
    return None


def simd_info() -> dict:
    """The SIMD kernels hemlp's native code runs in this process ("avx512", "avx2" or "scalar",
    chosen once per process; HEMLP_SIMD forces one) and the paths this CPU has."""
    try:
        from hemlp._core import ring
    except ImportError as e:
        return {"path": None, "error": f"hemlp._core not importable: {e}"}
    try:
        return {"path": ring.simd_path(), "available": [p.strip() for p in ring.simd_available().split(",")]}
    except Exception as e:  # noqa: BLE001 - a bad HEMLP_SIMD is reported by the benchmark itself
        return {"path": None, "error": f"{type(e).__name__}: {e}"}


def machine_info() -> dict:
    """Everything needed to tell two benchmark files apart."""
    return {
        "load_average": load_average(),
        "cpu": _cpuinfo(),
        "simd": simd_info(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "blas": _blas(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "git": _git(),
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(_ENV_PREFIXES)},
    }


# ----------------------------------------------------------------------------- JSON
def _clean(obj):
    """JSON has no inf/nan: write them as strings so every reader can load the file. Paths inside the checkout
    (threadpoolctl's library files under .venv, a built CUDA library) are written relative to it, and those in the
    temporary folder (libraries unpacked there on a lent machine) as $TMPDIR/...: the JSON names no machine's work or
    temporary folder."""
    if isinstance(obj, str):
        return obj.replace(f"{REPO_ROOT}/", "").replace(f"{TMP_ROOT}/", "$TMPDIR/")
    if isinstance(obj, float):
        if math.isnan(obj):
            return "nan"
        if math.isinf(obj):
            return "inf" if obj > 0 else "-inf"
        return obj
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalars
        return _clean(obj.item())
    return obj


def envelope(subcommand: str, payload: dict, machine: dict | None = None) -> dict:
    return {"schema": SCHEMA, "subcommand": subcommand,
            "machine": machine if machine is not None else machine_info(), **payload}


def write_json(path, subcommand: str, payload: dict, machine: dict | None = None) -> dict:
    """Write ``payload`` wrapped in the common envelope to ``path`` (``-`` = stdout)."""
    doc = _clean(envelope(subcommand, payload, machine))
    text = json.dumps(doc, indent=2, sort_keys=False) + "\n"
    if str(path) == "-":
        sys.stdout.write(text)
    else:
        p = Path(path)
        if p.parent and not p.parent.exists():
            p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(p.name + ".part")
        tmp.write_text(text)
        tmp.replace(p)
    return doc


def publish(payload: dict, subcommand: str, json_path, machine: dict | None, busy: str | None, print_table) -> int:
    """The end of a bench run: the busy-machine warning among the payload's notes, the table, the JSON (when a
    path was given); returns the exit status 0."""
    if busy:
        payload["notes"].append(busy)
    print_table(payload)
    if json_path:
        save_json(json_path, subcommand, payload, machine=machine)
    return 0


def save_json(path, subcommand: str, payload: dict, machine: dict | None = None) -> dict:
    """write_json, then say where the file went (nothing extra when the JSON itself goes to stdout)."""
    doc = write_json(path, subcommand, payload, machine)
    if str(path) != "-":
        print(f"wrote {path}")
    return doc


# ----------------------------------------------------------------------------- formatting
def fmt_seconds(s) -> str:
    """Seconds as a short human string in ms (or µs below 0.1 ms)."""
    if s is None:
        return "n/a"
    if isinstance(s, str):
        return s
    if s < 1e-4:
        return f"{s * 1e6:.1f} µs"
    if s < 10:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def fmt_ms(s) -> str:
    if s is None or isinstance(s, str):
        return "n/a" if s is None else s
    return f"{s * 1e3:.3f}" if s < 1e-3 else f"{s * 1e3:.2f}"


def fmt_bits(b) -> str:
    if b is None:
        return "n/a"
    if isinstance(b, str):
        return b
    return "exact" if math.isinf(b) else f"{b:.1f}"


def fmt_ratio(r) -> str:
    if r is None:
        return "n/a"
    return f"{r:.2f}x"


def table(headers, rows, title: str | None = None, file=None) -> str:
    """Plain-text table; first column left-aligned, the others right-aligned. Returns the text."""
    rows = [["" if c is None else str(c) for c in r] for r in rows]
    headers = [str(h) for h in headers]
    widths = [len(h) for h in headers]
    for r in rows:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))

    def line(cells):
        return "  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i])
                         for i, c in enumerate(cells)).rstrip()

    out = []
    if title:
        out.append(title)
    out.append(line(headers))
    out.append("  ".join("-" * w for w in widths))
    out.extend(line(r) for r in rows)
    text = "\n".join(out)
    print(text, file=file or sys.stdout, flush=True)
    return text


def benchmark_env(base: dict | None = None) -> dict:
    """Environment for a benchmark *subprocess*: the machine's OPENBLAS_CORETYPE and
    OPENBLAS_L2_SIZE are removed (they slow OpenBLAS down here); nothing else changes, and the
    calling process's own environment is left alone."""
    env = dict(os.environ if base is None else base)
    env.pop("OPENBLAS_CORETYPE", None)
    env.pop("OPENBLAS_L2_SIZE", None)
    return env
