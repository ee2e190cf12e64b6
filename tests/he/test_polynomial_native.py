"""Native polynomial evaluation (csrc/boot/polyeval) against numpy and hemlp.he.polynomial, and the constant fast
paths (mul_const, add_const) against Python big-integer arithmetic."""
import math
import warnings
from fractions import Fraction

import numpy as np
import pytest

from hemlp import _core
from hemlp import fhe
from hemlp.he import polynomial
from hemlp.errors import EncodingError, LevelError, MissingKeyError, ScaleMismatchError


@pytest.fixture(scope="module")
def env():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ctx = fhe.Context("test-N12-d6", allow_insecure=True)
    sk, _ = ctx.keygen()
    x = np.random.default_rng(11).uniform(-1, 1, ctx.slots)
    return ctx, sk, ctx.relin_key(sk), x, ctx.encrypt(x, sk)


def exact_round(c, scale):
    v = Fraction(c) * Fraction(scale)
    r = math.floor(abs(v) + Fraction(1, 2))
    return r if v >= 0 else -r


@pytest.mark.parametrize("basis", ["chebyshev", "power"])
@pytest.mark.parametrize("deg", [7, 15, 30, 31])
def test_native_matches_numpy_and_python(env, basis, deg):
    ctx, sk, rlk, x, ct = env
    c = np.random.default_rng(deg).uniform(-1, 1, deg + 1) / np.arange(1, deg + 2)
    ref = (np.polynomial.chebyshev.chebval(x, c) if basis == "chebyshev"
           else np.polynomial.polynomial.polyval(x, c))
    stats = {}
    yn = polynomial.evaluate_native(ctx, ct, c, rlk, basis=basis, stats=stats)
    yp = polynomial.evaluate(ctx, ct, c, rlk, basis=basis)
    assert yn.level == yp.level == ct.level - polynomial.depth(deg)
    assert yn.scale == yp.scale == ct.scale
    dn, dp = ctx.decrypt(yn, sk), ctx.decrypt(yp, sk)
    # 40-bit scale and primes: rescale noise ~2^-28 per product, a few products deep
    assert np.max(np.abs(dn - ref)) < 2.0 ** -22
    assert np.max(np.abs(dn - dp)) < 2.0 ** -22
    assert stats["ct_mul"] == {7: 5, 15: 8, 30: 12, 31: 13}[deg]


def test_native_target_scale_and_level(env):
    ctx, sk, rlk, x, ct = env
    c = np.zeros(8)
    c[[1, 3, 5, 7]] = [1.0, -0.5, 0.25, -0.125]          # odd: zero coefficients skipped
    y = polynomial.evaluate_native(ctx, ct, c, rlk, scale=ct.scale * 1.5, level=ct.level - 4)
    assert y.scale == ct.scale * 1.5 and y.level == ct.level - 4
    assert np.max(np.abs(ctx.decrypt(y, sk) - np.polynomial.chebyshev.chebval(x, c))) < 2.0 ** -24
    y1 = polynomial.evaluate_native(ctx, ct, [0.25, -2.0], None)   # degree 1: no product, no key needed
    assert y1.level == ct.level - 1 and np.max(np.abs(ctx.decrypt(y1, sk) - (0.25 - 2 * x))) < 2.0 ** -26


def test_native_lifts_a_low_input_scale(env):
    """Input at 2^30 under 40-bit primes: the powers would decay (s^2 / q); an exact integer lift keeps them."""
    ctx, sk, rlk, x, _ = env
    ct = ctx.encrypt(x, sk, scale=2.0 ** 30)
    c = np.random.default_rng(3).uniform(-1, 1, 16)
    y = polynomial.evaluate_native(ctx, ct, c, rlk, scale=2.0 ** 40)
    assert y.scale == 2.0 ** 40
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")       # noise-free decryptions: the test's own secret key
        x_enc, out = ctx.decrypt(ct, sk, noise="none"), ctx.decrypt(y, sk, noise="none")
    cheb = np.polynomial.chebyshev
    # against the input as encrypted: the evaluation itself adds ~2^-24 (measured), the lift loses nothing
    assert np.max(np.abs(out - cheb.chebval(x_enc, c))) < 2.0 ** -20
    # against x: fresh noise at 2^30 (~2^-21) times max|p'| (2^7.7 for these coefficients), with margin
    assert np.max(np.abs(out - cheb.chebval(x, c))) < 2.0 ** -12


