"""Decryption noise from the plan (#21 item 2): the error bound t that sets sigma comes from simulated runs of the
compiled circuit under throwaway keys (CompiledModel.estimate_noise), travels with the plan (both artefacts), and
is what standard and flood decryption use; never the decrypted value or anything a ciphertext carries. The
N14-flood preset keeps ~20 bits under LMSS flooding where N14-d6 keeps ~5."""
import math
import warnings

import numpy as np
import pytest

import hemlp
from hemlp import fhe
from hemlp.errors import ClientArtefactError, ParameterError

torch = pytest.importorskip("torch")
from tests.compiler.conftest import mlp  # noqa: E402


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fhe.InsecureParametersWarning)
        yield


def raw_error_peak(cm, x) -> int:
    """max |e1 - e2| of the output ciphertexts of two runs of x under fresh key pairs (coefficient units)."""
    q0 = int(cm.params.q[0])
    raw = []
    for _ in range(2):
        sk, ek = cm.keygen()
        out = cm.run(cm.encrypt(x, sk), ek)
        raw.append([cm._raw_coefficients(c, sk, q0) for c in out.ctm.cts])  # noqa: SLF001 (the oracle)
    peak = 0
    for a, b in zip(*raw):
        d = (a - b) % q0
        peak = max(peak, int(np.max(np.abs(np.where(d > q0 // 2, d - q0, d)))))
    return peak


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net = mlp(dims=(20, 16, 4))
        x = np.random.default_rng(0).normal(size=(4, 20))
        cm = hemlp.compile(net, x, batch_size=4, allow_insecure=True, layout="packed", preset="test-N12-d6")
        t = cm.estimate_noise(x, runs=8, margin_bits=1)     # 4 fixed worst cases, 3 random-sign draws, 1 uniform
    return cm, x, t


def test_plan_bound_covers_held_out_inputs(model):
    cm, x, t = model
    assert cm.noise_bound_log2 == t and cm.plan.info["noise_bound_log2"] == t
    m = float(np.max(np.abs(x)))
    rng = np.random.default_rng(9)
    for held_out in (rng.uniform(-m, m, x.shape), np.where(rng.random(x.shape) < 0.5, m, -m)):
        assert math.log2(raw_error_peak(cm, held_out)) <= t
    # the bound is the measured error plus the margin, not a blanket constant: one key pair's peak lies within a
    # few bits under it (t is the worst of 8 runs plus 1 bit; random-sign held-out draws measured 0.9-2.2 bits under
    # t over 8 estimates, the samples' own peak 2.0-3.3 bits under)
    assert t - 4.5 <= math.log2(raw_error_peak(cm, x)) <= t


def test_decryption_uses_the_plan_bound(model):
    cm, x, t = model
    ctx = cm.context
    assert ctx.noise_bound_log2 == t
    sk, ek = cm.keygen()
    out = cm.run(cm.encrypt(x, sk), ek)
    exact = cm.decrypt(out, sk, noise="none")
    a, b = cm.decrypt(out, sk, noise="standard"), cm.decrypt(out, sk, noise="standard")
    assert not np.array_equal(a, b)
    _, _, info = ctx.decrypt_noise_args(2.0 ** 40, ctx.slots, "standard")
    assert info["bound_log2"] == t and info["log2_sigma"] == pytest.approx(t, abs=1e-3)  # sigma = ceil(2^t)
    # sigma scales with t: the plan's bound against the fresh one gives noise 2^(t - t_fresh) times larger
    t_fresh = math.log2(ctx.native.fresh_noise_bound)
    with ctx.decrypt_settings(noise="standard", bound_log2=t_fresh):
        fresh = [cm._decrypt(out, sk) - exact for _ in range(6)]  # noqa: SLF001
    plan = [cm.decrypt(out, sk, noise="standard") - exact for _ in range(6)]
    ratio = np.std(plan) / np.std(fresh)
    assert 2.0 ** (t - t_fresh - 1) < ratio < 2.0 ** (t - t_fresh + 1)
    assert ctx.noise_bound_log2 == t  # decrypt_settings restored
    # flood: FloodSpec(bound_log2 = the plan's t), LMSS s = 30, one query
    y = cm.decrypt(out, sk, noise="flood")
    sigma_log2 = fhe.FloodSpec(bound_log2=t).log2_sigma(ctx.N)
    assert np.max(np.abs(y - exact)) > 2.0 ** (sigma_log2 - 40 - 4)


def test_plan_bound_travels_with_both_artefacts(model, tmp_path):
    cm, x, t = model
    cm.save(tmp_path / "server")
    cm.save(tmp_path / "client", client=True)
    for d in ("server", "client"):
        m = hemlp.load(tmp_path / d, allow_insecure=True)
        assert m.noise_bound_log2 == t and m.context.noise_bound_log2 == t
    client = hemlp.load(tmp_path / "client", allow_insecure=True)
    with pytest.raises(ClientArtefactError):
        client.estimate_noise(x)


def test_flood_without_a_plan_bound_is_refused(tmp_path):
    net = mlp(dims=(8, 4))
    x = np.random.default_rng(1).normal(size=(2, 8))
    cm = hemlp.compile(net, x, batch_size=2, allow_insecure=True, layout="batch", preset="test-N12")
    sk, ek = cm.keygen()
    out = cm.run(cm.encrypt(x, sk), ek)
    assert cm.noise_bound_log2 is None
    with pytest.raises(ParameterError, match="estimate_noise"):
        cm.decrypt(out, sk, noise="flood")
    y = cm.decrypt(out, sk, noise="flood", flood=fhe.FloodSpec(bound_log2=11))
    assert y.shape == (2, 4)


def test_flood_preset_keeps_twenty_bits():
    """N14-flood (128-bit, 2^55 scales): LMSS flooding with s = 30, one query, over the fresh bound keeps about
    20 bits per slot; N14-d6 (2^40) keeps about 5 and is refused at min_precision_bits = 16."""
    p = fhe.Params.preset("N14-flood")
    assert p.is_128_bit_secure and p.log_scale == 55 and p.max_level == 4
    ctx = fhe.Context("N14-flood", decrypt_noise="standard")
    sk, pk = ctx.keygen()
    x = np.random.default_rng(2).uniform(-1, 1, ctx.slots)
    spec = fhe.FloodSpec(bound_log2=math.log2(ctx.native.fresh_noise_bound), min_precision_bits=16)
    ct = ctx.encrypt(x, pk)
    y, info = ctx.decrypt(ct, sk, noise="flood", flood=spec, info=True)
    assert info["est_bits"] > 19
    bits = -math.log2(np.max(np.abs(y - x)))
    assert info["est_bits"] - 4 < bits < info["est_bits"] + 2  # the noise is there, and costs what it says
    sq = ctx.rescale(ctx.mul(ct, ct, ctx.relin_key(sk)))  # one level of arithmetic at 2^55 scales
    y2 = ctx.decrypt(sq, sk, noise="flood", flood=spec)
    assert -math.log2(np.max(np.abs(y2 - x * x))) > 15
    d6 = fhe.Context("N14-d6", decrypt_noise="standard")
    sk6, pk6 = d6.keygen()
    with pytest.raises(ParameterError, match="min_precision_bits"):
        d6.decrypt(d6.encrypt(x, pk6), sk6, noise="flood", flood=spec)


def test_compiled_model_on_the_flood_preset():
    """End to end at 128-bit: a model compiled on N14-flood, its plan bound measured, decrypted flooded with it
    (LMSS s = 30, one query) keeps about 20 bits against the plaintext plan."""
    net = mlp(dims=(20, 16, 4))
    x = np.random.default_rng(0).normal(size=(4, 20))
    cm = hemlp.compile(net, x, batch_size=4, preset="N14-flood", layout="batch")
    t = cm.estimate_noise(x, runs=1)
    sk, ek = cm.keygen()
    out = cm.run(cm.encrypt(x, sk), ek)
    ys = cm.simulate(x)
    flooded = cm.decrypt(out, sk, noise="flood")
    assert 5 < t < 16
    assert -math.log2(np.max(np.abs(flooded - ys))) > 17
    assert not np.array_equal(flooded, cm.decrypt(out, sk, noise="flood"))
