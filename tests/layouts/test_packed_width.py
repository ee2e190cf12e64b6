"""Layout (P) for tensors wider than a ciphertext (hemlp.layouts.packed_split): a value of more features than the
slots is held as several ciphertexts of whole channels. Oracles: the rewritten steps compute what the original
steps compute (the lowered steps' simulation, to rounding); the encrypted run with real bootstraps equals the
layout's simulation within the plan's decryption noise, over 20 fresh key sets; the bootstrap-free path too. A model
whose input or output does not fit one ciphertext is refused before the activation search (minutes for a deep net),
naming layout (A); so is a step with no block form on a wide value."""

import numpy as np
import pytest
import torch
from torch import nn

import hemlp
from hemlp import model as hemlp_model
from hemlp.errors import UnsupportedError
from hemlp.layouts.packed import PackedProgram
from hemlp.layouts.packed_split import PART, block_count, channel_blocks, origin, split_wide_steps
from hemlp.runtime.local import simulate as simulate_rows
from tests.layouts.test_packed_bootstrap import compile_quiet

pytestmark = [pytest.mark.filterwarnings("ignore::hemlp.fhe.InsecureParametersWarning"),
              pytest.mark.filterwarnings("ignore::hemlp.compiler.calibration.CalibrationWarning")]


class ResWide(nn.Module):
    """conv 1->8 on 16x16 (2 048 features: 4 ciphertexts at test-N10-boot's 512 slots) -> tanh -> [conv 8->8 ->
    tanh] + skip -> stride-2 conv 8->8 (512: one again) -> tanh -> linear."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1)
        self.c3 = nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.fc = nn.Linear(8 * 8 * 8, 3)

    def forward(self, x):
        h = torch.tanh(self.c1(x))
        h = h + torch.tanh(self.c2(h))
        return self.fc(torch.tanh(self.c3(h)).flatten(1))


@pytest.fixture(scope="module")
def wide_model():
    torch.manual_seed(0)
    xc = np.random.default_rng(5).uniform(-1, 1, (64, 1, 16, 16))
    cm = compile_quiet(ResWide().eval(), xc, bootstrap=True, allow_insecure=True, activation_degree=3,
                       layout="packed", preset="test-N10-boot")
    return cm, xc


def test_channel_blocks_are_whole_channels_within_the_slots():
    assert channel_blocks((8, 16, 16), 512) == [(0, 512), (512, 1024), (1024, 1536), (1536, 2048)]
    assert channel_blocks((64, 32, 32), 32768) == [(0, 32768), (32768, 65536)]
    # 5 channels of 49 (padded to 64) features: 8 fit 512 slots, so one block; 12 need two of 6
    assert channel_blocks((5, 7, 7), 512) == [(0, 245)] and channel_blocks((12, 7, 7), 512) == [(0, 294), (294, 588)]
    assert channel_blocks((1300,), 512) == [(0, 433), (433, 867), (867, 1300)]
    with pytest.raises(UnsupportedError, match="one channel of a"):
        channel_blocks((2, 32, 32), 512)


def test_the_split_steps_compute_the_original_steps(wide_model):
    """The plan's values all fit 512 slots; the model's lowered steps (layout (A)'s, whole 2 048-feature values) and
    their split compute the same outputs on the calibration images, to float rounding."""
    cm, xc = wide_model
    assert all(s.rows <= 512 for s in cm.steps) and block_count("tanh", cm.steps) == 4
    assert any(s.out == f"c2{PART}0.from3" for s in cm.steps) and block_count("c3", cm.steps) == 1
    torch.manual_seed(0)
    whole = compile_quiet(ResWide().eval(), xc, allow_insecure=True, activation_degree=3, layout="batch",
                          preset="test-N12-d18").steps
    assert max(s.rows for s in whole) == 2048
    split = split_wide_steps(whole, 512)
    assert all(s.rows <= 512 for s in split) and [s.out for s in split if s.op == "output"] == ["output"]
    X = xc.reshape(len(xc), -1).T
    a = np.asarray(simulate_rows(whole, X, cm.weight_bits, bootstraps=False))
    b = np.asarray(simulate_rows(split, X, cm.weight_bits, bootstraps=False))
    assert np.max(np.abs(a - b)) < 1e-12 and np.max(np.abs(a)) > 0.1


def test_wide_residual_cnn_encrypted_with_real_bootstraps_equals_simulate(wide_model, monkeypatch):
    from hemlp.bootstrap.bootstrapper import Bootstrapper

    cm, xc = wide_model
    x = xc[:1]
    text = str(cm.plan)
    assert "(held as 4 ciphertexts of whole channels: wider than one)" in text
    assert text.count("(input map of tanh_1 folded in)") == 1
    sim = cm.simulate(x)
    assert np.max(np.abs(sim - cm.reference(x))) < 0.05
    sk, ek = cm.keygen()
    calls = []
    for name in ("bootstrap", "bootstrap_pair"):
        f = getattr(Bootstrapper, name)
        monkeypatch.setattr(Bootstrapper, name, lambda self, *a, f=f, name=name: calls.append(name) or f(self, *a))
    y = cm.decrypt(cm.run(cm.encrypt(x, sk), ek, threads=1), sk)
    # the plan's bootstrap calls are the ones made: a wide value's four blocks in two bootstrap_pair calls
    planned = [s.info["bootstraps"] for s in cm.steps if s.op == "bootstrap"]
    wide = [s for s in cm.steps if s.op == "bootstrap" and PART in s.out]
    assert len(calls) == sum(planned) and calls.count("bootstrap_pair") >= len(wide) // 2 > 0
    # 23 fresh key sets: |y - sim| between 2^-17.69 and 2^-11.98 (the plan's decryption noise leaves ~13.5 bits; a
    # wide value's four blocks refreshed by two bootstrap_pair calls); asserted with 1.4 bits of margin
    assert np.max(np.abs(y - sim)) < 2.0 ** -10.5
    assert np.array_equal(y.argmax(1), sim.argmax(1))


def test_a_wide_values_blocks_are_refreshed_together_and_its_partial_sums_spend_no_level(wide_model):
    """The placement is the unsplit program's (one decision per value, not per block): a bootstrap or a drop of a
    wide value is one per block, side by side; a split PCMM's partial products come out at its output level and
    are summed there (the same scale: no level spent aligning them)."""
    from hemlp.bootstrap.params import preset_levels_consumed
    from hemlp.planner.bootstrap_placement import BootstrapCost

    cm, _ = wide_model
    steps = cm.steps
    boot = BootstrapCost.from_params(cm.params, preset_levels_consumed("test-N10-boot"))
    assert boot.seconds_for(1) < boot.seconds_for(2) < 2 * boot.seconds_for(1)
    refreshed = [s for s in steps if s.op in ("bootstrap", "drop") and PART in s.out]
    assert any(s.op == "bootstrap" for s in refreshed)
    for s in refreshed:
        base, j = s.out.rsplit(PART, 1)
        n = block_count(s.inputs[0].rsplit(PART, 1)[0], steps)
        i = steps.index(s)
        assert [t.out for t in steps[i - int(j): i - int(j) + n]] == [f"{base}{PART}{k}" for k in range(n)]
        if s.op == "bootstrap":
            # blocks 2i and 2i + 1 in one bootstrap_pair (priced as one, on the first block's step)
            assert s.info["ciphertexts"] == 1 and s.info["value"].endswith(f"{PART}{j}")
            first = int(j) % 2 == 0
            assert s.info["bootstraps"] == (1 if first else 0)
            value = s.info["value"].rsplit(PART, 1)[0]
            assert s.info["paired_with"] == f"{value}{PART}{int(j) + (1 if first else -1)}"    # 4 blocks: 2 pairs
            assert s.info["seconds"] == (pytest.approx(boot.seconds_for(2)) if first else 0.0)
    seeds = [s.info["seed"] for s in steps if s.op == "bootstrap"]
    assert len(set(seeds)) == len(seeds)                  # each block its own simulated error
    level = {s.out: s.level_out for s in steps}
    partial = [s for s in steps if s.op == "pcmm" and origin(s.out) != s.out]
    assert partial
    for s in partial:
        assert s.level_in - s.level_out == 1
    sums = [s for s in steps if s.op == "add" and ".from" in "".join(s.inputs)]
    assert sums and all(s.level_out == min(level[i] for i in s.inputs) for s in sums)


def test_each_product_is_planned_once_per_compile(monkeypatch):
    """The bootstrap planner's program (split, before placement) and the layout's (split after it) hold the same
    block weights: the layout's program reuses the planner's products (PackedProgram's memo) instead of building
    every diagonal again."""
    calls = []
    plan_one = PackedProgram._matvec
    monkeypatch.setattr(PackedProgram, "_matvec", lambda self, s, Lin: calls.append(s.out) or plan_one(self, s, Lin))
    torch.manual_seed(0)
    xc = np.random.default_rng(5).uniform(-1, 1, (64, 1, 16, 16))
    cm = compile_quiet(ResWide().eval(), xc, bootstrap=True, allow_insecure=True, activation_degree=3,
                       layout="packed", preset="test-N10-boot")
    products = [t.out for t in cm.layout_impl.program.steps if t.op == "matvec"]
    assert len(products) == 4 + 16 + 4 + 1 and sorted(calls) == sorted(products)


def test_save_and_load_keep_the_channel_blocks(wide_model, tmp_path):
    cm, xc = wide_model
    cm.save(tmp_path / "m")
    loaded = hemlp.load(tmp_path / "m", allow_insecure=True)
    assert loaded.model_id == cm.model_id and [s.out for s in loaded.steps] == [s.out for s in cm.steps]
    assert np.array_equal(loaded.simulate(xc[:1]), cm.simulate(xc[:1]))


def test_wide_cnn_without_bootstraps():
    """The leveled path (test-N12-d18, 2 048 slots): a 16 x 16 x 16 = 4 096-feature value in two ciphertexts."""
    torch.manual_seed(1)
    model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.Tanh(), nn.Conv2d(16, 4, 3, stride=2, padding=1),
                          nn.Tanh(), nn.Flatten(), nn.Linear(4 * 8 * 8, 3)).eval()
    xc = np.random.default_rng(2).uniform(-1, 1, (48, 1, 16, 16))
    cm = compile_quiet(model, xc, batch_size=2, allow_insecure=True, activation_degree=3, layout="packed",
                       preset="test-N12-d18")
    assert cm.layout == "packed" and all(s.rows <= 2048 for s in cm.steps)
    assert [block_count(v, cm.steps) for v in ("conv2d_0", "layer1", "conv2d_2")] == [2, 2, 1]
    x = xc[:2]
    sim = cm.simulate(x)
    assert np.max(np.abs(sim - cm.reference(x))) < 0.05
    sk, ek = cm.keygen()
    y = cm.decrypt(cm.run(cm.encrypt(x, sk), ek, threads=1), sk)
    # 20 fresh key sets: |y - sim| between 2^-20.45 and 2^-17.53; asserted with 2 bits of margin
    assert np.max(np.abs(y - sim)) < 2.0 ** -15.5 and np.array_equal(y.argmax(1), sim.argmax(1))


def test_an_input_wider_than_a_ciphertext_is_refused_before_the_search(monkeypatch):
    def no_search(*a, **k):
        raise AssertionError("the activation search ran")

    monkeypatch.setattr(hemlp_model, "choose_activations", no_search)
    model = nn.Sequential(nn.Conv2d(2, 2, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(2 * 32 * 32, 3)).eval()
    x = np.random.default_rng(0).uniform(-1, 1, (4, 2, 32, 32))
    with pytest.raises(UnsupportedError) as e:          # 2 x 32 x 32 = 2048 input features > test-N10's 512 slots
        compile_quiet(model, x, layout="packed", preset="test-N10", allow_insecure=True)
    msg = str(e.value)
    assert "2048" in msg and "input" in msg and "layout='batch'" in msg


def test_a_step_with_no_block_form_on_a_wide_value_is_refused():
    """A transpose (a row permutation) of a value held in blocks: named, with layout (A)."""
    from hemlp.compiler.lower import Step
    from hemlp.step_ops import StepOp

    steps = [Step(StepOp.INPUT, "x", [], 64), Step(StepOp.PCMM, "w", ["x"], 1024, U=np.ones((1024, 64))),
             Step(StepOp.PERM, "t", ["w"], 1024, index=np.arange(1024)[::-1].copy()),
             Step(StepOp.PCMM, "y", ["t"], 4, U=np.ones((4, 1024))), Step(StepOp.OUTPUT, "out", ["y"], 4)]
    with pytest.raises(UnsupportedError, match=r"step 't' \(perm\) .* no block form: use layout='batch'"):
        split_wide_steps(steps, 512)
    assert split_wide_steps(steps, 1024) is steps


def test_the_noise_analysis_reads_the_blocks_magnitudes_from_their_whole_values(wide_model, monkeypatch):
    """A channel block's rows are its value's: the plan's noise analysis slices them out of compile's calibration
    pass (Packed.value_magnitudes) instead of running the split program again, to the same bound."""
    from hemlp.runtime import noise_analysis

    cm, xc = wide_model

    def refused(*a, **k):
        raise AssertionError("the noise analysis ran the program again")

    monkeypatch.setattr(noise_analysis, "simulate_columns", refused)
    torch.manual_seed(0)
    again = compile_quiet(ResWide().eval(), xc, bootstrap=True, allow_insecure=True, activation_degree=3,
                          layout="packed", preset="test-N10-boot")
    assert again.plan.info["noise_bound"]["source"] == "analysis"
    assert again.plan.info["noise_bound_log2"] == cm.plan.info["noise_bound_log2"]
    mags = again.layout_impl.value_magnitudes({"tanh": np.arange(2048.0)})
    assert [mags[f"tanh{PART}{j}"][0] for j in range(4)] == [0.0, 512.0, 1024.0, 1536.0]


def test_the_run_holds_a_value_until_its_last_reader():
    """peak_value_bytes (the server memory's values term): a value is held from the step that makes it until the
    last step reading it or an alias of it, as PackedRunner.run frees them: a chain a, b, c = a + b, d, e holds
    at most a, b and c at once (30 of 50), and an alias keeps its source alive."""
    from types import SimpleNamespace

    from hemlp.layouts.packed import peak_value_bytes

    def step(op, out, *inputs):
        return SimpleNamespace(out=out, inputs=list(inputs), layout=SimpleNamespace(K=1),
                               src=SimpleNamespace(op=op, out=out, inputs=list(inputs), level_out=0))

    chain = [step("input", "x"), step("poly", "a", "x"), step("poly", "b", "a"), step("add", "c", "a", "b"),
             step("poly", "d", "c"), step("poly", "e", "d"), step("output", "y", "e")]
    assert peak_value_bytes(SimpleNamespace(steps=chain), lambda level: 10) == 30
    aliased = chain[:2] + [step("alias", "a2", "a")] + [step("poly", "b", "a"), step("poly", "c", "b"),
                                                        step("add", "d", "c", "a2"), step("output", "y", "d")]
    # a lives until d reads its alias: a, b, c at once (20 had the alias not kept it)
    assert peak_value_bytes(SimpleNamespace(steps=aliased), lambda level: 10) == 30
