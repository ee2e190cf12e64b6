"""Compiled models on Ray (CompiledModel.run(runtime="ray")): bit-identical to the in-process runtime
for an MLP and a CNN, on two raylets, and through a worker killed in the middle of a layer."""
import socket
import warnings

import numpy as np
import pytest

from hemlp.errors import InsecureParametersError

ray = pytest.importorskip("ray")
torch = pytest.importorskip("torch")

import hemlp  # noqa: E402
from hemlp.runtime import ray as rr  # noqa: E402
from hemlp.runtime.ray import cost, gemm, run, session, tasks  # noqa: E402
from tests.runtime import faults  # noqa: E402
from hemlp.runtime.ray.blocks import meta_of, pack_cts, unpack_cts  # noqa: E402
from tests.compiler.conftest import SmallCNN, mlp  # noqa: E402


@pytest.fixture(autouse=True)
def _quiet_insecure():
    from hemlp.fhe import InsecureParametersWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InsecureParametersWarning)
        yield


def _compiled(model, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = hemlp.compile(model, x, batch_size=x.shape[0], allow_insecure=True, layout="batch")
        sk, ek = cm.keygen()
        ct = cm.encrypt(x, sk)
        ref = cm.run(ct, ek)  # in process
    return dict(cm=cm, sk=sk, ek=ek, ct=ct, x=x, ref=ref)


@pytest.fixture(scope="module")
def mlp_case():
    x = np.random.default_rng(7).uniform(0, 1, size=(16, 64))
    return _compiled(mlp(dims=(64, 32, 16, 10)), x)  # 64-32-16-10, x^2 activations: depth 5


@pytest.fixture(scope="module")
def cnn_case():
    x = np.random.default_rng(2).normal(size=(8, 1, 8, 8))
    return _compiled(SmallCNN(), x)  # conv -> x^2 -> avgpool -> conv -> x^2 -> FC (depth 6)


def same(a, b) -> bool:
    A, B = a.ctm, b.ctm
    return A.shape == B.shape and A.chunks == B.chunks and all(
        p.to_bytes() == q.to_bytes() for p, q in zip(A.cts, B.cts, strict=True))


def ops(case):
    return [s.op for s in case["cm"].steps]


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory):
    """One local Ray (2 CPUs) whose workers die once when the returned marker file is deleted."""
    if ray.is_initialized():
        ray.shutdown()
    marker = tmp_path_factory.mktemp("fault") / "died"
    marker.write_text("armed only when deleted")
    faults.ray_init(marker)
    yield marker
    ray.shutdown()


def test_mlp_bit_identical_to_local(local_ray, mlp_case):
    c = mlp_case
    assert {"pcmm", "square"} <= set(ops(c))
    st = {}
    out = c["cm"].run(c["ct"], c["ek"], runtime="ray", stats=st)
    assert same(out, c["ref"])
    assert out.layer_seconds.keys() == c["ref"].layer_seconds.keys() and all(
        v > 0 for v in out.layer_seconds.values())
    steps = {s.out: s.op for s in c["cm"].steps}
    ran = {k: v for k, v in st.items() if k in steps and steps[k] != "input"}
    assert {steps[k] for k in ran} == {"pcmm", "square"}  # every PCMM and elementwise step went through Ray
    # one node (cost.sharded): one node-local task on both CPUs runs the program
    heads = [v for v in ran.values() if "group" in v]
    assert len(heads) == 1 and heads[0]["tasks"] == 1 and heads[0]["threads"] == 2
    assert set(heads[0]["group"]) == set(ran)
    y = c["cm"].decrypt(out, c["sk"])
    assert np.max(np.abs(y - c["cm"].simulate(c["x"]))) < 1e-5 * max(1, np.abs(y).max())


