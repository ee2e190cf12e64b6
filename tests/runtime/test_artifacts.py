"""Client/server artefacts in the one container (hemlp.fhe.serialize, format version 3): evaluation keys,
encrypted batches and encrypted weights are object types of it, bound to their compiled model (model id) and
parameter set (parameter hash); files of the previous container (b"HEMLPC\\0\\1") still load; batch files load
memory-mapped with one checksum pass that runs while the ciphertexts are imported."""
from __future__ import annotations

import hashlib
import json
import struct
import warnings

import numpy as np
import pytest
import torch

import hemlp
from hemlp.errors import ContextMismatchError, KeyMismatchError, SerializationError
from hemlp.fhe import serialize
from hemlp.runtime.artifacts import EncryptedBatch, EvalKeys


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.Linear(6, 3)).eval()
    x = np.random.default_rng(3).normal(size=(2, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = hemlp.compile(net, x, batch_size=2, allow_insecure=True, preset="test-N10", layout="packed")
        other = hemlp.compile(torch.nn.Sequential(torch.nn.Linear(8, 3)).eval(), x, batch_size=2, allow_insecure=True,
                              preset="test-N10", layout="packed")
    sk, ek = cm.keygen()
    return cm, other, sk, ek, x, cm.encrypt(x, sk)


def _ct_bytes(batch) -> list:
    return [c.to_bytes() for c in batch.ctm.cts]


def _payload_offset(blob) -> int:
    hlen = struct.unpack_from("<I", blob, serialize._PREFIX.size - 4)[0]
    return serialize._PREFIX.size + hlen + 8


def test_artefacts_are_objects_of_the_one_container(model):
    cm, _, _, ek, _, batch = model
    for kind, blob in (("eval_keys", ek.to_bytes()), ("encrypted_batch", batch.to_bytes())):
        assert blob.startswith(serialize.MAGIC) and serialize.peek_version(blob) == serialize.VERSION == 3
        obj_type, phash, header, arrays = serialize.unpack(blob, cm.context.hash, kind)
        assert obj_type == kind and phash == cm.context.hash and header["model_id"] == cm.model_id
        assert len(arrays) == 1 and arrays[0].dtype == np.uint8
    # an encrypted batch nests its ciphertexts directly (the matrix's header is a field), every one 8-byte aligned
    # and unsealed (zeros: the batch's seal covers them)
    blob = batch.to_bytes()
    _, _, header, (payload,) = serialize.unpack(blob, None)
    matrix, _ = batch.ctm.element_parts(seal=False)
    assert header["matrix"] == matrix and matrix["element_seals"] is False
    assert payload.tobytes() == b"".join(c[:-32] + serialize.NO_SEAL for c in _ct_bytes(batch))
    off = _payload_offset(blob)
    assert off % 8 == 0
    for c in _ct_bytes(batch):
        assert (off + _payload_offset(c)) % 8 == 0 and len(c) % 8 == 0
        off += len(c)


def test_batch_elements_need_no_seal_of_their_own(model):
    """A batch's ciphertexts are written without their own SHA-256 (its seal covers them; nested seals are never
    read), flagged "element_seals": false; batches whose elements are sealed (written before) load the same, and
    unsealed elements cannot be read as if no container covered them."""
    from hemlp.pcmm import CtMatrix

    cm, *_, batch = model
    matrix, parts = batch.ctm.element_parts()                  # sealed elements, no flag: as hemlp wrote them before
    assert "element_seals" not in matrix
    header = dict(model_id=batch.model_id, batch=batch.batch, shape=list(batch.shape), stage=batch.stage,
                  matrix=matrix)
    sealed = b"".join(serialize.pack_parts("encrypted_batch", cm.context.hash, header, [parts]))
    assert sealed != batch.to_bytes()
    for blob in (sealed, batch.to_bytes(), bytes(batch.to_stream())):
        assert _ct_bytes(EncryptedBatch.from_bytes(blob, cm)) == _ct_bytes(batch)
    _, _, h, (payload,) = serialize.unpack(batch.to_bytes(), None)
    with pytest.raises(SerializationError, match="no seal of their own"):
        CtMatrix.from_elements(h["matrix"], payload, cm.context, checksum=True)
    _, _, h, (payload,) = serialize.unpack(sealed, None)
    assert [c.to_bytes() for c in CtMatrix.from_elements(h["matrix"], payload, cm.context, checksum=True).cts] \
        == _ct_bytes(batch)
    bad = dict(header, matrix=dict(batch.ctm.element_parts(seal=False)[0], element_seals="no"))
    blob = b"".join(serialize.pack_parts("encrypted_batch", cm.context.hash, bad, [parts]))
    with pytest.raises(SerializationError, match="header does not match"):
        EncryptedBatch.from_bytes(blob, cm)


def test_round_trips_through_mapped_files(model, tmp_path, monkeypatch):
    """save / load (memory-mapped) and to_bytes / from_bytes give the same ciphertexts, with the checksum computed
    inline and on a second thread (forced here for a small file); the loaded batch owns its memory: overwriting
    the file afterwards changes nothing."""
    cm, _, sk, ek, x, batch = model
    for threaded in (False, True):
        if threaded:
            monkeypatch.setattr(serialize, "_THREADED_CHECKSUM_BYTES", 0)
        batch.save(tmp_path / "x.ct")
        ek.save(tmp_path / "eval.keys")
        back = EncryptedBatch.load(tmp_path / "x.ct", cm)
        assert _ct_bytes(back) == _ct_bytes(batch) == _ct_bytes(EncryptedBatch.from_bytes(batch.to_bytes(), cm))
        assert (back.batch, back.shape, back.stage, back.model_id) == (batch.batch, batch.shape, batch.stage,
                                                                     batch.model_id)
        keys = EvalKeys.load(tmp_path / "eval.keys", cm)
        assert keys.to_bytes() == ek.to_bytes()
        (tmp_path / "x.ct").write_bytes(b"\0" * (tmp_path / "x.ct").stat().st_size)
        np.testing.assert_allclose(cm.decrypt(cm.run(back, keys, threads=1), sk), cm.simulate(x), atol=1e-4)


@pytest.mark.parametrize("threaded", [False, True])
def test_corrupted_files_are_typed_errors(model, tmp_path, monkeypatch, threaded):
    """A flipped residue, header byte or checksum byte, a truncated or empty file: SerializationError, also when
    the checksum runs on a thread while a (corrupted) header is parsed: the mismatch is what is reported."""
    cm, *_, batch = model
    if threaded:
        monkeypatch.setattr(serialize, "_THREADED_CHECKSUM_BYTES", 0)
    blob = batch.to_bytes()
    path = tmp_path / "x.ct"
    for i in (len(blob) // 2, serialize._PREFIX.size + 3, len(blob) - 1, 7):
        bad = bytearray(blob)
        bad[i] ^= 0x5A
        path.write_bytes(bytes(bad))
        with pytest.raises(SerializationError, match="checksum mismatch|version|format"):
            EncryptedBatch.load(path, cm)
    for data in (blob[: len(blob) // 3], b""):
        path.write_bytes(data)
        with pytest.raises(SerializationError):
            EncryptedBatch.load(path, cm)
    with pytest.raises(SerializationError, match="cannot read"):
        EncryptedBatch.load(tmp_path / "missing.ct", cm)


def _reseal(body: bytes) -> bytes:
    return body + hashlib.sha256(body).digest()


def test_model_and_parameter_binding(model):
    cm, other, *_, batch = model
    blob = batch.to_bytes()
    with pytest.raises(KeyMismatchError, match="belongs to compiled model"):
        EncryptedBatch.from_bytes(blob, other)
    # the model id kept but another parameter hash: refused by the container's binding
    body = bytearray(blob[:-32])
    body[9:41] = hashlib.sha256(b"other parameters").digest()
    with pytest.raises(ContextMismatchError):
        EncryptedBatch.from_bytes(_reseal(bytes(body)), cm)
    # a newer container version: refused by number, naming the fix
    body = bytearray(blob[:-32])
    struct.pack_into("<H", body, 6, serialize.VERSION + 1)
    with pytest.raises(SerializationError, match=f"format version {serialize.VERSION + 1} .*upgrade hemlp"):
        EncryptedBatch.from_bytes(_reseal(bytes(body)), cm)


def _legacy(kind: str, header: dict, payload: bytes, version: int = 1) -> bytes:
    """A file in the container before version 3, written from its documented layout (docs/formats.md):
    b"HEMLPC\\0\\1" | u32 header length | JSON header | u64 payload length | payload | SHA-256."""
    h = json.dumps(dict(header, kind=kind, version=version), sort_keys=True).encode()
    return _reseal(b"HEMLPC\x00\x01" + struct.pack("<I", len(h)) + h + struct.pack("<Q", len(payload)) + payload)


def _v2(blob: bytes) -> bytes:
    """A scheme object as hemlp wrote it before version 3 (same fields, no header padding)."""
    obj_type, phash, header, arrays = serialize.unpack(blob, None)
    header.pop("arrays")
    return serialize.pack(obj_type, phash, header, arrays, version=2)


def test_files_of_the_previous_container_still_load(model, tmp_path):
    cm, other, sk, ek, x, batch = model
    cts = [_v2(c) for c in _ct_bytes(batch)]
    matrix, _ = batch.ctm.element_parts()
    ctm = serialize.pack("ct_matrix", cm.context.hash, dict(matrix, sizes=[len(c) for c in cts]),
                         [np.frombuffer(b"".join(cts), np.uint8)], version=2)
    old_batch = _legacy("encrypted_batch", dict(model_id=cm.model_id, batch=batch.batch, shape=list(batch.shape),
                                                stage=batch.stage), ctm)
    (tmp_path / "old.ct").write_bytes(old_batch)
    back = EncryptedBatch.load(tmp_path / "old.ct", cm)
    assert _ct_bytes(back) == _ct_bytes(batch)
    rb = _v2(ek.relin_key.to_bytes()) if ek.relin_key is not None else b""
    gb = _v2(ek.galois_keys.to_bytes()) if ek.galois_keys is not None else b""
    old_keys = _legacy("eval_keys", dict(model_id=cm.model_id, has_relin=bool(rb), relin_bytes=len(rb),
                                         galois_bytes=len(gb), modpack_bytes=0), rb + gb)
    (tmp_path / "old.keys").write_bytes(old_keys)
    keys = EvalKeys.load(tmp_path / "old.keys", cm)
    assert keys.to_bytes() == ek.to_bytes()   # written back in the current container
    np.testing.assert_allclose(cm.decrypt(cm.run(back, keys, threads=1), sk), cm.simulate(x), atol=1e-4)
    # the old container's own checks stay: model binding, checksum, kind, version
    with pytest.raises(KeyMismatchError):
        EncryptedBatch.from_bytes(old_batch, other)
    with pytest.raises(SerializationError, match="checksum"):
        EncryptedBatch.from_bytes(old_batch[:-1] + bytes([old_batch[-1] ^ 1]), cm)
    with pytest.raises(SerializationError, match="expected a encrypted_batch file"):
        EncryptedBatch.from_bytes(old_keys, cm)
    with pytest.raises(SerializationError, match="version 2 is not supported"):
        EncryptedBatch.from_bytes(_legacy("encrypted_batch", dict(model_id=cm.model_id), b"", version=2), cm)


def _streamed(blob: bytes, compiled, piece: int):
    """blob received in pieces by a Receiver whose BatchReader (for `compiled`) reads it as it arrives."""
    from hemlp.runtime.artifacts import BatchReader

    r = serialize.Receiver(len(blob), BatchReader(compiled))
    for i in range(0, len(blob), piece):
        r.feed(blob[i:i + piece])
    return r.finish()


def _answer(fn):
    try:
        return "ok", [c.to_bytes() for c in fn().ctm.cts]
    except Exception as e:  # noqa: BLE001 - the answers are compared
        return type(e).__name__, str(e)


def test_a_batch_read_as_it_arrives_is_the_batch_of_its_bytes(model):
    """A batch received in pieces and read meanwhile (BatchReader: checks once the header is in, each ciphertext
    imported on its own thread once its bytes are) is from_bytes' batch of the same bytes; any other bytes get
    exactly from_bytes' answer (corrupted, truncated, resealed edits, another model's, a legacy file): the reader's
    work is used only when every check passed and the seal matches."""
    from tests.fuzz.targets import JSON_TOKENS, mutate

    _, other, _, _, x, _ = model
    with warnings.catch_warnings():      # layout (A): a batch of 8 ciphertexts, imported as each one's bytes are in
        warnings.simplefilter("ignore")
        cm = hemlp.compile(torch.nn.Sequential(torch.nn.Linear(8, 3)).eval(), x, batch_size=2, allow_insecure=True,
                           preset="test-N10", layout="batch")
    batch = cm.encrypt(x, cm.keygen()[0])
    assert batch.num_ciphertexts == 8
    blob = batch.to_bytes()
    for piece in (1, 33, 1000, len(blob)):
        got = _streamed(blob, cm, piece)
        reader_batch = got.watcher.batch(got)
        assert reader_batch is not None and _ct_bytes(reader_batch) == _ct_bytes(batch)
        assert _ct_bytes(EncryptedBatch.from_bytes(got, cm)) == _ct_bytes(batch)
    rng = np.random.default_rng(7)
    bodies = [blob[:-1] + bytes([blob[-1] ^ 1]), blob[: len(blob) // 2] + b"\0" * (len(blob) - len(blob) // 2),
              blob[:100], _reseal(blob[:-32][:60] + b"X" + blob[61:-32]),
              other.encrypt(x, other.keygen()[0]).to_bytes()]
    bodies += [serialize.recompute_checksums(mutate(blob, rng, JSON_TOKENS)) for _ in range(40)]
    for data in bodies:
        want = _answer(lambda: EncryptedBatch.from_bytes(data, cm))
        for piece in (97, 4096):
            assert _answer(lambda: EncryptedBatch.from_bytes(_streamed(data, cm, piece), cm)) == want
    # a batch read by a reader for another model, or none, is from_bytes' own
    got = _streamed(blob, other, 500)
    assert _answer(lambda: EncryptedBatch.from_bytes(got, cm))[0] == "ok"
    with pytest.raises(KeyMismatchError):
        EncryptedBatch.from_bytes(got, other)
