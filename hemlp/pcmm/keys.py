"""Client-made keys of the PCMM formats: MultiSecretKey (MSRLWE's k secrets), ConversionKeys (MSRLWE -> RLWE),
MsrlweConversionKeys (RLWE -> MSRLWE) and ModPackKeys (MLWE products), each with its documented ``.native``
handle, and the functions that make them from the secret key."""
from __future__ import annotations

import hashlib

from hemlp import _core
from hemlp.errors import ParameterError, SerializationError
from hemlp.fhe import Context, SecretKey
from hemlp.fhe import serialize as ser

__all__ = ["MultiSecretKey", "ConversionKeys", "MsrlweConversionKeys", "ModPackKeys", "multi_secret_key",
           "conversion_keys", "msrlwe_conversion_keys", "modpack_keys"]


class MultiSecretKey:
    """k independent ternary secrets s_0..s_{k-1} (client side): chunk j of an MSRLWE row is
    encrypted under s_j, all chunks of a row sharing one a-part."""

    __slots__ = ("_obj", "_ctx", "_sessions")

    def __init__(self, obj, ctx: Context):
        self._obj, self._ctx = obj, ctx
        self._sessions: set = set()  # SHA-256 of every session seed this key object has encrypted under

    k = property(lambda self: self._obj.k)
    key_id = property(lambda self: self._obj.key_id)
    #: the hemlp._core MultiSecretKey (client-side key generation for batched bootstrapping)
    native = property(lambda self: self._obj)

    def __repr__(self):
        return f"MultiSecretKey(k={self.k}, id={self.key_id:016x})"

    def claim_session(self, session: bytes) -> None:
        """Record that `session` encrypts under this key, refusing a second use: two encryptions under one
        session share their a-parts, so b - b' reveals the difference of the two plaintexts (plus noise).
        Tracked per key object (the client's, in its process); a key loaded again starts a new record, so
        cross-process callers must draw fresh seeds (the default, session_seed=None)."""
        digest = hashlib.sha256(bytes(session)).digest()
        if digest in self._sessions:
            raise ParameterError("this MSRLWE session seed was already used with this multi-secret key: reusing it "
                                 "shares the a-parts and leaks the difference of the plaintexts. Pass "
                                 "session_seed=None (fresh randomness) or a new seed per encryption")
        self._sessions.add(digest)

    def to_bytes(self) -> bytes:
        return ser.pack("secret_key", self._ctx.hash, dict(key_id=f"{self.key_id:016x}", multi=True),
                        [self._obj.coeffs])

    @classmethod
    def from_bytes(cls, data: bytes, ctx: Context) -> "MultiSecretKey":
        _, _, h, arrays = ser.unpack(data, ctx.hash, "secret_key")
        if not h.get("multi") or len(arrays) != 1:
            raise SerializationError("not a multi-secret key")
        try:
            kid = int(ser.field(h, "key_id", str), 16)
        except ValueError:
            raise SerializationError("malformed key id") from None
        return cls(_core.ms_import_key(ctx.native, arrays[0], kid), ctx)


class ConversionKeys:
    """Key switches s_j -> s turning MSRLWE rows into RLWE ciphertexts under the main secret."""

    __slots__ = ("_keys", "_ctx", "key_id", "ms_key_id")

    def __init__(self, keys, ctx: Context, ms_key_id: int):
        self._keys, self._ctx, self.ms_key_id = keys, ctx, ms_key_id
        self.key_id = keys[0].key_id if keys else 0

    def __repr__(self):
        return f"ConversionKeys(k={len(self._keys)})"

    #: the k native switching keys s_j -> s (``hemlp._core``), for the native MSRLWE -> RLWE conversion
    native = property(lambda self: self._keys)


class MsrlweConversionKeys:
    """Keys turning k RLWE ciphertexts under s into one MSRLWE row under a MultiSecretKey
    (docs/design/pcmm-and-planning.md §2.7 [R]: k digit-sets of shared alpha and k^2 of beta switching polynomials)."""

    __slots__ = ("_obj", "k")

    def __init__(self, obj):
        self._obj, self.k = obj, obj.k

    def __repr__(self):
        return f"MsrlweConversionKeys(k={self.k})"

    #: the native conversion key (``hemlp._core``)
    native = property(lambda self: self._obj)


