"""Rectangular σ/τ/ε/ω ciphertext × ciphertext matmul (docs/design/pcmm-and-planning.md §5.3, §7.1 item 12;
FAME eqs. 1–16)."""
import numpy as np
import pytest

from hemlp.he import lintrans as lt
from hemlp.he.ccmm import rectangular as rc
from hemlp.errors import ShapeError
from tests.conftest import make_ctx

# FAME's four shape types: I n = min, II l = min, III m = min, IV square; plus an odd shape.
TYPES = {"I": (8, 8, 4), "II": (8, 4, 8), "III": (4, 8, 8), "IV": (8, 8, 8), "odd": (5, 3, 7)}
FULL = (8, 8, 8)       # also run on all 2048 slots: nothing wraps, FAME eqs. 12–13 hold
PLAIN = (8, 8, 8)      # also run without BSGS
SCAN_SHAPES = [(16, 16, 4), (16, 4, 16), (4, 16, 16), (16, 16, 16), (12, 5, 7), (5, 12, 7), (7, 5, 12),
               (9, 6, 4), (3, 3, 10), (10, 3, 3), (6, 4, 9), (1, 4, 3), (4, 1, 3)]


@pytest.fixture(scope="module")
def env():
    ctx = make_ctx("test-N12-d6")
    sk, pk = ctx.keygen()
    steps = set().union(*(rc.required_rotations(*s) for s in TYPES.values()))
    steps |= set(rc.required_rotations(*FULL, slots=ctx.slots)) | set(rc.required_rotations(*PLAIN, bsgs=False))
    return ctx, sk, pk, ctx.relin_key(sk), ctx.rotation_keys(sk, sorted(steps))


def colmajor(M):
    return M.reshape(-1, order="F")


def defs(A, B, m, l, n, k):
    """FAME eqs. 2–5 literally."""
    sig = np.array([[A[i, (i + j) % l] for j in range(l)] for i in range(m)])
    tau = np.array([[B[(i + j) % l, j] for j in range(n)] for i in range(l)])
    eps = np.array([[sig[i, (j + k) % l] for j in range(n)] for i in range(m)])
    om = np.array([[tau[(i + k) % l, j] for j in range(n)] for i in range(m)])
    return sig, tau, eps, om


@pytest.mark.parametrize("shape", list(TYPES.values()) + SCAN_SHAPES[:6])
def test_transformation_matrices_realise_eqs_2_to_5_and_eq_1(shape, rng):
    m, l, n = shape
    A, B = rng.uniform(-1, 1, (m, l)), rng.uniform(-1, 1, (l, n))
    acc = np.zeros((m, n))
    for k in range(l):
        sig, tau, eps, om = defs(A, B, m, l, n, k)
        np.testing.assert_array_equal(rc.sigma_matrix(m, l) @ colmajor(A), colmajor(sig))
        np.testing.assert_array_equal(rc.tau_matrix(l, n) @ colmajor(B), colmajor(tau))
        np.testing.assert_array_equal(rc.epsilon_matrix(m, l, n, k) @ colmajor(sig), colmajor(eps))
        np.testing.assert_array_equal(rc.omega_matrix(m, l, n, k) @ colmajor(tau), colmajor(om))
        acc += eps * om
    np.testing.assert_allclose(acc, A @ B, atol=1e-12)


def omega_offsets(m, l, n, k):
    """Independent count of U^{ω^k}'s diagonals: offsets [k+r]_l − r + c(l − m), r < m, c < n."""
    return {(k + r) % l - r + c * (l - m) for r in range(m) for c in range(n)}


