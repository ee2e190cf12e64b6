"""Client/server artefacts: evaluation keys and encrypted batches (the compiled-model directory: hemlp.model).

Evaluation keys (EvalKeys.save) and encrypted batches (EncryptedBatch.save) are single files in a
checksummed container: magic | header length | JSON header | payload length | payload | SHA-256.
Both carry the model id, so keys or ciphertexts of another compiled model are refused
(KeyMismatchError). The secret key is saved by the client with sk.save(path) and never enters
these files.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from hemlp.bootstrap import BootstrapKeys
from hemlp.fhe import GaloisKeys, Params, RelinKey, from_bytes
from hemlp.errors import KeyMismatchError, SerializationError
from hemlp.pcmm import CtMatrix, ModPackKeys
from hemlp.fhe.files import read_file, write_atomic
from hemlp.fhe.serialize import register_sealed, seal_intact, sealed

MAGIC = b"HEMLPC\x00\x01"
FORMAT_VERSION = 1
register_sealed(MAGIC, len(MAGIC))  # recompute_checksums (fuzzing) knows this container's layout


def pack(kind: str, header: dict, payload) -> bytes:
    """payload: bytes-like, or a list of bytes-like parts (joined once, with the container)."""
    return b"".join(pack_parts(kind, header, payload))


def pack_parts(kind: str, header: dict, payload) -> list:
    """pack() as a list of buffers (written to a file one by one, never joined in memory)."""
    parts = [memoryview(p).cast("B") for p in (payload if isinstance(payload, list) else [payload])]
    h = json.dumps(dict(header, kind=kind, version=FORMAT_VERSION), sort_keys=True).encode()
    head = MAGIC + struct.pack("<I", len(h)) + h + struct.pack("<Q", sum(p.nbytes for p in parts))
    return sealed(head, parts)


def unpack(data, kind: str):
    """(header, payload): the payload is a read-only view into data (no copy)."""
    try:
        data = memoryview(data).cast("B")
        if bytes(data[: len(MAGIC)]) != MAGIC:
            raise SerializationError(f"not a hemlp {kind} file (bad magic)")
        if len(data) < len(MAGIC) + 4 + 8 + 32 or not seal_intact(data):
            raise SerializationError(f"the {kind} file is truncated or corrupted (checksum mismatch)")
        off = len(MAGIC)
        (hl,) = struct.unpack_from("<I", data, off)
        off += 4
        header = json.loads(bytes(data[off: off + hl]).decode())
        off += hl
        (pl,) = struct.unpack_from("<Q", data, off)
        off += 8
        payload = data[off: off + pl]
        if off + pl + 32 != len(data):
            raise SerializationError(f"the {kind} file has inconsistent lengths")
    except (struct.error, UnicodeDecodeError, json.JSONDecodeError, TypeError, RecursionError):
        raise SerializationError(f"the {kind} file is corrupted") from None
    if not isinstance(header, dict):
        raise SerializationError(f"the {kind} file's header is not a JSON object: the file is corrupted")
    if header.get("kind") != kind:
        raise SerializationError(f"expected a {kind} file, got a {header.get('kind')!r} file")
    if header.get("version") != FORMAT_VERSION:
        raise SerializationError(f"{kind} file format version {header.get('version')} is not supported")
    return header, payload


def unpack_for(data: bytes, kind: str, compiled, fix: str = ""):
    """unpack() plus the check that the file belongs to this compiled model."""
    h, payload = unpack(data, kind)
    if h.get("model_id") != compiled.model_id:
        raise KeyMismatchError(f"this {kind.replace('_', ' ')} file belongs to compiled model {h.get('model_id')}, "
                               f"not {compiled.model_id}" + (f"; {fix}" if fix else ""))
    return h, payload


def _read(path, kind):
    return read_file(path, kind)


def _write(path, data):
    write_atomic(path, data)


class EvalKeys:
    """Server-side keys of one compiled model: the relinearisation key (layout A needs no rotations),
    in layout (P) the rotation keys of the program's rotations, in layout (A′) the CoeffToSlot /
    SlotToCoeff rotation keys with the conjugation key, and the ModPack keys of its MLWE products; a plan
    with bootstraps (compile(..., bootstrap=True)) adds its hemlp.bootstrap.BootstrapKeys."""

    def __init__(self, model_id: str, relin_key=None, galois_keys=None, modpack_keys=None, bootstrap_keys=None):
        self.model_id, self.relin_key, self.galois_keys = model_id, relin_key, galois_keys
        self.modpack_keys, self.bootstrap_keys = modpack_keys, bootstrap_keys

    @property
    def key_id(self):
        k = next((k for k in (self.relin_key, self.galois_keys, self.modpack_keys) if k is not None), None)
        return None if k is None else k.key_id

    @property
    def nbytes(self) -> int:
        """Bytes of key material (the seeded a-halves not counted)."""
        return sum(k.nbytes for k in (self.relin_key, self.galois_keys, self.modpack_keys, self.bootstrap_keys)
                   if k is not None)

    def __repr__(self):
        rot = "" if self.galois_keys is None else f", rotation keys={len(self.galois_keys.elements)}"
        mp = "" if self.modpack_keys is None else f", ModPack keys={self.modpack_keys.k}"
        bk = "" if self.bootstrap_keys is None else ", bootstrapping keys"
        return (f"EvalKeys(model={self.model_id}, relin_key={'yes' if self.relin_key is not None else 'none needed'}"
                f"{rot}{mp}{bk})")

    def to_bytes(self, ctx=None) -> bytes:
        """ctx: the model's context (needed only to serialise bootstrapping keys)."""
        rb = b"" if self.relin_key is None else self.relin_key.to_bytes()
        gb = b"" if self.galois_keys is None else self.galois_keys.to_bytes()
        mb = b"" if self.modpack_keys is None else self.modpack_keys.to_bytes()
        bb = b""
        if self.bootstrap_keys is not None:
            if ctx is None:
                raise TypeError("EvalKeys with bootstrapping keys serialise with their context: to_bytes(ctx) / "
                                "save(path, ctx)")
            bb = self.bootstrap_keys.to_bytes(ctx)
        header = dict(model_id=self.model_id, has_relin=self.relin_key is not None, relin_bytes=len(rb),
                      galois_bytes=len(gb), modpack_bytes=len(mb))
        if bb:
            header["bootstrap_bytes"] = len(bb)
        return pack("eval_keys", header, rb + gb + mb + bb)

    def save(self, path, ctx=None) -> None:
        _write(path, self.to_bytes(ctx))

    @classmethod
    def from_bytes(cls, data: bytes, compiled) -> "EvalKeys":
        h, payload = unpack_for(data, "eval_keys", compiled, "generate keys with this model's keygen()")
        nr, ng = h.get("relin_bytes", len(payload) if h.get("has_relin") else 0), h.get("galois_bytes", 0)
        nm, nb = h.get("modpack_bytes", 0), h.get("bootstrap_bytes", 0)
        if not (isinstance(nr, int) and isinstance(ng, int) and isinstance(nm, int) and isinstance(nb, int)
                and 0 <= nr and 0 <= ng and 0 <= nm and 0 <= nb and nr + ng + nm + nb == len(payload)):
            raise SerializationError("eval_keys: the header does not match the payload; the file is corrupted")
        rlk = gk = None
        if h.get("has_relin"):
            rlk = from_bytes(payload[:nr], compiled.context)
            if not isinstance(rlk, RelinKey):
                raise SerializationError("eval_keys: the payload is not a relinearisation key")
        if ng:
            gk = from_bytes(payload[nr:nr + ng], compiled.context)
            if not isinstance(gk, GaloisKeys):
                raise SerializationError("eval_keys: the second payload is not a set of rotation keys")
        mp = bk = None
        if nm:
            mp = ModPackKeys.from_bytes(payload[nr + ng:nr + ng + nm], compiled.context)
        if nb:
            bk = BootstrapKeys.from_bytes(bytes(payload[nr + ng + nm:]), compiled.context)
        return cls(h["model_id"], rlk, gk, mp, bk)

    @classmethod
    def load(cls, path, compiled) -> "EvalKeys":
        return cls.from_bytes(_read(path, "eval_keys"), compiled)


