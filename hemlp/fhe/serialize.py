"""Versioned, checksummed container for every object hemlp writes to disk or the wire.

Layout (little-endian):
    magic b"HEMLP\\0" | u16 format version | u8 object type | 32-byte parameter hash |
    u32 header length | header (UTF-8 JSON) | u64 payload length | payload | 32-byte SHA-256
The SHA-256 covers everything before it. Loading checks magic, version, type, checksum,
parameter hash, header fields and payload sizes before any data reaches the native core
(which validates every residue again), so truncated, corrupted or foreign bytes raise
SerializationError / ContextMismatchError and never crash or decode to garbage.

Versions: 1 = the first format; 2 = switching keys (relin_key, galois_keys) carry a "levels" header
field (one per key: the highest level it switches; its arrays hold level + 1 + |P| limbs). Version 1
files still load (their keys are top-level keys); files of newer versions are refused by name.
"""
from __future__ import annotations

import hashlib
import json
import struct

import numpy as np

from hemlp.errors import ContextMismatchError, SerializationError

MAGIC = b"HEMLP\x00"
VERSION = 2
READS = (1, 2)  # versions this code loads
TYPES = {
    "params": 1,
    "ciphertext": 2,
    "secret_key": 3,
    "public_key": 4,
    "relin_key": 5,
    "galois_keys": 6,
    "ct_matrix": 7,
    "bootstrap_keys": 16,
}
TYPE_NAMES = {v: k for k, v in TYPES.items()}
_PREFIX = struct.Struct("<6sHB32sI")
_MAX_HEADER = 1 << 24


def pack(obj_type: str, param_hash_hex: str, header: dict, arrays: list, version: int = VERSION) -> bytes:
    """Serialise `header` plus raw `arrays` (their dtype/shape are recorded in the header). `version`
    other than the current one is for writing test files of older formats."""
    return b"".join(pack_parts(obj_type, param_hash_hex, header, arrays, version))


def pack_parts(obj_type: str, param_hash_hex: str, header: dict, arrays: list, version: int = VERSION) -> list:
    """pack() as a list of buffers whose concatenation is the serialised object: the arrays' memory is not
    copied (the caller joins once, or nests the parts in another container). An element of `arrays` may also be
    a list of bytes-like chunks: one uint8 array, their concatenation (a matrix of serialised ciphertexts)."""
    if version not in READS:
        raise ValueError(f"cannot write format version {version}; this hemlp writes {READS}")
    bufs, specs = [], []
    for a in arrays:
        if isinstance(a, list):
            chunks = [memoryview(c).cast("B") for c in a]
            specs.append(["|u1", [sum(c.nbytes for c in chunks)]])
            bufs += chunks
        else:
            a = np.ascontiguousarray(a)
            specs.append([a.dtype.str, list(a.shape)])
            bufs.append(memoryview(a.reshape(-1)).cast("B"))
    header = dict(header)
    header["arrays"] = specs
    hbytes = json.dumps(header, sort_keys=True).encode()
    head = (_PREFIX.pack(MAGIC, version, TYPES[obj_type], bytes.fromhex(param_hash_hex), len(hbytes)) + hbytes
            + struct.pack("<Q", sum(b.nbytes for b in bufs)))
    return sealed(head, bufs)


def sealed(head: bytes, bufs: list) -> list:
    """[head, *bufs, SHA-256 of their concatenation]: a container's parts, hashed in place (no join)."""
    digest = hashlib.sha256(head)
    for b in bufs:
        digest.update(b)
    return [head, *bufs, digest.digest()]


def seal_intact(data: memoryview) -> bool:
    """Whether a sealed container's last 32 bytes are the SHA-256 of everything before them (read in place)."""
    return hashlib.sha256(data[:-32]).digest() == bytes(data[-32:])


#: the sealed container formats: magic -> offset of the u32 header length (then header, u64 payload length,
#: payload, SHA-256); other modules with a sealed format of this shape register theirs (register_sealed)
SEALED_FORMATS = {MAGIC: _PREFIX.size - 4}


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


def _reseal(buf: bytearray, start: int, end: int) -> None:
    """Reseal every container nested in buf[start:end] (innermost first), then the one at start."""
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
        _reseal(buf, i, inner)
        pos = inner
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


def unpack(data, expected_hash_hex: str | None, expected_type: str | None = None, copy: bool = True):
    """Returns (type, param_hash_hex, header, arrays); raises SerializationError on any defect. data: bytes or
    any contiguous buffer, read in place (no copy of the whole). copy=False: the arrays are read-only views into
    data (for callers that copy them anyway, e.g. into native ciphertexts)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise SerializationError(f"expected bytes, got {type(data).__name__}")
    try:
        data = memoryview(data).cast("B")
    except TypeError:  # a non-contiguous view
        data = memoryview(bytes(data))
    if len(data) < _PREFIX.size + 8 + 32:
        raise SerializationError("data too short to be a hemlp object: it is truncated or not a hemlp file")
    magic, version, tcode, phash, hlen = _PREFIX.unpack_from(data, 0)
    if magic != MAGIC:
        raise SerializationError("not a hemlp object (bad magic bytes); check the file you are loading")
    if version not in READS:
        raise SerializationError(
            f"format version {version} is not supported by this hemlp (reads versions "
            f"{', '.join(map(str, READS))}); re-export the object with a matching hemlp version"
        )
    if not seal_intact(data):
        raise SerializationError("checksum mismatch: the data is corrupted or truncated; re-transfer the file")
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
        except (TypeError, ValueError, IndexError, OverflowError):
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
