"""Client/server artefacts: evaluation keys and encrypted batches (the compiled-model directory: hemlp.artefact).

Evaluation keys (EvalKeys.save), encrypted batches (EncryptedBatch.save) and encrypted weights (layout C,
hemlp.layouts.blocked) are single files, object types of the one checksummed container (hemlp.fhe.serialize:
eval_keys, encrypted_batch, encrypted_weights). Their header carries the model id, so keys or ciphertexts of
another compiled model are refused (KeyMismatchError), and the container the parameter hash. Files of the
container before (b"HEMLPC\\0\\1", format version 1) still load. The secret key is saved by the client with
sk.save(path) and never enters these files. An encrypted batch file is memory-mapped when loaded: its checksum
is computed on a second core while its ciphertexts are imported, each copied once from the mapping.

Batches too large for the client's or the driver's memory (issue #30: 784 ciphertexts of ~10 MB at N16-boot) never
need to be whole in memory: write_batch_stream writes the file from row blocks of ciphertexts as they are encrypted
(CompiledModel.encrypt(x, key, path=...)), the same bytes EncryptedBatch.save writes, and EncryptedBatch.load(path,
compiled, mapped=True) gives a batch whose matrix (MappedCtMatrix) stays in the file: the Ray driver imports it a
block at a time (MappedCtMatrix.block) and drops each block once it is in the object store.
"""
from __future__ import annotations

import contextlib
import copy
import hashlib
import mmap
import os
import threading
import uuid
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hemlp.bootstrap import BatchBootstrapKeys, BootstrapKeys
from hemlp.errors import HemlpError, KeyMismatchError, SerializationError, ShapeError
from hemlp.fhe import GaloisKeys, RelinKey, from_bytes
from hemlp.fhe import serialize as ser
from hemlp.fhe.files import map_file, write_atomic
from hemlp.pcmm import CtMatrix, ModPackKeys

#: the version of a compiled-model directory's plan.json (hemlp.artefact); the files here are versioned by the
#: container (hemlp.fhe.serialize.VERSION)
FORMAT_VERSION = 1
#: a parameter hash of zeros: an artefact bound to no parameter set (an EvalKeys without any key)
NO_PARAMS = "00" * 32


def pack_parts(kind: str, param_hash: str, header: dict, payload) -> list:
    """An artefact of `kind` (hemlp.fhe.serialize.ARTEFACT_TYPES) as a list of buffers (written to a file one by
    one, never joined in memory): header plus the payload (bytes-like, or a list of bytes-like parts) as one
    byte array."""
    parts = payload if isinstance(payload, list) else [payload]
    return ser.pack_parts(kind, param_hash, header, [parts])


def pack(kind: str, param_hash: str, header: dict, payload) -> bytes:
    return b"".join(pack_parts(kind, param_hash, header, payload))


@contextlib.contextmanager
def reading(data, kind: str, compiled, fix: str = ""):
    """Read an artefact of `kind` that must belong to `compiled`: yields (header, payload view, legacy), legacy
    True for a file of the container before version 3 (its payload nests the objects as that container did). The
    payload is read in place; its checksum is verified by the end of the block (serialize.reading). data may be a
    serialize.Received (an HTTP body hashed as it arrived)."""
    if isinstance(data, ser.Received):
        view = data.data
    else:
        view = memoryview(data).cast("B") if isinstance(data, (bytes, bytearray, memoryview)) else data
    if isinstance(view, memoryview) and bytes(view[:len(ser.LEGACY_ARTEFACT_MAGIC)]) == ser.LEGACY_ARTEFACT_MAGIC:
        h, payload = ser.read_legacy_artefact(view, kind)
        _check_model(h, kind, compiled, fix)
        yield h, payload, True
        return
    with ser.reading(data, kind) as (_, phash, h, arrays):
        yield h, _checked_payload(kind, phash, h, arrays, compiled, fix), False