class EncryptedBatch:
    """A batch of encrypted samples in layout (A): a CtMatrix (features x batch) plus its model id."""

    def __init__(self, model_id: str, ctm, batch: int, shape: tuple, stage: str):
        self.model_id, self.ctm, self.batch, self.shape, self.stage = model_id, ctm, int(batch), tuple(shape), stage
        self.layer_seconds: dict = {}  # filled by run(): seconds per plan step of the run that produced it

    level = property(lambda self: self.ctm.level)
    num_ciphertexts = property(lambda self: len(self.ctm.cts))
    key_id = property(lambda self: self.ctm.cts[0].native.key_id)

    def __repr__(self):
        return (f"EncryptedBatch({self.stage}: {self.batch} x {list(self.shape)}, {self.num_ciphertexts} ciphertexts "
                f"at level {self.level}, model {self.model_id})")

    def to_bytes(self) -> bytes:
        return b"".join(self.to_parts())

    def to_parts(self) -> list:
        return pack_parts("encrypted_batch", dict(model_id=self.model_id, batch=self.batch, shape=list(self.shape),
                                                  stage=self.stage), self.ctm.to_parts())

    def save(self, path) -> None:
        _write(path, self.to_parts())  # the ciphertexts' memory straight to the file, never one big buffer

    @classmethod
    def from_bytes(cls, data: bytes, compiled) -> "EncryptedBatch":
        h, payload = unpack(data, "encrypted_batch")
        if h.get("model_id") != compiled.model_id:
            raise KeyMismatchError(f"this encrypted batch belongs to compiled model {h.get('model_id')}, not "
                                   f"{compiled.model_id}")
        batch, shape, stage = h.get("batch"), h.get("shape"), h.get("stage", "input")
        if (not isinstance(batch, int) or isinstance(batch, bool) or batch < 1 or not isinstance(shape, list)
                or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in shape)
                or stage not in ("input", "output")):
            raise SerializationError("encrypted_batch: malformed header (batch, shape or stage); the file is corrupted")
        ctm = CtMatrix.from_bytes(payload, compiled.context)
        return cls(h["model_id"], ctm, batch, tuple(shape), stage)

    @classmethod
    def load(cls, path, compiled) -> "EncryptedBatch":
        return cls.from_bytes(_read(path, "encrypted_batch"), compiled)
