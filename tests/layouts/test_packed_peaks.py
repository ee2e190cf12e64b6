"""Layout (P)'s bootstrap scaling reads the largest slot of every value over the calibration set: packed_peaks
(features from one pass of the lowered steps, pads and zero samples from the packed program on one group each) must
equal the packed program run on every sample (_slot_peaks), for zoo models as their authors wrote them, full and
partial groups."""
import warnings

import numpy as np
import pytest

from hemlp.compile_options import CompileOptions
from hemlp.compiler.calibration import choose_activations
from hemlp.compiler.fold import fold
from hemlp.compiler.lower import lower
from hemlp.layouts.packed import PackedProgram
from hemlp.layouts.packed_bootstrap import PEAK_TOLERANCE, _slot_peaks, packed_peaks

torch = pytest.importorskip("torch")


def _lowered(name, x):
    """A zoo model's lowered steps, ReLU fitted at degree 7 on x."""
    from hemlp.compiler.torch_frontend import from_torch
    from hemlp.models.zoo import build

    g = fold(from_torch(build(name), x[:1]))
    opts = CompileOptions().as_dict()
    opts["activation_degree"] = 7
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        choose_activations(g, x, opts, 10 ** 6, False, True)
    return lower(g)


@pytest.mark.parametrize("name,shape", [("resnet20", (3, 8, 8)), ("lenet5", (1, 28, 28))])
@pytest.mark.parametrize("b,n", [(1, 12), (2, 12), (4, 9)])
def test_packed_peaks_equal_the_packed_program(name, shape, b, n):
    x = np.random.default_rng(0).normal(size=(n,) + shape)
    steps = _lowered(name, x)
    prog = PackedProgram(steps, 16384, b)
    fast, out_fast = packed_peaks(prog, steps, x.reshape(n, -1), 20)
    slow, out_slow = _slot_peaks(prog, x.reshape(n, -1))
    assert fast.keys() == slow.keys()
    for k in slow:
        # the zero group stands for the partial group's zero samples: equal (within the tolerance the features are
        # raised by) when there is one, never below
        assert fast[k] >= slow[k] * (1 - 1e-12)
        if n % b:
            assert fast[k] == pytest.approx(slow[k], rel=2 * PEAK_TOLERANCE, abs=1e-12)
    assert out_fast == pytest.approx(out_slow, rel=2 * PEAK_TOLERANCE)


def test_fast_peaks_are_used_on_a_full_size_resnet20(monkeypatch):
    """At 32x32 the packed program's features differ from the lowered steps' by ~3e-6 relative (separately quantised
    diagonals): within PEAK_TOLERANCE, so the check passes and the full packed pass is not run."""
    import hemlp.layouts.packed_bootstrap as pb

    x = np.random.default_rng(0).normal(size=(3, 3, 32, 32))
    steps = _lowered("resnet20", x)
    prog = PackedProgram(steps, 32768, 1)
    calls = []
    real = pb._slot_peaks
    monkeypatch.setattr(pb, "_slot_peaks", lambda p, X: calls.append(len(X)) or real(p, X))
    fast, _ = packed_peaks(prog, steps, x.reshape(3, -1), 20)
    assert calls == [1, 1]                      # the zero group and the first real group, not all three samples
    slow, _ = real(prog, x.reshape(3, -1))
    assert all(fast[k] >= slow[k] for k in slow)          # never below what the packed program puts in a slot
