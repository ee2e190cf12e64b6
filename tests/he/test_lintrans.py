"""Generalised-diagonal linear transforms with BSGS and hoisting (docs/design/pcmm-and-planning.md §5.1,
FAME Alg. 1/3)."""
import math

import numpy as np
import pytest

from hemlp.he import lintrans as lt
from hemlp.errors import MissingKeyError, ShapeError
from tests.conftest import make_ctx

DENSE_N = 64      # dense transform on a sparse-slot ciphertext: 64 diagonals
NAIVE_N = 32      # dense transform evaluated without BSGS (one key per offset)
SPARSE_OFFSETS = [0, 1, 5, -3, 17, -250, 511, 1024, -700, 900]  # on the full 2048 slots


def brute_diagonals(T, n):
    """Reference scan: diag_k[i] = T[i, (i+k) mod n] over the n×n embedding, O(n²)."""
    E = np.zeros((n, n))
    E[:T.shape[0], :T.shape[1]] = T
    out = {}
    for k in range(n):
        v = np.array([E[i, (i + k) % n] for i in range(n)])
        if np.any(v):
            out[lt.signed(k, n)] = v
    return out


def random_banded(rng, n, offsets):
    T = np.zeros((n, n))
    for k in offsets:
        i = np.arange(n)
        T[i, (i + k) % n] = rng.uniform(-1, 1, n)
    return T


@pytest.fixture(scope="module")
def env():
    ctx = make_ctx("test-N12")
    sk, pk = ctx.keygen()
    rng = np.random.default_rng(7)
    dense = lt.LinearTransform(rng.uniform(-1, 1, (DENSE_N, DENSE_N)), DENSE_N)
    naive = lt.LinearTransform(rng.uniform(-1, 1, (NAIVE_N, NAIVE_N)), NAIVE_N, bsgs=False)
    banded = random_banded(rng, ctx.slots, SPARSE_OFFSETS)
    steps = set(dense.steps) | set(naive.steps) | set(lt.rotation_steps(banded, bsgs=True)) \
        | set(lt.rotation_steps(banded, bsgs=False))
    keys = ctx.rotation_keys(sk, sorted(steps))
    return dict(ctx=ctx, sk=sk, pk=pk, keys=keys, dense=dense, naive=naive, banded=banded)


# ---- plaintext structure (no keys)

def test_diagonals_match_brute_force_scan_and_reconstruct(rng):
    for shape, n in [((16, 16), 16), ((12, 20), 32), ((20, 7), 20), ((5, 9), 64)]:
        T = rng.uniform(-1, 1, shape) * (rng.uniform(size=shape) < 0.4)
        d = lt.diagonals(T, n)
        ref = brute_diagonals(T, n)
        assert sorted(d) == sorted(ref)
        for k in d:
            np.testing.assert_array_equal(d[k], ref[k])
        x = np.zeros(n)
        x[:shape[1]] = rng.uniform(-1, 1, shape[1])
        y = sum(v * np.roll(x, -k) for k, v in d.items())
        np.testing.assert_allclose(y[:shape[0]], T @ x[:shape[1]], atol=1e-12)
        np.testing.assert_array_equal(y[shape[0]:], 0)


def test_offsets_are_signed_and_equal_offsets_merge():
    assert [lt.signed(k, 16) for k in (0, 1, 8, 9, 15, -1, 17)] == [0, 1, 8, -7, -1, -1, 1]
    n = 8
    merged = lt.LinearTransform({1: np.ones(n), 9: np.ones(n), -7: np.ones(n), 3: np.zeros(n)}, n)
    assert list(merged.diags) == [1] and np.all(merged.diags[1] == 3)
    with pytest.raises(ShapeError):
        lt.LinearTransform({1: np.ones(n - 1)}, n)
    with pytest.raises(ShapeError):
        lt.diagonals(np.ones((9, 3)), 8)
    with pytest.raises(ValueError):
        lt.LinearTransform({0: np.zeros(n)}, n)


