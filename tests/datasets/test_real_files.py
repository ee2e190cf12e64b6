"""The loaders on the real EMNIST / CIFAR-10 files (skipped when the shared data folder is absent, e.g. in CI
clones: HEMLP_DATA_ROOT or <repo>/../shared/data), and CIFAR-10's explicit opt-in for unverified partial batches on
small files written here."""
import os
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torchvision", reason="the dataset loaders need torchvision: pip install 'hemlp[ml]'")

from hemlp.datasets import DatasetCorruptError, load_cifar10, synthetic  # noqa: E402
from hemlp.datasets.cifar10 import BASE, SYNTHETIC_MARKER, PartialDatasetWarning  # noqa: E402

ROOT = Path(os.environ.get("HEMLP_DATA_ROOT", Path(__file__).resolve().parents[2].parent / "shared" / "data"))
real = pytest.mark.skipif(not (ROOT / "cifar-10-batches-py").is_dir(), reason=f"no real data under {ROOT}")


def _truncate_cifar(root: Path, keep: int):
    """Rewrite the synthetic test batch with its first `keep` images: exact pixels, not the official file."""
    import pickle

    f = root / "cifar-10-batches-py" / "test_batch"
    d = pickle.loads(f.read_bytes())
    d["data"], d["labels"] = d["data"][:keep], d["labels"][:keep]
    f.write_bytes(pickle.dumps(d))
    (root / BASE / SYNTHETIC_MARKER).unlink()    # no sums of its own: verified against the official ones


def test_partial_cifar_needs_the_explicit_opt_in(tmp_path):
    synthetic.write_cifar10(tmp_path, n_per_batch=8, n_test=12)
    _truncate_cifar(tmp_path, 5)
    with pytest.raises(DatasetCorruptError, match="verify=False"):
        load_cifar10(tmp_path, train=False)
    with pytest.warns(PartialDatasetWarning, match="5 test images instead of 10000"):
        d = load_cifar10(tmp_path, train=False, verify=False)
    assert len(d) == 5 and d.info["partial"] and "partial: 5 of 10000" in d.name


@real
def test_real_emnist_test_set_is_complete():
    from hemlp.datasets import load_emnist

    d = load_emnist(ROOT, "mnist", train=False)
    assert d.x.shape == (10000, 1, 28, 28) and np.bincount(d.y).tolist() == [1000] * 10


@real
def test_real_cifar_exact_prefix_and_jpeg_test_set():
    from hemlp.datasets import load_cifar10_jpeg

    with pytest.warns(PartialDatasetWarning):
        exact = load_cifar10(ROOT, train=False, verify=False)
    jpeg = load_cifar10_jpeg(ROOT, train=False)
    assert len(exact) == 1017 and len(jpeg) == 10000 and "lossy" in jpeg.name
    assert np.array_equal(exact.y, jpeg.y[:1017])                         # same images, same order
    err = np.sqrt(np.mean((exact.x - jpeg.x[:1017]) ** 2))
    assert 0.005 < err < 0.06                                             # JPEG q75: close, not equal
    with warnings.catch_warnings():
        warnings.simplefilter("error", PartialDatasetWarning)
        with pytest.raises(DatasetCorruptError, match="verify=False"):
            load_cifar10(ROOT, train=False)                               # the default refuses unverified files


@real
@pytest.mark.slow
def test_real_cifar_jpeg_train_set(tmp_path):
    from hemlp.datasets import load_cifar10_jpeg

    d = load_cifar10_jpeg(ROOT, train=True, cache_dir=tmp_path)
    assert d.x.shape == (50000, 3, 32, 32) and np.bincount(d.y).tolist() == [5000] * 10
    again = load_cifar10_jpeg(ROOT, train=True, cache_dir=tmp_path)      # from the cache
    assert np.array_equal(again.y, d.y) and np.array_equal(again.x[:50], d.x[:50])
