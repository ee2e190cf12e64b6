"""Bootstrap placement (hemlp.planner.bootstrap_placement): the DP against exhaustive search on small level DAGs
(chains with random depths, residual blocks, ct x ct products), exact cost equality (integer costs, so the
sums are exact in float64); level rules; typed errors; the cost model read from the bootstrapping parameters
and the cost profile (the packaged table: the measured bench JSON)."""
from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

from hemlp.fhe import Params
from hemlp.bootstrap.params import preset_levels_consumed
from hemlp.errors import LevelError, ParameterError, ShapeError
from hemlp.planner.bootstrap_placement import (BootstrapCost, Decision, LevelNode, evaluate_placement,
                                               place_bootstraps, place_bootstraps_exhaustive)
from hemlp.planner.cost_model import active_profile

BENCH = Path(__file__).resolve().parents[2] / "bench"


def chain(depths, cts=None, costs=None):
    cts = cts or [1] * len(depths)
    costs = costs or [1] * len(depths)
    nodes = [LevelNode("x", "input", (), 0, cts[0], 1)]
    prev = "x"
    for i, d in enumerate(depths):
        nodes.append(LevelNode(f"l{i}", "op", (prev,), d, cts[i], costs[i]))
        prev = f"l{i}"
    nodes.append(LevelNode("y", "output", (prev,)))
    return nodes


def residual(rng, L, blocks=1):
    """input -> stem -> [branch a1 -> a2 ; skip] -> add -> ... -> head -> output, random depths / sizes."""
    r = lambda lo, hi: rng.randint(lo, hi)  # noqa: E731
    nodes = [LevelNode("x", "input", (), 0, r(1, 3), 1)]
    nodes.append(LevelNode("stem", "op", ("x",), r(0, L), r(1, 4), r(1, 5)))
    prev = "stem"
    for b in range(blocks):
        nodes.append(LevelNode(f"a{b}1", "op", (prev,), r(0, L), r(1, 4), r(1, 5)))
        nodes.append(LevelNode(f"a{b}2", "op", (f"a{b}1",), r(0, L), r(1, 4), r(1, 5)))
        nodes.append(LevelNode(f"add{b}", "add", (f"a{b}2", prev), 0, r(1, 4), r(0, 1)))
        prev = f"add{b}"
    nodes.append(LevelNode("head", "op", (prev,), r(0, L), r(1, 3), r(1, 5)))
    nodes.append(LevelNode("y", "output", ("head",)))
    return nodes


def check_dp_equals_exhaustive(nodes, boot, **kw):
    try:
        ex = place_bootstraps_exhaustive(nodes, boot, **kw)
    except LevelError:
        with pytest.raises(LevelError):
            place_bootstraps(nodes, boot, **kw)
        return None
    dp = place_bootstraps(nodes, boot, **kw)
    assert dp.total == ex.total, (dp.describe(), ex.describe())
    again = evaluate_placement(nodes, boot, dp.decisions, **kw)
    assert again is not None and again.total == dp.total
    assert dp.total == dp.op_seconds + dp.boot_seconds
    return dp


@pytest.mark.parametrize("seed", range(12))
def test_dp_equals_exhaustive_on_random_chains(seed):
    rng = random.Random(seed)
    L = rng.choice([2, 3])
    n = rng.randint(2, 4)
    depths = [rng.randint(0, L) for _ in range(n)]
    nodes = chain(depths, [rng.randint(1, 5) for _ in range(n)], [rng.randint(0, 6) for _ in range(n)])
    boot = BootstrapCost(L, float(rng.randint(1, 30)), rng.choice([None, float(rng.randint(1, 40))]))
    dp = check_dp_equals_exhaustive(nodes, boot, top_level=rng.randint(0, L))
    assert dp is not None      # every layer fits the budget: some placement always exists


