"""Layout (C) with bootstraps: compile(..., encrypted_weights=True, bootstrap=True) places bootstraps in a chain of
block CCMMs (3 levels each) and activations, the client encrypts each layer's weights at the level its input has
after the placement, and every block is refreshed by a sparse single bootstrap. Checked against simulate (which models
each bootstrap), torch, the leveled plan's bits where no bootstrap intervenes, and the typed errors."""
import warnings

import numpy as np
import pytest

import hemlp
from hemlp.errors import EncodingError, MissingKeyError, UnsupportedError
from hemlp.runtime.artifacts import EvalKeys
from tests.compiler.conftest import mlp, torch_out
from tests.layouts.conftest import without_placement

torch = pytest.importorskip("torch")

#: five 8x8-ish layers with x^2 between: 19 levels of CCMMs and squares against test-N10-boot's 3 after a bootstrap
DIMS = (8, 8, 8, 8, 8, 4)


def compile_c(x, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return hemlp.compile(mlp(dims=DIMS, seed=2), x, batch_size=8, encrypted_weights=True, bootstrap=True,
                             allow_insecure=True, preset="test-N10-boot", **kw)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)
    return rng.uniform(-0.8, 0.9, (8, 8)) + rng.uniform(-0.1, 0.2, 8)     # asymmetric per feature


@pytest.fixture(scope="module")
def cm(data):
    return compile_c(data)


def run(cm, x):
    sk, ek = cm.keygen()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = cm.run(cm.encrypt(x, sk), ek, weights=cm.encrypt_weights(sk))
    return cm.decrypt(out, sk), sk, ek


def test_bootstraps_are_placed_between_block_ccmms_and_printed(cm):
    boots = [s for s in cm.steps if s.op == "bootstrap"]
    assert cm.layout == "blocked" and len(boots) >= 4          # 19 levels of work, 3 levels after each bootstrap
    slots = cm.layout_impl.program.slots
    for s in boots:
        assert s.level_out == 3 and s.info["order"] == "cts_first" and s.info["slots"] == slots
    # every layer's input at the level its weights are encrypted at (<= what a bootstrap leaves)
    for L in cm.layout_impl.program.layers:
        assert L.step.level_in - 3 >= 0 and L.step.level_in <= 3
    text = str(cm.plan)
    assert "# bootstrapping:" in text and "layout (C): each bootstrap refreshes every block" in text
    assert "bootstrapping keys" in text and "ccmm_blocks(" in text
    assert cm.plan.info["bootstrap"]["boot_slots"] == slots


def test_level_dag_prices_every_level_with_its_key_switches(cm):
    """Each node carries its step's estimate at every level: at the top level the chain plan's cost, below it the
    key switches priced at that level (more per limb as the special primes' share grows), so the placement's layer
    seconds are the steps' estimates at the levels it reads them at."""
    from hemlp.layouts.blocked_bootstrap import blocked_level_dag
    from hemlp.planner.bootstrap_placement import BootstrapCost, place_bootstraps

    prog, params = cm.layout_impl.program, cm.context.params
    nodes = blocked_level_dag(prog, without_placement(cm.steps), params)
    top = params.max_level
    ops = [nd for nd in nodes if nd.op == "op" and nd.depth > 0]
    assert ops
    for nd in ops:
        assert len(nd.level_costs) == top + 1
        assert nd.cost(top) == pytest.approx(nd.cost_per_limb * (top + 1), rel=1e-12)   # the chain plan's price
        assert nd.cost(0) > nd.cost_per_limb                                               # a key switch at one limb
    placement = place_bootstraps(nodes, BootstrapCost(3, 0.05))
    by_name = {nd.name: nd for nd in nodes}
    for n in placement.nodes:
        assert n.seconds == pytest.approx(by_name[n.name].cost(max(n.reads)), rel=1e-12)
    assert placement.op_seconds == pytest.approx(sum(n.seconds for n in placement.nodes), rel=1e-12)


def test_encrypted_equals_simulate_and_torch(cm, data):
    y, _, _ = run(cm, data)
    ys = cm.simulate(data)
    # measured 2^-19.51 .. 2^-19.53 over 24 fresh encryptions (keys, weights, input): 5 bits of margin
    assert np.max(np.abs(y - ys)) < 2.0 ** -14 * max(1.0, np.max(np.abs(ys)))
    yt = torch_out(mlp(dims=DIMS, seed=2), data)
    assert np.max(np.abs(ys - yt)) < 2.0 ** -10 * max(1.0, np.max(np.abs(yt)))     # measured 2^-19.5
    assert np.array_equal(y.argmax(1), yt.argmax(1))


def test_saved_model_and_keys_run_the_same_bits(cm, data, tmp_path):
    sk, ek = cm.keygen()
    # the plan's bootstrapping key memory, estimated before any key existed, is what keygen made
    assert cm.plan.info["bootstrap"]["key_bytes"] == ek.bootstrap_keys.memory_bytes
    assert "bootstrapping keys 0.02 GiB in memory" in str(cm.plan)
    ct, w = cm.encrypt(data, sk), cm.encrypt_weights(sk)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = cm.run(ct, ek, weights=w)
        cm.save(tmp_path / "m")
        ek.save(tmp_path / "ek.bin", cm.context)
        cm2 = hemlp.load(tmp_path / "m", allow_insecure=True)
        out = cm2.run(ct, EvalKeys.load(tmp_path / "ek.bin", cm2), weights=w)
    assert all(p.to_bytes() == q.to_bytes() for p, q in zip(ref.ctm.cts, out.ctm.cts, strict=True))


def test_errors(cm, data):
    sk, ek = cm.keygen()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        no_boot = EvalKeys(cm.model_id, ek.relin_key, ek.galois_keys)
        with pytest.raises(MissingKeyError, match="bootstrapping keys"):
            cm.run(cm.encrypt(data, sk), no_boot, weights=cm.encrypt_weights(sk))
        with pytest.raises(UnsupportedError, match="layout \\(A\\) options"):
            compile_c(data, mambo=True)
        # inputs far outside the compiled range: the bootstrap's range check, never wrapped-around numbers
        with pytest.raises(EncodingError, match="bootstrap"):
            cm.simulate(data * 40)
