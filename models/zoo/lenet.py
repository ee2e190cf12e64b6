"""LeNet-5 (LeCun et al. 1998) as commonly written in PyTorch (the shape of the PyTorch "Neural Networks"
tutorial's ``Net``), for 1x28x28 MNIST/EMNIST images.

Conv 6@5x5 (padding 2, so 28x28 plays the paper's 32x32 input) → pool → conv 16@5x5 → pool → FC 120 → FC 84 →
FC num_classes. Pooling is 2x2 average pooling, as the paper's subsampling layers were; the activation is the ReLU
that PyTorch versions use in place of the paper's tanh.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["LeNet5"]


class LeNet5(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, num_classes)

    def forward(self, x):
        x = F.avg_pool2d(F.relu(self.conv1(x)), 2)   # 6x28x28 -> 6x14x14
        x = F.avg_pool2d(F.relu(self.conv2(x)), 2)   # 16x10x10 -> 16x5x5
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = self.fc3(x)
        return x
