"""Shared container and the name-based entry point used by scripts and the CLI."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Data:
    """Images as float32 NCHW in [0, 1], labels as int64."""

    x: np.ndarray
    y: np.ndarray
    classes: list
    name: str
    synthetic: bool = False
    info: dict = field(default_factory=dict)

    def __len__(self):
        return len(self.y)

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def subset(self, n: int | None) -> "Data":
        """The first n samples (all when n is None)."""
        if n is None or n >= len(self):
            return self
        return Data(self.x[:n], self.y[:n], self.classes, self.name, self.synthetic, dict(self.info))


DATASETS = ("mnist-sample", "emnist", "cifar10")


def load(name: str, root=None, train: bool = True, split: str = "digits", **kw) -> Data:
    """Load a dataset by name: ``mnist-sample`` (no root needed), ``emnist`` or ``cifar10``."""
    if name == "mnist-sample":
        from .mnist_sample import load_mnist_sample

        return load_mnist_sample(train=train, **kw)
    if root is None:
        raise ValueError(f"dataset {name!r} needs a data root (--data-root): nothing is downloaded at run time")
    if name == "emnist":
        from .emnist import load_emnist

        return load_emnist(root, split=split, train=train, **kw)
    if name == "cifar10":
        from .cifar10 import load_cifar10

        return load_cifar10(root, train=train, **kw)
    raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
