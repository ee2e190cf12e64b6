"""PCMM (RLWE, k = 1) against big-integer and numpy oracles."""
import numpy as np
import pytest

from hemlp import _core, pcmm
from hemlp.errors import ContextMismatchError, EncodingError, LevelError, ShapeError
from tests.conftest import bits, make_ctx


@pytest.fixture(scope="module")
def env():
    ctx = make_ctx("test-N10")
    sk, pk = ctx.keygen()
    return ctx, sk, pk


def asym(rows, cols, rng):
    """Row index encoded in the values: a row permutation cannot pass unnoticed."""
    return rng.uniform(-0.5, 0.5, (rows, cols)) + np.arange(rows)[:, None] / rows


def test_output_polynomials_equal_big_integer_products(env, rng):
    ctx, sk, pk = env
    M = asym(5, ctx.slots, rng)
    C = pcmm.encrypt_matrix(ctx, M, pk)
    U = rng.normal(size=(3, 5))
    Y = pcmm.pcmm(U, C, rescale=False, weight_bits=12)
    Uq, _ = pcmm.quantize(U, 12)
    for k in range(C.level + 1):
        q = ctx.modulus(k)
        for part in range(2):
            X = [[int(v) for v in C.cts[i]._obj.poly(part)[k]] for i in range(5)]
            for r in range(3):
                want = [sum(int(Uq[r, i]) * X[i][t] for i in range(5)) % q for t in range(ctx.N)]
                assert [int(v) for v in Y.cts[r]._obj.poly(part)[k]] == want


def test_ntt_and_coefficient_domain_paths_are_bit_identical(env, rng):
    """k = 1 commutes with the NTT: GEMM on coefficients then NTT == GEMM on NTT values."""
    ctx, sk, pk = env
    C = pcmm.encrypt_matrix(ctx, asym(6, ctx.slots, rng), sk)
    U = rng.normal(size=(4, 6))
    Y = pcmm.pcmm(U, C, rescale=False, weight_bits=16)
    Uq, _ = pcmm.quantize(U, 16)
    for k in range(C.level + 1):
        q = ctx.modulus(k)
        for part in range(2):
            coeff = np.stack([ctx.intt(C.cts[i]._obj.poly(part)[k], limb=k) for i in range(6)])
            prod = _core.modgemm_ref(Uq, coeff, q)
            for r in range(4):
                assert np.array_equal(ctx.ntt(prod[r], limb=k), Y.cts[r]._obj.poly(part)[k])


@pytest.mark.parametrize("encoding", ["slot", "coeff"])
def test_decrypts_to_the_product(env, rng, encoding):
    ctx, sk, pk = env
    d3 = 3 * ctx.slots + 17  # several chunks, the last partial
    M = asym(24, d3, rng)
    U = rng.normal(0, 0.5, (10, 24))
    b = rng.normal(size=10)
    C = pcmm.encrypt_matrix(ctx, M, pk, encoding=encoding)
    Y = pcmm.pcmm(U, C, bias=b, weight_bits=24)
    assert Y.shape == (10, d3) and Y.level == C.level - 1
    assert abs(Y.scale / C.scale - 1) < 2**-14
    got = pcmm.decrypt_matrix(ctx, Y, sk)
    assert bits(got - (U @ M + b[:, None])) > 14


def test_chained_products_and_quantisation_bound(env, rng):
    ctx, sk, pk = env
    M = asym(16, ctx.slots, rng)
    U1, U2 = rng.normal(0, 0.3, (16, 16)), rng.normal(0, 0.3, (8, 16))
    C = pcmm.encrypt_matrix(ctx, M, sk)
    Y = pcmm.pcmm(U2, pcmm.pcmm(U1, C))
    assert Y.level == C.level - 2
    assert bits(pcmm.decrypt_matrix(ctx, Y, sk) - U2 @ U1 @ M) > 12


def test_noise_is_a_row_sum_without_ring_expansion(env, rng):
    """Output error vs the quantised product: std about ||U~_r||_2 * sigma_in / Delta_U."""
    ctx, sk, pk = env
    d2 = 64
    M = rng.uniform(-1, 1, (d2, ctx.slots))
    C = pcmm.encrypt_matrix(ctx, M, pk, scale=2.0**30)
    fresh = pcmm.decrypt_matrix(ctx, C, sk) - M
    sigma_in = np.std(fresh)
    U = rng.normal(size=(4, d2))
    Uq, delta = pcmm.quantize(U, 20)
    Y = pcmm.pcmm(U, C, weight_bits=20, rescale=False)
    err = pcmm.decrypt_matrix(ctx, Y, sk) - (Uq / delta) @ M
    for r in range(4):
        predicted = np.linalg.norm(Uq[r] / delta) * sigma_in
        assert 0.5 < np.std(err[r]) / predicted < 2.0


