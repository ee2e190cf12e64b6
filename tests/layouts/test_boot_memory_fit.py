"""Layout (A) with batch_bootstrap='auto' under a memory budget: the batched-bootstrapping k the planner picks by time
gives way to smaller keys (a smaller k, then single bootstraps) when its plan would not fit: the planner chooses again
under a key budget, each pipeline family's key size in turn, largest first (boot_choice.fit_batch_pipeline); a k the user forces is
kept and refused instead. Compile only, at the insecure test preset test-N12-boot."""
import re
import warnings

import numpy as np
import pytest
import torch

import hemlp
from hemlp.errors import ResourceError
from hemlp.layouts import batch_bootstrap
from hemlp.layouts.boot_choice import boot_key_bytes
from hemlp.planner.resources import estimate_nodes, estimate_resources

MIB = 2 ** 20


@pytest.fixture(scope="module")
def case():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.GELU(), torch.nn.Linear(96, 96), torch.nn.GELU(),
                              torch.nn.Linear(96, 96), torch.nn.GELU(), torch.nn.Linear(96, 10)).eval()
    x = np.random.default_rng(0).uniform(0, 1, (64, 64))
    return net, x


def compile_(case, **kw):
    net, x = case
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return hemlp.compile(net, x, batch_size=2048, bootstrap=True, activation_degree=7, preset="test-N12-boot",
                             allow_insecure=True, **{"layout": "batch", **kw})


def k_of(cm) -> int:
    return batch_bootstrap.boot_batch_size(cm.layout_impl.steps)


def node_peak(cm, nodes: int) -> int:
    lay = cm.layout_impl
    return estimate_nodes(lay, nodes, boot_key_bytes(lay)).peak_bytes


@pytest.fixture(scope="module")
def unlimited(case):
    """{batch_bootstrap: compiled} without a budget: the time-optimal k and the smaller pipelines."""
    return {bb: compile_(case, server_memory=None, batch_bootstrap=bb) for bb in ("auto", 2, False)}


def test_unlimited_plan_takes_the_largest_k(unlimited):
    assert k_of(unlimited["auto"]) > 2
    assert node_peak(unlimited["auto"], 1) > node_peak(unlimited[2], 1) > node_peak(unlimited[False], 1)


@pytest.mark.parametrize("layout", ["batch", "auto"])
def test_node_budget_takes_smaller_keys(case, unlimited, layout):
    # between k = 2's peak and the time-optimal k's: some smaller k fits, the largest k does not
    budget = (node_peak(unlimited[2], 2) + node_peak(unlimited["auto"], 2)) // 2
    cm = compile_(case, nodes=2, node_memory=budget, layout=layout)
    assert cm.layout == "batch"
    assert 2 <= k_of(cm) < k_of(unlimited["auto"])
    assert node_peak(cm, 2) <= budget
    assert "held to the memory budget" in cm.plan.info["layout_reason"]
    # the pipeline line names why the planner's choice is not the cheapest k: that k's keys over the key budget the
    # memory budget leaves (planned in 'auto' with that budget, not a forced k)
    line = next(line for line in str(cm.plan).splitlines() if "pipeline:" in line)
    assert f"batched k={k_of(unlimited['auto'])} (S2C-first)'s keys" in line
    assert "exceed the key budget" in line and "memory budget" in line
    assert "forced" not in line


def test_tighter_budget_falls_back_to_single_bootstraps(case, unlimited):
    budget = (node_peak(unlimited[False], 2) + node_peak(unlimited[2], 2)) // 2
    cm = compile_(case, nodes=2, node_memory=budget)
    assert k_of(cm) == 1
    assert node_peak(cm, 2) <= budget
    # single bootstraps of the order whose keys fit the key budget (at test-N12-boot the S2C-first single keys are
    # the smaller ones)
    assert "fits" in cm.plan.info["layout_reason"] and "single" in cm.plan.info["layout_reason"]
    assert "exceed the key budget" in next(line for line in str(cm.plan).splitlines() if "pipeline:" in line)


def test_server_budget_takes_smaller_keys(case, unlimited):
    def need(cm):
        lay = cm.layout_impl
        return estimate_resources(lay, boot_key_bytes(lay)).server_memory_bytes
    budget = (need(unlimited[2]) + need(unlimited["auto"])) // 2
    cm = compile_(case, server_memory=budget)
    assert 2 <= k_of(cm) < k_of(unlimited["auto"])
    assert need(cm) <= budget


def test_a_forced_k_is_refused_not_changed(case, unlimited):
    k = k_of(unlimited["auto"])
    budget = (node_peak(unlimited[2], 2) + node_peak(unlimited["auto"], 2)) // 2
    with pytest.raises(ResourceError, match="node"):
        compile_(case, nodes=2, node_memory=budget, batch_bootstrap=k)


def test_no_pipeline_fits_is_refused(case, unlimited):
    with pytest.raises(ResourceError):
        compile_(case, nodes=2, node_memory=node_peak(unlimited[False], 2) // 2)


def test_the_cheapest_pipeline_that_fits_is_taken(case, unlimited):
    # a budget with room for the single CtS-first plan: no fitting pipeline with a lower estimate is passed over
    # for one with smaller keys (each family's key size is tried as the key budget, largest first)
    budget = (node_peak(unlimited[False], 2) + node_peak(unlimited[2], 2)) // 2
    cm = compile_(case, nodes=2, node_memory=budget)
    fits = [unlimited[bb] for bb in (2, False) if node_peak(unlimited[bb], 2) <= budget]
    assert fits and cm.layout_impl.estimate() <= min(c.layout_impl.estimate() for c in fits) * (1 + 1e-9)


def test_a_refusal_is_that_of_the_smallest_keys(case, unlimited):
    # over whatever the keys: the plan refused, and so its fixes (more nodes, ...), is the one with the smallest
    # keys, not the time-optimal k's
    budget = min(node_peak(unlimited[bb], 2) for bb in (2, False)) // 2
    with pytest.raises(ResourceError, match="node") as e:
        compile_(case, nodes=2, node_memory=budget)
    held = float(re.search(r"keys ~([0-9.e+-]+) GiB held", str(e.value)).group(1)) * 2 ** 30
    assert held <= 1.01 * boot_key_bytes(unlimited[False].layout_impl)
