"""A plain MLP for 47-class EMNIST (balanced split) as users write one: ``nn.Sequential`` of ``nn.Flatten()`` and
Linear 784-256-128-num_classes with ``nn.ReLU()`` between, the classic MNIST-tutorial network."""
import torch.nn as nn

__all__ = ["mlp_emnist"]


def mlp_emnist(num_classes=47):
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(28 * 28, 256),
        nn.ReLU(),
        nn.Linear(256, 128),
        nn.ReLU(),
        nn.Linear(128, num_classes),
    )
