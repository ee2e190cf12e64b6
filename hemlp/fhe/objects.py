"""The scheme's objects: Plaintext, Ciphertext, SecretKey, PublicKey, RelinKey, GaloisKeys, and from_bytes / load
for every serialised one.

Each wraps a ``hemlp._core`` object with the parameter hash of the context that made it; ``.native`` is the
documented handle to the native object (for building blocks that call the core directly: PCMM, bootstrapping,
runtimes; its methods do no Python-side checks, so callers validate first). Contexts create these objects
(hemlp.fhe.context.Context); from_bytes loads them back into one.
"""
from __future__ import annotations

import math
from pathlib import Path

from hemlp import _core
from hemlp.errors import KeyMismatchError, ParameterError, SerializationError
from hemlp.fhe import serialize as ser
from hemlp.fhe.files import write_atomic
from hemlp.fhe.params import Params

__all__ = ["Plaintext", "Ciphertext", "SecretKey", "PublicKey", "RelinKey", "GaloisKeys", "from_bytes", "load",
           "ciphertexts_from_bytes"]


class _Wrapped:
    """A native object plus the context's parameter hash; serialisable."""

    __slots__ = ("_obj", "_phash", "_engine")
    _type = ""

    def __init__(self, obj, engine, phash: str):
        self._obj, self._engine, self._phash = obj, engine, phash

    #: the ``hemlp._core`` object behind this wrapper (for native building blocks such as PCMM and
    #: bootstrapping; its methods do no Python-side checks, so callers validate first)
    native = property(lambda self: self._obj)
    #: SHA-256 (hex) of the parameter set the object was made under
    param_hash = property(lambda self: self._phash)

    def save(self, path) -> None:
        write_atomic(Path(path), self.to_bytes())


class Plaintext(_Wrapped):
    level = property(lambda self: self._obj.level)
    scale = property(lambda self: self._obj.scale)
    slots = property(lambda self: self._obj.slots)

    def __repr__(self):
        return f"Plaintext(level={self.level}, scale=2^{math.log2(self.scale):.2f}, slots={self.slots})"


class Ciphertext(_Wrapped):
    _type = "ciphertext"
    level = property(lambda self: self._obj.level)
    scale = property(lambda self: self._obj.scale)
    slots = property(lambda self: self._obj.slots)
    size = property(lambda self: self._obj.size)
    encoding = property(lambda self: "slot" if self._obj.encoding == 0 else "coeff")
    is_complex = property(lambda self: self._obj.is_complex)

    def __repr__(self):
        return (f"Ciphertext(level={self.level}, scale=2^{math.log2(self.scale):.2f}, slots={self.slots}, "
                f"encoding={self.encoding}, size={self.size})")

    def to_bytes(self) -> bytes:
        return b"".join(self.to_parts())

    def to_parts(self) -> list:
        """to_bytes() as a list of buffers (see serialize.pack_parts): containers join them once."""
        return ser.sealed(*self.unsealed_parts())

    def unsealed_parts(self) -> tuple:
        """(head, buffers): to_parts() before its SHA-256 (serialize.seal_later hashes it in a thread)."""
        o = self._obj
        seeded = o.seeded and o.size == 2
        # read-only views of the native polynomials (they keep the ciphertext alive): no copy until the join
        polys = [o.poly_view(0)] if seeded else [o.poly_view(j) for j in range(o.size)]
        header = dict(level=o.level, scale=o.scale.hex(), slots=o.slots, encoding=o.encoding,
                      is_complex=o.is_complex, key_id=f"{o.key_id:016x}", seed=o.seed.hex() if seeded else None)
        return ser.unsealed_parts("ciphertext", self._phash, header, polys)


class SecretKey(_Wrapped):
    _type = "secret_key"
    key_id = property(lambda self: self._obj.key_id)

    def __repr__(self):
        return f"SecretKey(id={self.key_id:016x})"

    def save(self, path) -> None:
        """Write the secret key readable by its owner only (0600, set when the file is created)."""
        write_atomic(Path(path), self.to_bytes(), mode=0o600)

    def to_bytes(self) -> bytes:
        return ser.pack("secret_key", self._phash, dict(key_id=f"{self._obj.key_id:016x}"), [self._obj.coeffs])


class PublicKey(_Wrapped):
    _type = "public_key"
    key_id = property(lambda self: self._obj.key_id)

    def __repr__(self):
        return f"PublicKey(id={self.key_id:016x})"

    def to_bytes(self) -> bytes:
        b, a = self._engine.export_pk(self._obj)
        return ser.pack("public_key", self._phash, dict(key_id=f"{self._obj.key_id:016x}"), [b, a])