@pytest.mark.parametrize("seed", range(8))
def test_dp_equals_exhaustive_on_residual_blocks(seed):
    rng = random.Random(100 + seed)
    L = 2
    nodes = residual(rng, L)
    boot = BootstrapCost(L, float(rng.randint(1, 20)))
    check_dp_equals_exhaustive(nodes, boot, min_output_level=rng.randint(0, 1))


def test_dp_equals_exhaustive_with_a_product_of_two_branches():
    # y = (a(x) * b(x)) + x : a binary op reads both operands at one level, then a residual add
    for seed in range(4):
        rng = random.Random(200 + seed)
        nodes = [LevelNode("x", "input", (), 0, 2, 1),
                 LevelNode("a", "op", ("x",), rng.randint(0, 2), 2, rng.randint(1, 4)),
                 LevelNode("b", "op", ("x",), rng.randint(0, 2), 2, rng.randint(1, 4)),
                 LevelNode("m", "op", ("a", "b"), 1, 2, 3),
                 LevelNode("s", "add", ("m", "x"), 0, 2, 0),
                 LevelNode("y", "output", ("s",))]
        check_dp_equals_exhaustive(nodes, BootstrapCost(2, float(rng.randint(1, 12))))


@pytest.mark.parametrize("seed", range(3))
def test_two_residual_blocks_dp_matches_exhaustive(seed):
    # x -> a -> (a + x) -> b -> (b + (a + x)) -> y: the second skip starts at the first join
    rng = random.Random(300 + seed)
    d = lambda: rng.randint(0, 2)  # noqa: E731
    nodes = [LevelNode("x", "input", (), 0, 2, 1),
             LevelNode("a", "op", ("x",), d(), 2, rng.randint(1, 4)),
             LevelNode("j0", "add", ("a", "x"), 0, 2, 0),
             LevelNode("b", "op", ("j0",), d(), 2, rng.randint(1, 4)),
             LevelNode("j1", "add", ("b", "j0"), 0, 2, 0),
             LevelNode("y", "output", ("j1",))]
    check_dp_equals_exhaustive(nodes, BootstrapCost(2, float(rng.randint(2, 12))))


def test_a_chain_within_the_budget_needs_no_bootstrap():
    p = place_bootstraps(chain([1, 1, 1]), BootstrapCost(3, 100.0))
    assert p.bootstraps == () and p.boot_seconds == 0
    assert [n.level_out for n in p.nodes] == [3, 2, 1, 0, 0]


def test_placement_levels_and_times_by_hand():
    # levels 3 after a bootstrap; layers of depth 2, 2, 3: x@2 -> l0 -> 0; bootstrap -> 3, l1 read at 2 -> 0;
    # bootstrap -> 3 -> l2 -> 0. Two bootstraps of 4 ciphertexts (pairs: 2 calls each at 5 s)
    nodes = chain([2, 2, 3], cts=[4, 4, 4], costs=[1, 1, 1])
    boot = BootstrapCost(3, 3.0, 5.0)
    p = place_bootstraps(nodes, boot)
    assert [(b.value, b.before, b.level_before, b.level_after, b.bootstraps) for b in p.bootstraps] == [
        ("l0", "l1", 0, 3, 2), ("l1", "l2", 0, 3, 2)]
    assert p.boot_seconds == 20.0
    # layer times: l0 needs only 2 levels before the bootstrap, so the DP encrypts the input at level 2 (not 3)
    # and l0 runs at 2 (cheaper); l1 reads the refreshed value at 2 (dropped from 3); l2 needs 3
    assert [n.reads for n in p.nodes] == [(2,), (2,), (2,), (3,), (0,)]
    assert p.op_seconds == 3 + 3 + 3 + 4
    text = p.describe()
    assert "bootstrap l0 before l1: level 0 -> 3" in text
    assert "2 refresh point(s), 4 bootstrap(s)" in text


