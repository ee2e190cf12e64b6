"""The zoo benchmark's BatchNorm statistics for models without trained weights: averaged over the calibration
images, as training leaves them, so that a deep random residual net keeps the activation scale a trained one has."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from hemlp.apps.bench.zoo import bn_statistics  # noqa: E402
from hemlp.models.zoo import build  # noqa: E402


def test_running_statistics_are_the_data_averages_and_the_weights_stay():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU())
    x = np.random.default_rng(1).normal(2.0, 3.0, (250, 3, 8, 8)).astype(np.float32)
    w = model[0].weight.detach().clone()
    assert bn_statistics(model, x, batch=100) == 1
    assert not model.training and torch.equal(model[0].weight, w)
    with torch.no_grad():
        h = model[0](torch.as_tensor(x)).double()
    bn = model[1]
    # batches of 100, 100 and 50: the running mean is the plain average of the three batch means
    means = [h[i:i + 100].mean((0, 2, 3)) for i in (0, 100, 200)]
    assert torch.allclose(bn.running_mean.double(), sum(means) / 3, atol=1e-5)
    assert bn.num_batches_tracked.item() == 3
    assert bn_statistics(torch.nn.Sequential(torch.nn.Linear(3, 2)), x[:, :, 0, 0]) == 0


def test_a_random_resnet44_keeps_a_trained_nets_scale_with_data_statistics():
    """With the initialisation's statistics (mean 0, variance 1) the residual stack of a random ResNet-44 grows
    (its values reach thousands on standardised images: ~7 400 here); with the data's it stays in the tens, the
    scale of a trained ResNet's (~24 here)."""
    x = np.random.default_rng(2).standard_normal((64, 3, 32, 32)).astype(np.float32)

    def peak(model):                         # the largest value any module (a block, a layer) outputs
        seen = []
        hooks = [m.register_forward_hook(lambda m, i, o: seen.append(float(o.abs().max()))) for m in model.modules()
                 if m is not model]
        with torch.no_grad():
            model(torch.as_tensor(x[:16]))
        for h in hooks:
            h.remove()
        return max(seen)

    torch.manual_seed(0)
    model = build("resnet44").eval()
    before = peak(model)
    assert bn_statistics(model, x) > 40
    assert before > 1000 and peak(model) < 100
