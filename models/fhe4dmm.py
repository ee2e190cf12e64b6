"""FHE4DMM's 5-layer network (seed 000 §VII-B, BRIEF §6.5).

Stated in the paper (§VII-B): "a simple 5-layer network" for EMNIST and CIFAR-10 with "only one
convolutional layer" and "only two MMs" (the two fully connected layers); parameters BS, C_i,
C_o, K, S, F1, F2 (Fig. 10's table, not in the text we have); MULT depth 5; accuracy 98.7 % on EMNIST
and 61 % on CIFAR-10; OBLs [1, BS/1024, 4] (EMNIST, 16×1024 slot shape) and [1, BS/128, 50]
(CIFAR-10, 128×128). Architecture: Conv(C_i→C_o, K, S) → x² → FC1(F1→F2) → x² → FC2(F2→10), one level
each (conv, square, FC1, square, FC2).

The sizes follow from the OBL constraint (eq. 4: max{m/b_m, k/b_k} · max{k/b_k, n/b_n} = S_o = 2^14, b_k
minimal) for a product W (m×k) · X (k×BS):
- CIFAR-10, [1, BS/128, 50] with 128×128 blocks: k/50 = 128 and b_k = 49 too few, so k ∈ (6272, 6400]:
  this is FC1, F1 = 6400 = C_o·H_o·W_o = 64·10·10 (32×32 input, K = 5, S = 3), F2 = m ≤ 128: F2 = 128.
- EMNIST, [1, BS/1024, 4] with 16×1024 blocks: k ∈ (48, 64] and m ≤ 16. Read as FC2 (m = 10 classes padded
  to 16, k = F2 = 64), it fits the shape of the 5-layer MNIST network E2DM evaluates (Jiang, Kim, Lauter, Song,
  CCS 2018; the paper's ref. [30], the matrix-multiplication line FHE4DMM extends): one 7×7 convolution at
  stride 3 (8×8 outputs per channel), x², FC to 64, x², FC to 10. We use it with 5 channels (F1 = 320; the
  count as we recall E2DM's, whose text is not among the seeds). Read as FC1 instead (F1 ≤ 64, F2 ≤ 16, hemlp's config until session 9:
  C_o = 4, K = 13, S = 5: 97.6 % on the EMNIST-mnist test set), the convolutions we tried (C_o·H_o·W_o in
  (48, 64], kernels 7–24) reached 95.4–97.9 % on 2 000 held-out training digits (60 epochs, random affine
  distortions) and only a 28×28 kernel (an FC layer) 98.8 %; E2DM's network reached 98.95 % there, and
  99.09 % on the test set (bench/accuracy_real.md), above the paper's 98.7 %.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from torch import nn

from .layers import Square, mult_depth


@dataclass(frozen=True)
class FHE4DMMConfig:
    in_channels: int      # C_i
    image_size: int       # H = W
    out_channels: int     # C_o
    kernel: int           # K
    stride: int           # S
    f2: int               # F2 (FC1 output width)
    num_classes: int = 10
    source: str = ""

    @property
    def conv_out(self) -> int:
        return (self.image_size - self.kernel) // self.stride + 1

    @property
    def f1(self) -> int:  # F1 = C_o · H_o · W_o
        return self.out_channels * self.conv_out ** 2

    def describe(self) -> dict:
        return dict(asdict(self), f1=self.f1, conv_out=self.conv_out, mult_depth=5)


CONFIGS = {
    "emnist": FHE4DMMConfig(1, 28, 5, 7, 3, 64, 10,
                            source="inferred: F2=64 from OBL [1,BS/1024,4] read as FC2 (10x64).(64xBS); conv 5 ch "
                                   "7x7 stride 3 (F1=5x8x8=320) as E2DM's 5-layer network (FHE4DMM ref. [30])"),
    "cifar10": FHE4DMMConfig(3, 32, 64, 5, 3, 128, 10,
                             source="F1=6400=64x10x10 (K=5, S=3), F2=128 inferred from OBL [1,BS/128,50] "
                                    "(BRIEF 6.5 [R])"),
}


class FHE4DMMNet(nn.Sequential):
    """Conv(C_i→C_o, K, S) → x² → FC1(F1→F2) → x² → FC2(F2→classes)."""

    def __init__(self, config: FHE4DMMConfig | str = "emnist", num_classes: int | None = None):
        cfg = CONFIGS[config] if isinstance(config, str) else config
        if num_classes is not None and num_classes != cfg.num_classes:
            from dataclasses import replace

            cfg = replace(cfg, num_classes=num_classes)
        super().__init__(
            nn.Conv2d(cfg.in_channels, cfg.out_channels, cfg.kernel, cfg.stride),
            Square(),
            nn.Flatten(),
            nn.Linear(cfg.f1, cfg.f2),
            Square(),
            nn.Linear(cfg.f2, cfg.num_classes),
        )
        self.config = cfg
        self.input_shape = (cfg.in_channels, cfg.image_size, cfg.image_size)
        # small initial weights keep x² from blowing up early in training
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.xavier_uniform_(m.weight, gain=0.5)
                nn.init.zeros_(m.bias)

    def mult_depth(self) -> int:
        return mult_depth(self)


def fhe4dmm_emnist(num_classes: int = 10) -> FHE4DMMNet:
    return FHE4DMMNet("emnist", num_classes)


def fhe4dmm_cifar10(num_classes: int = 10) -> FHE4DMMNet:
    return FHE4DMMNet("cifar10", num_classes)
