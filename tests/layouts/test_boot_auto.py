"""layout="auto" with bootstrap=True (hemlp.layouts.boot_choice): layouts (A), (P) and (A′) each planned with their
own bootstrap placement (layout (A′): refreshes at its activation segments, tests/layouts/test_mlwe_bootstrap.py) and
compared by the planner's estimates *including the bootstraps*, among those whose keys fit the key-memory limit; the
plan prints the estimates, the reason and the chosen pipeline's use of batched bootstrapping and MaMBo. Auto does
not compare layout (C) (encrypted weights). test-N10-boot (compile only)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import hemlp
from hemlp.bootstrap import BootParams, BootstrapKeys
from hemlp.errors import UnsupportedError
from hemlp.fhe import Context, Params
from hemlp.layouts import boot_choice
from hemlp.layouts.boot_choice import boot_key_bytes, eval_key_bytes

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.filterwarnings("ignore::hemlp.fhe.InsecureParametersWarning"),
              pytest.mark.filterwarnings("ignore::hemlp.compiler.calibration.CalibrationWarning")]


class ResCNN(torch.nn.Module):
    """conv -> tanh -> [conv -> tanh] + skip -> stride-2 conv -> tanh -> linear."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.c1 = torch.nn.Conv2d(1, 2, 3, padding=1)
        self.c2 = torch.nn.Conv2d(2, 2, 3, padding=1)
        self.c3 = torch.nn.Conv2d(2, 2, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(2 * 3 * 3, 3)

    def forward(self, x):
        h = torch.tanh(self.c1(x))
        h = h + torch.tanh(self.c2(h))
        h = torch.tanh(self.c3(h))
        return self.fc(h.flatten(1))


def mlp():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.SiLU(), torch.nn.Linear(8, 8), torch.nn.Tanh(),
                               torch.nn.Linear(8, 3))


CNN_X = np.random.default_rng(5).uniform(-1, 1, (64, 1, 6, 6))
MLP_X = np.random.default_rng(11).uniform(-1, 1, (48, 6))


