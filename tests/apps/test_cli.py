"""The hemlp console script: keygen → encrypt → run → decrypt as separate processes exchanging files."""
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]


#: commands that load a compiled model directory: the tests' models use insecure test presets, which the user's
#: policy refuses unless --insecure is given (tests/apps/test_cli.py::test_weak_published_parameters_are_refused)
LOADS_MODEL = {"keygen", "encrypt", "run", "decrypt", "batch"}


def hemlp(*args, check=True, cwd=None, insecure=True):
    """Run `hemlp ...` in a fresh interpreter (the console script's entry point)."""
    if insecure and args and args[0] in LOADS_MODEL:
        args = (*args, "--insecure")
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", "import sys; from hemlp.apps.cli import main; sys.exit(main())",
                        *map(str, args)], capture_output=True, text=True, env=env, cwd=cwd, timeout=600)
    if check and p.returncode != 0:
        raise AssertionError(f"hemlp {' '.join(map(str, args))} failed ({p.returncode}):\n{p.stderr}")
    return p


def test_help_and_bench_delegation():
    p = hemlp("--help")
    for c in ("compile", "keygen", "encrypt", "run", "decrypt", "batch", "bench", "demo"):
        assert c in p.stdout
    p = hemlp("bench", "--help")
    assert "hemlp.bench" in p.stdout


def test_batch_runs_a_compiled_model_on_ray(tmp_path, onnx_model):
    """`hemlp batch` (Ray runtime): every encrypted batch of a directory comes out decrypting correctly."""
    pytest.importorskip("ray", reason="hemlp batch runs on Ray: pip install 'ray[default]'")
    import hemlp as hm

    path, x, want = onnx_model
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = hm.compile(str(path), x, batch_size=8, allow_insecure=True)
        cm.save(tmp_path / "model")
        sk, ek = cm.keygen()
        ek.save(tmp_path / "eval.keys")
        (tmp_path / "cts").mkdir()
        xs = {f"b{i}.ct": x * (1 - 0.3 * i) for i in range(3)}  # three different batches
        for name, xi in xs.items():
            cm.encrypt(xi, sk).save(tmp_path / "cts" / name)
    keys = tmp_path / "keys"
    keys.mkdir(mode=0o700)
    p = hemlp("batch", tmp_path / "model", "-e", tmp_path / "eval.keys", "-i", tmp_path / "cts",
              "-o", tmp_path / "out", "--runtime", "ray", "--workers", 1, "--shared-keys", keys, "--json")
    info = json.loads(p.stdout)
    assert len(list(keys.glob("*.keys"))) == 1       # the workers mapped one key file there
    assert info["command"] == "batch" and sorted(Path(f).name for f in info["outputs"]) == sorted(xs)
    manifest = json.loads((tmp_path / "out" / "batch_manifest.json").read_text())["items"]
    assert all(manifest[n]["status"] == "done" for n in xs)
    for name, xi in xs.items():
        y = cm.decrypt(cm.load_encrypted(tmp_path / "out" / name), sk)
        assert y.shape == (5, 3)
        np.testing.assert_allclose(y, cm.simulate(xi), atol=1e-5)
        if name == "b0.ct":
            np.testing.assert_allclose(y, want, atol=1e-3)  # and the PyTorch model's outputs


@pytest.fixture(scope="module")
def onnx_model(tmp_path_factory):
    torch = pytest.importorskip("torch", reason="exporting the test model needs torch: pip install 'hemlp[ml]'")
    pytest.importorskip("onnx", reason="the ONNX frontend needs onnx: pip install 'hemlp[ml]'")
    from hemlp.models import Square

    d = tmp_path_factory.mktemp("cli_model")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 8), Square(), torch.nn.Linear(8, 3)).eval()
    path = d / "tiny.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.zeros(1, 1, 4, 4),), str(path), dynamo=False, input_names=["x"],
                          dynamic_axes={"x": {0: "batch"}})
    x = np.random.default_rng(1).uniform(-1, 1, (5, 1, 4, 4))
    with torch.no_grad():
        want = model(torch.as_tensor(x, dtype=torch.float32)).double().numpy()
    return path, x, want


