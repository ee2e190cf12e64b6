"""scripts/train_deploy.py end to end on tiny synthetic EMNIST- and CIFAR-10-format files
(the real torchvision loaders), with INSECURE test parameters for speed."""
import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the training-to-deployment path needs torch: pip install 'hemlp[ml]'")
pytest.importorskip("torchvision", reason="the dataset loaders need torchvision: pip install 'hemlp[ml]'")
pytest.importorskip("onnx", reason="the ONNX export needs onnx: pip install 'hemlp[ml]'")
pytest.importorskip("matplotlib", reason="the report figures need matplotlib: pip install 'hemlp[ml]'")

from hemlp.datasets import synthetic  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "train_deploy.py"
HAVE_COMPILE = importlib.util.find_spec("hemlp.model") is not None
NO_COMPILE_REASON = "hemlp.compile does not exist yet: the compile / simulate / encrypted part was not exercised"


@pytest.fixture(scope="module")
def td():
    spec = importlib.util.spec_from_file_location("train_deploy", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(td, args):
    argv = [str(a) for a in args] + ["--quiet", "--threads", "2"]
    if not HAVE_COMPILE:
        argv.append("--no-compile")
    return td.main(argv)


def _check_report(out: Path, encrypted: bool):
    rep = json.loads((out / "report.json").read_text())
    for f in ("report.md", "model.onnx", "model.pt", "accuracy.png", "latency_stages.png", "training.png"):
        assert (out / f).is_file(), f
    assert rep["data"]["synthetic"] and "SYNTHETIC" in (out / "report.md").read_text()
    assert 0.0 <= rep["accuracy"]["plaintext"] <= 1.0 and rep["accuracy"]["n_plaintext"] > 0
    assert rep["training"]["history"] and rep["latency"]["stages"]["train"] > 0
    if not HAVE_COMPILE:
        assert rep["compile"]["status"] == "skipped"
        pytest.skip(NO_COMPILE_REASON)
    assert rep["compile"]["status"] == "ok", rep["errors"]
    assert (out / "compiled" / "plan.json").is_file() and "hemlp plan" in (out / "report.md").read_text()
    assert rep["accuracy"]["n_simulated"] == rep["accuracy"]["n_plaintext"]
    assert abs(rep["accuracy"]["simulated"] - rep["accuracy"]["plaintext"]) <= 0.05
    if encrypted:
        enc = rep["encrypted"]
        assert rep["accuracy"]["n_encrypted"] == 4
        assert enc["max_abs_err_simulated"] < 1e-3, enc          # ciphertext result == the simulated plan
        assert enc["agreement_plaintext"] >= 0.75, enc
        for k in ("secret key", "evaluation keys", "input ciphertext", "output ciphertext", "compiled model"):
            assert rep["sizes"][k] > 0, k
        assert (out / "sizes.png").is_file()
        for st in ("compile", "simulate", "keygen", "encrypt", "run_encrypted", "decrypt"):
            assert st in rep["latency"]["stages"]
    return rep


def test_emnist_format_whole_path(td, tmp_path):
    synthetic.write_emnist(tmp_path / "data", "digits", n_train=300, n_test=40, seed=0)
    out = tmp_path / "run"
    rc = _run(td, ["--dataset", "emnist", "--data-root", tmp_path / "data", "--split", "digits", "--model", "mlp",
                   "--downsample", "4", "--epochs", "3", "--batch-size", "16", "--lr", "5e-3", "--samples", "4", "--insecure", "--no-wandb", "--out", out])
    assert rc == 0
    rep = _check_report(out, encrypted=True)
    assert rep["data"]["input_shape"] == [1, 7, 7] and rep["accuracy"]["plaintext"] >= 0.5  # learnable signal


def test_cifar_format_whole_path_with_offline_wandb(td, tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="W&B logging needs wandb: pip install 'hemlp[ml]'")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")  # never online from tests
    monkeypatch.setenv("WANDB_SILENT", "true")
    synthetic.write_cifar10(tmp_path / "data", n_per_batch=40, n_test=30, seed=0)
    out = tmp_path / "run"
    rc = _run(td, ["--dataset", "cifar10", "--data-root", tmp_path / "data", "--model", "cifar-cnn",
                   "--width", "4", "--downsample", "4", "--epochs", "6", "--batch-size", "16", "--lr", "5e-3", "--samples", "4", "--insecure", "--out", out])
    assert rc == 0
    rep = json.loads((out / "report.json").read_text())
    assert rep["wandb"]["mode"] == "offline" and (out / "wandb").is_dir()
    rep = _check_report(out, encrypted=True)
    assert rep["data"]["input_shape"] == [3, 8, 8] and rep["model"]["mult_depth"] <= 6
    assert rep["accuracy"]["plaintext"] >= 0.2  # twice chance on the synthetic colour/square signal


def test_fhe4dmm_emnist_compiles_and_simulates(td, tmp_path):
    synthetic.write_emnist(tmp_path / "data", "mnist", n_train=200, n_test=30, seed=1)
    out = tmp_path / "run"
    rc = _run(td, ["--dataset", "emnist", "--data-root", tmp_path / "data", "--split", "mnist", "--model", "fhe4dmm",
                   "--epochs", "2", "--samples", "0", "--insecure", "--no-wandb", "--out", out])
    assert rc == 0
    rep = _check_report(out, encrypted=False)
    assert rep["model"]["mult_depth"] == 5 and rep["accuracy"]["encrypted"] is None
    plan = rep["compile"]["plan"]                    # the single conv layer: an im2col PCMM in layout (A),
    assert "pcmm_gather(" in plan or "matvec_conv(" in plan   # slot diagonals in layout (P) (batch 1 here)


def test_output_directory_is_protected(td, tmp_path, capsys):
    synthetic.write_emnist(tmp_path / "data", "digits", n_train=20, n_test=10)
    base = ["--dataset", "emnist", "--data-root", tmp_path / "data", "--model", "mlp", "--downsample", "4",
            "--epochs", "1", "--no-compile", "--no-wandb"]
    out = tmp_path / "run"
    assert _run(td, base + ["--out", out]) == 0
    stamp = (out / "report.json").stat().st_mtime_ns
    with pytest.raises(SystemExit, match="exists; pass --force"):
        _run(td, base + ["--out", out])
    assert (out / "report.json").stat().st_mtime_ns == stamp
    assert _run(td, base + ["--out", out, "--force"]) == 0  # a previous report directory may be replaced
    other = tmp_path / "precious"
    other.mkdir()
    (other / "thesis.tex").write_text("keep me")
    with pytest.raises(SystemExit, match="refusing"):
        _run(td, base + ["--out", other, "--force"])
    assert (other / "thesis.tex").read_text() == "keep me"


def test_missing_dataset_lists_files_and_creates_nothing(td, tmp_path, capsys):
    out = tmp_path / "run"
    rc = td.main(["--dataset", "cifar10", "--data-root", str(tmp_path / "nothing"), "--out", str(out), "--quiet",
                  "--no-wandb"])
    assert rc == 2 and not out.exists()
    err = capsys.readouterr().err
    assert "data_batch_1" in err and "cifar-10-python.tar.gz" in err
