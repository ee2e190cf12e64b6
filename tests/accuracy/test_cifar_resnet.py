"""hemlp's CIFAR-10 ResNet (hemlp.models.cifar_resnet): its structure (8 convs each followed by BN and a degree-2
polynomial, average pooling only, 2 residual blocks), the depth it states, and the torch.fx frontend compiling it
with bootstraps placed by the planner (test-N12-boot, layout A) with simulate agreeing with PyTorch on random
inputs. The slow test runs the training command (train_deploy.py --resnet) on a random subset of the real JPEG
training images (skipped without the shared data folder)."""
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore::hemlp.fhe.InsecureParametersWarning")

import hemlp  # noqa: E402
from hemlp.compiler import Polynomial  # noqa: E402
from hemlp.models.cifar_resnet import RELU_FIT, CifarResNet, TrainablePoly, whitening_filters  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("HEMLP_DATA_ROOT", REPO.parent / "shared" / "data"))


def trained_stats(model, size, seed=0):
    """Non-trivial BN running statistics (a few training-mode passes on random data)."""
    torch.manual_seed(seed)
    model.train()
    with torch.no_grad():
        for _ in range(3):
            model(torch.randn(32, 3, size, size) * 1.3 + 0.2)
    return model.eval()


def test_structure_and_depth():
    m = CifarResNet()
    convs = [x for x in m.modules() if isinstance(x, torch.nn.Conv2d)]
    bns = [x for x in m.modules() if isinstance(x, torch.nn.BatchNorm2d)]
    acts = m.activations()
    assert len(convs) == len(bns) == len(acts) == 8
    assert all(isinstance(a, Polynomial) and a.coeffs == list(RELU_FIT) for a in acts)
    assert [c.out_channels for c in convs] == [16, 32, 32, 32, 64, 128, 128, 128]
    assert not any("MaxPool" in type(x).__name__ for x in m.modules())
    assert sum(isinstance(x, torch.nn.AvgPool2d) for x in m.modules()) == 4
    # 8 x (conv + degree-2 activation) + 3 average pools + the linear layer (the head's pool folded into it)
    assert m.mult_depth() == 8 * 2 + 3 + 1 == 20
    assert m.mult_depth(act_depth=5) == 8 * 6 + 4
    assert m(torch.zeros(2, 3, 32, 32)).shape == (2, 10)
    with pytest.raises(ValueError, match="divisible by 8"):
        CifarResNet(image_size=20)
    with pytest.raises(ValueError, match="activation 'swish' unknown"):
        CifarResNet(act="swish")


def test_trainable_polynomial_is_a_compilable_polynomial():
    p = TrainablePoly((0.1, -0.4, 0.25))
    x = torch.linspace(-3, 2.5, 11)
    assert torch.allclose(p(x), 0.1 - 0.4 * x + 0.25 * x * x)
    p(x).sum().backward()
    assert p.weight.grad is not None and p.weight.grad.shape == (3,)
    assert isinstance(p, Polynomial) and p.degree == 2 and p.coeffs == pytest.approx([0.1, -0.4, 0.25])


def test_whitening_filters_decorrelate_patches():
    rng = np.random.default_rng(4)
    mix = rng.normal(size=(3, 3))
    x = torch.as_tensor(np.einsum("ij,njhw->nihw", mix, rng.normal(size=(64, 3, 12, 12))), dtype=torch.float32)
    f = whitening_filters(x, 8, k=2, eps=0.0)
    out = torch.nn.functional.conv2d(x, f[:4].double().float()).transpose(0, 1).reshape(4, -1).double()
    cov = torch.cov(out)       # the top-4 whitened directions: unit variance, uncorrelated
    assert torch.allclose(cov, torch.eye(4, dtype=cov.dtype), atol=0.05)
    assert torch.equal(f[4:], -f[:4])


