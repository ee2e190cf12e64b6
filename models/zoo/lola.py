"""The LoLA / CryptoNets MNIST network (Brutzkus, Oren & Gilad-Bachrach 2019, "Low Latency Privacy Preserving
Inference", after Gilad-Bachrach et al. 2016, CryptoNets), for 1x28x28 images.

Conv 5 maps 5x5 stride 2 (padding 1: 28x28 → 5x13x13 = 845 values, the paper's 845) → x² → dense 100 → x² →
dense num_classes. The square is the only activation, so the network is a degree-4 polynomial of its input: the
shape HE schemes were designed around.
"""
import torch.nn as nn

__all__ = ["LoLAMNIST"]


class LoLAMNIST(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv = nn.Conv2d(1, 5, kernel_size=5, stride=2, padding=1)
        self.fc1 = nn.Linear(5 * 13 * 13, 100)
        self.fc2 = nn.Linear(100, num_classes)

    def forward(self, x):
        x = self.conv(x)
        x = x * x
        x = x.view(x.size(0), -1)
        x = self.fc1(x)
        x = x.pow(2)
        x = self.fc2(x)
        return x
