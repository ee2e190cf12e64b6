"""bench decrypt_noise on an insecure small preset: each mode's precision is what its sigma predicts."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_decrypt_noise_smoke(tmp_path):
    out = tmp_path / "noise.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    r = subprocess.run([sys.executable, "-m", "hemlp.bench", "decrypt_noise", "--preset", "test-N12-d6",
                        "--allow-insecure", "--repeats", "1", "--json", str(out)], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())["results"]
    assert {(x["ciphertext"].split()[0], x["mode"]) for x in res} == {
        (c, m) for c in ("fresh", "after") for m in ("none", "standard", "flood")}
    for x in res:
        if x["mode"] == "none":
            assert x["measured_bits_max"] in (math.inf, "inf")
        else:  # the worst slot of 2048 lies 0-5 bits below the per-slot standard deviation
            assert x["est_bits_per_slot"] - 5.5 < x["measured_bits_max"] < x["est_bits_per_slot"] + 0.5
    flood = [x for x in res if x["mode"] == "flood"][0]
    assert flood["log2_sigma"] > 26.5  # 0.5 log2(12) + 15 + 10
