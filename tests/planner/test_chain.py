"""Chain planning (docs/design/pcmm-and-planning.md §4.6 [R]): DP == exhaustive, greedy >= DP, depth budgets,
MCM DP == brute force."""

import math
import random

import pytest

from hemlp.errors import LevelError, ParameterError, ShapeError
from hemlp.planner.chain import (
    Activation,
    default_reblock_cost,
    mcm_bruteforce,
    mcm_order,
    obl_cost_fn,
    plan_chain,
    plan_chain_exhaustive,
    plan_chain_greedy,
)
from hemlp.planner.obl import cgemm_cost, obl, slots_required

S_O = 2 ** 14


def _random_chain(rng, max_mms=4):
    """Random chain Y_i = W_i f(Y_{i-1}) of 1..max_mms MMs with small power-of-two dims."""
    count = rng.randint(1, max_mms)
    widths = [2 ** rng.randint(0, 5) for _ in range(count + 1)]  # k_1, m_1 = k_2, ..., m_L
    n = 2 ** rng.randint(0, 5)
    shapes = [(widths[i + 1], n, widths[i]) for i in range(count)]
    acts = [Activation(depth=rng.randint(0, 2), cost_per_ciphertext=rng.choice([0.0, 1.0, 5.0]))
            for _ in range(count - 1)]
    return shapes, acts


def _random_setting(rng):
    shapes, acts = _random_chain(rng)
    S_o = rng.choice([4, 16, 64])
    reblock = rng.choice([None, default_reblock_cost, lambda rows, n, c, a, b: 0.5 * rows])
    base = 3 * len(shapes) + sum(a.depth for a in acts)
    budget = rng.choice([None, base, base + 1, base + 3])
    return dict(shapes=shapes, S_o=S_o, depth_budget=budget, reblock_cost_fn=reblock, activations=acts)


def test_dp_equals_exhaustive_on_random_chains():
    rng = random.Random(11)
    with_reblocks = 0
    for _ in range(300):
        setting = _random_setting(rng)
        dp, ex = plan_chain(**setting), plan_chain_exhaustive(**setting)
        assert dp.total_cost == pytest.approx(ex.total_cost, rel=1e-12), setting
        assert dp.depth <= (setting["depth_budget"] or math.inf)
        # the plan is internally consistent: every layout fits, every input matches or is re-blocked
        for prev, step in zip(dp.steps, dp.steps[1:]):
            assert step.layout.b_k == prev.layout.b_m or step.reblock_from == prev.layout.b_m
        assert all(s.layout.S_r <= setting["S_o"] for s in dp.steps)
        assert sum(s.cost for s in dp.steps) == pytest.approx(dp.total_cost)
        with_reblocks += dp.reblocks > 0
    assert with_reblocks > 0  # the sample exercises re-blocking


def test_dp_equals_exhaustive_with_other_cost_models():
    rng = random.Random(12)
    models = [lambda m, n, k: m * n * k, {"ROT": 0, "MULT": 1, "PMULT": 0, "ADD": 0},
              lambda m, n, k: cgemm_cost(m, n, k) + 50.0]  # a fixed per-CGEMM overhead favours few blocks
    for _ in range(120):
        setting = _random_setting(rng)
        setting["cost_fn"] = rng.choice(models)
        assert plan_chain(**setting).total_cost == pytest.approx(plan_chain_exhaustive(**setting).total_cost,
                                                                  rel=1e-12)


def test_greedy_never_beats_dp():
    rng = random.Random(13)
    worse = stuck = 0
    for _ in range(300):
        setting = _random_setting(rng)
        setting["S_o"] = rng.choice([4, 16, 64])  # greedy runs Algorithm 2: square S_o only
        dp = plan_chain(**setting)
        try:
            greedy = plan_chain_greedy(**setting)
        except (ShapeError, LevelError):
            stuck += 1
            continue
        assert greedy.total_cost >= dp.total_cost * (1 - 1e-12), setting
        assert greedy.depth <= (setting["depth_budget"] or math.inf)
        worse += greedy.total_cost > dp.total_cost * (1 + 1e-9)
    assert worse > 0  # the greedy is a heuristic: the test can tell it apart from the DP


def test_depth_budget_error_names_missing_levels():
    shapes = [(64, 256, 64), (64, 256, 64), (16, 256, 64)]
    acts = [Activation(depth=1), Activation(depth=2)]  # 3·3 + 3 = 12 levels
    for planner in (plan_chain, plan_chain_exhaustive, plan_chain_greedy):
        with pytest.raises(LevelError, match=r"3 level\(s\) missing"):
            planner(shapes, S_O, 9, activations=acts)
    assert plan_chain(shapes, S_O, 12, activations=acts).depth == 12


def test_tight_budget_forbids_reblocking():
    """With budget == the fixed depth there is no level for a re-blocking step."""
    rng = random.Random(14)
    for _ in range(60):
        shapes, acts = _random_chain(rng)
        base = 3 * len(shapes) + sum(a.depth for a in acts)
        tight = plan_chain(shapes, 16, base, reblock_cost_fn=lambda *a: 0.0, activations=acts)
        forbidden = plan_chain(shapes, 16, None, reblock_cost_fn=None, activations=acts)
        free = plan_chain(shapes, 16, None, reblock_cost_fn=lambda *a: 0.0, activations=acts)
        assert tight.reblocks == 0
        assert tight.total_cost == pytest.approx(forbidden.total_cost)
        assert free.total_cost <= forbidden.total_cost + 1e-9


