"""#29 item 2: the cost model ships and adapts. An installed wheel plans a model exactly as the checkout does with the
same cost profile (the tables are package data: no bench/ needed), and `hemlp calibrate --quick` measures this
machine and writes a profile the planner then uses.

The wheel is built from a copy of the package with the extension the checkout already compiled (placed where
setup.py's build_ext finds it up to date, so nothing is recompiled: ~2 s) and installed into a fresh
`python -m venv --system-site-packages`; the dependencies (numpy, torch) come from this checkout's venv through a
path file, whose editable install of hemlp is not activated there (its .pth runs only in this venv's site
directory), so `import hemlp` in the new venv is the wheel's.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from hemlp.planner import cost_model as cm
from hemlp.planner.cost_model import load_profile, packaged_profile
from tests.planner.test_cost_model import plan_in_subprocess

REPO = Path(__file__).resolve().parents[2]


def run(cmd, **kw):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600, **kw)
    assert p.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
    return p


def build_wheel(tmp: Path) -> Path:
    """A binary wheel of this checkout with its already compiled hemlp._core."""
    core = next((REPO / "hemlp").glob("_core.*.so"), None)
    if core is None:
        pytest.skip("hemlp._core is not built in this checkout (make build)")
    src = tmp / "src"
    src.mkdir()
    for f in ("setup.py", "pyproject.toml", "MANIFEST.in", "README.md"):
        shutil.copy(REPO / f, src / f)
    shutil.copytree(REPO / "csrc", src / "csrc")
    # symbolic links (hemlp/models, hemlp/datasets) copied as the folders they point to, as an sdist carries them
    shutil.copytree(REPO / "hemlp", src / "hemlp", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    built = src / "build" / f"lib.{sysconfig.get_platform()}-cpython-{sys.version_info[0]}{sys.version_info[1]}" / "hemlp"
    built.mkdir(parents=True)
    shutil.copy(core, built / core.name)       # newer than the copied sources: build_ext skips the compile
    run([sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation", "-q", "-w", tmp / "dist"],
        cwd=src)
    return next((tmp / "dist").glob("hemlp-*.whl"))


def test_the_installed_wheel_plans_like_the_checkout(tmp_path):
    pytest.importorskip("torch")
    wheel = build_wheel(tmp_path)
    venv = tmp_path / "venv"
    run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--system-site-packages", "--without-pip",
         venv])
    py = venv / "bin" / "python"
    site = Path(run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    (site / "hemlp_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")   # numpy, torch from .venv
    run([sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-deps", wheel])

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "VIRTUAL_ENV"))}
    env.update({cm.PROFILE_ENV: "packaged:avx512", cm.CACHE_ENV: str(tmp_path / "cache")})
    work_venv, work_repo = tmp_path / "w1", tmp_path / "w2"
    work_venv.mkdir()
    work_repo.mkdir()
    installed, where, opened = plan_in_subprocess(py, work_venv, env)
    assert Path(where).is_relative_to(venv), where                   # the wheel's package, not the checkout
    deps = str(REPO / ".venv") + os.sep                              # numpy, torch: this checkout's venv
    read = [f for f in opened if f.startswith(str(REPO) + os.sep) and not f.startswith(deps)]
    assert read == [], f"the installed product read the checkout: {read}"
    checkout, where, _ = plan_in_subprocess(sys.executable, work_repo, env)
    assert Path(where).is_relative_to(REPO / "hemlp")
    assert installed == checkout
    assert "pipeline: batched k=4 (S2C-first)" in installed, installed
    # without a pin and uncalibrated, the installed product takes its packaged table for this machine's SIMD path
    env[cm.PROFILE_ENV] = "auto"
    p = run([py, "-c", "from hemlp.planner.cost_model import active_profile; p = active_profile(); "
                       "print(p.simd_path, '|', p.source)"], cwd=work_venv, env=env)
    assert "packaged table" in p.stdout and "hemlp calibrate" in p.stdout, p.stdout


def test_hemlp_calibrate_quick_writes_the_profile_the_planner_uses(tmp_path):
    """`hemlp calibrate --quick` (~25 s: core ops and PCMM at N14-d6, bootstrap and k = 2 batch at test-N12-boot, one
    thread) writes this machine's profile into HEMLP_CACHE_DIR, prints what it measured against the packaged table
    and the path; the planner then uses it (its source names the file), its unmeasured figures labelled derived."""
    env = dict(os.environ, **{cm.CACHE_ENV: str(tmp_path), cm.PROFILE_ENV: "auto"})
    hemlp = Path(sys.executable).parent / "hemlp"
    # --boot: one more preset's bootstrap measured here instead of derived (test-N10-boot: not in the tables)
    p = run([hemlp, "calibrate", "--quick", "--boot", "test-N10-boot"], cwd=tmp_path, env=env)
    written = next((tmp_path / "cost_profiles").glob("*.json"))
    assert f"wrote {written}" in p.stdout and "this machine" in p.stdout and "rho k=2 test-N12-boot" in p.stdout
    prof = load_profile(written)
    base = packaged_profile(prof.simd_path if prof.simd_path in cm.packaged_paths() else "avx2")
    assert all(s.startswith(("measured", "= pcmm_mac")) for s in prof.unit_cost_sources.values())
    assert {m.preset for m in prof.bootstrap} == {m.preset for m in base.bootstrap} | {"test-N10-boot"}
    assert all(m.source.startswith("measured") == (m.preset in ("test-N12-boot", "test-N10-boot") and m.threads == 1)
               for m in prof.bootstrap)
    assert "the single bootstrap and the ring's key switches at test-N10-boot" in prof.description
    # --boot also measures that ring's key switches and plaintext products: its factors, shown beside the table's 1
    (ring,) = prof.ring_factors
    assert ring.N == 1024 and set(ring.factors) == {"rotate", "rotate_hoisted", "ct_mul", "pt_mul", "encode",
                                                    "encode_limb"}
    assert ring.source.startswith("measured") and "N=1024 rotate (x unit cost)" in p.stdout
    n12 = [r for r in prof.batch_runs if r.preset == "test-N12-boot"]
    assert len(n12) == 1 and not n12[0].derived and set(n12[0].rho) == {2}
    assert all(r.derived for r in prof.batch_runs if r.preset != "test-N12-boot")
    q = run([sys.executable, "-c", "from hemlp.planner.cost_model import active_profile; print(active_profile().source)"],
            cwd=tmp_path, env=env)
    assert str(written) in q.stdout and "calibrated" in q.stdout
