"""Whole models: encrypted run vs simulate (CKKS precision) and simulate vs PyTorch (approximation)."""
import time

import numpy as np
import pytest
import torch

import hemlp

from .conftest import SmallCNN, encrypted_vs_simulate, mlp, to_onnx, torch_out

RUN_TOL = 1e-5       # run vs simulate (CKKS noise at Delta = 2^40 after 5-6 levels)


@pytest.fixture(scope="module")
def mnist_like():
    return np.random.default_rng(7).uniform(0, 1, size=(64, 784))


def test_mlp_784_128_64_10_torch_encrypted(mnist_like):
    model = mlp()
    x = mnist_like
    cm = hemlp.compile(model, x, batch_size=64, allow_insecure=True)
    assert cm.preset == "test-N12-d6" and cm.plan.info["depth"] == 5
    sk, ek = cm.keygen()
    t0 = time.perf_counter()
    ct = cm.encrypt(x, sk)
    t1 = time.perf_counter()
    out = cm.run(ct, ek)
    t2 = time.perf_counter()
    y = cm.decrypt(out, sk)
    ys, yt = cm.simulate(x), torch_out(model, x)
    print(f"\nMLP 784-128-64-10 @ {cm.preset}: encrypt {t1 - t0:.2f}s run {t2 - t1:.2f}s; "
          f"|run-sim| {np.max(np.abs(y - ys)):.2e} |sim-torch| {np.max(np.abs(ys - yt)):.2e} "
          f"argmax agreement {np.mean(y.argmax(1) == yt.argmax(1)):.3f}")
    assert np.max(np.abs(y - ys)) < RUN_TOL * max(1, np.abs(ys).max())
    assert np.max(np.abs(ys - yt)) < 1e-4 * max(1, np.abs(yt).max())  # float32 torch + 20-bit weights
    assert np.mean(y.argmax(1) == yt.argmax(1)) == 1.0


def test_mlp_onnx_same_as_torch(mnist_like, tmp_path):
    model = mlp()
    x = mnist_like
    a = hemlp.compile(model, x, batch_size=64, allow_insecure=True)
    b = hemlp.compile(to_onnx(model, x, tmp_path / "mlp.onnx"), x, batch_size=64, allow_insecure=True)
    assert [s.op for s in a.steps] == [s.op for s in b.steps]
    assert np.max(np.abs(a.simulate(x) - b.simulate(x))) < 1e-6
    assert np.max(np.abs(b.simulate(x) - torch_out(model, x))) < 1e-4


@pytest.mark.parametrize("frontend", ["torch", "onnx"])
def test_small_cnn_encrypted(frontend, tmp_path):
    model = SmallCNN()
    x = np.random.default_rng(2).normal(size=(16, 1, 8, 8))
    src = model if frontend == "torch" else to_onnx(model, x, tmp_path / "cnn.onnx")
    cm = hemlp.compile(src, x, batch_size=16, allow_insecure=True)
    assert cm.plan.info["depth"] == 6          # conv, x^2, avgpool (PCMM), conv, x^2, FC
    y, ys = encrypted_vs_simulate(cm, x)
    yt = torch_out(model, x)
    assert np.max(np.abs(y - ys)) < RUN_TOL * max(1, np.abs(ys).max())
    assert np.max(np.abs(ys - yt)) < 1e-4 * max(1, np.abs(yt).max())


def test_cnn_with_relu_approximation_and_residual():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(4)
            self.conv = torch.nn.Conv2d(1, 2, 3, padding=1)
            self.fc1 = torch.nn.Linear(2 * 4 * 4, 8)
            self.fc2 = torch.nn.Linear(8, 8)
            self.out = torch.nn.Linear(8, 3)

        def forward(self, x):
            h = self.fc1(torch.flatten(self.conv(x), 1))
            h = h + self.fc2(torch.relu(h))
            return self.out(h)

    m = Net().eval()
    x = np.random.default_rng(3).normal(size=(32, 1, 4, 4))
    cm = hemlp.compile(m, x, activation_degree=2, allow_insecure=True, batch_size=32)
    # relu's input also feeds the residual: its input scaling is an explicit affine step (1 level)
    assert [s.op for s in cm.steps if s.op not in ("alias",)] == \
        ["input", "pcmm", "pcmm", "affine", "square", "pcmm", "add", "pcmm", "output"]
    assert cm.preset == "test-N12-d6" and cm.plan.info["depth"] == 6
    y, ys = encrypted_vs_simulate(cm, x)
    assert np.max(np.abs(y - ys)) < RUN_TOL * max(1, np.abs(ys).max())
    ap = next(n.attrs["approx"] for n in cm.plan.graph if n.op == "act")
    assert np.max(np.abs(ys - torch_out(m, x))) < 10 * ap.max_err


def test_batch_larger_than_slots_uses_chunks():
    model = mlp(dims=(5, 4, 2))
    x = np.random.default_rng(0).normal(size=(2100, 5))
    cm = hemlp.compile(model, x, batch_size=2100, allow_insecure=True)
    assert cm.plan.info["chunks"] == 2
    y, ys = encrypted_vs_simulate(cm, x)
    assert y.shape == (2100, 2) and np.max(np.abs(y - ys)) < RUN_TOL * max(1, np.abs(ys).max())
