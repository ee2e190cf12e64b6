"""Exact scale / level tracking and the errors for mismatches."""
import numpy as np
import pytest

from hemlp.errors import LevelError, ScaleMismatchError
from tests.conftest import bits


def test_scale_after_mul_and_rescale_is_exact(t12, rng):
    ctx = t12.ctx
    a = ctx.encrypt(rng.uniform(-1, 1, 8), t12.pk)
    b = ctx.encrypt(rng.uniform(-1, 1, 8), t12.pk, scale=2.0**35)
    m = ctx.rescale(ctx.mul(a, b, relin_key=t12.rlk))
    assert m.scale == a.scale * b.scale / ctx.modulus(a.level)
    assert m.level == a.level - 1


def test_plaintext_product_keeps_the_scale_exactly(t12, rng):
    ctx = t12.ctx
    x, w = rng.uniform(-1, 1, ctx.slots), rng.uniform(-2, 2, ctx.slots)
    ct = ctx.encrypt(x, t12.pk)
    m = ctx.rescale(ctx.mul(ct, w))
    assert m.scale == ct.scale
    assert bits(ctx.decrypt(m, t12.sk) - x * w) > 20
    m2 = ctx.rescale(ctx.mul(m, 0.5))
    assert bits(ctx.decrypt(ctx.add(m2, 1.0), t12.sk) - (x * w * 0.5 + 1)) > 20


def test_mismatched_levels_and_scales_are_refused(t12, rng):
    ctx = t12.ctx
    a = ctx.encrypt(rng.uniform(-1, 1, 8), t12.pk)
    b = ctx.encrypt(rng.uniform(-1, 1, 8), t12.pk, level=a.level - 1)
    with pytest.raises(LevelError, match="drop_level"):
        ctx.add(a, b)
    with pytest.raises(LevelError):
        ctx.mul(a, b)
    c = ctx.encrypt(rng.uniform(-1, 1, 8), t12.pk, scale=2.0**39)
    with pytest.raises(ScaleMismatchError, match="set_scale"):
        ctx.add(a, c)
    sq = ctx.rescale(ctx.mul(a, a, relin_key=t12.rlk))
    with pytest.raises(ScaleMismatchError):
        ctx.add(sq, ctx.drop_level(a, sq.level))


def test_drop_level_and_set_scale_preserve_the_message(t12, rng):
    ctx = t12.ctx
    x = rng.uniform(-1, 1, ctx.slots)
    a = ctx.encrypt(x, t12.pk)
    d = ctx.drop_level(a, 1)
    assert d.level == 1 and d.scale == a.scale
    assert bits(ctx.decrypt(d, t12.sk) - x) > 22
    sq = ctx.rescale(ctx.mul(a, a, relin_key=t12.rlk))
    fixed = ctx.set_scale(ctx.drop_level(a, sq.level), sq.scale)
    assert fixed.level == sq.level - 1
    total = ctx.add(ctx.drop_level(sq, fixed.level), fixed)
    assert bits(ctx.decrypt(total, t12.sk) - (x * x + x)) > 18


def test_exhausted_levels(t12, rng):
    ctx = t12.ctx
    a = ctx.encrypt(rng.uniform(-1, 1, 8), t12.pk)
    for _ in range(ctx.max_level):
        a = ctx.rescale(ctx.mul(a, a, relin_key=t12.rlk))
    assert a.level == 0
    with pytest.raises(LevelError, match="level 0"):
        ctx.rescale(ctx.mul(a, a, relin_key=t12.rlk))
    with pytest.raises(LevelError):
        ctx.drop_level(a, 1)


def test_add_sub_negate_and_integer_multiply(t12, rng):
    ctx = t12.ctx
    x, y = rng.uniform(-1, 1, ctx.slots), rng.uniform(-1, 1, ctx.slots)
    a, b = ctx.encrypt(x, t12.pk), ctx.encrypt(y, t12.sk)
    assert bits(ctx.decrypt(ctx.add(a, b), t12.sk) - (x + y)) > 22
    assert bits(ctx.decrypt(ctx.sub(a, b), t12.sk) - (x - y)) > 22
    assert bits(ctx.decrypt(ctx.negate(a), t12.sk) + x) > 22
    assert bits(ctx.decrypt(ctx.sub(a, y), t12.sk) - (x - y)) > 22
    assert bits(ctx.decrypt(ctx.mul_integer(a, -7), t12.sk) + 7 * x) > 19


