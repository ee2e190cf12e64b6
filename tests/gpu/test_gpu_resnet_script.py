"""scripts/gpu_resnet20.py run: the GPU machine's half of the ResNet-20 measurement, on a small prepared folder (a
bootstrapped layout-(P) CNN at a test preset): with runtime local it records each image's seconds and top-1 against
the prepared simulate logits; with runtime cuda and no device it stops with DeviceError, not a wrong record."""
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from hemlp.errors import DeviceError
from tests.gpu.test_device_runner import compile_rescnn

torch = pytest.importorskip("torch")
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_resnet20.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("gpu_resnet20", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpu_resnet20"] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    cm, xc = compile_rescnn()
    out = tmp_path_factory.mktemp("gpu_resnet")
    cm.save(out / "model")
    x = xc[:2].astype(np.float32)
    np.savez(out / "images.npz", x=x, label=np.array([0, 1]), simulated=np.asarray(cm.simulate(x)).reshape(2, -1))
    (out / "prepare.json").write_text(json.dumps(dict(model_id=cm.model_id)))
    return out


def test_run_local_records_every_image(script, folder, tmp_path):
    out = tmp_path / "run.json"
    assert script.main(["run", "--dir", str(folder), "--images", "2", "--runtime", "local", "--json", str(out)]) == 0
    rec = json.loads(out.read_text())
    assert rec["runtime"] == "local" and len(rec["images"]) == 2
    assert rec["encrypted_equals_simulated_top1"] is True
    assert all(r["seconds"] > 0 and r["max_abs_error_vs_simulate"] < 2.0 ** -10 for r in rec["images"])
    assert rec["seconds_per_image_after_first"] == rec["images"][1]["seconds"]


def test_run_cuda_without_a_device_raises(script, folder, tmp_path):
    from hemlp.gpu import device_info

    if device_info()["available"]:
        pytest.skip("this machine has a CUDA device")
    with pytest.raises(DeviceError):
        script.main(["run", "--dir", str(folder), "--images", "1", "--json", str(tmp_path / "r.json")])