def test_bad_inputs(env, rng):
    ctx, sk, pk = env
    C = pcmm.encrypt_matrix(ctx, rng.normal(size=(4, 8)), sk)
    with pytest.raises(ShapeError, match="columns must equal"):
        pcmm.pcmm(np.ones((2, 5)), C)
    with pytest.raises(ShapeError):
        pcmm.encrypt_matrix(ctx, np.ones(5), sk)
    with pytest.raises(EncodingError, match="format 'rlwe'"):
        pcmm.pcmm(np.ones((2, 4)), C, format="mlwe")
    with pytest.raises(EncodingError):
        pcmm.pcmm(np.full((2, 4), np.nan), C)
    low = pcmm.encrypt_matrix(ctx, rng.normal(size=(4, 8)), sk, level=0)
    with pytest.raises(LevelError, match="level 0"):
        pcmm.pcmm(np.ones((2, 4)), low)
    other = make_ctx("test-N12")
    with pytest.raises(ContextMismatchError):
        pcmm.decrypt_matrix(other, C, other.keygen()[0])


def test_ct_matrix_serialisation(env, rng, tmp_path):
    ctx, sk, pk = env
    M = asym(3, 40, rng)
    C = pcmm.encrypt_matrix(ctx, M, pk)
    C.save(tmp_path / "m.bin")
    back = pcmm.CtMatrix.load(tmp_path / "m.bin", ctx)
    assert back.shape == (3, 40)
    assert bits(pcmm.decrypt_matrix(ctx, back, sk) - M) > 20


def test_gathered_product_is_a_convolution(env, rng):
    """A 1-D convolution (3 taps, zero padding) as im2col over encrypted rows."""
    ctx, sk, pk = env
    L, cin, cout, k = 6, 2, 3, 3
    X = rng.normal(size=(cin * L, 50))  # rows (ci, position)
    W = rng.normal(size=(cout, cin, k))
    C = pcmm.encrypt_matrix(ctx, X, pk)
    index = np.full((cin * k, L), -1)
    for p in range(L):
        for ci in range(cin):
            for t in range(k):
                src = p + t - 1
                if 0 <= src < L:
                    index[ci * k + t, p] = ci * L + src
    Y = pcmm.pcmm_gather(W.reshape(cout, cin * k), C, index, weight_bits=24)
    want = np.zeros((cout * L, 50))
    for co in range(cout):
        for p in range(L):
            for ci in range(cin):
                for t in range(k):
                    src = p + t - 1
                    if 0 <= src < L:
                        want[co * L + p] += W[co, ci, t] * X[ci * L + src]
    assert bits(pcmm.decrypt_matrix(ctx, Y, sk) - want) > 14


def test_epilogue_per_part_is_bit_identical_to_the_whole_ciphertext_path(env, rng):
    """x K, rescale and a slot-encoded bias act on each polynomial alone (the bias on c0): the Ray runtime's
    part split (pcmm_epilogue_part on limb-major parts) gives the native PCMM's exact bits."""
    ctx, sk, pk = env
    C = pcmm.encrypt_matrix(ctx, asym(6, ctx.slots, rng), pk)
    U, b = rng.normal(size=(4, 6)), rng.normal(size=4)
    want = pcmm.pcmm(U, C, weight_bits=14, bias=b)    # native: GEMM, x K, rescale_many, add_const
    Uq, delta = pcmm.quantize(U, 14)
    level, scale = C.level, C.cts[0].scale
    K = max(1, round(ctx.modulus(level) / delta))
    for part in (0, 1):
        Y = np.empty((level + 1, 4, ctx.N), dtype=np.uint64)
        for k in range(level + 1):
            X = np.stack([ct._obj.poly(part)[k] for ct in C.cts])
            _core.ModGemmPlan(Uq, 14).apply(X, ctx.modulus(k), out=Y[k])
        Z = _core.pcmm_epilogue_part(ctx._e, Y, level, K, part, scale * float(delta * K), list(b) if part == 0 else [])
        assert Z.shape == (level, 4, ctx.N)
        for r in range(4):
            assert np.array_equal(Z[:, r], want.cts[r]._obj.poly(part)), (part, r)
    out = np.empty((2, level, 4, ctx.N), dtype=np.uint64)
    for part in (0, 1):
        _core.export_part([ct._obj for ct in want.cts], part, out[part])
        assert all(np.array_equal(out[part][:, r], want.cts[r]._obj.poly(part)) for r in range(4))