def compile_boot(model, x, batch_size, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return hemlp.compile(model, x, batch_size=batch_size, bootstrap=True, allow_insecure=True,
                             activation_degree=3, preset="test-N10-boot", **kw)


def chosen_by_estimates(cm) -> str:
    """The layout the printed estimates select: the lowest time among (A), (P) and (A′) where it can run the model
    (keys far below the limit)."""
    est = {k: v for k, v in cm.plan.info["layout_estimates"].items() if isinstance(v, float)}
    assert {"batch", "packed"} <= set(est) <= {"batch", "packed", "mlwe"}
    return min(est, key=est.get)


def test_auto_picks_packed_for_one_image_of_a_conv_net():
    cm = compile_boot(ResCNN(), CNN_X, 1)
    info = cm.plan.info
    est = info["layout_estimates"]
    # both layouts planned with their own placement, estimates include the bootstraps
    a, p = compile_boot(ResCNN(), CNN_X, 1, layout="batch"), compile_boot(ResCNN(), CNN_X, 1, layout="packed")
    assert est["batch"] == pytest.approx(a.layout_impl.estimate()) and est["packed"] == pytest.approx(
        p.layout_impl.estimate())
    assert est["batch"] > a.plan.info["bootstrap"]["layer_seconds"]     # the bootstraps are counted
    assert cm.layout == chosen_by_estimates(cm) == "packed"   # one image: a few packed ciphertexts to refresh
    assert [s.out for s in cm.steps if s.op == "bootstrap"] == [s.out for s in p.steps if s.op == "bootstrap"]
    assert est["mlwe"].startswith("not possible") and "residual add" in est["mlwe"]     # (A′) runs chains only
    text = str(cm.plan)
    assert "planner estimates (s per batch): batch " in text and "-> layout packed (bootstraps included: (A) " in text
    assert f"{est['packed']:.3g} s" in info["layout_reason"] and f"{est['batch']:.3g} s" in info["layout_reason"]


def test_auto_picks_batch_for_a_large_mlp_batch():
    cm = compile_boot(mlp(), MLP_X, 4096)
    assert cm.layout == chosen_by_estimates(cm) == "batch"   # 8 full chunks: (P) would run 64 groups
    assert cm.batch_size == 4096 and "the cheapest" in cm.plan.info["layout_reason"]
    # and a single sample of the same MLP: (P) (fewer, sparse bootstraps)
    one = compile_boot(mlp(), MLP_X, 1)
    assert one.layout == chosen_by_estimates(one) == "packed"


def test_auto_keeps_to_the_key_memory_limit(monkeypatch):
    cm = compile_boot(mlp(), MLP_X, 4096)
    a = cm.layout_impl
    p = compile_boot(mlp(), MLP_X, 4096, layout="packed").layout_impl
    ka, kp = eval_key_bytes(a), eval_key_bytes(p)
    assert kp < ka           # (P)'s bootstrapping keys are for its sparse period; (A)'s batched keys are larger
    monkeypatch.setattr(boot_choice, "MAX_BOOT_EVAL_KEY_BYTES", (ka + kp) / 2)
    cm2 = compile_boot(mlp(), MLP_X, 4096)
    assert cm2.layout == "packed" and "batch's keys exceed" in cm2.plan.info["layout_reason"]
    monkeypatch.setattr(boot_choice, "MAX_BOOT_EVAL_KEY_BYTES", kp / 2)    # neither fits: the smaller keys
    cm3 = compile_boot(mlp(), MLP_X, 4096)
    assert cm3.layout == "packed" and "no layout's keys fit" in cm3.plan.info["layout_reason"]


def test_auto_without_a_batch_size_or_with_layout_a_options_is_layout_a():
    assert compile_boot(mlp(), MLP_X, None).layout == "batch"      # as without bootstraps: the slots filled
    cm = compile_boot(mlp(), MLP_X, 1, mambo=True)                  # MaMBo is a layout (A) pipeline
    assert cm.layout == "batch" and "layout (A) options" in cm.plan.info["layout_estimates"]["packed"]


def test_layout_a_prime_bootstraps_chains_when_asked_and_names_the_layouts_for_the_rest():
    cm = compile_boot(mlp(), MLP_X, 48, layout="mlwe")
    assert cm.layout == "mlwe" and not cm.layout_impl.bootstrapped     # this chain fits the levels: no refresh
    with pytest.raises(UnsupportedError, match="residual add: use layout='batch'"):
        compile_boot(ResCNN(), CNN_X, 1, layout="mlwe")


def test_bootstrap_key_estimate_equals_generated_keys():
    """The planner's key bytes for a (sparse) single bootstrap equal the generated keys' memory exactly."""
    params = Params.preset("test-N10-boot")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ctx = Context(params, allow_insecure=True)
    sk, _ = ctx.keygen()
    cm = compile_boot(ResCNN(), CNN_X, 1, layout="packed")
    slots = cm.layout_impl.program.boot_slots
    assert slots < params.N // 2          # a sparse bootstrap
    keys = BootstrapKeys.generate(ctx, sk, BootParams.for_context(ctx, slots=slots))
    assert boot_key_bytes(cm.layout_impl) == keys.memory_bytes
    full = BootstrapKeys.generate(ctx, sk, BootParams.for_context(ctx))
    assert boot_choice.single_key_bytes(params, params.N // 2) == full.memory_bytes


@pytest.mark.parametrize("layout,model,x,batch", [("auto", "cnn", CNN_X, 1), ("auto", "mlp", MLP_X, 4096),
                                                  ("batch", "cnn", CNN_X, 4), ("packed", "mlp", MLP_X, 2),
                                                  ("mlwe", "mlp", MLP_X, 48), ("blocked", "mlp", MLP_X, 48)])
def test_bootstrap_planners_reuse_compiles_value_peaks(monkeypatch, layout, model, x, batch):
    """compile hands its own plaintext pass's value peaks to the bootstrap planners (the output's peak, the
    bootstrapped values', layout (P)'s features): the same plan as when every planner measures them itself."""
    import hemlp.model as hm

    net = ResCNN() if model == "cnn" else mlp()
    kw = dict(encrypted_weights=True) if layout == "blocked" else dict(layout=layout)
    shared = compile_boot(net, x, batch, **kw)
    real = hm.plan_with_bootstraps
    monkeypatch.setattr(hm, "plan_with_bootstraps", lambda *a: real(*a[:5]))       # peaks=None: measured again
    alone = compile_boot(net, x, batch, **kw)

    def text(cm):
        return "\n".join(line for line in str(cm.plan).splitlines() if "compiled in" not in line)

    def factors(cm):
        return [(s.out, s.info.get("scale_factor"), s.info.get("noise_bits")) for s in cm.steps
                if s.op in ("bootstrap", "mambo")]

    assert text(shared) == text(alone) and shared.model_id == alone.model_id
    assert factors(shared) == factors(alone)
    assert shared.plan.info.get("noise_bound_log2") == alone.plan.info.get("noise_bound_log2")
    if shared.layout != "mlwe":          # (A') fits this chain without a refresh; the others place bootstraps
        assert factors(shared)


@pytest.mark.parametrize("model,x,batch", [("cnn", CNN_X, 1), ("cnn", CNN_X, 600), ("mlp", MLP_X, 1),
                                           ("mlp", MLP_X, 4096)])
def test_layout_a_memory_floor_is_below_its_planned_estimate(model, x, batch):
    """batch_memory_floor (what "auto" checks before planning layout (A)'s bootstraps) never exceeds the server
    memory estimate of the layout (A) plan that planning makes, so passing over (A) on it loses no plan that fits."""
    net = ResCNN() if model == "cnn" else mlp()
    a = compile_boot(net, x, batch, layout="batch", server_memory=None)
    lay = a.layout_impl
    floor, why = boot_choice.batch_memory_floor(a.layout_impl.steps, lay.params.N, lay.chunks)
    assert 0 < floor <= boot_choice.server_bytes(lay) and "input ciphertexts" in why


def test_auto_passes_over_layout_a_below_its_memory_floor(monkeypatch):
    """With a budget under layout (A)'s floor, "auto" records (A) as not possible without planning its bootstraps
    (its planner is not called) and plans (P) as layout="packed" does. (The floor is set above a 1 TB budget here:
    at this test preset no plan's (A) floor exceeds (P)'s whole estimate.)"""
    from hemlp.layouts import batch_bootstrap

    full = compile_boot(ResCNN(), CNN_X, 1, layout="packed", server_memory=None)
    calls = []
    real = batch_bootstrap.plan_bootstrapped
    monkeypatch.setattr(batch_bootstrap, "plan_bootstrapped", lambda *a, **k: calls.append(1) or real(*a, **k))
    cm = compile_boot(ResCNN(), CNN_X, 1, server_memory=10 ** 12)
    assert calls and cm.layout == "packed"                     # below the floor: (A) planned, (P) cheaper
    calls.clear()
    monkeypatch.setattr(boot_choice, "batch_memory_floor", lambda steps, N, chunks: (2 * 10 ** 12, "a test floor"))
    cm = compile_boot(ResCNN(), CNN_X, 1, server_memory=10 ** 12)
    assert not calls and cm.layout == "packed"
    assert cm.plan.info["layout_estimates"]["batch"].startswith("not possible: at least ~1.86e+03 GiB of server "
                                                                "memory with layout batch (a test floor)")
    assert [(s.op, s.out, s.level_out) for s in cm.steps] == [(s.op, s.out, s.level_out) for s in full.steps]


def deep_mlp():
    """Five linear layers, four ReLUs (degree 3): the chain layout (A′) refreshes at its activation segments
    (tests/layouts/test_mlwe_bootstrap.py's model)."""
    from tests.compiler.conftest import mlp as chain

    return chain(act=torch.nn.ReLU, dims=(8, 16, 16, 16, 16, 4), seed=4)


DEEP_X = np.random.default_rng(5).uniform(-0.8, 0.9, (40, 8))


@pytest.mark.parametrize("batch", [40, 256])
def test_auto_picks_layout_a_prime_when_its_estimate_is_lowest(batch):
    """A chain of dense layers at a batch below the slots: (A′) refreshes k = N/B' features per ciphertext with no
    SlotToCoeff, its estimate (bootstraps included) is the lowest of the three and its keys fit, so "auto" takes it:
    the plan layout="mlwe" makes (same steps, refreshes and keys), the reason naming its pipeline."""
    from hemlp.layouts.mlwe_refresh import refresh_key_bytes

    cm = compile_boot(deep_mlp(), DEEP_X, batch)
    est = cm.plan.info["layout_estimates"]
    forced = compile_boot(deep_mlp(), DEEP_X, batch, layout="mlwe")
    assert set(k for k, v in est.items() if isinstance(v, float)) == {"batch", "packed", "mlwe"}
    assert est["mlwe"] == pytest.approx(forced.layout_impl.estimate())
    assert est["mlwe"] < min(est["batch"], est["packed"]) and cm.layout == chosen_by_estimates(cm) == "mlwe"
    assert [(s.op, s.out, s.level_out) for s in cm.steps] == [(s.op, s.out, s.level_out) for s in forced.steps]
    assert cm.layout_impl.bootstrapped and sum(s.op == "bootstrap" for s in cm.steps) == 2
    # its keys, as the key limit counts them: the refresh keys of its batch size k and its ModPack / rotation keys
    lay = cm.layout_impl
    assert boot_key_bytes(lay) == refresh_key_bytes(lay.params, lay.refresh_k) == cm.plan.info["bootstrap"]["key_bytes"]
    assert eval_key_bytes(lay) < boot_choice.MAX_BOOT_EVAL_KEY_BYTES
    why = cm.plan.info["layout_reason"]
    assert "(A') " in why and "the cheapest" in why and "(A')'s pipeline: " in why and "MaMBo's arrangement" in why
    k = lay.refresh_k
    assert (f"batched bootstrapping k={k} on 2 of 2" in why) if k > 1 else ("batched bootstrapping not used" in why)


def test_auto_passes_over_layout_a_prime_when_its_keys_exceed_the_limit(monkeypatch):
    """(A′)'s ModPack, rotation and refresh keys count in the key limit: under a limit just below them, "auto" takes
    the cheapest layout whose keys fit and says why."""
    cm = compile_boot(deep_mlp(), DEEP_X, 256)
    est = cm.plan.info["layout_estimates"]
    keys = {name: eval_key_bytes(compile_boot(deep_mlp(), DEEP_X, 256, layout=name).layout_impl)
            for name in ("batch", "packed", "mlwe")}
    below = [k for k in keys if keys[k] < keys["mlwe"]]
    assert cm.layout == "mlwe" and below       # here (P)'s sparse bootstrapping keys
    monkeypatch.setattr(boot_choice, "MAX_BOOT_EVAL_KEY_BYTES", (max(keys[k] for k in below) + keys["mlwe"]) / 2)
    again = compile_boot(deep_mlp(), DEEP_X, 256)
    why = again.plan.info["layout_reason"]
    assert again.layout == min(below, key=est.get) and "'s keys exceed" in why
    assert "mlwe" in why.split("'s keys exceed")[0].split("; ")[-1]


def test_the_reason_says_why_batched_bootstrapping_and_mambo_are_or_are_not_used():
    """The chosen plan's pipeline in the reason, from the lowering's own reasons: layout (A) batched with MaMBo not
    paying or not applicable, layout (P)'s single sparse bootstraps (nothing to batch, no PCMM to fuse)."""
    a = compile_boot(mlp(), MLP_X, 4096)
    why, low = a.plan.info["layout_reason"], a.plan.info["bootstrap"]
    assert a.layout == "batch" and "(A)'s pipeline: " in why
    if low.get("k", 1) > 1:
        assert f"batched bootstrapping k={low['k']}" in why and low["lowering"] in why
    else:
        assert "batched bootstrapping not used" in why and low["lowering"] in why
    fused = [r for r in low["placements"] if r["kind"] == "mambo"]
    assert (f"MaMBo on {len(fused)} of" in why) if fused else ("MaMBo not used: " in why)
    if not fused:        # each placement's own reason, e.g. "not the output of a dense layer read once"
        assert any(r.get("reason", "").split("; ")[-1] in why for r in low["placements"])
    p = compile_boot(ResCNN(), CNN_X, 1)
    why = p.plan.info["layout_reason"]
    assert p.layout == "packed" and "(P)'s pipeline: batched bootstrapping not used" in why
    assert "nothing to batch" in why and "MaMBo not used" in why


def test_the_choice_follows_the_cost_profile(tmp_path, monkeypatch):
    """The same model and batch under a cost profile (HEMLP_COST_PROFILE: a profile file, hemlp.planner.cost_model)
    whose MLWE multiply-accumulate costs 2000x the packaged table's (a small share of (A′)'s layers here, whose DFTs
    and refreshes dominate): (A′)'s estimate is no longer the lowest and "auto" takes the cheapest of the others; the
    estimates of (A) and (P), which run no MLWE product, do not move."""
    from dataclasses import replace

    from hemlp.planner import cost_model
    from hemlp.planner.cost_model import packaged_profile, reset_profile_cache, save_profile

    before = compile_boot(deep_mlp(), DEEP_X, 256)
    base = packaged_profile("avx512")
    costly = replace(base, unit_costs=dict(base.unit_costs, mlwe_mac=2000 * base.unit_costs["mlwe_mac"]))
    monkeypatch.setenv(cost_model.PROFILE_ENV, str(save_profile(costly, tmp_path / "mlwe_x2000.json")))
    reset_profile_cache()
    try:
        after = compile_boot(deep_mlp(), DEEP_X, 256)
    finally:
        monkeypatch.undo()
        reset_profile_cache()
    e0, e1 = before.plan.info["layout_estimates"], after.plan.info["layout_estimates"]
    assert before.layout == "mlwe" and e1["mlwe"] > e0["mlwe"]
    assert e1["batch"] == pytest.approx(e0["batch"]) and e1["packed"] == pytest.approx(e0["packed"])
    assert after.layout == chosen_by_estimates(after) == min(("batch", "packed"), key=e1.get)
    assert e1["mlwe"] > e1[after.layout] and "mlwe_x2000.json" in str(after.plan)
