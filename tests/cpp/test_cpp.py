"""Build and run every C++ test in tests/cpp (each names the csrc sources it needs in a `// SOURCES:` line).

A C++ test prints its failed checks and "N passed, N failed", and exits non-zero on any failure; this runs it
with --no-timing and requires both a clean exit and a positive pass count with no failure. Compiled with the
extension's flags (-Wall -Wextra, warnings are errors here: the C++ side is kept warnings-clean) and BLAS from
pkg-config, as setup.py does.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
TESTS = sorted(HERE.glob("test_*.cpp"))


def blas_flags() -> dict:
    """{"cflags": [...], "libs": [...]} of the first BLAS pkg-config knows (setup.py looks them up the same way)."""
    for pkg in ("openblas", "cblas", "blas"):
        r = subprocess.run(["pkg-config", "--cflags", "--libs", pkg], capture_output=True, text=True)
        if r.returncode == 0:
            flags = r.stdout.split()
            return dict(cflags=[f for f in flags if not f.startswith(("-l", "-L"))],
                        libs=[f for f in flags if f.startswith(("-l", "-L"))])
    pytest.fail("no BLAS found by pkg-config (openblas, cblas, blas): sudo apt-get install libopenblas-dev pkg-config")


def _sources(test: Path) -> list[str]:
    m = re.search(r"^// SOURCES:(.*)$", test.read_text(), re.M)
    return m.group(1).split() if m else []


def test_every_cpp_test_is_found():
    assert TESTS and all(_sources(t) for t in TESTS), "each tests/cpp/test_*.cpp needs a // SOURCES: line"


@pytest.mark.parametrize("test", TESTS, ids=[t.stem for t in TESTS])
def test_cpp(test, tmp_path):
    cxx = os.environ.get("CXX", "g++").split()
    if shutil.which(cxx[-1]) is None:
        pytest.fail(f"no C++ compiler ({cxx[-1]}): install g++ (make sysdeps)")
    blas = blas_flags()
    exe = tmp_path / test.stem
    cmd = (cxx + ["-std=c++17", "-O2", "-fopenmp", "-Wall", "-Wextra", "-Werror", "-I", str(ROOT / "csrc")]
           + blas["cflags"] + [str(test)] + [str(ROOT / s) for s in _sources(test)] + blas["libs"] + ["-o", str(exe)])
    build = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, f"build failed:\n{' '.join(cmd)}\n{build.stderr[-4000:]}"
    run = subprocess.run([str(exe), "--no-timing"], capture_output=True, text=True, timeout=600)
    m = re.search(r"(\d+) passed, (\d+) failed", run.stdout)
    assert run.returncode == 0 and m and int(m.group(1)) > 0 and int(m.group(2)) == 0, run.stdout[-4000:]
