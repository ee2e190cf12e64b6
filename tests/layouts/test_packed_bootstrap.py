"""compile(..., layout="packed", bootstrap=True): layout (P) with the planner's bootstrap placement, on nets deeper
than a bootstrap's levels (test-N10-boot: 3 levels after each bootstrap). Oracles: the encrypted run with real
(sparse-slot) bootstraps equals PackedProgram.simulate within the bootstrap's modelled error; the placement of the
packed level DAG equals exhaustive search; simulate models the EvalMod range and the error."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import hemlp
from hemlp.errors import EncodingError, LevelError, MissingKeyError, UnsupportedError
from hemlp.layouts.packed import PackedProgram
from hemlp.layouts.packed_bootstrap import packed_level_dag
from hemlp.planner.bootstrap_placement import BootstrapCost, place_bootstraps, place_bootstraps_exhaustive
from hemlp.planner.layouts import packed_step_seconds
from hemlp.runtime.artifacts import EvalKeys
from tests.layouts.conftest import without_placement

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.filterwarnings("ignore::hemlp.fhe.InsecureParametersWarning"),
              pytest.mark.filterwarnings("ignore::hemlp.compiler.calibration.CalibrationWarning")]


def mlp():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.SiLU(), torch.nn.Linear(8, 8), torch.nn.Tanh(),
                               torch.nn.Linear(8, 3))


class ResCNN(torch.nn.Module):
    """conv -> tanh -> [conv -> tanh] + skip -> stride-2 conv -> tanh -> linear (a residual add and a stride)."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(1, 2, 3, padding=1)
        self.c2 = torch.nn.Conv2d(2, 2, 3, padding=1)
        self.c3 = torch.nn.Conv2d(2, 2, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(2 * 3 * 3, 3)

    def forward(self, x):
        h = torch.tanh(self.c1(x))
        h = h + torch.tanh(self.c2(h))
        h = torch.tanh(self.c3(h))
        return self.fc(h.flatten(1))


def compile_quiet(*a, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return hemlp.compile(*a, **kw)


@pytest.fixture(scope="module")
def mlp_model():
    rng = np.random.default_rng(11)
    xc, x = rng.uniform(-1, 1, (48, 6)), rng.uniform(-0.9, 0.9, (2, 6))
    cm = compile_quiet(mlp(), xc, batch_size=2, bootstrap=True, allow_insecure=True, activation_degree=3,
                       layout="packed", preset="test-N10-boot")
    return cm, xc, x


@pytest.fixture(scope="module")
def cnn_model():
    torch.manual_seed(0)
    xc = np.random.default_rng(5).uniform(-1, 1, (64, 1, 6, 6))
    cm = compile_quiet(ResCNN(), xc, bootstrap=True, allow_insecure=True, activation_degree=3, layout="packed",
                       preset="test-N10-boot")
    return cm, xc, xc[:1]


def test_the_plan_places_bootstraps_in_layout_p_and_prints_them(mlp_model):
    cm, _, _ = mlp_model
    info = cm.plan.info
    assert cm.layout == "packed" and info["preset"] == "test-N10-boot"
    b = info["bootstrap"]
    # 3 levels after a bootstrap; the layers need 1 + 2 + 1 + 2 + 1 = 7
    assert b["levels_after"] == 3 and info["depth"] == 7 > b["levels_after"]
    assert len(b["placements"]) >= 2
    for p in b["placements"]:
        assert p["level_after"] == 3 and 0 <= p["level_before"] < 3 and p["ciphertexts"] == 1 and p["seconds"] > 0
    assert b["total_seconds"] == pytest.approx(b["boot_seconds"] + b["layer_seconds"])
    # per(8) values of 2 interleaved samples repeat every 16 slots: a 16-slot (sparse) bootstrap
    assert b["boot_slots"] == 16 == cm.layout_impl.program.boot_slots
    text = str(cm.plan)
    assert "# bootstrapping:" in text and "each lands at level 3" in text and "with 16 slots" in text
    first = b["placements"][0]
    assert f"bootstrap {first['value']} before {first['before']}: level {first['level_before']} -> 3" in text
    for s in cm.steps:
        assert 0 <= s.level_out <= 3, s


def test_mlp_encrypted_with_real_bootstraps_equals_simulate(mlp_model):
    cm, _, x = mlp_model
    sim = cm.simulate(x)
    sk, ek = cm.keygen()
    assert ek.bootstrap_keys is not None and ek.bootstrap_keys.params.slots == 16
    out = cm.run(cm.encrypt(x, sk), ek, threads=1)
    y = cm.decrypt(out, sk)
    # 44 fresh key sets / encryptions: |y - sim| between 2^-20.52 and 2^-20.39 (the modelled error is 2^-20 x c per
    # bootstrap, drawn independently of the real one); asserted with 3 bits of margin
    assert np.max(np.abs(y - sim)) < 2.0 ** -17
    assert np.array_equal(y.argmax(1), sim.argmax(1))
    assert np.max(np.abs(sim - cm.reference(x))) < 0.05
    assert any("#boot" in k for k in out.layer_seconds)
    # the plan's estimate per step names the steps the run timed, and sums (with the client's input encryption)
    # to the estimate the plan prints: a run's time can be put beside its estimate step by step
    lay = cm.layout_impl
    est = lay.step_estimates()
    assert set(est) == set(out.layer_seconds) and all(v >= 0 for v in est.values())
    assert sum(v for k, v in est.items() if "#boot" in k) == pytest.approx(cm.plan.info["bootstrap"]["boot_seconds"])
    first = lay.program.steps[0]
    assert sum(est.values()) + packed_step_seconds(lay.program, first, cm.params, first.src.level_out) * \
        lay.program.groups == pytest.approx(lay.estimate())
    with pytest.raises(MissingKeyError, match="bootstrapping keys"):
        cm.run(cm.encrypt(x, sk), EvalKeys(cm.model_id, ek.relin_key, ek.galois_keys))


def test_residual_cnn_encrypted_with_real_bootstraps_equals_simulate(cnn_model):
    cm, _, x = cnn_model
    b = cm.plan.info["bootstrap"]
    assert cm.plan.info["depth"] > b["levels_after"] and len(b["placements"]) >= 2
    adds = [s for s in cm.steps if s.op == "add"]
    assert len(adds) == 1 and adds[0].level_out >= 0
    sim = cm.simulate(x)
    sk, ek = cm.keygen()
    y = cm.decrypt(cm.run(cm.encrypt(x, sk), ek, threads=1), sk)
    # 20 fresh key sets / encryptions: between 2^-19.51 and 2^-19.44; asserted with 3 bits of margin
    assert np.max(np.abs(y - sim)) < 2.0 ** -16.4
    assert np.max(np.abs(sim - cm.reference(x))) < 0.05


def test_simulate_models_the_bootstrap_error_and_range(mlp_model):
    cm, _, x = mlp_model
    a, b = cm.simulate(x), cm.simulate(x)
    assert np.array_equal(a, b)                    # seeded per step
    prog = cm.layout_impl.program
    plain = PackedProgram([s if s.op != "bootstrap" else type(s)("alias", s.out, s.inputs, s.rows,
                                                                 level_in=s.level_in, level_out=s.level_out)
                           for s in cm.steps], prog.slots, 2).simulate(x)
    assert 2.0 ** -30 < np.max(np.abs(a - plain)) < 2.0 ** -15
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")            # the activations' range warnings
        with pytest.raises(EncodingError, match="bootstrap .*coefficient"):
            cm.simulate(x * 40)


def test_packed_placement_equals_exhaustive_search(mlp_model, cnn_model):
    cm, _, _ = mlp_model
    params = cm.context.params
    boot = BootstrapCost(3, 0.02)
    prog = PackedProgram(without_placement(cm.steps), params.N // 2, 2)
    nodes = packed_level_dag(prog, params, 3)
    assert [n.depth for n in nodes] == [0, 1, 2, 1, 2, 1, 0]
    assert all(n.cost_per_limb > 0 for n in nodes[1:-1]) and all(n.ciphertexts == 1 for n in nodes[1:])
    head = nodes[:4] + [type(nodes[-1])("y", "output", (nodes[3].name,))]   # input, linear, act, linear, output
    for nn in (head,):
        dp, ex = place_bootstraps(nn, boot), place_bootstraps_exhaustive(nn, boot)
        assert dp.total == pytest.approx(ex.total, rel=1e-12)
    # the whole MLP is too large to enumerate; the compiled placement is the DP's, and its cost is no worse than
    # bootstrapping before every layer
    cm2, _, _ = cnn_model
    prog2 = PackedProgram(without_placement(cm2.steps), params.N // 2, 1)
    nodes2 = packed_level_dag(prog2, params, 3)
    assert any(n.op == "add" for n in nodes2)
    place_bootstraps(nodes2, boot)


def test_packed_level_dag_prices_every_level_and_the_placement_sums_them(cnn_model):
    """Key switches are not linear in the limbs (hemlp.planner.keyswitch_cost), so each node carries its step's
    estimate at every level a bootstrap leaves, and a placement's layer seconds are the steps' estimates at the
    levels it reads them at (not a per-limb price scaled from the top level)."""
    cm, _, _ = cnn_model
    params = cm.context.params
    L = 3
    prog = PackedProgram(without_placement(cm.steps), params.N // 2, 1)
    nodes = packed_level_dag(prog, params, L)
    for s, nd in zip(prog.steps, nodes):
        assert len(nd.level_costs) == L + 1
        for lv in range(L + 1):
            assert nd.cost(lv) == pytest.approx(packed_step_seconds(prog, s, params, lv), rel=1e-12)
    # a rotating step costs more per limb at low levels (the special primes' share of each key switch)
    rot = [nd for s, nd in zip(prog.steps, nodes) if s.op == "matvec" and s.rotations()]
    assert rot and all(nd.cost(1) / 2 > nd.cost(L) / (L + 1) for nd in rot)
    placement = place_bootstraps(nodes, BootstrapCost(L, 0.05))
    by_name = {s.out: s for s in prog.steps}
    for n in placement.nodes:         # an add reads at the higher of its operands' levels
        assert n.seconds == pytest.approx(packed_step_seconds(prog, by_name[n.name], params, max(n.reads)), rel=1e-12)
    assert placement.op_seconds == pytest.approx(sum(n.seconds for n in placement.nodes), rel=1e-12)


def test_exhausted_levels_without_bootstrap_are_a_level_error():
    xc = np.random.default_rng(11).uniform(-1, 1, (48, 6))
    with pytest.raises(LevelError, match="levels"):
        compile_quiet(mlp(), xc, batch_size=2, allow_insecure=True, activation_degree=3, layout="packed",
                      preset="test-N12-d6")
    with pytest.raises(UnsupportedError, match="layout \\(P\\)"):
        compile_quiet(mlp(), xc, batch_size=2, allow_insecure=True, activation_degree=3, layout="packed",
                      bootstrap=True, preset="test-N10-boot", mambo=True)


def test_save_and_load_keep_the_packed_bootstrapped_plan(mlp_model, tmp_path):
    cm, _, x = mlp_model
    cm.save(tmp_path / "m")
    loaded = hemlp.load(tmp_path / "m", allow_insecure=True)
    assert loaded.model_id == cm.model_id and loaded.layout == "packed"
    assert "# bootstrapping:" in str(loaded.plan) and loaded.layout_impl.program.boot_slots == 16
    assert np.array_equal(loaded.simulate(x), cm.simulate(x))
