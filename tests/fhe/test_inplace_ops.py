"""The in-place evaluator ops (mul_plain_inplace, rescale_inplace, rotate_inplace) against the copying ones, byte for
byte, at every level and several rotation amounts; their checks before any write; the scratch pool behind the key
switch; the native enums for encodings and decryption modes; C++ messages that name the API, not Python calls."""
import numpy as np
import pytest

from hemlp import _core
from hemlp.errors import (EncodingError, LevelError, MissingKeyError, ParameterError, ScaleMismatchError,
                          SerializationError)
from tests.conftest import bits

STEPS = (1, 3, -5, 17)


@pytest.fixture(scope="module")
def gk(t12):
    return t12.ctx.rotation_keys(t12.sk, STEPS)


def same(u, v) -> bool:
    return u.to_bytes() == v.to_bytes()


def fresh(ctx, ct):
    """A private copy of ct (its own native object) to mutate."""
    return ctx.drop_level(ct, ct.level)


def test_rescale_inplace_equals_rescale_at_every_level(t12, rng):
    ctx = t12.ctx
    x, w = rng.uniform(-1, 1, ctx.slots), rng.uniform(-1, 1, ctx.slots)
    a = ctx.encrypt(x, t12.pk)
    a3 = ctx.mul(a, ctx.encrypt(w, t12.sk))          # 3 parts: rescale acts on every part
    for src in (a, a3, ctx.mul(a, w)):
        for lv in range(src.level, 0, -1):
            c = ctx.drop_level(src, lv)
            ref = ctx.rescale(c)
            r = fresh(ctx, c)
            assert ctx.rescale_inplace(r) is r and same(r, ref), lv
            assert (r.level, r.scale, r.size) == (lv - 1, c.scale / ctx.modulus(lv), c.size)
            assert same(c, ctx.drop_level(src, lv))    # the copy's input is untouched
    p = ctx.rescale_inplace(ctx.mul(a, w))
    assert bits(ctx.decrypt(p, t12.sk) - x * w) > 20


def test_mul_plain_inplace_equals_mul(t12, rng):
    ctx = t12.ctx
    x = rng.uniform(-1, 1, ctx.slots)
    a = ctx.encrypt(x, t12.pk)
    for lv in range(a.level, -1, -1):
        c = ctx.drop_level(a, lv)
        pt = ctx.encode(rng.uniform(-1, 1, ctx.slots), level=lv, scale=2.0**20)
        # arrays and scalars are encoded at q_level (too large for values near 1 at level 0's single prime)
        for b in (pt, rng.uniform(-1, 1, ctx.slots), 0.75) if lv else (pt,):
            r = fresh(ctx, c)
            assert ctx.mul_plain_inplace(r, b) is r and same(r, ctx.mul(c, b)), lv
        if lv:
            r = fresh(ctx, c)
            w = rng.uniform(-1, 1, ctx.slots)
            assert same(ctx.mul_plain_inplace(r, w, rescale=True), ctx.mul(c, w, rescale=True))
            assert bits(ctx.decrypt(r, t12.sk) - x * w) > 20
    # a seeded (secret-key) encryption: the result is no longer seeded, as the copy's
    s = ctx.encrypt(x, t12.sk)
    r = fresh(ctx, s)
    assert same(ctx.mul_plain_inplace(r, 0.5), ctx.mul(s, 0.5))
    # coefficient encoding (mul_plain acts on any encoding)
    xc = rng.uniform(-1, 1, ctx.N)
    cc = ctx.encrypt(xc, t12.pk, encoding="coeff")
    pc = ctx.encode(rng.uniform(-1, 1, ctx.N), level=cc.level, encoding="coeff")
    assert same(ctx.mul_plain_inplace(fresh(ctx, cc), pc), ctx.mul(cc, pc))


