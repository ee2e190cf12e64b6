"""The zoo as the frontends' regression suite: every standard architecture compiles unmodified from its nn.Module and
from its ONNX export, the IR passes lint before and after folding, and its float64 evaluation equals torch's."""

import numpy as np
import pytest
import torch

from hemlp.compiler.fold import fold
from hemlp.compiler.onnx_frontend import from_onnx
from hemlp.compiler.torch_frontend import from_torch
from hemlp.errors import UnsupportedError
from hemlp.models.zoo import ZOO, build
from tests.compiler.conftest import onnx_model

#: architectures with a layer that is not a polynomial, and the layer the error must name
REFUSED = {"mixer": "LayerNorm"}
COMPILED = [n for n in ZOO if n not in REFUSED]


def _model_and_input(name, batch=2):
    e = ZOO[name]
    model = build(name, **(e.small_options or {}))
    x = np.random.default_rng(7).normal(size=(batch,) + tuple(e.small_input_shape))
    return model, x


def _onnx(model, x):
    return onnx_model(model, x)


def _torch(model, x):
    with torch.no_grad():
        return model(torch.tensor(x, dtype=torch.float32)).double().numpy()


@pytest.mark.parametrize("frontend", ["torch", "onnx"])
@pytest.mark.parametrize("name", COMPILED)
def test_zoo_model_compiles_and_matches_torch(name, frontend):
    model, x = _model_and_input(name)
    g = from_torch(model, x) if frontend == "torch" else from_onnx(_onnx(model, x), x)
    g.lint()
    fold(g).lint()
    want = _torch(model, x)
    got = g.reference(x)[g.output.name]
    # float32 torch against the float64 graph: relative to the logits' size (deep random-init nets grow them)
    assert got.shape == want.shape
    assert np.max(np.abs(got - want)) <= 1e-5 * max(1.0, float(np.abs(want).max())) * (1 + len(g.nodes) / 10)


@pytest.mark.parametrize("frontend", ["torch", "onnx"])
@pytest.mark.parametrize("name", sorted(REFUSED))
def test_zoo_model_with_a_non_polynomial_layer_is_refused_with_the_fix(name, frontend):
    model, x = _model_and_input(name)
    with pytest.raises(UnsupportedError, match=REFUSED[name] + r".*(BatchNorm|Identity)"):
        from_torch(model, x) if frontend == "torch" else from_onnx(_onnx(model, x), x)


@pytest.mark.parametrize("frontend", ["torch", "onnx"])
def test_option_a_shortcuts_become_one_strided_channel_embedding_each(frontend):
    """From ONNX too: torch.onnx exports x[:, :, ::2, ::2] as one Slice per axis, fused into one stride-(2, 2)
    subsampling (two of strides (2, 1) and (1, 2) left layout (P) unable to place the residual add)."""
    model, x = _model_and_input("resnet20")
    g = fold(from_torch(model, x) if frontend == "torch" else from_onnx(_onnx(model, x), x))
    shortcuts = [n for n in g.nodes if n.op == "conv2d" and "channel map" in " ".join(n.notes)]
    assert len(shortcuts) == 2                    # 16 -> 32 and 32 -> 64 channels
    for n in shortcuts:
        w = n.attrs["weight"]
        assert w.shape[2:] == (1, 1) and tuple(n.attrs["stride"]) == (2, 2)
        assert np.count_nonzero(w) == w.shape[1] and set(np.unique(w)) == {0.0, 1.0}


def test_lint_names_the_broken_invariant():
    from hemlp.errors import ShapeError

    model, x = _model_and_input("lenet5")
    g = from_torch(model, x)
    g.nodes[2].shape = (1, 2, 3)
    with pytest.raises(ShapeError, match=f"{g.nodes[2].name}.*declares per-sample shape"):
        g.lint()
    g = from_torch(model, x)
    g.nodes[3].inputs = ["nowhere"]
    with pytest.raises(ShapeError, match="before they are defined"):
        g.lint()
    g = from_torch(model, x)
    g.nodes[3].op = "maxpool"
    with pytest.raises(ShapeError, match="unknown op 'maxpool'"):
        g.lint()