def test_keygen_encrypt_run_decrypt_as_separate_processes(tmp_path, onnx_model):
    import importlib.util

    if importlib.util.find_spec("hemlp.model") is None:
        pytest.skip("hemlp.model does not exist: the CLI round trip needs the compiler")
    path, x, want = onnx_model
    np.save(tmp_path / "x.npy", x)
    model, keys, client = tmp_path / "model", tmp_path / "keys", tmp_path / "client"
    p = hemlp("compile", path, "--input-shape", "1,4,4", "--batch-size", 8, "--insecure", "-o", model, "--json",
              "--client-output", client)
    assert json.loads(p.stdout)["command"] == "compile" and (model / "plan.json").is_file()
    assert (model / "weights.npz").is_file() and not (client / "weights.npz").exists()  # the client gets no weights

    p = hemlp("keygen", client, "-o", keys, "--json")
    info = json.loads(p.stdout)
    assert (keys / "secret.key").is_file() and (keys / "eval.keys").is_file()
    assert info["bytes"]["eval_keys"] > 0 and (keys / "secret.key").stat().st_mode & 0o077 == 0

    hemlp("encrypt", client, "-k", keys / "secret.key", "-i", tmp_path / "x.npy", "-o", tmp_path / "x.ct")
    # the server process gets the compiled model, evaluation keys and ciphertexts — no secret key
    hemlp("run", model, "-e", keys / "eval.keys", "-i", tmp_path / "x.ct", "-o", tmp_path / "y.ct")
    p = hemlp("run", client, "-e", keys / "eval.keys", "-i", tmp_path / "x.ct", "-o", tmp_path / "y2.ct", check=False)
    assert p.returncode == 2 and "client artefact" in p.stderr
    p = hemlp("decrypt", client, "-k", keys / "secret.key", "-i", tmp_path / "y.ct", "-o", tmp_path / "y.npy",
              "--json", "--values")
    out = json.loads(p.stdout)
    y = np.load(tmp_path / "y.npy")
    assert y.shape == (5, 3)
    np.testing.assert_allclose(y, want, atol=1e-3)
    np.testing.assert_allclose(np.array(out["values"]), y)
    assert out["argmax"] == want.argmax(1).tolist()

    # nothing is overwritten without --force
    before = (tmp_path / "y.ct").read_bytes()
    p = hemlp("run", model, "-e", keys / "eval.keys", "-i", tmp_path / "x.ct", "-o", tmp_path / "y.ct", check=False)
    assert p.returncode == 2 and "--force" in p.stderr and (tmp_path / "y.ct").read_bytes() == before
    p = hemlp("keygen", model, "-o", keys, check=False)
    assert p.returncode == 2 and "--force" in p.stderr
    hemlp("run", model, "-e", keys / "eval.keys", "-i", tmp_path / "x.ct", "-o", tmp_path / "y.ct", "--force")

    # batch (in-process runtime, the default): a directory of ciphertext files; a rerun resumes, overwrites nothing
    cts = tmp_path / "cts"
    cts.mkdir()
    for name in ("a.ct", "b.ct"):
        (cts / name).write_bytes((tmp_path / "x.ct").read_bytes())
    p = hemlp("batch", model, "-e", keys / "eval.keys", "-i", cts, "-o", tmp_path / "out", "--json")
    info = json.loads(p.stdout)
    assert info["runtime"] == "local" and sorted(Path(f).name for f in info["outputs"]) == ["a.ct", "b.ct"]
    stamp = (tmp_path / "out" / "a.ct").stat().st_mtime_ns
    hemlp("batch", model, "-e", keys / "eval.keys", "-i", cts, "-o", tmp_path / "out")
    assert (tmp_path / "out" / "a.ct").stat().st_mtime_ns == stamp
    hemlp("decrypt", model, "-k", keys / "secret.key", "-i", tmp_path / "out" / "b.ct", "-o", tmp_path / "b.npy")
    np.testing.assert_allclose(np.load(tmp_path / "b.npy"), want, atol=1e-3)

    # keys of another key pair are refused with a typed error, not garbage
    hemlp("keygen", model, "-o", tmp_path / "keys2")
    p = hemlp("decrypt", model, "-k", tmp_path / "keys2" / "secret.key", "-i", tmp_path / "y.ct", check=False)
    assert p.returncode == 2 and "secret key" in p.stderr.lower()


