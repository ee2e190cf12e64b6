"""Layout (A′) with bootstraps: compile(..., layout="mlwe", bootstrap=True) refreshes activation segments, the
refresh being the segment's CoeffToSlot run inside an S2C-first bootstrap (MamboBootstrapper.refresh_coefficients).
Checked: the refresh's slots against numpy (a bit-reversed CoeffToSlot of the coefficients), the greedy placement
against every subset of refresh points on real programs, the encrypted run against simulate (which models each
refresh) and torch, bit-identity after save / load, the plan text, and the typed errors."""
import itertools
import math
import warnings
from dataclasses import replace

import numpy as np
import pytest

import hemlp
from hemlp import fhe
from hemlp.bootstrap.batch import BatchBootstrapKeys
from hemlp.bootstrap.mambo import MamboBootstrapper
from hemlp.errors import EncodingError, MissingKeyError, ShapeError, UnsupportedError
from hemlp.he.special_fft import bit_reverse
from hemlp.layouts.mlwe import MlweProgram
from hemlp.layouts.mlwe_bootstrap import feasible_refreshes, greedy_refreshes
from hemlp.layouts.mlwe_refresh import refresh_key_bytes, refresh_level, refresh_params
from hemlp.runtime.artifacts import EvalKeys
from tests.compiler.conftest import mlp, torch_out

torch = pytest.importorskip("torch")

#: five linear layers, four degree-3 activations (2 levels each): 4 segments against test-N10-boot's 5 levels after
#: a refresh
DIMS = (8, 16, 16, 16, 16, 4)


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # insecure test presets, calibration on few samples
        yield


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(5)
    return rng.uniform(-0.8, 0.9, (40, 8)) + rng.uniform(-0.1, 0.3, 8)      # asymmetric per feature