def test_malloc_tuning_is_opt_in(local_ray, mlp_case, monkeypatch):
    """The workers' malloc stays glibc's unless the driver asks (tune_malloc / HEMLP_RAY_TUNE_MALLOC); the tasks
    report their process's state, and the bits are the same either way. (No earlier test of this module opts in.)"""
    from hemlp.runtime.ray import malloc

    c = mlp_case
    monkeypatch.delenv(malloc.TUNE_MALLOC_ENV, raising=False)
    assert not malloc.tune_malloc_requested() and malloc.tune_malloc_requested(True)
    monkeypatch.setenv(malloc.TUNE_MALLOC_ENV, "0")
    assert not malloc.tune_malloc_requested() and not rr.RayProgram(num_workers=2).tune_malloc
    st = {}
    assert same(c["cm"].run(c["ct"], c["ek"], runtime="ray", stats=st), c["ref"])
    heads = [v for v in st.values() if "group" in v]
    assert heads and not any(v["malloc_tuned"] for v in heads)
    monkeypatch.setenv(malloc.TUNE_MALLOC_ENV, "1")
    assert rr.RayProgram(num_workers=2).tune_malloc and not rr.RayProgram(num_workers=2, tune_malloc=False).tune_malloc
    st = {}
    assert same(c["cm"].run(c["ct"], c["ek"], runtime="ray", stats=st), c["ref"])
    heads = [v for v in st.values() if "group" in v]
    assert heads and all(v["malloc_tuned"] for v in heads)


def test_mlp_explicit_grid_and_groups(local_ray, mlp_case):
    c = mlp_case
    st = {}
    out = c["cm"].run(c["ct"], c["ek"], runtime="ray", num_workers=2, grid=(1, 1, 2), cts_per_task=5, stats=st)
    assert same(out, c["ref"])
    assert all(v["grid"] == (1, 1, 2, 1) for v in st.values() if v["op"] == "pcmm")
    sq = [v for v in st.values() if v["op"] == "square"]
    assert sq and all(v["cts_per_task"] == 5 for v in sq)


def test_cnn_bit_identical_to_local(local_ray, cnn_case):
    c = cnn_case
    assert "pcmm" in ops(c) and "square" in ops(c)
    st = {}
    out = c["cm"].run(c["ct"], c["ek"], runtime="ray", stats=st)
    assert same(out, c["ref"])
    assert any(v["op"] == "pcmm_gather" for v in st.values())  # the convolutions: im2col on Ray


@pytest.mark.parametrize("grid", [(1, 1, 1, 2), (1, 1, 2, 2)])
def test_cnn_part_split_bit_identical(local_ray, cnn_case, grid):
    """The two polynomials of every ciphertext in different tasks (the epilogue per part: x K, rescale, bias on
    c0), with and without partial sums, through gathered (im2col) PCMMs: the same bits as in process."""
    c = cnn_case
    st = {}
    out = c["cm"].run(c["ct"], c["ek"], runtime="ray", num_workers=2, grid=grid, stats=st)
    assert same(out, c["ref"])
    assert {v["grid"] for v in st.values() if v["op"] in ("pcmm", "pcmm_gather")} == {grid}


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_two_chunks_with_grids_that_change_between_layers(local_ray, model):
    """A batch of two ciphertext chunks: a layer split by chunks (p_n = 2) feeds one that is not (its tasks read
    several chunk blocks, also through the im2col gather), with and without the part split; the planner's
    default mixes them. Same bits as in process, and the bytes equal the model."""
    from tests.compiler.conftest import SmallCNN

    rng = np.random.default_rng(5)
    if model == "mlp":
        x = rng.uniform(0, 1, size=(2100, 64))
        c = _compiled(mlp(dims=(64, 32, 16, 10)), x)
    else:
        x = rng.normal(size=(2100, 1, 8, 8))
        c = _compiled(SmallCNN(), x)
    assert c["ct"].ctm.chunks == 2
    names = [s.out for s in c["cm"].steps if s.op == "pcmm"]
    for grid in (None, {names[0]: (1, 2, 1, 1), names[1]: (1, 1, 1, 2)}, {names[0]: (1, 2, 1, 2), names[1]: (1, 1, 2, 1)}):
        st = {}
        out = c["cm"].run(c["ct"], c["ek"], runtime="ray", num_workers=2, grid=grid, stats=st)
        assert same(out, c["ref"]), grid
        for k, v in st.items():
            if "model_bytes" in v and v.get("op") == "pcmm":
                assert v["bytes"]["total"] == v["model_bytes"]["total"], (grid, k)


def test_part_split_grid_errors(local_ray, mlp_case):
    c = mlp_case
    with pytest.raises(hemlp.errors.ShapeError, match="p_s"):
        c["cm"].run(c["ct"], c["ek"], runtime="ray", grid=(1, 1, 1, 3))


