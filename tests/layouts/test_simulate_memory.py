"""Layout (A)'s bootstrapped simulate holds whole encrypted batches (N/2 samples, padding included): its memory is
estimated before any work (hemlp.runtime.local.simulate_peak_bytes) and a plan that cannot be simulated on this
machine is a ResourceError naming the fix, not an out-of-memory kill."""
import tracemalloc

import numpy as np
import pytest

from hemlp.errors import ResourceError
from hemlp.layouts import batch as batch_layout
from hemlp.runtime.local import simulate, simulate_peak_bytes
from tests.runtime.boot_case import boot_mlp


@pytest.fixture(scope="module")
def boot_case():
    return boot_mlp(0.5)


def test_peak_estimate_bounds_the_measured_peak(boot_case):
    cm, x = boot_case
    lay = cm.layout_impl
    X = np.zeros((x.shape[1], lay.capacity))
    X[:, :64] = x[:64].T
    tracemalloc.start()
    simulate(lay.steps, X, lay.weight_bits)
    _, measured = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    est = simulate_peak_bytes(lay.steps, lay.capacity)
    # an upper bound that is not loose by more than the temporaries it assumes
    assert measured <= est <= 4 * measured, (measured, est)


def test_simulate_refuses_before_any_work_when_memory_is_short(boot_case, monkeypatch):
    cm, x = boot_case
    need = simulate_peak_bytes(cm.layout_impl.steps, cm.layout_impl.capacity)
    monkeypatch.setattr(batch_layout, "available_memory_bytes", lambda: need // 2)
    calls = []
    monkeypatch.setattr(batch_layout.batch_bootstrap, "simulate_padded", lambda *a: calls.append(a))
    with pytest.raises(ResourceError) as e:
        cm.simulate(x[:8])
    assert not calls
    msg = str(e.value)
    assert "available" in msg and "layout='packed'" in msg and str(cm.layout_impl.capacity) in msg
    monkeypatch.setattr(batch_layout, "available_memory_bytes", lambda: need * 2)
    monkeypatch.undo()
    assert cm.simulate(x[:8]).shape == (8, 3)      # with the memory there, the same call runs
