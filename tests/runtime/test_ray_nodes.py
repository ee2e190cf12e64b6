"""Layout (A) on a local multi-node Ray cluster (issue #30 items 2 and 4): three raylets started as a real cluster's
nodes would be (scripts/local_cluster.py: `ray start --head` plus `ray start --address ... --num-cpus 1 --memory
...`), a compiled model's run sharded over them bit-identical to the in-process run, compile's nodes='auto' /
node_memory='auto' reading the cluster, tasks placed next to their shards (only what the shards model says moves
crosses between raylets, on a grid given or on the runtime's default: the plan's split), a bootstrapped plan on the
same split with every bootstrap call (and MaMBo unit) a task on the node holding its ciphertexts (the keys decoded
once per machine with shared keys), a worker node whose
raylet is killed (by pid) in the middle of the job: its tasks are retried on the other nodes and the output keeps
every bit, and a batch job that loses a node beyond Ray's retries: it stops naming the fix, and rerunning it
resumes with outputs bit-identical to an uninterrupted run.

One cluster serves the module (starting it costs ~30 s on 2 cores); the node kills are the module's last tests. The
cluster lives in its own temporary directory and only its processes are ended afterwards (never `ray stop`, which
would end every Ray of this user on the machine)."""
import contextlib
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
from hemlp import pcmm  # noqa: E402
from hemlp.apps.bench import cluster as bench_cluster  # noqa: E402
from hemlp.apps.bench.local_raylets import connected_cluster  # noqa: E402
from hemlp.runtime import jobs  # noqa: E402
from hemlp.runtime.ray import batch as ray_batch  # noqa: E402
from hemlp.runtime.ray import session  # noqa: E402
from tests.compiler.conftest import mlp  # noqa: E402
from tests.conftest import make_ctx  # noqa: E402
from tests.runtime.faults import TASKS  # noqa: E402

NODES, MEMORY = 3, 2 * 2 ** 30
#: the environment variable naming the directory through which the test and the victim node's workers talk
GATE_ENV = "HEMLP_TEST_NODE_GATE"
LC = bench_cluster.local_cluster_script()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """NODES raylets of 1 CPU and MEMORY bytes each; the GCS checks them every second, so a killed node is declared
    dead within a few seconds, and each raylet updates its metrics (the bytes it received from the other nodes) as
    often as the bench's measured check reads them. The test process's Ray is connected to it. Every process of the
    cluster is ended afterwards, and the module fails if one survives."""
    lc = LC
    if not lc.RAY.exists():
        pytest.skip("the `ray` command is not installed next to this Python")
    session.shutdown_local()          # a local Ray an earlier test had hemlp start
    saved = {k: os.environ.get(k) for k in lc.auth_env()}
    lc.driver_auth(lc.auth_env())     # the driver authenticates as the raylets do (Ray >= 2.52 with a token)
    try:
        with connected_cluster(lc, NODES, MEMORY, 128 * 2 ** 20, health_check_ms=1000,
                               metrics_interval_ms=bench_cluster.METRICS_INTERVAL_MS) as desc:
            yield desc
    finally:
        lc.driver_auth(saved)


