"""A small HE-friendly CNN for 32×32×3 inputs within a leveled budget of ≤ 6 levels
(each conv / linear / average pool = 1 level of plaintext-weight PCMM + rescale, each x² = 1):

    conv 3→16 k3 s2 p1 (32→16)  1
    x²                          2
    conv 16→32 k3 s2 p1 (16→8)  3
    x²                          4
    avgpool 2 (8→4)             5   (0 when folded into the next linear layer)
    linear 512→10               6

No bootstrapping is needed: 6 levels fit the 128-bit N14-d6 preset.
"""
from __future__ import annotations

from torch import nn

from .layers import activation, mult_depth


class CifarCNN(nn.Sequential):
    def __init__(self, num_classes: int = 10, width: int = 16, act: str = "square", in_channels: int = 3,
                 image_size: int = 32):
        s = image_size // 8
        super().__init__(
            nn.Conv2d(in_channels, width, 3, 2, 1),
            activation(act),
            nn.Conv2d(width, 2 * width, 3, 2, 1),
            activation(act),
            nn.AvgPool2d(2),
            nn.Flatten(),
            nn.Linear(2 * width * s * s, num_classes),
        )
        self.input_shape = (in_channels, image_size, image_size)
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.xavier_uniform_(m.weight, gain=0.5)
                nn.init.zeros_(m.bias)

    def mult_depth(self) -> int:
        return mult_depth(self)


LEVEL_BUDGET = 6
