"""``python -m hemlp.bench zoo`` end to end on small synthetic EMNIST files at a test preset: one zoo model compiled
from torch and ONNX in child processes, its row in the table and the JSON (compile time, memory, plan, agreement)."""
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def run_zoo(tmp_path, *options):
    """(completed process, JSON path) of the bench on lenet5 over small synthetic EMNIST files at test-N12-boot."""
    from hemlp.datasets.synthetic import write_emnist

    write_emnist(tmp_path / "data", "mnist", 300, 60)
    out = tmp_path / "zoo.json"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-m", "hemlp.bench", "zoo", "--data-root", str(tmp_path / "data"),
                        "--models", "lenet5", "--calibration", "100", "--test", "30", "--preset", "test-N12-boot",
                        "--target", "0.5", "--server-memory", "none", *options, "--json", str(out)], cwd=REPO,
                       env=env, capture_output=True, text=True, timeout=900)
    return r, out


def test_zoo_bench_rows(tmp_path):
    r, out = run_zoo(tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert r.stdout.count("hemlp zoo (test-N12-boot, one thread)") == 1
    rows = json.loads(out.read_text())["rows"]
    assert [(x["model"], x["frontend"]) for x in rows] == [("lenet5", "torch"), ("lenet5", "onnx")]
    for x in rows:
        assert "error" not in x, x
        assert x["compile_seconds"] > 0 and x["peak_rss_gib"] >= x["rss_before_compile_gib"] > 0
        assert x["test_images"] == 30 and x["calibration_images"] == 100 and len(x["activations"]) == 4
        assert x["agreement"] >= 0.5 and x["bootstrap_points"] >= 1 and x["estimated_seconds"] > 0
        assert x["server_memory_budget"] is None and x["estimated_server_gib"] > 0   # --server-memory none


def test_zoo_bench_refuses_an_unknown_model(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-m", "hemlp.bench", "zoo", "--models", "resnet21"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "unknown zoo model" in r.stderr and "resnet20" in r.stderr


def test_a_layout_simulated_by_its_lowered_steps(tmp_path):
    """--layout batch --simulate steps (as the CIFAR rows of layout (A)): the row says how it was simulated."""
    r, out = run_zoo(tmp_path, "--frontends", "torch", "--layout", "batch", "--simulate", "steps")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    [x] = json.loads(out.read_text())["rows"]
    assert x["layout"] == "batch" and x["settings"]["layout"] == "batch" and x["settings"]["simulate"] == "steps"
    assert x["simulated_with"].startswith("the plan's lowered steps") and x["simulate_seconds"] > 0
    assert x["test_images"] == 30 and x["agreement"] >= 0.5
    assert x["peak_rss_with_simulate_gib"] >= x["peak_rss_gib"]


def test_encrypted_images_in_a_row(tmp_path):
    """--encrypt 2 (layout P, one image per ciphertext): the row runs two test images encrypted and compares each
    decrypted output with the layout's own simulation of it."""
    r, out = run_zoo(tmp_path, "--frontends", "torch", "--layout", "packed", "--encrypt", "2")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    [x] = json.loads(out.read_text())["rows"]
    assert x["settings"]["encrypt"] == 2 and x["encrypted_images"] == 2 and len(x["encrypted_runs"]) == 2
    assert x["keygen_seconds"] > 0 and all(e["seconds"] > 0 for e in x["encrypted_runs"])
    assert x["encrypted_top1_equal_simulated"] == 2 and x["encrypted_max_abs_diff"] < 1e-2
    assert x["load_average"]["before"] is not None
