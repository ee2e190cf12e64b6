"""MSRLWE (shared a-part) matrices: encryption, PCMM, precomputed U*A, conversion to RLWE."""
import numpy as np
import pytest

from hemlp import pcmm
from hemlp.errors import EncodingError, KeyMismatchError, ShapeError
from tests.conftest import bits, make_ctx


@pytest.fixture(scope="module")
def env():
    ctx = make_ctx("test-N10")
    sk, pk = ctx.keygen()
    msk = pcmm.multi_secret_key(ctx, 3)
    return ctx, sk, msk


def asym(rows, cols, rng):
    return rng.uniform(-0.5, 0.5, (rows, cols)) + np.arange(rows)[:, None] / rows


def test_rows_share_the_a_part_and_decrypt(env, rng):
    ctx, sk, msk = env
    M = asym(8, 3 * ctx.slots - 7, rng)
    C = pcmm.encrypt_matrix(ctx, M, msk)
    assert C.format == "msrlwe" and C.chunks == 3 and len(C.cts) == 8
    assert bits(pcmm.decrypt_matrix(ctx, C, msk) - M) > 25
    assert C.cts[0]._obj.seeded


@pytest.mark.parametrize("encoding", ["slot", "coeff"])
def test_pcmm_output_stays_msrlwe_with_shared_a(env, rng, encoding):
    ctx, sk, msk = env
    width = ctx.slots if encoding == "slot" else ctx.N
    M = asym(12, 3 * width, rng)
    U, b = rng.normal(0, 0.4, (5, 12)), rng.normal(size=5)
    C = pcmm.encrypt_matrix(ctx, M, msk, encoding=encoding)
    Y = pcmm.pcmm(U, C, bias=b, weight_bits=24)
    assert Y.format == "msrlwe" and Y.shape == (5, 3 * width)
    assert bits(pcmm.decrypt_matrix(ctx, Y, msk) - (U @ M + b[:, None])) > 14
    # the output a-part of row r is K * sum_i U~_ri a_i (mod q), checked on limb 0 before rescale
    raw = pcmm.pcmm(U, C, weight_bits=24, rescale=False)
    Uq, _ = pcmm.quantize(U, 24)
    q = ctx.modulus(0)
    A = [[int(v) for v in C.cts[i]._obj.poly_a()[0]] for i in range(12)]
    for r in range(5):
        want = [sum(int(Uq[r, i]) * A[i][t] for i in range(12)) % q for t in range(ctx.N)]
        assert [int(v) for v in raw.cts[r]._obj.poly_a()[0]] == want


def test_precomputed_path_equals_online_path(env, rng):
    ctx, sk, msk = env
    M = asym(16, 2 * ctx.slots, rng)
    U = rng.normal(size=(6, 16))
    C = pcmm.encrypt_matrix(ctx, M, msk)
    pre = pcmm.PcmmPrecomputed(U, ctx, C.session, C.level)
    online = pcmm.pcmm(U, C)
    offline = pcmm.pcmm(U, C, precomputed=pre)
    for a, b in zip(online.cts, offline.cts):
        assert np.array_equal(a._obj.poly_a(), b._obj.poly_a())
        for j in range(C.chunks):
            assert np.array_equal(a._obj.poly_b(j), b._obj.poly_b(j))
    # a precomputation for another session or weight matrix is refused, never silently wrong
    other = pcmm.encrypt_matrix(ctx, M, msk)
    with pytest.raises(Exception, match="session|seeds"):
        pcmm.pcmm(U, other, precomputed=pre)
    with pytest.raises(EncodingError):
        pcmm.pcmm(U * 2, C, precomputed=pre)