class RelinKey(_Wrapped):
    _type = "relin_key"
    key_id = property(lambda self: self._obj.key_id)
    #: the highest ciphertext level this key can relinearise
    level = property(lambda self: self._obj.level)
    #: bytes of key material: num_digits(level) * (level + 1 + |P|) * N * 8 (the a-halves are seeds)
    nbytes = property(lambda self: self._obj.nbytes)
    #: bytes held in memory: the b-halves plus the a-halves expanded from their seeds (2 * nbytes)
    memory_bytes = property(lambda self: self._obj.memory_bytes)

    def __repr__(self):
        return f"RelinKey(id={self.key_id:016x}, level={self.level}, digits={self._obj.num_digits})"

    def to_bytes(self) -> bytes:
        return _switch_keys_bytes(self._engine, "relin_key", self._phash, self._obj.key_id, [self._obj])


class GaloisKeys(_Wrapped):
    """Rotation and conjugation keys, by Galois element."""

    _type = "galois_keys"
    key_id = property(lambda self: self._obj.key_id)
    elements = property(lambda self: list(self._obj.elements))
    #: the highest ciphertext level every key of the set can switch (None for an empty set)
    level = property(lambda self: self._obj.level)
    #: ciphertext level limit of each key, by Galois element
    levels = property(lambda self: dict(self._obj.levels))
    #: bytes of key material (the b-halves; the a-halves are seeds), as serialised
    nbytes = property(lambda self: self._obj.nbytes)
    #: bytes held in memory: nbytes plus the a-halves the set holds expanded (none for seeded keys)
    memory_bytes = property(lambda self: self._obj.memory_bytes)

    def __repr__(self):
        return f"GaloisKeys(id={self.key_id:016x}, level={self.level}, elements={self.elements})"

    def merge(self, other: "GaloisKeys") -> "GaloisKeys":
        if other._phash != self._phash:
            raise KeyMismatchError("cannot merge Galois keys of different parameter sets")
        g = _core.GaloisKeys()
        g.merge(self._obj)
        g.merge(other._obj)
        return GaloisKeys(g, self._engine, self._phash)

    def to_bytes(self) -> bytes:
        keys = [self._obj.get(g) for g in self._obj.elements]
        return _switch_keys_bytes(self._engine, "galois_keys", self._phash, self._obj.key_id, keys)

def _key_id(h: dict) -> int:
    try:
        return int(ser.field(h, "key_id", str), 16)
    except ValueError:
        raise SerializationError("malformed key id: the data is corrupted") from None


def _typed(exc: Exception, what: str) -> Exception:
    """A ValueError / TypeError from parsing or the native import as a typed hemlp error (kept when it is one)."""
    if isinstance(exc, SerializationError) or type(exc).__module__ == "hemlp.errors":
        return exc
    return SerializationError(f"invalid {what} data: {exc}")


def _ciphertext_record(h: dict, arrays: list) -> tuple:
    """The native import's arguments for one serialised ciphertext: (polys, level, scale, slots, encoding,
    is_complex, key_id, seed or None), the header fields type-checked (the native import checks their values)."""
    seed = h.get("seed")
    if seed is not None and not isinstance(seed, str):
        raise SerializationError("malformed seed")
    enc = ser.field(h, "encoding", int)
    try:
        scale = float.fromhex(ser.field(h, "scale", str))
    except ValueError:
        raise SerializationError("malformed scale: the data is corrupted") from None
    if not math.isfinite(scale):
        raise SerializationError("malformed scale: the data is corrupted")
    return (list(arrays), ser.field(h, "level", int), scale, ser.field(h, "slots", int), enc,
            ser.field(h, "is_complex", bool), _key_id(h), None if seed is None else bytes.fromhex(seed))


def ciphertexts_from_bytes(blobs, ctx, checksum: bool = True) -> list:
    """Many serialised ciphertexts (the elements of an encrypted matrix or batch) into ctx at once: each parsed and
    checked as from_bytes checks it, then all imported in parallel on the native threads (each copied once from
    its buffer; seeded ones expanded). checksum=False: the blobs are nested in a container whose checksum was
    checked (serialize.reading)."""
    records = []
    for blob in blobs:
        obj_type, phash, h, arrays = ser.unpack(blob, None, "ciphertext", copy=False, checksum=checksum)
        ser.check_context(obj_type, phash, ctx.hash)
        try:
            records.append(_ciphertext_record(h, arrays))
        except (ValueError, TypeError) as exc:
            raise _typed(exc, "ciphertext") from None
    try:
        objs = ctx.native.import_ciphertexts(records)
    except (ValueError, TypeError) as exc:
        raise _typed(exc, "ciphertext") from None
    return [ctx.wrap(Ciphertext, o) for o in objs]


