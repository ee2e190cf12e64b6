"""A local multi-node Ray cluster: several raylets on this machine, as a real cluster's nodes would be.

    python scripts/local_cluster.py start --nodes 3 --memory 4GiB      # prints the address and a state file
    python -c "import ray; ray.init(address='127.0.0.1:PORT')"          # or compiled.run(..., address=...)
    python scripts/local_cluster.py status
    python scripts/local_cluster.py stop

``start`` runs ``ray start --head`` (node 0, which also runs tasks) and ``ray start --address ...`` for every other
node, each with ``--num-cpus`` CPUs (default 1), ``--memory`` bytes of Ray's memory resource (what hemlp's
``node_memory='auto'`` reads) and its own object store, all on 127.0.0.1 with free ports, in one short temporary
directory. It records the nodes (the raylet's pid and node-manager port, which ``ray.nodes()`` reports as
NodeManagerPort) in a JSON state file. ``stop`` ends exactly the processes of that directory (the raylets, the GCS,
the workers and their agents), never another Ray on the machine: ``ray stop`` would end every Ray of this user,
other people's included. docs/ray.md has the same steps for a cluster of real machines.

The functions (start / stop / status / node_pids, and for tests of Ray clusters in general processes / cluster_pids /
driver_auth) are what the tests use (tests/runtime/test_ray_nodes.py, tests/runtime/test_ray_job_submit.py,
tests/apps/bench/test_cluster.py) and hemlp.apps.bench.cluster's measured check.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RAY = Path(sys.executable).with_name("ray")
#: where start records the cluster unless --state says otherwise
DEFAULT_STATE = Path(tempfile.gettempdir()) / f"hemlp-local-cluster-{os.getuid()}.json"
#: hemlp's settings for the raylets it starts (hemlp.runtime.ray.session.LOCAL_SYSTEM_CONFIG, as environment)
RAY_ENV = {"RAY_free_objects_period_milliseconds": "0", "RAY_idle_worker_killing_time_threshold_ms": "600000"}
UNITS = {"": 1, "b": 1, "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "kib": 2 ** 10, "mib": 2 ** 20, "gib": 2 ** 30}


def parse_bytes(text) -> int:
    """'4GiB', '512MB', '1e9' or an int -> bytes."""
    m = re.fullmatch(r"\s*([0-9.eE+]+)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in UNITS:
        raise ValueError(f"not a size: {text!r} (bytes, or a number with KB/MB/GB/KiB/MiB/GiB)")
    return int(float(m.group(1)) * UNITS[m.group(2).lower()])


def auth_env() -> dict:
    """RAY_AUTH_MODE=token where this user has a Ray token (~/.ray/auth_token): Ray >= 2.52 then authenticates
    every connection, and a process without the mode set (a `ray start --address`, a driver's ray.init) is
    refused. Set it in the driver's environment too (the tests' fixture does)."""
    if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH") or \
            (Path.home() / ".ray" / "auth_token").exists():
        return {"RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "token")}
    return {}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def driver_auth(env: dict) -> None:
    """Set (value None: remove) these environment variables in this process, for a driver joining a cluster with
    the auth_env() of its nodes (or restoring what it had). Ray reads them once, when it is imported: its own test
    helper re-reads them (Ray >= 2.52; older Rays have no token authentication to re-read)."""
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    try:
        from ray._private.authentication_test_utils import reset_auth_token_state
    except ImportError:
        return
    reset_auth_token_state()


def processes() -> dict:
    """{pid: (ppid, command line)} of every process this user can read (/proc)."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        out[int(d)] = (ppid, cmd)
    return out


def _naming(temp_dir: str):
    """A pattern that finds temp_dir in a command line: the directory itself or a path under it, not another
    directory whose name starts the same."""
    return re.compile(re.escape(str(temp_dir).rstrip("/")) + r"(?=/|\s|$)")


def cluster_pids(temp_dir: str) -> set:
    """The processes of the cluster in temp_dir (a `ray start --temp-dir`): those whose command line names it (the
    directory itself or a path under it, never another directory whose name starts the same), and their descendants
    (workers, agents, a submitted job's driver); never this process or its parent."""
    procs = processes()
    names = _naming(temp_dir)
    found = {p for p, (_, c) in procs.items() if names.search(c)}
    while True:
        kids = {p for p, (pp, _) in procs.items() if pp in found} - found
        if not kids:
            break
        found |= kids
    return found - {os.getpid(), os.getppid()}


