"""Exactness of the FP64-split modular GEMM (docs/design/pcmm-and-planning.md §2.6, §7.1 item 7).

Every result is compared bit for bit with the __int128 reference (hemlp._core.modgemm_ref) and, on
small cases, with Python big-integer arithmetic, which checks the reference too.
"""
import threading

import numpy as np
import pytest

core = pytest.importorskip("hemlp._core")

MAX_U_BITS = 62


def ntt_prime(bits: int, log_2n: int = 17) -> int:
    """Largest prime q < 2^bits with q = 1 mod 2^log_2n (an NTT prime for N = 2^(log_2n - 1))."""
    from hemlp._core import ring

    step = 1 << log_2n
    q = ((1 << bits) - 1) // step * step + 1
    while not ring.is_prime(q):
        q -= step
    return q


PRIMES = {b: ntt_prime(b) for b in (30, 40, 50, 60, 61)}


def bigint_modmul(U, X, q):
    """Ground truth with Python integers (object arrays: exact, arbitrary precision)."""
    C = (U.astype(object) @ X.astype(object)) % q
    return C.astype(np.uint64)


def rand_U(rng, d1, d2, bU):
    B = 1 << bU
    return rng.integers(-B, B, size=(d1, d2), endpoint=True, dtype=np.int64)


def rand_X(rng, d2, n, q):
    return rng.integers(0, q, size=(d2, n), dtype=np.uint64)


def check_exact(U, X, q, bU=None, **kw):
    C = core.modgemm(U, X, q, bU, **kw)
    R = core.modgemm_ref(U, X, q)
    assert C.dtype == np.uint64 and C.shape == (U.shape[0], X.shape[1])
    bad = np.argwhere(C != R)
    assert bad.size == 0, f"{len(bad)} wrong entries, first at {bad[0].tolist()}: {C[tuple(bad[0])]} != {R[tuple(bad[0])]}"
    return C


def test_primes_are_ntt_primes():
    from hemlp._core import ring  # checked against a big-integer Miller-Rabin in tests/fhe/test_ring.py

    for bits, q in PRIMES.items():
        assert q.bit_length() == bits and q % (1 << 17) == 1 and ring.is_prime(q)
    assert not ring.is_prime(PRIMES[60] + 2 * (1 << 17) * 3 * 5 * 7 * 11)  # composite: the test can fail


@pytest.mark.parametrize("bits", sorted(PRIMES))
@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 5, 1), (17, 64, 33), (64, 17, 200), (5, 300, 7), (40, 129, 1)])
def test_random_matches_reference(bits, shape, rng):
    q = PRIMES[bits]
    d1, d2, n = shape
    for bU in (0, 8, 18, 33, MAX_U_BITS):
        U, X = rand_U(rng, d1, d2, bU), rand_X(rng, d2, n, q)
        check_exact(U, X, q, bU)


def _adversarial_X(q, w, d2, n):
    """Residues at the edges of the centred range and ones whose balanced digits are all -2^(w-1)."""
    half = (q - 1) // 2
    vals = [q - 1, 0, 1, half, half + 1, q - 2]
    h, x, shift = 1 << (w - 1), 0, 0
    while True:  # x' = -2^(w-1) (1 + 2^w + 2^2w + ...) as long as it stays a centred residue
        nxt = x - (h << shift)
        if -nxt > half:
            break
        x, shift = nxt, shift + w
    vals.append(x % q)
    vals.append((-x) % q)
    flat = np.array([vals[i % len(vals)] for i in range(d2 * n)], dtype=np.uint64)
    return flat.reshape(d2, n)


