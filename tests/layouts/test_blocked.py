"""Layout (C): the model is encrypted too (FHE4DMM setting). Oracles: the block-wise numpy simulation
(hemlp.layouts.blocked.BlockedProgram.simulate) against PyTorch, and the encrypted run against it."""
import numpy as np
import pytest
import torch

import hemlp
from hemlp.layouts.blocked import BlockedProgram
from hemlp.errors import KeyMismatchError, LevelError, SerializationError, UnsupportedError
from hemlp.runtime.artifacts import EvalKeys
from tests.conftest import switch_key_bytes

from .conftest import Square, mlp, torch_out


def _x(shape, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=shape) * 0.7 + np.linspace(0.2, -0.3, shape[-1])


def test_block_plan_simulation_matches_torch_with_many_blocks():
    """Dimensions above one ciphertext: the chain DP splits every MM into blocks (b_m, b_n, b_k > 1)."""
    model = mlp(dims=(96, 80, 40, 5))
    x = _x((64, 96))
    cm = hemlp.compile(model, x, batch_size=64, allow_insecure=True, layout="batch")
    prog = BlockedProgram(cm.steps, 512, 64)
    assert any(L.layout.num_blocks > 1 for L in prog.layers)
    for a, b in zip(prog.layers, prog.layers[1:]):       # consistent blocks: no re-blocking between layers
        assert b.layout.b_k == a.layout.b_m and b.layout.b_n == a.layout.b_n
    assert np.max(np.abs(prog.simulate(x) - torch_out(model, x))) < 1e-6 * np.max(np.abs(torch_out(model, x)))