def test_precomputed_unrescaled_at_level_0(env, rng):
    """The final-layer case: the product at level 0 without its rescale (K = 1), U*A made ahead for it."""
    ctx, sk, msk = env
    M = asym(16, 2 * ctx.slots, rng)
    U = rng.normal(0, 0.3, (6, 16)) + 0.1
    C = pcmm.encrypt_matrix(ctx, M, msk, level=0, scale=2.0 ** 22)
    pre = pcmm.PcmmPrecomputed(U, ctx, C.session, 0, weight_bits=12, rescale=False)
    online = pcmm.pcmm(U, C, weight_bits=12, rescale=False)
    offline = pcmm.pcmm(U, C, weight_bits=12, rescale=False, precomputed=pre)
    for a, b in zip(online.cts, offline.cts):
        assert np.array_equal(a._obj.poly_a(), b._obj.poly_a())
        for j in range(C.chunks):
            assert np.array_equal(a._obj.poly_b(j), b._obj.poly_b(j))
    assert offline.level == 0
    assert bits(pcmm.decrypt_matrix(ctx, offline, msk) - U @ M) > 8      # 12-bit weights: ~9-10 bits
    # made for the unrescaled product, refused for a rescaled one (and the other way round)
    with pytest.raises(EncodingError, match="rescale"):
        pcmm.pcmm(U, C, weight_bits=12, precomputed=pre)
    C1 = pcmm.encrypt_matrix(ctx, M, msk, level=1)
    with pytest.raises(EncodingError, match="rescale"):
        pcmm.pcmm(U, C1, weight_bits=12, rescale=False, precomputed=pcmm.PcmmPrecomputed(U, ctx, C1.session, 1, 12))


def test_conversion_to_rlwe(env, rng):
    ctx, sk, msk = env
    M = asym(4, 3 * ctx.slots, rng)
    C = pcmm.encrypt_matrix(ctx, M, msk)
    R = pcmm.to_rlwe(C, pcmm.conversion_keys(ctx, sk, msk))
    assert R.format == "rlwe" and len(R.cts) == 12
    assert bits(pcmm.decrypt_matrix(ctx, R, sk) - M) > 20
    # RLWE operations continue under the main key
    Y = pcmm.pcmm(np.eye(4)[::-1], R)
    assert bits(pcmm.decrypt_matrix(ctx, Y, sk) - M[::-1]) > 15


def test_msrlwe_errors(env, rng):
    ctx, sk, msk = env
    with pytest.raises(ShapeError, match="k = 3"):
        pcmm.encrypt_matrix(ctx, np.zeros((2, 4 * ctx.slots)), msk)
    C = pcmm.encrypt_matrix(ctx, asym(2, 10, rng), msk)
    with pytest.raises(KeyMismatchError):
        pcmm.decrypt_matrix(ctx, C, sk)
    other = pcmm.multi_secret_key(ctx, 3)
    with pytest.raises(KeyMismatchError):
        pcmm.to_rlwe(C, pcmm.conversion_keys(ctx, sk, other))
    with pytest.raises(EncodingError, match="to_rlwe"):
        pcmm.pcmm_gather(np.ones((1, 2)), C, np.zeros((2, 1), int))


def test_serialisation(env, rng, tmp_path):
    ctx, sk, msk = env
    M = asym(3, 50, rng)
    C = pcmm.encrypt_matrix(ctx, M, msk)
    C.save(tmp_path / "m.bin")
    back = pcmm.CtMatrix.load(tmp_path / "m.bin", ctx)
    assert bits(pcmm.decrypt_matrix(ctx, back, msk) - M) > 25
    k2 = pcmm.MultiSecretKey.from_bytes(msk.to_bytes(), ctx)
    assert bits(pcmm.decrypt_matrix(ctx, C, k2) - M) > 25


def test_rlwe_to_msrlwe_and_back(env, rng):
    ctx, sk, msk = env
    M = asym(5, 3 * ctx.slots - 11, rng)
    R = pcmm.encrypt_matrix(ctx, M, sk)    # RLWE rows under the main secret
    keys = pcmm.msrlwe_conversion_keys(ctx, sk, msk)
    C = pcmm.to_msrlwe(R, keys)
    assert C.format == "msrlwe" and len(C.cts) == 5
    assert bits(pcmm.decrypt_matrix(ctx, C, msk) - M) > 18
    U = rng.normal(0, 0.5, (3, 5))
    Y = pcmm.pcmm(U, C, weight_bits=24)
    assert bits(pcmm.decrypt_matrix(ctx, Y, msk) - U @ M) > 14
    back = pcmm.to_rlwe(Y, pcmm.conversion_keys(ctx, sk, msk))
    assert bits(pcmm.decrypt_matrix(ctx, back, sk) - U @ M) > 14
    with pytest.raises(ShapeError, match="chunks"):
        pcmm.to_msrlwe(pcmm.encrypt_matrix(ctx, M[:, :10], sk), keys)