@pytest.mark.parametrize("shape", SCAN_SHAPES)
def test_scanned_diagonal_counts_vs_fame_eqs_12_to_15(shape):
    m, l, n = shape
    big = 2048  # no wrap-around: the non-cyclic diagonals FAME counts
    assert m * l + m * n <= big
    c, fame = rc.diagonal_counts(m, l, n, slots=big), rc.fame_diagonal_counts(m, l, n)
    assert c["sigma"] == fame["sigma"]                                               # eq. 12
    assert c["tau"] == fame["tau"]                                                   # eq. 13
    assert c["epsilon"] == [(m * (n + k) - 1) // (m * l) + 1 for k in range(l)]      # exact form
    if l > 1 and n % l in (0, 1):                                                    # eq. 14 (l | n or l | n−1)
        assert max(c["epsilon"]) == fame["epsilon"]
    assert c["omega"] == [len(omega_offsets(m, l, n, k)) for k in range(l)]
    if m == l:                                                                       # eq. 15
        assert c["omega"] == [1] + [fame["omega"]] * (l - 1)


def test_wraparound_merges_diagonals():
    # Type I with slots = m·l (FAME eq. 16): ε^k is one rotation by k·m, as eq. 14 (⌊n/l⌋ + 1 = 1) says
    m, l, n = 16, 16, 4
    c = rc.diagonal_counts(m, l, n, slots=m * l)
    assert c["epsilon"] == [1] * l == [rc.fame_diagonal_counts(m, l, n)["epsilon"]] * l
    assert c["sigma"] == l  # offsets m·s, -l < s < l, merge mod m·l
    # a brute-force scan of U^{ω^3} agrees with diagonals()
    U = rc.omega_matrix(12, 5, 7, 3)
    brute = {(j - i) % 128 for i in range(U.shape[0]) for j in range(U.shape[1]) if U[i, j]}
    assert {k % 128 for k in lt.diagonals(U, 128)} == brute


@pytest.mark.parametrize("shape", list(TYPES.values()) + [(16, 4, 16), (5, 12, 7)])
def test_simulated_schedule_gives_the_product(shape, rng):
    """The full Alg. 2 schedule (BSGS plans, shared baby steps) in cleartext, without keys."""
    m, l, n = shape
    A, B = rng.uniform(-1, 1, (m, l)), rng.uniform(-1, 1, (l, n))
    for slots, bsgs in [(rc.default_slots(m, l, n), True), (rc.default_slots(m, l, n), False), (2048, True)]:
        t = rc.Transforms(m, l, n, slots, bsgs)
        a, b = np.zeros(slots), np.zeros(slots)
        a[:m * l], b[:l * n] = colmajor(A), colmajor(B)
        a0, b0 = t.sigma.simulate(a), t.tau.simulate(b)
        out = sum(t.epsilon[k].simulate(a0) * t.omega[k].simulate(b0) for k in range(l))
        np.testing.assert_allclose(out[:m * n].reshape((m, n), order="F"), A @ B, atol=1e-12)
        assert not np.any(np.abs(out[m * n:]) > 1e-12)


@pytest.mark.parametrize("shape", SCAN_SHAPES[:5])
def test_operation_counts_vs_fame_table_1(shape):
    m, l, n = shape
    for slots in (rc.default_slots(m, l, n), 2048):
        d = rc.diagonal_counts(m, l, n, slots)
        phi = d["sigma"] + d["tau"]
        zeta = sum(d["epsilon"]) + sum(d["omega"])  # l·(d_ε + d_ω) with per-k counts
        for bsgs in (True, False):
            c = rc.operation_counts(m, l, n, slots, bsgs)
            assert c["pmult"] == phi + zeta                   # CMult
            assert c["rot"] <= phi + zeta                     # Rot (FAME rotates every diagonal)
            assert c["cmult"] == l and c["depth"] == 3        # Mult, depth
            assert c["add"] == phi + zeta - 2 * l - 2 + l - 1  # FAME's φ+ζ+l minus the zero inits
        assert rc.operation_counts(m, l, n, slots)["rot"] <= rc.operation_counts(m, l, n, slots, False)["rot"]


def _run(env, shape, rng, slots=None, bsgs=True):
    ctx, sk, pk, rlk, keys = env
    m, l, n = shape
    slots = rc.default_slots(m, l, n) if slots is None else slots
    A, B = rng.uniform(-1, 1, (m, l)), rng.uniform(-1, 1, (l, n))
    ca, cb = rc.pack(ctx, A, pk, slots), rc.pack(ctx, B, pk, slots)
    c = lt.OpCounter(ctx)
    out = rc.matmul(c, ca, cb, shape, keys, rlk, bsgs=bsgs)
    assert np.max(np.abs(rc.unpack(ctx, out, sk, m, n) - A @ B)) < 1e-4
    assert out.level == ca.level - rc.DEPTH
    assert out.scale == pytest.approx(ca.scale * cb.scale / ctx.modulus(ca.level - 2), rel=2 ** -40)
    expected = rc.operation_counts(m, l, n, slots, bsgs)
    assert {k: c.counts[k] for k in expected if k != "depth"} == {k: v for k, v in expected.items() if k != "depth"}
    assert c.steps == set(rc.required_rotations(m, l, n, slots, bsgs))


@pytest.mark.parametrize("kind", list(TYPES))
def test_encrypted_matmul_all_shape_types(env, rng, kind):
    _run(env, TYPES[kind], rng)


def test_encrypted_matmul_full_slots_and_without_bsgs(env, rng):
    _run(env, FULL, rng, slots=env[0].slots)
    _run(env, PLAIN, rng, bsgs=False)


def test_shape_errors(env):
    ctx, sk, pk, rlk, keys = env
    with pytest.raises(ShapeError):
        rc.Transforms(64, 64, 4, 2048)
    a, b = rc.pack(ctx, np.ones((4, 4)), pk, 16), rc.pack(ctx, np.ones((4, 4)), pk, 32)
    with pytest.raises(ShapeError):
        rc.matmul(ctx, a, b, (4, 4, 4), keys, rlk)
    with pytest.raises(ShapeError):
        rc.matmul(ctx, a, a, (4, 4, 4), keys, rlk, transforms=rc.Transforms(4, 4, 4, 32))
