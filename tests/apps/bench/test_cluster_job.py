"""`python -m hemlp.bench cluster --run`: issue #30's job run encrypted on a local raylet, at the insecure test preset
and a small width, on synthetic EMNIST files (the real run uses ../shared/data): encrypted = simulated on every
image, the memory sampled, the key file written once (and pruned after the job), the input encrypted to a file read
mapped (deleted after the job), the output's bits the same as in process."""
import argparse
import os

import numpy as np
import pytest

from hemlp.apps.bench import cluster_job
from hemlp.apps.bench.local_raylets import local_cluster_script
from hemlp.datasets.synthetic import write_emnist


def test_the_job_on_one_raylet(tmp_path, monkeypatch):
    pytest.importorskip("ray")
    lc = local_cluster_script()
    if not lc.RAY.exists():
        pytest.skip("the `ray` command is not installed next to this Python")
    from hemlp.runtime.ray import session

    session.shutdown_local()
    write_emnist(tmp_path / "data", split="mnist", n_train=1100, n_test=100)
    p = argparse.ArgumentParser()
    cluster_job.add_arguments(p)
    args = p.parse_args(["--run", "--raylets", "1", "--preset", "test-N12-boot", "--batch", "2048", "--hidden", "8",
                         "--epochs", "1", "--degree", "7", "--target", "0.5", "--data-root", str(tmp_path / "data"),
                         "--work-dir", str(tmp_path / "work"), "--node-memory", "1.5e9", "--object-store", "2.5e8",
                         "--check-in-process"])
    run = cluster_job.run_job(args)
    assert run["measured"] and run["security"] == "INSECURE" and run["batch"] == 2048
    assert run["bootstrap_points"] >= 1
    (r,) = run["runs"]
    assert r["raylets"] == 1 and r["images"] == 2048
    assert r["encrypted_equals_simulated"] == 2048
    assert r["max_abs_error_vs_simulated"] < 1e-2
    assert r["bit_identical_to_first"] and run["bits_compared_to"] == "the in-process run"
    assert r["memory_samples"] >= 2 and r["peak_machine_used_bytes"] > 0
    assert len(r["peak_private_bytes_by_node"]) == 1 and min(r["peak_pss_bytes_by_node"].values()) > 0
    assert r["cpu_seconds"] > 0 and r["wall_seconds"] > 0
    # the key file: written once into the private folder, as large as the key set, pruned after the job
    keys = tmp_path / "work" / "keys"
    assert oct(os.stat(keys).st_mode & 0o777) == "0o700"
    assert r["key_file_bytes"] > 0 and not list(keys.glob("*.keys"))
    # the input: encrypted to a file, read mapped (one raylet: bootstraps step by step import all of it), deleted
    assert run["input_file_bytes"] > 0 and run["input_file"] is None and not (tmp_path / "work" / "input.hct").exists()
    assert r["input_import"]["imported"] >= 784 and r["peak_driver_private_bytes"] > 0
    assert 0 <= r["accuracy"] <= 1 and np.isfinite(run["torch_accuracy"])
    # the trained MLP is cached: a second job does not train again
    assert (tmp_path / "work" / "mlp_h8_e1_s0.pt").is_file()
