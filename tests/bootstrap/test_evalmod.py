"""EvalMod (docs/design/bootstrap.md §1.3 steps 5-6): Han-Ki coefficients against an mpmath oracle (T5a) and the
homomorphic version against sin(2 pi eps) / (2 pi) on an N = 2^12 chain with 60-bit EvalMod primes (T5b)."""
import math
import warnings

import mpmath as mp
import numpy as np
import pytest

from hemlp import fhe
from hemlp.bootstrap.evalmod import (EvalModParams, eval_mod, hanki_coefficients, max_input_scale, reference,
                                     scale_chain)
from hemlp.errors import EncodingError, LevelError, MissingKeyError, ParameterError, ScaleMismatchError

TWO_PI = 2 * np.pi


def sine(eps):
    return np.sin(TWO_PI * eps) / TWO_PI


def sample(rng, n, i_max, R):
    """u = I + eps with asymmetric I in [-i_max, i_max] and |eps| <= 2^-R, including the interval ends."""
    I = rng.integers(-i_max, i_max + 1, n)
    eps = rng.uniform(-(2.0 ** -R), 2.0 ** -R, n)
    eps[:3] = [2.0 ** -R, -(2.0 ** -R), 0.0]
    I[:3] = [i_max, -i_max, 0]
    return I, eps


# ---- T5a: cleartext, float64 coefficients + double angles


def test_params_defaults_and_depth():
    p = EvalModParams()
    assert (p.K, p.degree, p.double_angles, p.log_message_ratio) == (16, 30, 3, 8)
    assert p.poly_depth == 5 and p.depth == 8
    assert EvalModParams(K=8, degree=14, double_angles=2).depth == 4 + 2
    assert p.double_angle_constant(2) == pytest.approx(1 / TWO_PI, rel=1e-15)
    assert p.double_angle_constant(0) == pytest.approx(p.a0 ** 2, rel=1e-15)


@pytest.mark.parametrize("kw", [dict(degree=31), dict(K=1, degree=0), dict(double_angles=-1),
                                dict(log_message_ratio=0), dict(K=16.0), dict(double_angles=True)])
def test_params_rejected(kw):
    with pytest.raises(ParameterError):
        EvalModParams(**kw)


def test_coefficients_interpolate_at_the_nodes():
    c = hanki_coefficients(16, 30, 8, 3)
    assert c.shape == (31,) and c.dtype == np.float64
    assert np.max(np.abs(c)) == pytest.approx(0.4275, abs=1e-4) and np.sum(np.abs(c)) == pytest.approx(2.512, abs=1e-3)
    c[0] = 99.0                                          # a copy: the cache is not touched
    c = hanki_coefficients(16, 30, 8, 3)
    assert c[0] != 99.0
    # oracle: p at the 31 nodes, summed in mpmath from the float64 coefficients, equals f to float64 rounding
    mp.mp.prec = 200
    a0 = (1 / (2 * mp.pi)) ** (mp.mpf(1) / 8)
    nodes = [mp.mpf(0)] + [s * (i + mp.mpf(2) ** -8) for i in range(1, 16) for s in (1, -1)]
    worst = 0
    for x in nodes:
        t = x / 16
        p = sum(mp.mpf(float(ci)) * mp.chebyt(k, t) for k, ci in enumerate(c))
        worst = max(worst, abs(p - a0 * mp.cos(2 * mp.pi * (x - mp.mpf(1) / 4) / 8)))
    assert worst < 2.0 ** -50


@pytest.mark.parametrize("i_max,bound", [(4, 2.0 ** -46), (10, 2.0 ** -41)])
def test_T5a_accuracy_R8(i_max, bound):
    I, eps = sample(np.random.default_rng(i_max), 100000, i_max, 8)
    y = reference(I + eps, EvalModParams())
    assert np.max(np.abs(y - sine(eps))) <= bound
    # against eps itself: the sine's own cubic error (F3) on top
    assert np.all(np.abs(y - eps) <= (2 * np.pi ** 2 / 3) * np.abs(eps) ** 3 + 2.0 ** -41)


def test_T5a_accuracy_R14_s2c_first():
    """S2C-first order: R = 14, nodes ±(i + 2^-14): <= 2^-47 for |I| <= 8."""
    p = EvalModParams(log_message_ratio=14)
    I, eps = sample(np.random.default_rng(14), 100000, 8, 14)
    y = reference(I + eps, p)
    assert np.max(np.abs(y - sine(eps))) <= 2.0 ** -47
    assert not np.array_equal(p.coefficients(), EvalModParams().coefficients())


# ---- T5b: homomorphic


@pytest.fixture(scope="module")
def env():
    params = fhe.Params(log_n=12, q_bits=[60, 40, 40, 40, 39, 39] + [60] * 8, p_bits=[61, 61, 61], alpha=3,
                         log_scale=40, name="test-evalmod")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ctx = fhe.Context(params, allow_insecure=True)
    sk, _ = ctx.keygen()
    return ctx, sk, ctx.relin_key(sk)


def encrypt_u(ctx, sk, u, K=16, scale=None, level=None):
    level = ctx.max_level if level is None else level
    scale = max_input_scale(ctx, level) / 2 ** 0.3 if scale is None else scale
    return ctx.encrypt(u / K, sk, level=level, scale=scale)


