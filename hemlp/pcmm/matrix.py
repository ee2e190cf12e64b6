"""Encrypted matrices: CtMatrix (a stack of ciphertexts in one of the formats rlwe, mlwe, msrlwe), MsRow (one
MSRLWE row) and choose_format.

An encrypted d2 x d3 matrix is a stack of RLWE ciphertexts: row i is split into c = ceil(d3 / w) chunks of w values
(w = ctx.slots for slot encoding, ctx.N for coefficient encoding), one ciphertext each (format rlwe); MLWE packs k =
N / d3 rows per ciphertext (hemlp.pcmm.mlwe); MSRLWE encrypts the chunks of a row under k secrets sharing one a-part
(hemlp.pcmm.msrlwe).
"""
from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from hemlp import _core
from hemlp.errors import EncodingError, SerializationError, ShapeError
from hemlp.fhe import Context, ciphertexts_from_bytes
from hemlp.fhe import serialize as ser
from hemlp.fhe.files import map_file, write_atomic

__all__ = ["FORMATS", "CtMatrix", "MsRow", "choose_format"]

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
        return (f"CtMatrix({self.shape[0]}x{self.shape[1]}, format={self.format}, chunks={self.chunks}, "
                f"encoding={self.encoding}, {len(self.cts)} ciphertexts, level={self.level}, scale=2^{math.log2(self.scale):.2f})")

    def to_bytes(self) -> bytes:
        return b"".join(self.to_parts())

    def to_parts(self) -> list:
        """to_bytes() as a list of buffers (its ciphertexts' blobs are not copied into one payload first: the
        caller joins once, or writes the parts to a file one by one)."""
        header, parts = self.element_parts()
        return ser.pack_parts("ct_matrix", self.ctx.hash, header, [parts])

    def element_parts(self, seal: bool = True) -> tuple:
        """(header, buffers): the matrix's header fields (shape, chunks, format, each element's size) and its
        elements serialised one after the other, each a container of its own (Ciphertext or MsRow): what a
        ct_matrix container holds, and what an encrypted batch file (hemlp.runtime.artifacts) nests directly.
        The buffers may hold PendingSeals: give them to serialize.pack_parts, which resolves them. seal=False:
        the ciphertexts' seals are left unhashed, for an enclosing container whose seal covers them (the
        "Nested containers" paragraph of hemlp.fhe.serialize)."""
        if not seal and all(hasattr(c, "unsealed_parts") for c in self.cts):
            parts = [[head, *bufs, ser.NO_SEAL] for head, bufs in (c.unsealed_parts() for c in self.cts)]
            header = dict(shape=list(self.shape), chunks=self.chunks, format=self.format, element_seals=False,
                          sizes=[sum(memoryview(b).nbytes for b in ps) for ps in parts])
            return header, [b for ps in parts for b in ps]
        if len(self.cts) > 1 and all(hasattr(c, "unsealed_parts") for c in self.cts):
            # each element's seal (a SHA-256 of its bytes) is hashed by two threads while the enclosing
            # container's own SHA-256 runs over the elements already sealed (hashlib releases the GIL)
            pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="hemlp-seal")
            try:
                parts = [ser.seal_later(*c.unsealed_parts(), pool) for c in self.cts]
            finally:
                pool.shutdown(wait=False)   # the queued seals still run; the threads end with the last
        else:
            parts = [c.to_parts() if hasattr(c, "to_parts") else [c.to_bytes()] for c in self.cts]
        header = dict(shape=list(self.shape), chunks=self.chunks, format=self.format,
                      sizes=[sum(b.nbytes if isinstance(b, ser.PendingSeal) else memoryview(b).nbytes for b in ps)
                             for ps in parts])
        return header, [b for ps in parts for b in ps]

    def save(self, path) -> None:
        write_atomic(path, self.to_parts())

    @classmethod
    def from_bytes(cls, data: bytes, ctx: Context) -> "CtMatrix":
        with ser.reading(data, "ct_matrix", ctx.hash) as (_, _, h, arrays):  # read in place
            if len(arrays) != 1:
                raise SerializationError("ct_matrix: header does not match the data; the file is corrupted")
            return cls.from_elements(h, arrays[0], ctx)

    @classmethod
    def from_elements(cls, header: dict, payload, ctx: Context, checksum: bool = False) -> "CtMatrix":
        """The matrix from element_parts()' header and the concatenated elements (any buffer, read in place; the
        native imports copy). checksum=False: the enclosing container's checksum covers the elements (the default,
        for callers inside serialize.reading; elements written without their own seal, "element_seals": false,
        can only be read so)."""
        shape, chunks, fmt, blobs = cls.split_elements(header, payload, ctx)
        if checksum and header.get("element_seals") is False:
            raise SerializationError("ct_matrix: these elements carry no seal of their own (their container's seal "
                                     "covers them): read them inside that container")
        return cls(ctx, cls.import_elements(fmt, blobs, ctx, checksum), tuple(shape), chunks, fmt)

    @staticmethod
    def split_elements(header: dict, payload, ctx: Context) -> tuple:
        """(shape, chunks, format, blobs): from_elements' checks of the header against the payload, and each
        element's bytes as a view (its structure checked when it is imported: import_elements). Nothing of the
        payload is read but its length, so it may still be arriving (hemlp.runtime.artifacts.BatchReader)."""
        if not isinstance(header, dict):
            raise SerializationError("ct_matrix: malformed header; the file is corrupted")
        shape, chunks = ser.field(header, "shape", list), ser.field(header, "chunks", int)
        sizes, fmt = ser.field(header, "sizes", list), ser.field(header, "format", str)
        raw = memoryview(payload).cast("B")
        if (len(shape) != 2 or fmt not in FORMATS or chunks < 1
                or not isinstance(header.get("element_seals", True), bool)
                or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sizes + shape)
                or (fmt == "mlwe" and (shape[1] >= ctx.N or ctx.N % shape[1]))
                or len(sizes) != _count(fmt, shape, chunks, ctx) or sum(sizes) != raw.nbytes):
            raise SerializationError("ct_matrix: header does not match the data; the file is corrupted")
        blobs, off = [], 0  # each element's blob is a view, its structure checked on its own
        for s in sizes:
            blobs.append(raw[off : off + s])
            off += s
        return shape, chunks, fmt, blobs

    @staticmethod
    def import_elements(fmt: str, blobs: list, ctx: Context, checksum: bool = False) -> list:
        """The elements of a matrix of this format (split_elements' blobs, or some of them, in order) as objects
        of ctx: MSRLWE rows one by one, ciphertexts in parallel on the native threads."""
        if fmt == "msrlwe":
            return [MsRow.from_bytes(b, ctx, checksum=checksum) for b in blobs]
        return ciphertexts_from_bytes(blobs, ctx, checksum=checksum)

    @classmethod
    def load(cls, path, ctx: Context) -> "CtMatrix":
        with map_file(path, "ct_matrix") as data:
            return cls.from_bytes(data, ctx)


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
    def from_bytes(cls, data: bytes, ctx: Context, checksum: bool = True) -> "MsRow":
        _, _, h, arrays = ser.unpack(data, ctx.hash, "ciphertext", copy=False, checksum=checksum)
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


def choose_format(ctx: Context, d1: int, d2: int, d3: int, encoding: str = "slot") -> str:
    """Cheapest legal format for a (d1 x d2) @ Enc(d2 x d3) product (docs/design/pcmm-and-planning.md §2.4), by GEMM
    work per limb: RLWE 2 d1 d2 N c (c = chunks), MLWE d1 d2 (N + d3) plus ~d1 key switches (ModPack),
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