def test_reads_below_the_stored_level_when_cheaper():
    # after a bootstrap (level 3) a depth-1 layer is cheaper at level 1 than at 3, and the output needs nothing
    nodes = chain([3, 1], cts=[1, 1], costs=[0, 10])
    p = place_bootstraps(nodes, BootstrapCost(3, 5.0))
    assert p.nodes[2].reads == (1,) and [b.value for b in p.bootstraps] == ["l0"]
    assert p.total == 4 + 0 + 5 + 20


def test_bootstrap_before_the_fork_serves_both_branches():
    # the skip value is refreshed once and read by both the branch and the add
    nodes = [LevelNode("x", "input", (), 0, 1, 0),
             LevelNode("s", "op", ("x",), 2, 8, 0),
             LevelNode("a", "op", ("s",), 2, 8, 0),
             LevelNode("j", "add", ("a", "s"), 0, 8, 0),
             LevelNode("y", "output", ("j",))]
    p = check_dp_equals_exhaustive(nodes, BootstrapCost(2, 1.0))
    assert [(b.value, b.before) for b in p.bootstraps] == [("s", "a")]
    assert p.level_of("j") == 0


def test_a_layer_deeper_than_the_bootstrap_budget_is_a_typed_error_naming_it():
    with pytest.raises(LevelError) as e:
        place_bootstraps(chain([1, 4, 1]), BootstrapCost(3, 1.0))
    msg = str(e.value)
    assert "'l1'" in msg and "4 levels" in msg and "only 3" in msg
    assert "degree" in msg and "split the activation" in msg
    with pytest.raises(LevelError):
        place_bootstraps_exhaustive(chain([4]), BootstrapCost(3, 1.0))


def test_an_output_level_that_no_placement_reaches_is_a_level_error():
    # a residual add of two values at one level spends a level (scale alignment): none is left at level 0
    nodes = [LevelNode("x", "input"), LevelNode("a", "op", ("x",), 0), LevelNode("j", "add", ("a", "x")),
             LevelNode("y", "output", ("j",))]
    with pytest.raises(LevelError, match="no bootstrap placement reaches node 'j'"):
        place_bootstraps(nodes, BootstrapCost(0, 1.0))
    with pytest.raises(LevelError):
        place_bootstraps_exhaustive(nodes, BootstrapCost(0, 1.0))
    # an output level above the others is reached by a bootstrap right before the output
    p = place_bootstraps(chain([1]), BootstrapCost(3, 5.0), min_output_level=3)
    assert [(b.value, b.before) for b in p.bootstraps] == [("l0", "y")]


def test_malformed_dags_are_typed_errors():
    boot = BootstrapCost(3, 1.0)
    with pytest.raises(ShapeError, match="topological"):
        place_bootstraps([LevelNode("a", "op", ("x",), 1), LevelNode("x", "input")], boot)
    with pytest.raises(ShapeError, match="no output"):
        place_bootstraps([LevelNode("x", "input")], boot)
    with pytest.raises(ParameterError, match="op"):
        place_bootstraps([LevelNode("x", "relu")], boot)
    with pytest.raises(ShapeError, match="has 3 inputs; add takes 2"):
        place_bootstraps([LevelNode("x", "input"), LevelNode("j", "add", ("x", "x", "x"))], boot)
    with pytest.raises(ParameterError):
        BootstrapCost(-1, 1.0)
    with pytest.raises(ShapeError):
        evaluate_placement(chain([1]), boot, [Decision((), (3,))])


def test_evaluate_rejects_reads_above_the_stored_level():
    nodes = chain([1])
    boot = BootstrapCost(3, 1.0)
    ok = [Decision((), (2,)), Decision((), (2,)), Decision((), (1,))]
    assert evaluate_placement(nodes, boot, ok).total == 3 + 3 + 0
    bad = [Decision((), (2,)), Decision((), (3,)), Decision((), (2,))]
    assert evaluate_placement(nodes, boot, bad) is None
    boot_then_read = [Decision((), (0,)), Decision(("x",), (3,)), Decision((), (2,))]
    p = evaluate_placement(nodes, boot, boot_then_read)
    assert p.boot_seconds == 1.0 and p.bootstraps[0].level_before == 0