def compile_a(x, dims=DIMS, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kw = dict(dict(preset="test-N10-boot", activation_degree=3), **kw)
        return hemlp.compile(mlp(act=torch.nn.ReLU, dims=dims, seed=4), x, batch_size=40, layout="mlwe",
                             bootstrap=True, allow_insecure=True, **kw)


@pytest.fixture(scope="module")
def cm(data):
    return compile_a(data)


def test_refresh_coefficients_is_a_refreshed_bit_reversed_coeff_to_slot():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ctx = fhe.Context("test-N10-boot", allow_insecure=True)
    sk, pk = ctx.keygen()
    mb = MamboBootstrapper(ctx, BatchBootstrapKeys.generate(ctx, sk, 1, refresh_params(ctx)))
    v = np.random.default_rng(2).uniform(-1, 1, ctx.N) * np.linspace(0.2, 1.0, ctx.N)
    r = bit_reverse(ctx.slots)
    want = v[r] + 1j * v[ctx.slots + r]
    for level in (0, 3):
        (out,) = mb.refresh_coefficients([ctx.encrypt(v, pk, level=level, encoding="coeff")], 2.0 ** 39)
        assert out.level == refresh_level(ctx.params) == mb.output_level and out.scale == 2.0 ** 39
        assert out.encoding == "slot" and out.is_complex
        # measured 2^-24.8 at N = 2^12
        assert np.max(np.abs(ctx.decrypt(out, sk, noise="none") - want)) < 2.0 ** -20
    with pytest.raises(ShapeError, match="coefficient-encoded"):
        mb.refresh_coefficients([ctx.encrypt(v[: ctx.slots], pk)], 2.0 ** 39)


def without_refreshes(steps) -> list:
    """The lowered steps with their bootstrap steps taken out (each reader reads the refreshed value again)."""
    src = {s.out: s.inputs[0] for s in steps if s.op == "bootstrap"}
    return [replace(s, inputs=[src.get(v, v) for v in s.inputs]) for s in steps if s.op != "bootstrap"]


def test_greedy_places_the_fewest_refreshes(data):
    """On the programs of real models (their lowered steps without the refreshes, at two DFT depths), for every
    input level, landing level and reserve: greedy_refreshes is feasible, and no subset of refresh points with fewer
    refreshes is."""
    progs = []
    for dims, deg in ((DIMS, 3), ((8, 16, 16, 16, 4), 2), ((8, 16, 16, 4), 1)):
        c = compile_a(data, dims=dims, activation_degree=deg)
        for d in (2, 3):
            progs.append(MlweProgram(without_refreshes(c.steps), c.params.N, 40, d))
    checked = 0
    for prog in progs:
        points = sum(m.kind == "cts" for m in prog.steps)
        for land, reserve, top in itertools.product(range(3, 10), (0, 1), range(0, 14)):
            subsets = [set(s) for n in range(points + 1) for s in itertools.combinations(range(points), n)]
            best = min((len(s) for s in subsets if feasible_refreshes(prog, top, land, reserve, s)), default=None)
            if best is None:
                with pytest.raises(hemlp.errors.LevelError):
                    greedy_refreshes(prog, top, land, reserve)
                continue
            got = greedy_refreshes(prog, top, land, reserve)
            assert feasible_refreshes(prog, top, land, reserve, set(got)) and len(got) == best
            checked += 1
    assert checked > 100


def test_refreshes_are_placed_and_printed(cm):
    boots = [s for s in cm.steps if s.op == "bootstrap"]
    prog = cm.mlwe
    land = refresh_level(cm.params)
    assert cm.layout == "mlwe" and len(boots) >= 2 and len(prog.refreshes) == len(boots)
    for s in boots:
        assert s.level_out == land and s.info["order"] == "s2c_first" and s.info["k"] == 1
        assert s.info["scale_factor"] >= 1 and math.log2(s.info["scale_factor"]).is_integer()
    for m in prog.steps:          # every level within the chain, the refreshes' inputs included
        assert m.level_in is not None and 0 <= m.level_out <= cm.params.max_level
    text = str(cm.plan)
    assert "# bootstrapping:" in text and "refresh (ModRaise, CoeffToSlot, EvalMod) + split" in text
    assert "+ bootstrapping keys" in text and "no SlotToCoeff at the bottom" in text
    assert f"refreshed by {len(boots)} bootstrap point(s)" in text


def test_encrypted_equals_simulate_and_torch(cm, data):
    sk, ek = cm.keygen()
    y = cm.decrypt(cm.run(cm.encrypt(data, sk), ek), sk)
    ys = cm.simulate(data)
    # measured 2^-20.5 .. 2^-21 (the refresh's ~2^-22 times c, the activations after it)
    assert np.max(np.abs(y - ys)) < 2.0 ** -15 * max(1.0, np.max(np.abs(ys)))
    yt = torch_out(mlp(act=torch.nn.ReLU, dims=DIMS, seed=4), data)
    assert np.mean(ys.argmax(1) == yt.argmax(1)) >= 0.9            # degree-3 ReLU fits: a few flips allowed
    assert np.array_equal(y.argmax(1), ys.argmax(1))


def test_a_linear_layer_feeding_a_refresh_runs_at_level_1(data):
    """Degree-2 activations: 2 DFT levels, 2 refreshes, the last linear layers before them have levels to spare; they
    run at level 1 (inputs dropped), as MaMBo runs its PCMM, and the result still equals simulate."""
    c2 = compile_a(data, activation_degree=2)
    st = c2.mlwe.steps
    feeding = [i for i, m in enumerate(st) if m.feeds_refresh]
    assert len(feeding) >= 2 and any(st[i - 1].level_out > 1 for i in feeding)
    assert all(st[i].level_in == 1 and st[i].level_out == 0 and st[i + 1].kind == "boot" for i in feeding)
    sk, ek = c2.keygen()
    y, ys = c2.decrypt(c2.run(c2.encrypt(data, sk), ek), sk), c2.simulate(data)
    assert np.max(np.abs(y - ys)) < 2.0 ** -15 * max(1.0, np.max(np.abs(ys)))      # measured 2^-20


def test_refreshes_of_several_ciphertexts_share_batched_calls(data):
    """64 hidden features at k = 16 rows per ciphertext: 4 ciphertexts per refreshed value; the planner batches them
    (the measured S2C-first ratios make k = 4 the cheapest), keygen makes keys for that k, and batched refreshes equal
    simulate as the single ones do; batch_bootstrap=False / 2 force the batch size."""
    dims = (8, 64, 64, 64, 4)
    cb = compile_a(data, dims=dims, activation_degree=2)
    boots = [s for s in cb.steps if s.op == "bootstrap"]
    assert boots and all(s.info["ciphertexts"] == 4 and s.info["k"] == 4 and s.info["kind"] == "batched"
                         and s.info["bootstraps"] == 1 for s in boots)
    assert "k = 4 ciphertexts a call (the fewest estimated seconds: k=1" in str(cb.plan)
    sk, ek = cb.keygen()
    assert ek.bootstrap_keys.k == 4 and cb.plan.info["bootstrap"]["key_bytes"] == refresh_key_bytes(cb.params, 4)
    y, ys = cb.decrypt(cb.run(cb.encrypt(data, sk), ek), sk), cb.simulate(data)
    assert np.max(np.abs(y - ys)) < 2.0 ** -15 * max(1.0, np.max(np.abs(ys)))
    for option, k in ((False, 1), (2, 2)):
        forced = compile_a(data, dims=dims, activation_degree=2, batch_bootstrap=option)
        assert {s.info["k"] for s in forced.steps if s.op == "bootstrap"} == {k}
    wrong = EvalKeys(cb.model_id, ek.relin_key, ek.galois_keys, ek.modpack_keys, forced.keygen()[1].bootstrap_keys)
    with pytest.raises(MissingKeyError, match="k = 4 \\(they hold k = 2\\)"):
        cb.run(cb.encrypt(data, sk), wrong)


def test_values_above_one_are_divided_by_c_around_the_refresh(data):
    """x^2 activations on inputs x3: the values entering the refreshes reach ~10, so each refresh divides by c >= 4
    (a re-tag) and multiplies back; the refresh error scales with c (simulate models it)."""
    x = 3 * data
    net = mlp(dims=DIMS, seed=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cq = hemlp.compile(net, x, batch_size=40, layout="mlwe", bootstrap=True, allow_insecure=True,
                           preset="test-N10-boot")
    cs = [s.info["scale_factor"] for s in cq.steps if s.op == "bootstrap"]
    assert len(cs) >= 2 and min(cs) >= 4
    sk, ek = cq.keygen()
    y = cq.decrypt(cq.run(cq.encrypt(x, sk), ek), sk)
    ys, yt = cq.simulate(x), torch_out(net, x)
    scale = max(1.0, float(np.max(np.abs(ys))))
    assert np.max(np.abs(y - ys)) < 2.0 ** -13 * scale           # measured 2^-16.8 relative (outputs up to ~32)
    assert np.max(np.abs(ys - yt)) < 2.0 ** -13 * scale and np.array_equal(y.argmax(1), yt.argmax(1))


def test_saved_model_and_keys_run_the_same_bits(cm, data, tmp_path):
    sk, ek = cm.keygen()
    assert cm.plan.info["bootstrap"]["key_bytes"] == refresh_key_bytes(cm.params)
    assert abs(ek.bootstrap_keys.memory_bytes / refresh_key_bytes(cm.params) - 1) < 0.05
    ct = cm.encrypt(data, sk)
    ref = cm.run(ct, ek)
    cm.save(tmp_path / "m")
    ek.save(tmp_path / "ek.bin", cm.context)
    cm2 = hemlp.load(tmp_path / "m", allow_insecure=True)
    assert cm2.model_id == cm.model_id and "# bootstrapping:" in str(cm2.plan)
    out = cm2.run(ct, EvalKeys.load(tmp_path / "ek.bin", cm2))
    assert all(p.to_bytes() == q.to_bytes() for p, q in zip(ref.ctm.cts, out.ctm.cts, strict=True))


def test_client_and_server_artefacts(cm, data, tmp_path):
    """The client (no weights) makes the keys, bootstrapping keys included, encrypts and decrypts; the server runs."""
    cm.save(tmp_path / "client", client=True)
    cm.save(tmp_path / "server")
    client = hemlp.load(tmp_path / "client", allow_insecure=True)
    server = hemlp.load(tmp_path / "server", allow_insecure=True)
    sk, ek = client.keygen()
    ek.save(tmp_path / "ek.bin", client.context)
    out = server.run(client.encrypt(data, sk), EvalKeys.load(tmp_path / "ek.bin", server))
    ys = cm.simulate(data)
    assert np.max(np.abs(client.decrypt(out, sk) - ys)) < 2.0 ** -15 * max(1.0, np.max(np.abs(ys)))


def test_errors(cm, data):
    sk, ek = cm.keygen()
    no_boot = EvalKeys(cm.model_id, ek.relin_key, ek.galois_keys, ek.modpack_keys)
    with pytest.raises(MissingKeyError, match="S2C-first bootstrapping keys"):
        cm.run(cm.encrypt(data, sk), no_boot)
    with pytest.raises(UnsupportedError, match="layout \\(A\\) option"):
        compile_a(data, mambo=True)
    with pytest.raises(hemlp.errors.LevelError, match="refresh leaves"):     # degree 15: 4 levels + StC + PCMM > 5
        compile_a(data, activation_degree=15)
    with pytest.raises(EncodingError, match="bootstrap"):     # far outside the compiled range: the range check
        cm.simulate(data * 40)
