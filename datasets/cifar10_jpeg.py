"""CIFAR-10 as JPEG (quality ~75, lossy): all 60 000 images, for training and a lossy 10 000-image test set.

Layout under the data root (see the data folder's README)::

    <root>/cifar10-jpeg/cifar10_jpg_q75_train_test.tar.gz   train/<class>/NNNN.jpg, test/<class>/NNNN.jpg
    <root>/cifar10-jpeg/cifar10_test_jpeg_q75.npz           x uint8 (10000, 32, 32, 3), y (official order)

The archive is decoded once (Pillow) and cached as .npz in ``cache_dir`` when one is given. Reports must
name this set as lossy: accuracy on it is close to, but not, CIFAR-10 accuracy.
"""
from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np

from .common import Data
from .errors import DatasetCorruptError, DatasetNotFoundError

__all__ = ["load_cifar10_jpeg", "CLASSES", "ARCHIVE", "TEST_NPZ"]

CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
ARCHIVE = "cifar10-jpeg/cifar10_jpg_q75_train_test.tar.gz"
TEST_NPZ = "cifar10-jpeg/cifar10_test_jpeg_q75.npz"
SIZE = {True: 50000, False: 10000}


def _decode_archive(path: Path, part: str) -> tuple[np.ndarray, np.ndarray]:
    from PIL import Image

    xs, ys, names = [], [], []
    try:
        with tarfile.open(path, "r:gz") as tar:
            for m in tar:
                parts = Path(m.name).parts
                if not m.isfile() or len(parts) < 3 or parts[-3] != part or not m.name.endswith(".jpg"):
                    continue
                cls = parts[-2]
                if cls not in CLASSES:
                    raise DatasetCorruptError(f"CIFAR-10 JPEG: unknown class folder {cls!r} in {path} ({m.name})")
                with Image.open(io.BytesIO(tar.extractfile(m).read())) as im:
                    xs.append(np.asarray(im.convert("RGB"), dtype=np.uint8))
                ys.append(CLASSES.index(cls))
                names.append(m.name)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise DatasetCorruptError(f"CIFAR-10 JPEG: cannot read {path}: {type(exc).__name__}: {exc}; re-copy the "
                                  "archive") from None
    order = np.argsort(names, kind="stable")          # deterministic order, whatever the archive's
    return np.stack(xs)[order], np.asarray(ys, dtype=np.int64)[order]


def load_cifar10_jpeg(root, train: bool = True, limit: int | None = None, cache_dir=None) -> Data:
    """x float32 (n, 3, 32, 32) in [0, 1], y int64; train: the 50 000 JPEG training images (decoded from the
    archive), test: the 10 000 JPEG test images in official order."""
    root = Path(root)
    arch, npz = root / ARCHIVE, root / TEST_NPZ
    if not train and npz.is_file():
        try:
            with np.load(npz, allow_pickle=False) as z:
                x, y = z["x"], z["y"].astype(np.int64)
        except (OSError, ValueError, KeyError) as exc:
            raise DatasetCorruptError(f"CIFAR-10 JPEG: cannot read {npz}: {exc}") from None
    else:
        if not arch.is_file():
            raise DatasetNotFoundError("CIFAR-10 JPEG", root, [arch, npz], [p for p in (arch, npz) if not p.is_file()],
                                       "put the JPEG copy of CIFAR-10 (train/<class>/*.jpg, test/<class>/*.jpg) there "
                                       "as a .tar.gz, or use the exact python batches (hemlp.datasets.load_cifar10)")
        cache = None if cache_dir is None else Path(cache_dir) / f"cifar10_jpeg_{'train' if train else 'test'}.npz"
        if cache is not None and cache.is_file() and cache.stat().st_mtime >= arch.stat().st_mtime:
            with np.load(cache, allow_pickle=False) as z:
                x, y = z["x"], z["y"]
        else:
            x, y = _decode_archive(arch, "train" if train else "test")
            if cache is not None:
                cache.parent.mkdir(parents=True, exist_ok=True)
                tmp = cache.with_name(cache.name + ".tmp.npz")
                np.savez(tmp, x=x, y=y)
                tmp.replace(cache)
    if x.ndim != 4 or x.shape[1:] != (32, 32, 3) or len(x) != len(y):
        raise DatasetCorruptError(f"CIFAR-10 JPEG: expected (n, 32, 32, 3) images with n labels, got {x.shape} and "
                                  f"{len(y)} labels")
    if len(y) != SIZE[train]:
        raise DatasetCorruptError(f"CIFAR-10 JPEG: {len(y)} {'train' if train else 'test'} images, expected "
                                  f"{SIZE[train]}; the archive is incomplete")
    if limit is not None:
        x, y = x[:limit], y[:limit]
    x = (x.astype(np.float32) / 255.0).transpose(0, 3, 1, 2)
    name = f"cifar10-jpeg-q75 {'train' if train else 'test'} ({SIZE[train]} images, lossy JPEG)"
    return Data(np.ascontiguousarray(x), y, list(CLASSES), name, False,
                {"root": str(root), "train": train, "lossy": "JPEG q75"})
