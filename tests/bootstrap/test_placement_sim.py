"""The plaintext model of a placed bootstrap (hemlp.runtime.bootstrap_sim): EvalMod's input range is checked on
each ciphertext's coefficients (not its slot values), per chunk of the batch; the modelled error has the
measured size times the step's scale factor, and is seeded."""
from __future__ import annotations

import numpy as np
import pytest

from hemlp.bootstrap import max_coefficient
from hemlp.compiler.lower import Step
from hemlp.errors import EncodingError
from hemlp.runtime.bootstrap_sim import input_range, simulate_bootstrap


def step(c=1, bits=20.0, seed=5, slots=64):
    return Step("bootstrap", "h#boot", ["h"], 3, info=dict(scale_factor=c, noise_bits=bits, seed=seed, slots=slots))


def test_the_range_is_on_coefficients_per_ciphertext():
    rng = np.random.default_rng(0)
    wide = rng.uniform(-1.5, 1.5, (3, 64))          # slot values above 1, coefficients ~ 1.5 / sqrt(64)
    assert np.max(np.abs(wide)) > 1 and input_range(wide, 64) < 1
    assert input_range(wide, 64) == pytest.approx(max(max_coefficient(r) for r in wide))
    simulate_bootstrap(step(), wide)                # passes
    const = np.full((3, 64), 1.2)                   # a constant vector: its coefficient is the constant itself
    assert input_range(const, 64) == pytest.approx(1.2)
    with pytest.raises(EncodingError, match="'h#boot'.*1.2"):
        simulate_bootstrap(step(), const)
    simulate_bootstrap(step(c=2), const)            # divided by c = 2 it fits
    # two chunks of 64 slots: the second chunk's constant row is checked on its own, zero-padded
    two = np.concatenate([wide[:, :64], np.full((3, 20), 1.1)], axis=1)
    padded = np.zeros(64)
    padded[:20] = 1.1
    want = max(max(max_coefficient(r) for r in wide), max_coefficient(padded))
    assert input_range(two, 64) == pytest.approx(want)


def test_the_error_has_the_measured_size_and_is_seeded():
    x = np.zeros((4, 4096))
    a, b = simulate_bootstrap(step(c=4, bits=18.0, slots=4096), x), simulate_bootstrap(step(c=4, bits=18.0, slots=4096), x)
    assert np.array_equal(a, b)
    assert np.std(a) == pytest.approx(4 * 2.0 ** -18, rel=0.05)
    other = simulate_bootstrap(step(c=4, bits=18.0, seed=6, slots=4096), x)
    assert not np.array_equal(a, other)
