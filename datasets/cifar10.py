"""CIFAR-10 through torchvision's ``CIFAR10`` class (``download=False``, md5-checked).

On-disk layout torchvision reads::

    <root>/cifar-10-batches-py/{data_batch_1..5, test_batch, batches.meta}

each a pickle whose md5 torchvision checks against the official archive's. If only the archive
``<root>/cifar-10-python.tar.gz`` is present it is md5-checked and extracted first.

Synthetic files written by ``hemlp.datasets.synthetic.write_cifar10`` carry a marker
``hemlp-synthetic.json`` with their own md5 sums; those are verified instead of the official
ones and the returned ``Data`` is flagged ``synthetic=True`` (reports say so).
"""
from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np

from .common import Data
from .errors import DatasetCorruptError, DatasetNotFoundError

CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR10_TGZ_MD5 = "c58f30108f718f92721af3b95e74349a"
BASE = "cifar-10-batches-py"
SYNTHETIC_MARKER = "hemlp-synthetic.json"


def official_md5() -> dict:
    """File name -> md5 as torchvision verifies them."""
    from torchvision.datasets import CIFAR10

    d = {n: m for n, m in CIFAR10.train_list + CIFAR10.test_list}
    d[CIFAR10.meta["filename"]] = CIFAR10.meta["md5"]
    return d


FILES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch", "batches.meta"]


def expected_files(root) -> list[Path]:
    return [Path(root) / BASE / n for n in FILES]


def _how_to_get(root) -> str:
    return (f"CIFAR-10 is not downloaded at run time. Get {CIFAR10_URL} (md5 {CIFAR10_TGZ_MD5}, 163 MB) and "
            f"put it at {Path(root) / 'cifar-10-python.tar.gz'} (hemlp extracts it) or extract it into {root}/; "
            f"on a machine with internet, `torchvision.datasets.CIFAR10({str(root)!r}, download=True)` creates "
            f"this layout.")


def _prepare(root, verify: bool | str) -> dict | None:
    """Check presence (extracting the archive if needed) and return the md5 table to verify."""
    root = Path(root)
    files = expected_files(root)
    if not all(f.is_file() for f in files):
        tgz = root / "cifar-10-python.tar.gz"
        if tgz.is_file():
            from torchvision.datasets.utils import check_integrity, extract_archive

            if verify and not check_integrity(str(tgz), CIFAR10_TGZ_MD5):
                raise DatasetCorruptError(f"CIFAR-10: {tgz} fails its md5 check ({CIFAR10_TGZ_MD5}); re-download it")
            extract_archive(str(tgz), str(root))
    missing = [f for f in files if not f.is_file()]
    if missing:
        raise DatasetNotFoundError("CIFAR-10", root, files, missing, _how_to_get(root))
    if not verify:
        return None
    marker = root / BASE / SYNTHETIC_MARKER
    if marker.is_file():
        try:
            table = json.loads(marker.read_text())["md5"]
        except (ValueError, KeyError, TypeError) as exc:
            raise DatasetCorruptError(f"CIFAR-10: unreadable synthetic marker {marker}: {exc}") from None
        return {n: table[n] for n in FILES}
    return official_md5()


def cifar10_dataset(root, train: bool = True, verify: bool = True, **kwargs):
    """torchvision.datasets.CIFAR10(root, train, download=False) with hemlp's errors.

    verify=True checks every file's md5 (official sums; a synthetic folder's own marker sums)."""
    from torchvision.datasets import CIFAR10
    from torchvision.datasets.utils import check_integrity

    table = _prepare(root, verify)
    if table is not None:
        bad = [n for n in FILES if not check_integrity(str(Path(root) / BASE / n), table[n])]
        if bad:
            raise DatasetCorruptError(
                "CIFAR-10: md5 mismatch for " + ", ".join(f"{Path(root) / BASE / n} (expected {table[n]})" for n in bad)
                + f"; the files are corrupted or not the official ones: re-extract {CIFAR10_URL}, or, for a copy you "
                "know to hold exact but partial batches, load it unverified with verify=False (train_deploy.py: "
                "--cifar-unverified), which reports the set as partial")
    md5 = table if table is not None else {n: None for n in FILES}

    class _CIFAR10(CIFAR10):  # same loader, md5 table chosen above (official unless synthetic/unverified)
        train_list = [[n, md5[n]] for n, _ in CIFAR10.train_list]
        test_list = [[n, md5[n]] for n, _ in CIFAR10.test_list]
        meta = dict(CIFAR10.meta, md5=md5[CIFAR10.meta["filename"]])

    try:
        return _CIFAR10(str(root), train=train, download=False, **kwargs)
    except (RuntimeError, KeyError, ValueError, EOFError, OSError, pickle.UnpicklingError) as exc:
        if isinstance(exc, DatasetNotFoundError):
            raise
        raise DatasetCorruptError(f"CIFAR-10: cannot read {Path(root) / BASE}: {type(exc).__name__}: {exc}") from None


class PartialDatasetWarning(UserWarning):
    """A data set was loaded without verification and holds fewer samples than the official one."""


FULL_SIZE = {True: 50000, False: 10000}


def load_cifar10(root, train: bool = True, limit: int | None = None, verify: bool = True) -> Data:
    """CIFAR-10 as arrays: x float32 (n, 3, 32, 32) in [0, 1], y int64.

    verify=False is the explicit opt-in for unverified files (e.g. exact but partial batches): a
    PartialDatasetWarning states how many images were found, and ``info['partial']`` / the name say so."""
    ds = cifar10_dataset(root, train, verify)
    x, y = np.asarray(ds.data), np.asarray(ds.targets, dtype=np.int64)
    name, info = "cifar10", {"root": str(root), "train": train, "verified": bool(verify)}
    if not verify and len(y) != FULL_SIZE[train]:
        import warnings

        info["partial"] = True
        name = f"cifar10 {'train' if train else 'test'} (unverified, partial: {len(y)} of {FULL_SIZE[train]} images)"
        warnings.warn(f"CIFAR-10 loaded without md5 verification (verify=False) from {Path(root) / BASE}: "
                      f"{len(y)} {'training' if train else 'test'} images instead of {FULL_SIZE[train]}; accuracy on "
                      "it is not CIFAR-10 accuracy: name the subset when reporting", PartialDatasetWarning, stacklevel=2)
    if limit is not None:
        x, y = x[:limit], y[:limit]
    x = (x.astype(np.float32) / 255.0).transpose(0, 3, 1, 2)
    synthetic = (Path(root) / BASE / SYNTHETIC_MARKER).is_file()
    return Data(np.ascontiguousarray(x), y, list(ds.classes), name, synthetic, info)