def node_pids(temp_dir: str) -> dict:
    """{node-manager port: raylet pid} of the cluster in temp_dir."""
    out, names = {}, _naming(temp_dir)
    for pid, (_, cmd) in processes().items():
        m = re.search(r"--node_manager_port=(\d+)", cmd)
        if m and "raylet" in cmd.split(" ", 1)[0] and names.search(cmd):
            out[int(m.group(1))] = pid
    return out


def _ray_start(args: list, env: dict, timeout: float) -> None:
    p = subprocess.run([str(RAY), "start", *args], env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"ray start {' '.join(args)} failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")


def _node_args(memory: int, cpus: int, store: int) -> tuple[list, int]:
    nm = free_port()
    return [f"--num-cpus={cpus}", f"--memory={memory}", f"--object-store-memory={store}",
            f"--node-manager-port={nm}", f"--object-manager-port={free_port()}",
            f"--metrics-export-port={free_port()}", f"--dashboard-agent-listen-port={free_port()}",
            f"--dashboard-agent-grpc-port={free_port()}", f"--runtime-env-agent-port={free_port()}",
            "--node-ip-address=127.0.0.1", "--disable-usage-stats"], nm


def start(nodes: int, memory: int, cpus: int = 1, object_store: int = 256 * 2 ** 20, temp_dir: str | None = None,
          state: Path | None = DEFAULT_STATE, health_check_ms: int | None = None, timeout: float = 180.0,
          metrics_interval_ms: int | None = None) -> dict:
    """Start `nodes` raylets (the head is node 0) and return the cluster's description (also written to `state`):
    address, temp_dir, nodes [{port (node manager), pid (raylet), head}]. health_check_ms: how often the GCS checks
    each raylet (a dead node is declared after 3 misses; None: Ray's default, tens of seconds). metrics_interval_ms:
    how often each raylet updates the metrics it exports (the bytes its object manager received from other nodes:
    hemlp.apps.bench.cluster.received_bytes; None: Ray's default, seconds). Every process is ended again when a node
    fails to start."""
    if nodes < 1:
        raise ValueError(f"--nodes must be >= 1, got {nodes}")
    temp_dir = temp_dir or tempfile.mkdtemp(prefix="hlc", dir="/tmp")   # short: Ray's socket paths live under it
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), **RAY_ENV,
               **auth_env())
    if metrics_interval_ms:
        env["RAY_metrics_report_interval_ms"] = str(int(metrics_interval_ms))
    if health_check_ms:
        env.update(RAY_health_check_period_ms=str(health_check_ms), RAY_health_check_timeout_ms=str(health_check_ms),
                   RAY_health_check_failure_threshold="3")
    port = free_port()
    desc = dict(address=f"127.0.0.1:{port}", temp_dir=temp_dir, nodes=[], memory=memory, cpus=cpus,
                object_store=object_store)
    try:
        args, nm = _node_args(memory, cpus, object_store)
        _ray_start(["--head", f"--port={port}", "--include-dashboard=false", f"--temp-dir={temp_dir}",
                    f"--ray-client-server-port={free_port()}", *args], env, timeout)
        ports = [nm]
        # one after the other: nodes joining at once on one machine pick the same socket names in the session
        # directory (a raylet then dies on "bind: Address already in use")
        for _ in range(nodes - 1):
            args, nm = _node_args(memory, cpus, object_store)
            ports.append(nm)
            _ray_start([f"--address={desc['address']}", *args], env, timeout)
        deadline = time.monotonic() + timeout
        while True:
            pids = node_pids(temp_dir)
            if all(nm in pids for nm in ports) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        desc["nodes"] = [dict(port=nm, pid=pids.get(nm), head=(k == 0)) for k, nm in enumerate(ports)]
    except BaseException as exc:
        logs = raylet_logs(temp_dir)
        stop_dir(temp_dir)
        if isinstance(exc, RuntimeError) and logs:
            raise RuntimeError(f"{exc}\nthe raylets' logs:\n{logs}") from None
        raise
    if state is not None:
        desc["state"] = str(state)
        Path(state).write_text(json.dumps(desc, indent=1))
    return desc