@pytest.mark.parametrize("bits", sorted(PRIMES))
@pytest.mark.parametrize("bU", [0, 18, 40, MAX_U_BITS])
def test_adversarial_matches_reference(bits, bU):
    q = PRIMES[bits]
    d1, d2, n = 6, 96, 12
    B = 1 << bU
    i, k = np.indices((d1, d2))
    patterns = {
        "all+": np.full((d1, d2), B, dtype=np.int64),
        "all-": np.full((d1, d2), -B, dtype=np.int64),
        "checker": np.where((i + k) % 2 == 0, B, -B).astype(np.int64),
        "rowsign": np.where(i % 2 == 0, B, -B).astype(np.int64),
        "mixed": np.where((i * 7 + k * 3) % 5 < 2, -B, np.where(k % 3 == 0, B - 1, B)).astype(np.int64),
    }
    w = core.modgemm_limb_bits(d2, bU, q)
    X_all = np.full((d2, n), q - 1, dtype=np.uint64)
    X_adv = _adversarial_X(q, w, d2, n)
    for name, U in patterns.items():
        for X in (X_all, X_adv):
            C = check_exact(U, X, q, bU)
            if name == "all+" and X is X_all:  # sum_k 2^bU * (q-1) = -d2 * 2^bU mod q
                assert int(C[0, 0]) == (-d2 * B) % q, name


def _max_digit_X(q, w, shape):
    """Centred residue whose balanced digits are all 2^(w-1) - 1 (odd, maximal, one sign) as far as
    the top digit allows: DGEMM sums then reach kb * 2^bU * 2^(w-1), where a too-large K-block loses bits."""
    half = (q - 1) // 2
    x, shift = 0, 0
    while shift < q.bit_length():
        nxt = x + (((1 << (w - 1)) - 1) << shift)
        if nxt > half:
            nxt = x + ((half - x) >> shift << shift)  # largest top digit that still fits
            x = nxt
            break
        x, shift = nxt, shift + w
    return np.full(shape, x, dtype=np.uint64), np.full(shape, q - x, dtype=np.uint64)