def test_product_over_row_views_is_the_native_pcmm(env, rng):
    """pcmm_rlwe_rows (the Ray runtime's in-place PCMM) on (limbs, N) views of each part: the same bits as
    pcmm_rlwe on the ciphertexts, with zero rows (padding) and strided limb-major views; bad rows are refused."""
    ctx, sk, pk = env
    C = pcmm.encrypt_matrix(ctx, asym(5, ctx.slots, rng), pk)
    U, b = rng.normal(size=(3, 6)), rng.normal(size=3)
    Uq, delta = pcmm.quantize(U, 16)
    level = C.level
    K = max(1, round(ctx.modulus(level) / delta))
    plan = _core.ModGemmPlan(Uq, 16)
    objs = [ct._obj for ct in C.cts] + [None]  # row 5: a zero row
    want = _core.pcmm_rlwe(ctx._e, plan, objs, 1, K, float(delta * K), True, list(b))
    o = objs[0]
    meta = (o.level, o.scale, o.slots, o.encoding, o.is_complex, o.key_id)
    views = [[None if x is None else x.poly_view(p) for x in objs] for p in (0, 1)]
    block = [np.stack([x.poly(p) for x in objs[:5]], axis=1) for p in (0, 1)]  # (limbs, rows, N): strided rows
    strided = [[block[p][:, r] for r in range(5)] + [None] for p in (0, 1)]
    for p0, p1 in (views, strided):
        got = _core.pcmm_rlwe_rows(ctx._e, plan, p0, p1, 1, K, float(delta * K), True, list(b), *meta)
        assert len(got) == len(want) and all(
            g.level == w.level and g.scale == w.scale and g.key_id == w.key_id and all(
                np.array_equal(g.poly(p), w.poly(p)) for p in (0, 1)) for g, w in zip(got, want))
    args = (1, K, float(delta * K), True, [], *meta)
    with pytest.raises(ShapeError, match="one part only"):
        _core.pcmm_rlwe_rows(ctx._e, plan, views[0], [None] + views[1][1:], *args)
    with pytest.raises(ShapeError, match="differ in length"):
        _core.pcmm_rlwe_rows(ctx._e, plan, views[0], views[1][:5], *args)
    with pytest.raises(ShapeError, match="columns"):
        _core.pcmm_rlwe_rows(ctx._e, plan, views[0][:5], views[1][:5], *args)
    with pytest.raises(ShapeError, match=r"must be \(%d, %d\)" % (level + 1, ctx.N)):
        _core.pcmm_rlwe_rows(ctx._e, plan, [v if v is None else v[:-1] for v in views[0]], views[1], *args)
    with pytest.raises(ShapeError, match="uint64"):
        _core.pcmm_rlwe_rows(ctx._e, plan, [v if v is None else v.astype(np.int64) for v in views[0]], views[1], *args)
    with pytest.raises(ShapeError, match="padding"):
        _core.pcmm_rlwe_rows(ctx._e, plan, [None] * 6, [None] * 6, *args)
    bad = [None if v is None else v.copy() for v in views[1]]
    bad[2][0, 7] = ctx.modulus(0)  # a residue >= q: corrupted data is refused, not multiplied
    with pytest.raises(ValueError, match="residue"):
        _core.pcmm_rlwe_rows(ctx._e, plan, views[0], bad, *args)


