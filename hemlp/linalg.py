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

import math

import numpy as np

from hemlp import _core
from hemlp import serialize as ser
from hemlp.ckks import Ciphertext, Context, PublicKey, SecretKey
from hemlp.errors import ContextMismatchError, EncodingError, SerializationError, ShapeError

__all__ = ["CtMatrix", "encrypt_matrix", "decrypt_matrix", "pcmm", "pcmm_gather", "choose_format"]

FORMATS = ("rlwe", "mlwe", "msrlwe")


class CtMatrix:
    """A d2 x d3 matrix encrypted row-wise as d2 x chunks ciphertexts (row-major list)."""

    def __init__(self, ctx: Context, cts: list, shape: tuple, chunks: int, fmt: str = "rlwe"):
        if len(cts) != shape[0] * chunks:
            raise ShapeError(f"CtMatrix: {len(cts)} ciphertexts for {shape[0]} rows x {chunks} chunks")
        self.ctx, self.cts, self.shape, self.chunks, self.format = ctx, cts, tuple(shape), chunks, fmt

    encoding = property(lambda self: self.cts[0].encoding)
    level = property(lambda self: self.cts[0].level)
    scale = property(lambda self: self.cts[0].scale)
    width = property(lambda self: self.ctx.slots if self.encoding == "slot" else self.ctx.N)

    def row(self, i: int) -> list:
        return self.cts[i * self.chunks : (i + 1) * self.chunks]

    def __repr__(self):
        return (f"CtMatrix({self.shape[0]}x{self.shape[1]}, format={self.format}, encoding={self.encoding}, "
                f"{len(self.cts)} ciphertexts, level={self.level}, scale=2^{math.log2(self.scale):.2f})")

    def to_bytes(self) -> bytes:
        blobs = [c.to_bytes() for c in self.cts]
        header = dict(shape=list(self.shape), chunks=self.chunks, format=self.format,
                      sizes=[len(b) for b in blobs])
        payload = np.frombuffer(b"".join(blobs), dtype=np.uint8)
        return ser.pack("ct_matrix", self.ctx.hash, header, [payload])

    def save(self, path) -> None:
        from hemlp.ckks import _atomic_write
        from pathlib import Path

        _atomic_write(Path(path), self.to_bytes())

    @classmethod
    def from_bytes(cls, data: bytes, ctx: Context) -> "CtMatrix":
        from hemlp.ckks import from_bytes

        _, _, h, arrays = ser.unpack(data, ctx.hash, "ct_matrix")
        shape, chunks = ser.field(h, "shape", list), ser.field(h, "chunks", int)
        sizes, fmt = ser.field(h, "sizes", list), ser.field(h, "format", str)
        if (len(arrays) != 1 or len(shape) != 2 or fmt not in FORMATS or chunks < 1
                or not all(isinstance(s, int) and s > 0 for s in sizes + shape)
                or len(sizes) != shape[0] * chunks or sum(sizes) != arrays[0].size):
            raise SerializationError("ct_matrix: header does not match the data; the file is corrupted")
        raw, cts, off = arrays[0].tobytes(), [], 0
        for s in sizes:
            cts.append(from_bytes(raw[off : off + s], ctx))
            off += s
        if not all(isinstance(c, Ciphertext) for c in cts):
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
    """Cheapest legal format for an (d1 x d2) @ Enc(d2 x d3) product (BRIEF §2.4).
    Only RLWE (k = 1) is implemented; MLWE / MSRLWE would be chosen for d3 < N and d3 > N."""
    return "rlwe"


def _check_format(fmt: str) -> str:
    if fmt == "auto":
        return "rlwe"
    if fmt not in FORMATS:
        raise EncodingError(f"format must be 'auto' or one of {FORMATS}, got {fmt!r}")
    if fmt != "rlwe":
        raise NotImplementedError(
            f"format {fmt!r} (BRIEF §2.2–2.3) is not implemented yet: it needs ModPack / multi-secret keys. "
            "Use format='rlwe' (k = 1), which works for any d3 (rows are split into ciphertext-sized chunks)")
    return fmt


