"""Halevi–Shoup plaintext × encrypted-vector baseline, block-diagonal I ⊗ U with BSGS
(docs/design/pcmm-and-planning.md §5.1)."""
import math

import numpy as np
import pytest

from hemlp.baselines import halevi_shoup as hs
from hemlp.he import lintrans as lt
from hemlp.errors import ShapeError
from tests.conftest import make_ctx

RECT = (12, 20)   # d_out × d_in: padded to d = 20, 102 vectors per 2048-slot ciphertext
SQUARE = 16


@pytest.fixture(scope="module")
def env():
    ctx = make_ctx("test-N12")
    sk, pk = ctx.keygen()
    steps = set(hs.rotation_steps(RECT, ctx.slots)) | set(hs.rotation_steps((SQUARE, SQUARE), ctx.slots)) \
        | set(hs.rotation_steps((SQUARE, SQUARE), ctx.slots, bsgs=False))
    return ctx, sk, pk, ctx.rotation_keys(sk, sorted(steps))


def test_block_diagonals_reproduce_kron_identity_u(rng):
    for shape, n in [((5, 5), 20), ((3, 7), 32), ((7, 3), 64), ((16, 16), 256)]:
        U = rng.uniform(-1, 1, shape)
        d = hs.block_size(shape)
        diags = hs.block_diagonals(U, n)
        # random U: offsets -d_out < k < d_in (2d − 1 when square), the padding adds none
        assert set(diags) == set(range(1 - shape[0], shape[1]))
        Up = np.zeros((d, d))
        Up[:shape[0], :shape[1]] = U
        K = np.zeros((n, n))
        K[:(n // d) * d, :(n // d) * d] = np.kron(np.eye(n // d), Up)
        ref = lt.diagonals(K, n)
        assert sorted(diags) == sorted(ref)
        for k in diags:
            np.testing.assert_array_equal(diags[k], ref[k])
    # a triangular U has only the diagonals it needs
    assert set(hs.block_diagonals(np.triu(np.ones((6, 6))), 36)) == set(range(6))
    with pytest.raises(ShapeError):
        hs.block_diagonals(np.ones((9, 9)), 8)


def independent_rotations(d):
    """Best n1 for the 2d − 1 offsets -d < k < d: (n1 − 1) baby + (n2 − 1) giant steps."""
    return min(min(c, 2 * d - 1) - 1 + (d - 1) // c - (1 - d) // c for c in range(1, 2 * d))


def test_rotation_count_is_about_two_sqrt_two_d():
    for d in (2, 3, 5, 8, 16, 20, 45, 64):
        lt_ = hs.transform(np.ones((d, d)), 2048)
        assert lt_.rotations == independent_rotations(d)
        assert lt_.rotations <= 2 * math.sqrt(2 * d)
        assert lt_.pmults == 2 * d - 1


def test_rectangular_matmul_over_many_column_packs(env, rng):
    ctx, sk, pk, keys = env
    d_out, d_in = RECT
    d = hs.block_size(RECT)
    U = rng.uniform(-1, 1, RECT)
    d3 = 2 * (ctx.slots // d) + 7  # three ciphertexts, the last one partly filled
    X = rng.uniform(-1, 1, (d_in, d3))
    cts = hs.pack(ctx, X, pk, d)
    assert len(cts) == 3
    c = lt.OpCounter(ctx)
    out = hs.matmul(c, U, cts, keys)
    Y = hs.unpack(ctx, out, sk, d_out, d3, d)
    assert Y.shape == (d_out, d3)
    assert np.max(np.abs(Y - U @ X)) < 1e-5
    per = hs.transform(U, ctx.slots)
    assert c.counts["rot"] == 3 * per.rotations and c.counts["hoisted"] == 3 * len(per.plan.baby)
    assert c.counts["pmult"] == 3 * (d_out + d_in - 1) and c.counts["rescale"] == 3
    assert c.steps <= set(hs.rotation_steps(RECT, ctx.slots))
    assert all(o.level == cts[0].level - 1 and o.scale == cts[0].scale for o in out)
    # the padding rows of every block decrypt to zero (the next layer may rely on it)
    raw = ctx.decrypt(out[0], sk)[: (ctx.slots // d) * d].reshape(-1, d)
    assert np.max(np.abs(raw[:, d_out:])) < 1e-5


def test_square_matvec_bsgs_equals_naive(env, rng):
    ctx, sk, pk, keys = env
    U = rng.uniform(-1, 1, (SQUARE, SQUARE))
    X = rng.uniform(-1, 1, (SQUARE, ctx.slots // SQUARE))
    (ct,) = hs.pack(ctx, X, pk, SQUARE)
    fast, slow = lt.OpCounter(ctx), lt.OpCounter(ctx)
    yb = hs.unpack(ctx, [hs.matvec(fast, U, ct, keys)], sk, SQUARE, X.shape[1], SQUARE)
    yn = hs.unpack(ctx, [hs.matvec(slow, U, ct, keys, bsgs=False)], sk, SQUARE, X.shape[1], SQUARE)
    assert np.max(np.abs(yb - U @ X)) < 1e-5
    assert np.max(np.abs(yb - yn)) < 1e-5
    assert fast.counts["rot"] == independent_rotations(SQUARE) < slow.counts["rot"] == 2 * SQUARE - 2
    assert fast.counts["pmult"] == slow.counts["pmult"] == 2 * SQUARE - 1
