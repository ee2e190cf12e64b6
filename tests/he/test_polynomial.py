"""hemlp.he.polynomial against numpy: depth ceil(log2(d+1)), exact output scale, both bases."""
import warnings

import numpy as np
import pytest

from hemlp import fhe
from hemlp.he import polynomial
from hemlp.errors import LevelError


@pytest.fixture(scope="module")
def env():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ctx = fhe.Context("test-N12-d6", allow_insecure=True)
    sk, _ = ctx.keygen()
    rlk = ctx.relin_key(sk)
    x = np.random.default_rng(5).uniform(-1, 1, ctx.slots)
    return ctx, sk, rlk, x, ctx.encrypt(x, sk)


@pytest.mark.parametrize("basis", ["chebyshev", "power"])
@pytest.mark.parametrize("deg", [1, 2, 3, 4, 5, 7, 8, 12, 15, 16, 31])
def test_poly_matches_numpy(env, basis, deg):
    ctx, sk, rlk, x, ct = env
    c = np.random.default_rng(deg).uniform(-1, 1, deg + 1) / np.arange(1, deg + 2)
    y = polynomial.evaluate(ctx, ct, c, rlk, basis=basis)
    ref = (np.polynomial.chebyshev.chebval(x, c) if basis == "chebyshev"
           else np.polynomial.polynomial.polyval(x, c))
    assert y.level == ct.level - polynomial.depth(deg) == ct.level - int(np.ceil(np.log2(deg + 1)))
    assert y.scale == ct.scale                     # exact scale, no drift
    assert np.max(np.abs(ctx.decrypt(y, sk) - ref)) < 1e-6


def test_sparse_odd_polynomial_and_target_scale(env):
    ctx, sk, rlk, x, ct = env
    c = np.zeros(8)
    c[[1, 3, 5, 7]] = [1.0, -0.5, 0.25, -0.125]
    target = ct.scale * 1.5
    ev = polynomial.PolyEvaluator(ctx, rlk)
    y = ev.evaluate(ct, c, basis="chebyshev", scale=target)
    assert y.scale == target
    assert np.max(np.abs(ctx.decrypt(y, sk) - np.polynomial.chebyshev.chebval(x, c))) < 1e-6


def test_depth_formula():
    assert [polynomial.depth(d) for d in (0, 1, 2, 3, 4, 7, 8, 15, 16, 31, 63)] == [0, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6]


def test_not_enough_levels(env):
    ctx, sk, rlk, x, ct = env
    low = ctx.drop_level(ct, 2)
    with pytest.raises(LevelError, match="1 level"):
        polynomial.evaluate(ctx, low, np.ones(8), rlk)     # degree 7 needs 3 levels
