"""Activation approximations: accuracy on the calibrated range, depths, range warnings, and per-op
encrypted runs (Linear -> activation -> Linear) against simulate and PyTorch."""
import numpy as np
import pytest
import torch

import hemlp
from hemlp.compiler.activations import RangeWarning, approximate, exact_poly
from hemlp.compiler.ir import exact_activation

from .conftest import encrypted_vs_simulate, torch_out

KINDS = {"relu": torch.nn.ReLU, "silu": torch.nn.SiLU, "gelu": torch.nn.GELU, "sigmoid": torch.nn.Sigmoid,
         "tanh": torch.nn.Tanh}


@pytest.mark.parametrize("method", ["chebyshev", "lsq", "minimax"])
@pytest.mark.parametrize("kind", ["silu", "gelu", "sigmoid", "tanh"])
def test_smooth_approximations(kind, method):
    ap = approximate(kind, -4.0, 4.0, degree=15, method=method)
    xs = np.linspace(-4, 4, 1001)
    err = np.max(np.abs(ap.apply(xs) - exact_activation(kind, xs)))
    assert err < 5e-3 and abs(err - ap.max_err) < 1e-3
    assert ap.depth == 4


def test_relu_and_minimax_beats_interpolation():
    errs = {m: approximate("relu", -1, 1, degree=7, method=m).max_err for m in ("chebyshev", "minimax")}
    assert errs["minimax"] <= errs["chebyshev"] * 1.01
    assert errs["minimax"] < 0.06


def test_degree_two_is_one_level():
    ap = approximate("relu", -3, 3, degree=2, method="chebyshev")
    assert ap.form == "square" and ap.depth == 1
    xs = np.linspace(-3, 3, 101)
    p = np.polynomial.chebyshev.Chebyshev.interpolate(lambda u: np.maximum(3 * u, 0), 2)
    assert np.allclose(ap.apply(xs), p(xs / 3))
    user = exact_poly("poly", [0.5, 0.25, 0.125])
    assert user.depth == 1 and np.allclose(user.apply(xs), 0.5 + 0.25 * xs + 0.125 * xs ** 2)


@pytest.mark.parametrize("kind", list(KINDS))
def test_per_activation_encrypted(kind):
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), KINDS[kind](), torch.nn.Linear(5, 3)).eval()
    x = np.random.default_rng(0).normal(size=(32, 6))
    deg = 7 if kind != "relu" else 15
    cm = hemlp.compile(model, x, activation_degree=deg, allow_insecure=True, batch_size=32)
    assert cm.plan.info["depth"] == 2 + (3 if deg == 7 else 4)
    y, ys = encrypted_vs_simulate(cm, x)
    assert np.max(np.abs(y - ys)) < 1e-5                  # run vs simulate: CKKS precision
    approx_err = max(n.attrs["approx"].max_err for n in cm.plan.graph if n.op == "act")
    w2 = np.abs(model[2].weight.detach().numpy()).sum(1).max()
    assert np.max(np.abs(ys - torch_out(model, x))) <= w2 * approx_err * 1.05 + 1e-4


def test_range_warning_in_simulation():
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)).eval()
    x = np.random.default_rng(1).normal(size=(16, 4))
    cm = hemlp.compile(model, x, activation_degree=7, activation_margin=0.0, allow_insecure=True)
    with pytest.warns(RangeWarning, match="outside the calibrated range"):
        cm.simulate(x * 10)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", RangeWarning)
        cm.simulate(x)                                   # in range: silent


def test_explicit_range_and_per_node_degree():
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU(), torch.nn.Linear(4, 4), torch.nn.SiLU()).eval()
    x = np.random.default_rng(1).normal(size=(16, 4))
    cm = hemlp.compile(model, x, activation_degree={"gelu": 3, "silu": 7}, activation_range=(-6, 6),
                       allow_insecure=True)
    acts = [n.attrs["approx"] for n in cm.plan.graph if n.op == "act"]
    assert [a.degree for a in acts] == [3, 7] and all((a.lo, a.hi) == (-6, 6) for a in acts)
    assert cm.plan.info["depth"] == 1 + 2 + 1 + 3


@pytest.mark.parametrize("shape", [(), (7,), (3, 5), (16384,), (16385,), (2, 40000)])
def test_clenshaw_equals_chebval(shape):
    """chebval_clenshaw (the native core's recurrence) is within 1e-13 (relative to the coefficients' l1 norm) of
    numpy's chebval for any shape (tests/compiler/test_activation_kernels.py checks its bits)."""
    from hemlp.compiler import activations

    rng = np.random.default_rng(len(shape))
    u = rng.uniform(-1.0, 0.97, shape)                    # asymmetric
    c = rng.normal(size=128) / np.arange(1, 129)
    got = activations.chebval_clenshaw(u, c)
    ref = np.polynomial.chebyshev.chebval(u, c)
    assert got.shape == np.shape(ref)
    assert np.max(np.abs(got - ref), initial=0.0) <= 1e-13 * np.abs(c).sum() * 2 ** 7
    assert np.array_equal(activations.chebval_clenshaw(u.T, c), got.T)   # a non-contiguous view
