import json
import subprocess
import sys


def test_pcmm_bench_smoke(tmp_path):
    out = tmp_path / "pcmm.json"
    r = subprocess.run([sys.executable, "-W", "ignore", "-m", "hemlp.bench", "pcmm", "--preset", "test-N10",
                        "--allow-insecure", "--sizes", "16", "--threads", "1", "--repeats", "1", "--fresh", "16", "--json", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    fmts = {rec["format"] for rec in doc["results"]}
    assert fmts == {"rlwe", "mlwe", "msrlwe", "msrlwe+pre"}
    fresh = {rec["path"]: rec for rec in doc["results"] if rec.get("fresh")}
    assert set(fresh) == {"fresh-top", "compiled", "compiled-L0"}
    assert fresh["fresh-top"]["level"] == 3 and fresh["compiled"]["level"] == 1  # test-N10: 4 primes, depth 1
    # q_0 = 2^50 at scale 2^40 leaves the unrescaled layer too few weight bits: recorded as skipped
    assert "skipped" in fresh["compiled-L0"]
    for rec in doc["results"]:
        if "skipped" in rec:
            continue
        assert rec["pcmm_s"] > 0 and rec["gemm_s"] > 0
        assert rec["bits"] > 8  # every product decrypts to numpy's
