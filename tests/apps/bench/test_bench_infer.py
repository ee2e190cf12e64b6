import json
import subprocess
import sys


def test_infer_bench_smoke(tmp_path):
    out = tmp_path / "infer.json"
    r = subprocess.run([sys.executable, "-W", "ignore", "-m", "hemlp.bench", "infer", "--preset", "test-N12-d6",
                        "--allow-insecure", "--batch", "128", "--epochs", "1", "--single-images", "3", "--json", str(out)],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["agreement"] > 0.95
    assert doc["max_abs_err_vs_simulate"] < 1e-3
    assert doc["run_s"] > 0 and doc["eval_key_bytes"] > 0
    single = doc["single_image"]
    assert single["layout"] == "packed" and single["n"] == 3 and single["agreement"] == 1.0
    assert single["input_ciphertexts"] >= 1 and single["run_s_median"] > 0 and single["run_s_layout_a"] > 0


def test_infer_layouts_bench_smoke(tmp_path):
    """--layout-batches: (A), (P) and (A') on the same batch, each checked against the plaintext model."""
    out = tmp_path / "layouts.json"
    r = subprocess.run([sys.executable, "-W", "ignore", "-m", "hemlp.bench", "infer", "--layout-batches", "128",
                        "--preset", "test-N12-d6", "--mlwe-preset", "test-N12-d18", "--allow-insecure", "--epochs", "1",
                        "--run-repeats", "1", "--json", str(out)], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(out.read_text())
    res = {x["layout"]: x for x in doc["results"]}
    assert set(res) == {"batch", "packed", "mlwe"}
    for x in res.values():
        assert x["agreement"] > 0.95 and x["run_s"] > 0 and x["eval_key_bytes"] > 0 and x["estimate_s"] > 0
    assert res["mlwe"]["k"] == 32 and res["mlwe"]["input_ciphertexts"] == 25     # 784 rows, 32 per ciphertext


def test_weights_bench_smoke(tmp_path):
    out = tmp_path / "w.json"
    # two CCMM layers + x^2 = 7 levels: the 128-bit N15-d10 set (no insecure preset is that deep); tiny dims
    r = subprocess.run([sys.executable, "-W", "ignore", "-m", "hemlp.bench", "weights", "--hidden", "4",
                        "--batch", "2", "--downsample", "7", "--epochs", "1", "--json", str(out)],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["agreement"] == 1.0 and doc["max_abs_err_vs_plaintext"] < 1e-3
    assert doc["rotation_keys"] > 0 and doc["run_s"] > 0 and len(doc["blocks"]) == 2