def test_depth_chain_precision(t12, rng):
    """x^8 through three squarings uses all three levels of Set T."""
    ctx = t12.ctx
    x = rng.uniform(-1, 1, ctx.slots)
    c = ctx.encrypt(x, t12.pk)
    for _ in range(3):
        c = ctx.rescale(ctx.mul(c, c, relin_key=t12.rlk))
    assert bits(ctx.decrypt(c, t12.sk) - x**8) > 15


def test_drop_level_keeps_the_low_limbs_bit_for_bit_and_the_metadata(t12, rng):
    """drop_level copies only the kept limbs: they equal the input's, and every tag (complex, encoding, slots,
    scale) survives (a complex ciphertext dropped must still decode as complex)."""
    ctx = t12.ctx
    z = rng.uniform(-1, 1, ctx.slots) + 1j * rng.uniform(-1, 1, ctx.slots)
    a = ctx.encrypt(z, t12.pk)
    d = ctx.drop_level(a, 1)
    assert (d.is_complex, d.encoding, d.slots, d.scale, d.level) == (a.is_complex, a.encoding, a.slots, a.scale, 1)
    assert bits(ctx.decrypt(d, t12.sk) - z) > 22
    for j in range(2):
        full, low = np.asarray(a.native.poly(j)), np.asarray(d.native.poly(j))
        assert low.shape[0] == 2 and np.array_equal(full[:2], low)


def test_inplace_add_sub_negate_equal_the_copies_bit_for_bit(t12, rng):
    """add_inplace / sub_inplace / negate_inplace and the direct sub (one copy, was a + negate(b)) against the
    out-of-place ops, exactly: the same bytes, on 2- and 3-part ciphertexts (a product before relinearisation)."""
    ctx = t12.ctx
    x, y = rng.uniform(-1, 1, ctx.slots), rng.uniform(-1, 1, ctx.slots)
    a, b = ctx.encrypt(x, t12.pk), ctx.encrypt(y, t12.sk)
    a3 = ctx.mul(a, b)                                   # 3 parts, scale a.scale * b.scale
    b3 = ctx.mul(b, a)
    c2 = ctx.encrypt(y, t12.pk, scale=a3.scale, level=a3.level)
    same = lambda u, v: u.to_bytes() == v.to_bytes()     # noqa: E731
    for p, q in ((a, b), (a3, b3), (a3, c2), (c2, a3)):
        assert same(ctx.sub(p, q), ctx.add(p, ctx.negate(q)))
        r = ctx.add(p, ctx.negate(ctx.negate(p)))        # a private copy of p + p to accumulate into
        ref = ctx.add(r, q)
        assert same(ctx.add_inplace(r, q), ref)
        r = ctx.negate(ctx.negate(p))
        assert ctx.sub_inplace(r, q) is r and same(r, ctx.sub(p, q))
        assert same(ctx.negate_inplace(r), ctx.negate(ctx.sub(p, q)))
    assert bits(ctx.decrypt(ctx.sub_inplace(ctx.negate(ctx.negate(a)), b), t12.sk) - (x - y)) > 22
    assert bits(ctx.decrypt(ctx.add_inplace(ctx.negate(ctx.negate(a)), b), t12.sk) - (x + y)) > 22


def test_inplace_ops_check_first_and_change_nothing_on_error(t12, rng):
    ctx = t12.ctx
    a = ctx.encrypt(rng.uniform(-1, 1, ctx.slots), t12.pk)
    b = ctx.encrypt(rng.uniform(-1, 1, ctx.slots), t12.pk, scale=2.0**35)
    before = a.to_bytes()
    with pytest.raises(ScaleMismatchError, match="add_inplace: scales differ"):
        ctx.add_inplace(a, b)
    with pytest.raises(LevelError):
        ctx.sub_inplace(a, ctx.drop_level(ctx.encrypt(np.zeros(ctx.slots), t12.pk), a.level - 1))
    assert a.to_bytes() == before
    with pytest.raises(TypeError):
        ctx.add_inplace(a, np.zeros(ctx.slots))