def _checked_payload(kind: str, phash: str, h: dict, arrays: list, compiled, fix: str):
    """The payload of a parsed artefact container, after its checks: the model, the parameters, one byte array."""
    _check_model(h, kind, compiled, fix)
    if phash != NO_PARAMS:
        ser.check_context(kind, phash, compiled.context.hash)
    if len(arrays) != 1 or arrays[0].dtype.itemsize != 1 or arrays[0].ndim != 1:
        raise SerializationError(f"{kind}: the payload is not one byte array; the file is corrupted")
    return arrays[0]


def _check_model(h: dict, kind: str, compiled, fix: str) -> None:
    if not isinstance(h.get("model_id"), str):
        raise SerializationError(f"the {kind.replace('_', ' ')} file has no model id; the file is corrupted")
    if h.get("model_id") != compiled.model_id:
        raise KeyMismatchError(f"this {kind.replace('_', ' ')} file belongs to compiled model {h.get('model_id')}, "
                               f"not {compiled.model_id}" + (f"; {fix}" if fix else ""))


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
        return b"".join(self.to_parts(ctx))

    def to_parts(self, ctx=None) -> list:
        """The file as a list of buffers (batched bootstrapping keys' polynomials are views: never joined)."""
        rb = b"" if self.relin_key is None else self.relin_key.to_bytes()
        gb = b"" if self.galois_keys is None else self.galois_keys.to_bytes()
        mb = b"" if self.modpack_keys is None else self.modpack_keys.to_bytes()
        bb, kind = [], None
        if self.bootstrap_keys is not None:
            if ctx is None:
                raise TypeError("EvalKeys with bootstrapping keys serialise with their context: to_bytes(ctx) / "
                                "save(path, ctx)")
            if isinstance(self.bootstrap_keys, BatchBootstrapKeys):   # batched bootstrapping / MaMBo
                bb, kind = self.bootstrap_keys.to_parts(ctx), "batch_bootstrap_keys"
            elif isinstance(self.bootstrap_keys, BootstrapKeys):
                bb, kind = [self.bootstrap_keys.to_bytes(ctx)], "bootstrap_keys"
            else:
                raise TypeError(f"bootstrap_keys must be BootstrapKeys or BatchBootstrapKeys, got "
                                f"{type(self.bootstrap_keys).__name__}")
        header = dict(model_id=self.model_id, has_relin=self.relin_key is not None, relin_bytes=len(rb),
                      galois_bytes=len(gb), modpack_bytes=len(mb))
        if bb:
            header["bootstrap_bytes"] = sum(memoryview(b).nbytes for b in bb)
            header["bootstrap_kind"] = kind
        return pack_parts("eval_keys", self._param_hash(ctx), header, [rb, gb, mb, *bb])

    def _param_hash(self, ctx) -> str:
        if ctx is not None:
            return ctx.hash
        for k in (self.relin_key, self.galois_keys, self.modpack_keys):
            if k is not None and k.param_hash is not None:
                return k.param_hash
        return NO_PARAMS

    def save(self, path, ctx=None) -> None:
        write_atomic(path, self.to_parts(ctx))

    @classmethod
    def from_bytes(cls, data: bytes, compiled) -> "EvalKeys":
        with reading(data, "eval_keys", compiled, "generate keys with this model's keygen()") as (h, payload, _):
            return cls._from_payload(h, memoryview(payload), compiled)

    @classmethod
    def _from_payload(cls, h: dict, payload: memoryview, compiled) -> "EvalKeys":
        """The keys nested in the payload (checked by the enclosing container's checksum)."""
        nr, ng = h.get("relin_bytes", len(payload) if h.get("has_relin") else 0), h.get("galois_bytes", 0)
        nm, nb = h.get("modpack_bytes", 0), h.get("bootstrap_bytes", 0)
        if not (isinstance(nr, int) and isinstance(ng, int) and isinstance(nm, int) and isinstance(nb, int)
                and 0 <= nr and 0 <= ng and 0 <= nm and 0 <= nb and nr + ng + nm + nb == len(payload)):
            raise SerializationError("eval_keys: the header does not match the payload; the file is corrupted")
        rlk = gk = None
        if h.get("has_relin"):
            rlk = from_bytes(payload[:nr], compiled.context, checksum=False)
            if not isinstance(rlk, RelinKey):
                raise SerializationError("eval_keys: the payload is not a relinearisation key")
        if ng:
            gk = from_bytes(payload[nr:nr + ng], compiled.context, checksum=False)
            if not isinstance(gk, GaloisKeys):
                raise SerializationError("eval_keys: the second payload is not a set of rotation keys")
        mp = bk = None
        if nm:
            mp = ModPackKeys.from_bytes(payload[nr + ng:nr + ng + nm], compiled.context)
        if nb:
            kind = h.get("bootstrap_kind", "bootstrap_keys")     # files before batched keys serialised: single
            if kind == "batch_bootstrap_keys":
                bk = BatchBootstrapKeys.from_bytes(payload[nr + ng + nm:], compiled.context, checksum=False)
            elif kind == "bootstrap_keys":
                bk = BootstrapKeys.from_bytes(payload[nr + ng + nm:], compiled.context, checksum=False)
            else:
                raise SerializationError(f"eval_keys: unknown bootstrapping key kind {kind!r}; the file is corrupted")
        return cls(h["model_id"], rlk, gk, mp, bk)

    @classmethod
    def load(cls, path, compiled) -> "EvalKeys":
        with map_file(path, "eval_keys") as data:
            return cls.from_bytes(data, compiled)