def test_affine_and_polynomial_steps(local_ray):
    """relu -> Chebyshev polynomial (poly step) whose input also feeds a residual (affine step + add on the driver)."""
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(4)
            self.fc1, self.fc2, self.out = torch.nn.Linear(8, 6), torch.nn.Linear(6, 6), torch.nn.Linear(6, 3)

        def forward(self, x):
            h = self.fc1(x)
            h = h + self.fc2(torch.relu(h))
            return self.out(h)

    x = np.random.default_rng(3).normal(size=(8, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = hemlp.compile(Net().eval(), x, activation_degree=3, allow_insecure=True, batch_size=8, layout="batch")
        sk, ek = cm.keygen()
        ct = cm.encrypt(x, sk)
    assert {"affine", "add"} <= {s.op for s in cm.steps} and ({"poly", "square"} & {s.op for s in cm.steps})
    ref = cm.run(ct, ek)
    st = {}
    assert same(cm.run(ct, ek, runtime="ray", stats=st), ref)
    assert "affine" in {v["op"] for v in st.values()}
    # fc2 forced onto a grid: the node-local wave before it returns two values (fc2's input and the residual that
    # the add after it reads), the one after it takes two (the residual and fc2's output)
    pcmms = [s.out for s in cm.steps if s.op == "pcmm"]
    for g in ((2, 1, 1), (1, 1, 1, 2)):
        st = {}
        assert same(cm.run(ct, ek, runtime="ray", num_workers=2, grid={pcmms[1]: g}, stats=st), ref), g
        heads = [k for k, v in st.items() if "group" in v]
        assert len(heads) == 3 and st[pcmms[1]]["grid"] == (g + (1,))[:4], (g, heads)


@pytest.mark.parametrize("grid", [None, (1, 1, 2), (1, 1, 1, 2)])
def test_worker_killed_mid_layer(local_ray, mlp_case, monkeypatch, grid):
    """A worker os._exit()s on the first task of the second PCMM group (the product, the rescale and the fused
    activation; with (1, 1, 2) a partial-sum task with several returns); Ray re-runs the pure task from its
    ObjectRef arguments (blocks of the previous layer) and the result keeps the same bits."""
    c = mlp_case
    target = [s.out for s in c["cm"].steps if s.op == "pcmm"][1]

    class Killing(rr.RayProgram):
        def _layer_start(self, name):
            if name == target:
                local_ray.unlink()  # armed: the next task to start creates the marker and dies

    monkeypatch.setattr(run, "RayProgram", Killing)
    st = {}
    out = c["cm"].run(c["ct"], c["ek"], runtime="ray", grid=grid, stats=st)
    assert local_ray.exists(), "no worker died: the fault was not injected"
    assert st[target]["tasks"] >= (1 if grid is None else 2)  # default: the small model runs node-local
    assert same(out, c["ref"])


def test_worker_context_cached_per_process(mlp_case):
    ctx = mlp_case["cm"].context
    tasks.clear_worker_cache()
    bits = ctx.native.min_security_bits   # the driver's policy travels with the parameters (0: a test model)
    a = tasks.worker_context(ctx.hash, ctx.params.to_bytes(), bits)
    b = tasks.worker_context(ctx.hash, ctx.params.to_bytes(), bits)
    assert a is b and a.hash == ctx.hash and bits == 0
    with pytest.raises(InsecureParametersError):   # a worker never lowers the policy by itself
        tasks.worker_context(ctx.hash, ctx.params.to_bytes())
    arr, metas = pack_cts(mlp_case["ct"].ctm.cts[:3])  # seeded fresh encryptions round-trip exactly
    assert [x.to_bytes() for x in unpack_cts(a, arr, metas)] == [
        x.to_bytes() for x in mlp_case["ct"].ctm.cts[:3]]


def test_api_errors(mlp_case):
    c = mlp_case
    with pytest.raises(ValueError, match="runtime"):
        c["cm"].run(c["ct"], c["ek"], runtime="gpu")
    with pytest.raises(TypeError, match="grid"):
        c["cm"].run(c["ct"], c["ek"], grid=(1, 1, 1))
    with pytest.raises(ValueError, match="address"):
        c["cm"].run(c["ct"], c["ek"], address="127.0.0.1:1")


def test_unreachable_address_fails_fast(mlp_case):
    import time

    c = mlp_case
    if ray.is_initialized():
        ray.shutdown()
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    t0 = time.perf_counter()
    with pytest.raises(rr.RuntimeUnavailableError, match=dead):
        c["cm"].run(c["ct"], c["ek"], runtime="ray", address=dead)
    assert time.perf_counter() - t0 < 5 and not ray.is_initialized()


def test_two_raylets_both_used(mlp_case):
    from ray.cluster_utils import Cluster

    c = mlp_case
    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        st = {}
        out = c["cm"].run(c["ct"], c["ek"], runtime="ray", address=cluster.address, num_workers=2, stats=st,
                          grid=(2, 1, 1))  # row blocks: the squares run fused in the two PCMM tasks
        assert not ray.is_initialized(), "run() must disconnect from a cluster it joined"
        assert same(out, c["ref"])
        nodes = {n for v in st.values() for n in v["nodes"]}
        assert len(nodes) == 2, f"tasks ran on {nodes} only"
        sq = [v for v in st.values() if v["op"] == "square"]
        assert len({n for v in sq for n in v["nodes"]}) == 2, "the elementwise tasks did not spread over both nodes"
        # the part split across raylets: each part object moves on its own; the squares' node-local wave (one
        # CPU per node here) splits its rows into two tasks (as many as nodes), each reading its rows of both parts
        st = {}
        out = c["cm"].run(c["ct"], c["ek"], runtime="ray", address=cluster.address, num_workers=2, grid=(1, 1, 1, 2),
                          stats=st)
        assert same(out, c["ref"])
        sq = [v for v in st.values() if v["op"] == "square" and "group" in v]
        assert sq and all(v["tasks"] == 2 and v["threads"] == 1 for v in sq)
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()


def _groups(st, steps):
    return {k: v for k, v in st.items() if k in steps and "group" in v}


@pytest.mark.parametrize("grid", [None, (1, 1, 2), (1, 1, 1, 2), (2, 1, 2, 2)])
def test_blocks_stay_in_store_and_bytes_match_model(local_ray, mlp_case, grid):
    """Activations never come back to the driver between layers; every square runs inside the PCMM task that
    produced its input (p_s = 1) or in the node-local wave right after it (p_s = 2: both parts needed); the bytes the tasks
    read and write through the store equal the planner's model, and the default grid is grid_store's."""
    from hemlp.planner.grid import grid_store, pcmm_store_bytes

    c = mlp_case
    steps = {s.out: s for s in c["cm"].steps}
    st = {}
    out = c["cm"].run(c["ct"], c["ek"], runtime="ray", num_workers=2, grid=grid, stats=st)
    assert same(out, c["ref"])
    N = c["cm"].context.N
    H = lambda level: 2 * (level + 1) * N * 8  # noqa: E731
    groups = _groups(st, steps)
    first = next(s.out for s in c["cm"].steps if s.op == "input")
    assert st[first]["put_bytes"] == len(c["ct"].ctm.cts) * 2 * (steps[first].level_out + 1) * N * 8
    assert st["_output"]["get_bytes"] == len(out.ctm.cts) * 2 * (out.ctm.level + 1) * N * 8
    if grid is None:  # one node: one node-local task reads the input and writes the output
        (v,) = groups.values()
        assert v["tasks"] == 1 and v["threads"] == 2
        assert v["bytes"]["total"] == v["model_bytes"]["total"] == st[first]["put_bytes"] + st["_output"]["get_bytes"]
        return
    pcmms = [k for k in groups if steps[k].op == "pcmm"]
    assert len(pcmms) == 3
    for name in pcmms:
        v, s = groups[name], steps[name]
        level_in = s.level_out + 1
        after = [k for k, w in st.items() if w.get("after") == name]  # squares deferred to their own wave
        fused = [k for k in v["group"][1:]]
        assert not (after and fused)
        level_out = steps[(fused or [name])[-1]].level_out
        nxt = [k for k in steps if steps[k].inputs and steps[k].inputs[0] == name and steps[k].op == "square"]
        default = grid_store(s.U.shape[0], 1, s.U.shape[1], 2, H(level_in),
                             H(steps[(after or fused or [name])[-1]].level_out), parts=2,
                             deferred_H=H(s.level_out) if nxt else None).dims4
        want = default if grid is None else (tuple(grid) + (1,))[:4]
        assert v["grid"] == want
        assert bool(after) == (want[3] == 2 and want[2] == 1 and bool(nxt))
        model = pcmm_store_bytes(v["grid"], *s.U.shape, 1, H(level_in), H(level_out))
        assert v["model_bytes"]["total"] == model["total"]
        assert v["bytes"]["total"] == model["total"], (name, v["bytes"], model)
        for k in after:  # the deferred wave: one node-local task on both CPUs reads both parts once
            w = groups[k]
            assert w["bytes"]["total"] == w["model_bytes"]["total"] == s.U.shape[0] * (H(s.level_out) + H(
                steps[k].level_out)), (k, w["bytes"], w["model_bytes"])
            assert w["tasks"] == 1 and w["threads"] == 2
    for k, v in st.items():
        if k in steps and steps[k].op == "square" and "fused_into" in v:
            assert v["fused_into"] in groups and k in st[v["fused_into"]]["group"]


def test_default_grid_splits_parts_for_a_wide_layer():
    """784 -> 128 on 2 workers: the two parts of every ciphertext in two tasks (no partial sums) beats splitting
    the reduction (partial sums written and read twice) and the output rows (the input read twice)."""
    from hemlp.planner.grid import grid_store

    H_in, H_pcmm, H_out = 2 * 6 * 8192 * 8, 2 * 5 * 8192 * 8, 2 * 4 * 8192 * 8
    assert grid_store(128, 1, 784, 2, H_in, H_out, parts=2, deferred_H=H_pcmm).dims4 == (1, 1, 1, 2)
    assert grid_store(128, 1, 784, 2, H_in, H_out).dims4 == (1, 1, 2, 1)  # without the part axis: the reduction
    assert grid_store(128, 1, 784, 4, H_in, H_out, parts=2, deferred_H=H_pcmm).size == 4


def test_step_by_step_fallback(local_ray, mlp_case, monkeypatch):
    """Programs RayProgram does not know run through local.run with the per-step RayExecutor: same bits."""
    c = mlp_case
    monkeypatch.setattr(run, "supported", lambda steps, C, bootstraps=False: False)
    st = {}
    out = c["cm"].run(c["ct"], c["ek"], runtime="ray", stats=st)
    assert same(out, c["ref"])
    assert "group" not in next(iter(st.values())) and {v["op"] for v in st.values()} == {"pcmm", "square"}


def test_task_side_metadata_of_pipelined_waves():
    """Blocks of a wave still running name their producer's meta ref: a task resolves ("arg", k, a, b) to the
    metas a:b of its k-th meta argument, and a PCMM task derives its input metadata and output scale from them,
    refusing rows that disagree or a level other than the plan's (typed, as the driver's check on the input)."""
    from hemlp.errors import LevelError

    metas = [(3, 2.0 ** 40, 8192, 0, False, 7)] * 4 + [(3, 2.0 ** 40 * (1 + 2 ** -20), 8192, 0, False, 7)]
    dicts = ({"metas": metas[:2]}, {"metas": metas})
    assert tasks.resolve_metas(("arg", 1, 1, 3), dicts) == metas[1:3]
    assert tasks.resolve_metas(("arg", 0, None, None), dicts) == metas[:2]
    assert tasks.resolve_metas(metas[:1], dicts) == metas[:1]      # known metas pass through
    got = gemm.pcmm_in_meta(dict(level=3, factor=3.0), [metas[:2], metas[2:4]])
    assert got == dict(in_meta=metas[0], scale_out=3.0 * 2.0 ** 40)
    with pytest.raises(LevelError, match="share level, scale"):
        gemm.pcmm_in_meta(dict(level=3, factor=3.0), [metas[:2], metas[3:]])   # a scale differs
    with pytest.raises(LevelError, match="level 3, the plan expects 4"):
        gemm.pcmm_in_meta(dict(level=4, factor=3.0), [metas[:2]])


def test_sharding_rule_weighs_a_wave_against_the_work(monkeypatch):
    """cost.sharded: on one node (workers <= a node-local task's threads) nothing is sharded, the task runs
    the grid's cells as threads; across nodes a wide first layer (784 -> 128 at N = 2^14, 6 limbs) goes on its
    grid, but not a 128 -> 64 layer (moving its blocks between nodes costs more than the grid saves), nor the wide
    one over a slow network; explicit grids decide alone."""
    from types import SimpleNamespace

    from hemlp.compiler.lower import Step

    # the rule at a stated PCMM cost (1.2e-10 s per multiply-accumulate, the exact GEMM before session 9's kernel
    # work), not at whatever bench/pcmm_N14.json measured last: a faster kernel moves the break-even width
    costs = dict(cost.unit_costs(), pcmm_mac=1.2e-10)
    monkeypatch.setattr(cost, "unit_costs", lambda: costs)
    ctx = SimpleNamespace(N=2 ** 14)
    wide = Step("pcmm", "l0", ["x"], 128, U=np.zeros((128, 784)), level_out=4)
    small = Step("pcmm", "l2", ["h"], 64, U=np.zeros((64, 128)), level_out=2)
    def rule(prog, ctx, s, chunks):
        return cost.sharded(ctx, s, chunks, prog.num_workers, prog.node_threads, prog.grid)

    def prog(p, t, grid=None):
        return SimpleNamespace(grid=grid, num_workers=p, node_threads=t)

    for p in (1, 2, 8):  # one node
        assert not rule(prog(p, p), ctx, wide, 1) and not rule(prog(p, p), ctx, small, 1)
    for p, t in ((2, 1), (8, 2)):  # two nodes of one CPU, four of two
        assert rule(prog(p, t), ctx, wide, 1) and not rule(prog(p, t), ctx, small, 1)
    monkeypatch.setattr(cost, "RAY_NODE_TRANSFER_BYTES_PER_S", 1e8)  # ~1 Gb/s between nodes
    assert not rule(prog(2, 1), ctx, wide, 1)
    assert rule(prog(2, 2, grid=(1, 1, 2)), ctx, small, 1) and rule(prog(2, 2, grid={"l2": (2, 1, 1)}), ctx, small, 1)
    assert not rule(prog(2, 2, grid={"l0": (2, 1, 1)}), ctx, small, 1)


@pytest.mark.parametrize("case", ["mlp_case", "cnn_case"])
def test_node_local_pcmm_reads_its_input_in_place(local_ray, case, request):
    """On one node the program is one task; its first PCMM reads the input from the store (_pcmm_in_place: the
    native PCMM over row views) instead of importing it, with the same bits as in process (dense and gathered
    PCMMs; the driver's ct-major input, limb-major blocks of earlier waves, several blocks; 1 and 2 threads)."""
    from hemlp.runtime.local import LocalExecutor, run_step

    c = request.getfixturevalue(case)
    ctx, C, bits = c["cm"].context, c["ct"].ctm, c["cm"].weight_bits
    first = next(s for s in c["cm"].steps if s.op == "pcmm")
    want = run_step(ctx, first, {first.inputs[0]: C}, LocalExecutor(), None, bits)
    parts = tuple([ct.native.poly_view(p) for ct in C.cts] for p in (0, 1))  # the driver's ct-major input put
    metas = [meta_of(ct.native) for ct in C.cts]
    limb_major = tuple(np.stack([np.stack(ps[r * C.chunks: (r + 1) * C.chunks], axis=1) for r in range(C.shape[0])],
                                axis=1) for ps in parts)  # (limbs, rows, chunks, N): a block of an earlier wave
    for blocks in ([(parts, (0, C.shape[0], 0, C.chunks), metas)],
                   [(limb_major, (0, C.shape[0], 0, C.chunks), metas)],
                   [(tuple(p[:3 * C.chunks] for p in parts), (0, 3, 0, C.chunks), metas[:3 * C.chunks]),  # two blocks
                    (tuple(a[:, 3:] for a in limb_major), (3, C.shape[0], 0, C.chunks), metas[3 * C.chunks:])]):
        for threads in (1, 2):
            hemlp.set_num_threads(threads)
            y = gemm.pcmm_in_place(ctx, first, blocks, C.shape, C.chunks, bits)
            assert y.shape == want.shape and all(a.to_bytes() == b.to_bytes()
                                                 for a, b in zip(y.cts, want.cts, strict=True))
    hemlp.set_num_threads(1)
    st = {}
    out = c["cm"].run(c["ct"], c["ek"], runtime="ray", num_workers=2, stats=st)
    assert same(out, c["ref"])
    (v,) = [v for v in st.values() if "group" in v]
    assert v["tasks"] == 1 and v["threads"] == 2 and v["in_place"] == [first.inputs[0]]
