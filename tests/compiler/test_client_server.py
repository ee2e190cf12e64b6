"""Client and server as two Python processes sharing only files."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import hemlp

from .conftest import mlp, torch_out

SERVER = textwrap.dedent("""
    import sys, warnings
    warnings.simplefilter("ignore")
    import hemlp
    d = sys.argv[1]
    model = hemlp.load(d + "/model", allow_insecure=True)                    # no torch, no secret key on this side
    keys = model.load_eval_keys(d + "/eval.keys")
    ct = model.load_encrypted(d + "/x.ct")
    model.run(ct, keys, threads=1).save(d + "/y.ct")
    assert "torch" not in sys.modules
    assert not any(p.name.endswith(".sk") for p in __import__("pathlib").Path(d + "/model").iterdir())
    print("server ok")
""")


def test_two_processes(tmp_path):
    model = mlp(dims=(20, 16, 4))
    x = np.random.default_rng(0).normal(size=(10, 20))
    cm = hemlp.compile(model, x, batch_size=10, allow_insecure=True)
    cm.save(tmp_path / "model")
    client = hemlp.load(tmp_path / "model", allow_insecure=True)             # the client may also reload the directory
    assert client.model_id == cm.model_id and str(client.plan) == str(cm.plan)
    sk, ek = client.keygen()
    sk.save(tmp_path / "client.sk")
    ek.save(tmp_path / "eval.keys")
    client.encrypt(x, sk).save(tmp_path / "x.ct")
    files = {p.name for p in (tmp_path / "model").iterdir()}
    assert files == {"plan.json", "weights.npz", "params.bin"}
    r = subprocess.run([sys.executable, "-c", SERVER, str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "server ok" in r.stdout
    sk2 = client.load_secret_key(tmp_path / "client.sk")
    y = client.decrypt(client.load_encrypted(tmp_path / "y.ct"), sk2)
    assert np.max(np.abs(y - cm.simulate(x))) < 1e-5
    assert np.max(np.abs(y - torch_out(model, x))) < 1e-4


def test_batch_layout_relin_key_at_its_level(tmp_path):
    """Layout (A): the relinearisation key is made for the highest level an activation squares at; it
    keeps that level through the eval-keys file, the run agrees with simulate, one level lower fails."""
    from hemlp.errors import LevelError
    from hemlp.runtime.artifacts import EvalKeys
    from tests.conftest import switch_key_bytes

    model = mlp(dims=(20, 16, 8, 4))
    x = np.random.default_rng(1).normal(size=(10, 20))
    cm = hemlp.compile(model, x, batch_size=10, allow_insecure=True, layout="batch")
    ctx, lv = cm.context, cm.key_levels["relin"]
    assert lv == max(s.level_in for s in cm.steps if s.op == "square") < ctx.max_level
    assert cm.key_levels["rotation"] is None
    sk, ek = cm.keygen()
    assert ek.galois_keys is None and ek.relin_key.level == lv
    assert ek.relin_key.nbytes == switch_key_bytes(ctx, lv) < switch_key_bytes(ctx, ctx.max_level)
    ek.save(tmp_path / "eval.keys")
    back = cm.load_eval_keys(tmp_path / "eval.keys")
    assert back.relin_key.level == lv
    ct = cm.encrypt(x, sk)
    y, ys = cm.decrypt(cm.run(ct, back), sk), cm.simulate(x)
    assert np.max(np.abs(y - ys)) < 2.0 ** -14 * max(1.0, np.max(np.abs(ys)))
    low = EvalKeys(cm.model_id, ctx.relin_key(sk, level=lv - 1))
    with pytest.raises(LevelError, match="relinearisation key: generated for levels <= "):
        cm.run(ct, low)


def test_weak_published_parameters_are_refused(tmp_path):
    """The client decides its security, not whoever published the model directory: a server that publishes an
    N = 2^12 parameter set (with allow_insecure recorded in its plan.json) is refused by a default client."""
    import json
    import warnings

    import torch

    from hemlp.errors import InsecureParametersError

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net = torch.nn.Sequential(torch.nn.Linear(6, 3)).eval()
        cm = hemlp.compile(net, np.random.default_rng(1).normal(size=(4, 6)), batch_size=4, allow_insecure=True)
        cm.save(tmp_path / "model")
    meta = json.loads((tmp_path / "model" / "plan.json").read_text())
    assert meta["allow_insecure"] is True  # the publisher's flag is in the file ...
    with pytest.raises(InsecureParametersError, match=r"publishes parameter set 'test-N12.*109.*128-bit security policy"):
        hemlp.load(tmp_path / "model")     # ... and does not decide for the client
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert hemlp.load(tmp_path / "model", allow_insecure=True).allow_insecure