def encrypt_matrix(ctx: Context, M, key, format: str = "auto", encoding: str = "slot",
                   level: int | None = None, scale: float | None = None) -> CtMatrix:
    """Encrypt a real matrix row-wise (client side)."""
    fmt = _check_format(format)
    M = np.asarray(M)
    if M.ndim != 2 or M.size == 0:
        raise ShapeError(f"encrypt_matrix expects a non-empty 2-D array, got shape {M.shape}")
    if np.iscomplexobj(M) or not np.issubdtype(M.dtype, np.number):
        raise EncodingError("encrypt_matrix takes real numbers")
    if not isinstance(key, (PublicKey, SecretKey)):
        raise TypeError("key must be a hemlp.ckks PublicKey or SecretKey")
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
    d2, d3 = C.shape
    out = np.empty((d2, d3))
    w = C.width
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
         rescale: bool = True) -> CtMatrix:
    """Enc(U @ M + bias[:, None]) from a plaintext U (d1 x d2) and an encrypted M (d2 x d3).

    Server side: needs no keys for the RLWE format. One level is used (the rescale).
    weight_bits: precision of the quantised weights (|U~| <= 2^weight_bits)."""
    _check_format(format)
    if not isinstance(C, CtMatrix):
        raise TypeError("pcmm: C must be a CtMatrix (see hemlp.linalg.encrypt_matrix)")
    U = np.asarray(U, dtype=np.float64)
    if U.ndim != 2:
        raise ShapeError(f"pcmm: U must be 2-D, got shape {U.shape}")
    if U.shape[1] != C.shape[0]:
        raise ShapeError(f"pcmm: U is {U.shape[0]}x{U.shape[1]} but the encrypted matrix is "
                         f"{C.shape[0]}x{C.shape[1]}: U's columns must equal the encrypted rows")
    return pcmm_gather(U, C, np.arange(C.shape[0])[:, None], weight_bits=weight_bits, bias=bias, rescale=rescale)


def pcmm_gather(U, C: CtMatrix, index, weight_bits: int = 20, bias=None, rescale: bool = True) -> CtMatrix:
    """Gathered PCMM, e.g. a convolution as im2col over ciphertext rows with no crypto work.

    index: int array (d2, P); column p selects the rows of C that U multiplies for output
    block p (-1 = a zero row, e.g. padding). Returns d1*P rows ordered (r, p) -> r*P + p:
        out[r*P + p] = sum_i U[r, i] * C.row(index[i, p]) (+ bias[r]).
    All P blocks run through the same prepared U (one exact GEMM per limb, part and chunk)."""
    if not isinstance(C, CtMatrix):
        raise TypeError("pcmm: C must be a CtMatrix (see hemlp.linalg.encrypt_matrix)")
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
    Uq, delta = quantize(U, weight_bits)
    K = max(1, round(ctx.modulus(level) / delta)) if rescale else 1
    plan = _core.ModGemmPlan(Uq, int(weight_bits))
    d2, P = index.shape
    c = C.chunks
    # inputs laid out (i, p, j): the P output blocks become extra column panels of one product
    inputs = [None if index[i, p] < 0 else C.cts[index[i, p] * c + j]._obj
              for i in range(d2) for p in range(P) for j in range(c)]
    raw = _core.pcmm_rlwe(ctx._e, plan, inputs, P * c, int(K), float(delta * K))
    cts = [ctx._w(Ciphertext, o) for o in raw]
    if rescale:
        cts = [ctx.rescale(ct) for ct in cts]
    if bias is not None:
        b = np.asarray(bias, dtype=np.float64).reshape(-1)
        if b.shape[0] != U.shape[0]:
            raise ShapeError(f"pcmm: bias has {b.shape[0]} entries for {U.shape[0]} output rows")
        cts = [ctx.add(ct, float(b[idx // (P * c)])) for idx, ct in enumerate(cts)]
    return CtMatrix(ctx, cts, (U.shape[0] * P, C.shape[1]), c, C.format)