def raylet_logs(temp_dir: str, tail: int = 1500) -> str:
    """The end of every raylet's and the GCS's log of the cluster in temp_dir (why a node did not start)."""
    out = []
    for f in sorted(Path(temp_dir).glob("session_*/logs/*")):
        if f.is_file() and (f.name.startswith("raylet") or f.name.startswith("gcs_server")) and \
                f.suffix in (".out", ".err", ".log") and f.stat().st_size:
            out.append(f"--- {f.name}\n{f.read_text(errors='replace')[-tail:]}")
    return "\n".join(out)


def stop_dir(temp_dir: str, wait: float = 5.0) -> int:
    """SIGTERM to the cluster's processes, SIGKILL to those left after `wait` s; removes temp_dir. Returns how many
    processes there were."""
    first = cluster_pids(temp_dir)
    for sig, w in ((signal.SIGTERM, wait), (signal.SIGKILL, 2.0)):
        pids = cluster_pids(temp_dir)
        for p in pids:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + w
        while pids and time.monotonic() < deadline and cluster_pids(temp_dir):
            time.sleep(0.1)
    left = cluster_pids(temp_dir)
    if left:
        raise RuntimeError(f"processes of the cluster in {temp_dir} survived SIGKILL: {sorted(left)}")
    shutil.rmtree(temp_dir, ignore_errors=True)
    return len(first)


def stop(state: Path = DEFAULT_STATE) -> int:
    """Stop the cluster recorded in `state` (and remove the file); how many processes were ended."""
    desc = json.loads(Path(state).read_text())
    n = stop_dir(desc["temp_dir"])
    Path(state).unlink(missing_ok=True)
    return n


def status(state: Path = DEFAULT_STATE) -> dict:
    """The recorded cluster with each node's raylet alive or not and the cluster's process count."""
    desc = json.loads(Path(state).read_text())
    pids = node_pids(desc["temp_dir"])
    for n in desc["nodes"]:
        n["alive"] = pids.get(n["port"]) == n["pid"] and n["pid"] is not None
    desc["processes"] = len(cluster_pids(desc["temp_dir"]))
    return desc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("start", help="start a head and NODES - 1 more raylets on this machine")
    s.add_argument("--nodes", type=int, default=2, help="raylets, the head included (default 2)")
    s.add_argument("--memory", default="2GiB", help="Ray's memory resource per node (default 2GiB)")
    s.add_argument("--cpus", type=int, default=1, help="CPUs per node (default 1)")
    s.add_argument("--object-store-memory", default="256MiB", help="object store per node (default 256MiB)")
    s.add_argument("--temp-dir", default=None, help="the cluster's directory (default: a new /tmp/hlc*)")
    s.add_argument("--health-check-ms", type=int, default=None,
                   help="how often the GCS checks each raylet (a node is dead after 3 misses; default Ray's)")
    for p in (s, sub.add_parser("stop", help="end the recorded cluster's processes"),
              sub.add_parser("status", help="the recorded cluster and its live raylets")):
        p.add_argument("--state", default=str(DEFAULT_STATE), help=f"the state file (default {DEFAULT_STATE})")
    a = ap.parse_args(argv)
    if a.cmd == "start":
        if Path(a.state).exists():
            raise SystemExit(f"{a.state} records a running cluster: stop it first (local_cluster.py stop)")
        desc = start(a.nodes, parse_bytes(a.memory), a.cpus, parse_bytes(a.object_store_memory), a.temp_dir,
                     Path(a.state), a.health_check_ms)
        print(json.dumps(desc, indent=1))
        print(f"address: {desc['address']}  (ray.init(address='{desc['address']}'), "
              f"compiled.run(..., runtime='ray', address='{desc['address']}'))", file=sys.stderr)
    elif a.cmd == "stop":
        print(f"stopped: {stop(Path(a.state))} process(es)")
    else:
        print(json.dumps(status(Path(a.state)), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
