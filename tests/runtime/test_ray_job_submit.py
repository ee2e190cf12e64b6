"""docs/ray.md's `ray job submit` steps, exactly: a head started with `ray start --head` on 127.0.0.1, the batch
script submitted with `ray job submit`, its outputs decrypted and checked, the cluster stopped. Slow (starting a
cluster and a job costs ~20 s): make test-slow.

The cluster lives in its own --temp-dir and is stopped by ending its own processes (those whose command line names
that directory, and their children), not by `ray stop`, which would end every Ray on the machine, other users'
included; the processes are ended when the test fails too."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow
ray = pytest.importorskip("ray")
torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
RAY = Path(sys.executable).with_name("ray")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cluster_pids(temp_dir: str) -> set:
    """The processes of the cluster in temp_dir: those whose command line names one of its sessions, and their
    descendants (workers, agents, the job's driver)."""
    procs = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        procs[int(d)] = (ppid, cmd)
    found = {p for p, (_, c) in procs.items() if f"{temp_dir}/session_" in c}
    while True:
        kids = {p for p, (pp, _) in procs.items() if pp in found} - found
        if not kids:
            break
        found |= kids
    return found - {os.getpid(), os.getppid()}


def stop_cluster(temp_dir: str) -> None:
    """SIGTERM to the cluster's processes, SIGKILL to those left after 5 s."""
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 1.0)):
        pids = cluster_pids(temp_dir)
        for p in pids:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while pids and time.monotonic() < deadline and cluster_pids(temp_dir):
            time.sleep(0.2)


@pytest.fixture
def head():
    """`ray start --head` on 127.0.0.1 with 2 CPUs (hemlp importable by its workers), stopped afterwards."""
    if not RAY.exists():
        pytest.skip("the `ray` command is not installed next to this Python")
    temp_dir = tempfile.mkdtemp(prefix="hrj", dir="/tmp")     # short: Ray's socket paths live under it
    port, dash = free_port(), free_port()
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               RAY_free_objects_period_milliseconds="0", RAY_idle_worker_killing_time_threshold_ms="600000")
    try:
        subprocess.run([str(RAY), "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}",
                        "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}", "--num-cpus=2",
                        f"--temp-dir={temp_dir}", "--disable-usage-stats"],
                       env=env, check=True, capture_output=True, text=True, timeout=180)
        yield f"http://127.0.0.1:{dash}", env
    finally:
        stop_cluster(temp_dir)
        left = cluster_pids(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)
    assert not left, f"processes of the test's Ray cluster survived: {sorted(left)}"


def test_ray_job_submit_of_the_batch_script(head, tmp_path):
    import hemlp

    address, env = head
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
    p = subprocess.run([str(RAY), "job", "submit", "--address", address, "--", sys.executable,
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
