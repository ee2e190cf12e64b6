"""JKLS square ciphertext × ciphertext matmul (docs/design/pcmm-and-planning.md §5.2, seed 002 §4 eqs. 4–14)."""
import math

import numpy as np
import pytest

from hemlp.baselines import jkls
from hemlp.he import lintrans as lt
from hemlp.errors import ShapeError
from tests.conftest import make_ctx

CASES = [8, 16, 6]  # d² = 64, 256 (cyclic, sparse slots: the JKLS setting); 36 in 64 slots (zero-padded)


@pytest.fixture(scope="module")
def env():
    ctx = make_ctx("test-N12-d6")
    sk, pk = ctx.keygen()
    steps = set().union(*(jkls.required_rotations(d) for d in CASES))
    return ctx, sk, pk, ctx.relin_key(sk), ctx.rotation_keys(sk, sorted(steps))


def sigma(A):
    d = len(A)
    return np.array([[A[i, (i + j) % d] for j in range(d)] for i in range(d)])


def tau(A):
    d = len(A)
    return np.array([[A[(i + j) % d, j] for j in range(d)] for i in range(d)])


def test_permutation_matrices_and_identity(rng):
    """U^σ, U^τ (eqs. 5–6) act as σ, τ on ι(A); φ/ψ masks realise φ^k, ψ^k; eq. 4 gives A·B."""
    for d in (2, 3, 5, 8):
        A, B = rng.uniform(-1, 1, (d, d)), rng.uniform(-1, 1, (d, d))
        a, b = A.reshape(-1), B.reshape(-1)
        np.testing.assert_array_equal(jkls.sigma_matrix(d) @ a, sigma(A).reshape(-1))
        np.testing.assert_array_equal(jkls.tau_matrix(d) @ b, tau(B).reshape(-1))
        for n in {jkls.layout_slots(d), 4 * jkls.layout_slots(d)}:  # cyclic or zero-padded
            a0 = np.zeros(n)
            a0[:d * d] = sigma(A).reshape(-1)
            b0 = np.zeros(n)
            b0[:d * d] = tau(B).reshape(-1)
            acc = a0 * b0
            for k in range(1, d):
                v, w = jkls.phi_masks(d, k, n)
                ak = np.roll(a0, -k) * v + np.roll(a0, d - k) * w
                if n == d * d:
                    bk = np.roll(b0, -d * k)
                else:
                    v, w = jkls.psi_masks(d, k, n)
                    bk = np.roll(b0, -d * k) * v + np.roll(b0, d * d - d * k) * w
                np.testing.assert_array_equal(ak[:d * d], np.roll(sigma(A), -k, axis=1).reshape(-1))
                np.testing.assert_array_equal(bk[:d * d], np.roll(tau(B), -k, axis=0).reshape(-1))
                acc = acc + ak * bk
            np.testing.assert_allclose(acc[:d * d].reshape(d, d), A @ B, atol=1e-12)
            assert not np.any(acc[d * d:])


def test_diagonal_counts():
    for d in (2, 4, 8, 16, 32):  # n = d²: σ has 2d − 1 diagonals, τ has d (multiples of d)
        s, t = jkls.transforms(d)
        assert sorted(s.diags) == list(range(1 - d, d))
        assert sorted(k % (d * d) for k in t.diags) == [d * k for k in range(d)]
    for d in (3, 6, 12):  # zero-padded: τ's offsets d·k, -d < k < d, no longer merge mod d²
        s, t = jkls.transforms(d)
        n = jkls.layout_slots(d)
        assert len(s.diags) == 2 * d - 1
        assert sorted(k % n for k in t.diags) == sorted(d * k % n for k in range(1 - d, d))


def test_operation_counts_formula():
    for d in (4, 8, 16, 32):
        c = jkls.operation_counts(d)
        s, t = jkls.transforms(d)
        assert c["rot"] == s.rotations + t.rotations + 3 * (d - 1)
        assert c["rot"] <= 3 * d + 5 * math.sqrt(d)  # JKLS: 3d + 5√d
        assert c["pmult"] == (2 * d - 1) + d + 2 * (d - 1) and c["cmult"] == d and c["depth"] == 3
    with pytest.raises(ShapeError):
        jkls.operation_counts(8, n=32)


@pytest.mark.parametrize("d", CASES)
def test_matmul_matches_numpy_with_exact_counts(env, rng, d):
    ctx, sk, pk, rlk, keys = env
    A, B = rng.uniform(-1, 1, (d, d)), rng.uniform(-1, 1, (d, d))
    ca, cb = jkls.pack(ctx, A, pk), jkls.pack(ctx, B, pk)
    assert ca.slots == jkls.layout_slots(d)
    c = lt.OpCounter(ctx)
    out = jkls.matmul(c, ca, cb, d, keys, rlk)
    assert np.max(np.abs(jkls.unpack(ctx, out, sk, d) - A @ B)) < 1e-4
    assert out.level == ca.level - jkls.DEPTH
    q = ctx.modulus(ca.level - 2)
    assert out.scale == pytest.approx(ca.scale * cb.scale / q, rel=2 ** -40)
    expected = jkls.operation_counts(d)
    assert {k: c.counts[k] for k in expected if k != "depth"} == {k: v for k, v in expected.items() if k != "depth"}
    assert c.steps == set(jkls.required_rotations(d))


def test_shape_errors(env):
    ctx, sk, pk, rlk, keys = env
    with pytest.raises(ShapeError):
        jkls.pack(ctx, np.ones((3, 4)), pk)
    a, b = jkls.pack(ctx, np.ones((4, 4)), pk), jkls.pack(ctx, np.ones((8, 8)), pk)
    with pytest.raises(ShapeError):
        jkls.matmul(ctx, a, b, 4, keys, rlk)
