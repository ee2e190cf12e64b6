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


def test_simulate_columns_computes_one_pass_in_chunks_within_a_budget():
    """compile's calibration pass (hemlp.runtime.local.simulate_columns): the same outputs as one pass over every
    sample, the per-row peaks merged over the chunks equal to one pass's, in chunks sized by simulate_peak_bytes
    (a budget of a few samples here: a smaller measured peak than the one pass)."""
    import warnings

    import hemlp
    from hemlp.runtime.local import simulate_columns
    from hemlp.runtime.noise_analysis import recorder
    from tests.compiler.conftest import SmallCNN

    rng = np.random.default_rng(4)
    x = rng.uniform(-0.9, 1.0, (96, 1, 8, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = hemlp.compile(SmallCNN().eval(), x, batch_size=4, allow_insecure=True, activation_degree=3,
                           layout="batch", preset="test-N12-d18")
    steps = [s for s in cm.steps if s.op not in ("bootstrap", "drop")]
    X = x.reshape(len(x), -1).T

    def peaks_of(run):
        peaks = {}
        tracemalloc.start()
        y = run(recorder(peaks))
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return y, peaks, top

    per = simulate_peak_bytes(steps, 1)
    y1, p1, top1 = peaks_of(lambda see: simulate(steps, X, cm.weight_bits, on_value=see))
    y2, p2, top2 = peaks_of(lambda see: simulate_columns(steps, X, cm.weight_bits, on_value=see, max_bytes=10 * per))
    assert y2.shape == y1.shape and np.max(np.abs(y2 - y1)) <= 1e-12 * np.max(np.abs(y1))
    assert p1.keys() == p2.keys() and all(np.allclose(p1[k], p2[k], rtol=1e-12, atol=0) for k in p1)
    assert top2 < top1 / 3                           # 10 samples a chunk against 96 at once