def test_epilogue_and_export_reject_bad_arrays(env, rng):
    ctx, sk, pk = env
    L, N = ctx.max_level + 1, ctx.N
    Y = np.zeros((L, 3, N), dtype=np.uint64)
    with pytest.raises(ValueError, match="limbs"):
        _core.pcmm_epilogue_part(ctx._e, Y[:2], L - 1, 1, 0, 2.0 ** 40)
    with pytest.raises(ValueError, match="shape"):
        _core.pcmm_epilogue_part(ctx._e, np.zeros((L, 3, N // 2), dtype=np.uint64), L - 1, 1, 0, 2.0 ** 40)
    with pytest.raises(ValueError, match="C-contiguous"):
        _core.pcmm_epilogue_part(ctx._e, np.zeros((L, 6, N), dtype=np.uint64)[:, ::2], L - 1, 1, 0, 2.0 ** 40)
    with pytest.raises(ShapeError, match="one value per polynomial"):
        _core.pcmm_epilogue_part(ctx._e, Y, L - 1, 1, 0, 2.0 ** 40, [1.0])
    with pytest.raises(EncodingError, match="NaN"):
        _core.pcmm_epilogue_part(ctx._e, Y, L - 1, 1, 0, 2.0 ** 40, [1.0, float("nan"), 0.0])
    with pytest.raises(ShapeError, match="part"):
        _core.pcmm_epilogue_part(ctx._e, Y, L - 1, 1, 2, 2.0 ** 40)
    ct = ctx.encrypt(np.ones(ctx.slots), pk)
    out = np.zeros((ct.level + 1, 1, N), dtype=np.uint64)
    with pytest.raises(ValueError, match="part"):
        _core.export_part([ct._obj], 2, out)
    with pytest.raises(ValueError, match="level"):
        _core.export_part([ct._obj], 0, out[:1])
    with pytest.raises(ValueError, match="holds"):
        _core.export_part([ct._obj, ct._obj], 0, out)


def test_block_import_round_trip_and_corruption(env, rng):
    """cts_from_parts (Ray blocks -> native ciphertexts, read in place): the exact ciphertexts back from
    export_part, also from a sub-range view; a residue >= q or a wrong shape is a SerializationError."""
    from hemlp.errors import SerializationError

    ctx, sk, pk = env
    cts = [ctx.encrypt(rng.uniform(-1, 1, ctx.slots) + i, pk) for i in range(6)]  # 3 rows x 2 chunks
    L, N = cts[0].level + 1, ctx.N
    parts = np.empty((2, L, 3, 2, N), dtype=np.uint64)
    for p in (0, 1):
        _core.export_part([c._obj for c in cts], p, parts[p].reshape(L, 6, N))
    m = cts[0]._obj
    meta = (m.level, m.scale, m.slots, m.encoding, m.is_complex, m.key_id)
    back = _core.cts_from_parts(ctx._e, parts[0], parts[1], *meta)
    assert [b.poly(0).tobytes() + b.poly(1).tobytes() for b in back] == [
        c._obj.poly(0).tobytes() + c._obj.poly(1).tobytes() for c in cts]
    sub = _core.cts_from_parts(ctx._e, parts[0][:, 1:3, 1:2], parts[1][:, 1:3, 1:2], *meta)  # cts 3 and 5
    assert [s.poly(1).tobytes() for s in sub] == [cts[3]._obj.poly(1).tobytes(), cts[5]._obj.poly(1).tobytes()]
    bad = parts.copy()
    bad[1, 0, 2, 1, 7] = ctx.modulus(0)
    with pytest.raises(SerializationError, match="corrupted"):
        _core.cts_from_parts(ctx._e, bad[0], bad[1], *meta)
    with pytest.raises(SerializationError, match="same shape"):
        _core.cts_from_parts(ctx._e, parts[0], parts[1][:, :2], *meta)
    with pytest.raises(SerializationError, match="level"):
        _core.cts_from_parts(ctx._e, parts[0], parts[1], ctx.max_level + 1, *meta[1:])


def test_level_argument_drops_rows_first(env, rng):
    """pcmm(level=l) == pcmm of the rows dropped to l: bit-identical, one prime per level fewer in the output; the
    unrescaled product at level 0 decrypts to U @ M at scale in.scale * Delta_U."""
    ctx, sk, pk = env
    M = asym(6, ctx.slots, rng)
    C = pcmm.encrypt_matrix(ctx, M, pk)              # the top level (3 for test-N10)
    U = rng.normal(0, 0.4, size=(4, 6))
    bias = np.array([0.5, -0.25, 0.125, 1.0])
    Y = pcmm.pcmm(U, C, weight_bits=14, bias=bias, level=1)
    dropped = pcmm.drop_matrix(C, 1)
    assert dropped.level == 1 and C.level == ctx.max_level
    Z = pcmm.pcmm(U, dropped, weight_bits=14, bias=bias)
    assert Y.level == 0 and all(a.to_bytes() == b.to_bytes() for a, b in zip(Y.cts, Z.cts))
    want = U @ M + bias[:, None]
    assert bits(pcmm.decrypt_matrix(ctx, Y, sk) - want) > 11     # 14-bit weights: measured 13.9 bits
    # q_0 = 2^50 at scale 2^40: 6-bit weights (Delta_U = 2^5) keep |y| * scale under q_0 / 2
    Y0 = pcmm.pcmm(U, C, weight_bits=6, rescale=False, level=0)
    Uq, delta = pcmm.quantize(U, 6)
    assert Y0.level == 0 and Y0.scale == pytest.approx(C.scale * delta)
    assert bits(pcmm.decrypt_matrix(ctx, Y0, sk) - Uq @ M / delta) > 20    # quantised weights: only CKKS noise (26.6)
    with pytest.raises(LevelError, match="a PCMM needs one level"):
        pcmm.pcmm(U, C, level=0)                     # rescaling at level 0
    with pytest.raises(LevelError, match="levels only go down"):
        pcmm.pcmm(U, dropped, level=2)
    with pytest.raises(TypeError, match="level must be an integer"):
        pcmm.pcmm(U, C, level=1.0)
