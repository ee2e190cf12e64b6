"""The Ray session: joining or starting a cluster, and what every process of it needs to know about itself.

``ray_session`` uses the running Ray, joins an address (``ray start --head`` / ``ray job submit``) for the call, or
starts a local instance that the process then reuses (starting one costs seconds): it is shut down at exit, on
``shutdown_local()``, or when a later call asks for another number of CPUs. ``import_ray`` is the one place that
imports the optional ``ray`` package (so hemlp imports without it). (The tests inject worker deaths from outside,
with Ray's worker setup hook: production code carries no fault hook.)
"""
from __future__ import annotations

import atexit
import contextlib
import os
import socket
import time

from hemlp import _core
from hemlp.errors import HemlpError

__all__ = ["RuntimeUnavailableError", "ray_session", "shutdown_local", "local_session_cpus", "import_ray",
           "LOCAL_SYSTEM_CONFIG", "CONNECT_TIMEOUT", "TASK_RETRIES", "node_id", "usable_cores", "driver_threads",
           "check_task_cpus", "task_threads", "spread_options"]

#: seconds an explicit cluster address gets to answer before RuntimeUnavailableError
CONNECT_TIMEOUT = 10.0
#: how often Ray re-runs a task whose worker died (tasks are pure: a re-run gives the same bits)
TASK_RETRIES = 3


class RuntimeUnavailableError(HemlpError, ConnectionError):
    """The Ray runtime cannot be used: ray is not installed or the cluster cannot be reached."""


def import_ray():
    """The `ray` module, or RuntimeUnavailableError naming the install command."""
    try:
        import ray
    except ImportError:
        raise RuntimeUnavailableError("the Ray runtime needs the `ray` package, which is not installed: "
                                      "pip install 'hemlp[ray]' (or use the in-process runtime: "
                                      "`hemlp batch --runtime local`, run(runtime='local'))") from None
    return ray


def _host_port(address: str):
    a = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = a.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def _probe(address: str, timeout: float) -> None:
    """Fail fast on a dead address: ray.init itself retries for minutes on a silent port."""
    hp = _host_port(address)
    if hp is None:
        return  # "auto" / "local": ray.init decides quickly
    fix = (f"start the cluster there (`ray start --head --port={hp[1]}`), check the address and firewall, "
           f"or use address=None to run on a local Ray instance")
    deadline = time.monotonic() + timeout  # one budget for both checks
    try:
        socket.create_connection(hp, timeout=timeout).close()
    except OSError as exc:
        raise RuntimeUnavailableError(f"cannot reach the Ray cluster at {address!r}: {exc.strerror or exc}; {fix}") from None
    try:
        import grpc
    except ImportError:
        return
    ch = grpc.insecure_channel(f"{hp[0]}:{hp[1]}")
    try:  # a Ray head speaks gRPC (HTTP/2); anything else never completes the handshake
        grpc.channel_ready_future(ch).result(timeout=max(0.1, deadline - time.monotonic()))
    except grpc.FutureTimeoutError:
        raise RuntimeUnavailableError(f"{address!r} accepts connections but is not a Ray cluster (no gRPC answer "
                                      f"within {timeout:g} s); {fix}") from None
    finally:
        ch.close()


#: Ray settings for the local instances hemlp starts. Freed objects leave the store at once instead of in a batch
#: every second: a run's input blocks (1.2 GB at batch 8 192) then land in memory the store has already mapped,
#: instead of fresh pages that fault in at ~1 GB/s when runs follow each other (measured: 0.07 s against 0.5-2.4 s
#: for a 1.2 GB put right after the previous run). Idle workers live on: while a node-local task holds every CPU of
#: the node, Ray otherwise kills the other (idle) workers after 1 s, and the next wave waits ~1 s for a new worker
#: process to start and rebuild its context (measured: one of two first-layer tasks started 0.8-1.0 s late). For a
#: cluster you start yourself:
#: RAY_free_objects_period_milliseconds=0 RAY_idle_worker_killing_time_threshold_ms=600000 ray start ...
LOCAL_SYSTEM_CONFIG = {"free_objects_period_milliseconds": 0, "idle_worker_killing_time_threshold_ms": 600000}


