"""The real-data accuracy table: the README quotes bench/accuracy_real.json's rendering verbatim, the renderer and
merger read every figure from the JSON, and train_deploy.py exits non-zero on a failed stage with the error on
stderr (typed data errors with their fix)."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"


def _module(name):
    sys.path.insert(0, str(SCRIPTS))
    try:
        spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(SCRIPTS))


@pytest.fixture(scope="module")
def at():
    return _module("accuracy_table")


def _row(name, data, sets, **kw):
    base = dict(name=name, data=data, label=name.upper(), epochs=1, augment="none", paper=None, train_s=60.0,
                train_set="train", preprocessing="pixels / 255", parameters=10, preset="N14-d6", depth=5,
                eval_key_bytes=3 * 2 ** 20, ms_per_image=0.5, sets=sets)
    base.update(kw)
    return base


def _part(rows, sweep=None, load=1.0):
    return dict(schema="hemlp-accuracy-real/1", command="cmd", machine=dict(cpus=2, date="d", load_average=[load, 0, 0],
                note="n"), threads=2, rows=rows, total_s=120.0, **({"sweep": sweep} if sweep else {}))


def test_render_and_merge_read_the_json(at, tmp_path):
    enc = dict(n=10000, plaintext=0.9871, simulated=0.987, n_encrypted=8192, encrypted=0.98765,
               agreement_enc_plain=0.999, agreement_enc_sim=1.0)
    a = _part([_row("hemlp-emnist-cnn", "emnist", {at.EMNIST_TEST: enc})])
    b = _part([_row("fhe4dmm-cifar10", "cifar10", {at.CIFAR_JPEG: dict(n=10000, plaintext=0.5, simulated=0.5)},
                    encrypted_skipped="needs ~20 GiB", memory_estimate_gib=19.6, eval_key_bytes=None, ms_per_image=None),
               _row("fhe4dmm-emnist", "emnist", {at.EMNIST_TEST: enc}, paper=0.987)], load=3.0)
    for i, p in enumerate((a, b)):
        (tmp_path / f"{i}.json").write_text(json.dumps(p))
    rep = at.merge([tmp_path / "0.json", tmp_path / "1.json"])
    assert [r["name"] for r in rep["rows"]] == ["fhe4dmm-emnist", "hemlp-emnist-cnn", "fhe4dmm-cifar10"]
    assert rep["command"] == at.COMMAND and rep["total_s"] == 240.0 and rep["machine"]["load_average"][0] == 3.0
    md = at.render(rep)
    assert "98.77 % (8192)" in md and "98.71 %" in md and "not run¹" in md and "needs ~20 GiB" in md
    assert "Paper: 98.7 %" in md and at.EMNIST_TEST in md and at.CIFAR_JPEG in md
    short = at.render_readme(rep)
    assert "98.77 % (8192)" in short and "bench/accuracy_real.md" in short and "`cmd`" not in short


def test_readme_quotes_the_table():
    at = _module("accuracy_table")
    data = ROOT / "bench" / "accuracy_real.json"
    text = (ROOT / "README.md").read_text()
    assert at.README_BEGIN in text and at.README_END in text
    if not data.is_file():
        pytest.skip("bench/accuracy_real.json not produced yet (scripts/train_deploy.py --table)")
    block = text[text.index(at.README_BEGIN) + len(at.README_BEGIN): text.index(at.README_END)]
    assert block.strip() == at.render_readme(json.loads(data.read_text())).strip(), \
        "README's accuracy table is stale: python scripts/train_deploy.py --table-merge bench/accuracy_real.json " \
        "--table bench/accuracy_real.json --readme"


@pytest.fixture(scope="module")
def td():
    pytest.importorskip("torch")
    return _module("train_deploy")


def test_failed_stage_exits_non_zero_with_the_error(td, tmp_path, capsys):
    pytest.importorskip("onnx")
    rc = td.main(["--dataset", "mnist-sample", "--model", "mlp", "--epochs", "1", "--train-limit", "200",
                  "--test-limit", "50", "--samples", "0", "--preset", "no-such-preset", "--no-wandb", "--quiet",
                  "--threads", "1", "--out", str(tmp_path / "run")])
    assert rc == 1
    err = capsys.readouterr().err
    assert "deploy failed" in err and "no-such-preset" in err
    assert json.loads((tmp_path / "run" / "report.json").read_text())["compile"]["status"] == "failed"


def test_unverifiable_cifar_is_a_typed_error_with_the_fix(td, tmp_path, capsys):
    pytest.importorskip("torchvision")
    from hemlp.datasets import synthetic
    from hemlp.datasets.cifar10 import BASE, SYNTHETIC_MARKER

    synthetic.write_cifar10(tmp_path / "data", n_per_batch=8, n_test=8)
    (tmp_path / "data" / BASE / SYNTHETIC_MARKER).unlink()     # not the official files, no sums of their own
    rc = td.main(["--dataset", "cifar10", "--data-root", str(tmp_path / "data"), "--out", str(tmp_path / "run"),
                  "--quiet", "--no-wandb"])
    assert rc == 2 and not (tmp_path / "run").exists()
    err = capsys.readouterr().err
    assert "DatasetCorruptError" in err and "--cifar-unverified" in err
