"""compile(..., bootstrap=True) with the bootstraps lowered to S2C-first batched bootstrapping and MaMBo
(hemlp.planner.bootstrap_lowering): the plan prints each bootstrap's choice with its estimates and the reason;
the encrypted run with real batched bootstraps / MaMBo layers equals simulate, the unlowered plan (single CtS-first
bootstraps, encrypted and simulated) and the numpy oracle within the stated precision, on asymmetric data; forced
choices that cannot run and keys of the wrong pipeline are typed errors.

Precision (measured at test-N10-boot / test-N12-boot, asymmetric uniform inputs): encrypted vs simulate 19.5-21
bits; asserted 2^-16. The MaMBo chain has square activations only, so the numpy model is an exact oracle up to the
weights' quantisation (2^-20) and the bootstraps' error."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import hemlp
from hemlp.bootstrap import BootstrapKeys
from hemlp.errors import EncodingError, MissingKeyError, ParameterError
from hemlp.runtime.artifacts import EvalKeys

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.filterwarnings("ignore::hemlp.fhe.InsecureParametersWarning"),
              pytest.mark.filterwarnings("ignore::hemlp.compiler.calibration.CalibrationWarning")]


class Square(torch.nn.Module):
    def forward(self, x):
        return x * x


def square_net():
    """6 -> 2 -> 16 -> 16 -> 3 with x^2 between: every layer one level, so bootstraps can follow a dense layer."""
    torch.manual_seed(5)
    dims = (6, 2, 16, 16, 3)
    layers = []
    for a, b in zip(dims[:-1], dims[1:]):
        layers += [torch.nn.Linear(a, b), Square()]
    return torch.nn.Sequential(*layers[:-1])


def mlp():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.SiLU(), torch.nn.Linear(8, 8), torch.nn.Tanh(),
                               torch.nn.Linear(8, 3))


#: test-N10-boot has 512 slots: 1100 samples are 3 chunks, so MaMBo runs two chunks joined (pcmm_bootstrap_pairs)
#: and the third with its output rows joined (pcmm_bootstrap(pair=True))
BIG = 1100


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(17)
    # asymmetric: shifted uniform, so no sign symmetry hides a wrong pairing or a swapped half
    return rng.uniform(-1, 1, (48, 6)), rng.uniform(-0.6, 0.9, (40, 6)), rng.uniform(-0.6, 0.9, (BIG, 6))


def compile_(model, x, batch_size=40, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return hemlp.compile(model, x, batch_size=batch_size, bootstrap=True, allow_insecure=True, layout="batch", **kw)


def run(cm, x):
    sk, ek = cm.keygen()
    return cm.decrypt(cm.run(cm.encrypt(x, sk), ek, threads=1), sk), sk, ek


@pytest.fixture(scope="module")
def mambo(data):
    return compile_(square_net(), data[0], BIG, preset="test-N10-boot", mambo=True, batch_bootstrap=2)


@pytest.fixture(scope="module")
def mambo_run(mambo, data):
    return run(mambo, data[2])


@pytest.fixture(scope="module")
def unlowered(data):
    return compile_(square_net(), data[0], BIG, preset="test-N10-boot", mambo=False, batch_bootstrap=False)


def test_the_mambo_plan_fuses_pcmm_and_refresh_and_prints_the_choice(mambo):
    steps = mambo.steps
    fused = [s for s in steps if s.op == "mambo"]
    assert fused, [s.op for s in steps]
    for s in fused:
        assert s.U is not None and s.info["kind"] == "mambo" and s.info["k"] == 2 and s.info["order"] == "s2c_first"
        # the PCMM's input at >= stc_depth + 1 (2 + 1 at test-N10-boot), the output at the S2C-first landing level
        assert s.level_in >= 3 and s.level_out == 5
        assert s.info["mambo_seconds"] > 0 and s.info["batched_seconds"] > 0 and s.info["single_seconds"] > 0
    assert not any(s.op == "pcmm" and s.out == fused[0].info["pcmm"] for s in steps)
    text = str(mambo.plan)
    assert "# bootstrapping:" in text and "pipeline: batched k=2 (S2C-first)" in text
    assert "MaMBo k=2 (the PCMM fused)" in text and "single ~" in text and "PCMM + batched ~" in text
    assert "forced (mambo=True)" in text
    # the key memory the plan states is the estimate of the keys keygen makes (seeded, S2C-first levels)
    from hemlp.bootstrap.batch_keys import estimate_bytes
    from hemlp.bootstrap.params import BootParams

    bp = BootParams.for_context(mambo.context, order="s2c_first", log_message_ratio=14)
    assert f"bootstrapping keys k=2 {estimate_bytes(mambo.context, 2, bp) / 2 ** 30:.2f} GiB in memory" in text
    b = mambo.plan.info["bootstrap"]
    assert b["order"] == "s2c_first" and b["k"] == 2
    assert b["total_seconds"] == pytest.approx(b["boot_seconds"] + b["layer_seconds"])


def test_mambo_run_equals_simulate_the_unlowered_plan_and_numpy(mambo, mambo_run, unlowered, data):
    x = data[2]
    y, _, _ = mambo_run
    sim = mambo.simulate(x)
    ref = mambo.reference(x)
    assert np.max(np.abs(y - sim)) < 2.0 ** -16
    assert np.max(np.abs(y - ref)) < 2.0 ** -14           # x^2 activations: numpy is exact up to the weights
    assert np.array_equal(y.argmax(1), ref.argmax(1))
    # the unlowered plan (single CtS-first bootstraps), simulated and encrypted: the same values
    assert np.max(np.abs(sim - unlowered.simulate(x))) < 2.0 ** -15
    y1, _, _ = run(unlowered, x)
    assert np.max(np.abs(y - y1)) < 2.0 ** -15


def test_simulate_models_the_mambo_refresh(mambo, data):
    from hemlp.runtime.local import simulate as simulate_rows

    x = data[1]
    a, b = mambo.simulate(x), mambo.simulate(x)
    assert np.array_equal(a, b)                              # seeded
    ident = []
    for s in mambo.steps:       # the same program with every refresh an identity: the PCMM of a MaMBo step stays
        if s.op == "mambo":
            s = type(s)("pcmm", s.out, s.inputs, s.rows, s.node, U=s.U, bias=s.bias)
        elif s.op == "bootstrap":
            s = type(s)("alias", s.out, s.inputs, s.rows)
        ident.append(s)
    plain = simulate_rows(ident, x.T, mambo.weight_bits).T
    assert 2.0 ** -30 < np.max(np.abs(a - plain)) < 2.0 ** -14
    with pytest.raises(EncodingError, match="bootstrap .*largest value .*S2C-first"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mambo.simulate(x * 8)


def test_batched_bootstraps_encrypted_equal_simulate_and_the_unlowered_plan(data):
    cm = compile_(mlp(), data[0], activation_degree=3, batch_bootstrap=True, mambo=False)
    boots = [s for s in cm.steps if s.op == "bootstrap"]
    assert boots and all(s.info["kind"] == "batched" and s.info["k"] >= 2 for s in boots)
    text = str(cm.plan)
    assert f"batched k={boots[0].info['k']}: ~" in text and "single ~" in text
    x = data[1]
    y, _, _ = run(cm, x)
    sim = cm.simulate(x)
    assert np.max(np.abs(y - sim)) < 2.0 ** -16
    assert np.array_equal(y.argmax(1), sim.argmax(1))
    single = compile_(mlp(), data[0], activation_degree=3, batch_bootstrap=False, mambo=False)
    assert np.max(np.abs(sim - single.simulate(x))) < 2.0 ** -15
    assert np.max(np.abs(sim - cm.reference(x))) < 0.05        # the degree-3 activations' fit


def test_auto_takes_the_cheapest_printed_estimate(data):
    from hemlp.planner.bootstrap_lowering import AUTO_MARGIN

    cm = compile_(mlp(), data[0], activation_degree=3)
    b = cm.plan.info["bootstrap"]
    totals = {k: v for k, v in b["family_totals"].items() if isinstance(v, float)}
    chosen = b.get("family", "single (CtS-first)")
    assert chosen in totals and b["lowering"].startswith(chosen)
    if chosen == "single (CtS-first)":
        assert totals[chosen] <= min(totals.values()) * (1 + AUTO_MARGIN)
    else:
        assert totals[chosen] == min(totals.values())
        assert totals[chosen] * (1 + AUTO_MARGIN) < totals["single (CtS-first)"]
    assert b["total_seconds"] == pytest.approx(totals[chosen], rel=1e-6)
    text = str(cm.plan)
    assert "#   pipeline: " + chosen in text
    for r in b["placements"]:
        assert r["kind"] in ("single", "batched", "mambo") and r["single_seconds"] > 0 and r.get("reason")


def expanding_net():
    """6 -> 16 -> 16 -> 16 -> 3 with x^2: the first layer expands (6 input rows, 16 output rows)."""
    torch.manual_seed(6)
    layers = []
    for a, b in zip((6, 16, 16, 16), (16, 16, 16, 3)):
        layers += [torch.nn.Linear(a, b), Square()]
    return torch.nn.Sequential(*layers[:-1])


def test_auto_lowers_to_mambo_where_its_estimate_is_lower(data):
    """Two chunks (1024 samples at 512 slots): MaMBo joins the chunks of each input row, so the expanding layer's 6
    input SlotToCoeffs against 16 refreshed pairs: the planner's estimates decide, the printed reason says why, and
    the run (whatever was chosen) equals simulate."""
    x = data[2][:1024]
    cm = compile_(expanding_net(), data[0], 1024, preset="test-N10-boot")
    b = cm.plan.info["bootstrap"]
    assert b["order"] == "s2c_first"
    rows = [r for r in b["placements"] if r.get("mambo_seconds") is not None]
    assert rows, b["placements"]
    for r in rows:
        if r["kind"] == "mambo":
            assert r["mambo_seconds"] < r["batched_seconds"] and "MaMBo pays" in r["reason"]
        else:
            assert r["mambo_seconds"] >= r["batched_seconds"] and "does not pay" in r["reason"]
    assert any(r["kind"] == "mambo" for r in rows), "with the measured ratios MaMBo pays for 6 -> 16 at 2 chunks"
    y, _, _ = run(cm, x)
    assert np.max(np.abs(y - cm.simulate(x))) < 2.0 ** -16
    assert np.max(np.abs(y - cm.reference(x))) < 2.0 ** -14


def test_errors(mambo, mambo_run, unlowered, data):
    _, sk, ek = mambo_run
    with pytest.raises(ParameterError, match="need bootstrap=True"):
        hemlp.compile(mlp(), data[0], batch_size=40, mambo=True)
    with pytest.raises(ParameterError, match="batch_bootstrap=1"):
        compile_(mlp(), data[0], batch_bootstrap=1)
    wrong = EvalKeys(mambo.model_id, ek.relin_key, bootstrap_keys=BootstrapKeys.generate(mambo.context, sk))
    with pytest.raises(MissingKeyError, match="s2c_first pipeline and need BatchBootstrapKeys"):
        mambo.run(mambo.encrypt(data[2], sk), wrong)


def test_mambo_plan_runs_from_saved_keys(mambo, mambo_run, data, tmp_path):
    """The batched / MaMBo keys travel as the eval keys file (client keygen -> server): the plan run with the
    loaded keys gives bit-identical ciphertexts to the run with the in-memory ones."""
    _, sk, ek = mambo_run
    ek.save(tmp_path / "eval.keys", mambo.context)
    loaded = EvalKeys.load(tmp_path / "eval.keys", mambo)
    assert loaded.bootstrap_keys.k == ek.bootstrap_keys.k and loaded.bootstrap_keys.params == ek.bootstrap_keys.params
    from hemlp.bootstrap.batch_keys import estimate_bytes

    assert loaded.bootstrap_keys.memory_bytes == ek.bootstrap_keys.memory_bytes == estimate_bytes(
        mambo.context, 2, ek.bootstrap_keys.params)            # seeded, as the plan's key line states
    ct = mambo.encrypt(data[1], sk)
    a, b = mambo.run(ct, ek, threads=1), mambo.run(ct, loaded, threads=1)
    assert any(s.op == "mambo" for s in mambo.steps)
    for x, y in zip(a.ctm.cts, b.ctm.cts):
        assert all(np.array_equal(x.native.poly(i), y.native.poly(i)) for i in range(2))
    assert np.max(np.abs(mambo.decrypt(b, sk) - mambo.reference(data[1]))) < 2.0 ** -14


def test_save_and_load_keep_the_lowered_plan(mambo, data, tmp_path):
    mambo.save(tmp_path / "m")
    loaded = hemlp.load(tmp_path / "m", allow_insecure=True)
    assert loaded.model_id == mambo.model_id
    assert [s.op for s in loaded.steps] == [s.op for s in mambo.steps]
    assert "MaMBo k=2" in str(loaded.plan)
    assert np.array_equal(loaded.simulate(data[2][:64]), mambo.simulate(data[2][:64]))
