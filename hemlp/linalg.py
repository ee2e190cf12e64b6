"""Encrypted matrices and plaintext x ciphertext matrix products (PCMM) as modular GEMMs.

An encrypted d2 x d3 matrix is a stack of RLWE ciphertexts: row i is split into
c = ceil(d3 / w) chunks of w values (w = ctx.slots for slot encoding, ctx.N for
coefficient encoding), one ciphertext each. Stacked, the ciphertexts satisfy
A Toep(s) + B = M + E, so for a plaintext matrix U (d1 x d2), (U A, U B) encrypts U M:
`pcmm` is two exact modular GEMMs per RNS limb (csrc/pcmm), with no rotations and no keys.

Weights are quantised as U~ = round(Delta_U U) with Delta_U = 2^weight_bits / max|U|; the
product is multiplied by the integer K = round(q_l / Delta_U) and rescaled by q_l, so the
output scale is in.scale * Delta_U * K / q_l (tracked exactly, within 2^-(log q_l - weight_bits)
of the input scale).
"""
from __future__ import annotations

import hashlib
import math
import os

import numpy as np

from hemlp import _core
from hemlp.fhe import serialize as ser
from hemlp.fhe.ckks import Ciphertext, Context, PublicKey, SecretKey
from hemlp.fhe.files import write_atomic
from hemlp.errors import (ContextMismatchError, EncodingError, KeyMismatchError, ParameterError, SerializationError,
                          ShapeError)

__all__ = ["CtMatrix", "encrypt_matrix", "decrypt_matrix", "pcmm", "pcmm_gather", "drop_matrix", "choose_format", "quantize",
           "multi_secret_key", "conversion_keys", "to_rlwe", "PcmmPrecomputed", "MultiSecretKey", "modpack_keys",
           "msrlwe_conversion_keys", "to_msrlwe", "extract_lwe"]

FORMATS = ("rlwe", "mlwe", "msrlwe")


