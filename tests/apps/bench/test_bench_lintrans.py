"""Smoke test of ``python -m hemlp.bench lintrans`` on a tiny ring (set B's chain at N = 2^11)."""
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_lintrans_bench_smoke(tmp_path):
    out = tmp_path / "lt.json"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-m", "hemlp.bench", "lintrans", "--log-n", "11", "--depth", "2",
                        "--repeats", "1", "--threads", "1", "--json", str(out)], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    doc = json.loads(out.read_text())
    assert doc["subcommand"] == "lintrans" and doc["depth"] == 2 and len(doc["levels"]) == 2
    for lv in doc["levels"]:
        assert lv["auto"] in ("single", "double")
        for mode in ("python", "single", "double"):
            run = lv["runs"][f"{mode}/1"]
            assert run["median_s"] > 0 and run["bits"] >= 20   # every output checked against numpy
    assert set(doc["totals_s"]) == {"python/1", "single/1", "double/1"}