def test_client_server_files_encrypted_weights(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(10, 6), Square()).eval()
    x = _x((4, 10), seed=1)
    cm = hemlp.compile(model, x, batch_size=4, allow_insecure=True, encrypted_weights=True)
    assert cm.layout == "blocked" and "layout (C)" in str(cm.plan) and cm.plan.info["depth"] == 3 + 1
    sk, ek = cm.keygen()
    ew = cm.encrypt_weights(sk)
    ew.save(tmp_path / "w.enc")
    cm.save(tmp_path / "model")
    server = hemlp.load(tmp_path / "model", allow_insecure=True)                 # no plaintext weights are needed on the server ...
    from hemlp.layouts.blocked import EncryptedWeights

    ew2 = EncryptedWeights.load(tmp_path / "w.enc", server)
    out = server.run(server.load_encrypted(_save(cm.encrypt(x, sk), tmp_path)), ek, weights=ew2)
    y = cm.decrypt(out, sk)
    ys = cm.simulate(x)
    assert np.max(np.abs(y - ys)) < 2.0 ** -16 * max(1.0, np.max(np.abs(ys)))
    assert np.max(np.abs(ys - torch_out(model, x))) < 1e-6
    # corrupted weight files are refused with a typed error
    blob = bytearray((tmp_path / "w.enc").read_bytes())
    blob[len(blob) // 2] ^= 0x40
    (tmp_path / "bad.enc").write_bytes(bytes(blob))
    with pytest.raises(SerializationError):
        EncryptedWeights.load(tmp_path / "bad.enc", server)


def test_blocked_keys_reach_only_the_levels_they_are_used_at():
    """Layout (C): rotation keys for the first CCMM's input level, the relinearisation key for the
    level of the CCMM products (level_in - 2) or of the activations; both tight (one lower fails)."""
    torch.manual_seed(4)
    model = torch.nn.Sequential(torch.nn.Linear(10, 6), Square()).eval()
    x = _x((4, 10), seed=3)
    cm = hemlp.compile(model, x, batch_size=4, allow_insecure=True, encrypted_weights=True)
    ctx, lv = cm.context, cm.key_levels
    assert cm.preset == "test-N12-d6" and cm.top_level < ctx.max_level
    first = cm.blocked.layers[0].step
    assert lv["rotation"] == first.level_in == cm.top_level
    assert lv["relin"] == max(first.level_in - 2, cm.blocked.layers[0].acts[0].level_in)
    sk, ek = cm.keygen()
    n = len(cm.blocked.rotations())
    assert ek.galois_keys.level == lv["rotation"] and ek.relin_key.level == lv["relin"]
    assert ek.galois_keys.nbytes == n * switch_key_bytes(ctx, lv["rotation"])
    assert ek.relin_key.nbytes == switch_key_bytes(ctx, lv["relin"])
    assert ek.galois_keys.nbytes < n * switch_key_bytes(ctx, ctx.max_level)
    ct, w = cm.encrypt(x, sk), cm.encrypt_weights(sk)
    y, ys = cm.decrypt(cm.run(ct, ek, weights=w), sk), cm.simulate(x)
    assert np.max(np.abs(y - ys)) < 2.0 ** -16 * max(1.0, np.max(np.abs(ys)))
    low_gk = ctx.rotation_keys(sk, cm.blocked.rotations(), level=lv["rotation"] - 1)
    low_rlk = ctx.relin_key(sk, level=lv["relin"] - 1)
    for bad, what in ((EvalKeys(cm.model_id, ek.relin_key, low_gk), "rotation keys"),
                      (EvalKeys(cm.model_id, low_rlk, ek.galois_keys), "relinearisation key")):
        with pytest.raises(LevelError, match=f"{what}: generated for levels <= "):
            cm.run(ct, bad, weights=w)
        cm._check_key_levels = lambda ek: None
        try:
            with pytest.raises(LevelError, match="generate the keys with level >="):
                cm.run(ct, bad, weights=w)
        finally:
            del cm._check_key_levels


def _save(ct, tmp_path):
    ct.save(tmp_path / "x.ct")
    return tmp_path / "x.ct"


@pytest.mark.slow
def test_two_ccmm_layers_at_128_bit():
    """Linear -> x^2 -> Linear: two CCMM layers (3 levels each) + 1 = 7 levels, the 128-bit N15-d10 set."""
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(12, 8), Square(), torch.nn.Linear(8, 3)).eval()
    x = _x((6, 12), seed=2)
    cm = hemlp.compile(model, x, batch_size=6, encrypted_weights=True)
    assert cm.preset == "N15-d10" and len(cm.blocked.layers) == 2
    sk, ek = cm.keygen()
    y = cm.decrypt(cm.run(cm.encrypt(x, sk), ek, weights=cm.encrypt_weights(sk)), sk)
    assert np.max(np.abs(y - torch_out(model, x))) < 1e-5 * max(1.0, np.max(np.abs(y)))


def test_encrypted_weights_errors():
    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), Square()).eval()
    x = _x((2, 6))
    cm = hemlp.compile(model, x, batch_size=2, allow_insecure=True, encrypted_weights=True)
    sk, ek = cm.keygen()
    ct = cm.encrypt(x, sk)
    with pytest.raises(TypeError, match="encrypt_weights"):
        cm.run(ct, ek)
    sk2, _ = cm.keygen()
    with pytest.raises(KeyMismatchError, match="different key pairs"):
        cm.run(ct, ek, weights=cm.encrypt_weights(sk2))
    with pytest.raises(TypeError, match="options of layout \\(A\\) only"):   # layout (C) on Ray: groups, no grids
        cm.run(ct, ek, weights=cm.encrypt_weights(sk), runtime="ray", cts_per_task=2)

    class Res(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(6, 6)

        def forward(self, x):
            return x + self.a(x)

    with pytest.raises(UnsupportedError, match="plaintext weights"):
        hemlp.compile(Res(), x, batch_size=2, allow_insecure=True, encrypted_weights=True)
    plain = hemlp.compile(model, x, batch_size=2, allow_insecure=True)
    with pytest.raises(hemlp.errors.ParameterError, match="encrypted_weights=True"):
        plain.encrypt_weights(sk)
