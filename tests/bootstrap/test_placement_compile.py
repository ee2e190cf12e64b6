"""compile(..., bootstrap=True): an MLP deeper than the levels a bootstrap leaves (test-N12-boot: 3), compiled in
layout (A) with the planner's bootstrap placement, run encrypted with real bootstraps; the decrypted result
agrees with simulate (top-1 equal, values within the bootstrap's error); simulate models the EvalMod input range
and the bootstrap's error; typed errors for what is not supported."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import hemlp
from hemlp.errors import EncodingError, LevelError, MissingKeyError, ParameterError, UnsupportedError
from hemlp.runtime.artifacts import EvalKeys

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore::hemlp.fhe.InsecureParametersWarning")


def mlp():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.SiLU(), torch.nn.Linear(8, 8), torch.nn.Tanh(),
                               torch.nn.Linear(8, 3))


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(11)
    return rng.uniform(-1, 1, (48, 6)), rng.uniform(-0.9, 0.9, (32, 6))


@pytest.fixture(scope="module")
def compiled(data):
    # single CtS-first bootstraps (paired), forced: the batched / MaMBo lowering is tested in test_lowering_compile
    return hemlp.compile(mlp(), data[0], batch_size=32, bootstrap=True, allow_insecure=True, activation_degree=3,
                         mambo=False, batch_bootstrap=False, layout="batch")


def test_the_plan_places_bootstraps_and_prints_them(compiled):
    info = compiled.plan.info
    assert info["preset"] == "test-N12-boot" and compiled.layout == "batch"
    b = info["bootstrap"]
    # 3 levels after a bootstrap; the layers need 1 (PCMM) + 2 (degree-3 polynomial) each, 3 layers -> 7 levels
    assert b["levels_after"] == 3 and info["depth"] == 7 > b["levels_after"]
    assert len(b["placements"]) >= 2
    for p in b["placements"]:
        assert p["level_after"] == 3 and 0 <= p["level_before"] < 3
        assert p["ciphertexts"] == 8 and p["bootstraps"] == 4 and p["seconds"] > 0
    assert b["total_seconds"] == pytest.approx(b["boot_seconds"] + b["layer_seconds"])
    text = str(compiled.plan)
    assert "# bootstrapping:" in text and "each lands at level 3" in text
    assert f"depth 7 on {info['max_level']} levels refreshed by {len(b['placements'])} bootstrap point(s)" in text
    assert f"bootstrap {b['placements'][0]['value']} before {b['placements'][0]['before']}: level " in text
    assert "boot_N12.json" in text or "estimate" in text
    # every step at exact planned levels within [0, 3]; bootstraps land at 3
    for s in compiled.steps:
        assert 0 <= s.level_out <= 3, s
        if s.op == "bootstrap":
            assert s.level_out == 3


def test_encrypted_run_with_real_bootstraps_equals_simulate(compiled, data):
    x = data[1]
    sim = compiled.simulate(x)
    sk, ek = compiled.keygen()
    assert ek.bootstrap_keys is not None
    out = compiled.run(compiled.encrypt(x, sk), ek, threads=1)
    y = compiled.decrypt(out, sk)
    assert np.array_equal(y.argmax(1), sim.argmax(1))
    # bootstraps at 2^-21.8 (x c) plus CKKS noise: both sides agree to far better than the activations' fit
    assert np.max(np.abs(y - sim)) < 2.0 ** -14
    assert np.max(np.abs(sim - compiled.reference(x))) < 0.05
    assert any("#boot" in k for k in out.layer_seconds)
    # the keys serialise with the context (the bootstrapping keys inside)
    again = EvalKeys.from_bytes(ek.to_bytes(compiled.context), compiled)
    assert again.bootstrap_keys.rotation_levels == ek.bootstrap_keys.rotation_levels
    with pytest.raises(TypeError, match="context"):
        ek.to_bytes()
    with pytest.raises(MissingKeyError, match="bootstrapping keys"):
        compiled.run(compiled.encrypt(x, sk), EvalKeys(compiled.model_id, ek.relin_key))


def test_simulate_models_the_bootstrap_error_and_is_seeded(compiled, data):
    x = data[1]
    a, b = compiled.simulate(x), compiled.simulate(x)
    assert np.array_equal(a, b)
    # the same program with the bootstrap steps as identities: differs by about the modelled error only
    from hemlp.runtime.local import simulate as simulate_rows

    ident = [s if s.op != "bootstrap" else type(s)("alias", s.out, s.inputs, s.rows, level_in=s.level_in,
                                                   level_out=s.level_out) for s in compiled.steps]
    plain = simulate_rows(ident, x.T, compiled.weight_bits).T
    diff = np.max(np.abs(a - plain))
    assert 2.0 ** -30 < diff < 2.0 ** -14


def test_simulate_refuses_inputs_outside_the_bootstrap_range(compiled, data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")       # the activations' range warnings
        with pytest.raises(EncodingError, match="bootstrap .*coefficient"):
            compiled.simulate(data[1] * 40)


def test_save_and_load_keep_the_bootstrapped_plan(compiled, data, tmp_path):
    compiled.save(tmp_path / "m")
    loaded = hemlp.load(tmp_path / "m", allow_insecure=True)
    assert loaded.model_id == compiled.model_id
    assert "# bootstrapping:" in str(loaded.plan)
    assert np.array_equal(loaded.simulate(data[1]), compiled.simulate(data[1]))


def test_a_layer_deeper_than_the_bootstrap_levels_is_a_level_error_naming_it(data):
    with pytest.raises(LevelError, match="consumes 4 levels but a bootstrap leaves only 3.*split the activation"):
        hemlp.compile(mlp(), data[0], batch_size=32, bootstrap=True, allow_insecure=True, activation_degree=15,
                      layout="batch")


def test_unsupported_bootstrap_requests_are_typed_errors(data):
    # layout (A') places refreshes (tests/layouts/test_mlwe_bootstrap.py); mambo=True is a layout (A) option
    with pytest.raises(UnsupportedError, match="layout \\(A\\) option"):
        hemlp.compile(mlp(), data[0], batch_size=32, bootstrap=True, allow_insecure=True, layout="mlwe",
                      mambo=True)
    with pytest.raises(ParameterError, match="bootstrapping preset"):
        hemlp.compile(mlp(), data[0], batch_size=32, bootstrap=True, allow_insecure=True, preset="test-N12-d6")
    with pytest.raises(ParameterError, match="not 128-bit secure"):
        hemlp.compile(mlp(), data[0], batch_size=32, bootstrap=True, preset="test-N12-boot")


class Residual(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = torch.nn.Linear(6, 8), torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)
        self.d = torch.nn.Linear(8, 3)

    def forward(self, x):
        h = torch.tanh(self.a(x))
        h = h + torch.nn.functional.silu(self.b(h))
        h = h + torch.tanh(self.c(h))
        return self.d(h)


def test_residual_blocks_bootstrapped_encrypted_equal_simulate():
    # test-N10-boot (N = 2^10: fast); its bootstrap time is the N12 measurement scaled (an estimate, printed so)
    torch.manual_seed(1)
    x = np.random.default_rng(2).uniform(-1, 1, (40, 6))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = hemlp.compile(Residual(), x, batch_size=40, bootstrap=True, allow_insecure=True, activation_degree=3,
                           preset="test-N10-boot", layout="batch")
    levels = {s.out: s.level_out for s in cm.steps}
    adds = [s for s in cm.steps if s.op == "add"]
    assert len(adds) == 2
    for s in adds:       # both branches read at the level the join needs; the join lands >= 0
        a, b = (levels[i] for i in s.inputs)
        assert s.level_out == min(a, b) - (a == b) >= 0
    assert sum(s.op == "bootstrap" for s in cm.steps) >= 2
    assert "estimate" in str(cm.plan)
    sim = cm.simulate(x)
    sk, ek = cm.keygen()
    y = cm.decrypt(cm.run(cm.encrypt(x, sk), ek, threads=1), sk)
    assert np.array_equal(y.argmax(1), sim.argmax(1))
    assert np.max(np.abs(y - sim)) < 2.0 ** -12