class EncryptedBatch:
    """A batch of encrypted samples in layout (A): a CtMatrix (features x batch) plus its model id."""

    def __init__(self, model_id: str, ctm, batch: int, shape: tuple, stage: str):
        self.model_id, self.ctm, self.batch, self.shape, self.stage = model_id, ctm, int(batch), tuple(shape), stage
        self.layer_seconds: dict = {}  # filled by run(): seconds per plan step of the run that produced it

    level = property(lambda self: self.ctm.level)

    @property
    def num_ciphertexts(self) -> int:
        return self.ctm.count if isinstance(self.ctm, MappedCtMatrix) else len(self.ctm.cts)

    @property
    def key_id(self):
        return self.ctm.key_id if isinstance(self.ctm, MappedCtMatrix) else self.ctm.cts[0].native.key_id

    @property
    def mapped(self) -> bool:
        """Whether the ciphertexts stay in the file until used (load(..., mapped=True))."""
        return isinstance(self.ctm, MappedCtMatrix)

    def __repr__(self):
        return (f"EncryptedBatch({self.stage}: {self.batch} x {list(self.shape)}, {self.num_ciphertexts} ciphertexts "
                f"at level {self.level}, model {self.model_id})")

    def to_bytes(self) -> bytes:
        return b"".join(self.to_parts())

    def to_parts(self) -> list:
        """The file as a list of buffers: the header (model id, batch, shape, stage and the matrix's header) and
        the ciphertexts' own containers, their polynomials as views of the native memory (no copy)."""
        return ser.sealed(*self._unsealed())

    def to_stream(self) -> "ser.SealedStream":
        """to_bytes() to send: its length at once, its parts hashed as they are sent (the container's SHA-256
        while the bytes travel, not before; no joined copy)."""
        return ser.SealedStream(*self._unsealed())

    def _unsealed(self) -> tuple:
        # the batch's own SHA-256 covers its ciphertexts: theirs are left unhashed (serialize: nested containers)
        matrix, parts = self.ctm.element_parts(seal=False)
        header = dict(model_id=self.model_id, batch=self.batch, shape=list(self.shape), stage=self.stage, matrix=matrix)
        return ser.unsealed_parts("encrypted_batch", self.ctm.ctx.hash, header, [parts])

    def save(self, path) -> None:
        write_atomic(path, self.to_parts())  # the ciphertexts' memory straight to the file, never one big buffer

    @classmethod
    def from_bytes(cls, data: bytes, compiled) -> "EncryptedBatch":
        """data: bytes or any buffer (a memory-mapped file: load), read in place; each ciphertext is copied once,
        into its native object. A serialize.Received whose BatchReader (for this model) read it as it arrived gives
        that reader's batch when it passed every check below and the seal matches; any other outcome is decided
        here, as for bytes."""
        reader = data.watcher if isinstance(data, ser.Received) else None
        if isinstance(reader, BatchReader) and reader.compiled is compiled:
            batch = reader.batch(data)
            if batch is not None:
                return batch
        with reading(data, "encrypted_batch", compiled) as (h, payload, legacy):
            batch, shape, stage = _batch_fields(h)
            if legacy:  # version 1 nested a ct_matrix container
                ctm = CtMatrix.from_bytes(payload, compiled.context)
            else:
                ctm = CtMatrix.from_elements(h.get("matrix"), payload, compiled.context)
            return cls(h["model_id"], ctm, batch, tuple(shape), stage)

    @classmethod
    def load(cls, path, compiled, mapped: bool = False, block_bytes: int | None = None) -> "EncryptedBatch":
        """The batch file, memory-mapped: one SHA-256 pass (on a second core) while the ciphertexts are imported.

        mapped=True: nothing is imported now; the batch's ctm is a MappedCtMatrix over the file (its checks of the
        header made here, its SHA-256 started on a second core and checked before a result is returned: see
        MappedCtMatrix). The Ray runtime's driver imports it a block of at most block_bytes at a time (default
        MAPPED_BLOCK_BYTES) and holds one block at most; the in-process runtime imports all of it on first use."""
        if mapped:
            ctm = MappedCtMatrix(path, compiled, block_bytes)
            return cls(compiled.model_id, ctm, ctm.batch_fields[0], ctm.batch_fields[1], ctm.batch_fields[2])
        with map_file(path, "encrypted_batch") as data:
            return cls.from_bytes(data, compiled)