def test_cost_model_from_the_bootstrapping_parameters_and_the_benchmarks():
    n16 = BootstrapCost.from_params(Params.preset("N16-boot"), preset_levels_consumed("N16-boot"))
    measured = json.loads((BENCH / "boot_N16.json").read_text())
    one = next(r for r in measured["results"] if r["threads"] == 1)
    assert n16.levels_after == measured["levels_left"] == 12
    assert n16.seconds == pytest.approx(one["bootstrap"]["median_s"])
    assert n16.pair_seconds == pytest.approx(one["bootstrap_pair"]["median_s"])
    assert "boot_N16.json" in n16.source and n16.precision_bits == pytest.approx(one["max_bits"])
    n12 = BootstrapCost.from_params(Params.preset("test-N12-boot"), preset_levels_consumed("test-N12-boot"))
    assert n12.levels_after == 3 and 0 < n12.seconds < 2 and "measured" in n12.source
    assert "cost profile: packaged table avx512" in n16.source          # the plan names the profile
    # without measurements: scaled from the built-in N16 reference by N log N (L+1)^2
    est = BootstrapCost.from_params(Params.preset("test-N12-boot"), preset_levels_consumed("test-N12-boot"),
                                    profile=replace(active_profile(), bootstrap=()))
    f = (4096 * 12 * 17 ** 2) / (65536 * 16 * 29 ** 2)
    assert est.seconds == pytest.approx(9.276 * f) and "estimate" in est.source and est.precision_bits is None
    assert est.seconds_for(5) == pytest.approx(2 * est.pair_seconds + est.seconds)
    assert est.bootstraps_for(5) == 3
    with pytest.raises(ParameterError, match="not a bootstrapping preset"):
        BootstrapCost.from_params(Params.preset("N14-d6"), preset_levels_consumed("N14-d6"))


@pytest.mark.parametrize("seed", range(4))
def test_dp_equals_exhaustive_on_layout_p_chains(seed):
    """Layout (P)'s level DAG (hemlp.layouts.packed_bootstrap.packed_level_dag: costs from the packed program's
    diagonal products and rotations) placed by the same DP: equal to exhaustive search."""
    import numpy as np

    from hemlp.compiler.lower import Step
    from hemlp.layouts.packed import PackedProgram
    from hemlp.layouts.packed_bootstrap import packed_level_dag

    rng = random.Random(200 + seed)
    nrng = np.random.default_rng(seed)
    widths = [rng.choice([4, 8, 16]) for _ in range(3)]
    steps, prev, n = [Step("input", "x", [], 16)], "x", 16
    for i, m in enumerate(widths):
        steps.append(Step("pcmm", f"l{i}", [prev], m, U=nrng.normal(size=(m, n))))
        prev, n = f"l{i}", m
        if i < len(widths) - 1:
            steps.append(Step("square", f"a{i}", [prev], m))
            prev = f"a{i}"
    steps.append(Step("output", "y", [prev], n))
    params = Params.preset("test-N10-boot")
    L = rng.choice([1, 2])
    nodes = packed_level_dag(PackedProgram(steps, params.N // 2, rng.choice([1, 2])), params, L)
    assert all(nd.cost_per_limb > 0 for nd in nodes if nd.op == "op")
    boot = BootstrapCost(L, nodes[1].cost_per_limb * rng.randint(2, 40))
    dp = place_bootstraps(nodes, boot)
    ex = place_bootstraps_exhaustive(nodes, boot)
    assert dp.total == pytest.approx(ex.total, rel=1e-12)
    assert len(dp.bootstraps) >= -(-5 // L) - 1       # 5 levels of layers: the input and each bootstrap give L
