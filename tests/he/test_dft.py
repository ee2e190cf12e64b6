"""Homomorphic CoeffToSlot / SlotToCoeff (hemlp.bootstrap) against numpy oracles.

Cleartext: the embedding U[j, k] = ζ^(5^j k) against np.fft and the core's encoder; the butterfly
factorisation and every level grouping against the dense U. Encrypted (insecure N = 2^11, 9
levels of 40 bits, Δ = 2^40): asymmetric random data in [-1, 1), full (1024) and sparse (128)
slots, depth 2, 3 (and 4 sparse), both slot orders; precision is -log2(max |error| / max |expected|)
and must reach MIN_BITS (measured ≈ 27–30 bits).
"""
import warnings

import numpy as np
import pytest

from hemlp import fhe
from hemlp.he.lintrans import OpCounter
from hemlp.he import dft
from hemlp.he import special_fft as sf
from hemlp.he.reinterpret import mul_monomial, retag
from hemlp.he.subring import subring_trace, subring_trace_steps
from hemlp.errors import EncodingError, LevelError, MissingKeyError, ParameterError, ScaleMismatchError, ShapeError

LOG_N = 11
N = 1 << LOG_N
FULL, SPARSE = N // 2, 128
MIN_BITS = 24    # error the homomorphic DFT adds (measured 27-30 bits)
DATA_BITS = 20   # against the data itself, including fresh public-key encryption noise in the slots
PRECISION = {}   # (test, config) -> measured bits; printed at the end with pytest -s
# (slots, depth, bit_reversed) evaluated homomorphically
CONFIGS = [(FULL, 2, True), (FULL, 3, True), (SPARSE, 2, True), (SPARSE, 3, True), (SPARSE, 4, True),
           (FULL, 2, False)]
IDS = [f"n{n}-d{d}-{'bitrev' if br else 'natural'}" for n, d, br in CONFIGS]


def rel_bits(got, expected) -> float:
    err = float(np.max(np.abs(np.asarray(got) - np.asarray(expected))))
    return float("inf") if err == 0 else float(np.log2(np.max(np.abs(expected)) / err))


def record(what, cfg, bits):
    n, d, br = cfg
    PRECISION[(what, f"n={n} depth={d} {'bitrev' if br else 'natural'}")] = bits