@pytest.fixture(scope="module")
def case():
    """A layout (A) MLP at test-N12-d6: 3 chunks of 2048 slots (one per node), x^2 activations."""
    x = np.random.default_rng(5).uniform(-1, 1, (6144, 32))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = hemlp.compile(mlp(dims=(32, 48, 48, 6), seed=2), x[:64], batch_size=6144, allow_insecure=True,
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
    if not ray.is_initialized():
        ray.init(address=cluster["address"], log_to_driver=False)
    assert len(cluster["nodes"]) == NODES and all(n["pid"] for n in cluster["nodes"])
    assert sorted(node_ids(cluster)) == sorted(n["port"] for n in cluster["nodes"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = hemlp.compile(mlp(dims=(32, 48, 48, 6), seed=2), case["x"][:64], batch_size=4096,
                           allow_insecure=True, layout="batch", nodes="auto", node_memory="auto")
    got = cm.plan.info["nodes"]
    assert got["nodes"] == NODES and got["node_memory"] == MEMORY and got["peak_bytes"] < MEMORY


@pytest.mark.parametrize("grid", [(3, 1, 1), (1, 2, 1)])
def test_layout_a_sharded_over_three_raylets_is_bit_identical(cluster, case, grid):
    """Row blocks on 3 nodes, chunk blocks on 2 (the runtime's own choice: test_tasks_run_next_to_their_shards)."""
    if not ray.is_initialized():
        ray.init(address=cluster["address"], log_to_driver=False)
    st = {}
    out = case["cm"].run(case["ct"], case["ek"], runtime="ray", grid=grid, stats=st)
    assert same(out, case["ref"])
    used = nodes_used(st)
    assert used and used <= set(node_ids(cluster).values()), used
    # tasks on several nodes: 3 row blocks on all 3, 2 chunk blocks on at least 2
    assert len(used) >= (NODES if grid == (3, 1, 1) else 2), used


@pytest.mark.parametrize("grid", [(1, NODES, 1), None])
def test_tasks_run_next_to_their_shards(cluster, case, grid):
    """Every PCMM on (1, 3, 1): the shards model's split of 3 chunks over 3 nodes (p_n = 3 chunk groups, p_r = 1:
    no PCMM gathers or reduces), each chunk group's tasks on the node that holds its blocks; given as grid=, or the
    runtime's default on several nodes (grid=None: the plan's split, hemlp.runtime.ray.split, in stats['_split']).
    Between raylets only the input's groups (from the driver's node), the output's (back to it), the keys and the
    weight blocks move: the bytes Ray's object managers received are at least the input's and output's groups that
    must move and at most the model's total (hemlp.apps.bench.cluster.project_nodes from hemlp.runtime.shards, keys
    included) plus the weights each other node reads; every task ran on the node it was sent to, and the output
    keeps every bit."""
    if not ray.is_initialized():
        ray.init(address=cluster["address"], log_to_driver=False)
    cm = case["cm"]
    lay = cm.layout_impl
    model = bench_cluster.project_nodes(lay, NODES)
    assert (lay.chunks, model["p_n"], model["p_r"]) == (NODES, NODES, 1)
    assert all(x["bytes"] == 0 for x in model["network"]["layers"])
    weights = (NODES - 1) * sum(8 * np.size(s.U) for s in lay.steps if s.op == "pcmm")
    ports = [n["MetricsExportPort"] for n in ray.nodes() if n.get("Alive")]
    before = bench_cluster.settle_metrics(ports)
    st = {}
    out = cm.run(case["ct"], case["ek"], runtime="ray", grid=grid, stats=st)
    got = bench_cluster.settle_metrics(ports) - before
    assert same(out, case["ref"])
    if grid is None:     # the split the plan's per-node memory was counted for (layout.node_peak, nodes=3)
        plan = lay.node_peak(NODES)
        split = st["_split"]
        assert (split["cluster_nodes"], split["p_n"], split["p_r"]) == (NODES, plan["p_n"], plan["p_r"])
        assert split["node_peak_bytes"] == plan["peak"]
        pcmms = [s.out for s in lay.steps if s.op == "pcmm"]
        assert split["grids"] == {s: [1, NODES, 1] for s in pcmms}
        assert all(st[s]["grid"] == (1, NODES, 1, 1) for s in pcmms)
    assert st["_placement"]["tasks"] == st["_placement"]["on_node"] > 0, st["_placement"]
    assert len(nodes_used(st)) == NODES
    must = model["network"]["input"] + model["network"]["output"]
    assert must <= got <= model["network_bytes_total"] + model["network"]["keys"] + weights, (got, must, model)


def test_the_split_grids_follow_the_shards_model(case):
    """The default grids on several nodes (hemlp.runtime.ray.split) are the shards model's split of the steps: chunk
    groups on the grid's chunk axis, a gather's rows on its output-row axis, a reduce's on its reduction axis. The
    case's steps read as one chunk over 3 nodes (p_r = 3): 32 -> 48 and 48 -> 48 gather (their input rows are no
    more than their output rows), 48 -> 6 reduces; as 3 chunks over 2 or 3 nodes every PCMM stays local."""
    from hemlp.runtime import shards
    from hemlp.runtime.ray.split import split_of

    lay = case["cm"].layout_impl
    N, pcmms = lay.params.N, [s.out for s in lay.steps if s.op == "pcmm"]
    one = split_of(lay.steps, N, 1, NODES)
    model = shards.node_peak(lay.steps, N, 1, NODES)
    assert (one.p_n, one.p_r) == (1, NODES) and one.peak == model["peak"]
    assert [one.kinds[s] for s in pcmms] == ["gather", "gather", "reduce"] == [m["split"] for m in model["splits"]]
    assert [one.grids[s] for s in pcmms] == [(NODES, 1, 1), (NODES, 1, 1), (1, 1, NODES)]
    for K in (2, NODES):
        split = split_of(lay.steps, N, lay.chunks, K)
        assert (split.p_n, split.p_r) == (K, 1) and all(split.grids[s] == (1, K, 1) for s in pcmms)


def boot_plan(batch: int, dims=(6, 8, 8, 3), low: float = -0.9, **kw) -> dict:
    """A bootstrapped layout (A) MLP (default 6-8-8-3 at test-N12-boot, x^2 activations, one refresh point of 8
    rows, no MaMBo) for a batch of `batch` samples, its keys, input and in-process output (one thread: on a loaded
    2-core machine the default threads cost more than they give)."""
    rng = np.random.default_rng(17)
    cal, x = rng.uniform(-1, 1, (48, 6)), rng.uniform(low, 0.9, (batch, 6))
    kw = dict(dict(mambo=False, preset="test-N12-boot"), **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = hemlp.compile(mlp(dims=dims, seed=5), cal, batch_size=batch, bootstrap=True, layout="batch",
                           allow_insecure=True, **kw)
        sk, ek = cm.keygen()
        ct = cm.encrypt(x, sk)
        ref = cm.run(ct, ek, threads=1)
    return dict(cm=cm, ek=ek, ct=ct, ref=ref)


def check_bootstraps(st, lay, per_call: int, decoded) -> None:
    """Every bootstrap step of the run ran as refresh tasks (per_call ciphertexts a call), each on the node it was
    sent to (the one holding most of its ciphertexts), reading its tiles' rows only (its input's producer cut its
    blocks at them), the keys decoded `decoded` times (an int, or "per process")."""
    steps = {s.out: s for s in lay.steps}
    boots = [s for s in lay.steps if s.op == "bootstrap"]
    assert boots
    for b in boots:
        e = st[b.out]
        level_in = steps[b.inputs[0]].level_out
        assert e["op"] == "bootstrap" and e["bootstraps"] == -(-b.rows * lay.chunks // per_call), e
        assert e["placement"]["placed"] == e["placement"]["on_node"] == e["tasks"] > 0, e["placement"]
        assert e["bytes"]["read"] == b.rows * lay.chunks * 2 * (level_in + 1) * lay.params.N * 8
        assert 1 <= e["keys_loaded"] <= len(e["processes"])
        assert e["keys_decoded"] == (e["keys_loaded"] if decoded == "per process" else decoded)
    assert st["_placement"]["tasks"] == st["_placement"]["on_node"] > 0, st["_placement"]


def test_a_bootstrapped_plan_takes_the_split(cluster, tmp_path):
    """compile(..., bootstrap=True) in layout (A), one chunk, batched bootstraps (k = 2: 4 ciphertexts a call) on
    the runtime's default over 3 nodes: the plan's split (every PCMM on its grid: two gathers and a reduce of one
    chunk's rows), every bootstrap call a task on the node holding its rows, the bootstrapping keys decoded once on
    this machine (shared_keys: one key file that every worker maps); the output keeps every bit. Staged
    (shared_keys=StagedKeys: the driver writes the key file, every raylet's workers map it, no key bytes put): the
    same bits, no worker decodes."""
    case = boot_plan(2048, batch_bootstrap=2)
    if not ray.is_initialized():
        ray.init(address=cluster["address"], log_to_driver=False)
    cm = case["cm"]
    lay = cm.layout_impl
    assert lay.chunks == 1 and all(s.info.k == 2 for s in lay.steps if s.op == "bootstrap")
    folder = tmp_path / "keys"
    folder.mkdir(mode=0o700)
    st = {}
    out = cm.run(case["ct"], case["ek"], runtime="ray", shared_keys=str(folder), stats=st)
    assert same(out, case["ref"])
    plan, split = lay.node_peak(NODES), st["_split"]
    assert (split["cluster_nodes"], split["p_n"], split["p_r"]) == (NODES, plan["p_n"], plan["p_r"]) == (NODES, 1, 3)
    pcmms = [s.out for s in lay.steps if s.op == "pcmm"]
    assert all(st[s]["grid"][:3] == tuple(split["grids"][s]) for s in pcmms)
    check_bootstraps(st, lay, 4, decoded=1)
    assert len(nodes_used(st)) == NODES
    assert len(list(folder.glob("*.keys"))) == 1
    st = {}
    out = cm.run(case["ct"], case["ek"], runtime="ray", shared_keys=hemlp.StagedKeys(tmp_path / "staged"), stats=st)
    assert same(out, case["ref"]) and st["_bootstrap_keys"]["put_bytes"] == 0
    check_bootstraps(st, lay, 4, decoded=0)
    assert len(nodes_used(st)) == NODES


def test_bootstrap_calls_across_chunk_groups(cluster):
    """Three chunks, one per node (the split (1, 3, 1)), single bootstraps: the in-process run pairs consecutive
    ciphertexts, so the pairs cross the chunk groups and a task takes its partners' rows from the other nodes;
    without shared keys every worker process decodes its own copy. Bit-identical."""
    case = boot_plan(6144, batch_bootstrap=False)
    if not ray.is_initialized():
        ray.init(address=cluster["address"], log_to_driver=False)
    cm = case["cm"]
    lay = cm.layout_impl
    st = {}
    out = cm.run(case["ct"], case["ek"], runtime="ray", shared_keys=False, stats=st)
    assert same(out, case["ref"])
    assert st["_split"]["p_n"] == NODES
    check_bootstraps(st, lay, 2, decoded="per process")


def test_mambo_steps_take_the_split(cluster):
    """MaMBo (a PCMM fused into S2C-first refreshes, then a level drop fused into its tasks) at test-N10-boot, 3
    chunks on 3 nodes: the MaMBo step is a task per unit of the in-process run (chunks 0 and 1 sharing every
    refresh, chunk 2 alone), each on the node holding most of its chunks' rows; bit-identical."""
    case = boot_plan(1100, dims=(6, 2, 8, 3), low=-0.6, mambo=True, batch_bootstrap=2, preset="test-N10-boot")
    if not ray.is_initialized():
        ray.init(address=cluster["address"], log_to_driver=False)
    cm = case["cm"]
    lay = cm.layout_impl
    fused = [s for s in lay.steps if s.op == "mambo"]
    assert fused and lay.chunks == 3
    st = {}
    out = cm.run(case["ct"], case["ek"], runtime="ray", stats=st)
    assert same(out, case["ref"])
    assert st["_split"]["p_n"] == NODES
    for s in fused:
        e = st[s.out]
        assert e["op"] == "mambo" and e["bootstraps"] == e["tasks"] == 2, e
        assert e["placement"]["placed"] == e["placement"]["on_node"] == 2
        assert any(st[d]["fused_into"] == s.out for d in st if d.startswith(f"{s.out}#L"))   # its drop
    assert st["_placement"]["tasks"] == st["_placement"]["on_node"] > 0


def gate_hook(tasks, at: int, others: float = 0.0):
    """A worker set-up hook (pickled by value) wrapping the runtime's task functions: on the node named in
    $GATE_ENV/victim, the at-th task to start writes $GATE_ENV/armed and sleeps, so that it is in flight when the
    test kills the node's raylet; tasks on the victim before it run as they are, tasks elsewhere after `others`
    seconds (a busy node: Ray sends the next tasks to the victim)."""
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
                _time.sleep(others)
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


@contextlib.contextmanager
def victim_killed_when_armed(cluster, tmp_path, at: int, others: float = 0.0):
    """Join the cluster with gate_hook(TASKS, at, others) installed in the workers; the victim is a live node
    that is neither the head nor the driver's; a thread SIGKILLs its raylet once its at-th task is armed. Yields
    {victim: node id, gate: the gate directory, killed: set once the raylet was killed}."""
    if ray.is_initialized():
        ray.shutdown()
    gate = tmp_path / "gate"
    gate.mkdir()
    ray.init(address=cluster["address"], log_to_driver=False,
             runtime_env={"env_vars": {GATE_ENV: str(gate)}, "worker_process_setup_hook": gate_hook(TASKS, at,
                                                                                                   others)})
    driver = ray.get_runtime_context().get_node_id()
    ids = node_ids(cluster)
    victim = next(n for n in cluster["nodes"] if ids.get(n["port"]) and ids[n["port"]] != driver and not n["head"])
    assert LC.node_pids(cluster["temp_dir"]).get(victim["port"]) == victim["pid"]
    (gate / "victim").write_text(ids[victim["port"]])
    state = dict(victim=ids[victim["port"]], gate=gate)

    def killer():
        deadline = time.monotonic() + 120
        while not (gate / "armed").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        if (gate / "armed").exists():
            os.kill(victim["pid"], signal.SIGKILL)
            state["killed"] = time.monotonic()

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    try:
        yield state
    finally:
        t.join(timeout=5)


def test_a_worker_node_killed_mid_job_changes_no_output_bit(cluster, case, tmp_path):
    """The victim (a node without the driver) runs its first task, then its second one starts and stops there;
    the test SIGKILLs the victim's raylet (its workers die with it), Ray declares the node dead, and the lost task
    and every object lost with the node's store are re-run on the other two nodes from their lineage."""
    with victim_killed_when_armed(cluster, tmp_path, at=2) as k:
        st = {}
        out = case["cm"].run(case["ct"], case["ek"], runtime="ray", grid=(3, 1, 1), stats=st)
    assert "killed" in k, "the victim never started its second task: no node was killed"
    assert (k["gate"] / "task-0").exists()            # its first task's output was in the store that died
    assert k["victim"] not in node_ids(cluster), "the killed node is still alive"
    assert same(out, case["ref"])
    assert len(nodes_used(st) - {k["victim"]}) >= 2   # the others carried the job


def test_a_batch_job_that_loses_a_node_resumes_bit_identical(cluster, tmp_path, monkeypatch):
    """A resumable batch job (one PCMM per input file) on the cluster with Ray's task retries set to none, as if a
    lost node had used them all up: the victim's first item is in flight when its raylet is killed, so that item
    fails while the others finish on the nodes left. The job reports the failure naming the fix (rerun it); a rerun
    of the same job from a fresh driver skips the finished items (their outputs checked against the manifest) and
    redoes the failed one; every output is byte-identical to an uninterrupted run's."""
    ctx = make_ctx("test-N10")
    sk, _ = ctx.keygen()
    rng = np.random.default_rng(8)
    (tmp_path / "in").mkdir()
    for i in range(4):
        pcmm.encrypt_matrix(ctx, rng.uniform(-1, 1, (4, 20)), sk, level=2).save(tmp_path / "in" / f"x{i}.ct")
    np.save(tmp_path / "W.npy", rng.normal(size=(3, 4)))
    job = jobs.WeightsJob.from_files(tmp_path / "W.npy", preset="test-N10", allow_insecure=True)
    inputs = jobs.list_inputs(tmp_path / "in")
    names = [p.name for p in inputs]
    ref = jobs.run_batch(job, inputs, tmp_path / "ref", executor="local", progress=False)
    assert sorted(ref.done) == names

    monkeypatch.setattr(ray_batch, "TASK_RETRIES", 0)
    with victim_killed_when_armed(cluster, tmp_path, at=1, others=1.0) as k:
        res = jobs.run_batch(job, inputs, tmp_path / "out", retries=0, progress=False)
    assert "killed" in k, "the victim never started an item: no node was killed"
    assert len(res.failed) == 1 and sorted(res.done + list(res.failed)) == names, res.summary()
    (lost, why), = res.failed.items()
    assert "rerun" in why and "resume" in why, why
    with pytest.raises(jobs.BatchItemsFailedError, match="rerun .* resume"):
        res.raise_failed()

    monkeypatch.undo()
    ray.shutdown()
    ray.init(address=cluster["address"], log_to_driver=False)     # the rerun: a fresh driver, the same job
    again = jobs.run_batch(job, inputs, tmp_path / "out", progress=False)
    assert again.done == [lost] and sorted(again.skipped) == sorted(res.done) and not again.failed
    for n in names:
        assert (tmp_path / "out" / n).read_bytes() == (tmp_path / "ref" / n).read_bytes(), n
