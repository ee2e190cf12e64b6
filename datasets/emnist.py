"""EMNIST through torchvision's ``EMNIST`` class (``download=False``), all six splits.

On-disk layout torchvision reads (after its own download step unpacks NIST's gzip.zip)::

    <root>/EMNIST/raw/emnist-<split>-train-images-idx3-ubyte
    <root>/EMNIST/raw/emnist-<split>-train-labels-idx1-ubyte
    <root>/EMNIST/raw/emnist-<split>-test-images-idx3-ubyte
    <root>/EMNIST/raw/emnist-<split>-test-labels-idx1-ubyte

If only the gzip members of NIST's archive are present (``<root>/EMNIST/raw/<name>.gz`` or
``<root>/EMNIST/raw/gzip/<name>.gz``), they are decompressed next to them first (new files
only; nothing is overwritten). EMNIST stores images transposed; ``load_emnist`` transposes them
back so that digits look like MNIST's (``upright=False`` keeps torchvision's raw orientation).
"""
from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import numpy as np

from .common import Data
from .errors import DatasetCorruptError, DatasetNotFoundError

EMNIST_URL = "https://biometrics.nist.gov/cs_links/EMNIST/gzip.zip"
EMNIST_ZIP_MD5 = "58c8d27c78d21e728a6bc7b3cc06412e"
# split -> number of classes (torchvision's class lists; 'letters' has an unused class 0 "N/A")
EMNIST_SPLITS = {"byclass": 62, "bymerge": 47, "balanced": 47, "letters": 27, "digits": 10, "mnist": 10}


def raw_folder(root) -> Path:
    return Path(root) / "EMNIST" / "raw"


def file_names(split: str, train: bool) -> list[str]:
    part = "train" if train else "test"
    return [f"emnist-{split}-{part}-images-idx3-ubyte", f"emnist-{split}-{part}-labels-idx1-ubyte"]


def expected_files(root, split: str, train: bool | None = None) -> list[Path]:
    """The files torchvision's EMNIST(root, split, train) opens (both parts when train is None)."""
    parts = [True, False] if train is None else [train]
    return [raw_folder(root) / n for t in parts for n in file_names(split, t)]


def _how_to_get(root, split) -> str:
    raw = raw_folder(root)
    return (f"EMNIST is not downloaded at run time. Get {EMNIST_URL} (md5 {EMNIST_ZIP_MD5}), "
            f"unzip it and gunzip gzip/emnist-{split}-*-ubyte.gz into {raw}/ "
            f"(or put the .gz files in {raw}/ and hemlp decompresses them); on a machine with internet, "
            f"`torchvision.datasets.EMNIST({str(root)!r}, split={split!r}, download=True)` creates this layout.")


def _check_split(split: str) -> str:
    if split not in EMNIST_SPLITS:
        raise ValueError(f"EMNIST split {split!r} unknown; choose one of {', '.join(EMNIST_SPLITS)}")
    return split


def _materialise(root, split: str, train: bool) -> None:
    """Decompress .gz members if only those are present; raise DatasetNotFoundError otherwise."""
    files = expected_files(root, split, train)
    missing = []
    for f in files:
        if f.is_file():
            continue
        for gz in (f.with_name(f.name + ".gz"), f.parent / "gzip" / (f.name + ".gz")):
            if gz.is_file():
                tmp = f.with_name(f.name + ".part")
                try:
                    with gzip.open(gz, "rb") as src, open(tmp, "wb") as dst:
                        shutil.copyfileobj(src, dst)
                except (OSError, EOFError) as exc:
                    tmp.unlink(missing_ok=True)
                    raise DatasetCorruptError(f"EMNIST: cannot decompress {gz}: {exc}; re-download it") from None
                tmp.replace(f)
                break
        else:
            missing.append(f)
    if missing:
        raise DatasetNotFoundError(f"EMNIST ({split}, {'train' if train else 'test'})", root,
                                   expected_files(root, split, None),
                                   [m for m in expected_files(root, split, None) if not m.is_file()],
                                   _how_to_get(root, split))


def emnist_dataset(root, split: str = "digits", train: bool = True, **kwargs):
    """torchvision.datasets.EMNIST(root, split, train, download=False) with hemlp's error messages."""
    from torchvision.datasets import EMNIST

    _check_split(split)
    _materialise(root, split, train)
    try:
        return EMNIST(str(root), split=split, train=train, download=False, **kwargs)
    except (AssertionError, RuntimeError, ValueError) as exc:
        raise DatasetCorruptError(f"EMNIST ({split}): files under {raw_folder(root)} are not valid idx files "
                                  f"({type(exc).__name__}: {exc}); re-extract them from {EMNIST_URL}") from None


def load_emnist(root, split: str = "digits", train: bool = True, limit: int | None = None,
                upright: bool = True) -> Data:
    """EMNIST as arrays: x float32 (n, 1, 28, 28) in [0, 1], y int64 (torchvision's labels)."""
    ds = emnist_dataset(root, split, train)
    x = ds.data.numpy()
    y = ds.targets.numpy().astype(np.int64)
    if len(x) != len(y):
        raise DatasetCorruptError(f"EMNIST ({split}): {len(x)} images but {len(y)} labels")
    if limit is not None:
        x, y = x[:limit], y[:limit]
    if upright:
        x = x.transpose(0, 2, 1)
    x = (x.astype(np.float32) / 255.0)[:, None, :, :]
    synthetic = (raw_folder(root) / "HEMLP_SYNTHETIC").is_file()
    return Data(np.ascontiguousarray(x), y, list(ds.classes), f"emnist-{split}", synthetic,
                {"root": str(root), "train": train})