def test_native_errors(env):
    ctx, sk, rlk, x, ct = env
    with pytest.raises(LevelError, match="level"):
        polynomial.evaluate_native(ctx, ctx.drop_level(ct, 2), np.ones(8), rlk)
    with pytest.raises(LevelError):
        polynomial.evaluate_native(ctx, ct, np.ones(8), rlk, level=ct.level - 2)
    with pytest.raises(MissingKeyError):
        polynomial.evaluate_native(ctx, ct, np.ones(4), None)
    with pytest.raises(LevelError, match="relinearisation key"):
        polynomial.evaluate_native(ctx, ct, np.ones(4), ctx.relin_key(sk, level=ct.level - 1))
    with pytest.raises(EncodingError, match="constant"):
        polynomial.evaluate_native(ctx, ct, [1.0, 0.0], rlk)
    with pytest.raises(EncodingError, match="NaN"):
        polynomial.evaluate_native(ctx, ct, [1.0, float("nan")], rlk)
    with pytest.raises(ScaleMismatchError, match="input scale"):       # far above the 40-bit primes
        polynomial.evaluate_native(ctx, ctx.encrypt(x, sk, scale=2.0 ** 52), np.ones(32), rlk, scale=2.0 ** 40)


# ---- constant fast paths


@pytest.mark.parametrize("log_scale", [40, 52, 63, 64, 65, 130])
def test_const_residues_exact(env, log_scale):
    ctx = env[0]
    for c in (0.4275143076804061, -1.0 / 3, 2.0 ** -60, -7.5, 0.5):
        s = 2.0 ** log_scale * 1.2345678901234567
        got = _core.const_residues(ctx.native, c, s, ctx.max_level)
        want = exact_round(c, s)
        assert got == [want % ctx.modulus(k) for k in range(ctx.max_level + 1)]


@pytest.mark.parametrize("log_scale", [40, 50, 60, 63, 65])
def test_add_const_vs_oracle(env, log_scale):
    """The decrypted plaintext moves by exactly round(c * scale) in every NTT position (a constant polynomial),
    and the decoded slots by c."""
    ctx, sk, rlk, x, _ = env
    s = 2.0 ** log_scale * 1.0123
    ct = ctx.encrypt(x, sk, scale=s)
    c = -0.3819660112501051
    out = ctx.add_const(ct, c)
    e = ctx.native
    before = e.decrypt(ct.native, sk.native, 0, 0).poly()   # exact (noise "none"): the residues are compared
    after = e.decrypt(out.native, sk.native, 0, 0).poly()
    want = exact_round(c, s)
    for k in range(ct.level + 1):
        q = ctx.modulus(k)
        assert np.all((after[k].astype(object) - before[k].astype(object)) % q == want % q)
    assert np.max(np.abs(ctx.decrypt(out, sk) - (x + c))) < 2.0 ** -25
    assert out.scale == ct.scale and out.level == ct.level


@pytest.mark.parametrize("log_cs", [40, 52, 60, 63, 65])
def test_mul_const_vs_numpy(env, log_cs):
    ctx, sk, rlk, x, ct = env
    c = 0.7071067811865476
    cs = 2.0 ** log_cs * 1.37
    out = ctx.mul_const(ct, c, cs)
    assert out.scale == ct.scale * cs and out.level == ct.level
    assert np.max(np.abs(ctx.decrypt(out, sk) - c * x)) < 2.0 ** -25
    # after a rescale by q_l with const_scale = q_l, the scale is back where it was
    r = ctx.rescale(ctx.mul_const(ct, -c, float(ctx.modulus(ct.level))))
    assert r.scale == pytest.approx(ct.scale, rel=1e-15)
    assert np.max(np.abs(ctx.decrypt(r, sk) + c * x)) < 2.0 ** -25


def test_const_errors(env):
    ctx, sk, rlk, x, ct = env
    with pytest.raises(EncodingError):
        ctx.mul_const(ct, float("inf"), 2.0 ** 40)
    with pytest.raises(EncodingError):
        ctx.mul_const(ct, 1.0, -1.0)
    with pytest.raises(EncodingError):
        ctx.add_const(ct, float("nan"))
    with pytest.raises(EncodingError, match="slot"):
        ctx.add_const(ctx.encrypt(x, sk, encoding="coeff"), 1.0)