def _count(fmt: str, shape, chunks: int, ctx: Context) -> int:
    """Ciphertexts a matrix of this shape holds in this format."""
    if fmt == "msrlwe":
        return shape[0]
    if fmt == "mlwe":
        k = ctx.N // shape[1]
        return -(-shape[0] // k)
    return shape[0] * chunks


class CtMatrix:
    """A d2 x d3 matrix encrypted row-wise as d2 x chunks ciphertexts (row-major list)."""

    def __init__(self, ctx: Context, cts: list, shape: tuple, chunks: int, fmt: str = "rlwe"):
        self.session = None  # MSRLWE: the 32-byte seed whose row seeds expand the a-parts (public)
        if len(cts) != _count(fmt, shape, chunks, ctx):
            raise ShapeError(f"CtMatrix: {len(cts)} ciphertexts for {shape[0]} rows x {chunks} chunks")
        self.ctx, self.cts, self.shape, self.chunks, self.format = ctx, cts, tuple(shape), chunks, fmt

    encoding = property(lambda self: self.cts[0].encoding)
    level = property(lambda self: self.cts[0].level)
    scale = property(lambda self: self.cts[0].scale)
    width = property(lambda self: self.ctx.slots if self.encoding == "slot" else self.ctx.N)

    k = property(lambda self: self.ctx.N // self.shape[1] if self.format == "mlwe" else 1)

    def row(self, i: int) -> list:
        if self.format == "mlwe":
            raise EncodingError("MLWE rows are interleaved inside ciphertexts; decrypt the whole matrix")
        if self.format == "msrlwe":
            return [self.cts[i]]
        return self.cts[i * self.chunks : (i + 1) * self.chunks]

    def __repr__(self):
        return (f"CtMatrix({self.shape[0]}x{self.shape[1]}, format={self.format}, chunks={self.chunks}, encoding={self.encoding}, "
                f"{len(self.cts)} ciphertexts, level={self.level}, scale=2^{math.log2(self.scale):.2f})")

    def to_bytes(self) -> bytes:
        return b"".join(self.to_parts())

    def to_parts(self) -> list:
        """to_bytes() as a list of buffers (its ciphertexts' blobs are not copied into one payload first: a
        container that nests this matrix, like an encrypted batch file, joins everything once)."""
        parts = [c.to_parts() if hasattr(c, "to_parts") else [c.to_bytes()] for c in self.cts]
        header = dict(shape=list(self.shape), chunks=self.chunks, format=self.format,
                      sizes=[sum(memoryview(b).nbytes for b in ps) for ps in parts])
        return ser.pack_parts("ct_matrix", self.ctx.hash, header, [[b for ps in parts for b in ps]])

    def save(self, path) -> None:
        write_atomic(path, self.to_parts())

    @classmethod
    def from_bytes(cls, data: bytes, ctx: Context) -> "CtMatrix":
        from hemlp.fhe.ckks import from_bytes

        _, _, h, arrays = ser.unpack(data, ctx.hash, "ct_matrix", copy=False)  # read in place
        shape, chunks = ser.field(h, "shape", list), ser.field(h, "chunks", int)
        sizes, fmt = ser.field(h, "sizes", list), ser.field(h, "format", str)
        if (len(arrays) != 1 or len(shape) != 2 or fmt not in FORMATS or chunks < 1
                or not all(isinstance(s, int) and s > 0 for s in sizes + shape)
                or (fmt == "mlwe" and (shape[1] >= ctx.N or ctx.N % shape[1]))
                or len(sizes) != _count(fmt, shape, chunks, ctx) or sum(sizes) != arrays[0].size):
            raise SerializationError("ct_matrix: header does not match the data; the file is corrupted")
        raw, cts, off = memoryview(arrays[0]), [], 0  # each ciphertext's blob is a view, checked on its own
        for s in sizes:
            blob = raw[off : off + s]
            cts.append(MsRow.from_bytes(blob, ctx) if fmt == "msrlwe" else from_bytes(blob, ctx))
            off += s
        if fmt != "msrlwe" and not all(isinstance(c, Ciphertext) for c in cts):
            raise SerializationError("ct_matrix: an element is not a ciphertext")
        return cls(ctx, cts, tuple(shape), chunks, fmt)

    @classmethod
    def load(cls, path, ctx: Context) -> "CtMatrix":
        from pathlib import Path

        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise SerializationError(f"cannot read {path}: {exc.strerror}") from None
        return cls.from_bytes(data, ctx)


def choose_format(ctx: Context, d1: int, d2: int, d3: int, encoding: str = "slot") -> str:
    """Cheapest legal format for a (d1 x d2) @ Enc(d2 x d3) product (BRIEF §2.4), by GEMM work per
    limb: RLWE 2 d1 d2 N c (c = chunks), MLWE d1 d2 (N + d3) plus ~d1 key switches (ModPack),
    MSRLWE d1 d2 (N + d3). MLWE needs coefficient encoding and sqrt(N) <= d3 < N, d3 | N."""
    N = ctx.N
    width = ctx.slots if encoding == "slot" else N
    c = -(-d3 // width)
    costs = {"rlwe": 2.0 * d1 * d2 * N * c}
    if d3 >= N:
        costs["msrlwe"] = float(d1) * d2 * (N + c * width)
    if encoding == "coeff" and d3 < N and N % d3 == 0 and d3 * d3 >= N:
        ks_cost = 12.0 * N * (ctx.max_level + 1) * 40  # ~ one key switch, in GEMM-MAC units
        costs["mlwe"] = float(d1) * d2 * (N + d3) + d1 * ks_cost
    return min(costs, key=costs.get)


def _check_format(fmt: str) -> str:
    if fmt == "auto":
        return "rlwe"
    if fmt not in FORMATS:
        raise EncodingError(f"format must be 'auto' or one of {FORMATS}, got {fmt!r}")
    return fmt


def encrypt_matrix(ctx: Context, M, key, format: str = "auto", encoding: str = "slot",
                   level: int | None = None, scale: float | None = None, session_seed: bytes | None = None) -> CtMatrix:
    """Encrypt a real matrix row-wise (client side).

    key: PublicKey / SecretKey (RLWE rows), or a MultiSecretKey (format "msrlwe": the k chunks of
    a row share one a-part expanded from a per-row seed of the 32-byte encryption session)."""
    fmt = _check_format(format)
    if isinstance(key, MultiSecretKey):
        fmt = "msrlwe"
    elif fmt == "msrlwe":
        raise KeyMismatchError("format 'msrlwe' encrypts under a MultiSecretKey (linalg.multi_secret_key(ctx, k))")
    M = np.asarray(M)
    if M.ndim != 2 or M.size == 0:
        raise ShapeError(f"encrypt_matrix expects a non-empty 2-D array, got shape {M.shape}")
    if np.iscomplexobj(M) or not np.issubdtype(M.dtype, np.number):
        raise EncodingError("encrypt_matrix takes real numbers")
    if fmt == "msrlwe":
        return _encrypt_msrlwe(ctx, M, key, encoding, level, scale, session_seed)
    if fmt == "mlwe":
        return _encrypt_mlwe(ctx, M, key, encoding, level, scale)
    if not isinstance(key, (PublicKey, SecretKey)):
        raise TypeError("key must be a hemlp.fhe.ckks PublicKey or SecretKey")
    width = ctx.slots if encoding == "slot" else ctx.N
    d2, d3 = M.shape
    chunks = -(-d3 // width)
    cts = []
    for i in range(d2):
        for j in range(chunks):
            part = M[i, j * width : (j + 1) * width]
            cts.append(ctx.encrypt(part, key, level=level, scale=scale, encoding=encoding))
    return CtMatrix(ctx, cts, (d2, d3), chunks, fmt)


def decrypt_matrix(ctx: Context, C: CtMatrix, sk: SecretKey) -> np.ndarray:
    """Decrypt to a float64 array of C.shape (client side)."""
    if C.ctx.hash != ctx.hash:
        raise ContextMismatchError("decrypt_matrix: the matrix belongs to another parameter set")
    if C.format == "mlwe":
        return _decrypt_mlwe(ctx, C, sk)
    if C.format == "msrlwe":
        if not isinstance(sk, MultiSecretKey):
            raise KeyMismatchError("an MSRLWE matrix decrypts with its MultiSecretKey")
        return _decrypt_msrlwe(ctx, C, sk)
    d2, d3 = C.shape
    out = np.empty((d2, d3))
    for i in range(d2):
        row = np.concatenate([ctx.decrypt(c, sk) for c in C.row(i)])
        out[i] = row[:d3]
    return out


def quantize(U: np.ndarray, weight_bits: int):
    """U~ = round(Delta_U U) with max |U~| <= 2^weight_bits; returns (U~, Delta_U)."""
    amax = float(np.max(np.abs(U)))
    if not math.isfinite(amax):
        raise EncodingError("the weight matrix contains NaN or infinity")
    if amax == 0:
        return np.zeros(U.shape, dtype=np.int64), 1.0
    delta = 2.0 ** math.floor(weight_bits - math.log2(amax))  # power of two: exact products
    Uq = np.rint(U * delta).astype(np.int64)
    return Uq, delta


def pcmm(U, C: CtMatrix, keys=None, format: str = "auto", weight_bits: int = 20, bias=None,
         rescale: bool = True, precomputed: "PcmmPrecomputed | None" = None, level: int | None = None) -> CtMatrix:
    """Enc(U @ M + bias[:, None]) from a plaintext U (d1 x d2) and an encrypted M (d2 x d3).

    Server side: needs no keys for the RLWE format. One level is used (the rescale).
    weight_bits: precision of the quantised weights (|U~| <= 2^weight_bits).
    level: run the product at this level (RLWE: the rows' primes above it are dropped first). A PCMM costs one
    GEMM per prime, part and digit, so a fresh matrix at the top of the chain pays for primes the rest of the
    computation never uses: pass the lowest level it needs (1 when only this rescale follows; 0 with
    rescale=False), or let the compiler plan it (hemlp.compile encrypts at the planned level)."""
    _check_format(format)
    if not isinstance(C, CtMatrix):
        raise TypeError("pcmm: C must be a CtMatrix (see hemlp.linalg.encrypt_matrix)")
    if level is not None:
        C = drop_matrix(C, level)
    U = np.asarray(U, dtype=np.float64)
    if U.ndim != 2:
        raise ShapeError(f"pcmm: U must be 2-D, got shape {U.shape}")
    if U.shape[1] != C.shape[0]:
        raise ShapeError(f"pcmm: U is {U.shape[0]}x{U.shape[1]} but the encrypted matrix is "
                         f"{C.shape[0]}x{C.shape[1]}: U's columns must equal the encrypted rows")
    if format != "auto" and format != C.format:
        raise EncodingError(f"pcmm: the encrypted matrix is in format {C.format!r}, not {format!r}; encrypt it in "
                            f"format {format!r} (encrypt_matrix(..., format={format!r})) or pass format='auto'")
    if C.format == "msrlwe":
        return _pcmm_msrlwe(U, C, weight_bits, bias, rescale, precomputed)
    if C.format == "mlwe":
        return _pcmm_mlwe(U, C, keys, weight_bits, bias, rescale)
    if precomputed is not None:
        raise EncodingError("pcmm: precomputed U*A applies to MSRLWE matrices (shared, seeded a-parts)")
    return pcmm_gather(U, C, np.arange(C.shape[0])[:, None], weight_bits=weight_bits, bias=bias, rescale=rescale)


def drop_matrix(C: CtMatrix, level: int) -> CtMatrix:
    """C with every RLWE row dropped to `level` (no scale change; the same matrix when already there)."""
    from hemlp.errors import LevelError

    if isinstance(level, bool) or not isinstance(level, (int, np.integer)):
        raise TypeError(f"level must be an integer, got {type(level).__name__}")
    level = int(level)
    if level == C.level:
        return C
    if not 0 <= level < C.level:
        raise LevelError(f"pcmm: cannot run at level {level}: the encrypted matrix is at level {C.level} "
                         f"(levels only go down; encrypt at level >= {level})")
    if C.format != "rlwe":
        raise EncodingError(f"pcmm: level= drops RLWE rows; encrypt this {C.format!r} matrix at level {level} instead")
    return CtMatrix(C.ctx, [C.ctx.drop_level(c, level) for c in C.cts], C.shape, C.chunks, C.format)


def pcmm_gather(U, C: CtMatrix, index, weight_bits: int = 20, bias=None, rescale: bool = True) -> CtMatrix:
    """Gathered PCMM, e.g. a convolution as im2col over ciphertext rows with no crypto work.

    index: int array (d2, P); column p selects the rows of C that U multiplies for output
    block p (-1 = a zero row, e.g. padding). Returns d1*P rows ordered (r, p) -> r*P + p:
        out[r*P + p] = sum_i U[r, i] * C.row(index[i, p]) (+ bias[r]).
    All P blocks run through the same prepared U (one exact GEMM per limb, part and chunk)."""
    if not isinstance(C, CtMatrix):
        raise TypeError("pcmm: C must be a CtMatrix (see hemlp.linalg.encrypt_matrix)")
    if C.format != "rlwe":
        raise EncodingError("pcmm_gather works on RLWE matrices; convert with linalg.to_rlwe first")
    U = np.asarray(U, dtype=np.float64)
    index = np.asarray(index)
    if U.ndim != 2 or index.ndim != 2 or index.shape[0] != U.shape[1]:
        raise ShapeError(f"pcmm_gather: U {U.shape} needs an index of shape ({U.shape[1] if U.ndim == 2 else '?'}, P), "
                         f"got {index.shape}")
    if not np.issubdtype(index.dtype, np.integer) or index.min() < -1 or index.max() >= C.shape[0]:
        raise ShapeError(f"pcmm_gather: index entries must be -1 or row numbers < {C.shape[0]}")
    if not 1 <= weight_bits <= 40:
        raise EncodingError("weight_bits must be in [1, 40]")
    ctx = C.ctx
    level = C.level
    if rescale and level == 0:
        from hemlp.errors import LevelError

        raise LevelError("pcmm: the encrypted matrix is at level 0; a PCMM needs one level for its rescale")
    c = C.chunks
    cts = gathered_product(ctx, U, index, lambda r, j: C.cts[r * c + j].native, c, level, C.encoding == "slot",
                           weight_bits, bias, rescale,
                           lambda plan, inputs, *args: _core.pcmm_rlwe(ctx.native, plan, inputs, *args))
    return CtMatrix(ctx, cts, (U.shape[0] * index.shape[1], C.shape[1]), c, C.format)


def gathered_product(ctx, U, index, row, chunks: int, level: int, slot_encoded: bool, weight_bits: int, bias,
                     rescale: bool, native) -> list:
    """pcmm_gather's body over any row source (the Ray runtime's in-place PCMM reads object-store views): U
    quantised, K chosen, the inputs laid out (i, p, j) as row(r, j) (None for index -1: a zero row), then
    native(plan, inputs, P * chunks, K, factor, rescale, fused bias) -> native ciphertexts, and a bias that is not
    fused (coefficient encoding) added as an encoded constant. Returns the d1 * P * chunks output Ciphertexts."""
    Uq, delta = quantize(U, weight_bits)
    K = max(1, round(ctx.modulus(level) / delta)) if rescale else 1
    plan = _core.ModGemmPlan(Uq, int(weight_bits))
    d2, P = index.shape
    # inputs laid out (i, p, j): the P output blocks become extra column panels of one product
    inputs = [None if index[i, p] < 0 else row(int(index[i, p]), j)
              for i in range(d2) for p in range(P) for j in range(chunks)]
    b = None
    if bias is not None:
        b = np.asarray(bias, dtype=np.float64).reshape(-1)
        if b.shape[0] != U.shape[0]:
            raise ShapeError(f"pcmm: bias has {b.shape[0]} entries for {U.shape[0]} output rows")
    fused = b is not None and rescale and slot_encoded  # constant bias added natively
    raw = native(plan, inputs, P * chunks, int(K), float(delta * K), bool(rescale), b.tolist() if fused else [])
    cts = [ctx.wrap(Ciphertext, o) for o in raw]
    if b is not None and not fused:
        cts = [ctx.add(ct, float(b[idx // (P * chunks)])) for idx, ct in enumerate(cts)]
    return cts


# ---------------------------------------------------------------- MSRLWE (shared a-part)

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


class MsRow:
    """One encrypted MSRLWE row (k chunks sharing a)."""

    __slots__ = ("_obj", "_ctx")

    def __init__(self, obj, ctx: Context):
        self._obj, self._ctx = obj, ctx

    #: the hemlp._core MsCiphertext behind this row (for native building blocks: PCMM, Ray tasks)
    native = property(lambda self: self._obj)
    level = property(lambda self: self._obj.level)
    scale = property(lambda self: self._obj.scale)
    slots = property(lambda self: self._obj.slots)
    encoding = property(lambda self: "slot" if self._obj.encoding == 0 else "coeff")

    def to_bytes(self) -> bytes:
        o = self._obj
        arrays = ([] if o.seeded else [o.poly_a()]) + [o.poly_b(j) for j in range(o.k)]
        header = dict(level=o.level, scale=o.scale.hex(), slots=o.slots, encoding=o.encoding,
                      key_id=f"{o.key_id:016x}", seed=o.seed.hex() if o.seeded else None, k=o.k)
        return ser.pack("ciphertext", self._ctx.hash, header, arrays)

    @classmethod
    def from_bytes(cls, data: bytes, ctx: Context) -> "MsRow":
        _, _, h, arrays = ser.unpack(data, ctx.hash, "ciphertext")
        k, seed = ser.field(h, "k", int), h.get("seed")
        if k < 1 or len(arrays) != k + (0 if seed else 1) or (seed is not None and not isinstance(seed, str)):
            raise SerializationError("MSRLWE row: array count does not match the header")
        try:
            scale = float.fromhex(ser.field(h, "scale", str))
            kid = int(ser.field(h, "key_id", str), 16)
            sb = None if seed is None else bytes.fromhex(seed)
        except ValueError:
            raise SerializationError("MSRLWE row: malformed header") from None
        a = arrays[0] if seed is None else np.zeros((1, 1), np.uint64)
        bs = arrays[1:] if seed is None else arrays
        obj = _core.ms_import(ctx.native, a, list(bs), ser.field(h, "level", int), scale, ser.field(h, "slots", int),
                              ser.field(h, "encoding", int), kid, sb)
        return cls(obj, ctx)


def multi_secret_key(ctx: Context, k: int) -> MultiSecretKey:
    """A fresh multi-secret key with k secrets (client side)."""
    return MultiSecretKey(_core.ms_secret_key(ctx.native, int(k)), ctx)


def conversion_keys(ctx: Context, sk: SecretKey, msk: MultiSecretKey) -> ConversionKeys:
    """Evaluation keys for to_rlwe (client makes them; the server uses them)."""
    keys = _core.ms_conversion_keys(ctx.native, ctx.unwrap(sk, SecretKey, "secret key"), msk._obj)
    return ConversionKeys(keys, ctx, msk.key_id)


def _encrypt_msrlwe(ctx: Context, M: np.ndarray, msk: MultiSecretKey, encoding: str, level, scale,
                    session_seed: bytes | None) -> CtMatrix:
    width = ctx.slots if encoding == "slot" else ctx.N
    d2, d3 = M.shape
    k = msk.k
    if d3 > k * width:
        raise ShapeError(f"encrypt_matrix: {d3} columns need {-(-d3 // width)} chunks but the multi-secret key "
                         f"has k = {k}; use multi_secret_key(ctx, k >= {-(-d3 // width)})")
    session = os.urandom(32) if session_seed is None else bytes(session_seed)
    if len(session) != 32:
        raise EncodingError("session_seed must be 32 bytes")
    msk.claim_session(session)
    rows = []
    for i in range(d2):
        pts = []
        for j in range(k):
            part = M[i, j * width : (j + 1) * width]
            pts.append(ctx.encode(part if part.size else np.zeros(1), level=level, scale=scale,
                                  encoding=encoding).native)
        rows.append(MsRow(_core.ms_encrypt(ctx.native, pts, msk._obj, _core.ms_row_seed(session, i)), ctx))
    C = CtMatrix(ctx, rows, (d2, d3), k, "msrlwe")
    C.session = session
    return C


class PcmmPrecomputed:
    """K U~ A for an MSRLWE encryption session known ahead (the offline half of a PCMM):
    the online product is then one GEMM on the b-parts only."""

    def __init__(self, U, ctx: Context, session: bytes, level: int, weight_bits: int = 20):
        U = np.asarray(U, dtype=np.float64)
        self.Uq, self.delta = quantize(U, weight_bits)
        self.weight_bits, self.level, self.shape = weight_bits, level, U.shape
        self.K = max(1, round(ctx.modulus(level) / self.delta))
        self.plan = _core.ModGemmPlan(self.Uq, int(weight_bits))
        self._obj = _core.ms_precompute_a(ctx.native, self.plan, bytes(session), U.shape[1], int(level), int(self.K))
        self._U = U


def to_rlwe(C: CtMatrix, keys: ConversionKeys) -> CtMatrix:
    """MSRLWE -> RLWE under the main secret: per row, one ModUp of the shared a and k key switches."""
    if C.format != "msrlwe":
        return C
    if not isinstance(keys, ConversionKeys) or len(keys._keys) != C.chunks:
        raise KeyMismatchError(f"to_rlwe needs conversion keys for k = {C.chunks} chunks "
                               "(linalg.conversion_keys(ctx, sk, msk))")
    if keys.ms_key_id != C.cts[0]._obj.key_id:
        raise KeyMismatchError("the conversion keys were made for another multi-secret key")
    ctx = C.ctx
    cts = []
    for row in C.cts:
        cts.extend(ctx.wrap(Ciphertext, o) for o in _core.ms_to_rlwe(ctx.native, row._obj, keys._keys))
    return CtMatrix(ctx, cts, C.shape, C.chunks, "rlwe")


def _decrypt_msrlwe(ctx: Context, C: CtMatrix, msk: MultiSecretKey) -> np.ndarray:
    d2, d3 = C.shape
    out = np.empty((d2, d3))
    for i, row in enumerate(C.cts):
        code, sigma, _ = ctx.decrypt_noise_args(row.scale, row.slots if row.encoding == "slot" else ctx.N)
        pts = _core.ms_decrypt(ctx.native, row._obj, msk._obj, code, sigma)
        vals = []
        for p in pts:
            v = ctx.native.decode_coeff(p) if p.encoding == 1 else ctx.native.decode(p).real
            vals.append(np.asarray(v))
        out[i] = np.concatenate(vals)[:d3]
    return out


def _pcmm_msrlwe(U: np.ndarray, C: CtMatrix, weight_bits: int, bias, rescale: bool,
                 precomputed: PcmmPrecomputed | None) -> CtMatrix:
    ctx = C.ctx
    if precomputed is not None:
        if not rescale or precomputed.level != C.level or precomputed.shape != U.shape or \
                not np.array_equal(precomputed._U, U):
            raise EncodingError("pcmm: the precomputed U*A was made for another weight matrix or level")
        Uq, delta, K, plan = precomputed.Uq, precomputed.delta, precomputed.K, precomputed.plan
    else:
        Uq, delta = quantize(U, weight_bits)
        K = max(1, round(ctx.modulus(C.level) / delta)) if rescale else 1
        plan = _core.ModGemmPlan(Uq, int(weight_bits))
    raw = _core.pcmm_msrlwe(ctx.native, plan, [r._obj for r in C.cts], int(K), float(delta * K),
                            None if precomputed is None else precomputed._obj)
    if rescale:
        raw = [_core.ms_rescale(ctx.native, o) for o in raw]
    if bias is not None:
        b = np.asarray(bias, dtype=np.float64).reshape(-1)
        if b.shape[0] != U.shape[0]:
            raise ShapeError(f"pcmm: bias has {b.shape[0]} entries for {U.shape[0]} output rows")
        enc = "slot" if raw[0].encoding == 0 else "coeff"
        width = ctx.slots if enc == "slot" else ctx.N
        for r in range(len(raw)):
            pt = ctx.encode(np.full(width, b[r]), level=raw[r].level, scale=raw[r].scale, encoding=enc).native
            for j in range(raw[r].k):
                raw[r] = _core.ms_add_plain(ctx.native, raw[r], j, pt)
    return CtMatrix(ctx, [MsRow(o, ctx) for o in raw], (U.shape[0], C.shape[1]), C.chunks, "msrlwe")


# ---------------------------------------------------------------- MLWE (decimated rows, d3 < N)

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

    def __repr__(self):
        return f"ModPackKeys(k={self.k}, level={self.level})"

    def to_bytes(self) -> bytes:
        """The k switching keys (b-halves; the a-halves as seeds) in one serialised container."""
        if self._ctx is None:
            raise SerializationError("these ModPack keys were made without a context; use linalg.modpack_keys")
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


def modpack_keys(ctx: Context, sk: SecretKey, k: int, level: int | None = None) -> ModPackKeys:
    """Evaluation keys for MLWE(k) products (client makes them from the secret key), usable for
    products of ciphertexts at levels <= `level` (None: every level; a lower level gives smaller keys)."""
    lv = ctx.key_level(level)
    return ModPackKeys(_core.modpack_keys(ctx.native, ctx.unwrap(sk, SecretKey, "secret key"), int(k), lv), int(k), ctx)


def _mlwe_k(ctx: Context, d3: int) -> int:
    N = ctx.N
    if d3 >= N or N % d3 or d3 * d3 < N:
        raise ShapeError(f"MLWE needs sqrt(N) <= d3 < N with d3 dividing N = {N}; got d3 = {d3} "
                         "(use format='rlwe' or 'msrlwe' otherwise)")
    return N // d3


def _encrypt_mlwe(ctx: Context, M: np.ndarray, key, encoding: str, level, scale) -> CtMatrix:
    if encoding != "coeff":
        raise EncodingError("format 'mlwe' (k > 1) needs encoding='coeff': the slot encoding does not commute "
                            "with the decimation X -> X^k")
    if not isinstance(key, (PublicKey, SecretKey)):
        raise TypeError("key must be a hemlp.fhe.ckks PublicKey or SecretKey")
    d2, d3 = M.shape
    k = _mlwe_k(ctx, d3)
    cts = []
    for i in range(-(-d2 // k)):
        block = np.zeros((k, d3))
        rows = M[i * k : (i + 1) * k]
        block[: rows.shape[0]] = rows
        # row k*i + u, column t -> coefficient t*k + u
        cts.append(ctx.encrypt(block.T.reshape(-1), key, level=level, scale=scale, encoding="coeff"))
    return CtMatrix(ctx, cts, (d2, d3), 1, "mlwe")


def _decrypt_mlwe(ctx: Context, C: CtMatrix, sk: SecretKey) -> np.ndarray:
    d2, d3 = C.shape
    k = C.k
    blocks = [ctx.decrypt(c, sk).reshape(d3, k).T for c in C.cts]
    return np.concatenate(blocks)[:d2]


def _pcmm_mlwe(U: np.ndarray, C: CtMatrix, keys, weight_bits: int, bias, rescale: bool) -> CtMatrix:
    ctx = C.ctx
    k = C.k
    if not isinstance(keys, ModPackKeys) or keys.k != k:
        from hemlp.errors import MissingKeyError

        raise MissingKeyError(f"an MLWE(k={k}) product needs ModPack keys: pcmm(U, C, keys=linalg.modpack_keys(ctx, sk, {k}))")
    d1, d2 = U.shape
    rows_in, rows_out = len(C.cts) * k, -(-d1 // k) * k
    Up = np.zeros((rows_out, rows_in))  # zero rows/columns pad to whole ciphertexts
    Up[:d1, :d2] = U
    Uq, delta = quantize(Up, weight_bits)
    K = max(1, round(ctx.modulus(C.level) / delta)) if rescale else 1
    plan = _core.ModGemmPlan(Uq, int(weight_bits))
    raw = _core.pcmm_mlwe(ctx.native, plan, [c.native for c in C.cts], k, int(K), float(delta * K), keys._keys)
    cts = [ctx.wrap(Ciphertext, o) for o in raw]
    if rescale:
        cts = [ctx.rescale(c) for c in cts]
    if bias is not None:
        b = np.zeros(rows_out)
        bb = np.asarray(bias, dtype=np.float64).reshape(-1)
        if bb.shape[0] != d1:
            raise ShapeError(f"pcmm: bias has {bb.shape[0]} entries for {d1} output rows")
        b[:d1] = bb
        d3 = C.shape[1]
        cts = [ctx.add(c, np.tile(b[g * k : (g + 1) * k], d3)) for g, c in enumerate(cts)]
    return CtMatrix(ctx, cts, (d1, C.shape[1]), 1, "mlwe")


# ---------------------------------------------------------------- conversions

def extract_lwe(ctx: Context, ct: Ciphertext, index: int):
    """LWE ciphertext of coefficient `index` of a coefficient-encoded RLWE ciphertext.

    Returns (b, A): b has shape (limbs,), A shape (limbs, N), residues mod q_l, with
    b + <A, s> = m_index (mod q_l), s the secret's coefficients. (c1 s)_i sums
    c1_{i-j} s_j for j <= i and -c1_{N+i-j} s_j for j > i (negacyclic wrap)."""
    if not isinstance(ct, Ciphertext) or ct.encoding != "coeff" or ct.size != 2:
        raise EncodingError("extract_lwe needs a relinearised, coefficient-encoded ciphertext")
    N = ctx.N
    if not 0 <= index < N:
        raise ShapeError(f"coefficient index must be in [0, {N})")
    bs, As = [], []
    for limb in range(ct.level + 1):
        q = ctx.modulus(limb)
        c0 = ctx.intt(ct.native.poly(0)[limb], limb=limb)
        c1 = ctx.intt(ct.native.poly(1)[limb], limb=limb).astype(object)
        j = np.arange(N)
        src = index - j
        a = np.where(src >= 0, c1[src % N], (q - c1[src % N]) % q)
        bs.append(int(c0[index]))
        As.append(a.astype(np.uint64))
    return np.array(bs, dtype=np.uint64), np.stack(As)


class MsrlweConversionKeys:
    """Keys turning k RLWE ciphertexts under s into one MSRLWE row under a MultiSecretKey
    (BRIEF §2.7 [R]: k digit-sets of shared alpha and k^2 of beta switching polynomials)."""

    __slots__ = ("_obj", "k")

    def __init__(self, obj):
        self._obj, self.k = obj, obj.k

    def __repr__(self):
        return f"MsrlweConversionKeys(k={self.k})"


def msrlwe_conversion_keys(ctx: Context, sk: SecretKey, msk: MultiSecretKey) -> MsrlweConversionKeys:
    """Evaluation keys for to_msrlwe (client makes them from sk and the multi-secret key)."""
    return MsrlweConversionKeys(_core.rlwe_to_ms_key(ctx.native, ctx.unwrap(sk, SecretKey, "secret key"), msk._obj))


def to_msrlwe(C: CtMatrix, keys: MsrlweConversionKeys) -> CtMatrix:
    """RLWE -> MSRLWE: the k chunks of every row (k = the keys' k) become one MSRLWE row whose
    chunks share an a-part, so later PCMMs cost about one GEMM. The new a-parts are not seeded,
    so the precomputed-U*A path does not apply to converted matrices."""
    if C.format != "rlwe":
        raise EncodingError(f"to_msrlwe converts RLWE matrices; this one is {C.format!r}")
    if not isinstance(keys, MsrlweConversionKeys):
        raise KeyMismatchError("to_msrlwe needs linalg.msrlwe_conversion_keys(ctx, sk, msk)")
    if C.chunks != keys.k:
        raise ShapeError(f"the matrix has {C.chunks} chunks per row but the keys convert k = {keys.k}; use a "
                         f"multi-secret key with k = {C.chunks}")
    ctx = C.ctx
    rows = [MsRow(_core.rlwe_to_ms(ctx.native, [c.native for c in C.row(i)], keys._obj), ctx) for i in range(C.shape[0])]
    return CtMatrix(ctx, rows, C.shape, C.chunks, "msrlwe")
