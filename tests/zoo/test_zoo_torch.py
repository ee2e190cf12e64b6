"""The model zoo (hemlp.models.zoo) in plain PyTorch: every entry builds, runs on its input shapes, gives
(batch, num_classes) logits, is reproducible under its seed, and has the published parameter counts and the
structural idioms (option-A lambda shortcuts, depthwise convs, stride-1-only residuals, ...) the frontend tests rely
on."""
import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from hemlp.models.zoo import ZOO, build  # noqa: E402
from hemlp.models.zoo.mobilenet import Block  # noqa: E402
from hemlp.models.zoo.resnet_cifar import LambdaLayer  # noqa: E402

NAMES = sorted(ZOO)
BATCH = 2


def _params(model):
    return sum(p.numel() for p in model.parameters())


def _run(model, shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        return model(torch.randn(BATCH, *shape, generator=g))


@pytest.mark.parametrize("name", NAMES)
def test_entry_metadata(name):
    e = ZOO[name]
    assert e.name == name and e.source
    assert e.dataset in ("cifar10", "emnist")
    assert e.input_shape == {"cifar10": (3, 32, 32), "emnist": (1, 28, 28)}[e.dataset]
    assert e.small_input_shape[0] == e.input_shape[0]
    assert all(s <= f for s, f in zip(e.small_input_shape, e.input_shape, strict=True))


@pytest.mark.parametrize("name", NAMES)
def test_builds_in_eval_mode_and_gives_logits(name):
    e = ZOO[name]
    model = build(name, **e.small_options)
    assert not any(m.training for m in model.modules())
    for shape in {e.small_input_shape, e.input_shape}:
        y = _run(model, shape)
        assert y.shape == (BATCH, e.num_classes)
        assert torch.isfinite(y).all()
    # the published (not narrowed) model on the shape it is written for; resnet18 at width 64 is the slowest (~0.1 s)
    if e.small_options:
        assert _run(build(name), e.input_shape).shape == (BATCH, e.num_classes)


@pytest.mark.parametrize("name", NAMES)
def test_num_classes_and_seed(name):
    e = ZOO[name]
    a, b = build(name, 7, seed=3, **e.small_options), build(name, 7, seed=3, **e.small_options)
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    ya, yb = _run(a, e.small_input_shape), _run(b, e.small_input_shape)
    assert ya.shape == (BATCH, 7)
    assert torch.equal(ya, yb)               # eval mode: dropout off, BN on running statistics
    c = build(name, 7, seed=4, **e.small_options)
    assert not torch.equal(_run(c, e.small_input_shape), ya)


def test_unknown_name():
    with pytest.raises(ValueError, match="unknown"):
        build("resnet1001")


# He et al. 2016, table 6: 0.27M / 0.46M / 0.66M; kuangliu's ResNet-18: 11 173 962
@pytest.mark.parametrize("name, count, paper_m", [
    ("resnet20", 269_722, 0.27), ("resnet32", 464_154, 0.46), ("resnet44", 658_586, 0.66),
    ("resnet18", 11_173_962, 11.17),
])
def test_published_parameter_counts(name, count, paper_m):
    n = _params(build(name, 10))
    assert n == count
    assert round(n / 1e6, 2) == paper_m


def test_other_parameter_counts():
    assert _params(build("lenet5")) == 61_706             # the classic LeNet-5 count with a 10-way output
    assert _params(build("lola_mnist")) == 5 * 26 + 845 * 100 + 100 + 100 * 10 + 10
    assert _params(build("mlp_emnist")) == 784 * 256 + 256 + 256 * 128 + 128 + 128 * 47 + 47
    assert _params(build("resnet20_b")) > _params(build("resnet20"))   # option B's projections cost parameters


def test_option_a_shortcut_is_a_parameter_free_lambda():
    model = build("resnet20")
    lambdas = [m for m in model.modules() if isinstance(m, LambdaLayer)]
    assert len(lambdas) == 2                                       # the two downsampling blocks (16->32, 32->64)
    assert not any(isinstance(m, nn.Conv2d) and m.kernel_size == (1, 1) for m in model.modules())
    x = torch.randn(1, 16, 8, 8)
    y = lambdas[0](x)
    assert y.shape == (1, 32, 4, 4)
    assert torch.equal(y[:, 8:24], x[:, :, ::2, ::2])             # strided slice in the middle channels
    assert not y[:, :8].any() and not y[:, 24:].any()              # zero channels padded on both sides


def test_option_b_shortcut_is_a_projection():
    model = build("resnet20_b")
    assert not any(isinstance(m, LambdaLayer) for m in model.modules())
    assert sum(isinstance(m, nn.Conv2d) and m.kernel_size == (1, 1) for m in model.modules()) == 2


def test_cifar_resnet_head_pools_whatever_size_it_gets():
    model = build("resnet20")
    assert _run(model, (3, 16, 16)).shape == (BATCH, 10)            # the kernel is out.size()[3]: any square input


def test_resnet18_width():
    narrow = build("resnet18", width=8)
    assert narrow.linear.in_features == 64
    assert max(m.out_channels for m in narrow.modules() if isinstance(m, nn.Conv2d)) == 64


def test_lola_is_a_degree_4_polynomial():
    model = build("lola_mnist")
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.zeros_(m.bias)
    x = torch.randn(BATCH, 1, 28, 28)
    with torch.no_grad():
        # homogeneous without biases: conv, x², dense, x², dense scales by 2^4
        torch.testing.assert_close(model(2 * x), 16 * model(x), rtol=1e-4, atol=1e-5)


def test_lenet_and_vgg_pool_by_averaging():
    for name, e in ZOO.items():
        model = build(name, **e.small_options)
        assert not any(isinstance(m, (nn.MaxPool2d, nn.AdaptiveMaxPool2d)) for m in model.modules())
    vgg = build("vgg_small")
    assert sum(isinstance(m, nn.AvgPool2d) for m in vgg.modules()) == 4   # three 'A' and the trailing kernel-1 no-op
    assert sum(isinstance(m, nn.Dropout) for m in vgg.modules()) == 2
    x = torch.randn(1, 1, 28, 28)
    lenet = build("lenet5")
    with torch.no_grad():
        a = F.relu(lenet.conv1(x))
        assert torch.allclose(F.avg_pool2d(a, 2), a.unfold(2, 2, 2).unfold(3, 2, 2).mean((-1, -2)))


@pytest.mark.parametrize("name", ["mobilenet_v1", "mobilenet_v2"])
def test_mobilenet_has_depthwise_convs_and_relu6(name):
    model = build(name)
    dw = [m for m in model.modules() if isinstance(m, nn.Conv2d) and m.groups > 1]
    assert dw and all(m.groups == m.in_channels == m.out_channels and m.kernel_size == (3, 3) for m in dw)
    if name == "mobilenet_v1":
        assert any(isinstance(m, nn.ReLU6) for m in model.modules())


def test_mobilenet_v2_adds_the_residual_only_at_stride_1():
    torch.manual_seed(0)
    same, strided = Block(16, 16, 6, stride=1).eval(), Block(16, 16, 6, stride=2).eval()
    for b in (same, strided):
        nn.init.zeros_(b.bn3.weight)          # the block's own branch is now zero (bn3's bias is zero at init)
    x = torch.randn(1, 16, 8, 8)
    with torch.no_grad():
        assert torch.equal(same(x), x)                            # identity shortcut
        assert not strided(x).any() and strided(x).shape == (1, 16, 4, 4)   # no shortcut at stride 2


def test_mixer_norm_option():
    assert any(isinstance(m, nn.LayerNorm) for m in build("mixer").modules())
    nonorm = build("mixer_nonorm")
    assert not any(isinstance(m, nn.LayerNorm) for m in nonorm.modules())
    # same weights either way (Identity and the affine-at-init LayerNorm draw nothing from the generator)
    a, b = build("mixer").state_dict(), nonorm.state_dict()
    assert all(torch.equal(b[k], a[k]) for k in b)
    assert build("mixer").blocks[0].mlp_tokens.fc1.in_features == 64   # 32x32 / patch 4: 64 tokens
