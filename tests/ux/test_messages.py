"""#19 bullet 6: every message the issue lists says what happened and what to do (one test per message)."""
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import hemlp  # noqa: E402
from hemlp.errors import ShapeError, UnsupportedError  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def cli(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", "import sys; from hemlp.apps.cli import main; sys.exit(main())",
                           *map(str, args)], capture_output=True, text=True, env=env, cwd=cwd, timeout=600)


class Square(torch.nn.Module):
    def forward(self, x):
        return x * x


def _tiny():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 8), Square(),
                               torch.nn.Linear(8, 3)).eval()


def _x(n=4):
    return np.random.default_rng(1).uniform(-1, 1, (n, 1, 4, 4))


@pytest.fixture(scope="module")
def tiny_onnx(tmp_path_factory):
    pytest.importorskip("onnx")
    path = tmp_path_factory.mktemp("msg") / "tiny.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_tiny(), (torch.zeros(1, 1, 4, 4),), str(path), dynamo=False, input_names=["x"],
                          dynamic_axes={"x": {0: "batch"}})
    return path


def test_decrypt_of_a_ciphertext_never_run():
    cm = hemlp.compile(_tiny(), _x(), batch_size=4, allow_insecure=True)
    sk, _ = cm.keygen()
    ct = cm.encrypt(_x(), sk)
    with pytest.raises(ShapeError, match="run it first"):
        cm.decrypt(ct, sk)


def test_cli_unknown_compile_option(tmp_path, tiny_onnx):
    p = cli("compile", tiny_onnx, "--input-shape", "1,4,4", "--insecure", "--option", "bogus=1", "-o", tmp_path / "m")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "'bogus' is not a compile option" in p.stderr and "activation_degree" in p.stderr
    p = cli("compile", tiny_onnx, "--input-shape", "1,4,4", "--option", "allow_insecure=true", "-o", tmp_path / "m")
    assert p.returncode == 2 and "--insecure" in p.stderr


def test_onnx_lstm_is_named_not_its_transpose(tmp_path):
    pytest.importorskip("onnx")

    class Recurrent(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm, self.fc = torch.nn.LSTM(4, 8, batch_first=True), torch.nn.Linear(8, 2)

        def forward(self, x):
            y, _ = self.lstm(x)
            return self.fc(y[:, -1])

    path = tmp_path / "lstm.onnx"
    torch.onnx.export(Recurrent().eval(), (torch.zeros(1, 5, 4),), str(path), dynamo=False, input_names=["x"])
    with pytest.raises(UnsupportedError, match="LSTM") as ei:
        hemlp.compile(str(path), np.zeros((2, 5, 4)), batch_size=2, allow_insecure=True)
    assert "Transpose" not in str(ei.value) and "recurrent" in str(ei.value)


def test_x_shape_0_works_as_x_size_0():
    class ByShape(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.fc = torch.nn.Linear(16, 3)

        def forward(self, x):
            return self.fc(x.reshape(x.shape[0], -1))

    class BySize(ByShape):
        def forward(self, x):
            return self.fc(x.view(x.size(0), -1))

    a = hemlp.compile(ByShape().eval(), _x(), batch_size=4, allow_insecure=True)
    b = hemlp.compile(BySize().eval(), _x(), batch_size=4, allow_insecure=True)
    np.testing.assert_array_equal(a.simulate(_x()), b.simulate(_x()))


def test_final_softmax_says_apply_it_after_decryption(tmp_path):
    torch.manual_seed(0)
    seq = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 4), torch.nn.Softmax(dim=1)).eval()

    class Functional(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(16, 4)

        def forward(self, x):
            return torch.softmax(self.fc(x.flatten(1)), dim=1)

    for model in (seq, Functional().eval()):
        with pytest.raises(UnsupportedError, match="after decryption|decrypted output"):
            hemlp.compile(model, _x(), batch_size=4, allow_insecure=True)
    pytest.importorskip("onnx")
    path = tmp_path / "soft.onnx"
    torch.onnx.export(seq, (torch.zeros(1, 1, 4, 4),), str(path), dynamo=False, input_names=["x"])
    with pytest.raises(UnsupportedError, match="decrypted output"):
        hemlp.compile(str(path), _x(), batch_size=4, allow_insecure=True)


def test_insecure_preset_message_names_the_cli_flag(tmp_path, tiny_onnx):
    p = cli("compile", tiny_onnx, "--input-shape", "1,4,4", "--preset", "test-N12", "-o", tmp_path / "m")
    assert p.returncode == 2 and "--insecure" in p.stderr and "allow_insecure" not in p.stderr
    cli("compile", tiny_onnx, "--input-shape", "1,4,4", "--insecure", "-o", tmp_path / "m")
    p = cli("keygen", tmp_path / "m", "-o", tmp_path / "k")          # the directory's test preset, no --insecure
    assert p.returncode == 2 and "--insecure" in p.stderr and "allow_insecure" not in p.stderr


def test_batch_job_mismatch_names_force_not_restart(tmp_path, tiny_onnx):
    m = tmp_path / "m"
    p = cli("compile", tiny_onnx, "--input-shape", "1,4,4", "--insecure", "-o", m)
    for words in ("evaluation keys", "client upload", "peak memory"):   # hemlp compile states the estimates
        assert words in p.stdout
    cm = hemlp.load(m, allow_insecure=True)
    sk, ek = cm.keygen()
    ek.save(tmp_path / "eval.keys")
    (tmp_path / "in").mkdir()
    cm.encrypt(_x(1), sk).save(tmp_path / "in" / "a.ct")
    out = tmp_path / "out"
    out.mkdir()
    (out / "batch_manifest.json").write_text(json.dumps(dict(format="hemlp-batch-manifest", version=1,
                                                             job="model:other:0", items={})))
    p = cli("batch", m, "-e", tmp_path / "eval.keys", "-i", tmp_path / "in", "-o", out, "--insecure")
    assert p.returncode == 2 and "--force" in p.stderr and "--restart" not in p.stderr and "restart=True" not in p.stderr


def test_help_is_not_cut_mid_sentence():
    p = cli("--help")
    assert p.returncode == 0
    desc = p.stdout.split("\n\n")[1]
    assert desc.rstrip().endswith(".") and "→" not in desc.rstrip()[-3:]
    assert "decrypt" in desc and "batch" in desc


def test_every_argument_has_help():
    import argparse

    from hemlp.apps.cli import parser

    ap = parser()
    missing = []
    subs = next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction))
    for name, sp in list(subs.choices.items()) + [("hemlp", ap)]:
        for a in sp._actions:
            if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            if not a.help:
                missing.append(f"{name} {'/'.join(a.option_strings) or a.dest}")
    assert not missing, missing
