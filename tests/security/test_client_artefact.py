"""The client artefact (compiled.save(dir, client=True)): plan, parameters, ranges and key list, never the weights.
A client that loads it makes keys, encrypts and decrypts exactly as with the full directory; the server's run with
the full artefact is unchanged; run() on the client artefact is a typed error."""
import warnings

import numpy as np
import pytest

import hemlp
from hemlp.errors import ClientArtefactError, SerializationError

torch = pytest.importorskip("torch")
from tests.compiler.conftest import SmallCNN, mlp  # noqa: E402


@pytest.fixture(autouse=True)
def _quiet_insecure():
    from hemlp.fhe import InsecureParametersWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InsecureParametersWarning)
        yield


def weight_values(cm) -> list:
    """Every learned value of the model (the step arrays that are not structure)."""
    out = []
    for s in cm.steps:
        for k, v in s.arrays().items():
            if k != "index":
                out += [float(a) for a in np.asarray(v, dtype=np.float64).ravel() if a != 0]
    return out


def no_weight_bytes(directory, values) -> None:
    """None of the weights' float64 / float32 encodings, nor their decimal text, is in any file of the directory."""
    blob = b"".join(p.read_bytes() for p in sorted(directory.iterdir()))
    for v in values[:400]:
        assert np.float64(v).tobytes() not in blob and np.float32(v).tobytes() not in blob
        assert repr(v).encode() not in blob


CASES = {
    "batch": (lambda: mlp(dims=(20, 16, 4)), (10, 20), dict(batch_size=10, layout="batch")),
    "packed": (lambda: mlp(dims=(20, 16, 4)), (2, 20), dict(batch_size=2, layout="packed")),
    "packed-cnn": (SmallCNN, (1, 1, 8, 8), dict(batch_size=1, layout="packed")),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_client_artefact_has_no_weights_and_works(tmp_path, case):
    make, shape, opts = CASES[case]
    model = make()
    x = np.random.default_rng(5).normal(size=shape)
    cm = hemlp.compile(model, x, allow_insecure=True, **opts)
    cm.save(tmp_path / "server")
    cm.save(tmp_path / "client", client=True)
    assert {p.name for p in (tmp_path / "client").iterdir()} == {"plan.json", "structure.npz", "params.bin"}
    assert {p.name for p in (tmp_path / "server").iterdir()} == {"plan.json", "weights.npz", "params.bin"}
    values = weight_values(cm)
    assert len(values) > 50
    no_weight_bytes(tmp_path / "client", values)
    with pytest.raises(AssertionError):  # the check itself can fail: the server artefact holds them
        no_weight_bytes(tmp_path / "server", values)

    client = hemlp.load(tmp_path / "client", allow_insecure=True)
    server = hemlp.load(tmp_path / "server", allow_insecure=True)
    assert client.client_only and not server.client_only
    assert client.model_id == server.model_id == cm.model_id and client.key_levels == server.key_levels
    sk, ek = client.keygen()
    y = client.decrypt(server.run(client.encrypt(x, sk), ek), sk)
    ys = server.simulate(x)
    assert np.max(np.abs(y - ys)) < 2.0 ** -10 * max(1.0, np.max(np.abs(ys)))

    for call in (lambda: client.run(client.encrypt(x, sk), ek), client.prepare, lambda: client.simulate(x),
                 lambda: client.save(tmp_path / "again")):
        with pytest.raises(ClientArtefactError, match="client artefact"):
            call()
    client.save(tmp_path / "again", client=True)  # a client artefact can be copied as one
    assert hemlp.load(tmp_path / "again", allow_insecure=True).model_id == cm.model_id


def test_overwriting_a_server_directory_with_a_client_artefact_drops_the_weights(tmp_path):
    cm = hemlp.compile(mlp(dims=(20, 16, 4)), np.random.default_rng(0).normal(size=(4, 20)), batch_size=4,
                       allow_insecure=True, layout="batch")
    cm.save(tmp_path / "m")
    cm.save(tmp_path / "m", client=True)
    assert not (tmp_path / "m" / "weights.npz").exists()
    no_weight_bytes(tmp_path / "m", weight_values(cm))
    (tmp_path / "m" / "structure.npz").write_bytes(b"PK\x03\x04 damaged")
    with pytest.raises(SerializationError, match="structure.npz"):
        hemlp.load(tmp_path / "m", allow_insecure=True)


def test_client_artefact_checks_inputs_against_the_calibrated_input_range(tmp_path):
    # the client has no weights to run the plan's range check: it checks the inputs against the calibration range
    from hemlp.compiler.activations import RangeWarning
    from hemlp.errors import InputRangeError

    x = np.random.default_rng(6).normal(size=(10, 20))
    cm = hemlp.compile(mlp(torch.nn.ReLU, dims=(20, 16, 4)), x, allow_insecure=True, batch_size=10, layout="batch")
    cm.save(tmp_path / "client", client=True)
    client = hemlp.load(tmp_path / "client", allow_insecure=True)
    sk, _ = client.keygen()
    client.encrypt(x[::-1] * 0.9, sk)                      # inside the calibrated range: no complaint
    with pytest.raises(InputRangeError, match="calibration data"):
        client.encrypt(x * 100, sk)                         # inputs scaled x100 (e.g. raw pixel values)
    with pytest.warns(RangeWarning):
        client.encrypt(x * -10, sk, on_range="warn")
