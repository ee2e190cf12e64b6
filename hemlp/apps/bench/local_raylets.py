"""The processes of local raylets (scripts/local_cluster.py) as the cluster benchmarks read them: the script itself,
each raylet's process tree and its CPU seconds (/proc)."""
from __future__ import annotations

import contextlib
import importlib.util
import os

from hemlp.apps.bench import report

__all__ = ["local_cluster_script", "connected_cluster", "node_trees", "node_cpu", "cpu_since", "proc_cpu"]


def local_cluster_script():
    """scripts/local_cluster.py of this checkout (the measured check starts raylets with it)."""
    path = report.REPO_ROOT / "scripts" / "local_cluster.py"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is not there: --measure runs from a checkout of hemlp")
    spec = importlib.util.spec_from_file_location("local_cluster", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def proc_cpu(pid: int) -> float:
    """The user + system CPU seconds of process `pid` so far."""
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def node_trees(lc, desc) -> dict:
    """{node-manager port: pids of the raylet and every process under it} of the cluster `desc`; lc is
    scripts/local_cluster.py (local_cluster_script), whose /proc scan finds them."""
    procs = {p: pp for p, (pp, _) in lc.processes().items()}
    out = {}
    for port, root in lc.node_pids(desc["temp_dir"]).items():
        found = {root}
        while True:
            kids = {p for p, pp in procs.items() if pp in found} - found
            if not kids:
                break
            found |= kids
        out[port] = (root, found)
    return out


def node_cpu(lc, desc) -> dict:
    """{node-manager port: {pid: CPU seconds}} of every process under each raylet (its workers)."""
    out = {}
    for port, (root, found) in node_trees(lc, desc).items():
        cpu = {}
        for p in found - {root}:
            try:
                cpu[p] = proc_cpu(p)
            except (OSError, ValueError, IndexError):
                continue
        out[port] = cpu
    return out


def cpu_since(before: dict, after: dict) -> dict:
    """{node-manager port (str): CPU seconds its workers spent} between two node_cpu readings (a process that
    started in between counts from zero)."""
    return {str(port): sum(v - before.get(port, {}).get(p, 0.0) for p, v in after[port].items()) for port in after}


@contextlib.contextmanager
def connected_cluster(lc, nodes: int, memory: int, object_store: int, *, health_check_ms: int | None = None,
                      metrics_interval_ms: int | None = None):
    """A fresh local cluster of `nodes` raylets (1 CPU each) that this process's Ray is connected to; yields its
    description; disconnects, stops it and checks that none of its processes survived. health_check_ms /
    metrics_interval_ms: as scripts/local_cluster.py's start (None: Ray's defaults)."""
    import ray

    if ray.is_initialized():        # a Ray of this process's own (a local one) is not the cluster to measure
        ray.shutdown()
    desc = lc.start(int(nodes), memory, cpus=1, object_store=object_store, state=None,
                    health_check_ms=health_check_ms, metrics_interval_ms=metrics_interval_ms)
    try:
        ray.init(address=desc["address"], log_to_driver=False)
        yield desc
    finally:
        if ray.is_initialized():
            ray.shutdown()
        lc.stop_dir(desc["temp_dir"])
    left = lc.cluster_pids(desc["temp_dir"])
    if left:
        raise RuntimeError(f"processes of the local cluster survived: {sorted(left)}")
