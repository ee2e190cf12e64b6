"""IND-CPA-D: noise added inside the native decrypt (docs/design/decryption.md §5).

Oracles: the exact plaintext coefficients (noise="none"), statistics of an integer Gaussian, and the two
attacks the noise exists to stop — Li–Micciancio key recovery from one exact decryption, and the scaling
attack that defeats any sigma not tied to a trusted bound.
"""
import math
import warnings

import numpy as np
import pytest

from hemlp import fhe
from hemlp.errors import InsecureParametersError, ParameterError
from tests.conftest import make_ctx


def _ctx(name, mode="standard"):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fhe.Context(name, allow_insecure=True, decrypt_noise=mode)


def _exact(ctx, ct, sk):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fhe.UnsafeDecryptionWarning)
        return ctx.decrypt(ct, sk, noise="none")


def _coeff_zero(ctx, pk, scale):
    return ctx.encrypt(np.zeros(ctx.N), pk, scale=scale, encoding="coeff")


def test_production_default_is_standard():
    # the test suite may lower the process default for precision tests; a context that names no mode gets it,
    # and a fresh interpreter's default is "standard"
    import subprocess
    import sys

    code = ("import warnings; warnings.simplefilter('ignore'); from hemlp import fhe; "
            "print(fhe.Context('test-N10', allow_insecure=True).decrypt_noise)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "standard"


def test_none_is_deterministic_and_noise_is_not(rng):
    ctx = _ctx("test-N12")
    sk, pk = ctx.keygen()
    x = rng.uniform(-1, 1, ctx.slots) + 0.25
    ct = ctx.encrypt(x, pk)
    a, b = _exact(ctx, ct, sk), _exact(ctx, ct, sk)
    assert np.array_equal(a, b)
    (y1, info), y2 = ctx.decrypt(ct, sk, info=True), ctx.decrypt(ct, sk)
    assert not np.array_equal(y1, y2) and not np.array_equal(y1, a)
    # slot noise std = sigma sqrt(n) / Delta; the difference of two decryptions has sqrt(2) times that
    std = 2.0 ** info["log2_sigma"] * math.sqrt(ctx.slots) / ct.scale
    d = np.abs(y1 - y2).max()
    assert 0.5 * std < d < 8 * math.sqrt(2) * std
    assert info["mode"] == "standard" and info["est_bits"] == pytest.approx(-math.log2(std), abs=1e-9)
    assert np.abs(y1 - x).max() < 2.0 ** -15  # still a usable decryption at N = 2^12, Delta = 2^40


def test_noise_is_an_integer_gaussian_of_the_requested_sigma():
    ctx = _ctx("test-N12")
    sk, pk = ctx.keygen()
    scale = 2.0 ** 40
    ct = _coeff_zero(ctx, pk, scale)
    raw = np.rint(_exact(ctx, ct, sk) * scale)
    sigma = 2.0 ** 12
    d = np.concatenate([np.rint(ctx.decrypt(ct, sk, bound_log2=12) * scale) - raw for _ in range(16)])
    noised = ctx.decrypt(ct, sk, bound_log2=12) * scale
    assert np.abs(noised - np.rint(noised)).max() < 1e-3  # integral noise
    n = d.size
    assert abs(d.mean()) < 5 * sigma / math.sqrt(n)
    # variance within a ~1e-6 chi-square interval (normal approximation, 5 sd of the sample variance)
    assert abs(d.var() / sigma ** 2 - 1) < 5 * math.sqrt(2 / n)
    # Kolmogorov–Smirnov against N(0, sigma^2) (continuity correction is negligible at sigma = 4096)
    xs = np.sort(d)
    cdf = 0.5 * (1 + np.vectorize(math.erf)(xs / (sigma * math.sqrt(2))))
    ks = max(np.max(np.arange(1, n + 1) / n - cdf), np.max(cdf - np.arange(n) / n))
    assert ks * math.sqrt(n) < 2.0  # p > 1e-3
    # no correlation between neighbouring coefficients, nor between calls
    assert abs(np.corrcoef(d[:-1], d[1:])[0, 1]) < 5 / math.sqrt(n)
    assert abs(np.corrcoef(d[: ctx.N], d[ctx.N: 2 * ctx.N])[0, 1]) < 5 / math.sqrt(ctx.N)


def test_sigma_depends_only_on_params_and_settings(rng):
    ctx = _ctx("test-N12")
    sk, pk = ctx.keygen()
    quiet = ctx.encrypt(rng.uniform(-1, 1, ctx.slots), pk)
    loud = ctx.mul_integer(ctx.encrypt(rng.uniform(-1, 1, ctx.slots), pk), 1 << 12)  # 4096x the error
    _, i1 = ctx.decrypt(quiet, sk, info=True)
    _, i2 = ctx.decrypt(loud, sk, info=True)
    assert i1["log2_sigma"] == i2["log2_sigma"] == math.log2(ctx.native.fresh_noise_bound)


def test_li_micciancio_key_recovery_needs_an_exact_decryption(rng):
    """One decryption w = c0 + c1 s of a known ciphertext gives s = (w - c0) / c1 (NTT domain, any unit c1)."""
    ctx = _ctx("test-N10")
    sk, pk = ctx.keygen()
    x = rng.uniform(-1, 1, ctx.N)
    ct = ctx.encrypt(x, pk, encoding="coeff", level=0)
    q = ctx.modulus(0)
    c0 = ct.native.poly(0)[0].astype(object)
    c1 = ct.native.poly(1)[0].astype(object)
    true_s = np.array([int(v) % q for v in np.asarray(sk.native.coeffs, dtype=np.int64)], dtype=object)

    def recover(values):
        w = [int(v) % q for v in np.rint(np.asarray(values) * ct.scale).astype(np.int64)]
        w_ntt = ctx.ntt(np.array(w, dtype=np.uint64)).astype(object)
        s_ntt = [(int(a) - int(b)) * pow(int(c), -1, q) % q for a, b, c in zip(w_ntt, c0, c1)]
        return np.array([int(v) for v in ctx.intt(np.array(s_ntt, dtype=np.uint64))], dtype=object)

    assert np.array_equal(recover(_exact(ctx, ct, sk)), true_s)       # no noise: the whole key, one query
    got = recover(ctx.decrypt(ct, sk))                                # standard noise
    assert np.count_nonzero(got == true_s) < ctx.N // 4                # ~ chance level
    assert not np.array_equal(got, true_s)
    flood = fhe.FloodSpec(bound_log2=math.log2(ctx.native.fresh_noise_bound))
    got = recover(ctx.decrypt(ct, sk, noise="flood", flood=flood))     # flooded (LMSS)
    assert np.count_nonzero(got == true_s) < ctx.N // 4


def test_scaling_attack_needs_sigma_tied_to_the_trusted_bound():
    """A server returns k·Enc(0): the decryption is k·e/Delta. With sigma fixed at the fresh bound the
    client leaks e (rounding recovers it); with sigma from the client's bound for the agreed circuit
    (t·k) it does not."""
    ctx = _ctx("test-N10")
    sk, pk = ctx.keygen()
    scale, k = 2.0 ** 40, 1 << 30
    ct = ctx.mul_integer(_coeff_zero(ctx, pk, scale), k)
    e = np.rint(_exact(ctx, ct, sk) * scale / k)                       # the secret-dependent error, exactly
    fixed = np.rint(ctx.decrypt(ct, sk) * scale / k)                   # sigma = fresh bound << k
    assert np.mean(fixed == e) > 0.99
    t_log2 = math.log2(ctx.native.fresh_noise_bound) + math.log2(k)    # the client's bound for "k·(fresh)"
    tied = np.rint(ctx.decrypt(ct, sk, bound_log2=t_log2) * scale / k)
    assert np.mean(tied == e) < 0.2
    flooded = np.rint(ctx.decrypt(ct, sk, noise="flood", flood=fhe.FloodSpec(bound_log2=t_log2)) * scale / k)
    assert np.mean(flooded == e) < 0.01


def test_flood_mode_sigma_and_precision_floor(rng):
    spec = fhe.FloodSpec(bound_log2=10, stat_security=30, queries=1)
    ctx = _ctx("test-N12")
    assert spec.log2_sigma(ctx.N) == pytest.approx(0.5 * math.log2(12) + 15 + 10)
    sk, pk = ctx.keygen()
    x = rng.uniform(-1, 1, ctx.slots)
    y, info = ctx.decrypt(ctx.encrypt(x, pk), sk, noise="flood", flood=spec, info=True)
    assert info["log2_sigma"] == pytest.approx(spec.log2_sigma(ctx.N), abs=1e-6)
    err = np.abs(y - x).max()
    assert 2.0 ** -(info["est_bits"] + 1) < err < 2.0 ** -(info["est_bits"] - 4)
    with pytest.raises(ParameterError, match="min_precision_bits"):
        ctx.decrypt(ctx.encrypt(x, pk), sk, noise="flood",
                    flood=fhe.FloodSpec(bound_log2=10, min_precision_bits=12))
    with pytest.raises(ParameterError, match="FloodSpec"):
        ctx.decrypt(ctx.encrypt(x, pk), sk, noise="flood")
    with pytest.raises(ParameterError, match="flood=FloodSpec"):
        _ctx("test-N12", mode="flood")
    with pytest.raises(ParameterError, match="noise must be one of"):
        ctx.decrypt(ctx.encrypt(x, pk), sk, noise="loud")


def test_native_entry_points_default_to_noise(rng):
    ctx = _ctx("test-N12")
    sk, pk = ctx.keygen()
    ct = ctx.encrypt(rng.uniform(-1, 1, ctx.slots), pk)
    a = ctx.native.decrypt(ct.native, sk.native)   # no mode given: standard, never exact
    b = ctx.native.decrypt(ct.native, sk.native)
    pa, pb = ctx.decode(ctx.wrap(fhe.Plaintext, a)), ctx.decode(ctx.wrap(fhe.Plaintext, b))
    assert not np.array_equal(pa, pb)
    with pytest.raises(ParameterError, match="flood decryption needs sigma"):
        ctx.native.decrypt(ct.native, sk.native, 2, 0)


def test_client_policy_is_enforced_natively():
    from hemlp import _core

    weak = fhe.Params(10, (50, 40, 40, 40), (51, 51), 2, 40, name="published-by-server")
    with pytest.raises(InsecureParametersError, match="published-by-server.*128-bit"):
        _core.Engine(weak.native)
    with pytest.raises(ParameterError, match="min_bits"):
        _core.Engine(fhe.Params.preset("N14-d6").native, min_security_bits=192)
    assert _core.Engine(fhe.Params.preset("N14-d6").native).min_security_bits == 128
