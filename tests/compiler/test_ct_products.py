"""Ciphertext x ciphertext products in compiled models: elementwise (gating) and per-sample matrix
products (attention-style scores q @ k^T), with reshape and transpose, from torch.fx and ONNX.

Oracles: PyTorch (within weight quantisation), the plaintext simulation of the same plan (within CKKS
precision) and, for the layout choice, what each layout supports."""
import numpy as np
import pytest
import torch

import hemlp
from hemlp.errors import UnsupportedError

from .conftest import encrypted_vs_simulate, to_onnx, torch_out


class Scores(torch.nn.Module):
    """h = (q k^T) * g(x) with q, k: 4 x 6 per sample; two ct x ct products of different depths."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(2)
        self.q, self.k = torch.nn.Linear(12, 24), torch.nn.Linear(12, 24)
        self.g, self.o = torch.nn.Linear(12, 16), torch.nn.Linear(16, 5)
        self.eval()

    def forward(self, x):
        q = self.q(x).view(-1, 4, 6)
        k = self.k(x).view(-1, 4, 6)
        s = torch.matmul(q, k.transpose(-2, -1))
        return self.o(s.reshape(-1, 16) * self.g(x))


class Gated(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(4)
        self.a, self.b, self.o = torch.nn.Linear(20, 16), torch.nn.Linear(20, 16), torch.nn.Linear(16, 3)
        self.eval()

    def forward(self, x):
        return self.o(self.a(x) * torch.sigmoid(self.b(x)))


def _x(shape, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=shape) + np.linspace(-0.4, 0.6, shape[-1])


@pytest.mark.parametrize("frontend", ["torch", "onnx"])
def test_scores_matmul_encrypted(frontend, tmp_path):
    model = Scores()
    x = _x((24, 12))
    src = model if frontend == "torch" else to_onnx(model, x, tmp_path / "s.onnx")
    cm = hemlp.compile(src, x, batch_size=24, allow_insecure=True)
    assert cm.layout == "batch"                      # a per-sample matrix product needs layout (A)
    text = str(cm.plan)
    assert "ccmm(" in text and "(ct x ct)" in text and ".mT" in text
    y, ys = encrypted_vs_simulate(cm, x)
    assert np.max(np.abs(y - ys)) < 2.0 ** -16 * max(1.0, np.max(np.abs(ys)))
    assert np.max(np.abs(ys - torch_out(model, x))) < 1e-4 * max(1.0, np.max(np.abs(ys)))


def test_matmul_lowering_indices():
    from hemlp.compiler.ir import matmul_index

    A, B = np.arange(2 * 3 * 4).reshape(2, 3, 4) * 1.0, np.arange(2 * 4 * 5).reshape(2, 4, 5) * 0.5 - 3
    ia, ib = matmul_index(A.shape, B.shape)
    C = (A.reshape(-1)[ia] * B.reshape(-1)[ib]).sum(1)
    assert np.array_equal(C, (A @ B).reshape(-1))
    with pytest.raises(hemlp.errors.ShapeError):
        matmul_index((3, 4), (5, 2))


def test_gated_product_single_image_packed():
    model = Gated()
    x = _x((64, 20), seed=3)
    cm = hemlp.compile(model, x, batch_size=1, allow_insecure=True, activation_degree=7)
    assert cm.layout == "packed"                     # an elementwise ct x ct product works in layout (P)
    y, ys = encrypted_vs_simulate(cm, x[:1])
    assert np.max(np.abs(y - ys)) < 2.0 ** -12 * max(1.0, np.max(np.abs(ys)))
    assert np.max(np.abs(ys - torch_out(model, x[:1]))) < 0.05   # sigmoid approximated (degree 7)


def test_ct_product_errors():
    class Bad(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 4)

        def forward(self, x):
            return self.a(x).view(-1, 2, 4) * self.b(x).view(-1, 1, 4)     # broadcasting

    with pytest.raises(UnsupportedError, match="broadcasting"):
        hemlp.compile(Bad(), _x((4, 8)), allow_insecure=True)

    class BadT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(8, 8)

        def forward(self, x):
            return self.a(x).view(-1, 2, 2, 2).transpose(1, 2).reshape(-1, 8)

    with pytest.raises(UnsupportedError, match="last two"):
        hemlp.compile(BadT(), _x((4, 8)), allow_insecure=True)
    with pytest.raises(UnsupportedError, match="layout='batch'"):
        hemlp.compile(Scores(), _x((4, 12)), batch_size=1, allow_insecure=True, layout="packed")
