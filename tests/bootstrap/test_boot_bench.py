"""Smoke test of ``python -m hemlp.bench boot`` at the insecure test-N12-boot chain (JSON fields, table)."""
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_boot_bench_smoke(tmp_path):
    out = tmp_path / "boot.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in [env.get("PYTHONPATH")] if p])
    r = subprocess.run([sys.executable, "-m", "hemlp.bench", "boot", "--preset", "test-N12-boot", "--allow-insecure",
                        "--threads", "1", "--pair", "--json", str(out)], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["subcommand"] == "boot" and doc["preset"] == "test-N12-boot" and doc["security"] == "INSECURE"
    assert doc["levels_left"] == 3 and doc["slots"] == 2048 and doc["simd_path"] in ("avx512", "avx2", "scalar")
    (res,) = doc["results"]
    assert res["threads"] == 1 and res["bootstrap"]["median_s"] > 0 and res["level_out"] == 3
    assert res["scale_log2"] == 40.0
    assert float(res["max_bits"]) >= 19 and float(res["pair_max_bits"]) >= 18.5
    assert doc["keygen_s"] > 0 and doc["key_bytes_in_memory"] > 0 and doc["peak_rss_gib"] > 0
    # "auto" seeding: the top CtS keys hold a expanded, the rest only b (+ seeds); outputs decrypted noise-free
    assert doc["seeded_keys"] == "auto" and doc["key_bytes_serialised"] < doc["key_bytes_in_memory"]
    assert doc["decrypt_noise"] == "none" and 0 < doc["rss_after_keygen_gib"] <= doc["peak_rss_gib"]
    assert "bootstrap (s)" in r.stdout and "precision max (bits)" in r.stdout
    r = subprocess.run([sys.executable, "-m", "hemlp.bench", "boot", "--preset", "test-N12-boot", "--threads", "1"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and "InsecureParametersError" in r.stderr
