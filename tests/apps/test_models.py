"""hemlp.models: shapes, multiplicative depth budgets, determinism, ONNX export, learning."""
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="hemlp.models needs torch: pip install 'hemlp[ml]'")

from hemlp.models import MODELS, PolyAct, Square, build, mult_depth  # noqa: E402
from hemlp.models.cifar_cnn import LEVEL_BUDGET, CifarCNN  # noqa: E402
from hemlp.models.fhe4dmm import CONFIGS, FHE4DMMNet  # noqa: E402
from hemlp.models.layers import RELU_DEG2  # noqa: E402
from hemlp.models.mlp import HEMLP  # noqa: E402
from hemlp.models.train import accuracy, predict, train  # noqa: E402


def test_fhe4dmm_shapes_and_depth():
    for name, shape, f1, f2 in (("emnist", (1, 28, 28), 320, 64), ("cifar10", (3, 32, 32), 6400, 128)):
        m = FHE4DMMNet(name)
        cfg = CONFIGS[name]
        assert cfg.f1 == f1 and cfg.f2 == f2  # EMNIST: E2DM 5x8x8 conv, F2=64; CIFAR-10 F1=6400=64*10*10, F2=128
        convs = [x for x in m if isinstance(x, torch.nn.Conv2d)]
        lins = [x for x in m if isinstance(x, torch.nn.Linear)]
        squares = [x for x in m if isinstance(x, Square)]
        assert len(convs) == 1 and len(lins) == 2 and len(squares) == 2  # one conv, two MMs, five layers
        assert lins[0].in_features == f1 and lins[0].out_features == f2 and lins[1].out_features == 10
        assert m.mult_depth() == 5
        assert m(torch.zeros((2,) + shape)).shape == (2, 10)
    assert CONFIGS["cifar10"].kernel == 5 and CONFIGS["cifar10"].stride == 3 and CONFIGS["cifar10"].out_channels == 64
    assert "inferred" in CONFIGS["emnist"].source


def test_mlp_and_cnn_budgets():
    mlp = HEMLP()
    assert [x.out_features for x in mlp if isinstance(x, torch.nn.Linear)] == [128, 64, 10]
    assert mlp.mult_depth() == 5 and HEMLP(act="poly").mult_depth() == 5
    cnn = CifarCNN()
    assert cnn.mult_depth() <= LEVEL_BUDGET == 6
    assert mult_depth(cnn, fuse_linear=True) == 5  # AvgPool folded into the classifier
    assert cnn(torch.zeros(3, 3, 32, 32)).shape == (3, 10)
    for name in MODELS:
        for shape in ((1, 28, 28), (3, 32, 32)):
            m = build(name, shape, 10)
            assert m(torch.zeros((1,) + shape)).shape == (1, 10)
            assert m.mult_depth() <= 6
    with pytest.raises(ValueError, match="fhe4dmm has configs"):
        build("fhe4dmm", (3, 28, 28))
    with pytest.raises(ValueError, match="unknown"):
        build("resnet50")


def test_polyact_matches_polynomial():
    p = PolyAct(RELU_DEG2)
    x = torch.linspace(-4, 4, 101)
    c = RELU_DEG2
    torch.testing.assert_close(p(x), c[0] + c[1] * x + c[2] * x * x)
    assert p.degree == 2
    assert float(torch.max(torch.abs(p(x) - torch.relu(x)))) < 0.5  # a rough ReLU on [-4, 4]
    cubic = PolyAct([0.0, 1.0, 0.0, 0.5])
    assert cubic.degree == 3 and float(cubic(torch.tensor(2.0))) == pytest.approx(6.0)


