"""MLWE(k) matrices (d3 < N): interleaved rows, ModDecomp + GEMM + ModPack."""
import numpy as np
import pytest

from hemlp import pcmm
from hemlp.errors import EncodingError, MissingKeyError, ShapeError
from tests.conftest import bits, make_ctx


@pytest.fixture(scope="module")
def env():
    ctx = make_ctx("test-N10")
    sk, pk = ctx.keygen()
    return ctx, sk, pk


def asym(rows, cols, rng):
    """Row index in the values: a contiguous (non-interleaved) split would decrypt differently."""
    return rng.uniform(-0.3, 0.3, (rows, cols)) + np.arange(rows)[:, None] / rows - 0.5


def test_interleaved_layout(env, rng):
    ctx, sk, pk = env
    d3 = ctx.N // 4
    M = asym(8, d3, rng)
    C = pcmm.encrypt_matrix(ctx, M, pk, format="mlwe", encoding="coeff")
    assert len(C.cts) == 2 and C.k == 4
    coeffs = ctx.decrypt(C.cts[1], sk)
    # row 4*1 + u, column t sits at coefficient t*4 + u
    for u in range(4):
        for t in (0, 1, d3 - 1):
            assert abs(coeffs[t * 4 + u] - M[4 + u, t]) < 1e-6
    assert bits(pcmm.decrypt_matrix(ctx, C, sk) - M) > 25


@pytest.mark.parametrize("d3_div", [32, 2])  # d3 = sqrt(N) and d3 = N/2
def test_pcmm_matches_numpy(env, rng, d3_div):
    ctx, sk, pk = env
    d3 = ctx.N // d3_div
    k = ctx.N // d3
    d2, d1 = 2 * k + 3, k + 5  # partial groups on both sides
    M = asym(d2, d3, rng)
    U, b = rng.normal(0, 0.4, (d1, d2)), rng.normal(size=d1)
    C = pcmm.encrypt_matrix(ctx, M, pk, format="mlwe", encoding="coeff")
    Y = pcmm.pcmm(U, C, keys=pcmm.modpack_keys(ctx, sk, k), bias=b, weight_bits=24)
    assert Y.format == "mlwe" and Y.shape == (d1, d3) and Y.level == C.level - 1
    assert bits(pcmm.decrypt_matrix(ctx, Y, sk) - (U @ M + b[:, None])) > 12


def test_products_chain_and_compare_with_rlwe(env, rng):
    ctx, sk, pk = env
    d3, k = ctx.N // 8, 8
    M = asym(16, d3, rng)
    U1, U2 = rng.normal(0, 0.3, (16, 16)), rng.normal(0, 0.3, (8, 16))
    keys = pcmm.modpack_keys(ctx, sk, k)
    C = pcmm.encrypt_matrix(ctx, M, sk, format="mlwe", encoding="coeff")
    Y = pcmm.pcmm(U2, pcmm.pcmm(U1, C, keys=keys), keys=keys)
    R = pcmm.pcmm(U2, pcmm.pcmm(U1, pcmm.encrypt_matrix(ctx, M, sk, encoding="coeff")))
    want = U2 @ U1 @ M
    assert bits(pcmm.decrypt_matrix(ctx, Y, sk) - want) > 10
    assert bits(pcmm.decrypt_matrix(ctx, R, sk) - want) > 10


def test_mlwe_errors(env, rng):
    ctx, sk, pk = env
    with pytest.raises(EncodingError, match="coeff"):
        pcmm.encrypt_matrix(ctx, np.zeros((4, ctx.N // 4)), pk, format="mlwe")
    with pytest.raises(ShapeError, match="sqrt"):
        pcmm.encrypt_matrix(ctx, np.zeros((4, 8)), pk, format="mlwe", encoding="coeff")
    C = pcmm.encrypt_matrix(ctx, asym(4, ctx.N // 4, rng), pk, format="mlwe", encoding="coeff")
    with pytest.raises(MissingKeyError, match="modpack_keys"):
        pcmm.pcmm(np.ones((4, 4)), C)
    with pytest.raises(MissingKeyError):
        pcmm.pcmm(np.ones((4, 4)), C, keys=pcmm.modpack_keys(ctx, sk, 2))


def test_choose_format(env):
    ctx, _, _ = env
    assert pcmm.choose_format(ctx, 64, 64, 4 * ctx.N) == "msrlwe"
    assert pcmm.choose_format(ctx, 64, 64, ctx.slots) == "rlwe"
    assert pcmm.choose_format(ctx, 16, 4096, ctx.N // 4, encoding="coeff") in ("mlwe", "rlwe")


def test_lwe_extraction_decrypts_exactly(env, rng):
    ctx, sk, pk = env
    x = rng.uniform(-1, 1, ctx.N)
    ct = ctx.encrypt(x, pk, encoding="coeff")
    s = sk._obj.coeffs.astype(object)
    pt = ctx.native.decrypt(ct.native, sk.native, 0, 0).poly()  # NTT-form limbs of c0 + c1 s
    for index in (0, 1, 517, ctx.N - 1):
        b, A = pcmm.extract_lwe(ctx, ct, index)
        for limb in range(ct.level + 1):
            q = ctx.modulus(limb)
            m = (int(b[limb]) + int(np.dot(A[limb].astype(object), s))) % q
            assert m == int(ctx.intt(pt[limb], limb=limb)[index])


def test_moddecomp_then_modpack_preserves_the_message(env, rng):
    """RLWE -> MLWE (ModDecomp: coefficient re-indexing) and MLWE -> RLWE (ModPack: k key switches)
    with nothing in between (U = identity) give back the same matrix."""
    ctx, sk, pk = env
    d3, k = ctx.N // 4, 4
    M = asym(8, d3, rng)
    C = pcmm.encrypt_matrix(ctx, M, pk, format="mlwe", encoding="coeff")
    back = pcmm.pcmm(np.eye(8), C, keys=pcmm.modpack_keys(ctx, sk, k), weight_bits=20)
    assert bits(pcmm.decrypt_matrix(ctx, back, sk) - M) > 16