def subring_data(rng, n):
    """Random x ∈ [-1, 1)^N on the coefficients sparse packing reads (multiples of gap), 0 elsewhere."""
    gap = N // (2 * n)
    x = np.zeros(N)
    k = np.arange(n) * gap
    x[k] = rng.uniform(-1, 1, n)
    x[N // 2 + k] = rng.uniform(-1, 1, n)
    return x


def w_of(x, n):
    gap = N // (2 * n)
    k = np.arange(n) * gap
    return x[k] + 1j * x[N // 2 + k]


def slot_order(v, br):
    return v[sf.bit_reverse(len(v))] if br else v


class Env:
    def __init__(self):
        params = fhe.Params(LOG_N, (60,) + (40,) * 9, (61, 61), alpha=2, log_scale=40, name="test-N11-d9")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.ctx = fhe.Context(params, allow_insecure=True)
        self.sk, self.pk = self.ctx.keygen()
        self.plans = {c: (dft.plan_coeff_to_slot(c[0], c[1], c[2]), dft.plan_slot_to_coeff(c[0], c[1], c[2]))
                      for c in CONFIGS}
        steps = dft.dft_rotation_steps(*[p for pair in self.plans.values() for p in pair])
        self.keys = self.ctx.rotation_keys(self.sk, steps + subring_trace_steps(N, SPARSE))
        self.conj = self.ctx.conjugation_key(self.sk)
        self.rlk = self.ctx.relin_key(self.sk)


@pytest.fixture(scope="module")
def env():
    yield Env()
    if PRECISION:
        print("\nprecision in bits, -log2(max|err| / max|expected|):")
        for (what, cfg), b in sorted(PRECISION.items()):
            print(f"  {what:22s} {cfg:28s} {b:6.2f}")


# ---- cleartext: the embedding and its factorisation

@pytest.mark.parametrize("n", [4, 64, 1024])
def test_embedding_matrix_is_a_4n_point_dft_at_the_powers_of_5(n, rng):
    w = rng.uniform(-1, 1, n) + 1j * rng.uniform(-1, 1, n)
    rows = np.array([pow(5, j, 4 * n) for j in range(n)])
    z_fft = 4 * n * np.fft.ifft(w, 4 * n)[rows]           # Σ_k w_k exp(2πi·r·k/(4n)) at r = 5^j mod 4n
    np.testing.assert_allclose(sf.embedding_matrix(n) @ w, z_fft, atol=1e-9 * n)


@pytest.mark.parametrize("n", [FULL, SPARSE])
def test_embedding_matrix_is_the_core_encoder(env, n, rng):
    """Encode z on n slots, read the plaintext's coefficients m/Δ: z = U·w with w_k = m_(k·gap) + i·m_(N/2+k·gap)."""
    ctx = env.ctx
    z = rng.uniform(-1, 1, n) + 1j * rng.uniform(-1, 1, n)
    m = ctx._e.plaintext_coeffs(ctx.encode(z, slots=n)._obj)
    gap = N // (2 * n)
    assert np.all(m[np.arange(N) % gap != 0] == 0)         # sparse packing lives in Z[X^gap]
    np.testing.assert_allclose(sf.embedding_matrix(n) @ w_of(m, n), z, atol=1e-9)


@pytest.mark.parametrize("n", [2, 8, 256])
def test_butterfly_factorisation_and_core_special_fft(env, n, rng):
    U = sf.embedding_matrix(n)
    R = np.eye(n)[sf.bit_reverse(n)]
    F = np.eye(n, dtype=complex)
    for B in sf.forward_stages(n):                          # B_L ⋯ B_1
        assert len(B) <= 3
        F = sf.dense(B, n) @ F
    np.testing.assert_allclose(F @ R, U, atol=1e-12 * n)    # U = B_L ⋯ B_1 · R
    G = np.eye(n, dtype=complex)
    for B in sf.inverse_stages(n):                          # B̃_1 ⋯ B̃_L
        G = G @ sf.dense(B, n)
    np.testing.assert_allclose(R @ G, np.linalg.inv(U), atol=1e-12 * n)  # U⁻¹ = R · B̃_1 ⋯ B̃_L
    for B, Bt in zip(sf.forward_stages(n), sf.inverse_stages(n)):
        np.testing.assert_allclose(sf.dense(B, n) @ sf.dense(Bt, n), np.eye(n), atol=1e-14)
    v = rng.uniform(-1, 1, n) + 1j * rng.uniform(-1, 1, n)
    np.testing.assert_allclose(env.ctx._e.special_fft(list(v), False), U @ v, atol=1e-9)
    np.testing.assert_allclose(env.ctx._e.special_fft(list(v), True), np.linalg.solve(U, v), atol=1e-9)


@pytest.mark.parametrize("n", [8, 64, 256])
def test_levels_compose_to_the_transform_with_bounded_diagonals(n):
    U = sf.embedding_matrix(n)
    R = np.eye(n)[sf.bit_reverse(n)]
    L = sf.log2_exact(n)
    for depth in list(range(1, L + 1)) + [(1,) * (L - 2) + (2,), (L - 1, 1)]:
        sizes = sf.group_sizes(L, depth)
        for inverse in (True, False):
            for br in (True, False):
                mats = sf.level_matrices(n, depth, inverse, br)
                assert len(mats) == len(sizes)
                M = np.eye(n, dtype=complex)
                for D in mats:                              # later levels multiply on the left
                    M = sf.dense(D, n) @ M
                ref = np.linalg.inv(U) if inverse else U
                if br:
                    ref = R @ ref if inverse else ref @ R
                np.testing.assert_allclose(M, ref, atol=1e-10)
                if br:  # without the permutation a group of r stages has <= 2^(r+1) - 1 diagonals
                    assert all(len(D) <= 2 ** (r + 1) - 1 for D, r in zip(mats, sizes))
                for D in mats:                              # |entries| <= 1: no level spent on constants
                    assert max(np.max(np.abs(v)) for v in D.values()) <= 1 + 1e-12


def test_group_sizes_and_bad_plans():
    assert sf.group_sizes(10, 3) == (3, 3, 4)
    assert sf.group_sizes(10, 2) == (5, 5)
    assert sf.group_sizes(7, 4) == (1, 2, 2, 2)
    assert sf.group_sizes(6, (1, 5)) == (1, 5)
    for bad in (0, 11, (5, 4), (0, 10), True):
        with pytest.raises(ParameterError):
            sf.group_sizes(10, bad)
    with pytest.raises(ParameterError):
        dft.plan_coeff_to_slot(96, 2)
    with pytest.raises(ParameterError):
        dft.DFTPlan(64, 2, "forward")
    p = dft.plan_coeff_to_slot(1024, (4, 3, 3))
    assert p.depth == 3 and p.stages == (4, 3, 3) and p.steps == dft.dft_rotation_steps(p)


# ---- exact helpers

def test_mul_monomial_is_a_negacyclic_shift_and_x_half_n_is_i(env, rng):
    """Exact: compared with the decrypted input (no noise is added), not only with the data."""
    ctx, sk, pk = env.ctx, env.sk, env.pk
    ct = ctx.encrypt(rng.uniform(-1, 1, N), pk, encoding="coeff", level=2)
    x = ctx.decrypt(ct, sk)
    for k in (1, 37, N - 1, N, N + 5, 2 * N - 3, -7):
        ref = np.zeros(N)
        e = (np.arange(N) + k) % (2 * N)
        np.add.at(ref, e % N, np.where(e >= N, -x, x))
        y = mul_monomial(ctx, ct, k)
        assert y.level == ct.level and y.scale == ct.scale
        assert rel_bits(ctx.decrypt(y, sk), ref) > 45
    for n in (FULL, SPARSE):
        ct = ctx.encrypt(rng.uniform(-1, 1, n) + 1j * rng.uniform(-1, 1, n), pk, slots=n)
        y = ctx.decrypt(mul_monomial(ctx, ct, N // 2), sk)
        assert rel_bits(y, 1j * ctx.decrypt(ct, sk)) > 40


def test_retag_rereads_coefficients_as_slots(env, rng):
    ctx, sk, pk = env.ctx, env.sk, env.pk
    for n in (FULL, SPARSE):
        x = subring_data(rng, n)
        ct = ctx.encrypt(x, pk, encoding="coeff")
        s = retag(ctx, ct, slots=n, encoding="slot", is_complex=True)
        assert (s.encoding, s.slots, s.level, s.scale) == ("slot", n, ct.level, ct.scale)
        assert rel_bits(ctx.decrypt(s, sk), sf.embedding_matrix(n) @ w_of(x, n)) > 30  # z = U·w


def test_subring_trace_clears_the_coefficients_sparse_packing_ignores(env, rng):
    ctx, sk, pk = env.ctx, env.sk, env.pk
    gap = N // (2 * SPARSE)
    x = rng.uniform(-1, 1, N)                               # dense: not in Z[X^gap]
    ct = ctx.encrypt(x, pk, encoding="coeff")
    assert subring_trace_steps(N, SPARSE) == [128, 256, 512] and subring_trace_steps(N, FULL) == []
    y = subring_trace(ctx, ct, env.keys, SPARSE)
    assert y.level == ct.level and y.scale == ct.scale * gap and y.encoding == "coeff"
    expected = np.where(np.arange(N) % gap == 0, x, 0)
    assert rel_bits(ctx.decrypt(y, sk), expected) > MIN_BITS
    ctp, stc = env.plans[(SPARSE, 2, True)]
    out = ctx.decrypt(dft.coeff_to_slot(ctx, y, env.keys, ctp), sk)
    assert rel_bits(out, slot_order(w_of(expected, SPARSE), True)) > MIN_BITS
    with pytest.raises(MissingKeyError):
        subring_trace(ctx, ct, ctx.rotation_keys(sk, [128, 256]), SPARSE)


# ---- homomorphic CoeffToSlot / SlotToCoeff

@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_coeff_to_slot_matches_numpy(env, cfg, rng):
    n, depth, br = cfg
    ctx, sk = env.ctx, env.sk
    x = subring_data(rng, n)
    ct = ctx.encrypt(x, env.pk, encoding="coeff")
    y = dft.coeff_to_slot(ctx, ct, env.keys, env.plans[cfg][0])
    assert y.level == ct.level - depth and y.scale == ct.scale
    assert (y.encoding, y.slots, y.is_complex) == ("slot", n, True)
    expected = slot_order(w_of(x, n), br)                   # slot j: x_(j gap) + i x_(N/2 + j gap), maybe bit-reversed
    b = rel_bits(ctx.decrypt(y, sk), expected)
    record("coeff_to_slot", cfg, b)
    assert b >= MIN_BITS, b
    if br:  # the natural order is a different vector: the permutation is really applied (or not)
        assert rel_bits(ctx.decrypt(y, sk), w_of(x, n)) < 2


@pytest.mark.parametrize("scaling", [2.0 ** -5, 0.37, 3.0])
def test_plan_scaling_multiplies_the_transform_and_keeps_the_scale(env, scaling, rng):
    """DFTPlan(scaling=f): the same steps and levels, each level's matrix times f^(1/depth); the output keeps
    the input's scale and level budget, so the slots (and integers) are f times the unscaled transform's."""
    n, depth = FULL, 3
    ctx, sk = env.ctx, env.sk
    plain, scaled = env.plans[(n, depth, True)][0], dft.plan_coeff_to_slot(n, depth, scaling=scaling)
    assert scaled.steps == plain.steps and scaled.depth == plain.depth and scaled.scaling == scaling
    for a, b in zip(plain.levels, scaled.levels):
        assert a.diags.keys() == b.diags.keys()
        for k in a.diags:
            np.testing.assert_allclose(b.diags[k], a.diags[k] * scaling ** (1 / depth), rtol=1e-15, atol=0)
    x = subring_data(rng, n)
    ct = ctx.encrypt(x, env.pk, encoding="coeff")
    y = dft.coeff_to_slot(ctx, ct, env.keys, scaled)
    assert y.level == ct.level - depth and y.scale == ct.scale
    assert rel_bits(ctx.decrypt(y, sk), scaling * slot_order(w_of(x, n), True)) >= MIN_BITS - 1
    back = dft.slot_to_coeff(ctx, y, env.keys, dft.plan_slot_to_coeff(n, depth, scaling=1 / scaling))
    assert rel_bits(ctx.decrypt(back, sk), x) >= DATA_BITS
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ParameterError, match="scaling"):
            dft.plan_coeff_to_slot(n, depth, scaling=bad)


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_slot_to_coeff_matches_numpy(env, cfg, rng):
    n, depth, br = cfg
    ctx, sk = env.ctx, env.sk
    v = rng.uniform(-1, 1, n) + 1j * rng.uniform(-1, 1, n)
    ct = ctx.encrypt(slot_order(v, br), env.pk, slots=n)
    y = dft.slot_to_coeff(ctx, ct, env.keys, env.plans[cfg][1])
    assert y.level == ct.level - depth and y.scale == ct.scale and y.encoding == "coeff"
    gap = N // (2 * n)

    def coeffs(v):                                          # Re v at k gap, Im v at N/2 + k gap, 0 elsewhere
        c = np.zeros(N)
        c[np.arange(n) * gap] = v.real
        c[N // 2 + np.arange(n) * gap] = v.imag
        return c

    got = ctx.decrypt(y, sk)
    b = rel_bits(got, coeffs(slot_order(ctx.decrypt(ct, sk), br)))  # the DFT's own error
    record("slot_to_coeff", cfg, b)
    assert b >= MIN_BITS, b
    assert rel_bits(got, coeffs(v)) >= DATA_BITS             # including the (public-key) encryption noise


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_slot_to_coeff_inverts_coeff_to_slot(env, cfg, rng):
    n, depth, br = cfg
    ctx, sk = env.ctx, env.sk
    x = subring_data(rng, n)
    ct = ctx.encrypt(x, env.pk, encoding="coeff")
    cts, stc = env.plans[cfg]
    y = dft.slot_to_coeff(ctx, dft.coeff_to_slot(ctx, ct, env.keys, cts), env.keys, stc)
    assert y.level == ct.level - 2 * depth and y.scale == ct.scale
    b = rel_bits(ctx.decrypt(y, sk), x)
    record("StC(CtS(x))", cfg, b)
    assert b >= MIN_BITS, b


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_square_of_coefficients_through_the_slots(env, cfg, rng):
    """CtS -> split -> square each part -> join -> StC equals numpy's coefficient-wise x**2."""
    n, depth, br = cfg
    ctx, sk = env.ctx, env.sk
    x = subring_data(rng, n)
    ct = ctx.encrypt(x, env.pk, encoding="coeff")
    cts, stc = env.plans[cfg]
    re, im = dft.split_real_imag(ctx, dft.coeff_to_slot(ctx, ct, env.keys, cts), env.conj)
    sq = [ctx.mul(p, p, env.rlk, rescale=True) for p in (re, im)]
    y = dft.slot_to_coeff(ctx, dft.join_real_imag(ctx, *sq), env.keys, stc)
    assert y.level == ct.level - 2 * depth - 1 and y.encoding == "coeff"
    b = rel_bits(ctx.decrypt(y, sk), x ** 2)
    record("square pipeline", cfg, b)
    assert b >= MIN_BITS, b


def test_split_and_join_real_imag(env, rng):
    ctx, sk = env.ctx, env.sk
    for n in (FULL, SPARSE):
        z = rng.uniform(-1, 1, n) + 1j * rng.uniform(-1, 1, n)
        ct = ctx.encrypt(z, env.pk, slots=n)
        z = ctx.decrypt(ct, sk)                             # exact reference: the split adds only key-switch noise
        re, im = dft.split_real_imag(ctx, ct, env.conj)
        for part, ref in ((re, z.real), (im, z.imag)):
            assert part.level == ct.level and part.scale == 2 * ct.scale and not part.is_complex
            assert part.slots == n and rel_bits(ctx.decrypt(part, sk), ref) >= MIN_BITS
        back = dft.join_real_imag(ctx, re, im)
        assert back.is_complex and back.level == ct.level
        assert rel_bits(ctx.decrypt(back, sk), z) >= MIN_BITS
    with pytest.raises(ScaleMismatchError):
        dft.join_real_imag(ctx, re, retag(ctx, im, scale=ct.scale))
    with pytest.raises(LevelError):
        dft.join_real_imag(ctx, re, ctx.drop_level(im, im.level - 1))
    with pytest.raises(MissingKeyError):                    # the core: no key for the conjugation element
        dft.split_real_imag(ctx, ct, ctx.rotation_keys(sk, [1]))
    with pytest.raises(EncodingError):
        dft.split_real_imag(ctx, ctx.encrypt(np.ones(4), env.pk, encoding="coeff"), env.conj)


@pytest.mark.parametrize("cfg", [CONFIGS[1], CONFIGS[2], CONFIGS[5]], ids=[IDS[1], IDS[2], IDS[5]])
def test_operation_counts_and_rotation_steps_are_exact(env, cfg, rng):
    ctx = env.ctx
    n, depth, _ = cfg
    cts, stc = env.plans[cfg]
    for plan, ct in ((cts, ctx.encrypt(subring_data(rng, n), env.pk, encoding="coeff")),
                     (stc, ctx.encrypt(rng.uniform(-1, 1, n), env.pk, slots=n))):
        c = OpCounter(ctx)
        (dft.coeff_to_slot if plan is cts else dft.slot_to_coeff)(c, ct, env.keys, plan)
        assert c.steps == set(dft.dft_rotation_steps(plan))  # every listed key is used, none other
        assert c.counts["rescale"] == depth
        assert c.counts["rot"] == sum(lt.rotations for lt in plan.levels)
        assert c.counts["pmult"] == sum(lt.pmults for lt in plan.levels)
        assert c.counts["hoisted"] == sum(len(lt.plan.baby) for lt in plan.levels)


def test_keys_for_exactly_the_listed_steps_suffice(env, rng):
    ctx, sk = env.ctx, env.sk
    cts, stc = dft.plan_coeff_to_slot(SPARSE, 3), dft.plan_slot_to_coeff(SPARSE, 3)
    keys = ctx.rotation_keys(sk, dft.dft_rotation_steps(cts, stc))
    assert len(keys.elements) == len(dft.dft_rotation_steps(cts, stc))
    x = subring_data(rng, SPARSE)
    y = dft.slot_to_coeff(ctx, dft.coeff_to_slot(ctx, ctx.encrypt(x, env.pk, encoding="coeff"), keys, cts), keys, stc)
    assert rel_bits(ctx.decrypt(y, sk), x) >= MIN_BITS


# ---- bad input

def test_too_few_levels_is_a_level_error_naming_the_levels(env, rng):
    ctx = env.ctx
    cts, stc = env.plans[(FULL, 3, True)]
    low = ctx.encrypt(subring_data(rng, FULL), env.pk, encoding="coeff", level=2)
    with pytest.raises(LevelError, match=r"consumes 3 levels.*level 2.*level >= 3"):
        dft.coeff_to_slot(ctx, low, env.keys, cts)
    with pytest.raises(LevelError, match=r"level >= 3"):
        dft.slot_to_coeff(ctx, ctx.encrypt(np.ones(FULL), env.pk, level=2), env.keys, stc)
    ok = ctx.encrypt(subring_data(rng, FULL), env.pk, encoding="coeff", level=3)
    assert dft.coeff_to_slot(ctx, ok, env.keys, cts).level == 0   # exactly depth levels suffice


def test_missing_rotation_keys_are_typed_errors(env, rng):
    ctx, sk = env.ctx, env.sk
    cts = env.plans[(SPARSE, 2, True)][0]
    ct = ctx.encrypt(subring_data(rng, SPARSE), env.pk, encoding="coeff")
    short = ctx.rotation_keys(sk, cts.steps[1:])
    with pytest.raises(MissingKeyError, match=rf"steps \[{cts.steps[0]}\]"):
        dft.coeff_to_slot(ctx, ct, short, cts)
    with pytest.raises(MissingKeyError):
        dft.coeff_to_slot(ctx, ct, None, cts)
    # what the core itself raises when the pre-check is bypassed
    slot_ct = retag(ctx, ct, slots=SPARSE, encoding="slot")
    with pytest.raises(MissingKeyError, match="Galois element"):
        for lt in cts.levels:
            slot_ct = lt.apply(ctx, slot_ct, short)


def test_wrong_inputs_are_rejected(env, rng):
    ctx = env.ctx
    cts, stc = env.plans[(SPARSE, 2, True)]
    with pytest.raises(EncodingError):       # slot-encoded with another slot count
        dft.coeff_to_slot(ctx, ctx.encrypt(np.ones(FULL), env.pk), env.keys, cts)
    with pytest.raises(EncodingError):       # StC takes slots, not coefficients
        dft.slot_to_coeff(ctx, ctx.encrypt(np.ones(N), env.pk, encoding="coeff"), env.keys, stc)
    with pytest.raises(ParameterError):      # plan of the other direction
        dft.coeff_to_slot(ctx, ctx.encrypt(np.ones(N), env.pk, encoding="coeff"), env.keys, stc)
    with pytest.raises(ShapeError):          # more slots than the context has
        dft.coeff_to_slot(ctx, ctx.encrypt(np.ones(N), env.pk, encoding="coeff"), env.keys,
                          dft.plan_coeff_to_slot(2 * N, 2))