def _batch_fields(h: dict) -> tuple:
    """(batch, shape, stage) of an encrypted batch's header, checked."""
    batch, shape, stage = h.get("batch"), h.get("shape"), h.get("stage", "input")
    if (not isinstance(batch, int) or isinstance(batch, bool) or batch < 1 or not isinstance(shape, list)
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in shape)
            or stage not in ("input", "output")):
        raise SerializationError("encrypted_batch: malformed header (batch, shape or stage); the file is corrupted")
    return batch, shape, stage


class BatchReader:
    """An encrypted batch read while its bytes arrive: the watcher of a serialize.Receiver (an HTTP body of known
    length). Once the header is in it makes EncryptedBatch.from_bytes' checks of it (container, model, parameters,
    batch fields, the matrix's element sizes against the payload), then hands each ciphertext to an importer
    thread as soon as its last byte is in: the imports run while the rest of the body travels and is hashed (the
    receiving thread hashes, this one imports). EncryptedBatch.from_bytes(received) takes batch() when every
    ciphertext came in, every check passed and the seal matches. Any failure only stops the reader: from_bytes
    then reads the bytes itself and answers as it does for any bytes (the same errors, the checksum's first), so
    nothing read here is used unless all of from_bytes' checks hold."""

    def __init__(self, compiled):
        self.compiled = compiled
        self._layout = None             # after the header: (batch fields, matrix fields, blobs, their end offsets)
        self._queued = 0                # elements handed to the importer
        self._imports: list = []        # its futures, one per run of elements, in order
        self._pool = None
        self._failed = False

    def __call__(self, view: memoryview, received: int) -> None:
        if self._failed:
            return
        try:
            self._advance(view, received)
        except Exception:  # noqa: BLE001 - from_bytes meets the same bytes again and answers with its own error
            self._stop()

    def _stop(self) -> None:
        self._failed, self._imports = True, []
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def _advance(self, view: memoryview, received: int) -> None:
        ctx = self.compiled.context
        if self._layout is None:
            start = ser.header_end(view, received)
            if start is None:
                return
            _, phash, h, arrays = ser.unpack(view, None, "encrypted_batch", copy=False, checksum=False)
            payload = _checked_payload("encrypted_batch", phash, h, arrays, self.compiled, "")
            batch, shape, stage = _batch_fields(h)
            mshape, chunks, fmt, blobs = CtMatrix.split_elements(h.get("matrix"), payload, ctx)
            ends, end = [], start
            for b in blobs:
                end += b.nbytes
                ends.append(end)
            self._layout = (h["model_id"], batch, tuple(shape), stage, tuple(mshape), chunks, fmt, blobs, ends)
        *_, fmt, blobs, ends = self._layout
        ready = self._queued
        while ready < len(blobs) and ends[ready] <= received:
            ready += 1
        if ready > self._queued:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hemlp-import")
            self._imports.append(self._pool.submit(CtMatrix.import_elements, fmt, blobs[self._queued:ready], ctx))
            self._queued = ready
            if ready == len(blobs):
                self._pool.shutdown(wait=False)         # its thread ends after the last import

    def batch(self, data: "ser.Received") -> "EncryptedBatch | None":
        """The batch read from data, if all of it was read here without a failure and its seal matches; else None
        (EncryptedBatch.from_bytes reads it then)."""
        if self._failed or self._layout is None or self._queued != len(self._layout[7]) or not data.seal_intact():
            self._stop()
            return None
        model_id, batch, shape, stage, mshape, chunks, fmt, _, _ = self._layout
        cts = []
        try:
            for f in self._imports:
                cts += f.result()
            ctm = CtMatrix(self.compiled.context, cts, mshape, chunks, fmt)
        except Exception:  # noqa: BLE001 - as in __call__: from_bytes answers
            self._stop()
            return None
        return EncryptedBatch(model_id, ctm, batch, shape, stage)


