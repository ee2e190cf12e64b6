"""ScaleDown, sparse-secret encapsulation and ModRaise (docs/design/bootstrap.md §1.3 steps 0-2) against a Python
big-integer CRT oracle (insecure test-N10-boot / test-N12-boot chains).

T0: ScaleDown keeps the plaintext and tracks the scale bit for bit.
T1: dense->sparse then sparse->dense (ModRaise to level 0) changes the plaintext polynomial by < 2^12.
T2: after ModRaise to the top, Dec_s over Q_L is t = m' + q0·I with m' ≡ Dec_s(input) (mod q0) up to the
    key-switch error, I integer with |I| <= 16 and std(I) = sqrt(33/12) ≈ 1.66 ± 0.1 over 2^16 coefficients.
"""
import math
import warnings

import numpy as np
import pytest

from hemlp import fhe
from hemlp.bootstrap.modraise import EncapsulationKeys, dense_to_sparse, mod_raise, scale_down, scale_down_factor
from hemlp.errors import KeyMismatchError, LevelError, MissingKeyError, ScaleMismatchError


def make(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ctx = fhe.Context(name, allow_insecure=True)
    sk, pk = ctx.keygen()
    return ctx, sk, pk


@pytest.fixture(scope="module")
def n10():
    ctx, sk, pk = make("test-N10-boot")
    return ctx, sk, pk, EncapsulationKeys(ctx, sk, h=32)


def raw_decrypt(ctx, ct, sk) -> list:
    """c0 + c1·s over Q_level as centred Python integers (big-integer CRT of the limbs)."""
    o = ct.native
    s = sk.native.coeffs.astype(np.int64)
    N, lv = ctx.N, ct.level
    residues, mods = [], []
    for i in range(lv + 1):
        q = ctx.modulus(i)
        s_ntt = ctx.ntt(np.where(s < 0, q + s, s).astype(np.uint64), i).astype(object)
        c1s = (o.poly(1)[i].astype(object) * s_ntt) % q
        d = (o.poly(0)[i].astype(object) + c1s) % q
        residues.append(ctx.intt(np.array([int(x) for x in d], dtype=np.uint64), i).astype(object))
        mods.append(q)
    Q = math.prod(mods)
    t = np.zeros(N, dtype=object)
    for r, q in zip(residues, mods):
        Mi = Q // q
        t = (t + r * (Mi * pow(Mi, -1, q))) % Q
    return [int(x) - Q if x > Q // 2 else int(x) for x in t]


def centred(x, q):
    x %= q
    return x - q if x > q // 2 else x


def random_ct(ctx, pk, rng, level, scale):
    z = rng.uniform(-1, 1, ctx.slots) + 1j * rng.uniform(-1, 1, ctx.slots)
    return ctx.encrypt(z, pk, level=level, scale=scale), z


# ---- T0
@pytest.mark.parametrize("level", [1, 5, 0])
def test_scale_down_is_metadata_exact(n10, level):
    ctx, sk, pk, _ = n10
    rng = np.random.default_rng(level)
    scale_in = 2.0 ** 40 if level else 2.0 ** 30
    ct, z = random_ct(ctx, pk, rng, level, scale_in)
    c = scale_down_factor(ctx, ct, 8)
    out = scale_down(ctx, ct, 8)
    assert out.level == 0
    if level:
        assert out.scale == scale_in * c / ctx.modulus(1)      # tracked, bit for bit
    else:
        assert c == math.floor(ctx.modulus(0) / (2.0 ** 8 * scale_in)) and out.scale == scale_in * c
    assert abs(math.log2(ctx.modulus(0) / out.scale) - 8) < 0.01 + (0 if level else 1)
    before, after = ctx.decrypt(ct, sk), ctx.decrypt(out, sk)
    assert np.max(np.abs(after - before)) < 2.0 ** -(40 - 15 if level else 30 - 15)
    assert np.max(np.abs(after - z)) < 2.0 ** -15


def test_scale_down_refuses_a_scale_above_q0_over_ratio(n10):
    ctx, sk, pk, _ = n10
    ct = ctx.encrypt(np.zeros(ctx.slots), pk, level=0, scale=2.0 ** 55)
    with pytest.raises(ScaleMismatchError, match="q0/2"):
        scale_down(ctx, ct, 8)


# ---- T1
@pytest.mark.parametrize("name", ["test-N10-boot", "test-N12-boot"])
def test_encapsulation_round_trip_error_below_2_12(name):
    ctx, sk, pk = make(name)
    keys = EncapsulationKeys(ctx, sk, h=32)
    rng = np.random.default_rng(7)
    ct, _ = random_ct(ctx, pk, rng, 0, ctx.modulus(0) / 2 ** 8)
    sparse = dense_to_sparse(ctx, ct, keys)
    with pytest.raises(KeyMismatchError):   # under s', not s: decrypting with s is refused, not garbage
        ctx.decrypt(sparse, sk)
    back = mod_raise(ctx, sparse, keys, level=0)
    assert back.level == 0 and back.scale == ct.scale and back.native.key_id == sk.key_id
    q0 = ctx.modulus(0)
    m_in = raw_decrypt(ctx, ct, sk)
    m_out = raw_decrypt(ctx, back, sk)
    err = max(abs(centred(a - b, q0)) for a, b in zip(m_out, m_in))
    assert err < 2 ** 12, math.log2(err)
    assert err > 0   # a key switch adds noise: the oracle sees the real polynomials


# ---- T2
def test_mod_raise_identity_and_irwin_hall_statistics(n10):
    ctx, sk, pk, keys = n10
    L, q0 = ctx.max_level, ctx.modulus(0)
    rng = np.random.default_rng(2026)
    Is, worst_mod_err = [], 0
    count = (1 << 16) // ctx.N       # 2^16 coefficients
    for _ in range(count):
        ct, _ = random_ct(ctx, pk, rng, 1, 2.0 ** 40)
        low = scale_down(ctx, ct, 8)
        up = mod_raise(ctx, dense_to_sparse(ctx, low, keys), keys)
        assert up.level == L and up.scale == low.scale
        m0 = raw_decrypt(ctx, low, sk)
        t = raw_decrypt(ctx, up, sk)
        for tk, mk in zip(t, m0):
            r = centred(tk, q0)
            assert (tk - r) % q0 == 0
            Is.append((tk - r) // q0)
            worst_mod_err = max(worst_mod_err, abs(centred(r - mk, q0)))
    Is = np.array(Is)
    assert len(Is) >= 1 << 16
    assert worst_mod_err < 2 ** 12                 # t ≡ m + e (mod q0) up to the two key switches
    assert np.max(np.abs(Is)) <= 16                # |I| <= (h+1)/2 with the centred lift
    std = float(np.std(Is))
    assert abs(std - math.sqrt(33 / 12)) < 0.1, std
    assert abs(float(np.mean(Is))) < 0.05


def test_uncentred_lift_would_break_the_bound(n10):
    """The oracle sees the centred lift: shifting c0 or c1 by q0 (a [0, q0) lift) changes I by about h/2."""
    ctx, sk, pk, keys = n10
    q0 = ctx.modulus(0)
    ct, _ = random_ct(ctx, pk, np.random.default_rng(3), 0, q0 / 2 ** 8)
    t = raw_decrypt(ctx, mod_raise(ctx, dense_to_sparse(ctx, ct, keys), keys), sk)
    I = [(x - centred(x, q0)) // q0 for x in t]
    assert max(abs(x) for x in I) <= 16 and min(I) < 0 < max(I)


def test_typed_errors(n10):
    ctx, sk, pk, keys = n10
    ct = ctx.encrypt(np.zeros(ctx.slots), pk, level=2, scale=2.0 ** 40)
    with pytest.raises(LevelError, match="level 0"):
        dense_to_sparse(ctx, ct, keys)
    low = ctx.drop_level(ct, 0)
    with pytest.raises(KeyMismatchError, match="dense_to_sparse"):
        mod_raise(ctx, low, keys)
    with pytest.raises(MissingKeyError):
        dense_to_sparse(ctx, low, None)
    with pytest.raises(LevelError):
        mod_raise(ctx, dense_to_sparse(ctx, low, keys), keys, level=ctx.max_level + 1)
    other_sk, _ = ctx.keygen()
    other = EncapsulationKeys(ctx, other_sk, h=32, level=3)
    with pytest.raises(KeyMismatchError):
        dense_to_sparse(ctx, low, other)
    assert other.level == 3 and other.nbytes < keys.nbytes
    assert "sparse" not in " ".join(dir(keys.native)).replace("sparse_id", "")  # no secret accessor
