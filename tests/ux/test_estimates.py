"""#19 bullet 1: the plan states key bytes per kind, upload bytes, server memory and times before any key exists,
and the bench checks them against measurements."""
import json
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import hemlp  # noqa: E402
from hemlp.apps.bench import square_mlp  # noqa: E402


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def test_plan_states_resources_before_any_key_exists(tmp_path):
    x = np.random.default_rng(0).uniform(-1, 1, (2, 64))
    cm = hemlp.compile(square_mlp((64, 32, 10)), x, batch_size=2, allow_insecure=True, layout="packed")
    assert cm._ctx is None                       # nothing built yet: the estimates come from the plan alone
    r = cm.plan.resources
    assert set(r.key_bytes) == {"relin", "rotation"} and r.key_counts["rotation"] == cm.plan.info["rotation_keys"]
    assert r.upload_bytes > 0 and r.server_memory_bytes > r.eval_key_bytes and r.run_seconds > 0
    text = str(cm.plan)
    for words in ("evaluation keys", "client upload", "peak memory", "per batch", "keygen"):
        assert words in text
    # the saved directory keeps them (a server sees them before the client sends keys)
    cm.save(tmp_path / "m")
    again = hemlp.load(tmp_path / "m", allow_insecure=True)
    assert again.plan.resources == r and "client upload" in str(again.plan)
    # and they are the sizes of what keygen / encrypt then produce
    sk, ek = cm.keygen()
    assert abs(len(ek.to_bytes()) / r.eval_key_bytes - 1) < 0.02
    assert abs(len(cm.encrypt(x, sk).to_bytes()) / r.upload_bytes - 1) < 0.02


def test_bench_estimates_within_2x(tmp_path):
    """python -m hemlp.bench estimates --quick: bytes and server memory within 2x of the measurement (times are
    printed and recorded, not asserted: the machine is shared)."""
    from hemlp.apps.bench.__main__ import main

    out = tmp_path / "est.json"
    assert main(["estimates", "--quick", "--json", str(out)]) == 0
    res = json.loads(out.read_text())["results"]
    assert {r["case"] for r in res} == {"cnn-batch", "mlp-packed"}
    for r in res:
        for k in ("eval_key_bytes", "upload_bytes", "server_memory_bytes"):
            assert 0.5 <= r["ratio"][k] <= 2.0, (r["case"], k, r["ratio"][k])
        for k in ("keygen_seconds", "encrypt_seconds", "run_seconds"):
            assert r["measured"][k] > 0 and r["estimated"][k] > 0