def from_bytes(data: bytes, ctx=None, checksum: bool = True, seed_max_level: int = -1):
    """Load any serialised hemlp object; everything but Params needs the context to load into. checksum=False:
    for an object nested in a container whose checksum was checked (serialize.reading). seed_max_level: Galois
    keys for a level <= this one keep their a-halves as seeds only, expanded on use (-1: none; bootstrapping keys
    import theirs so, as they were generated)."""
    # one integrity check; the arrays are views into data (the native import copies them)
    obj_type, phash, h, arrays = ser.unpack(data, None, copy=False, checksum=checksum)
    if obj_type == "params":
        return Params.from_bytes(data, checksum=checksum)
    if ctx is None:
        raise ParameterError(f"loading a {obj_type} needs the Context it belongs to: from_bytes(data, ctx)")
    ser.check_context(obj_type, phash, ctx.hash)
    e = ctx.native
    try:
        if obj_type == "ciphertext":
            return ctx.wrap(Ciphertext, e.import_ciphertext(*_ciphertext_record(h, arrays)))
        if obj_type == "secret_key":
            if len(arrays) != 1:
                raise SerializationError("secret key: wrong number of arrays")
            return ctx.wrap(SecretKey, e.import_sk(arrays[0], _key_id(h)))
        if obj_type == "public_key":
            if len(arrays) != 2:
                raise SerializationError("public key: wrong number of arrays")
            return ctx.wrap(PublicKey, e.import_pk(arrays[0], arrays[1], _key_id(h)))
        if obj_type in ("relin_key", "galois_keys"):
            seeds = ser.field(h, "seeds", list)
            gals = ser.field(h, "galois", list)
            if ser.peek_version(data) < 2:     # version 1 keys predate key levels: all at the top level
                levels = [ctx.max_level] * len(gals)
            else:
                levels = ser.field(h, "levels", list)
            if len(levels) != len(gals):
                raise SerializationError(f"{obj_type}: {len(levels)} key levels for {len(gals)} keys; the data is "
                                         "corrupted")
            for lv in levels:
                if isinstance(lv, bool) or not isinstance(lv, int) or not 0 <= lv <= ctx.max_level:
                    raise SerializationError(f"{obj_type}: invalid key level {lv!r} (this context has levels 0.."
                                             f"{ctx.max_level}); the data is corrupted")
            digits = [ctx.params.native.num_digits(lv) for lv in levels]
            if sum(digits) != len(arrays) or len(seeds) != len(arrays):
                raise SerializationError(f"{obj_type}: array count does not match the header (key levels "
                                         f"{levels}); the data is corrupted")
            records, off = [], 0
            for g, lv, dg in zip(gals, levels, digits):
                if not isinstance(g, int) or g < 0 or g >= 2 * ctx.N or (g % 2 == 0 and g != 0):
                    raise SerializationError(f"{obj_type}: invalid Galois element")
                sl = slice(off, off + dg)
                off += dg
                records.append((list(arrays[sl]), [bytes.fromhex(s) for s in seeds[sl]], g, lv))
            if obj_type == "relin_key":
                if gals != [0]:
                    raise SerializationError("relinearisation key with a Galois element")
                return ctx.wrap(RelinKey, e.import_switch_key(*records[0][:2], _key_id(h), 0, records[0][3]))
            # each key imported straight into the set: its memory is never copied
            return ctx.wrap(GaloisKeys, e.import_galois_keys(records, _key_id(h), seed_max_level))
    except (ValueError, TypeError) as exc:
        raise _typed(exc, obj_type) from None
    raise SerializationError(f"cannot load a {obj_type} with hemlp.fhe.from_bytes (use its own module's loader)")


def _switch_keys_bytes(engine, obj_type: str, phash: str, key_id: int, keys) -> bytes:
    arrays, seeds, gals, levels = [], [], [], []
    for k in keys:
        bs, ss = engine.export_switch_key(k)
        arrays.extend(bs)
        seeds.extend(s.hex() for s in ss)
        gals.append(int(k.galois))
        levels.append(int(k.level))
    return ser.pack(obj_type, phash, dict(key_id=f"{key_id:016x}", seeds=seeds, galois=gals, levels=levels), arrays)


def load(path, ctx=None):
    """Load an object saved with obj.save(path)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise SerializationError(f"cannot read {path}: {exc.strerror}") from None
    return from_bytes(data, ctx)

