"""A ResNet-9-style CIFAR-10 network with HE-friendly activations (Page's DAWNBench ResNet-9, narrowed):

    prep    conv 3→w0 3x3 + BN + act                        32x32
    layer1  conv w0→w1 3x3 + BN + act, avgpool 2             → 16x16
            residual: x + (conv-BN-act, conv-BN-act)(x)
    layer2  conv w1→w2 3x3 + BN + act, avgpool 2             → 8x8
    layer3  conv w2→w3 3x3 + BN + act, avgpool 2             → 4x4
            residual: x + (conv-BN-act, conv-BN-act)(x)
    head    avgpool 4 → flatten → linear w3→10

Average pooling instead of max pooling (max is not a polynomial; hemlp lowers AvgPool2d), every BN folds into the
conv before it, and every activation sees a batch-normalised input, so its range is bounded. Activations:

- ``"poly"``: ``hemlp.compiler.Polynomial`` 0.375 + 0.5 x + 0.117 x² (the least-squares degree-2 fit of ReLU on
  [-4, 4]; with the BN affine before it and the conv after it, as expressive as any quadratic). One ciphertext
  multiplication: depth 1 per activation, compiled exactly.
- ``"poly-learnt"``: ``TrainablePoly``, the same with its three coefficients learnt per layer.
- ``"relu"`` / ``"gelu"``: trained as such; hemlp.compile then fits a polynomial of the degree its accuracy target
  asks (typically 15-31 after the sweep of bench/accuracy_real.md: depth 4-5 per activation, and a bootstrap
  every few layers).

Which one: see ``CHOICE`` below (measured, not guessed).
"""
from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["CifarResNet", "TrainablePoly", "WIDTHS", "CHOICE", "whitening_filters"]

#: default channel widths (prep, layer1, layer2, layer3): chosen for < 1 h of training on 2 CPU cores (one epoch of
#: the 50 000 images: ~100 CPU seconds in channels_last at 1 thread; 24-48-96-192 costs 2.1x that, 32-64-128-256
#: 2.4x; channels_last is 1.7x faster than NCHW at these widths)
WIDTHS = (16, 32, 64, 128)

#: the measurements behind the activation of the shipped run (bench/cifar_resnet.json)
CHOICE = """
Proxy trainings (session 10; machine loaded, load average 5-8 on 2 cores; 1 thread each; widths 16-32-64-128;
random subsets of the 50 000 JPEG training images; batch 512, label smoothing 0.2, 2-px shift + flip; accuracy on
the first 2 000 JPEG test images):

  activation                         optimiser        images  epochs  loss (last)  val
  ReLU                               SGD 0.2          20 000  2       1.89         37.6 %
  degree 2, coefficients learnt      SGD 0.2          20 000  1       7.30         9.3 %  (diverging: the scalar
                                                                                  coefficient's gradient sums
                                                                                  over every activation)
  degree 2, fixed (ReLU fit)         SGD 0.2          20 000  1       4.26         10.9 % (diverging)
  degree 2, fixed (ReLU fit)         SGD 0.05         10 000  2       2.47         10.7 % (not learning)
  degree 2, fixed (ReLU fit)         Adam 3e-3        10 000  2       2.06         28.1 %

With under an hour of (shared) CPU, the degree-2 networks trained far slower than ReLU; the shipped run therefore
trains GELU (airbench's activation: smooth, so hemlp.compile's minimax fit needs a lower degree than for ReLU) and
pays for it in depth and bootstraps (see bench/cifar_resnet.json: compile). The degree-2 activations stay available
(act="poly" / "poly-learnt": depth 1 each) for a longer training budget.

The shipped run (bench/cifar_resnet.json, bench/cifar_resnet.pt, 1.6 MiB): GELU, widths 16-32-64-128, 412 954
parameters, 12 epochs over the 50 000 JPEG training images (Nesterov SGD 0.2, one-cycle, label smoothing 0.2,
patch-whitening init): 85.43 % on the JPEG test set (10 000, lossy) and 86.63 % on the exact first 1 017 test
images; training 26.8 min wall / 30.0 min CPU on 2 threads with the machine shared (load average 2.4-5.4). The same
recipe at 8 epochs (bench/cifar_resnet_e8.json): 83.89 % / 85.94 %, 23.2 min wall on a busier machine (load 6-8).
hemlp.compile needs a preset with room after each bootstrap: GELU's fit for 99 % agreement reached degree 63 on the
first activation (6 levels), more than test-N12-boot's bootstrap leaves (LevelError); N16-boot leaves 12 and plans
it (depth 51, 5 bootstrap points, 9 728 bootstraps per batch), but its simulate ran out of memory (24 GB).
"""

# least-squares degree-2 fit of ReLU on [-4, 4] (uniform weight), as models.layers.RELU_DEG2
RELU_FIT = (0.375, 0.5, 0.1171875)


def _polynomial_base():
    from hemlp.compiler import Polynomial

    return Polynomial