class ModPackKeys:
    """Keys s_v(X^k) -> s (v < k) that re-interleave MLWE product rows into RLWE ciphertexts."""

    __slots__ = ("_keys", "k", "key_id", "_ctx")

    def __init__(self, keys, k: int, ctx: Context | None = None):
        self._keys, self.k, self._ctx = keys, k, ctx
        self.key_id = keys[0].key_id

    level = property(lambda self: min(key.level for key in self._keys))
    nbytes = property(lambda self: sum(key.nbytes for key in self._keys))
    #: the k native switching keys (``hemlp._core``), for the native MLWE PCMM
    native = property(lambda self: self._keys)
    #: SHA-256 (hex) of the parameter set the keys were made under (None when made without a context)
    param_hash = property(lambda self: None if self._ctx is None else self._ctx.hash)

    def __repr__(self):
        return f"ModPackKeys(k={self.k}, level={self.level})"

    def to_bytes(self) -> bytes:
        """The k switching keys (b-halves; the a-halves as seeds) in one serialised container."""
        if self._ctx is None:
            raise SerializationError("these ModPack keys were made without a context; use pcmm.modpack_keys")
        arrays, seeds, levels = [], [], []
        for key in self._keys:
            bs, ss = self._ctx.native.export_switch_key(key)
            arrays.extend(bs)
            seeds.extend(x.hex() for x in ss)
            levels.append(int(key.level))
        return ser.pack("galois_keys", self._ctx.hash, dict(key_id=f"{self.key_id:016x}", seeds=seeds,
                                                             galois=[0] * self.k, levels=levels, modpack=self.k),
                        arrays)

    @classmethod
    def from_bytes(cls, data: bytes, ctx: Context) -> "ModPackKeys":
        _, _, h, arrays = ser.unpack(data, ctx.hash, "galois_keys")
        k, levels, seeds = h.get("modpack"), h.get("levels"), h.get("seeds")
        if not (isinstance(k, int) and k >= 2 and isinstance(levels, list) and len(levels) == k
                and isinstance(seeds, list) and len(seeds) == len(arrays)):
            raise SerializationError("ModPack keys: the header does not match the data; the file is corrupted")
        try:
            kid = int(ser.field(h, "key_id", str), 16)
        except ValueError:
            raise SerializationError("ModPack keys: malformed key id") from None
        keys, off = [], 0
        for lv in levels:
            if isinstance(lv, bool) or not isinstance(lv, int) or not 0 <= lv <= ctx.max_level:
                raise SerializationError(f"ModPack keys: invalid key level {lv!r}; the file is corrupted")
            dg = ctx.params.native.num_digits(lv)
            if off + dg > len(arrays):
                raise SerializationError("ModPack keys: fewer arrays than the key levels need; the file is corrupted")
            try:
                sb = [bytes.fromhex(x) for x in seeds[off:off + dg]]
            except (ValueError, TypeError):  # found by the fuzzer: a seed that is not a hex string
                raise SerializationError("ModPack keys: malformed seed; the file is corrupted") from None
            keys.append(ctx.native.import_switch_key(list(arrays[off:off + dg]), sb, kid, 0, lv))
            off += dg
        if off != len(arrays):
            raise SerializationError("ModPack keys: more arrays than the key levels need; the file is corrupted")
        return cls(keys, k, ctx)


def multi_secret_key(ctx: Context, k: int) -> MultiSecretKey:
    """A fresh multi-secret key with k secrets (client side)."""
    return MultiSecretKey(_core.ms_secret_key(ctx.native, int(k)), ctx)


def conversion_keys(ctx: Context, sk: SecretKey, msk: MultiSecretKey) -> ConversionKeys:
    """Evaluation keys for to_rlwe (client makes them; the server uses them)."""
    keys = _core.ms_conversion_keys(ctx.native, ctx.unwrap(sk, SecretKey, "secret key"), msk.native)
    return ConversionKeys(keys, ctx, msk.key_id)


def msrlwe_conversion_keys(ctx: Context, sk: SecretKey, msk: MultiSecretKey) -> MsrlweConversionKeys:
    """Evaluation keys for to_msrlwe (client makes them from sk and the multi-secret key)."""
    return MsrlweConversionKeys(_core.rlwe_to_ms_key(ctx.native, ctx.unwrap(sk, SecretKey, "secret key"), msk.native))


def modpack_keys(ctx: Context, sk: SecretKey, k: int, level: int | None = None) -> ModPackKeys:
    """Evaluation keys for MLWE(k) products (client makes them from the secret key), usable for
    products of ciphertexts at levels <= `level` (None: every level; a lower level gives smaller keys)."""
    lv = ctx.key_level(level)
    return ModPackKeys(_core.modpack_keys(ctx.native, ctx.unwrap(sk, SecretKey, "secret key"), int(k), lv), int(k), ctx)
