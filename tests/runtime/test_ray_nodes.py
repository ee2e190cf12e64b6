"""Layout (A) on a local multi-node Ray cluster (issue #30 items 2 and 4): three raylets started as a real cluster's
nodes would be (scripts/local_cluster.py: `ray start --head` plus `ray start --address ... --num-cpus 1 --memory
...`), a compiled model's run sharded over them bit-identical to the in-process run, compile's nodes='auto' /
node_memory='auto' reading the cluster, and a worker node whose raylet is killed (by pid) in the middle of the job:
its tasks are retried on the other nodes and the output keeps every bit.

One cluster serves the module (starting it costs ~30 s on 2 cores); the node kill is the module's last test. The
cluster lives in its own temporary directory and only its processes are ended afterwards (never `ray stop`, which
would end every Ray of this user on the machine)."""
import importlib.util
import os
import signal
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray")
torch = pytest.importorskip("torch")

import hemlp  # noqa: E402
from hemlp.runtime.ray import session  # noqa: E402
from tests.compiler.conftest import mlp  # noqa: E402
from tests.runtime.faults import TASKS  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
NODES, MEMORY = 3, 2 * 2 ** 30
#: the environment variable naming the directory through which the test and the victim node's workers talk
GATE_ENV = "HEMLP_TEST_NODE_GATE"


