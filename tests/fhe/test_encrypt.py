"""Encryption and decryption: correctness, seeded a-part, the error distribution."""
import numpy as np
import pytest

from hemlp import fhe
from tests.conftest import bits


def test_public_and_secret_key_encryption(t12, rng):
    ctx = t12.ctx
    x = rng.uniform(-1, 1, ctx.slots) * np.linspace(0.1, 2, ctx.slots)
    for key in (t12.pk, t12.sk):
        for level in range(ctx.max_level + 1):
            ct = ctx.encrypt(x, key, level=level)
            assert ct.level == level
            assert bits(ctx.decrypt(ct, t12.sk) - x) > 22


def test_complex_values_survive(t12, rng):
    ctx = t12.ctx
    z = rng.uniform(-1, 1, ctx.slots) + 1j * rng.uniform(-1, 1, 64).repeat(ctx.slots // 64)
    ct = ctx.encrypt(z, t12.pk)
    assert ct.is_complex
    assert bits(ctx.decrypt(ct, t12.sk) - z) > 22


def test_seeded_ciphertext_equals_expanded_form(t12, rng):
    ctx = t12.ctx
    x = rng.uniform(-1, 1, 100)
    ct = ctx.encrypt(x, t12.sk)
    assert ct._obj.seeded
    blob = ct.to_bytes()
    expanded = ctx.add(ct, ctx.encrypt(np.zeros(100), t12.sk, level=ct.level))  # unseeded result
    assert len(blob) < 0.6 * len(expanded.to_bytes())
    back = fhe.from_bytes(blob, ctx)
    assert np.array_equal(back._obj.poly(1), ct._obj.poly(1))  # a regenerated from the seed
    assert np.array_equal(back._obj.poly(0), ct._obj.poly(0))


def test_fresh_error_is_gaussian_sigma_3_2(t12):
    """Decrypting a secret-key encryption of 0 at scale 1 leaves the error polynomial e."""
    ctx = t12.ctx
    errs = []
    for _ in range(4):
        ct = ctx.encrypt(np.zeros(1), t12.sk, level=0, scale=1.0)
        pt = ctx.native.decrypt(ct.native, t12.sk.native, 0, 0)
        errs.append(ctx._e.plaintext_coeffs(pt))
    e = np.concatenate(errs)
    assert np.all(e == np.round(e))
    assert np.max(np.abs(e)) <= 19
    assert 3.0 < np.std(e) < 3.4
    assert abs(np.mean(e)) < 0.1


def test_secret_key_is_uniform_ternary(t12):
    s = t12.sk._obj.coeffs
    assert set(np.unique(s)) <= {-1, 0, 1}
    counts = np.bincount(s + 1, minlength=3) / len(s)
    assert np.all(np.abs(counts - 1 / 3) < 0.05)


def test_public_key_encryption_noise_is_small(t12, rng):
    ctx = t12.ctx
    ct = ctx.encrypt(np.zeros(ctx.slots), t12.pk, level=0, scale=1.0)
    e = ctx._e.plaintext_coeffs(ctx.native.decrypt(ct.native, t12.sk.native, 0, 0))
    # v*e + e0 + e1*s: std about sigma*sqrt(2N/3 * 2 + 1) ~ 3.2 * 74
    assert np.std(e) < 3.2 * 100
    assert np.max(np.abs(e)) < 2**14


def test_wrong_secret_key_is_detected(t12, rng):
    from hemlp.errors import KeyMismatchError

    ctx = t12.ctx
    other_sk, _ = ctx.keygen()
    ct = ctx.encrypt(rng.uniform(-1, 1, 8), t12.pk)
    with pytest.raises(KeyMismatchError, match="another key pair"):
        ctx.decrypt(ct, other_sk)


def test_keys_and_ciphertexts_of_other_contexts_are_rejected(t12, t10):
    from hemlp.errors import ContextMismatchError

    ct = t10.ctx.encrypt([1.0], t10.pk)
    with pytest.raises(ContextMismatchError):
        t12.ctx.decrypt(ct, t12.sk)
    with pytest.raises(ContextMismatchError):
        t12.ctx.encrypt([1.0], t10.pk)
    with pytest.raises(ContextMismatchError):
        fhe.from_bytes(ct.to_bytes(), t12.ctx)
