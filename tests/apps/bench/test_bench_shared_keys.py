"""``python -m hemlp.bench shared_keys`` at the insecure test-N10-boot preset: the processes mapping one shared key
file hold one copy between them (their Pss of the mapping sums to the file), each resident in full."""
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_shared_keys_bench_measures_one_copy(tmp_path):
    out = tmp_path / "shared.json"
    r = subprocess.run([sys.executable, "-m", "hemlp.bench", "shared_keys", "--preset", "test-N10-boot",
                        "--allow-insecure", "--processes", "2", "--private", "1", "--json", str(out)],
                       cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    d = json.loads(out.read_text())
    assert abs(d["mapped_pss_copies"] - 1) < 0.05
    mapped = [row for row in d["rows"] if row["mode"] == "mapped"]
    assert len(mapped) == 2 and all(row["map_Rss"] * 1024 >= 0.98 * d["file_bytes"] for row in mapped)
    assert [row["mode"] for row in d["rows"]].count("private") == 1