def _toy(n=240, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 4
    x = rng.normal(0, 0.1, (n, 1, 28, 28)).astype(np.float32)
    for i, c in enumerate(y):
        x[i, 0, 6 * c : 6 * c + 5, :] += 1.0
    return x, y.astype(np.int64)


def test_training_is_deterministic_and_learns():
    x, y = _toy()
    runs = []
    for _ in range(2):
        m = build("mlp", (1, 28, 28), 4, seed=7)
        h = train(m, x, y, epochs=3, batch_size=32, lr=3e-3, seed=7, progress=False)
        runs.append((h, predict(m, x)))
    assert [r["loss"] for r in runs[0][0]] == [r["loss"] for r in runs[1][0]]
    np.testing.assert_array_equal(runs[0][1], runs[1][1])
    assert runs[0][0][-1]["loss"] < runs[0][0][0]["loss"]
    m = build("fhe4dmm", (1, 28, 28), 4, seed=0)
    train(m, x, y, epochs=4, batch_size=32, lr=1e-2, seed=0, progress=False)
    assert accuracy(m, x, y) > 0.9
    assert torch.get_num_threads() == 2


def test_onnx_export_ops():
    onnx = pytest.importorskip("onnx")
    import io

    for name, shape in (("fhe4dmm", (1, 28, 28)), ("mlp-poly", (1, 28, 28)), ("cifar-cnn", (3, 32, 32))):
        m = build(name, shape).eval()
        buf = io.BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(m, (torch.zeros((1,) + shape),), buf, dynamo=False, input_names=["x"])
        g = onnx.load_from_string(buf.getvalue())
        onnx.checker.check_model(g)
        ops = {n.op_type for n in g.graph.node}
        assert ops <= {"Conv", "Mul", "Add", "Flatten", "Gemm", "AveragePool", "Reshape", "Constant", "MatMul"}, ops
        assert "Relu" not in ops


def test_batch_transforms_are_seeded_and_keep_the_image():
    from hemlp.models.train import RandomAffine, RandomCropFlip

    x = torch.rand(6, 2, 12, 10)
    for t in (RandomAffine(), RandomCropFlip(2)):
        a, b = t(x, torch.Generator().manual_seed(3)), t(x, torch.Generator().manual_seed(3))
        assert a.shape == x.shape and torch.equal(a, b) and not torch.equal(a, x)
    # no distortion: the identity (up to float rounding of the sampling grid)
    assert torch.allclose(RandomAffine(0, 0, 0, 0)(x, torch.Generator().manual_seed(0)), x, atol=1e-5)
    # no shift: every image is itself or its mirror, and both occur
    y = RandomCropFlip(0)(x, torch.Generator().manual_seed(1))
    same = [torch.equal(y[i], x[i]) for i in range(6)]
    mirrored = [torch.equal(y[i], x[i].flip(2)) for i in range(6)]
    assert all(s or m for s, m in zip(same, mirrored)) and any(same) and any(mirrored)
    # a shift by (1, 1) of a crop keeps the interior: output pixel (i, j) is input (i + dy - p, j + dx - p)
    z = RandomCropFlip(1)(x[:1], torch.Generator().manual_seed(5))
    hits = [(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1) for flip in (False, True)
            if torch.equal((z[0].flip(2) if flip else z[0])[:, 1:-1, 1:-1], x[0, :, 1 + dy:11 + dy, 1 + dx:9 + dx])]
    assert hits


def test_cutout_zeroes_one_seeded_square_per_image():
    from hemlp.models.train import Cutout

    x = torch.rand(8, 3, 12, 10) + 0.5                       # no zero of its own
    a, b = Cutout(4)(x, torch.Generator().manual_seed(2)), Cutout(4)(x, torch.Generator().manual_seed(2))
    assert torch.equal(a, b) and a.shape == x.shape
    for i in range(8):
        zero = (a[i] == 0).all(0)                            # the same pixels in every channel
        assert torch.equal(a[i][:, ~zero], x[i][:, ~zero]) and (a[i][:, zero] == 0).all()
        rows, cols = zero.any(1).nonzero().flatten(), zero.any(0).nonzero().flatten()
        # one axis-aligned square of side 4, clipped where it overhangs the border
        assert 1 <= len(rows) <= 4 and 1 <= len(cols) <= 4 and int(zero.sum()) == len(rows) * len(cols)
        assert int(rows[-1] - rows[0]) == len(rows) - 1 and int(cols[-1] - cols[0]) == len(cols) - 1
    assert any(int((a[i] == 0).all(0).sum()) == 16 for i in range(8))     # some squares lie inside
    assert torch.equal(Cutout(0)(x, torch.Generator().manual_seed(2)), x)
