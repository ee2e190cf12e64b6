"""The MSRLWE format (shared a-part): the k chunks of a row are encrypted under k secrets (a MultiSecretKey) and
share one a-part expanded from a per-row seed of the encryption session, so a PCMM costs about one GEMM on the
b-parts (plus U A, which PcmmPrecomputed computes ahead for a known session). to_rlwe / to_msrlwe convert."""
from __future__ import annotations

import os

import numpy as np

from hemlp import _core
from hemlp.errors import EncodingError, KeyMismatchError, ShapeError
from hemlp.fhe import Ciphertext, Context
from hemlp.pcmm.keys import ConversionKeys, MsrlweConversionKeys, MultiSecretKey
from hemlp.pcmm.matrix import CtMatrix, MsRow
from hemlp.pcmm.quantize import quantize

__all__ = ["encrypt", "decrypt", "product", "PcmmPrecomputed", "to_rlwe", "to_msrlwe"]


def encrypt(ctx: Context, M: np.ndarray, msk: MultiSecretKey, encoding: str, level, scale,
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
        rows.append(MsRow(_core.ms_encrypt(ctx.native, pts, msk.native, _core.ms_row_seed(session, i)), ctx))
    C = CtMatrix(ctx, rows, (d2, d3), k, "msrlwe")
    C.session = session
    return C


class PcmmPrecomputed:
    """K U~ A for an MSRLWE encryption session known ahead (the offline half of a PCMM):
    the online product is then one GEMM on the b-parts only. rescale=False makes it for the unrescaled product
    (K = 1, e.g. a final layer at level 0); the product's rescale must match."""

    def __init__(self, U, ctx: Context, session: bytes, level: int, weight_bits: int = 20, rescale: bool = True):
        U = np.asarray(U, dtype=np.float64)
        self.Uq, self.delta = quantize(U, weight_bits)
        self.weight_bits, self.level, self.shape, self.rescale = weight_bits, level, U.shape, bool(rescale)
        self.K = max(1, round(ctx.modulus(level) / self.delta)) if rescale else 1
        self.plan = _core.ModGemmPlan(self.Uq, int(weight_bits))
        #: the native precomputed K U~ A (``hemlp._core``)
        self.native = _core.ms_precompute_a(ctx.native, self.plan, bytes(session), U.shape[1], int(level), int(self.K))
        self.U = U  # the weights it was made for (checked against the product's)


def to_rlwe(C: CtMatrix, keys: ConversionKeys) -> CtMatrix:
    """MSRLWE -> RLWE under the main secret: per row, one ModUp of the shared a and k key switches."""
    if C.format != "msrlwe":
        return C
    if not isinstance(keys, ConversionKeys) or len(keys.native) != C.chunks:
        raise KeyMismatchError(f"to_rlwe needs conversion keys for k = {C.chunks} chunks "
                               "(pcmm.conversion_keys(ctx, sk, msk))")
    if keys.ms_key_id != C.cts[0].native.key_id:
        raise KeyMismatchError("the conversion keys were made for another multi-secret key")
    ctx = C.ctx
    cts = []
    for row in C.cts:
        cts.extend(ctx.wrap(Ciphertext, o) for o in _core.ms_to_rlwe(ctx.native, row.native, keys.native))
    return CtMatrix(ctx, cts, C.shape, C.chunks, "rlwe")


def decrypt(ctx: Context, C: CtMatrix, msk: MultiSecretKey) -> np.ndarray:
    d2, d3 = C.shape
    out = np.empty((d2, d3))
    for i, row in enumerate(C.cts):
        code, sigma, _ = ctx.decrypt_noise_args(row.scale, row.slots if row.encoding == "slot" else ctx.N)
        pts = _core.ms_decrypt(ctx.native, row.native, msk.native, code, sigma)
        vals = []
        for p in pts:
            v = ctx.native.decode_coeff(p) if p.encoding == 1 else ctx.native.decode(p).real
            vals.append(np.asarray(v))
        out[i] = np.concatenate(vals)[:d3]
    return out


def product(U: np.ndarray, C: CtMatrix, weight_bits: int, bias, rescale: bool,
            precomputed: PcmmPrecomputed | None) -> CtMatrix:
    ctx = C.ctx
    if precomputed is not None:
        if precomputed.level != C.level or precomputed.shape != U.shape or not np.array_equal(precomputed.U, U):
            raise EncodingError("pcmm: the precomputed U*A was made for another weight matrix or level")
        if precomputed.rescale != bool(rescale):
            raise EncodingError(f"pcmm: the precomputed U*A was made for rescale={precomputed.rescale}, the product "
                                f"asks rescale={bool(rescale)}; make it with "
                                f"PcmmPrecomputed(..., rescale={bool(rescale)})")
        Uq, delta, K, plan = precomputed.Uq, precomputed.delta, precomputed.K, precomputed.plan
    else:
        Uq, delta = quantize(U, weight_bits)
        K = max(1, round(ctx.modulus(C.level) / delta)) if rescale else 1
        plan = _core.ModGemmPlan(Uq, int(weight_bits))
    raw = _core.pcmm_msrlwe(ctx.native, plan, [r.native for r in C.cts], int(K), float(delta * K),
                            None if precomputed is None else precomputed.native)
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



def to_msrlwe(C: CtMatrix, keys: MsrlweConversionKeys) -> CtMatrix:
    """RLWE -> MSRLWE: the k chunks of every row (k = the keys' k) become one MSRLWE row whose
    chunks share an a-part, so later PCMMs cost about one GEMM. The new a-parts are not seeded,
    so the precomputed-U*A path does not apply to converted matrices."""
    if C.format != "rlwe":
        raise EncodingError(f"to_msrlwe converts RLWE matrices; this one is {C.format!r}")
    if not isinstance(keys, MsrlweConversionKeys):
        raise KeyMismatchError("to_msrlwe needs pcmm.msrlwe_conversion_keys(ctx, sk, msk)")
    if C.chunks != keys.k:
        raise ShapeError(f"the matrix has {C.chunks} chunks per row but the keys convert k = {keys.k}; use a "
                         f"multi-secret key with k = {C.chunks}")
    ctx = C.ctx
    rows = [MsRow(_core.rlwe_to_ms(ctx.native, [c.native for c in C.row(i)], keys.native), ctx) for i in range(C.shape[0])]
    return CtMatrix(ctx, rows, C.shape, C.chunks, "msrlwe")
