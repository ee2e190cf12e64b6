"""A compiled model's encrypted run on the GPU (hemlp.gpu.runner.DeviceModelRunner: layout (P)'s PackedRunner on a
DeviceContext) computes compiled.run's words.

Run here on the CPU stand-in evaluator (tests/gpu/core_backed.py: every device operation is the CPU core's), so any
operation the DeviceContext issues with other semantics than hemlp.fhe.Context's — another encoding scale, level,
key, order — changes the words and fails; each device kernel behind those operations is checked bit for bit against
the core by the golden cases on a GPU machine (test_gpu_bit_exact.py, which also runs this model on the device).
"""
import warnings

import numpy as np
import pytest

import hemlp
from hemlp.errors import UnsupportedError
from hemlp.gpu.device import DeviceSpec
from hemlp.gpu.runner import DeviceModelRunner
from tests.gpu.core_backed import CoreBackedEvaluator, patch_bootstrap

torch = pytest.importorskip("torch")
from tests.layouts.test_packed_bootstrap import ResCNN  # noqa: E402


def compile_rescnn():
    """tests/layouts/test_packed_bootstrap.py's residual CNN (conv, tanh, a residual add, a strided conv, linear) at
    test-N10-boot: BSGS products with biases, a residual add across levels, polynomials, and sparse-slot bootstraps in
    pairs; and its 64 calibration inputs."""
    torch.manual_seed(0)
    xc = np.random.default_rng(5).uniform(-1, 1, (64, 1, 6, 6))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return hemlp.compile(ResCNN(), xc, bootstrap=True, allow_insecure=True, activation_degree=3, layout="packed",
                             preset="test-N10-boot"), xc


@pytest.fixture(scope="module")
def model():
    cm, xc = compile_rescnn()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sk, ek = cm.keygen()
    return cm, sk, ek, xc[:2]


def test_the_device_runner_computes_compiled_run_s_words(model, monkeypatch):
    cm, sk, ek, x = model
    assert cm.plan.info["bootstrap"]["placements"], "the model must bootstrap (the device pipeline in the run)"
    ct = cm.encrypt(x[:1], sk)
    want = cm.run(ct, ek, threads=1)
    patch_bootstrap(monkeypatch)
    dev = CoreBackedEvaluator(cm.context, DeviceSpec.from_context(cm.context))
    timings = {}
    got = DeviceModelRunner(cm, ek, dev=dev, cache_bytes=2 ** 20).run(ct, timings)
    assert len(got.ctm.cts) == len(want.ctm.cts) and got.batch == want.batch and got.stage == "output"
    for g, w in zip(got.ctm.cts, want.ctm.cts):
        assert (g.level, g.scale, g.slots, g.encoding) == (w.level, w.scale, w.slots, w.encoding)
        assert all(np.array_equal(g.native.poly(j), w.native.poly(j)) for j in range(2))
    assert np.array_equal(cm.decrypt(got, sk), cm.decrypt(want, sk))
    assert any("#boot" in k for k in timings)


def test_other_layouts_are_refused_with_the_fix():
    rng = np.random.default_rng(1)
    net = torch.nn.Sequential(torch.nn.Linear(4, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = hemlp.compile(net, rng.uniform(-1, 1, (8, 4)), allow_insecure=True, layout="batch", batch_size=2)
        sk, ek = cm.keygen()
    with pytest.raises(UnsupportedError, match="layout='packed'"):
        DeviceModelRunner(cm, ek, dev=CoreBackedEvaluator(cm.context, DeviceSpec.from_context(cm.context)))


def test_run_with_runtime_cuda_is_the_device_runner(model, monkeypatch):
    """compiled.run(..., runtime="cuda") runs the device runner (made once per key set); with the stand-in as the
    device its output is the CPU run's."""
    from hemlp.gpu import runner as gpu_runner

    cm, sk, ek, x = model
    ct = cm.encrypt(x[1:2], sk)
    want = cm.run(ct, ek, threads=1)
    patch_bootstrap(monkeypatch)
    monkeypatch.setattr(gpu_runner, "CudaEvaluator", lambda ctx: CoreBackedEvaluator(ctx, DeviceSpec.from_context(ctx)))
    monkeypatch.setattr(gpu_runner, "free_memory_bytes", lambda: 2 ** 20)
    got = cm.run(ct, ek, runtime="cuda")
    again = cm.run(ct, ek, runtime="cuda")
    assert cm._cuda is not None and cm._cuda[0] is ek
    for out in (got, again):
        assert all(np.array_equal(g.native.poly(j), w.native.poly(j))
                   for g, w in zip(out.ctm.cts, want.ctm.cts) for j in range(2))
    assert out.layer_seconds


def test_runtime_cuda_without_a_device_says_so(model):
    from hemlp.gpu import device_info

    if device_info()["available"]:
        pytest.skip("this machine has a CUDA device")
    cm = model[0]
    sk, ek = cm.keygen()    # keys of their own: no runner of earlier keys is reused
    with pytest.raises(hemlp.errors.DeviceError):
        cm.run(cm.encrypt(model[3][:1], sk), ek, runtime="cuda")


def test_retag_with_new_polynomials_is_refused_on_a_device_context(model):
    """hemlp.he.reinterpret.retag replaces polynomials only on a Context's ciphertexts: a typed error names that, not
    an AttributeError from the device context."""
    from hemlp.errors import UnsupportedError
    from hemlp.gpu.context import DeviceContext
    from hemlp.he.reinterpret import retag

    cm, sk, ek, x = model
    dctx = DeviceContext(CoreBackedEvaluator(cm.context, DeviceSpec.from_context(cm.context)))
    ct = dctx.to_device(cm.encrypt(x[:1], sk).ctm.cts[0])
    assert retag(dctx, ct, scale=2.0 * ct.scale).scale == 2.0 * ct.scale
    with pytest.raises(UnsupportedError, match="polys"):
        retag(dctx, ct, polys=[np.zeros(4)])