class TrainablePoly(_polynomial_base()):
    """x ↦ c0 + c1 x + c2 x² (degree ``len(init) - 1``) with learnt coefficients, one set per layer.

    A subclass of ``hemlp.compiler.Polynomial``: the torch.fx frontend reads ``coeffs`` (plain floats of the
    current parameters) and compiles it exactly, as any user-defined polynomial."""

    def __init__(self, init=RELU_FIT):
        nn.Module.__init__(self)
        self.weight = nn.Parameter(torch.tensor([float(c) for c in init], dtype=torch.float32))

    @property
    def coeffs(self) -> list[float]:
        return [float(c) for c in self.weight.detach().cpu()]

    @property
    def degree(self) -> int:
        return self.weight.numel() - 1

    def forward(self, x):
        w = self.weight
        y = w[-1] * x + w[-2]
        for c in reversed(w[:-2]):
            y = y * x + c
        return y

    def extra_repr(self):
        return "coeffs=" + ", ".join(f"{c:.4g}" for c in self.coeffs)


def make_act(kind: str) -> nn.Module:
    if kind == "poly":
        return _polynomial_base()(RELU_FIT)
    if kind == "poly-learnt":
        return TrainablePoly()
    if kind == "relu":
        return nn.ReLU()
    if kind == "gelu":
        return nn.GELU()
    raise ValueError(f"activation {kind!r} unknown; use 'poly' (degree 2), 'poly-learnt', 'relu' or 'gelu'")


def conv_bn_act(cin: int, cout: int, act: str) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout), make_act(act)]


class Residual(nn.Module):
    """x + (conv-BN-act, conv-BN-act)(x): the skip is a ciphertext addition (levels aligned by the planner)."""

    def __init__(self, c: int, act: str):
        super().__init__()
        self.body = nn.Sequential(*conv_bn_act(c, c, act), *conv_bn_act(c, c, act))

    def forward(self, x):
        return x + self.body(x)


class CifarResNet(nn.Sequential):
    def __init__(self, num_classes: int = 10, widths=WIDTHS, act: str = "poly", in_channels: int = 3,
                 image_size: int = 32):
        w0, w1, w2, w3 = widths
        if image_size % 8:
            raise ValueError(f"CifarResNet needs an image size divisible by 8, not {image_size}")
        super().__init__(
            *conv_bn_act(in_channels, w0, act),
            *conv_bn_act(w0, w1, act), nn.AvgPool2d(2),
            Residual(w1, act),
            *conv_bn_act(w1, w2, act), nn.AvgPool2d(2),
            *conv_bn_act(w2, w3, act), nn.AvgPool2d(2),
            Residual(w3, act),
            nn.AvgPool2d(image_size // 8), nn.Flatten(),
            nn.Linear(w3, num_classes),
        )
        self.input_shape = (in_channels, image_size, image_size)
        self.widths, self.act = tuple(widths), act
        with torch.no_grad():      # small logits at the start (Page's ResNet-9 scales them by 1/8)
            self[-1].weight.mul_(0.125)
            self[-1].bias.zero_()

    def activations(self) -> list[nn.Module]:
        return [m for m in self.modules() if isinstance(m, (_polynomial_base(), nn.ReLU, nn.GELU))]

    def mult_depth(self, act_depth: int | None = None) -> int:
        """Levels along the longest path with every conv / avgpool / linear one level (BN folded, the head's
        average pool folded into the linear layer, as hemlp.compile does), every activation ``act_depth`` levels
        (default: 1 for the degree-2 polynomial; 6 for ReLU, a degree-31 fit)."""
        if act_depth is None:
            act_depth = 1 if self.act.startswith("poly") else math.ceil(math.log2(32)) + 1
        convs = sum(isinstance(m, nn.Conv2d) for m in self.modules())
        pools = sum(isinstance(m, nn.AvgPool2d) for m in self.modules())
        return convs * (1 + act_depth) + (pools - 1) + 1

    def init_whitening(self, x) -> None:
        """Airbench's patch whitening for the first conv: its filters become the 3x3 patches' PCA directions
        scaled by 1/sqrt(eigenvalue) (x: a sample of preprocessed training images, NCHW). The weights stay
        trainable; it only gives the first epochs a decorrelated input."""
        conv = self[0]
        conv.weight.data.copy_(whitening_filters(torch.as_tensor(x), conv.out_channels, conv.kernel_size[0]))


def whitening_filters(x: torch.Tensor, n: int, k: int = 3, eps: float = 5e-4) -> torch.Tensor:
    """n conv filters (n, C, k, k): the top n/2 eigenvectors of the k x k patch covariance of x, each with its
    negation (so a following non-odd activation sees both signs), scaled by 1/sqrt(eigenvalue + eps)."""
    c = x.shape[1]
    patches = nn.functional.unfold(x.double(), k).transpose(1, 2).reshape(-1, c * k * k)
    patches = patches - patches.mean(0)
    cov = patches.T @ patches / len(patches)
    lam, vec = torch.linalg.eigh(cov)
    lam, vec = lam.flip(0), vec.flip(1)
    m = min(n // 2 + n % 2, c * k * k)
    f = (vec[:, :m] / torch.sqrt(lam[:m] + eps)).T
    f = torch.cat([f, -f])[:n]
    if len(f) < n:
        f = torch.cat([f, torch.zeros(n - len(f), c * k * k, dtype=f.dtype)])
    return f.reshape(n, c, k, k).float()
