"""#19 done-when: the README's commands run as printed in a fresh venv (slow: builds the C++ core from the sdist).

A new virtual environment gets only what setup.py's build needs (numpy, pybind11, setuptools, wheel) and pytest,
then `pip install`s the sdist built from this checkout (which also checks MANIFEST.in: the headers, the Makefile,
...). In that base install (no torch / onnx / ray / tqdm), from a directory outside the checkout:

* `make demo` is `hemlp demo --model mlp`: without the ml extra it says so and runs the core demo (128-bit);
* `make test`'s quick variant: a copy of tests/fhe/test_encrypt.py and test_serialize.py against the installed
  package;
* the README's command-line section starts with `hemlp <command> --help` for every command.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run(cmd, cwd=None, env=None, timeout=3600):
    p = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{' '.join(map(str, cmd))} failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_readme_commands_in_a_fresh_venv(tmp_path):
    venv, work = tmp_path / "venv", tmp_path / "work"
    work.mkdir()
    run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", venv])
    py, hemlp = venv / "bin" / "python", venv / "bin" / "hemlp"
    run([py, "-m", "pip", "install", "-q", "numpy", "pybind11", "setuptools", "wheel", "pytest", "pytest-timeout"])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "VIRTUAL_ENV"))}
    if shutil.which("ccache"):
        env.update(CC="ccache gcc", CXX="ccache g++", CCACHE_NOHASHDIR="1")
    dist = tmp_path / "dist"
    run([py, "setup.py", "-q", "sdist", "-d", dist], cwd=REPO, env=env)
    sdist = next(dist.glob("hemlp-*.tar.gz"))
    run([py, "-m", "pip", "install", "-q", "--no-build-isolation", sdist], cwd=work, env=env)

    p = run([py, "-c", "import hemlp, hemlp._core; print(hemlp.__file__)"], cwd=work, env=env)
    assert str(venv) in p.stdout                                    # the installed package, not the checkout
    for cmd in ("compile", "keygen", "encrypt", "run", "decrypt", "batch", "demo"):
        run([hemlp, cmd, "--help"], cwd=work, env=env)
    p = run([hemlp, "demo", "--model", "mlp"], cwd=work, env=env)  # `make demo`
    assert "pip install 'hemlp[ml]'" in p.stderr and "demo: OK" in p.stdout

    tests = work / "tests"                                          # `make test`, quick variant
    (tests / "fhe").mkdir(parents=True)
    for f in ("__init__.py", "conftest.py"):
        shutil.copy(REPO / "tests" / f, tests / f)
    for f in ("__init__.py", "conftest.py", "test_encrypt.py", "test_serialize.py"):
        shutil.copy(REPO / "tests" / "fhe" / f, tests / "fhe" / f)
    shutil.copy(REPO / "pyproject.toml", work / "pyproject.toml")   # the suite's pytest settings
    p = run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/fhe"], cwd=work, env=env)
    assert " passed" in p.stdout and " failed" not in p.stdout