@pytest.mark.parametrize("R,i_max", [(8, 10), (14, 8)])
def test_T5b_eval_mod(env, R, i_max):
    ctx, sk, rlk = env
    params = EvalModParams(log_message_ratio=R)
    I, eps = sample(np.random.default_rng(100 + R), ctx.slots, i_max, R)
    ct = encrypt_u(ctx, sk, I + eps)
    out_scale = 2.0 ** 52
    stats = {}
    y = eval_mod(ctx, ct, rlk, params, out_scale, stats=stats)
    assert y.level == ct.level - params.depth == ctx.max_level - 8
    assert abs(y.scale / out_scale - 1) <= 2.0 ** -32
    assert stats["ct_mul"] == 12                        # the degree-30 BSGS; + 3 squares
    d = ctx.decrypt(y, sk)
    assert np.max(np.abs(d - sine(eps))) <= 2.0 ** -38
    assert np.max(np.abs(d - eps) - (2 * np.pi ** 2 / 3) * np.abs(eps) ** 3) <= 2.0 ** -38


def test_T5b_scale_chain_is_exact(env):
    ctx, sk, rlk = env
    p = EvalModParams()
    chain = scale_chain(ctx, ctx.max_level, p, 2.0 ** 48)
    lp = ctx.max_level - p.poly_depth
    assert len(chain) == 4 and chain[-1] == 2.0 ** 48
    for i in range(3):
        assert chain[i] ** 2 / ctx.modulus(lp - i) == pytest.approx(chain[i + 1], rel=2.0 ** -50)
    # the bootstrapping chain of docs/design/bootstrap.md §1.3, F5: S_0 ~ 2^58.5 for S_out = 2^48 and 60-bit primes
    assert 58 < math.log2(chain[0]) < 59


def test_low_input_scale_is_lifted(env):
    """An input far below q_top is lifted by an exact integer (free); its own noise then limits the result."""
    ctx, sk, rlk = env
    I, eps = sample(np.random.default_rng(7), ctx.slots, 6, 8)
    ct = encrypt_u(ctx, sk, I + eps, scale=2.0 ** 50)
    y = eval_mod(ctx, ct, rlk, EvalModParams(), 2.0 ** 52)
    assert y.level == ct.level - 8 and y.scale == 2.0 ** 52
    assert np.max(np.abs(ctx.decrypt(y, sk) - sine(eps))) <= 2.0 ** -30


def test_input_below_the_top_level(env):
    ctx, sk, rlk = env
    I, eps = sample(np.random.default_rng(8), ctx.slots, 5, 8)
    ct = encrypt_u(ctx, sk, I + eps, level=ctx.max_level - 1)
    y = eval_mod(ctx, ct, rlk, EvalModParams(), 2.0 ** 50)
    assert y.level == ctx.max_level - 9 and y.scale == 2.0 ** 50
    # the last double angle now divides by a 39-bit prime: S_2 = sqrt(2^50 q_5) ~ 2^44.5 sets the noise
    assert np.max(np.abs(ctx.decrypt(y, sk) - sine(eps))) <= 2.0 ** -30


def test_typed_errors(env):
    ctx, sk, rlk = env
    p = EvalModParams()
    u = np.random.default_rng(9).uniform(-3, 3, ctx.slots)
    ct = encrypt_u(ctx, sk, u)
    with pytest.raises(LevelError, match="8 levels"):
        eval_mod(ctx, ctx.drop_level(ct, 7), rlk, p, 2.0 ** 40)
    with pytest.raises(MissingKeyError):
        eval_mod(ctx, ct, None, p, 2.0 ** 48)
    with pytest.raises(LevelError, match="relinearisation key"):
        eval_mod(ctx, ct, ctx.relin_key(sk, level=ctx.max_level - 1), p, 2.0 ** 48)
    with pytest.raises(ParameterError):
        eval_mod(ctx, ct, rlk, dict(K=16), 2.0 ** 48)
    with pytest.raises(ScaleMismatchError, match="input scale"):       # the CtS retag K q0 ~ 2^64 > q_top
        eval_mod(ctx, encrypt_u(ctx, sk, u, scale=2.0 ** 64), rlk, p, 2.0 ** 48)
    with pytest.raises(ScaleMismatchError, match="out_scale"):
        eval_mod(ctx, ct, rlk, p, 2.0 ** 300)
    with pytest.raises(ScaleMismatchError):
        eval_mod(ctx, ct, rlk, p, float("nan"))
    with pytest.raises(EncodingError, match="real"):
        eval_mod(ctx, ctx.encrypt(u / 16 + 0.1j, sk, scale=2.0 ** 59), rlk, p, 2.0 ** 48)


def test_python_backend_agrees(env):
    """The same EvalMod through hemlp.he.polynomial (Python BSGS): same level and scale, both within the T5b bound."""
    ctx, sk, rlk = env
    I, eps = sample(np.random.default_rng(21), ctx.slots, 10, 8)
    ct = encrypt_u(ctx, sk, I + eps)
    yn = eval_mod(ctx, ct, rlk, EvalModParams(), 2.0 ** 52)
    yp = eval_mod(ctx, ct, rlk, EvalModParams(), 2.0 ** 52, backend="python")
    assert yp.level == yn.level and yp.scale == yn.scale
    for y in (yn, yp):
        assert np.max(np.abs(ctx.decrypt(y, sk) - sine(eps))) <= 2.0 ** -38
    with pytest.raises(ParameterError, match="backend"):
        eval_mod(ctx, ct, rlk, EvalModParams(), 2.0 ** 52, backend="gpu")
