"""Plans that fit the machine: every plan's estimated server memory is checked against server_memory at compile time,
before any key or ciphertext exists; layout="auto" skips layouts over the budget."""
import numpy as np
import pytest

import hemlp
from hemlp.errors import ParameterError, ResourceError
from hemlp.layouts import machine_memory_bytes, memory_budget, usable_memory_bytes

from .conftest import SmallCNN

X = np.random.default_rng(0).normal(size=(16, 1, 8, 8))


def _memory(cm):
    return cm.plan.info["resources"]["server_memory_bytes"]


def test_default_budget_is_this_machines_memory_less_a_reserve_and_options_are_checked():
    total = machine_memory_bytes()
    assert memory_budget("auto") == usable_memory_bytes() == total - max(2 ** 30, int(total * 0.1)) > 2 ** 30
    assert memory_budget(None) is None and memory_budget(5e9) == 5_000_000_000
    for bad in ("64GB", -1, 0, True):
        with pytest.raises(ParameterError, match="server_memory"):
            hemlp.compile(SmallCNN(), X, allow_insecure=True, server_memory=bad)


def test_a_plan_above_the_budget_is_refused_with_the_fixes_before_any_key():
    cm = hemlp.compile(SmallCNN(), X, batch_size=16, allow_insecure=True, layout="batch")
    need = _memory(cm)
    with pytest.raises(ResourceError, match=r"GiB of server memory.*batch_size.*server_memory=<bytes>"):
        hemlp.compile(SmallCNN(), X, batch_size=16, allow_insecure=True, layout="batch", server_memory=need // 2)
    # at the estimate itself it fits
    hemlp.compile(SmallCNN(), X, batch_size=16, allow_insecure=True, layout="batch", server_memory=need)


def test_auto_skips_the_layouts_over_the_budget():
    free = hemlp.compile(SmallCNN(), X, batch_size=16, allow_insecure=True, server_memory=None)
    est = free.plan.info["layout_estimates"]
    memories = {}
    for name in ("batch", "packed"):
        if isinstance(est.get(name), float):
            memories[name] = _memory(hemlp.compile(SmallCNN(), X, batch_size=16, allow_insecure=True, layout=name))
    assert len(memories) == 2
    small, big = sorted(memories, key=memories.get)
    cm = hemlp.compile(SmallCNN(), X, batch_size=16, allow_insecure=True,
                       server_memory=(memories[small] + memories[big]) // 2)
    assert cm.plan.info["layout"] == small
    assert "server memory" in cm.plan.info["layout_estimates"][big]
    with pytest.raises(ResourceError, match="GiB of server memory"):
        hemlp.compile(SmallCNN(), X, batch_size=16, allow_insecure=True, server_memory=memories[small] // 2)
