"""Hybrid key switching: relinearisation, rotations, conjugation, every digit path, hoisting."""
import numpy as np
import pytest

from tests.conftest import bits


@pytest.fixture(scope="module")
def gk(t12):
    steps = [1, -1, 2, -2, 4, 8, -16, 5, 1000, 3, 7]
    return t12.ctx.rotation_keys(t12.sk, steps).merge(t12.ctx.conjugation_key(t12.sk))


def data(ctx, rng):
    # index-dependent, asymmetric values so that a wrong permutation cannot pass
    return rng.uniform(-1, 1, ctx.slots) + np.arange(ctx.slots) / ctx.slots


@pytest.mark.parametrize("level", [3, 2, 1, 0])
def test_rotations_at_every_level(t12, gk, rng, level):
    """Level 3: two full digits; 2: a full and a partial digit; 1: one digit; 0: a partial digit."""
    ctx = t12.ctx
    x = data(ctx, rng)
    ct = ctx.encrypt(x, t12.pk, level=level)
    for r in (1, -1, 2, -2, 4, 8, -16, 5, 1000):
        got = ctx.decrypt(ctx.rotate(ct, r, gk), t12.sk)
        assert bits(got - np.roll(x, -r)) > 20, (level, r)


def test_conjugation(t12, gk, rng):
    ctx = t12.ctx
    z = rng.uniform(-1, 1, ctx.slots) + 1j * rng.uniform(-1, 1, ctx.slots)
    ct = ctx.encrypt(z, t12.pk)
    assert bits(ctx.decrypt(ctx.conjugate(ct, gk), t12.sk) - np.conj(z)) > 20


@pytest.mark.parametrize("level", [3, 2, 1])
def test_relinearised_product(t12, rng, level):
    ctx = t12.ctx
    x, y = data(ctx, rng), rng.normal(size=ctx.slots)
    a, b = ctx.encrypt(x, t12.pk, level=level), ctx.encrypt(y, t12.sk, level=level)
    raw = ctx.mul(a, b)
    assert raw.size == 3
    assert bits(ctx.decrypt(raw, t12.sk) - x * y) > 18  # size-3 decryption uses s^2
    m = ctx.rescale(ctx.mul(a, b, relin_key=t12.rlk))
    assert m.size == 2 and m.level == level - 1
    assert bits(ctx.decrypt(m, t12.sk) - x * y) > 18
    assert bits(ctx.decrypt(ctx.relinearize(raw, t12.rlk), t12.sk) - x * y) > 18


def test_hoisted_rotations_equal_individual_ones(t12, gk, rng):
    ctx = t12.ctx
    x = data(ctx, rng)
    ct = ctx.encrypt(x, t12.pk)
    steps = [1, 2, 3, 4, 5, 7, 8, -1]
    hoisted = ctx.rotate_hoisted(ct, steps, gk)
    for s, h in zip(steps, hoisted):
        single = ctx.decrypt(ctx.rotate(ct, s, gk), t12.sk)
        dh = ctx.decrypt(h, t12.sk)
        assert bits(dh - np.roll(x, -s)) > 20
        assert bits(dh - single) > 20  # same message within key-switching noise


def test_rotation_of_sparse_slots(t12, gk, rng):
    ctx = t12.ctx
    x = rng.uniform(-1, 1, 16) + np.arange(16)
    ct = ctx.encrypt(x, t12.pk, slots=16)
    assert bits(ctx.decrypt(ctx.rotate(ct, 3, gk), t12.sk) - np.roll(x, -3)) > 18


def test_missing_rotation_key(t12, gk, rng):
    from hemlp.errors import MissingKeyError

    ct = t12.ctx.encrypt([1.0, 2.0], t12.pk)
    with pytest.raises(MissingKeyError, match="rotation_keys"):
        t12.ctx.rotate(ct, 6, gk)


def test_keys_of_another_secret_are_rejected(t12, rng):
    from hemlp.errors import KeyMismatchError

    ctx = t12.ctx
    sk2, _ = ctx.keygen()
    ct = ctx.encrypt([1.0], t12.pk)
    with pytest.raises(KeyMismatchError):
        ctx.mul(ct, ct, relin_key=ctx.relin_key(sk2))
    with pytest.raises(KeyMismatchError):
        ctx.rotate(ct, 1, ctx.rotation_keys(sk2, [1]))


def test_keyswitch_noise_is_below_rescale_noise(t12, gk, rng):
    """Error after 64 rotations stays within ~6 bits of a single rotation (P >= digit size)."""
    ctx = t12.ctx
    x = data(ctx, rng)
    ct = ctx.encrypt(x, t12.pk)
    e1 = np.max(np.abs(ctx.decrypt(ctx.rotate(ct, 1, gk), t12.sk) - np.roll(x, -1)))
    c = ct
    for _ in range(64):
        c = ctx.rotate(c, 1, gk)
    e64 = np.max(np.abs(ctx.decrypt(c, t12.sk) - np.roll(x, -64)))
    assert e64 < 64 * e1