def test_rotate_inplace_equals_rotate(t12, gk, rng):
    ctx = t12.ctx
    x = rng.uniform(-1, 1, ctx.slots) + 1j * rng.uniform(-1, 1, ctx.slots)
    a = ctx.encrypt(x, t12.pk)
    for lv in range(a.level, -1, -1):
        c = ctx.drop_level(a, lv)
        for step in STEPS:
            r = fresh(ctx, c)
            assert ctx.rotate_inplace(r, step, gk) is r and same(r, ctx.rotate(c, step, gk)), (lv, step)
        r = fresh(ctx, c)
        assert same(ctx.rotate_inplace(r, 0, gk), c)    # the identity leaves it as it was
    r = fresh(ctx, a)
    for step in STEPS:                                 # a chain of in-place rotations decrypts to the rolled values
        ctx.rotate_inplace(r, step, gk)
    assert bits(ctx.decrypt(r, t12.sk) - np.roll(x, -sum(STEPS))) > 20
    s = ctx.encrypt(x, t12.sk)                         # seeded: rotated, it is no longer seeded
    assert same(ctx.rotate_inplace(fresh(ctx, s), 3, gk), ctx.rotate(s, 3, gk))


def test_inplace_results_are_seen_through_every_reference(t12, gk, rng):
    ctx = t12.ctx
    a = ctx.encrypt(rng.uniform(-1, 1, ctx.slots), t12.pk)
    alias = ctx.wrap(type(a), a.native)                # another wrapper of the same native ciphertext
    ref = ctx.rescale(ctx.rotate(a, 1, gk))
    ctx.rescale_inplace(ctx.rotate_inplace(a, 1, gk))
    assert same(alias, ref) and alias.level == ref.level


def test_inplace_ops_check_first_and_change_nothing(t12, gk, rng):
    ctx = t12.ctx
    x = rng.uniform(-1, 1, ctx.slots)
    a = ctx.encrypt(x, t12.pk)
    before = a.to_bytes()
    low = ctx.drop_level(a, 0)
    low_before = low.to_bytes()
    with pytest.raises(LevelError, match="rescale_inplace: the ciphertext is at level 0"):
        ctx.rescale_inplace(low)
    assert low.to_bytes() == low_before and low.level == 0
    with pytest.raises(MissingKeyError, match="no key for Galois element"):
        ctx.rotate_inplace(a, 2, gk)
    with pytest.raises(MissingKeyError):
        ctx.rotate_inplace(a, 1, None)
    low_keys = ctx.rotation_keys(t12.sk, [1], level=1)
    with pytest.raises(LevelError, match="generated for levels <= 1"):
        ctx.rotate_inplace(a, 1, low_keys)
    a3 = ctx.mul(a, a)
    a3_before = a3.to_bytes()
    with pytest.raises(ParameterError, match="rotate_inplace needs a relinearised ciphertext"):
        ctx.rotate_inplace(a3, 1, gk)
    assert a3.to_bytes() == a3_before
    cc = ctx.encrypt(rng.uniform(-1, 1, ctx.N), t12.pk, encoding="coeff")
    cc_before = cc.to_bytes()
    with pytest.raises(EncodingError, match="slot-encoded"):
        ctx.rotate_inplace(cc, 1, gk)
    assert cc.to_bytes() == cc_before
    with pytest.raises(LevelError, match="mul_plain_inplace: ciphertext at level"):
        ctx.mul_plain_inplace(a, ctx.encode(x, level=a.level - 1))
    with pytest.raises(EncodingError, match="mul_plain_inplace"):
        ctx.mul_plain_inplace(a, ctx.encode(x[:8], level=a.level, slots=8))
    with pytest.raises(TypeError):
        ctx.mul_plain_inplace(a, a)
    assert a.to_bytes() == before
    pt0 = ctx.encode(x, level=0, scale=2.0**20)
    with pytest.raises(LevelError, match="level 0"):
        ctx.mul_plain_inplace(low, pt0, rescale=True)
    assert low.to_bytes() == low_before