def test_bootstrapped_model_keys_through_the_cli(tmp_path):
    """hemlp keygen on a model compiled with bootstrap=True saves its bootstrapping keys in eval.keys (with the
    model's context), and hemlp run, a separate process, bootstraps with them: the decrypted output agrees with the
    plan's simulation to the bootstrap's precision. The planner's choice stands (the CLI no longer forces single
    bootstraps): with bench/mambo_N12_t1.json it lowers this MLP's bootstraps to S2C-first batches of k = 4, whose
    BatchBootstrapKeys travel in eval.keys."""
    torch = pytest.importorskip("torch", reason="exporting the test model needs torch: pip install 'hemlp[ml]'")
    pytest.importorskip("onnx", reason="the ONNX frontend needs onnx: pip install 'hemlp[ml]'")
    import hemlp as hl
    from hemlp.runtime.artifacts import EvalKeys

    torch.manual_seed(3)
    net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.SiLU(), torch.nn.Linear(8, 8), torch.nn.Tanh(),
                              torch.nn.Linear(8, 3)).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (torch.zeros(1, 6),), str(tmp_path / "net.onnx"), dynamo=False, input_names=["x"],
                          dynamic_axes={"x": {0: "batch"}})
    rng = np.random.default_rng(11)
    np.save(tmp_path / "cal.npy", rng.uniform(-1, 1, (48, 6)))
    x = rng.uniform(-0.9, 0.9, (32, 6))
    np.save(tmp_path / "x.npy", x)
    model, keys = tmp_path / "model", tmp_path / "keys"
    p = hemlp("compile", tmp_path / "net.onnx", "--calibration", tmp_path / "cal.npy", "--batch-size", 32,
              "--insecure", "--option", "bootstrap=true", "--option", "activation_degree=3", "--layout", "batch",
              "-o", model)
    hemlp("keygen", model, "-o", keys)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = hl.load(model, allow_insecure=True)
        ek = EvalKeys.load(keys / "eval.keys", cm)
    assert cm.layout_impl.bootstrapped and ek.bootstrap_keys is not None       # saved, and they load
    assert cm.layout_impl.boot_order == "s2c_first" and "pipeline: batched" in p.stdout, p.stdout
    assert type(ek.bootstrap_keys).__name__ == "BatchBootstrapKeys" and ek.bootstrap_keys.k >= 2
    hemlp("encrypt", model, "-k", keys / "secret.key", "-i", tmp_path / "x.npy", "-o", tmp_path / "x.ct")
    hemlp("run", model, "-e", keys / "eval.keys", "-i", tmp_path / "x.ct", "-o", tmp_path / "y.ct")
    hemlp("decrypt", model, "-k", keys / "secret.key", "-i", tmp_path / "y.ct", "-o", tmp_path / "y.npy")
    y = np.load(tmp_path / "y.npy")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sim = cm.simulate(x)
    assert y.shape == (32, 3) and np.array_equal(y.argmax(1), sim.argmax(1))
    assert np.max(np.abs(y - sim)) < 2.0 ** -14


def test_errors_are_messages_not_tracebacks(tmp_path):
    p = hemlp("keygen", tmp_path / "missing", "-o", tmp_path / "k", check=False)
    assert p.returncode == 2 and "Traceback" not in p.stderr and "hemlp compile" in p.stderr
    p = hemlp("compile", tmp_path / "nope.onnx", "--input-shape", "1,4,4", "-o", tmp_path / "m", check=False)
    assert p.returncode == 2 and "not found" in p.stderr


def test_demo_export_writes_the_command_line_inputs(tmp_path):
    """`hemlp demo --export DIR` (the README's command-line section starts with it): a trained ONNX model, 1000
    calibration digits and --samples test digits, which `hemlp compile` and `hemlp encrypt` then read; existing
    files are kept unless --force."""
    pytest.importorskip("torch")
    pytest.importorskip("onnx")
    hemlp("demo", "--model", "mlp", "--export", tmp_path / "ex", "--samples", "4", "--epochs", "1", "--no-augment")
    x, calib = np.load(tmp_path / "ex" / "x.npy"), np.load(tmp_path / "ex" / "calib.npy")
    assert x.shape == (4, 1, 28, 28) and calib.shape == (1000, 1, 28, 28) and not np.array_equal(x, calib[:4])
    import onnx

    graph = onnx.load(str(tmp_path / "ex" / "model.onnx")).graph
    assert {n.op_type for n in graph.node} >= {"Gemm"}
    p = hemlp("demo", "--model", "mlp", "--export", tmp_path / "ex", "--samples", "4", "--epochs", "1", check=False)
    assert p.returncode == 2 and "pass --force" in p.stderr
    hemlp("compile", tmp_path / "ex" / "model.onnx", "--calibration", tmp_path / "ex" / "calib.npy",
          "--batch-size", "4", "--preset", "test-N12-d6", "--insecure", "-o", tmp_path / "m")
    # an output in a directory that does not exist yet (the README encrypts into cts/ for `hemlp batch -i cts/`)
    hemlp("keygen", tmp_path / "m", "-o", tmp_path / "keys")
    hemlp("encrypt", tmp_path / "m", "-k", tmp_path / "keys" / "secret.key", "-i", tmp_path / "ex" / "x.npy",
          "-o", tmp_path / "cts" / "x.ct")
    assert (tmp_path / "cts" / "x.ct").is_file()


def test_batch_shared_keys_is_a_ray_option(tmp_path):
    """`hemlp batch --runtime local --shared-keys ...`: a message naming --runtime ray, before any work."""
    (tmp_path / "cts").mkdir()
    (tmp_path / "cts" / "a.ct").write_bytes(b"x")
    p = hemlp("batch", tmp_path / "model", "-e", tmp_path / "eval.keys", "-i", tmp_path / "cts", "-o",
              tmp_path / "out", "--runtime", "local", "--shared-keys", "off", check=False)
    assert p.returncode != 0 and "--shared-keys is an option of --runtime ray" in p.stderr + p.stdout
    assert not (tmp_path / "out").exists()