def independent_bsgs_rotations(offsets, n1):
    """n1 − 1 + n2 − 1 counted from scratch: distinct nonzero baby and giant parts."""
    baby = {k % n1 for k in offsets} - {0}
    giant = {k // n1 for k in offsets} - {0}
    return len(baby) + len(giant)


def test_plan_decomposes_every_offset_and_counts_rotations():
    rng = np.random.default_rng(3)
    for _ in range(30):
        n = int(rng.choice([16, 64, 256, 2048]))
        offs = {lt.signed(int(k), n) for k in rng.integers(0, n, int(rng.integers(1, 40)))}
        for n1 in (None, 1, 3, 8):
            p = lt.plan(offs, n, n1=n1)
            got = {p.offset(g, b) for g, bs in p.groups for b in bs}
            assert got == offs and p.diagonals == len(offs)
            assert all(0 <= b < p.n1 for _, bs in p.groups for b in bs)
            assert p.rotations == independent_bsgs_rotations(offs, p.n1)
        best = lt.plan(offs, n)
        brute = min(independent_bsgs_rotations(offs, c) for c in range(1, max(offs) - min(offs) + 2))
        assert best.rotations == brute
        naive = lt.plan(offs, n, bsgs=False)
        assert naive.giant == [] and naive.rotations == len(offs - {0})


def test_dense_bsgs_rotation_count_is_about_two_sqrt_n():
    for n in (16, 64, 256, 1024):
        p = lt.plan(range(n), n)
        # offsets of a dense n×n transform: n1 − 1 hoisted baby steps + n2 − 1 giant steps
        assert p.rotations == len(p.baby) + len(p.giant)
        assert len(p.baby) == p.n1 - 1
        assert p.rotations <= 2 * math.sqrt(n), (n, p.n1, p.rotations)


def test_simulated_bsgs_schedule_equals_matrix_product(rng):
    for n, bsgs, n1 in [(64, True, None), (64, True, 5), (64, False, None), (256, True, None)]:
        T = random_banded(rng, n, rng.integers(-n // 2, n // 2, 12))
        x = rng.uniform(-1, 1, n)
        np.testing.assert_allclose(lt.LinearTransform(T, n, bsgs, n1).simulate(x), T @ x, atol=1e-12)


# ---- encrypted

def test_dense_bsgs_matches_numpy_with_counted_operations(env, rng):
    ctx, sk, pk, L = env["ctx"], env["sk"], env["pk"], env["dense"]
    T = np.zeros((DENSE_N, DENSE_N))
    for k, v in L.diags.items():
        T[np.arange(DENSE_N), (np.arange(DENSE_N) + k) % DENSE_N] = v
    x = rng.uniform(-1, 1, DENSE_N)
    ct = ctx.encrypt(x, pk, slots=DENSE_N)
    c = lt.OpCounter(ctx)
    y = L.apply(c, ct, env["keys"])
    assert np.max(np.abs(ctx.decrypt(y, sk) - T @ x)) < 1e-5
    assert y.level == ct.level - 1 and y.scale == ct.scale
    assert c.counts["rot"] == L.plan.n1 - 1 + len(L.plan.giant) == L.rotations
    assert c.counts["hoisted"] == L.plan.n1 - 1
    assert c.counts["pmult"] == DENSE_N and c.counts["rescale"] == 1 and c.counts["add"] == DENSE_N - 1
    assert c.steps == set(L.steps)


def test_bsgs_equals_naive_diagonal_sum(env, rng):
    ctx, sk, pk, keys = env["ctx"], env["sk"], env["pk"], env["keys"]
    T = env["banded"]
    x = rng.uniform(-1, 1, ctx.slots)
    ct = ctx.encrypt(x, pk)
    fast, slow = lt.OpCounter(ctx), lt.OpCounter(ctx)
    yb = lt.apply(fast, ct, T, keys, bsgs=True)
    yn = lt.apply(slow, ct, T, keys, bsgs=False)
    db, dn = ctx.decrypt(yb, sk), ctx.decrypt(yn, sk)
    assert np.max(np.abs(db - T @ x)) < 1e-5
    assert np.max(np.abs(db - dn)) < 1e-5
    assert slow.counts["rot"] == slow.counts["hoisted"] == len(SPARSE_OFFSETS) - 1
    assert fast.counts["pmult"] == slow.counts["pmult"] == len(SPARSE_OFFSETS)
    assert fast.counts["rot"] == lt.plan(SPARSE_OFFSETS, ctx.slots).rotations


def test_naive_dense_and_rectangular_embedding(env, rng):
    ctx, sk, pk, L = env["ctx"], env["sk"], env["pk"], env["naive"]
    x = rng.uniform(-1, 1, NAIVE_N)
    ct = ctx.encrypt(x, pk, slots=NAIVE_N)
    c = lt.OpCounter(ctx)
    y = ctx.decrypt(L.apply(c, ct, env["keys"]), sk)
    assert np.max(np.abs(y - L.simulate(x))) < 1e-5
    assert c.counts["rot"] == c.counts["hoisted"] == NAIVE_N - 1 and c.counts["pmult"] == NAIVE_N
    # a 12×20 block in the corner of the 32-slot vector: output slots 12.. are zero
    R = rng.uniform(-1, 1, (12, 20))
    x2 = np.zeros(NAIVE_N)
    x2[:20] = rng.uniform(-1, 1, 20)
    y2 = ctx.decrypt(lt.apply(ctx, ctx.encrypt(x2, pk, slots=NAIVE_N), R, env["keys"], bsgs=False), sk)
    assert np.max(np.abs(y2[:12] - R @ x2[:20])) < 1e-5 and np.max(np.abs(y2[12:])) < 1e-5


def test_prepared_plaintexts_are_cached_per_level_and_errors(env, rng):
    ctx, pk, L = env["ctx"], env["pk"], env["dense"]
    ct = ctx.encrypt(rng.uniform(-1, 1, DENSE_N), pk, slots=DENSE_N)
    first = L.encode(ctx, ct.level)
    assert L.encode(ctx, ct.level) is first
    assert all(p.level == ct.level and p.scale == float(ctx.modulus(ct.level)) for p in first.values())
    with pytest.raises(ShapeError):
        L.apply(ctx, ctx.encrypt(np.ones(NAIVE_N), pk, slots=NAIVE_N), env["keys"])
    with pytest.raises(MissingKeyError):
        L.apply(ctx, ct, ctx.rotation_keys(env["sk"], [1]))
    with pytest.raises(ValueError):
        L.apply(ctx, ct, env["keys"], rotated={})