def test_keyswitch_noise_is_centred_and_small(t12):
    """Rotating an encryption of 0 at scale 1 leaves the key-switching error: the ModDown rounding
    times s. With centred base conversion it has mean ~0 and std well below sqrt(N) (flooring
    with an uncentred conversion gave about 1.4 sqrt(N) here)."""
    ctx = t12.ctx
    gk = ctx.rotation_keys(t12.sk, [1])
    ct = ctx.encrypt(np.zeros(4), t12.sk, scale=1.0)
    e = ctx._e.plaintext_coeffs(ctx.native.decrypt(ctx.rotate(ct, 1, gk).native, t12.sk.native, 0, 0))
    assert np.std(e) < 0.6 * np.sqrt(ctx.N)
    assert abs(np.mean(e)) < 2


@pytest.mark.parametrize("level", [3, 2, 1])
def test_fused_relin_rescale_matches_the_separate_steps(t12, rng, level):
    ctx = t12.ctx
    x, y = data(ctx, rng), rng.normal(size=ctx.slots)
    a, b = ctx.encrypt(x, t12.pk, level=level), ctx.encrypt(y, t12.sk, level=level)
    fused = ctx.mul(a, b, relin_key=t12.rlk, rescale=True)
    separate = ctx.rescale(ctx.mul(a, b, relin_key=t12.rlk))
    assert fused.level == separate.level == level - 1 and fused.scale == separate.scale
    assert bits(ctx.decrypt(fused, t12.sk) - x * y) > 18
    assert bits(ctx.decrypt(fused, t12.sk) - ctx.decrypt(separate, t12.sk)) > 18
    low = ctx.encrypt(x, t12.pk, level=0)
    with pytest.raises(Exception, match="level 0"):
        ctx.mul(low, low, relin_key=t12.rlk, rescale=True)


@pytest.mark.parametrize("level", [3, 2, 1])
def test_fused_relin_rescale_rounds_exactly_like_the_separate_steps(t12, rng, level):
    """The fused ModDown + rescale of mul(..., rescale=True) rounds the q_l step exactly (as csrc/boot/lintrans
    does): the decrypted integer polynomial equals that of relinearise-then-rescale coefficient for coefficient.
    (A single base conversion from {q_l} ∪ P left an extra integer error of up to (|P| + 1)/2 per coefficient,
    0.8-1 bit of bootstrapping precision through EvalMod's 13 products.)"""
    ctx = t12.ctx
    x, y = data(ctx, rng), rng.uniform(-1, 1, ctx.slots)
    a, b = ctx.encrypt(x, t12.sk, level=level), ctx.encrypt(y, t12.pk, level=level)
    fused = ctx.mul(a, b, relin_key=t12.rlk, rescale=True)
    separate = ctx.rescale(ctx.mul(a, b, relin_key=t12.rlk))

    def coeffs(ct):
        return ctx._e.plaintext_coeffs(ctx.native.decrypt(ct.native, t12.sk.native, 0, 0))

    assert np.array_equal(coeffs(fused), coeffs(separate))


def test_mul_rescale_many_is_the_one_by_one_product_in_parallel():
    """ctx.mul_rescale_many: the native parallel loop over pairs gives the bits of mul(..., rescale=True) per pair,
    decrypts to the slot-wise products, and an error in one pair (a level-0 operand) is raised, not lost."""
    import numpy as np

    from hemlp.errors import LevelError, MissingKeyError, ShapeError
    from tests.conftest import make_ctx

    ctx = make_ctx("test-N12")
    sk, pk = ctx.keygen()
    rlk = ctx.relin_key(sk)
    rng = np.random.default_rng(11)
    xs = [rng.uniform(-1, 1, ctx.slots) + i for i in range(5)]  # asymmetric: the pair index is in the values
    ys = [rng.uniform(-1, 1, ctx.slots) for _ in range(5)]
    A = [ctx.encrypt(x, pk) for x in xs]
    B = [ctx.encrypt(y, pk) for y in ys]
    got = ctx.mul_rescale_many(A, B, rlk)
    for a, b, g, x, y in zip(A, B, got, xs, ys):
        assert g.to_bytes() == ctx.mul(a, b, relin_key=rlk, rescale=True).to_bytes()
        assert np.max(np.abs(ctx.decrypt(g, sk).real - x * y)) < 2.0 ** -14
    low = ctx.drop_level(A[2], 0)
    with pytest.raises(LevelError):
        ctx.mul_rescale_many(A[:2] + [low], B[:2] + [ctx.drop_level(B[2], 0)], rlk)
    with pytest.raises(ShapeError):
        ctx.mul_rescale_many(A, B[:3], rlk)
    with pytest.raises(MissingKeyError):
        ctx.mul_rescale_many(A, B, None)