def load_script():
    spec = importlib.util.spec_from_file_location("local_cluster", REPO / "scripts" / "local_cluster.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def driver_auth(env: dict) -> None:
    """Set (value None: remove) the auth variables of this process. Ray reads them once, when it is imported:
    its own test helper re-reads them (Ray >= 2.52; older Rays have no token authentication to re-read)."""
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


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """NODES raylets of 1 CPU and MEMORY bytes each; the GCS checks them every second, so a killed node is declared
    dead within a few seconds. Every process of the cluster is ended afterwards, and the test fails if one survives."""
    lc = load_script()
    if not lc.RAY.exists():
        pytest.skip("the `ray` command is not installed next to this Python")
    session.shutdown_local()          # a local Ray an earlier test had hemlp start
    if ray.is_initialized():
        ray.shutdown()
    saved = {k: os.environ.get(k) for k in lc.auth_env()}
    driver_auth(lc.auth_env())        # the driver authenticates as the raylets do (Ray >= 2.52 with a token)
    desc = lc.start(NODES, MEMORY, cpus=1, object_store=128 * 2 ** 20, state=None, health_check_ms=1000)
    try:
        yield desc
    finally:
        if ray.is_initialized():
            ray.shutdown()
        lc.stop_dir(desc["temp_dir"])
        left = lc.cluster_pids(desc["temp_dir"])
        driver_auth(saved)
    assert not left, f"processes of the test's Ray cluster survived: {sorted(left)}"


@pytest.fixture(scope="module")
def case():
    """A layout (A) MLP at test-N12-d6: 2 chunks of 2048 slots, x^2 activations."""
    x = np.random.default_rng(5).uniform(-1, 1, (4096, 32))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = hemlp.compile(mlp(dims=(32, 48, 48, 6), seed=2), x[:64], batch_size=4096, allow_insecure=True,
                           layout="batch")
        sk, ek = cm.keygen()
        ct = cm.encrypt(x, sk)
        ref = cm.run(ct, ek)        # in process
    return dict(cm=cm, sk=sk, ek=ek, ct=ct, x=x, ref=ref)


def same(a, b) -> bool:
    A, B = a.ctm, b.ctm
    return A.shape == B.shape and A.chunks == B.chunks and all(
        p.to_bytes() == q.to_bytes() for p, q in zip(A.cts, B.cts, strict=True))


def nodes_used(stats) -> set:
    return {n for v in stats.values() for n in v.get("nodes", [])}


def node_ids(desc) -> dict:
    """{node-manager port: node id} of the connected cluster's live nodes."""
    return {n["NodeManagerPort"]: n["NodeID"] for n in ray.nodes() if n.get("Alive")}


def test_the_script_started_every_node_and_auto_reads_the_cluster(cluster, case):
    ray.init(address=cluster["address"], log_to_driver=False)
    assert len(cluster["nodes"]) == NODES and all(n["pid"] for n in cluster["nodes"])
    assert sorted(node_ids(cluster)) == sorted(n["port"] for n in cluster["nodes"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = hemlp.compile(mlp(dims=(32, 48, 48, 6), seed=2), case["x"][:64], batch_size=4096,
                           allow_insecure=True, layout="batch", nodes="auto", node_memory="auto")
    got = cm.plan.info["nodes"]
    assert got["nodes"] == NODES and got["node_memory"] == MEMORY and got["peak_bytes"] < MEMORY


@pytest.mark.parametrize("grid", [(3, 1, 1), (1, 2, 1), None])
def test_layout_a_sharded_over_three_raylets_is_bit_identical(cluster, case, grid):
    """Row blocks on 3 nodes, chunk blocks on 2, and the runtime's own choice (this small model: one node-local
    task, on any node)."""
    if not ray.is_initialized():
        ray.init(address=cluster["address"], log_to_driver=False)
    st = {}
    out = case["cm"].run(case["ct"], case["ek"], runtime="ray", grid=grid, stats=st)
    assert same(out, case["ref"])
    used = nodes_used(st)
    assert used and used <= set(node_ids(cluster).values()), used
    if grid is not None:     # tasks on several nodes: 3 row blocks on all 3, 2 chunk blocks on at least 2
        assert len(used) >= (NODES if grid == (3, 1, 1) else 2), used


def gate_hook(tasks, at: int):
    """A worker set-up hook (pickled by value) wrapping the runtime's task functions: on the node named in
    $GATE_ENV/victim, the at-th task to start writes $GATE_ENV/armed and sleeps, so that it is in flight when the
    test kills the node's raylet; tasks elsewhere, and on the victim before, run as they are."""
    def install():
        import functools
        import importlib
        import os as _os
        import time as _time

        import ray as _ray

        def gate():
            d = _os.environ.get(GATE_ENV)
            if not d:
                return
            try:
                victim = open(_os.path.join(d, "victim")).read().strip()
            except OSError:
                return
            if _ray.get_runtime_context().get_node_id() != victim:
                return
            n = len([f for f in _os.listdir(d) if f.startswith("task-")])   # one CPU: one task at a time
            open(_os.path.join(d, f"task-{n}"), "w").close()
            if n + 1 == at:
                open(_os.path.join(d, "armed"), "w").write(str(_os.getpid()))
                _time.sleep(120)

        for mod_name, fn_name in tasks:
            mod = importlib.import_module(mod_name)
            fn = getattr(mod, fn_name)

            @functools.wraps(fn)
            def wrapped(*a, __fn=fn, **kw):
                gate()
                return __fn(*a, **kw)

            setattr(mod, fn_name, wrapped)

    return install


def test_a_worker_node_killed_mid_job_changes_no_output_bit(cluster, case, tmp_path):
    """The victim (a node without the driver) runs its first task, then its second one starts and stops there;
    the test SIGKILLs the victim's raylet (its workers die with it), Ray declares the node dead, and the lost task
    and every object lost with the node's store are re-run on the other two nodes from their lineage."""
    lc = load_script()
    if ray.is_initialized():
        ray.shutdown()
    gate = tmp_path / "gate"
    gate.mkdir()
    ray.init(address=cluster["address"], log_to_driver=False,
             runtime_env={"env_vars": {GATE_ENV: str(gate)}, "worker_process_setup_hook": gate_hook(TASKS, 2)})
    driver = ray.get_runtime_context().get_node_id()
    ids = node_ids(cluster)
    victim = next(n for n in cluster["nodes"] if ids.get(n["port"]) and ids[n["port"]] != driver and not n["head"])
    victim_id = ids[victim["port"]]
    assert lc.node_pids(cluster["temp_dir"]).get(victim["port"]) == victim["pid"]
    (gate / "victim").write_text(victim_id)
    killed = {}

    def killer():
        deadline = time.monotonic() + 120
        while not (gate / "armed").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        if (gate / "armed").exists():
            os.kill(victim["pid"], signal.SIGKILL)
            killed["at"] = time.monotonic()

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    st = {}
    out = case["cm"].run(case["ct"], case["ek"], runtime="ray", grid=(3, 1, 1), stats=st)
    t.join(timeout=5)
    assert killed, "the victim never started its second task: no node was killed"
    assert (gate / "task-0").exists()                 # its first task's output was in the store that died
    assert victim_id not in node_ids(cluster), "the killed node is still alive"
    assert same(out, case["ref"])
    assert len(nodes_used(st) - {victim_id}) >= 2     # the others carried the job
