import warnings

import numpy as np
import pytest


def bits(err) -> float:
    """Precision in bits: -log2(max abs error)."""
    e = float(np.max(np.abs(err)))
    return float("inf") if e == 0 else -np.log2(e)


@pytest.fixture
def rng():
    return np.random.default_rng(20261122)


def make_ctx(name="test-N12"):
    from hemlp import ckks

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ckks.Context(name, allow_insecure=True)
