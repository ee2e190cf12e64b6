"""torch.fx and ONNX frontends: the same IR for the same model, folding, polynomial expressions."""
import numpy as np
import pytest
import torch

import hemlp

from .conftest import SmallCNN, Square, mlp, to_onnx, torch_out


def _ops(cm):
    return [s.op for s in cm.steps]


def test_torch_and_onnx_give_the_same_plan(tmp_path):
    model = SmallCNN()
    x = np.random.default_rng(0).normal(size=(8, 1, 8, 8))
    a = hemlp.compile(model, x, allow_insecure=True)
    b = hemlp.compile(to_onnx(model, x, tmp_path / "cnn.onnx"), x, allow_insecure=True)
    assert _ops(a) == _ops(b) and a.plan.info["depth"] == b.plan.info["depth"] == 6
    assert np.allclose(a.simulate(x), b.simulate(x), atol=1e-6)
    assert np.max(np.abs(a.simulate(x) - torch_out(model, x))) < 1e-4
    assert "bn1 folded" in str(a.plan)                    # BatchNorm folded into conv1


def test_print_plan_reads_like_code():
    cm = hemlp.compile(mlp(dims=(8, 6, 4)), np.zeros((2, 8)), batch_size=100, allow_insecure=True,
                        layout="batch")
    text = str(cm.plan)
    assert "def forward(" in text and "return" in text and "pcmm(" in text and "square(" in text
    assert "L2→L1" in text and "OBL" in text and "padding" in text
    assert cm.plan.matmuls and cm.plan.grid(cm.plan.matmuls[0]["name"], 4).size >= 1


def test_fold_dropout_identity_avgpool_into_linear_and_merge():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.conv = torch.nn.Conv2d(1, 2, 3, padding=1)
            self.drop = torch.nn.Dropout(0.3)
            self.id = torch.nn.Identity()
            self.pool = torch.nn.AvgPool2d(2)
            self.fc1 = torch.nn.Linear(2 * 3 * 3, 5)
            self.fc2 = torch.nn.Linear(5, 3)

        def forward(self, x):
            x = self.id(self.drop(self.conv(x))) ** 2
            return self.fc2(self.fc1(torch.flatten(self.pool(x), 1)))

    m = M().eval()
    x = np.random.default_rng(0).normal(size=(4, 1, 6, 6))
    cm = hemlp.compile(m, x, allow_insecure=True)
    assert [s.op for s in cm.steps if s.op != "alias"] == ["input", "pcmm", "square", "pcmm", "output"]
    assert cm.plan.info["depth"] == 3
    assert np.max(np.abs(cm.simulate(x) - torch_out(m, x))) < 1e-4


def test_polynomial_expressions_and_user_polynomial(tmp_path):
    from hemlp.compiler import Polynomial

    class P(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.fc1, self.fc2 = torch.nn.Linear(4, 4), torch.nn.Linear(4, 2)
            self.poly = Polynomial([0.1, 0.5, 0.25, -0.05])

        def forward(self, x):
            h = self.fc1(x)
            h = 0.5 * h * h + h - 0.25           # one degree-2 polynomial -> completed square (1 level)
            return self.fc2(self.poly(h))

    m = P().eval()
    x = np.random.default_rng(0).normal(size=(8, 4))
    cm = hemlp.compile(m, x, allow_insecure=True)
    assert cm.plan.info["depth"] == 1 + 1 + 2 + 1
    assert np.max(np.abs(cm.simulate(x) - torch_out(m, x))) < 1e-4


@pytest.mark.parametrize("act", [torch.nn.GELU, torch.nn.SiLU, torch.nn.ReLU, torch.nn.Sigmoid, torch.nn.Tanh])
def test_onnx_activation_patterns(tmp_path, act):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), act(), torch.nn.Linear(4, 2)).eval()
    x = np.random.default_rng(0).normal(size=(16, 4))
    a = hemlp.compile(m, x, activation_degree=7, allow_insecure=True)
    b = hemlp.compile(to_onnx(m, x, tmp_path / "m.onnx"), x, activation_degree=7, allow_insecure=True)
    kinds = lambda cm: [n.attrs["kind"] for n in cm.plan.graph if n.op == "act"]  # noqa: E731
    assert kinds(a) == kinds(b) and len(kinds(a)) == 1
    assert np.allclose(a.simulate(x), b.simulate(x), atol=1e-5)


def test_residual_add_and_batchnorm1d():
    class R(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.fc1, self.fc2, self.fc3 = torch.nn.Linear(6, 6), torch.nn.Linear(6, 6), torch.nn.Linear(6, 3)
            self.bn = torch.nn.BatchNorm1d(6)
            self.sq = Square()

        def forward(self, x):
            h = self.fc1(x)
            return self.fc3(self.sq(self.bn(self.fc2(h))) + h)

    m = R().eval()
    x = np.random.default_rng(0).normal(size=(8, 6))
    cm = hemlp.compile(m, x, allow_insecure=True)
    assert "add" in _ops(cm)
    assert np.max(np.abs(cm.simulate(x) - torch_out(m, x))) < 1e-4
