"""Tiny synthetic data sets written in the exact on-disk formats torchvision reads, so tests and
demos exercise the real loaders without the real (large, not downloadable here) files.

- EMNIST: big-endian idx files (magic 0x0803 images / 0x0801 labels, uint8) under
  ``<root>/EMNIST/raw/`` with torchvision's names, images stored transposed like NIST's; the
  ``.gz`` members of NIST's archive are written too when ``gz=True`` (``gz_only=True`` writes
  only those, as if the archive had been unzipped but not decompressed).
- CIFAR-10: ``<root>/cifar-10-batches-py/`` with the five ``data_batch_i`` pickles, ``test_batch``
  and ``batches.meta`` (same dict keys and dtypes as the official pickles), plus
  ``hemlp-synthetic.json`` holding their md5 sums (the official md5s cannot match).

The images carry a simple class signal (a class-dependent stroke / colour) so that a tiny model
learns something and accuracy numbers are meaningful smoke checks. Everything is seeded.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import pickle
import struct
from pathlib import Path

import numpy as np

from .cifar10 import BASE, SYNTHETIC_MARKER
from .emnist import EMNIST_SPLITS, file_names, raw_folder

CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def idx_bytes(arr: np.ndarray) -> bytes:
    """Serialise a uint8 array in the idx format (big-endian dims) read by torchvision."""
    arr = np.ascontiguousarray(arr, dtype=np.uint8)
    header = struct.pack(">I", 0x0800 | arr.ndim) + b"".join(struct.pack(">I", d) for d in arr.shape)
    return header + arr.tobytes()


def _emnist_images(labels: np.ndarray, rng, num_classes: int) -> np.ndarray:
    """28x28 uint8 images: a bright bar (orientation = label parity, position = label // 2) plus
    corner blocks telling apart groups of 20 labels, jitter and noise. Distinct for every class."""
    n = len(labels)
    npos = min((num_classes + 1) // 2, 10)
    spacing = max(2, 20 // npos)
    img = rng.integers(0, 40, (n, 28, 28)).astype(np.float64)
    for i, c in enumerate(labels):
        c = int(c)
        pos = 3 + spacing * ((c // 2) % npos)
        group = (c // 2) // npos
        if c % 2 == 0:
            img[i, pos : pos + 3, 4:24] += 200
        else:
            img[i, 4:24, pos : pos + 3] += 200
        if group & 1:
            img[i, 0:4, 0:4] += 200
        if group & 2:
            img[i, 24:28, 24:28] += 200
        img[i] = np.roll(img[i], rng.integers(-1, 2, 2), axis=(0, 1))
    return np.clip(img, 0, 255).astype(np.uint8)


def write_emnist(root, split: str = "digits", n_train: int = 200, n_test: int = 50, seed: int = 0,
                 gz: bool = False, gz_only: bool = False) -> list[Path]:
    """Write synthetic EMNIST `split` files under <root>/EMNIST/raw/; returns the paths written."""
    if split not in EMNIST_SPLITS:
        raise ValueError(f"unknown EMNIST split {split!r}")
    rng = np.random.default_rng(seed)
    raw = raw_folder(root)
    raw.mkdir(parents=True, exist_ok=True)
    k = EMNIST_SPLITS[split]
    lo = 1 if split == "letters" else 0  # 'letters' labels are 1..26
    written = []
    for train, n in ((True, n_train), (False, n_test)):
        labels = (np.arange(n) % (k - lo) + lo).astype(np.uint8)
        labels = labels[rng.permutation(n)]
        images = _emnist_images(labels, rng, k).transpose(0, 2, 1)  # NIST stores images transposed
        for name, arr in zip(file_names(split, train), (images, labels)):
            data = idx_bytes(arr)
            if not gz_only:
                (raw / name).write_bytes(data)
                written.append(raw / name)
            if gz or gz_only:
                with gzip.GzipFile(raw / (name + ".gz"), "wb", mtime=0) as f:
                    f.write(data)
                written.append(raw / (name + ".gz"))
    (raw / "HEMLP_SYNTHETIC").write_text(f"synthetic EMNIST written by hemlp.datasets.synthetic (seed {seed})\n")
    return written


def _cifar_images(labels: np.ndarray, rng) -> np.ndarray:
    """(n, 3072) uint8 rows in CIFAR's channel-major layout; colour and a square encode the label."""
    n = len(labels)
    img = rng.normal(100, 25, (n, 3, 32, 32))
    for i, c in enumerate(labels):
        c = int(c)
        img[i, c % 3] += 60
        r, q = 4 + 6 * (c % 4), 4 + 8 * (c // 4)
        img[i, :, r : r + 6, q : q + 6] += 90
    return np.clip(img, 0, 255).astype(np.uint8).reshape(n, 3072)


def write_cifar10(root, n_per_batch: int = 40, n_test: int = 50, seed: int = 0) -> dict:
    """Write synthetic cifar-10-batches-py under root; returns {file name: md5}."""
    rng = np.random.default_rng(seed)
    folder = Path(root) / BASE
    folder.mkdir(parents=True, exist_ok=True)
    entries = {}
    for i in range(1, 6):
        entries[f"data_batch_{i}"] = (f"training batch {i} of 5", n_per_batch)
    entries["test_batch"] = ("testing batch 1 of 1", n_test)
    md5 = {}
    for name, (label, n) in entries.items():
        labels = (np.arange(n) % 10)[rng.permutation(n)]
        d = {"batch_label": label, "labels": [int(v) for v in labels], "data": _cifar_images(labels, rng),
             "filenames": [f"synthetic_{name}_{j:05d}.png" for j in range(n)]}
        (folder / name).write_bytes(pickle.dumps(d, protocol=2))
    meta = {"num_cases_per_batch": n_per_batch, "label_names": CIFAR10_CLASSES, "num_vis": 3072}
    (folder / "batches.meta").write_bytes(pickle.dumps(meta, protocol=2))
    for name in list(entries) + ["batches.meta"]:
        md5[name] = hashlib.md5((folder / name).read_bytes()).hexdigest()
    (folder / SYNTHETIC_MARKER).write_text(json.dumps(
        {"note": "synthetic CIFAR-10-format data written by hemlp.datasets.synthetic; not the real data set",
         "seed": seed, "md5": md5}, indent=1))
    return md5