#: the most bytes of ciphertexts a driver imports from a mapped batch at once (MappedCtMatrix.block_bytes)
MAPPED_BLOCK_BYTES = 256 << 20
_CHECKSUM_MISMATCH = "checksum mismatch: the encrypted batch file {} is corrupted or truncated; re-transfer the file"


def write_batch_stream(path, compiled, batch: int, shape: tuple, matrix_shape: tuple, chunks: int, blocks) -> None:
    """An encrypted input batch file written from `blocks` (an iterable of lists of RLWE Ciphertexts, row-major over
    matrix_shape[0] rows x chunks, in order) as they come: the bytes EncryptedBatch.save writes for the same
    ciphertexts (the header lists every element's size, taken from the first ciphertext: a batch's ciphertexts
    share level, scale and key, so their containers have one size). Only the block being written is held. Atomic: a
    temporary file in the same folder, renamed when complete (nothing is left behind on an error)."""
    ctx = compiled.context
    count = int(matrix_shape[0]) * int(chunks)
    path = Path(path)
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}.{uuid.uuid4().hex[:8]}")
    digest, size, written = None, None, 0
    try:
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), "wb") as f:
            for cts in blocks:
                for ct in cts:
                    head, bufs = ct.unsealed_parts()   # left unhashed: the batch's SHA-256 covers it (as save)
                    parts = [head, *bufs, ser.NO_SEAL]
                    n = sum(memoryview(b).nbytes for b in parts)
                    if digest is None:
                        size = n
                        matrix = dict(shape=list(matrix_shape), chunks=int(chunks), format="rlwe",
                                      element_seals=False, sizes=[size] * count)
                        header = dict(model_id=compiled.model_id, batch=int(batch), shape=list(shape), stage="input",
                                      matrix=matrix)
                        # the container's head needs only the payload's length: one element's bytes stand for all
                        fhead, _ = ser.unsealed_parts("encrypted_batch", ctx.hash, header, [[bytes(size)] * count])
                        digest = hashlib.sha256(fhead)
                        f.write(fhead)
                    elif n != size:
                        raise SerializationError(f"ciphertext {written} serialises to {n} bytes, the first to {size}: "
                                                 "a batch's ciphertexts must share level, scale and key")
                    if written == count:
                        raise ShapeError(f"more than the {count} ciphertexts of a {matrix_shape[0]} x {chunks} batch")
                    for b in parts:
                        digest.update(b)
                        f.write(b)
                    written += 1
            if written != count:
                raise ShapeError(f"{written} ciphertexts written, a {matrix_shape[0]} x {chunks} batch has {count}")
            f.write(digest.digest())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class _FileChecksum:
    """The SHA-256 seal check of a container file, in a thread reading the file (not the mapping: the pages it
    reads stay in the page cache, none in this process), started at once; ok() waits for it."""

    def __init__(self, path, size: int):
        self._path, self._size, self._ok, self._error = path, size, None, None
        self._thread = threading.Thread(target=self._run, name="hemlp-batch-checksum", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            h, buf, left = hashlib.sha256(), bytearray(8 << 20), self._size - 32
            with open(self._path, "rb", buffering=0) as f:
                while left > 0:
                    view = memoryview(buf)[:min(len(buf), left)]
                    n = f.readinto(view)
                    if not n:
                        break
                    h.update(view[:n])
                    left -= n
                self._ok = left == 0 and h.digest() == f.read(32)
        except OSError as exc:
            self._error, self._ok = exc, False

    def ok(self) -> bool:
        self._thread.join()
        return bool(self._ok)


def _freed(track: dict) -> None:
    with track["lock"]:
        track["live"] -= 1


class MappedCtMatrix(CtMatrix):
    """The matrix of an encrypted batch file, left in the file (EncryptedBatch.load(..., mapped=True)): the file is
    mapped without reading it ahead, its header checked as load checks it (model, parameters, batch fields, every
    element's size against the payload) and its first ciphertext imported once for its level, scale and key.

    block(rows, cols) imports only those ciphertexts, then drops their pages from this process's mapping (the page
    cache keeps them, for the OS to drop): the Ray driver's _put_input puts a block and lets it go, so it holds one
    block of at most block_bytes at a time. ``cts`` (the in-process runtime, anything else that reads the whole
    matrix) imports every ciphertext once, keeps them and checks the SHA-256.

    Integrity: the file's SHA-256 is computed on a second core from the moment it is mapped; verify() waits for it
    and raises SerializationError when it does not match. The Ray runtime calls it before it fetches a run's
    output, so a result computed from a corrupted file is never returned (the native import validates every residue
    meanwhile, as load does: corrupted bytes cannot crash it). ``import_stats``: the ciphertexts imported, those
    alive now and the most alive at once (each import's native objects watched until they are freed)."""

    def __init__(self, path, compiled, block_bytes: int | None = None):
        # no CtMatrix.__init__: the ciphertexts stay in the file until asked for
        self.session = None
        self.path = Path(path)
        ctx = self.ctx = compiled.context
        self.block_bytes = int(block_bytes or MAPPED_BLOCK_BYTES)
        try:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                mm = mmap.mmap(f.fileno(), size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ) if size else None
        except OSError as exc:
            raise SerializationError(f"cannot read the encrypted batch file {path}: {exc.strerror}") from None
        if mm is None:
            raise SerializationError(f"the encrypted batch file {path} is empty; re-transfer the file")
        view = memoryview(mm)
        if bytes(view[:len(ser.LEGACY_ARTEFACT_MAGIC)]) == ser.LEGACY_ARTEFACT_MAGIC:
            raise SerializationError(f"{path} is an encrypted batch file of format version 1, which loads whole only: "
                                     "load it without mapped=True (or save it again with this hemlp)")
        self._check = _FileChecksum(self.path, size)
        try:
            _, phash, h, arrays = ser.unpack(view, None, "encrypted_batch", copy=False, checksum=False)
            payload = _checked_payload("encrypted_batch", phash, h, arrays, compiled, "")
            self.batch_fields = _batch_fields(h)
            shape, chunks, fmt, blobs = CtMatrix.split_elements(h.get("matrix"), payload, ctx)
            first = CtMatrix.import_elements(fmt, blobs[:1], ctx)[0]
        except (HemlpError, ValueError, TypeError):
            self.verify()             # a damaged file: say so (as load does) rather than what broke first
            raise
        self.shape, self.chunks, self.format = tuple(shape), chunks, fmt
        self._level, self._scale, self._encoding = first.level, first.scale, first.encoding
        self.key_id = first.native.key_id
        self.count = len(blobs)
        self._mm, self._blobs, self._drop_to, self._all = mm, blobs, None, None
        # where each element lies in the file (for dropping its pages once imported)
        start = size - 32 - payload.nbytes
        self._offsets = [start]
        for b in blobs:
            self._offsets.append(self._offsets[-1] + b.nbytes)
        self._track = dict(lock=threading.Lock(), imported=0, live=0, peak_live=0)
        del first, arrays, payload, view
        self._release(0, self.count)

    encoding = property(lambda self: self._encoding)
    level = property(lambda self: self._level)
    scale = property(lambda self: self._scale)

    def __repr__(self):
        return (f"MappedCtMatrix({self.shape[0]}x{self.shape[1]}, format={self.format}, chunks={self.chunks}, "
                f"{self.count} ciphertexts in {self.path}, level={self.level})")

    @property
    def import_stats(self) -> dict:
        t = self._track
        return dict(imported=t["imported"], live=t["live"], peak_live=t["peak_live"])

    def verify(self) -> None:
        """SerializationError unless the file's SHA-256 matches its seal (waits for the check started at load)."""
        if not self._check.ok():
            raise SerializationError(_CHECKSUM_MISMATCH.format(self.path))

    def dropped(self, level: int) -> "MappedCtMatrix":
        """The same file read at a lower level: each ciphertext's primes above `level` dropped as it is imported."""
        if level > self._level:
            raise ValueError(f"cannot raise a matrix at level {self._level} to {level}")
        out = copy.copy(self)       # the same mapping, checksum and import counts
        vars(out).update(_drop_to=level, _level=level, _all=None)
        return out

    def _import(self, idx: list) -> list:
        cts = CtMatrix.import_elements(self.format, [self._blobs[i] for i in idx], self.ctx)
        if self._drop_to is not None:
            cts = [self.ctx.drop_level(c, self._drop_to) for c in cts]
        t = self._track
        with t["lock"]:
            t["imported"] += len(cts)
            t["live"] += len(cts)
            t["peak_live"] = max(t["peak_live"], t["live"])
        for c in cts:
            weakref.finalize(c.native, _freed, t)
        self._release(idx[0], idx[-1] + 1)
        return cts

    def _release(self, i0: int, i1: int) -> None:
        """Drop the mapping's pages of elements i0 .. i1 - 1 from this process (they were copied on import)."""
        a = self._offsets[i0] - self._offsets[i0] % mmap.PAGESIZE
        with contextlib.suppress(OSError, ValueError):
            self._mm.madvise(mmap.MADV_DONTNEED, a, self._offsets[i1] - a)

    def element(self, i: int):
        """Ciphertext i (row-major over rows x chunks), imported alone."""
        return self._import([i])[0]

    def block(self, rows: slice, cols: slice) -> list:
        """The ciphertexts of rows x cols (row-major), imported now and not kept."""
        c = self.chunks
        return self._import([r * c + j for r in range(rows.start, rows.stop) for j in range(cols.start, cols.stop)])

    @property
    def cts(self) -> list:
        """Every ciphertext, imported on first use (then kept) and the file's SHA-256 checked."""
        if self._all is None:
            cts = self._import(list(range(self.count)))
            self.verify()
            self._all = cts
        return self._all
