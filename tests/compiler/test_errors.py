"""Bad input gets typed errors that say what and where; nothing silently wrong."""
import numpy as np
import pytest
import torch

import hemlp
from hemlp.errors import (EncodingError, KeyMismatchError, LevelError, SerializationError, ShapeError,
                          UnsupportedError)

from .conftest import mlp, to_onnx


def test_unsupported_module_names_node_and_alternative(tmp_path):
    m = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                            torch.nn.Linear(2 * 3 * 3, 2)).eval()
    x = np.zeros((2, 1, 8, 8))
    with pytest.raises(UnsupportedError, match=r"max pooling.*fx node '_1'.*target=1.*AvgPool2d"):
        hemlp.compile(m, x, allow_insecure=True)
    with pytest.raises(UnsupportedError, match=r"MaxPool.*average pooling"):
        hemlp.compile(to_onnx(m, x, tmp_path / "m.onnx"), x, allow_insecure=True)


def test_unsupported_function():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(3, 3), torch.nn.Linear(3, 3)

        def forward(self, x):
            return self.a(x) * self.b(x)

    # a product of two different encrypted tensors is a ct x ct product now (tests/compiler/test_ct_products.py)
    assert any(n.op == "mul" for n in hemlp.compile(M(), np.zeros((2, 3)), allow_insecure=True).plan.graph)

    class E(torch.nn.Module):
        def forward(self, x):
            return torch.exp(x)

    with pytest.raises(UnsupportedError, match=r"exp.*supported layers"):
        hemlp.compile(E(), np.zeros((2, 3)), allow_insecure=True)


def test_level_error_says_how_many_missing():
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4), torch.nn.ReLU(),
                            torch.nn.Linear(4, 2)).eval()
    x = np.random.default_rng(0).normal(size=(4, 4))
    with pytest.raises(LevelError, match=r"needs 11 levels.*'test-N12-d6' has 6: 5 level\(s\) missing"):
        hemlp.compile(m, x, activation_degree=15, allow_insecure=True, preset="test-N12-d6")
    # without a forced preset the smallest fitting 128-bit preset is chosen
    cm = hemlp.compile(m, x, activation_degree=7, allow_insecure=True)
    assert cm.preset == "N15-d10" and cm.plan.info["depth"] == 9


def test_encrypt_shape_and_dtype_errors():
    cm = hemlp.compile(mlp(dims=(4, 3, 2)), np.zeros((2, 4)), batch_size=8, allow_insecure=True)
    sk, ek = cm.keygen()
    with pytest.raises(ShapeError, match=r"\(batch, 4\)"):
        cm.encrypt(np.zeros((2, 5)), sk)
    with pytest.raises(ShapeError):
        cm.encrypt(np.zeros(4), sk)
    with pytest.raises(EncodingError, match="dtype"):
        cm.encrypt(np.array([["a"] * 4]), sk)
    with pytest.raises(EncodingError, match="NaN"):
        cm.encrypt(np.full((1, 4), np.nan), sk)
    with pytest.raises(ShapeError, match="capacity"):
        cm.encrypt(np.zeros((5000, 4)), sk)
    with pytest.raises(ShapeError):
        cm.simulate(np.zeros((2, 3)))


def test_keys_from_another_model():
    a = hemlp.compile(mlp(dims=(4, 3, 2), seed=0), np.zeros((2, 4)), allow_insecure=True)
    b = hemlp.compile(mlp(dims=(4, 3, 2), seed=1), np.zeros((2, 4)), allow_insecure=True)
    ska, eka = a.keygen()
    skb, ekb = b.keygen()
    x = np.ones((2, 4))
    cta = a.encrypt(x, ska)
    with pytest.raises(KeyMismatchError, match="evaluation keys belong to compiled model"):
        a.run(cta, ekb)
    with pytest.raises(KeyMismatchError, match="ciphertext belongs"):
        b.run(cta, ekb)
    _, eka2 = a.keygen()
    with pytest.raises(KeyMismatchError, match="different key pairs"):
        a.run(cta, eka2)
    out = a.run(cta, eka)
    with pytest.raises(KeyMismatchError, match="secret key does not match"):
        a.decrypt(out, skb)


def test_bad_options_and_inputs(tmp_path):
    with pytest.raises(TypeError, match="unknown option"):
        hemlp.compile(mlp(dims=(4, 2)), np.zeros((2, 4)), activation_degre=3)
    with pytest.raises(TypeError, match="torch.nn.Module or an ONNX"):
        hemlp.compile(object(), np.zeros((2, 4)))
    with pytest.raises(SerializationError):
        hemlp.load(tmp_path / "nothing")
    cm = hemlp.compile(mlp(dims=(4, 3, 2)), np.zeros((2, 4)), allow_insecure=True)
    sk, ek = cm.keygen()
    ek.save(tmp_path / "k")
    data = bytearray((tmp_path / "k").read_bytes())
    data[len(data) // 2] ^= 1
    (tmp_path / "k").write_bytes(bytes(data))
    with pytest.raises(SerializationError, match="corrupted"):
        cm.load_eval_keys(tmp_path / "k")
