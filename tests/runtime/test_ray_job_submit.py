"""docs/ray.md's `ray job submit` steps, exactly: a head started with `ray start --head` on 127.0.0.1, the batch
script submitted with `ray job submit`, its outputs decrypted and checked, the cluster stopped. Slow (starting a
cluster and a job costs ~20 s): make test-slow.

The cluster lives in its own --temp-dir and is stopped by ending its own processes (those whose command line names
that directory, and their children), not by `ray stop`, which would end every Ray on the machine, other users'
included; the processes are ended when the test fails too."""
import json
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest

from hemlp.apps.bench.cluster import local_cluster_script

pytestmark = pytest.mark.slow
ray = pytest.importorskip("ray")
torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def head():
    """`ray start --head` on 127.0.0.1 with 2 CPUs (hemlp importable by its workers), stopped afterwards by ending
    the processes of its directory (scripts/local_cluster.py: stop_dir fails when one survives)."""
    lc = local_cluster_script()
    if not lc.RAY.exists():
        pytest.skip("the `ray` command is not installed next to this Python")
    temp_dir = tempfile.mkdtemp(prefix="hrj", dir="/tmp")     # short: Ray's socket paths live under it
    port, dash = lc.free_port(), lc.free_port()
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), **lc.RAY_ENV)
    try:
        subprocess.run([str(lc.RAY), "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}",
                        "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}", "--num-cpus=2",
                        f"--temp-dir={temp_dir}", "--disable-usage-stats"],
                       env=env, check=True, capture_output=True, text=True, timeout=180)
        yield f"http://127.0.0.1:{dash}", env, lc.RAY
    finally:
        lc.stop_dir(temp_dir)


def test_ray_job_submit_of_the_batch_script(head, tmp_path):
    import hemlp

    address, env, ray_cmd = head
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.Linear(8, 3)).eval()
    rng = np.random.default_rng(4)
    xs = [rng.uniform(-1, 1, (5, 16)) + np.linspace(-0.5, 0.3, 16) * i for i in range(3)]   # asymmetric inputs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = hemlp.compile(net, xs[0], batch_size=8, allow_insecure=True)
        cm.save(tmp_path / "model")
        sk, ek = cm.keygen()
        ek.save(tmp_path / "eval.keys", cm.context)
        (tmp_path / "cts").mkdir()
        for i, x in enumerate(xs):
            cm.encrypt(x, sk).save(tmp_path / "cts" / f"x{i}.ct")
    # docs/ray.md: token authentication (Ray >= 2.52 turns it on where ~/.ray/auth_token exists) -> RAY_AUTH_MODE
    submit_env = dict(env, RAY_AUTH_MODE="token") if (Path.home() / ".ray" / "auth_token").exists() else env
    p = subprocess.run([str(ray_cmd), "job", "submit", "--address", address, "--", sys.executable,
                        str(REPO / "scripts" / "ray_batch_infer.py"), str(tmp_path / "cts"),
                        "-o", str(tmp_path / "out"),
                        "--model", str(tmp_path / "model"), "--keys", str(tmp_path / "eval.keys"), "--allow-insecure",
                        "--no-progress", "--json", str(tmp_path / "summary.json")],
                       env=submit_env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and "succeeded" in p.stdout + p.stderr, p.stdout[-3000:] + p.stderr[-3000:]
    assert "3 done, 0 already done, 0 failed" in p.stdout + p.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["done"] == 3 and summary["failed"] == {}, summary
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, x in enumerate(xs):
            y = cm.decrypt(cm.load_encrypted(tmp_path / "out" / f"x{i}.ct"), sk)
            assert np.max(np.abs(y - cm.simulate(x))) < 1e-5