def test_scratch_pool_is_reused_and_bounded(t12, gk, rng):
    ctx = t12.ctx
    e = ctx.native
    a = ctx.encrypt(rng.uniform(-1, 1, ctx.slots), t12.pk)
    e.clear_scratch()
    ref = ctx.rotate(a, 3, gk)
    assert min(e.scratch_stats()) > 0                  # a rotation's temporaries stay in the pool

    def ops():
        assert same(ctx.rotate(a, 3, gk), ref)
        ctx.mul(a, a, relin_key=t12.rlk, rescale=True)
        ctx.rotate_inplace(ctx.rescale(a), 1, gk)

    ops()
    ops()
    warm = e.scratch_stats()
    for _ in range(5):
        ops()
    assert e.scratch_stats() == warm                   # reused: the same buffers, no growth
    e.clear_scratch()
    assert e.scratch_stats() == (0, 0)
    limit = e.scratch_limit
    try:
        e.scratch_limit = 0                            # no pool: every temporary allocated and freed
        assert same(ctx.rotate(a, 3, gk), ref)
        assert e.scratch_stats() == (0, 0)
    finally:
        e.scratch_limit = limit
    assert same(ctx.rotate(a, 3, gk), ref)             # cold pool, same bytes


def test_native_enums_and_the_integers_they_replace(t12, rng):
    ctx = t12.ctx
    e = ctx.native
    assert int(_core.Encoding.slot) == 0 and int(_core.Encoding.coeff) == 1
    assert [int(m) for m in (_core.DecryptMode.none, _core.DecryptMode.standard, _core.DecryptMode.flood)] == [0, 1, 2]
    x = rng.uniform(-1, 1, ctx.slots)
    a = ctx.encrypt(x, t12.pk)
    o = a.native
    assert o.encoding == 0 and _core.Encoding(o.encoding) == _core.Encoding.slot   # the property stays an int
    exact = [np.asarray(e.decode(e.decrypt(o, t12.sk.native, m, 0))) for m in (0, _core.DecryptMode.none)]
    assert np.array_equal(exact[0], exact[1])
    with pytest.raises(ParameterError, match="decryption noise mode"):
        e.decrypt(o, t12.sk.native, 5, 0)
    polys = [o.poly(j) for j in range(o.size)]
    for enc in (0, _core.Encoding.slot):
        c = e.import_ciphertext(polys, o.level, o.scale, o.slots, enc, o.is_complex, o.key_id, None)
        assert same(ctx.wrap(type(a), c), a)
    with pytest.raises(SerializationError, match="invalid encoding"):
        e.import_ciphertext(polys, o.level, o.scale, o.slots, 7, o.is_complex, o.key_id, None)
    with pytest.raises(TypeError):
        e.import_ciphertext(polys, o.level, o.scale, o.slots, "slot", o.is_complex, o.key_id, None)


def test_native_messages_name_the_api_not_python_calls(t12, gk, rng):
    """The core's errors name operations (drop_level, relinearize, rotation_keys), not Python call syntax."""
    ctx = t12.ctx
    a = ctx.encrypt(rng.uniform(-1, 1, ctx.slots), t12.pk)
    msgs = []
    cases = [
        lambda: ctx.add(a, ctx.drop_level(a, 1)),
        lambda: ctx.add(a, ctx.encrypt(rng.uniform(-1, 1, ctx.slots), t12.pk, scale=2.0**35)),
        lambda: ctx.rotate(ctx.mul(a, a), 1, gk),
        lambda: ctx.rotate(a, 2, gk),
        lambda: ctx.rotate(a, 1, ctx.rotation_keys(t12.sk, [1], level=0)),
        lambda: ctx.relinearize(ctx.mul(a, a), ctx.relin_key(t12.sk, level=0)),
        lambda: ctx.native.relin_key(t12.sk.native, 99),   # the native check (the wrapper has its own)
    ]
    for f in cases:
        with pytest.raises((LevelError, ScaleMismatchError, ParameterError, MissingKeyError)) as info:
            f()
        msgs.append(str(info.value))
    for m in msgs:
        assert "ctx." not in m and "(sk" not in m and "None" not in m, m
    assert "drop_level" in msgs[0] and "set_scale" in msgs[1] and "relinearize it first" in msgs[2]
    assert "rotation_keys" in msgs[3] and "rotation-key generation" in msgs[4]
    assert "relinearisation-key generation" in msgs[5]
