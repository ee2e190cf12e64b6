"""The ONNX frontend applies a chain of Slice nodes (torch.onnx writes one per axis) as one index where the axes
differ, and one after the other where a Slice re-slices an axis: the same values as torch either way."""

import numpy as np
import pytest
import torch

from hemlp.compiler.onnx_frontend import from_onnx
from tests.compiler.conftest import onnx_model


class Sliced(torch.nn.Module):
    def __init__(self, how):
        super().__init__()
        self.how = how

    def forward(self, x):
        if self.how == "strided":
            return x[:, :, ::2, ::2] * 1.5
        if self.how == "same_axis":                 # axis 2 sliced twice, then axis 3
            return x[:, :, 1:, :][:, :, ::2, ::2] * 1.5
        a = x[:, :, ::2, :]                          # a Slice read twice: applied on its own
        return a[:, :, :, ::2] + a[:, :, :, 1::2]


def _export(model, x):
    return onnx_model(model, x)


@pytest.mark.parametrize("how", ["strided", "same_axis", "mixed"])
def test_slice_chains_match_torch(how):
    x = np.random.default_rng(3).normal(size=(2, 3, 8, 8))
    model = Sliced(how).eval()
    proto = _export(model, x)
    if how == "strided":
        assert sum(n.op_type == "Slice" for n in proto.graph.node) == 2      # what the fusion is for
    g = from_onnx(proto, x)
    g.lint()
    with torch.no_grad():
        want = model(torch.tensor(x, dtype=torch.float32)).double().numpy()
    got = g.reference(x)[g.output.name]
    assert got.shape == want.shape and np.allclose(got, want, atol=1e-5)
    if how == "strided":
        [sub] = [n for n in g.nodes if n.op == "conv2d"]                      # one subsampling, stride (2, 2)
        assert tuple(sub.attrs["stride"]) == (2, 2)