#: the local Ray this process started and keeps for later calls: {"num_cpus": n} (empty: none)
_LOCAL: dict = {}


def local_session_cpus() -> int | None:
    """CPUs of the local Ray instance hemlp started in this process and keeps (None: none is running)."""
    return _LOCAL.get("num_cpus")


def shutdown_local() -> None:
    """Shut down the local Ray instance hemlp started in this process (its raylet, GCS and workers); nothing
    when there is none or Ray was started by someone else. Registered with atexit; the CLI also calls it on
    SIGTERM / Ctrl-C."""
    if not _LOCAL:
        return
    _LOCAL.clear()
    try:
        import ray
    except ImportError:
        return
    if ray.is_initialized():
        ray.shutdown()


atexit.register(shutdown_local)


@contextlib.contextmanager
def ray_session(address: str | None = None, num_workers: int | None = None, timeout: float = CONNECT_TIMEOUT):
    """Use the running Ray, or join `address` for the call, or start (once per process) a local Ray with
    num_workers CPUs.

    A cluster joined at an address is disconnected when the call ends. A local instance hemlp starts stays up for
    the next calls of this process (starting it costs seconds) until exit or shutdown_local(); a later call that
    asks for another num_workers restarts it. Under `ray job submit` (RAY_ADDRESS set) address=None joins the
    job's cluster. A Ray initialised by the caller is used as it is (address and num_workers are then ignored)."""
    ray = import_ray()
    if ray.is_initialized():
        wanted = num_workers or os.cpu_count()
        if not _LOCAL or address is not None or num_workers is None or _LOCAL["num_cpus"] == wanted:
            yield ray
            return
        shutdown_local()  # hemlp's own local instance, with another CPU count than asked for: start it again
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address is not None:
        _probe(address, timeout)
        try:
            ray.init(address=address, log_to_driver=False)
        except ConnectionError as exc:
            raise RuntimeUnavailableError(f"cannot join the Ray cluster at {address!r}: {exc}; start it with "
                                          "`ray start --head` or use address=None for a local Ray") from None
        try:
            yield ray
        finally:
            ray.shutdown()
        return
    # address="local": a fresh instance even when another Ray runs on this machine (ray.init() would join it)
    cpus = num_workers or os.cpu_count()
    ray.init(address="local", num_cpus=cpus, include_dashboard=False, log_to_driver=False,
             _system_config=LOCAL_SYSTEM_CONFIG)
    _LOCAL["num_cpus"] = cpus
    try:
        yield ray
    except BaseException:
        shutdown_local()   # an interrupted or failed call leaves no Ray processes behind
        raise


def node_id() -> str:
    """The Ray node this process runs on."""
    ray = import_ray()

    return ray.get_runtime_context().get_node_id()


def task_threads(value, what: str = "threads_per_task") -> int:
    """The native threads of each task (None: 1), ValueError below 1."""
    threads = 1 if value is None else int(value)
    if threads < 1:
        raise ValueError(f"{what} must be >= 1, got {value}")
    return threads


def spread_options(threads: int) -> dict:
    """Ray task options: spread over the nodes, holding as many CPUs as the task's native threads."""
    return dict(scheduling_strategy="SPREAD", **({"num_cpus": threads} if threads != 1 else {}))


def check_task_cpus(ray, cpus: int) -> None:
    """A task that holds `cpus` CPUs must fit on one live node of the cluster, else Ray keeps it pending forever:
    ValueError naming the largest node instead of a hang."""
    most = max((n.get("Resources", {}).get("CPU", 0) for n in ray.nodes() if n.get("Alive")), default=0)
    if cpus > most:
        raise ValueError(f"a task of {cpus} native threads holds {cpus} CPUs, but the largest node of this Ray "
                         f"cluster has {most:g}: use threads_per_task / --threads <= {most:g}, or start the nodes "
                         f"with more CPUs (ray start --num-cpus)")


def usable_cores() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


class driver_threads:
    """Runs a block of the driver's native work (exporting the input, importing the output) on n threads, then
    restores the caller's setting."""

    def __init__(self, n: int):
        self.n = n

    def __enter__(self):
        self.prev = _core.get_num_threads()
        _core.set_num_threads(self.n)

    def __exit__(self, *exc):
        _core.set_num_threads(self.prev)
        return False
