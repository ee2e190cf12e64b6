"""Encoder semantics against a naive canonical-embedding oracle (not only round trips)."""
import numpy as np
import pytest

from hemlp._core import ring
from tests.conftest import bits


def naive_slots(coeffs, n_ring, slots):
    """z_j = m(zeta^(5^j)), zeta = exp(2 pi i / 2N), evaluated directly."""
    m = 2 * n_ring
    k = np.arange(n_ring)
    out = []
    for j in range(slots):
        e = pow(5, j, m)
        out.append(np.sum(coeffs * np.exp(2j * np.pi * ((e * k) % m) / m)))
    return np.array(out)


def test_roundtrip_precision(t12, rng):
    ctx = t12.ctx
    z = rng.uniform(-1, 1, ctx.slots) + 1j * rng.uniform(-1, 1, ctx.slots)
    pt = ctx.encode(z)
    got = ctx.decode(pt)
    # bound from docs/design/pcmm-and-planning.md §7.1: error < 2^-(logDelta - logN - 2)
    assert bits(got - z) > 40 - 12 - 2


def test_slot_j_is_evaluation_at_zeta_5j(t10, rng):
    ctx = t10.ctx
    z = rng.uniform(-1, 1, ctx.slots) + 1j * rng.normal(size=ctx.slots)  # asymmetric re/im
    pt = ctx.encode(z, level=0)
    coeffs = ctx._e.plaintext_coeffs(pt._obj)  # integer coefficients / scale
    assert bits(naive_slots(coeffs, ctx.N, ctx.slots) - z) > 20


def test_products_are_slotwise(t10, rng):
    """encode(z1)*encode(z2) as polynomials decodes to z1*z2 (checks the embedding, not the round trip)."""
    ctx = t10.ctx
    n = ctx.N
    z1 = rng.uniform(-1, 1, ctx.slots) + 0.5j * rng.uniform(-1, 1, ctx.slots)
    z2 = rng.normal(size=ctx.slots) - 0.25j
    c1 = ctx._e.plaintext_coeffs(ctx.encode(z1, level=0, scale=2.0**30)._obj)
    c2 = ctx._e.plaintext_coeffs(ctx.encode(z2, level=0, scale=2.0**30)._obj)
    full = np.convolve(c1, c2)
    prod = full[:n].copy()
    prod[: n - 1] -= full[n:]
    assert bits(naive_slots(prod, n, ctx.slots) - z1 * z2) > 14


def test_rotation_by_automorphism_x_to_x5(t10, rng):
    ctx = t10.ctx
    z = rng.uniform(-1, 1, ctx.slots) * np.arange(1, ctx.slots + 1)  # index-dependent data
    coeffs = ctx._e.plaintext_coeffs(ctx.encode(z, level=0, scale=2.0**30)._obj)
    for r in (1, 3, -2):
        g = ring.galois_element_rotation(r, ctx.params.log_n)
        rot = np.zeros(ctx.N)
        for i, c in enumerate(coeffs):
            k = i * g % (2 * ctx.N)
            rot[k % ctx.N] += c if k < ctx.N else -c
        assert bits(naive_slots(rot, ctx.N, ctx.slots) - np.roll(z, -r)) > 10


def test_conjugation_element(t10, rng):
    ctx = t10.ctx
    z = rng.uniform(-1, 1, ctx.slots) + 1j * rng.uniform(-1, 1, ctx.slots)
    coeffs = ctx._e.plaintext_coeffs(ctx.encode(z, level=0, scale=2.0**30)._obj)
    g = 2 * ctx.N - 1
    conj = np.zeros(ctx.N)
    for i, c in enumerate(coeffs):
        k = i * g % (2 * ctx.N)
        conj[k % ctx.N] += c if k < ctx.N else -c
    assert bits(naive_slots(conj, ctx.N, ctx.slots) - np.conj(z)) > 20


@pytest.mark.parametrize("slots", [1, 4, 64, 256])
def test_sparse_slots_gap_layout(t10, rng, slots):
    ctx = t10.ctx
    z = rng.uniform(-1, 1, slots) + 1j * rng.uniform(-1, 1, slots)
    pt = ctx.encode(z, slots=slots, level=0)
    coeffs = ctx._e.plaintext_coeffs(pt._obj)
    gap = ctx.N // 2 // slots
    mask = np.ones(ctx.N, bool)
    mask[::gap] = False
    assert np.all(coeffs[mask] == 0)
    dec = ctx._e.decode(pt._obj)
    assert bits(dec - z) > 25


def test_coefficient_encoding_roundtrip(t10, rng):
    ctx = t10.ctx
    x = rng.uniform(-3, 3, ctx.N)
    pt = ctx.encode(x, encoding="coeff")
    assert bits(ctx.decode(pt) - x) > 35
    coeffs = ctx._e.plaintext_coeffs(pt._obj)
    assert bits(coeffs - x) > 35  # coefficient i holds x_i


def test_special_fft_inverse(t10, rng):
    v = list(rng.normal(size=64) + 1j * rng.normal(size=64))
    w = t10.ctx._e.special_fft(t10.ctx._e.special_fft(v, True), False)
    assert bits(np.array(w) - np.array(v)) > 40


def test_encode_rejects_bad_input(t12):
    from hemlp.errors import EncodingError, LevelError

    ctx = t12.ctx
    with pytest.raises(EncodingError, match="too many values"):
        ctx.encode(np.zeros(ctx.slots + 1))
    with pytest.raises(EncodingError, match="too large"):
        ctx.encode([1e45])
    with pytest.raises(EncodingError, match="NaN"):
        ctx.encode([np.nan])
    with pytest.raises(EncodingError, match="dtype"):
        ctx.encode(["a"])
    with pytest.raises(EncodingError, match="power of two"):
        ctx.encode([1.0], slots=3)
    with pytest.raises(LevelError):
        ctx.encode([1.0], level=99)
