"""PCMM on a chain of primes <= 33 bits (the N14-pcmm preset, #20): one GEMM digit per limb and part, still exact.

The exactness bound is kb * 2^(u-1) * 2^(w-1) < 2^53; with 12-bit weights (u = 13) and 256-row blocks a centred
residue of a <= 33-bit prime (|x'| < 2^32) fits one digit (w = 33): 2^8 * 2^12 * 2^32 = 2^52. These tests run that
edge on the SIMD path of the process (tests/fhe/test_simd.py runs the same split on every path the CPU has)."""
import warnings

import numpy as np
import pytest

from hemlp import _core, fhe, pcmm
from hemlp.compiler.params import choose_preset


@pytest.fixture(scope="module")
def small():
    """N14-pcmm's chain shape at N = 2^10 (insecure: tests only): a 33-bit q0 and 25/26-bit primes."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ctx = fhe.Context(fhe.Params(10, (32, 25, 25), (60,), 1, 25, name="test-small-primes"), allow_insecure=True)
    sk, _ = ctx.keygen()
    return ctx, sk


def test_every_prime_of_the_preset_takes_one_digit():
    p = fhe.Params.preset("N14-pcmm")
    assert p.is_128_bit_secure
    assert all(q.bit_length() <= 33 for q in p.q)
    for q in p.q:
        cfg = _core.modgemm_config(256, 12, q)
        assert (cfg["T"], cfg["TU"], cfg["nblk"]) == (1, 1, 1), (q, cfg)
    # N14-d6's two bottom primes (60 and 41 bits) take two digits each: twice the GEMM passes at level 1
    d6 = fhe.Params.preset("N14-d6")
    assert [_core.modgemm_config(256, 12, q)["T"] for q in d6.q[:2]] == [2, 2]


def test_one_digit_gemm_at_the_exactness_edge_equals_big_integers():
    """Every product at its largest: |U| = 2^12 and residues at the centred lift's extremes, 256 terms summed."""
    from hemlp._core import ring

    q = ring.ntt_primes(33, 10, 1)[0]  # just below 2^33: centred residues up to 2^32 - 1
    assert q.bit_length() == 33 and _core.modgemm_config(256, 12, q)["T"] == 1
    rng = np.random.default_rng(3)
    U = rng.choice(np.array([-(1 << 12), 1 << 12], dtype=np.int64), size=(3, 256))
    U[1] = 1 << 12  # one row all at +2^12: the sum of 256 maximal products of one sign
    X = rng.integers(0, q, size=(256, 40), dtype=np.uint64)
    X[:, 0] = q // 2        # the largest positive centred residue, (q - 1) / 2
    X[:, 1] = q // 2 + 1    # the most negative one, -(q - 1) / 2
    X[::2, 2], X[1::2, 2] = q // 2, q // 2 + 1
    want = ((U.astype(object) @ X.astype(object)) % q).astype(np.uint64)
    assert np.array_equal(_core.modgemm(U, X, q, 12), want)


def test_pcmm_on_small_primes_equals_big_integer_products(small, rng):
    ctx, sk = small
    d = 256
    M = rng.uniform(-1, 1, (d, ctx.slots)) + np.arange(d)[:, None] / d  # asymmetric rows
    C = pcmm.encrypt_matrix(ctx, M, sk, level=2)
    U = rng.normal(0, 1 / 16, (5, d))
    U[0, 0] = 1.0  # max |U| a power of two: the quantised weights reach 2^12
    Y = pcmm.pcmm(U, C, rescale=False, weight_bits=12)
    Uq, _ = pcmm.quantize(U, 12)
    assert np.max(np.abs(Uq)) == 1 << 12
    for k in range(C.level + 1):
        q = ctx.modulus(k)
        assert _core.modgemm_config(d, 12, q)["T"] == 1
        for part in range(2):
            X = np.stack([ct._obj.poly(part)[k] for ct in C.cts])
            want = _core.modgemm_ref(Uq, X, q)
            got = np.stack([ct._obj.poly(part)[k] for ct in Y.cts])
            assert np.array_equal(got, want), (k, part)


def test_rescaled_product_decrypts(small, rng):
    """The rescale by a 25-bit prime keeps the scale (K = round(q_l / Delta_U) absorbs it) and the product."""
    ctx, sk = small
    M = rng.uniform(-1, 1, (32, ctx.slots)) + np.arange(32)[:, None] / 32
    U = rng.normal(0, 0.2, (7, 32))
    C = pcmm.encrypt_matrix(ctx, M, sk, level=2)
    Y = pcmm.pcmm(U, C, weight_bits=12)
    assert Y.level == 1 and abs(np.log2(Y.scale) - 25) < 0.01
    with ctx.decrypt_settings(noise="none"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        err = np.max(np.abs(pcmm.decrypt_matrix(ctx, Y, sk) - U @ M))
    assert err < 2.0**-8  # 12-bit weights, 2^25 scale, N = 2^10: 9.6-10.7 bits over 24 fresh encryptions


def test_the_compiler_picks_it_by_name_only():
    assert all(choose_preset(depth)["name"] != "N14-pcmm" for depth in range(1, 11))
    assert choose_preset(7)["name"] == "N15-d10"
    assert choose_preset(3, preset="N14-pcmm")["depth"] == 10
