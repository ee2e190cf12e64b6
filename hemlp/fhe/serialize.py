"""The one container of every object hemlp writes to disk or the wire: scheme objects (parameters, ciphertexts,
keys), encrypted matrices, bootstrapping keys and the client/server artefacts (evaluation keys, encrypted batches,
encrypted weights) alike.

Layout (little-endian):
    magic b"HEMLP\\0" | u16 format version | u8 object type | 32-byte parameter hash |
    u32 header length | header (UTF-8 JSON) | u64 payload length | payload | 32-byte SHA-256
The SHA-256 covers everything before it. The header describes the payload's arrays ("arrays": dtype and shape of
each, in order) plus the object's own fields (an artefact's "model_id" binds it to one compiled model). From
version 3 on the header is padded with spaces so that the payload starts 8-byte aligned (from the magic): uint64
residues are read in place, also when the container is memory-mapped. Loading checks magic, version, type,
checksum, parameter hash, header fields and payload sizes, so truncated, corrupted or foreign bytes raise
SerializationError / ContextMismatchError and never crash or decode to garbage; the native core validates every
residue again. A large container's checksum is computed while its objects are parsed (reading()): nothing it
holds is returned unless the checksum matches.

Nested containers: a container's payload may hold whole containers (a ct_matrix its ciphertexts, an encrypted batch
its matrix's ciphertexts). The outer SHA-256 covers them, and readers check only the outer one (reading()), so a
writer may leave a nested seal unhashed: 32 zero bytes (NO_SEAL), with the enclosing header saying so (an encrypted
batch's "element_seals": false). Readers load both kinds; recompute_checksums keeps an unhashed seal unhashed.

Versions: 1 = the first format; 2 = switching keys (relin_key, galois_keys) carry a "levels" header field (one per
key: the highest level it switches; its arrays hold level + 1 + |P| limbs); 3 = the client/server artefacts are
object types of this container (eval_keys, encrypted_batch, encrypted_weights: before, a container of their own,
b"HEMLPC\\0\\1", which read_legacy_artefact still reads) and headers are padded for alignment. Versions 1 and 2
still load; files of newer versions are refused by name.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import struct
import threading

import numpy as np

from hemlp.errors import ContextMismatchError, HemlpError, SerializationError

__all__ = ["MAGIC", "VERSION", "READS", "TYPES", "NO_SEAL", "pack", "pack_parts", "unsealed_parts", "PendingSeal",
           "sealed", "iter_sealed", "SealedStream", "seal_later", "Receiver", "Received", "header_end", "sha256",
           "unpack", "reading", "field", "check_context",
           "peek_type", "peek_version", "read_legacy_artefact", "recompute_checksums", "seal_intact"]

MAGIC = b"HEMLP\x00"
VERSION = 3
READS = (1, 2, 3)  # versions this code loads
TYPES = {
    "params": 1,
    "ciphertext": 2,
    "secret_key": 3,
    "public_key": 4,
    "relin_key": 5,
    "galois_keys": 6,
    "ct_matrix": 7,
    "eval_keys": 8,
    "encrypted_batch": 9,
    "encrypted_weights": 10,
    "bootstrap_keys": 16,
    "batch_bootstrap_keys": 17,
}
TYPE_NAMES = {v: k for k, v in TYPES.items()}
#: the client/server artefacts: object types of this container since version 3
ARTEFACT_TYPES = ("eval_keys", "encrypted_batch", "encrypted_weights")
_PREFIX = struct.Struct("<6sHB32sI")
_MAX_HEADER = 1 << 24
_ALIGN = 8
#: the seal of a container nested in another whose SHA-256 covers it, when its writer leaves it unhashed (a reader
#: never checks a nested seal; the enclosing header says so, e.g. an encrypted batch's "element_seals": false)
NO_SEAL = bytes(32)
#: containers at least this large are checksummed in a thread while their objects are parsed (hashlib releases
#: the GIL): the SHA-256 pass and the native import then run on two cores
_THREADED_CHECKSUM_BYTES = 1 << 22

#: the artefact container before version 3 (hemlp.runtime.artifacts): magic | u32 header length | JSON header
#: (with "kind" and "version": 1) | u64 payload length | payload | SHA-256; read_legacy_artefact reads it
LEGACY_ARTEFACT_MAGIC = b"HEMLPC\x00\x01"
LEGACY_ARTEFACT_VERSION = 1


def pack(obj_type: str, param_hash_hex: str, header: dict, arrays: list, version: int = VERSION) -> bytes:
    """Serialise `header` plus raw `arrays` (their dtype/shape are recorded in the header). `version`
    other than the current one is for writing test files of older formats."""
    return b"".join(pack_parts(obj_type, param_hash_hex, header, arrays, version))


def pack_parts(obj_type: str, param_hash_hex: str, header: dict, arrays: list, version: int = VERSION) -> list:
    """pack() as a list of buffers whose concatenation is the serialised object: the arrays' memory is not
    copied (the caller joins once, or writes the parts to a file one by one). An element of `arrays` may also be
    a list of bytes-like chunks: one uint8 array, their concatenation (e.g. the serialised ciphertexts of a matrix);
    a chunk may be a PendingSeal (a nested container's seal still being hashed: seal_later)."""
    return sealed(*unsealed_parts(obj_type, param_hash_hex, header, arrays, version))


def unsealed_parts(obj_type: str, param_hash_hex: str, header: dict, arrays: list,
                   version: int = VERSION) -> tuple:
    """(head, buffers): pack_parts() without its SHA-256, for sealed() or seal_later()."""
    if version not in READS:
        raise ValueError(f"cannot write format version {version}; this hemlp writes {READS}")
    bufs, specs = [], []
    for a in arrays:
        if isinstance(a, list):
            chunks = [c if isinstance(c, PendingSeal) else memoryview(c).cast("B") for c in a]
            specs.append(["|u1", [sum(c.nbytes for c in chunks)]])
            bufs += chunks
        else:
            a = np.ascontiguousarray(a)
            specs.append([a.dtype.str, list(a.shape)])
            bufs.append(memoryview(a.reshape(-1)).cast("B"))
    header = dict(header)
    header["arrays"] = specs
    hbytes = json.dumps(header, sort_keys=True).encode()
    if version >= 3:  # spaces after the JSON: the payload starts 8-byte aligned
        hbytes += b" " * (-(_PREFIX.size + len(hbytes) + 8) % _ALIGN)
    head = (_PREFIX.pack(MAGIC, version, TYPES[obj_type], bytes.fromhex(param_hash_hex), len(hbytes)) + hbytes
            + struct.pack("<Q", sum(b.nbytes for b in bufs)))
    return head, bufs


class PendingSeal:
    """The 32-byte SHA-256 seal of a container that a thread is still hashing (seal_later). A container holding
    it (pack_parts) waits for it only when its own hash reaches it, so the nested seals and the outer one run at
    once: a batch's ciphertexts are hashed twice (each its own seal, then the batch's) in the time of about one."""

    nbytes = 32

    def __init__(self, future):
        self._future = future

    def result(self) -> bytes:
        return self._future.result()


def _digest(head: bytes, bufs: list) -> bytes:
    digest = hashlib.sha256(head)
    for b in bufs:
        digest.update(b)
    return digest.digest()


def sealed(head: bytes, bufs: list) -> list:
    """[head, *bufs, SHA-256 of their concatenation]: a container's parts, hashed in place (no join); a
    PendingSeal among bufs is replaced by its bytes once they are known."""
    return list(iter_sealed(head, bufs))


def iter_sealed(head: bytes, bufs: list):
    """sealed()'s parts one at a time, each hashed just before it is handed out and the SHA-256 last: a sender
    that writes each part as it comes sends while it hashes (the receiver reads, and hashes, meanwhile)."""
    digest = hashlib.sha256(head)
    yield head
    for b in bufs:
        if isinstance(b, PendingSeal):
            b = b.result()
        digest.update(b)
        yield b
    yield digest.digest()


class SealedStream:
    """A container to send: ``nbytes`` (known before its SHA-256 is: a Content-Length) and, on iteration, its
    parts as iter_sealed() hands them out (each time anew: a retried request iterates again)."""

    def __init__(self, head: bytes, bufs: list):
        self.head, self.bufs = head, bufs
        self.nbytes = len(head) + sum(b.nbytes for b in bufs) + 32

    def __len__(self) -> int:
        return self.nbytes

    def __iter__(self):
        return iter_sealed(self.head, self.bufs)

    def __bytes__(self) -> bytes:
        return b"".join(self)


def seal_later(head: bytes, bufs: list, pool) -> list:
    """[head, *bufs, PendingSeal]: sealed()'s parts with the SHA-256 computed by `pool` (an Executor; hashlib
    releases the GIL). Only for nesting in a container made by pack_parts, which resolves the seal."""
    return [head, *bufs, PendingSeal(pool.submit(_digest, head, bufs))]


def seal_intact(data: memoryview) -> bool:
    """Whether a sealed container's last 32 bytes are the SHA-256 of everything before them (read in place)."""
    if isinstance(data, Received):
        return data.seal_intact()
    return hashlib.sha256(data[:-32]).digest() == bytes(data[-32:])


class Received:
    """Bytes that arrived in pieces (a Receiver's): ``data``, a read-only view of them, and the SHA-256 of all but
    their last 32 bytes, computed as they arrived. A sealed container's check (reading, unpack) compares that
    digest with the seal instead of hashing the bytes a second time; nothing else can change the bytes after.
    ``watcher``: the Receiver's watcher (what it made of the bytes as they came), or None."""

    __slots__ = ("data", "watcher", "_head", "_tail")

    def __init__(self, data: memoryview, head_sha, tail: bytes, watcher=None):
        self.data, self.watcher, self._head, self._tail = data, watcher, head_sha, tail

    def __len__(self) -> int:
        return self.data.nbytes

    def __bytes__(self) -> bytes:
        return self.data.tobytes()

    def __getitem__(self, index):
        return self.data[index]

    def seal_intact(self) -> bool:
        """Whether the last 32 bytes are the SHA-256 of everything before them (as seal_intact(data))."""
        return len(self) >= 32 and self._head.digest() == self._tail

    def sha256(self) -> bytes:
        """The SHA-256 of all the bytes."""
        whole = self._head.copy()
        whole.update(self._tail)
        return whole.digest()


def sha256(data) -> bytes:
    """The SHA-256 of bytes (any buffer) or of a Received (from the digest it kept: no second pass)."""
    return data.sha256() if isinstance(data, Received) else hashlib.sha256(data).digest()


class Receiver:
    """An HTTP body (or any bytes) taken in as it arrives: copied once into one buffer, and hashed piece by piece
    meanwhile, all but the latest 32 bytes (a sealed container's seal, known only at the end), so that when the
    last piece is in, its SHA-256 is too. size: the length announced (a Content-Length), preallocated; None: any
    length (a chunked body). watcher (with a size): called as watcher(view, received) after each piece, view a
    read-only view of the whole buffer of which the first `received` bytes are in, to parse the bytes while the
    rest travels (hemlp.runtime.artifacts.BatchReader); it must not raise. finish() gives the Received."""

    def __init__(self, size: int | None = None, watcher=None):
        self.size = None if size is None else int(size)
        self.received = 0
        self._sha = hashlib.sha256()
        self._tail = b""              # the latest bytes, up to 32, not hashed yet: they may be the seal
        # not zero-filled (bytearray(n) would be): memory is committed only as bytes arrive, so a large announced
        # size that never comes costs no resident memory
        self._buf = memoryview(np.empty(self.size, np.uint8)) if self.size is not None else None
        self._chunks: list = []
        self.watcher = watcher if self.size is not None else None
        self._watched = self._buf.toreadonly() if self.watcher is not None else None

    def _hash(self, piece: memoryview) -> None:
        if len(piece) >= 32:
            if self._tail:
                self._sha.update(self._tail)
            self._sha.update(piece[:-32])
            self._tail = piece[-32:].tobytes()
        else:
            tail = self._tail + piece.tobytes()
            self._sha.update(tail[:-32])
            self._tail = tail[-32:]

    def feed(self, chunk) -> None:
        """The next piece (any buffer; copied). ValueError past the announced size."""
        if self._sha is None:
            raise ValueError("this Receiver has finished")
        piece = memoryview(chunk).cast("B")
        n = len(piece)
        if self._buf is not None:
            if self.received + n > self.size:
                raise ValueError(f"{self.received + n} bytes arrived, {self.size} were announced")
            self._buf[self.received:self.received + n] = piece
        else:
            self._chunks.append(piece.tobytes())
        self.received += n
        self._hash(piece)
        if self.watcher is not None:
            self.watcher(self._watched, self.received)

    def read_from(self, readinto, block: int = 1 << 18) -> int:
        """Read the announced size from readinto(view) -> count (a socket file's readinto), in blocks straight into
        the buffer, hashing each block as it lands; returns the bytes read (fewer than the size: the sender
        stopped early)."""
        if self._buf is None:
            raise ValueError("read_from needs the size announced (Receiver(size)), before finish()")
        view = self._buf
        while self.received < self.size:
            n = readinto(view[self.received:min(self.size, self.received + block)])
            if not n:
                break
            self._hash(view[self.received:self.received + n])
            self.received += n
            if self.watcher is not None:
                self.watcher(self._watched, self.received)
        return self.received

    def finish(self) -> Received:
        """The bytes received, read-only, with their digest. ValueError when fewer than the announced size came."""
        if self._sha is None:
            raise ValueError("this Receiver has finished")
        if self._buf is not None:
            if self.received != self.size:
                raise ValueError(f"the body ended after {self.received} of {self.size} bytes")
            data = self._buf.toreadonly()
        else:
            data = memoryview(b"".join(self._chunks))
        received = Received(data, self._sha, self._tail, self.watcher)
        # the buffer is the Received's alone now: no later feed can change what the digest vouches for
        self._buf, self._chunks, self._sha, self.size, self._watched = None, None, None, 0, None
        return received


def header_end(data, available: int) -> int | None:
    """Where a container's payload starts (after its prefix, header and payload length), once the first
    `available` bytes of data are in; None before (for a reader of a container still arriving)."""
    if available < _PREFIX.size:
        return None
    (hlen,) = struct.unpack_from("<I", data, _PREFIX.size - 4)
    end = _PREFIX.size + hlen + 8
    return end if available >= end else None


#: the sealed container formats: magic -> offset of the u32 header length (then header, u64 payload length,
#: payload, SHA-256); other modules with a sealed format of this shape register theirs (register_sealed)
SEALED_FORMATS = {MAGIC: _PREFIX.size - 4, LEGACY_ARTEFACT_MAGIC: len(LEGACY_ARTEFACT_MAGIC)}


def register_sealed(magic: bytes, header_length_offset: int) -> None:
    """Declare a sealed container format (magic | ... | u32 header length at the offset | header | u64 payload
    length | payload | SHA-256 of everything before), so recompute_checksums can reseal it."""
    SEALED_FORMATS[bytes(magic)] = int(header_length_offset)


def _sealed_end(buf, start: int, limit: int):
    """The end of a sealed container starting at buf[start] (None when its lengths do not fit in buf[:limit])."""
    for magic, off in SEALED_FORMATS.items():
        if bytes(buf[start:start + len(magic)]) == magic:
            if start + off + 4 > limit:
                return None
            (hlen,) = struct.unpack_from("<I", buf, start + off)
            p = start + off + 4 + hlen
            if p + 8 > limit:
                return None
            (plen,) = struct.unpack_from("<Q", buf, p)
            end = p + 8 + plen + 32
            return end if end <= limit else None
    return None


def _reseal(buf: bytearray, start: int, end: int, outer: bool = True) -> None:
    """Reseal every container nested in buf[start:end] (innermost first), then the one at start; a nested one
    written unsealed (NO_SEAL: its enclosing SHA-256 covers it) stays unsealed, as its writer left it."""
    body_end = end - 32
    pos = start + 1
    while True:
        hits = [i for i in (buf.find(m, pos, body_end) for m in SEALED_FORMATS) if i >= 0]
        if not hits:
            break
        i = min(hits)
        inner = _sealed_end(buf, i, body_end)
        if inner is None:
            pos = i + 1
            continue
        _reseal(buf, i, inner, outer=False)
        pos = inner
    if outer or bytes(buf[body_end:end]) != NO_SEAL:
        buf[body_end:end] = hashlib.sha256(memoryview(buf)[start:body_end]).digest()


def recompute_checksums(data) -> bytes:
    """data with the SHA-256 of every sealed container in it recomputed, nested ones first (a ciphertext inside a
    ciphertext matrix inside an encrypted batch). For fuzzers and tests that edit a container and want the
    parsers, not the checksum, to meet the edit; bytes that are no container come back unchanged."""
    buf = bytearray(data)
    if len(buf) < 32 or not any(buf.startswith(m) for m in SEALED_FORMATS):
        return bytes(buf)
    _reseal(buf, 0, len(buf))  # the outer seal covers the whole input, whatever its (maybe edited) lengths say
    return bytes(buf)


def peek_type(data: bytes) -> str:
    """Object type of a serialised blob (after full integrity checks)."""
    return unpack(data, None)[0]


def peek_version(data: bytes) -> int:
    """The format version of a blob that unpack() accepted."""
    return _PREFIX.unpack_from(bytes(data[: _PREFIX.size]), 0)[1]


def check_context(obj_type: str, phash_hex: str, expected_hash_hex: str) -> None:
    """ContextMismatchError unless a loaded object's parameter hash is the context's."""
    if phash_hex != expected_hash_hex:
        raise ContextMismatchError(
            f"this {obj_type} was made under other encryption parameters (hash {phash_hex[:16]}…) than the "
            f"context it is loaded into ({expected_hash_hex[:16]}…); load it with the matching parameters"
        )


def _view(data) -> memoryview:
    if isinstance(data, Received):
        return data.data
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise SerializationError(f"expected bytes, got {type(data).__name__}")
    try:
        return memoryview(data).cast("B")
    except TypeError:  # a non-contiguous view
        return memoryview(bytes(data))


def _check_prefix(data: memoryview) -> None:
    """Magic, version and minimal length: what must hold before a checksum means anything."""
    if len(data) < _PREFIX.size + 8 + 32:
        raise SerializationError("data too short to be a hemlp object: it is truncated or not a hemlp file")
    magic, version = _PREFIX.unpack_from(data, 0)[:2]
    if magic != MAGIC:
        raise SerializationError("not a hemlp object (bad magic bytes); check the file you are loading")
    if version not in READS:
        fix = ("it was written by a newer hemlp: upgrade hemlp to load it, or re-export it with this version"
               if version > VERSION else "re-export the object with a matching hemlp version")
        raise SerializationError(f"format version {version} is not supported by this hemlp (reads versions "
                                 f"{', '.join(map(str, READS))}); {fix}")


_CHECKSUM_MISMATCH = "checksum mismatch: the data is corrupted or truncated; re-transfer the file"


def _parse(data: memoryview, expected_hash_hex: str | None, expected_type: str | None, copy: bool):
    """Everything unpack checks after the checksum: type, parameter hash, header, array layout."""
    tcode, phash, hlen = _PREFIX.unpack_from(data, 0)[2:]
    if tcode not in TYPE_NAMES:
        raise SerializationError(f"unknown object type code {tcode}")
    obj_type = TYPE_NAMES[tcode]
    if expected_type is not None and obj_type != expected_type:
        raise SerializationError(f"expected a serialised {expected_type}, got a {obj_type}")
    phash_hex = phash.hex()
    if expected_hash_hex is not None:
        check_context(obj_type, phash_hex, expected_hash_hex)
    off = _PREFIX.size
    if hlen > _MAX_HEADER or off + hlen + 8 > len(data) - 32:
        raise SerializationError("header length out of range: the data is corrupted")
    try:
        header = json.loads(bytes(data[off : off + hlen]).decode())
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # RecursionError: "[[[[..." nested too deep
        raise SerializationError(f"unreadable header: {type(exc).__name__}: {str(exc)[:200]}") from None
    if not isinstance(header, dict) or not isinstance(header.get("arrays"), list):
        raise SerializationError("malformed header: the data is corrupted")
    off += hlen
    (plen,) = struct.unpack_from("<Q", data, off)
    off += 8
    if off + plen != len(data) - 32:
        raise SerializationError("payload length does not match the data: it is truncated or corrupted")
    arrays = []
    for spec in header["arrays"]:
        try:
            dt = np.dtype(spec[0])
            shape = tuple(int(s) for s in spec[1])
            if dt.kind not in "iuf" or dt.itemsize > 8 or any(s < 0 for s in shape):
                raise ValueError("bad array spec")
            count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        except (TypeError, ValueError, IndexError, KeyError, OverflowError):
            raise SerializationError("malformed array description in the header") from None
        nbytes = count * dt.itemsize
        if nbytes < 0 or off + nbytes > len(data) - 32:
            raise SerializationError("array data runs past the payload: the data is truncated or corrupted")
        a = np.frombuffer(data, dtype=dt, count=count, offset=off).reshape(shape)
        arrays.append(a.copy() if copy else a)
        off += nbytes
    if off != len(data) - 32:
        raise SerializationError("trailing bytes after the arrays: the data is corrupted")
    return obj_type, phash_hex, header, arrays


def unpack(data, expected_hash_hex: str | None, expected_type: str | None = None, copy: bool = True,
           checksum: bool = True):
    """Returns (type, param_hash_hex, header, arrays); raises SerializationError on any defect. data: bytes or
    any contiguous buffer, read in place (no copy of the whole). copy=False: the arrays are read-only views into
    data (for callers that copy them anyway, e.g. into native ciphertexts). checksum=False skips the SHA-256 check:
    only for an object nested in a container whose checksum, which covers these bytes, was checked (reading())."""
    view = _view(data)
    _check_prefix(view)
    if checksum and not seal_intact(data if isinstance(data, Received) else view):
        raise SerializationError(_CHECKSUM_MISMATCH)
    return _parse(view, expected_hash_hex, expected_type, copy)


class _Checksum:
    """The seal check of one container, in a thread for large ones (hashlib releases the GIL while it hashes)."""

    def __init__(self, data):
        self._data, self._ok, self._thread = data, None, None
        if isinstance(data, Received):         # hashed as it arrived: compare, no second pass
            self._ok = data.seal_intact()
        elif len(data) >= _THREADED_CHECKSUM_BYTES:
            self._thread = threading.Thread(target=self._run, name="hemlp-checksum", daemon=True)
            self._thread.start()
        else:
            self._run()

    def _run(self):
        self._ok = seal_intact(self._data)

    def ok(self) -> bool:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        return bool(self._ok)


@contextlib.contextmanager
def reading(data, expected_type: str, expected_hash_hex: str | None = None):
    """Read a container while its checksum is computed: yields (type, param_hash_hex, header, arrays) with the
    arrays as read-only views into data, for the caller to turn into objects inside the block (objects nested in
    the payload load with checksum=False: this checksum covers them). On leaving the block the checksum must
    match, else SerializationError, also when the block failed (corruption explains the failure): nothing parsed
    from corrupted bytes escapes. Large containers are hashed on a second core meanwhile; the native core
    validates every residue it imports regardless. data may be a Received: its digest, taken as it arrived, is
    compared with the seal (the same check, no second pass)."""
    view = _view(data)
    _check_prefix(view)
    check = _Checksum(data if isinstance(data, Received) else view)
    try:
        yield _parse(view, expected_hash_hex, expected_type, copy=False)
    except (HemlpError, ValueError, TypeError):
        if not check.ok():
            raise SerializationError(_CHECKSUM_MISMATCH) from None
        raise
    finally:
        intact = check.ok()  # always joined: the thread never outlives the block (nor the buffer's mapping)
    if not intact:
        raise SerializationError(_CHECKSUM_MISMATCH)


def read_legacy_artefact(data, kind: str):
    """(header, payload view) of an artefact file in the container before version 3 (b"HEMLPC\\0\\1", see
    LEGACY_ARTEFACT_MAGIC), with its checks: checksum, lengths, JSON header, kind and version."""
    try:
        data = memoryview(data).cast("B")
        if bytes(data[: len(LEGACY_ARTEFACT_MAGIC)]) != LEGACY_ARTEFACT_MAGIC:
            raise SerializationError(f"not a hemlp {kind} file (bad magic)")
        if len(data) < len(LEGACY_ARTEFACT_MAGIC) + 4 + 8 + 32 or not seal_intact(data):
            raise SerializationError(f"the {kind} file is truncated or corrupted (checksum mismatch)")
        off = len(LEGACY_ARTEFACT_MAGIC)
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
    if header.get("version") != LEGACY_ARTEFACT_VERSION:
        raise SerializationError(f"{kind} file format version {header.get('version')} is not supported")
    return header, payload


def int_list(header: dict, name: str) -> list:
    """A header field that is a list of integers, or SerializationError (JSON lets a hostile header put floats,
    Infinity or NaN there)."""
    v = field(header, name, list)
    if not all(isinstance(b, int) and not isinstance(b, bool) for b in v):
        raise SerializationError(f"header field {name!r} must hold integers: the data is corrupted")
    return v


def field(header: dict, name: str, kind):
    """A typed header field, or SerializationError."""
    if name not in header:
        raise SerializationError(f"header misses field {name!r}: the data is corrupted")
    v = header[name]
    if kind is float and isinstance(v, int) and not isinstance(v, bool):
        v = float(v)
    if not isinstance(v, kind) or (kind is int and isinstance(v, bool)):
        raise SerializationError(f"header field {name!r} has the wrong type: the data is corrupted")
    return v