@pytest.mark.parametrize("bU,w", [(30, 20), (18, 30), (40, 10), (0, 47), (45, 3)])
def test_exactness_edge_of_the_bound(bU, w):
    """d2 at and just past the largest exact K-block, with same-sign odd maximal terms.

    With kb one bit larger than the bound allows, these sums exceed 2^53 with odd low bits and FP64
    rounds them: the comparison with the reference fails. This pins the bound, not just the code path.
    """
    q = PRIMES[60]
    kbmax = 2 ** (54 - bU - w) - 1  # kb * 2^bU * 2^(w-1) < 2^53
    assert core.modgemm_config(10**6, bU, q, w=w, u=bU + 1)["kb"] == kbmax
    B = 1 << bU
    for d2 in (kbmax, kbmax + 1, 2 * kbmax + 1, 4 * kbmax + 3):
        if d2 > 70000:
            continue
        Xp, Xn = _max_digit_X(q, w, (d2, 2))
        # Residues near q: tiny once centred, but their uncentred top digit would be ~2^w (twice the
        # bound); consecutive top digits so that some are odd.
        top = w * (-(-q.bit_length() // w) - 1)
        Xq = np.array([[q - 1 - (j << top) for j in range(4)]] * d2, dtype=np.uint64)
        X = np.concatenate([Xp, Xn, Xq], axis=1)
        for u_val in (B, B - 1 if B > 1 else 1, -B):
            U = np.full((2, d2), u_val, dtype=np.int64)
            U[1, ::3] = -u_val
            C = check_exact(U, X, q, bU, w=w, u=bU + 1)
            assert int(C[0, 0]) == (d2 * u_val * int(Xp[0, 0])) % q


@pytest.mark.parametrize("bits", sorted(PRIMES))
def test_small_cases_match_python_bigints(bits, rng):
    q = PRIMES[bits]
    for trial in range(12):
        d1, d2, n = (int(v) for v in rng.integers(1, 9, size=3))
        bU = int(rng.integers(0, MAX_U_BITS + 1))
        U = rand_U(rng, d1, d2, bU)
        X = rand_X(rng, d2, n, q)
        if trial % 3 == 0:  # extremes
            U[:] = (1 << bU) * np.where(rng.integers(0, 2, size=U.shape) == 0, 1, -1)
            X[:] = q - 1
        truth = bigint_modmul(U, X, q)
        np.testing.assert_array_equal(core.modgemm(U, X, q, bU), truth)
        np.testing.assert_array_equal(core.modgemm_ref(U, X, q), truth)


def test_reference_handles_full_int64_range(rng):
    q = PRIMES[61]
    U = rng.integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, size=(3, 70), dtype=np.int64, endpoint=True)
    U[0, 0] = np.iinfo(np.int64).min
    X = rand_X(rng, 70, 5, q)
    np.testing.assert_array_equal(core.modgemm_ref(U, X, q), bigint_modmul(U, X, q))


@pytest.mark.parametrize("d2", [1, 2, 255, 1024, 4097, 8192])
def test_long_contraction_and_k_blocking(d2, rng):
    q = PRIMES[61]
    bU = 40
    cfg = core.modgemm_config(d2, bU, q)
    U, X = rand_U(rng, 3, d2, bU), rand_X(rng, d2, 9, q)
    check_exact(U, X, q, bU)
    # Force K-blocks (with a remainder) whatever the automatic choice was.
    kb = max(1, d2 // 3 + 1)
    forced = core.modgemm_config(d2, bU, q, w=3, u=2, kb=kb)
    assert forced["nblk"] == -(-d2 // forced["kb"])
    check_exact(U, X, q, bU, w=3, u=2, kb=kb)
    assert cfg["kb"] * 2 ** (cfg["u"] - 1) * 2 ** (cfg["w"] - 1) < 2**53 and cfg["nblk"] == -(-d2 // cfg["kb"])
    # Adversarial: every term at its maximum, one sign.
    Ua = np.full((2, d2), 1 << bU, dtype=np.int64)
    Ua[1, ::2] *= -1
    Xa = np.full((d2, 4), q - 1, dtype=np.uint64)
    Xa[:, 1] = (q - 1) // 2
    Xa[:, 2] = (q + 1) // 2
    check_exact(Ua, Xa, q, bU)


def test_default_choice_uses_k_blocks_when_needed(rng):
    # Large bU (or T = 1 for a 30-bit prime) with long K: the cheapest exact plan blocks K, so the
    # automatic choice goes through the int64 accumulation path; it must satisfy the bound and be exact.
    blocked = 0
    for d2, bU, q in ((8192, 50, PRIMES[60]), (8192, 44, PRIMES[60]), (3000, 52, PRIMES[61]),
                      (4096, 18, PRIMES[30])):
        cfg = core.modgemm_config(d2, bU, q)
        assert cfg["kb"] * 2 ** (cfg["u"] - 1) * 2 ** (cfg["w"] - 1) < 2**53
        blocked += cfg["nblk"] > 1
        U, X = rand_U(rng, 2, d2, bU), rand_X(rng, d2, 5, q)
        check_exact(U, X, q, bU)
    assert blocked >= 2


def test_many_k_blocks_fold_int64_accumulator(rng):
    # bU = 33, w = 20: 2^33 * 2^19 = 2^52, so kb = 1 and 4100 DGEMMs whose one-sign sums reach
    # 4100 * 2^52 > 2^63: the lazy int64 accumulator must be folded mod q (every 511 blocks).
    q = PRIMES[60]
    bU, w, d2 = 33, 20, 4100
    assert core.modgemm_config(d2, bU, q, w=w, u=bU + 1)["nblk"] == d2
    Xp, Xn = _max_digit_X(q, w, (d2, 2))
    X = np.concatenate([Xp, Xn, rand_X(rng, d2, 1, q)], axis=1)
    U = np.full((3, d2), (1 << bU) - 1, dtype=np.int64)
    U[1] = -(1 << bU)
    U[2] = rand_U(rng, 1, d2, bU)
    check_exact(U, X, q, bU, w=w, u=bU + 1)


def test_multiple_column_panels(rng):
    # 64 MiB of scratch per panel: d2 = 8192 with T = 3 digits is ~200 KB per column, so n = 1000
    # spans several panels (including a partial one).
    q = PRIMES[60]
    U, X = rand_U(rng, 4, 8192, 18), rand_X(rng, 8192, 1000, q)
    check_exact(U, X, q, 18)


def test_fuzz_split_parameters(rng):
    """Random w / u / kb: either rejected as inexact (and it really violates the bound) or exact."""
    accepted = rejected = 0
    for _ in range(160):
        bits = int(rng.integers(2, 62))
        q = int(rng.integers(1 << (bits - 1), 1 << bits)) | 1
        if q < 3 or q >= 1 << 61:
            continue
        bU = int(rng.integers(0, MAX_U_BITS + 1))
        d1, d2, n = int(rng.integers(1, 6)), int(rng.integers(1, 300)), int(rng.integers(1, 12))
        w = int(rng.integers(2, 54))
        u = int(rng.integers(2, 64))
        kb = int(rng.integers(1, 2 * d2 + 2)) if rng.integers(0, 2) else None
        qbits = q.bit_length()
        try:
            cfg = core.modgemm_config(d2, bU, q, w=w, u=u, kb=kb)
        except ValueError:
            rejected += 1
            we, ue = min(w, qbits), min(u, bU + 1)
            need = 1 if kb is None else min(kb, d2)
            assert need * 2 ** (ue - 1) * 2 ** (we - 1) >= 2**53, (q, bU, w, u, kb)
            with pytest.raises(ValueError):
                core.modgemm(rand_U(rng, d1, d2, bU), rand_X(rng, d2, n, q), q, bU, w=w, u=u, kb=kb)
            continue
        accepted += 1
        # Independent check of the exactness invariant and of the derived digit counts.
        assert cfg["kb"] * 2 ** (cfg["u"] - 1) * 2 ** (cfg["w"] - 1) < 2**53
        assert cfg["T"] == -(-qbits // cfg["w"]) and cfg["TU"] == -(-(bU + 1) // cfg["u"])
        assert cfg["nblk"] == -(-d2 // cfg["kb"]) and cfg["kb"] <= d2
        U = rand_U(rng, d1, d2, bU)
        X = rand_X(rng, d2, n, q) if rng.integers(0, 2) else np.full((d2, n), q - 1, dtype=np.uint64)
        check_exact(U, X, q, bU, w=w, u=u, kb=kb)
    assert accepted > 40 and rejected > 5


def test_small_moduli_use_fewer_digits():
    q31 = ntt_prime(31)
    c = core.modgemm_config(4096, 8, q31)
    assert c["T"] == 1 and c["TU"] == 1 and c["nblk"] == 1  # one DGEMM per limb
    c = core.modgemm_config(4096, 18, q31)
    assert c["T"] * c["TU"] <= 2
    c60 = core.modgemm_config(4096, 18, PRIMES[60])
    assert (c60["T"], c60["TU"]) == (3, 1) and c60["w"] == core.modgemm_limb_bits(4096, 18, PRIMES[60]) == 20
    assert core.modgemm_config(4096, 18, PRIMES[40])["T"] == 2
    for d2 in (1, 64, 4096, 65536):
        for bU in (0, 18, 40, 62):
            for q in PRIMES.values():
                cfg = core.modgemm_config(d2, bU, q)
                assert cfg["kb"] * 2 ** (cfg["u"] - 1) * 2 ** (cfg["w"] - 1) < 2**53


def test_plan_reuse_across_primes_and_threads(rng):
    U = rand_U(rng, 24, 200, 18)
    plan = core.ModGemmPlan(U)
    assert plan.shape == (24, 200) and plan.bU == 18
    Xs = {b: rand_X(rng, 200, 300, q) for b, q in PRIMES.items()}
    want = {b: core.modgemm_ref(U, Xs[b], PRIMES[b]) for b in PRIMES}
    for b, q in PRIMES.items():
        np.testing.assert_array_equal(plan.apply(Xs[b], q), want[b])
    errors = []

    def worker(b):
        try:
            for _ in range(4):
                np.testing.assert_array_equal(plan.apply(Xs[b], PRIMES[b]), want[b])
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(b,)) for b in PRIMES]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_layouts_and_degenerate_shapes(rng):
    q = PRIMES[50]
    U = rand_U(rng, 5, 40, 10)
    Xbig = rand_X(rng, 40, 30, q)
    for X in (Xbig[:, ::3], np.asfortranarray(Xbig), Xbig[:, :1]):
        np.testing.assert_array_equal(core.modgemm(U, X, q), bigint_modmul(U, X, q))
    out = core.modgemm(U, np.zeros((40, 0), dtype=np.uint64), q)
    assert out.shape == (5, 0) and out.dtype == np.uint64
    np.testing.assert_array_equal(core.modgemm(np.asfortranarray(U), Xbig, q), bigint_modmul(U, Xbig, q))


def test_bU_inferred_from_U(rng):
    q = PRIMES[60]
    U = rand_U(rng, 4, 10, 18)
    U[0, 0] = 1 << 18
    X = rand_X(rng, 10, 3, q)
    assert core.ModGemmPlan(U).bU == 18
    U[0, 0] = (1 << 18) + 1
    assert core.ModGemmPlan(U).bU == 19
    assert core.ModGemmPlan(np.zeros((2, 2), dtype=np.int64)).bU == 0
    np.testing.assert_array_equal(core.modgemm(U, X, q), bigint_modmul(U, X, q))


def test_bad_inputs_raise_value_error(rng):
    q = PRIMES[60]
    U = rand_U(rng, 4, 6, 10)
    X = rand_X(rng, 6, 5, q)
    cases = [
        ("exceeds 2\\^bU", lambda: core.modgemm(np.full((4, 6), 1025, dtype=np.int64), X, q, 10)),
        ("exceeds 2\\^bU", lambda: core.ModGemmPlan(np.full((2, 2), -5, dtype=np.int64), 2)),
        ("residue", lambda: core.modgemm(U, np.where(X == X[0, 0], np.uint64(q), X), q)),
        ("residue", lambda: core.modgemm_ref(U, np.full((6, 5), q, dtype=np.uint64), q)),
        ("rows but U has", lambda: core.modgemm(U, rand_X(rng, 7, 5, q), q)),
        ("rows but U has", lambda: core.ModGemmPlan(U).apply(rand_X(rng, 5, 5, q), q)),
        ("2-D", lambda: core.modgemm(U, X[:, 0].copy(), q)),
        ("2-D", lambda: core.modgemm(U[None], X, q)),
        ("non-empty", lambda: core.modgemm(np.zeros((0, 6), dtype=np.int64), X, q)),
        ("dtype int64", lambda: core.modgemm(U.astype(np.float64), X, q)),
        ("dtype uint64", lambda: core.modgemm(U, X.astype(np.int64), q)),
        ("numpy.ndarray", lambda: core.modgemm(U.tolist(), X, q)),
        ("odd", lambda: core.modgemm(U, X, q + 1)),
        ("2\\^61", lambda: core.modgemm(U, X, (1 << 61) + 1)),
        ("2\\^61", lambda: core.modgemm(U, X, 1 << 70)),
        ("2\\^61", lambda: core.modgemm(U, X, -7)),
        ("2\\^61", lambda: core.modgemm(U, X, 1)),
        ("integer", lambda: core.modgemm(U, X, float(q))),
        ("bU", lambda: core.modgemm(U, X, q, 63)),
        ("bU", lambda: core.modgemm(U, X, q, -1)),
        ("2\\^53", lambda: core.modgemm(U, X, q, 10, w=44)),
        ("2\\^53", lambda: core.modgemm(U, X, q, 10, w=20, kb=1 << 30)),
        ("kb", lambda: core.modgemm(U, X, q, 10, kb=0)),
        ("2\\^61", lambda: core.modgemm_limb_bits(4096, 18, 1 << 62)),
        ("d2", lambda: core.modgemm_limb_bits(0, 18, q)),
    ]
    for pattern, fn in cases:
        with pytest.raises(ValueError, match=pattern):
            fn()


def test_row_strided_views_are_read_in_place_and_out_is_written(rng):
    """The Ray runtime's block parts: X as a row-strided view (one part, one limb of a (rows, chunks, 2, N) array,
    reversed rows, read-only store memory) and the output written into a row-strided view of a larger array."""
    q = PRIMES[50]
    U = rand_U(rng, 5, 7, 12)
    A = rng.integers(0, q, size=(7, 3, 2, 40), dtype=np.uint64)
    plan = core.ModGemmPlan(U, 12)
    views = [A[:, 1, 0], A[::-1, 2, 1], A[:, 0:2, 1].reshape(7, 2, 40)[:, 1]]
    ro = A.copy()
    ro.setflags(write=False)
    views.append(ro[:, 2, 0])
    for X in views:
        want = bigint_modmul(U, X, q)
        np.testing.assert_array_equal(plan.apply(X, q), want)
        np.testing.assert_array_equal(core.modgemm(U, X, q), want)
        np.testing.assert_array_equal(core.modgemm_ref(U, X, q), want)
        O = np.full((2, 5, 3, 40), 7, dtype=np.uint64)
        assert plan.apply(X, q, out=O[1, :, 2]) is not None
        np.testing.assert_array_equal(O[1, :, 2], want)
        assert (O[0] == 7).all() and (O[1, :, :2] == 7).all()  # nothing else touched


def test_bad_out_arrays_raise_value_error(rng):
    q = PRIMES[40]
    U = rand_U(rng, 5, 7, 12)
    X = rand_X(rng, 7, 40, q)
    plan = core.ModGemmPlan(U, 12)
    bad = {"shape": np.zeros((5, 41), np.uint64), "dtype": np.zeros((5, 40), np.int64),
           "contiguous": np.zeros((5, 80), np.uint64)[:, ::2]}
    ro = np.zeros((5, 40), np.uint64)
    ro.setflags(write=False)
    bad["writable"] = ro
    for what, out in bad.items():
        with pytest.raises(ValueError, match=what.strip()):
            plan.apply(X, q, out=out)
    buf = np.zeros((7, 40), np.uint64)
    buf[:] = X
    with pytest.raises(ValueError, match="overlap"):
        plan.apply(buf, q, out=buf[1:6])


def test_row_blocks_as_a_list_are_one_gemm(rng):
    """X given as a list of row blocks (the Ray runtime's input blocks, views into different arrays, some
    row-strided, single rows repeated as in an im2col gather) equals the GEMM on the stacked matrix, bit for bit,
    with K-blocking across block boundaries (d2 larger than one exact K-block)."""
    q = PRIMES[60]
    U = rand_U(rng, 6, 300, 20)
    X = rand_X(rng, 300, 48, q)
    plan = core.ModGemmPlan(U, 20)
    want = bigint_modmul(U, X, q)
    A = np.zeros((2, 120, 48), np.uint64)
    A[1] = X[:120]
    B = X[120:].copy()
    for blocks in ([A[1], B], [X[:1], X[1:299], X[299:]], [A[1][:60], A[1][60:], B[:1], B[1:]],
                   [X[k: k + 1] for k in range(300)], (X,)):
        np.testing.assert_array_equal(plan.apply(list(blocks), q), want)
        np.testing.assert_array_equal(core.modgemm(U, list(blocks), q), want)
    Xs = np.repeat(X[:3], 100, axis=0)  # repeated rows: the same view several times
    np.testing.assert_array_equal(plan.apply([X[k // 100: k // 100 + 1] for k in range(300)], q),
                                  bigint_modmul(U, Xs, q))
    O = np.zeros((6, 2, 48), np.uint64)
    plan.apply([A[1], B], q, out=O[:, 1])
    np.testing.assert_array_equal(O[:, 1], want)
    assert (O[:, 0] == 0).all()


def test_bad_row_block_lists_raise_value_error(rng):
    q = PRIMES[40]
    U = rand_U(rng, 5, 7, 12)
    X = rand_X(rng, 7, 40, q)
    plan = core.ModGemmPlan(U, 12)
    cases = {"empty": [], "columns": [X[:3], X[3:, :39]], r"rows but U has 7": [X[:3], X[3:6]],
             "dtype": [X[:3], X[3:].astype(np.int64)], "2-D": [X[:3], X[3:].ravel()], "ndarray": [X[:3], [1, 2]]}
    for what, blocks in cases.items():
        with pytest.raises(ValueError, match=what):
            plan.apply(blocks, q)
    with pytest.raises(ValueError, match="overlap"):
        plan.apply([X[:3], X[3:]], q, out=X[:5])
    bad = X.copy()
    bad[5, 3] = q
    with pytest.raises(ValueError, match="residue"):
        plan.apply([X[:3], bad[3:]], q)
