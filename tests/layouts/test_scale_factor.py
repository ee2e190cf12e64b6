"""A bootstrap divides its input by a power of two c >= peak x margin, at most q0 / 2^(R + log Δ): the refusal says
which c the value needed and the exact limit (a limit just under a power of two must not print as that power)."""
import types

import pytest

from hemlp.errors import EncodingError
from hemlp.layouts.batch_bootstrap import scale_factor

PARAMS = types.SimpleNamespace(log_scale=40)


def test_powers_of_two_at_or_above_the_margined_peak():
    assert scale_factor(0.9, 1.05, 4095.9, "v", PARAMS) == 1
    assert scale_factor(1.0, 1.05, 4095.9, "v", PARAMS) == 2
    assert scale_factor(2020.0, 1.0, 4095.9, "v", PARAMS) == 2048
    assert scale_factor(2020.0, 1.05, 4096.0, "v", PARAMS) == 4096


def test_refusal_names_the_divisor_needed_and_the_exact_limit():
    with pytest.raises(EncodingError) as e:
        scale_factor(2020.0, 1.05, 4095.94, "value 'add_17'", PARAMS)
    msg = str(e.value)
    assert "value 'add_17' reaches 2020" in msg and "divide it by 4096" in msg and "4095.94" in msg
    assert "1.05" in msg and "normalise" in msg
