"""#19 bullet 4: the base install (numpy) runs every command that needs no optional package; the others name the extra
that installs it (a typed error, not a raw ModuleNotFoundError). A numpy-only install is simulated in a fresh
interpreter by making the optional packages unimportable (sys.modules[name] = None)."""
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
#: every optional package of setup.py's extras (and what they pull in that hemlp could import)
OPTIONAL = ("torch", "torchvision", "onnx", "ray", "grpc", "tqdm", "rich", "mlxtend", "matplotlib", "wandb", "mpmath",
            "threadpoolctl", "scipy")
PRELUDE = ("import sys\nfor m in {mods!r}:\n    sys.modules[m] = None\n"
           "from hemlp.apps.cli import main\nsys.exit(main(sys.argv[1:]))\n")


def base_install(*args, cwd=None):
    """`hemlp ARGS` in an interpreter where none of the optional packages can be imported."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", PRELUDE.format(mods=OPTIONAL), *map(str, args)],
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=600)


@pytest.fixture(scope="module")
def artefacts(tmp_path_factory):
    """A compiled model directory (made with torch here), keys and inputs: what a client / server receives."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx")
    from hemlp.models import Square   # importable by name: the .pt file pickles the module

    d = tmp_path_factory.mktemp("base")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 8), Square(), torch.nn.Linear(8, 3)).eval()
    x = np.random.default_rng(1).uniform(-1, 1, (4, 1, 4, 4))
    np.save(d / "x.npy", x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import hemlp

        hemlp.compile(model, x, batch_size=4, allow_insecure=True).save(d / "m")
        torch.onnx.export(model, (torch.zeros(1, 1, 4, 4),), str(d / "m.onnx"), dynamo=False, input_names=["x"])
        torch.save(model, d / "m.pt")
    with torch.no_grad():
        want = model(torch.as_tensor(x, dtype=torch.float32)).double().numpy()
    return d, want


def test_client_and_server_commands_need_only_numpy(artefacts):
    d, want = artefacts
    for args in (("keygen", d / "m", "-o", d / "keys"),
                 ("encrypt", d / "m", "-k", d / "keys" / "secret.key", "-i", d / "x.npy", "-o", d / "x.ct"),
                 ("run", d / "m", "-e", d / "keys" / "eval.keys", "-i", d / "x.ct", "-o", d / "y.ct"),
                 ("decrypt", d / "m", "-k", d / "keys" / "secret.key", "-i", d / "y.ct", "-o", d / "y.npy")):
        p = base_install(*args, "--insecure")
        assert p.returncode == 0, (args[0], p.stderr[-2000:])
    np.testing.assert_allclose(np.load(d / "y.npy"), want, atol=1e-3)
    (d / "cts").mkdir()
    (d / "cts" / "a.ct").write_bytes((d / "x.ct").read_bytes())
    p = base_install("batch", d / "m", "-e", d / "keys" / "eval.keys", "-i", d / "cts", "-o", d / "out", "--insecure")
    assert p.returncode == 0 and (d / "out" / "a.ct").is_file(), p.stderr[-2000:]   # no tqdm needed


def test_commands_that_need_an_extra_name_it(artefacts, tmp_path):
    d, _ = artefacts
    for model, extra in ((d / "m.onnx", "hemlp[ml]"), (d / "m.pt", "hemlp[ml]")):
        p = base_install("compile", model, "--input-shape", "1,4,4", "--insecure", "--trust-pickle", "-o", tmp_path / "c")
        assert p.returncode == 2 and extra in p.stderr and "Traceback" not in p.stderr, p.stderr[-2000:]
    p = base_install("batch", d / "m", "-e", d / "m" / "plan.json", "-i", d / "x.npy", "-o", tmp_path / "o",
                     "--runtime", "ray", "--insecure")
    assert p.returncode == 2 and "hemlp[ray]" in p.stderr and "Traceback" not in p.stderr, p.stderr[-2000:]


def test_library_raises_a_typed_error_naming_the_extra(artefacts):
    d, _ = artefacts
    code = (f"import sys\nfor m in {OPTIONAL!r}:\n    sys.modules[m] = None\n"
            "import numpy as np, hemlp\n"
            "try:\n"
            f"    hemlp.compile({str(d / 'm.onnx')!r}, np.zeros((1, 1, 4, 4)), allow_insecure=True)\n"
            "except hemlp.MissingDependencyError as e:\n"
            "    assert isinstance(e, ImportError) and \"pip install 'hemlp[ml]'\" in str(e), e\n"
            "    print('typed')\n")
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert p.stdout.strip() == "typed", p.stderr[-2000:]
