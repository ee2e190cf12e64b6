"""HE-friendly MLP 784-128-64-10 with square or low-degree polynomial activations.

Depth: FC(1) → act(1) → FC(1) → act(1) → FC(1) = 5 levels (fits the 6-level N14-d6 preset).
"""
from __future__ import annotations

from torch import nn

from .layers import activation, mult_depth


class HEMLP(nn.Sequential):
    def __init__(self, in_features: int = 784, hidden=(128, 64), num_classes: int = 10, act: str = "square",
                 in_channels: int = 1, image_size: int = 28):
        layers = [nn.Flatten()]
        d = in_features
        for h in hidden:
            layers += [nn.Linear(d, h), activation(act)]
            d = h
        layers.append(nn.Linear(d, num_classes))
        super().__init__(*layers)
        self.act = act
        self.input_shape = (in_channels, image_size, image_size) if in_channels * image_size ** 2 == in_features \
            else (in_features,)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight, gain=0.5)
                nn.init.zeros_(m.bias)

    def mult_depth(self) -> int:
        return mult_depth(self)