@pytest.mark.parametrize("act", ["poly", "poly-learnt"])
def test_compiles_with_bootstraps_and_simulate_agrees(act):
    size = 8                                    # a small image keeps layout (A) (one ciphertext per feature) quick
    m = trained_stats(CifarResNet(widths=(4, 4, 6, 6), act=act, image_size=size), size)
    rng = np.random.default_rng(7)
    cal = rng.normal(size=(32, 3, size, size)).astype(np.float32)
    x = rng.normal(size=(16, 3, size, size)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = hemlp.compile(m, cal, calibration=cal, batch_size=16, bootstrap=True, preset="test-N12-boot",
                           allow_insecure=True, layout="batch")      # the layout (A) placement (auto may take P)
    info = cm.plan.info
    assert cm.layout == "batch" and info["preset"] == "test-N12-boot"
    boot = info["bootstrap"]
    # every activation one level (the degree-2 polynomial lowered as a square), so the chain is deeper than
    # what a bootstrap leaves: the planner places several
    assert info["depth"] == m.mult_depth() == 20 > boot["levels_after"] and len(boot["placements"]) >= 3
    assert sum(s.op == "bootstrap" for s in cm.steps) >= 3
    assert "poly_as_square" in str(cm.plan)
    y_sim = np.asarray(cm.simulate(x), dtype=np.float64).reshape(16, -1)
    with torch.no_grad():
        y_ref = m(torch.as_tensor(x)).double().numpy()
    # simulate quantises weights to 20 bits and models the bootstraps' error (2^-21.8 x c each): the logits agree
    # to ~1e-6 of their scale (measured 7e-8 absolute at scale 0.1)
    assert np.max(np.abs(y_sim - y_ref)) < 1e-4 * max(1.0, np.max(np.abs(y_ref)))
    assert np.array_equal(y_sim.argmax(1), y_ref.argmax(1))


@pytest.mark.slow
@pytest.mark.skipif(not (DATA / "cifar10-jpeg").is_dir(), reason=f"no real data under {DATA}")
def test_training_command_on_a_subset(tmp_path):
    out = tmp_path / "resnet.json"
    cmd = [sys.executable, str(REPO / "scripts" / "train_deploy.py"), "--data-root", str(DATA), "--resnet", str(out),
           "--train-limit", "5000", "--epochs", "3", "--batch-size", "128", "--lr", "0.1", "--widths", "8,16,16,32",
           "--act", "gelu", "--sim-samples", "4",
           "--preset", "test-N15-boot",
           "--cache-dir", str(tmp_path / "cache"), "--quiet"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(out.read_text())
    acc = rep["accuracy"]
    assert set(acc) == {"CIFAR-10 test, first 1 017 images (exact)", "CIFAR-10 test, 10 000 images, JPEG q75 (lossy)"}
    assert acc["CIFAR-10 test, first 1 017 images (exact)"]["n"] == 1017
    assert acc["CIFAR-10 test, 10 000 images, JPEG q75 (lossy)"]["n"] == 10000
    # 5 000 images, 3 epochs of batches of 128 (117 steps), widths 8-16-16-32: measured 45.4 % / 44.1 % (exact /
    # JPEG test sets; chance is 10 %, the full 12-epoch run 86.6 %); the bound keeps 9 points below the run
    assert all(a["accuracy"] > 0.35 for a in acc.values()), acc
    t = rep["training"]
    assert t["epochs"] == 3 and t["batch_size"] == 128 and t["threads"] == 2 and t["wall_seconds"] > 0 and t["cpu_seconds"] > 0
    assert rep["data"]["n_train"] == 5000 and rep["model"]["parameters"] > 0
    assert rep["machine"]["load_average_before"] is not None
    assert rep["compile"]["status"] == "ok", rep["compile"]
    assert rep["compile"]["top1_agreement"] == 1.0 and rep["compile"]["bootstrap_points"] >= 3
    w = Path(rep["weights"]["path"])
    assert w.is_file() and w.stat().st_size == rep["weights"]["bytes"]
    state = torch.load(w, weights_only=False)
    m = CifarResNet(widths=state["widths"], act=state["act"])
    m.load_state_dict(state["state_dict"])


@pytest.mark.parametrize("shape,kernel,stride,padding,include", [
    ((3, 8, 8), (2, 2), (2, 2), (0, 0), True), ((2, 7, 9), (3, 3), (2, 2), (1, 1), True),
    ((2, 7, 9), (3, 3), (2, 2), (1, 1), False), ((4, 6, 5), (2, 3), (1, 2), (0, 1), False)])
def test_reference_avgpool_by_window_sums_equals_the_dense_matrix(shape, kernel, stride, padding, include):
    from hemlp.compiler.ir import avgpool_apply, avgpool_matrix

    x = np.random.default_rng(5).normal(size=(3,) + shape) * np.arange(1, 4)[:, None, None, None] + 0.3
    M = avgpool_matrix(shape, kernel, stride, padding, include)
    want = x.reshape(3, -1) @ M.T
    got = avgpool_apply(x, kernel, stride, padding, include)
    assert got.reshape(3, -1).shape == want.shape and np.allclose(got.reshape(3, -1), want, rtol=0, atol=1e-12)
    t = torch.nn.functional.avg_pool2d(torch.as_tensor(x), kernel, stride, padding, count_include_pad=include)
    assert np.allclose(got, t.numpy(), atol=1e-12)


def load_script(name):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_polynomial_network_accuracy_counts_what_runs_encrypted():
    """scripts/cifar_resnet_encrypted.py --poly-json: the compiled IR with its fitted GELU polynomials, scored on a
    labelled set beside the trained network, equals cm.simulate's top-1 and counts out-of-range activation inputs."""
    from types import SimpleNamespace

    size = 8
    m = trained_stats(CifarResNet(widths=(4, 4, 6, 6), act="gelu", image_size=size), size)
    rng = np.random.default_rng(11)
    cal = rng.normal(size=(48, 3, size, size)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = hemlp.compile(m, cal[:4], calibration=cal, batch_size=4, bootstrap=True, preset="test-N12-boot",
                           allow_insecure=True)
    # a test set partly beyond the calibrated ranges (scaled up), labels from the trained model with some flipped
    x = (rng.normal(size=(20, 3, size, size)) * np.linspace(0.5, 1.6, 20)[:, None, None, None]).astype(np.float32)
    with torch.no_grad():
        y_model = m(torch.as_tensor(x)).double().numpy()
    labels = y_model.argmax(1)
    labels[::3] = (labels[::3] + 1) % 10
    data = SimpleNamespace(x=x, y=labels)
    rep = load_script("cifar_resnet_encrypted").poly_accuracy(cm, {"t": data}, 0.0, 1.0, n_simulate=6, chunk=7)
    r = rep["t"]
    assert r["images"] == 20
    assert r["accuracy_trained"] == pytest.approx(np.mean(labels == y_model.argmax(1)))   # 13 of 20: 3-fold flips
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y_sim = np.asarray(cm.simulate(x), dtype=np.float64).reshape(20, -1)
    poly = cm.plan.graph.reference(x.astype(np.float64), exact=False)[cm.plan.graph.output.name].reshape(20, -1)
    assert r["accuracy_polynomial"] == pytest.approx(np.mean(poly.argmax(1) == labels))
    assert r["top1_polynomial_equals_trained"] == pytest.approx(np.mean(poly.argmax(1) == y_model.argmax(1)))
    acts = [n for n in cm.plan.graph.nodes if n.op == "act"]
    assert len(rep["activations"]) == len(acts) == 8 and all(a["kind"] == "gelu" for a in rep["activations"])
    counts = r["activations_outside"]
    first = counts[acts[0].name]
    assert first["inputs"] == 20 * 4 * size * size
    assert sum(c["outside_fitted_range"] for c in counts.values()) > 0     # the scaled-up inputs leave the ranges
    assert all(c["outside_domain"] <= c["outside_fitted_range"] for c in counts.values())
    assert rep["simulate_check"]["images"] == 6
    assert rep["simulate_check"]["max_abs_logit_difference"] == pytest.approx(
        np.max(np.abs(y_sim[:6] - poly[:6])), rel=1e-6, abs=1e-12)
