"""Slicing, padding, concatenation and reductions (hemlp.compiler.movement) against torch, from nn.Module code as
users write it: the frontend's graph evaluated in float64 must equal the module's output."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import hemlp
from hemlp.compiler.fold import fold
from hemlp.compiler.torch_frontend import from_torch
from hemlp.errors import UnsupportedError

from .conftest import to_onnx


class Fn(torch.nn.Module):
    """forward(x) = f(conv(x)): the conv makes the input an encrypted intermediate, like inside a network."""

    def __init__(self, f, cin=3, cout=4):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(cin, cout, 3, padding=1)
        self.f = f

    def forward(self, x):
        return self.f(self.conv(x))


def _agree(model, x, folded=True):
    g = from_torch(model, x)
    if folded:
        fold(g)
    got = g.reference(x)[g.output.name]
    want = model(torch.tensor(x, dtype=torch.float32)).detach().double().numpy()
    assert got.shape == want.shape
    assert np.max(np.abs(got - want)) < 1e-4 * max(1.0, np.abs(want).max())
    return g


X = np.random.default_rng(1).normal(size=(3, 3, 7, 6))

SLICES = [
    lambda y: y[:, :, ::2, ::2],                     # option-A shortcut
    lambda y: y[:, :, 1::2, 1::2],
    lambda y: y[:, 1:3, 2:5, :-1],
    lambda y: y[:, ::3, 1:6:2, 0:5:3],
    lambda y: y[..., 2:],
    lambda y: y[:, :, :, :],
]


@pytest.mark.parametrize("i", range(len(SLICES)))
def test_strided_slicing_matches_torch(i):
    _agree(Fn(SLICES[i]), X, folded=False)
    _agree(Fn(SLICES[i]), X)


PADS = [(1, 1), (0, 2, 1, 0), (1, 0, 0, 3, 2, 1), (0, 0, 0, 0, 2, 2)]


@pytest.mark.parametrize("pad", PADS)
def test_zero_padding_matches_torch(pad):
    _agree(Fn(lambda y: F.pad(y, pad)), X)
    _agree(Fn(lambda y: F.pad(y, pad, "constant", 0)), X, folded=False)


def test_option_a_shortcut_folds_into_one_conv():
    g = _agree(Fn(lambda y: F.pad(y[:, :, ::2, ::2], (0, 0, 0, 0, 2, 2), "constant", 0)), X)
    convs = [n for n in g.nodes if n.op == "conv2d"]
    # the slice's 1x1 stride-2 selection and the channel pad merged into the layer's conv? no: conv -> slice is a
    # general conv followed by a strided one; the pad (a channel map) merges into the slice
    assert len(convs) == 2 and convs[1].attrs["weight"].shape == (8, 4, 1, 1)
    assert tuple(convs[1].attrs["stride"]) == (2, 2)


@pytest.mark.parametrize("dims,keep,mean", [((2, 3), False, True), ((2, 3), True, False), ((-1, -2), False, True),
                                            (3, False, True), ((1,), True, True), ((1, 3), False, False),
                                            ((1, 2, 3), False, True)])
def test_mean_and_sum_over_per_sample_dims_match_torch(dims, keep, mean):
    f = (lambda y: y.mean(dims, keepdim=keep)) if mean else (lambda y: torch.sum(y, dim=dims, keepdim=keep))
    _agree(Fn(f), X)


def test_global_pool_idioms_match_torch():
    for f in (lambda y: F.adaptive_avg_pool2d(y, 1), lambda y: F.adaptive_avg_pool2d(y, (1, 1)),
              lambda y: F.avg_pool2d(y, y.size()[3]).view(y.size(0), -1),
              lambda y: F.avg_pool2d(y, kernel_size=y.shape[2:]).flatten(1),
              lambda y: F.avg_pool2d(y, 2, divisor_override=1)):
        _agree(Fn(f, cout=4), np.random.default_rng(2).normal(size=(2, 3, 6, 6)))


def test_concatenation_on_channels_and_features_matches_torch():
    _agree(Fn(lambda y: torch.cat([y, y[:, :2] * y[:, 1:3]], 1)), X)
    _agree(Fn(lambda y: torch.cat((F.relu(y), y), dim=1)), X)
    _agree(Fn(lambda y: torch.cat([y.flatten(1), y.mean((2, 3))], 1)), X)


def test_clamps_and_functional_layers_match_torch():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.w = torch.nn.Parameter(torch.randn(5, 4 * 7 * 6) * 0.1)
            self.k = torch.nn.Parameter(torch.randn(4, 3, 3, 3) * 0.3)
            self.b = torch.nn.Parameter(torch.randn(4))
            self.r6 = torch.nn.ReLU6()

        def forward(self, x):
            y = F.conv2d(x, self.k, self.b, padding=1)
            y = self.r6(y) + F.hardtanh(y, -0.5, 0.5) + torch.clamp(y, min=-1.0) + y.clamp(max=0.25)
            return F.linear(y.view(y.size(0), -1), self.w)

    g = _agree(M(), X)
    kinds = sorted({n.attrs["kind"] for n in g.nodes if n.op == "act"})
    assert kinds == ["clip(-0.5,0.5)", "clip(-1,inf)", "clip(-inf,0.25)", "clip(0,6)"]


def test_a_clamped_network_compiles_and_simulates_close_to_torch():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.conv = torch.nn.Conv2d(1, 4, 3, stride=2, padding=1)
            self.fc = torch.nn.Linear(4, 3)

        def forward(self, x):
            y = F.relu6(self.conv(x) * 3)
            return self.fc(y.mean((2, 3)))

    x = np.random.default_rng(0).normal(size=(64, 1, 8, 8))
    cm = hemlp.compile(M().eval(), x, allow_insecure=True, activation_degree=31)
    want = M().eval()(torch.tensor(x, dtype=torch.float32)).detach().numpy()
    assert np.max(np.abs(cm.simulate(x) - want)) < 0.05


def test_unsupported_idioms_name_the_op_and_the_line():
    with pytest.raises(UnsupportedError, match=r"max pooling.*test_movement.py:\d+.*AvgPool2d"):
        from_torch(Fn(lambda y: F.max_pool2d(y, 2)), X)
    with pytest.raises(UnsupportedError, match=r"indexing with .*test_movement.py:\d+.*slice with ranges"):
        from_torch(Fn(lambda y: y[:, 0]), X)
    with pytest.raises(UnsupportedError, match="batch dimension"):
        from_torch(Fn(lambda y: y[1:]), X)
    with pytest.raises(UnsupportedError, match="batch dimension"):
        from_torch(Fn(lambda y: y.mean(0)), X)
    with pytest.raises(UnsupportedError, match="zeros"):
        from_torch(Fn(lambda y: F.pad(y, (1, 1, 1, 1), mode="reflect")), X)
    with pytest.raises(UnsupportedError, match="crops"):
        from_torch(Fn(lambda y: F.pad(y, (-1, 0))), X)
    with pytest.raises(UnsupportedError, match="every dimension"):
        from_torch(Fn(lambda y: y.view(y.size(0), -1) - y.mean()), X)


def test_onnx_clip_with_computed_bounds_is_a_typed_error():
    from onnx import TensorProto, helper

    from hemlp.compiler.onnx_frontend import from_onnx

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    nodes = [helper.make_node("ReduceMean", ["x"], ["lo"], axes=[1], keepdims=0),   # a bound computed from the input
             helper.make_node("Clip", ["x", "lo"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "clip", [x], [y]), opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(UnsupportedError, match="Clip with computed bounds"):
        from_onnx(model, np.zeros((2, 4)))


def test_a_per_token_linear_too_large_is_refused_by_both_frontends():
    """nn.Linear / MatMul on each row of a (T, D) matrix becomes a block-diagonal weight of T^2 |W| entries: both
    frontends refuse it above MAX_TOKEN_WEIGHT_ENTRIES (before building it), and accept it below."""
    import io
    import warnings

    import onnx
    import torch

    from hemlp.compiler.onnx_frontend import from_onnx
    from hemlp.compiler.torch_frontend import MAX_TOKEN_WEIGHT_ENTRIES, from_torch
    from hemlp.errors import UnsupportedError

    for tokens, refused in ((200, True), (16, False)):
        assert (tokens * tokens * 64 * 64 > MAX_TOKEN_WEIGHT_ENTRIES) == refused
        m = torch.nn.Sequential(torch.nn.Linear(64, 64)).eval()
        x = np.random.default_rng(0).normal(size=(1, tokens, 64))
        f = io.BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(m, torch.tensor(x, dtype=torch.float32), f, dynamo=False)
        for build in (lambda: from_torch(m, x), lambda: from_onnx(onnx.load_from_string(f.getvalue()), x)):
            if refused:
                with pytest.raises(UnsupportedError, match="flatten first"):
                    build()
            else:
                g = build()
                with torch.no_grad():
                    want = m(torch.tensor(x, dtype=torch.float64).float()).double().numpy()
                assert np.allclose(g.reference(x)[g.output.name], want, atol=1e-5)
