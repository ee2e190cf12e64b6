"""PCMM in the MSRLWE ("shared-a") format on the GPU: rows whose k chunks share one a-part, each chunk under its own
secret s_j. A product is one exact modular GEMM over the a-parts and one over each chunk's b-parts, on every limb
(NTT form), as pcmm/msrlwe.cpp's pcmm_msrlwe computes it, word for word.

    drows = [msrlwe.to_device(dev, r) for r in C.cts]            # C: an MSRLWE hemlp.pcmm.CtMatrix
    out = msrlwe.pcmm_msrlwe(dev, GemmPlan(dev, Uq, bits), drows, K, delta * K)
    rows = [msrlwe.to_host(dev, o) for o in out]                  # hemlp.pcmm.MsRow, decrypted by the client

With U*A precomputed (the a-parts' GEMM done ahead from the session's seeds: hemlp.pcmm.PcmmPrecomputed), pass its
rows uploaded as `precomputed_a` and only the b-parts' GEMMs run.
"""
from __future__ import annotations

from dataclasses import dataclass

from hemlp.errors import (ContextMismatchError, EncodingError, KeyMismatchError, LevelError, ParameterError,
                          ShapeError)
from hemlp.gpu.device import CudaEvaluator, DeviceBuffer, GemmPlan, scales_match

__all__ = ["DeviceMsCiphertext", "to_device", "to_host", "pcmm_msrlwe"]


@dataclass
class DeviceMsCiphertext:
    """An MSRLWE row on the GPU: the shared a-part and the k chunks' b-parts (level + 1 limbs each, NTT form), with the
    CPU row's metadata."""

    a: DeviceBuffer
    b: list
    level: int
    scale: float
    slots: int
    encoding: int
    key_id: int  # the multi-secret key's id
    param_hash: str

    @property
    def k(self) -> int:
        return len(self.b)


def to_device(dev: CudaEvaluator, row) -> DeviceMsCiphertext:
    """Upload a hemlp.pcmm.MsRow (a seeded a-part is expanded on the host first)."""
    from hemlp.pcmm import MsRow

    if dev.ctx is None:
        raise ParameterError("msrlwe.to_device needs a CudaEvaluator made from a hemlp.fhe.Context")
    if not isinstance(row, MsRow):
        raise TypeError(f"msrlwe.to_device takes a hemlp.pcmm.MsRow, got {type(row).__name__}")
    o = row.native
    if o.param_hash != dev.ctx.params.native.hash64:
        raise ContextMismatchError("the MSRLWE row belongs to another parameter set")
    return DeviceMsCiphertext(dev.upload_poly(o.poly_a()), [dev.upload_poly(o.poly_b(j)) for j in range(o.k)],
                              o.level, o.scale, o.slots, o.encoding, o.key_id, dev.spec.param_hash)


def to_host(dev: CudaEvaluator, d: DeviceMsCiphertext):
    """Download into a hemlp.pcmm.MsRow of the evaluator's context (imported with the core's checks)."""
    from hemlp import _core
    from hemlp.pcmm import MsRow

    if dev.ctx is None:
        raise ParameterError("msrlwe.to_host needs a CudaEvaluator made from a hemlp.fhe.Context")
    limbs = d.level + 1
    obj = _core.ms_import(dev.ctx.native, dev.download_poly(d.a, limbs), [dev.download_poly(b, limbs) for b in d.b],
                          d.level, d.scale, d.slots, d.encoding, d.key_id, None)
    return MsRow(obj, dev.ctx)


def pcmm_msrlwe(dev: CudaEvaluator, plan: GemmPlan, rows: list, K: int, out_scale_factor: float,
                precomputed_a: list | None = None) -> list:
    """Rows r of K U X: a' = K sum_i U_ri a_i and b'_j = K sum_i U_ri b_ij, at scale in.scale * out_scale_factor.
    rows: plan.cols DeviceMsCiphertexts (None: a zero row); precomputed_a: plan.rows device buffers holding K U A at
    the rows' level (the a-parts' GEMM is then skipped)."""
    if len(rows) != plan.cols:
        raise ShapeError(f"pcmm: the weight matrix has {plan.cols} columns but the encrypted matrix has {len(rows)} "
                         "rows")
    ref = next((r for r in rows if r is not None), None)
    if ref is None:
        raise ShapeError("pcmm: no encrypted rows")
    for r in rows:
        if r is None:
            continue
        if r.param_hash != dev.spec.param_hash:
            raise ContextMismatchError("pcmm: a row belongs to another parameter set")
        if r.key_id != ref.key_id:
            raise KeyMismatchError("pcmm: the MSRLWE rows are encrypted under different multi-secret keys")
        if r.slots != ref.slots or r.encoding != ref.encoding:
            raise EncodingError("pcmm: the MSRLWE rows have different slot counts or encodings")
        if r.level != ref.level or not scales_match(r.scale, ref.scale) or r.k != ref.k:
            raise LevelError("pcmm: all MSRLWE rows must share level, scale and chunk count")
    lv = ref.level
    if precomputed_a is not None:
        if len(precomputed_a) != plan.rows:
            raise ShapeError(f"precomputed U*A has {len(precomputed_a)} rows, the weight matrix {plan.rows}")
        a_out = list(precomputed_a)
    else:
        a_out = dev.gemm_polys(plan, [None if r is None else r.a for r in rows], 1, lv, K)
    b_out = [dev.gemm_polys(plan, [None if r is None else r.b[j] for r in rows], 1, lv, K) for j in range(ref.k)]
    return [DeviceMsCiphertext(a_out[i], [b_out[j][i] for j in range(ref.k)], lv, ref.scale * out_scale_factor,
                               ref.slots, ref.encoding, ref.key_id, ref.param_hash) for i in range(plan.rows)]