def test_emnist_chain_recovers_paper_obl():
    """[S0] §VII-B3: FC1 (16, BS, 64) → [1, BS/1024, 4]; FC2 (16 padded from 10, BS, 16) follows it."""
    for bs in (1024, 4096, 16384):
        plan = plan_chain([(16, bs, 64), (10, bs, 16)], S_O, 10, activations=[Activation()])
        assert plan.blocks[0] == (1, bs // 1024, 4) == obl(16, bs, 64, S_O).blocks
        assert plan.blocks[1] == (1, bs // 1024, 1)
        assert plan.depth == 7
        assert plan_chain_greedy([(16, bs, 64), (10, bs, 16)], S_O, 10,
                                 activations=[Activation()]).total_cost == pytest.approx(plan.total_cost)


def test_plan_repr_is_readable():
    text = repr(plan_chain([(16, 4096, 64), (16, 4096, 16)], S_O, 10, activations=[Activation()]))
    assert "ChainPlan(dp: 2 MMs" in text and "[b_m,b_n,b_k]=[1, 4, 4]" in text and "x^2" in text
    assert "depth 7 of 10 levels" in text


def test_chain_validation():
    with pytest.raises(ShapeError, match="k_\\(i\\+1\\) = m_i"):
        plan_chain([(16, 64, 32), (8, 64, 8)], S_O)
    with pytest.raises(ShapeError, match="batch"):
        plan_chain([(16, 64, 32), (8, 32, 16)], S_O)
    with pytest.raises(ShapeError):
        plan_chain([], S_O)
    with pytest.raises(ShapeError):
        plan_chain([(16, 64, 32)], S_O, activations=[Activation(), Activation()])
    with pytest.raises(ParameterError):
        plan_chain([(16, 64, 32)], 100)
    with pytest.raises(ParameterError):
        plan_chain([(16, 64, 32)], S_O, depth_budget=-1)


def test_reblocking_pays_off_when_allowed():
    """A wide-then-narrow chain: re-blocking between the MMs is cheaper than forcing b_k = r_prev."""
    shapes = [(4096, 16, 16), (16, 16, 4096)]
    stiff = plan_chain(shapes, 256)
    flexible = plan_chain(shapes, 256, reblock_cost_fn=default_reblock_cost)
    assert flexible.total_cost <= stiff.total_cost
    for plan in (stiff, flexible):
        assert all(slots_required(*s.layout.block_dims) <= 256 for s in plan.steps)


# --- classic matrix-chain order ------------------------------------------------------------

def test_mcm_textbook_example():
    """CLRS 15.2: dims 30,35,15,5,10,20,25 → 15125 scalar multiplications, ((A1(A2A3))((A4A5)A6))."""
    plan = mcm_order([30, 35, 15, 5, 10, 20, 25], lambda m, n, k: m * n * k)
    assert plan.cost == 15125
    assert plan.order == "((A1·(A2·A3))·((A4·A5)·A6))"


def test_mcm_dp_equals_bruteforce():
    rng = random.Random(21)
    obl_cost = obl_cost_fn(64)
    costs = [lambda m, n, k: m * n * k, obl_cost, lambda m, n, k: m * k + k * n + 3 * m * n]
    for _ in range(150):
        count = rng.randint(1, 6)
        dims = [rng.choice([1, 2, 3, 4, 8, 16, 32, 64, 100]) for _ in range(count + 1)]
        cost = rng.choice(costs)
        budget = rng.choice([None, 3 * max(count - 1, 0), 3 * math.ceil(math.log2(count)) if count > 1 else 0,
                             3 * math.ceil(math.log2(count)) + 3 if count > 1 else 0])
        dp, brute = mcm_order(dims, cost, budget), mcm_bruteforce(dims, cost, budget)
        assert dp.cost == pytest.approx(brute.cost, rel=1e-12), (dims, budget)
        assert dp.depth <= (budget if budget is not None else math.inf)
        assert dp.height == brute.height or dp.cost == pytest.approx(brute.cost)


def test_mcm_depth_budget_changes_the_answer_and_errors():
    dims = [1, 64, 64, 64, 64, 64, 64]  # row vector first: the cheapest order is left to right, height 5
    free = mcm_order(dims, lambda m, n, k: m * n * k)
    capped = mcm_order(dims, lambda m, n, k: m * n * k, depth_budget=9)  # 6 matrices: height >= 3
    assert free.height > 3 and capped.height == 3 and capped.cost > free.cost
    assert capped.cost == mcm_bruteforce(dims, lambda m, n, k: m * n * k, depth_budget=9).cost
    with pytest.raises(LevelError, match=r"3 level\(s\) missing"):
        mcm_order(dims, lambda m, n, k: m * n * k, depth_budget=6)
    with pytest.raises(ShapeError):
        mcm_order([5], lambda m, n, k: 1)
