"""The PCMM over blocks in the store: the exact GEMM per limb, its epilogue, and the in-place product.

``block_product``: U~[R, T] X[T, J] mod q_l over a task's input blocks (one ModGemmPlan, the blocks' rows as views).
``epilogue``: x K, the rescale and the slot-encoded bias per polynomial part (``_core.pcmm_epilogue_part``, the same
arithmetic as ``pcmm.pcmm``'s native epilogue, so the same bits). ``pcmm_in_place``: a node-local task's PCMM that
reads its input blocks where they lie (``pcmm.gathered_product`` over row views).
"""
from __future__ import annotations

import time

import numpy as np

from hemlp import _core, pcmm
from hemlp.errors import LevelError, ShapeError
from hemlp.pcmm import CtMatrix
from hemlp.runtime.ray.blocks import limb_rows

__all__ = ["block_product", "out_meta", "epilogue", "pcmm_in_meta", "pcmm_in_place"]

def block_product(ctx, spec, U: np.ndarray, blocks) -> dict:
    """{part: Y (L, |R| P |J|, N)} for the parts in spec["parts"]: U~[R, T] X[T, J] mod q_l, limb-major with output
    ciphertext (r, p, j) at index (r P + p) |J| + j (rows (r, p) -> r P + p): the layout of a block's part, so the
    epilogue writes output blocks directly. The GEMM writes into Y in place. The factor K is applied in the
    epilogue (the same Shoup product as the native PCMM's)."""
    T0, T1 = spec["T"]
    J0, J1 = spec["J"]
    nR, nJ, N, L = U.shape[0], J1 - J0, ctx.N, spec["level"] + 1
    bits, index, parts = spec["bits"], spec["index"], spec["parts"]
    P = 1 if index is None else index.shape[1]
    Ys = {}
    if index is None:
        # Blocks tile (rows x chunks) uniformly: per chunk range, the row blocks that cover T are the row blocks of
        # X, passed to one GEMM as a list (no gather, one reduction: splitting K over several GEMMs would repeat
        # the output's digit recombination per block). A block may hold fewer chunks than J (the previous layer
        # split the columns): its range fills only its columns of Y.
        ranges: dict = {}  # (ja, jb) -> [(local rows a:b, block parts, block's first chunk, global row a)]
        for arrs, (r0, r1, c0, c1), _ in blocks:
            a, b = max(r0, T0), min(r1, T1)
            ja, jb = max(c0, J0), min(c1, J1)
            if a < b and ja < jb:
                ranges.setdefault((ja, jb), []).append((a - r0, b - r0, arrs, c0, a, c1 - c0))
        for (ja, jb), pcs in ranges.items():
            pcs.sort(key=lambda t: t[4])
            covered = sum(b - a for a, b, *_ in pcs)
            if pcs[0][4] != T0 or covered != T1 - T0 or any(x[4] + x[1] - x[0] != y[4] for x, y in zip(pcs, pcs[1:])):
                raise ShapeError(f"input blocks cover rows {[(x[4], x[4] + x[1] - x[0]) for x in pcs]} of chunks "
                                 f"{ja}:{jb}, expected exactly {T0}:{T1}")
        plan = _core.ModGemmPlan(np.ascontiguousarray(U), bits) if ranges else None
        for p in parts:
            Y = np.zeros((L, nR, nJ * N), dtype=np.uint64) if len(ranges) < nJ else np.empty((L, nR, nJ * N), np.uint64)
            for l in range(L):
                q = ctx.modulus(l)
                for (ja, jb), pcs in ranges.items():
                    if not any(isinstance(x[2][p], list) for x in pcs):  # limb-major blocks: rows span the chunks
                        X = [arrs[p][l, a:b, ja - c0: jb - c0].reshape(b - a, -1) for a, b, arrs, c0, *_ in pcs]
                        plan.apply(X, q, out=Y[l][:, (ja - J0) * N: (jb - J0) * N])
                        continue
                    for j in range(ja, jb):  # a ct-major input: one GEMM per chunk over the ciphertexts' limb rows
                        plan.apply([row for a, b, arrs, c0, _, ncb in pcs for row in
                                    limb_rows(arrs[p], l, a, b, j - c0, ncb)], q,
                                   out=Y[l][:, (j - J0) * N: (j - J0 + 1) * N])
            Ys[p] = Y.reshape(L, nR * nJ, N)
    else:  # gathered rows (im2col over ciphertext rows); -1 = a zero row
        plan = _core.ModGemmPlan(U, bits)
        where = {}  # (row, chunk) -> (block parts, local row, local chunk, block's chunks)
        for arrs, (r0, r1, c0, c1), _ in blocks:
            for r in range(r0, r1):
                for jj in range(max(c0, J0), min(c1, J1)):
                    where[r, jj] = (arrs, r - r0, jj - c0, c1 - c0)
        missing = sorted({int(r) for r in index.ravel() if r >= 0 and any((int(r), jj) not in where
                                                                           for jj in range(J0, J1))})
        if missing:
            raise ShapeError(f"gathered rows {missing[:8]} are not in the input blocks (chunks {J0}:{J1})")
        zero = np.zeros((1, nJ * N), dtype=np.uint64)
        for p in parts:
            Y = np.empty((L, nR, P, nJ * N), dtype=np.uint64)
            for l in range(L):
                q = ctx.modulus(l)
                rows: dict = {-1: zero}  # a gathered row as a (1, nJ N) view into its block, or joined once
                for row in map(int, np.unique(index)):
                    if row < 0:
                        continue
                    arrs, rr, lj, _ = where[row, J0]
                    if (not isinstance(arrs[p], list) and all(where[row, jj][0] is arrs and where[row, jj][2] ==
                                                              lj + jj - J0 for jj in range(J0, J1))):
                        rows[row] = arrs[p][l, rr, lj: lj + nJ].reshape(1, -1)
                    elif nJ == 1:  # one chunk of a ct-major input: the ciphertext's limb, in place
                        rows[row] = limb_rows(arrs[p], l, rr, rr + 1, lj, where[row, J0][3])[0]
                    else:  # the chunks are in several blocks or ciphertexts: this row is joined once per limb
                        rows[row] = np.concatenate([limb_rows(w[0][p], l, w[1], w[1] + 1, w[2], w[3])[0]
                                                    for w in (where[row, jj] for jj in range(J0, J1))], axis=1)
                for pp in range(P):
                    plan.apply([rows[int(row)] for row in index[:, pp]], q, out=Y[l, :, pp])
            Ys[p] = Y.reshape(L, nR * P * nJ, N)
    return Ys


def out_meta(ctx, spec) -> tuple:
    """Metadata of the PCMM's outputs: one level down, scale / q_level (as the native rescale computes it)."""
    level, _, slots, enc, is_complex, key_id = spec["in_meta"]
    return (level - 1, spec["scale_out"] / float(ctx.modulus(level)), slots, enc, is_complex, key_id)


def epilogue(ctx, spec, Ys: dict, secs: dict, head: str) -> dict:
    """{part: Z (L - 1, count, N)}: x K, rescale and, in slot encoding, the bias (a constant on c0), per part in one
    native kernel: the same arithmetic as pcmm.pcmm's native epilogue. Y is consumed (x K in place)."""
    t0 = time.perf_counter()
    level, enc = spec["in_meta"][0], spec["in_meta"][3]
    bias, P, (g0, g1) = spec["bias"], spec["P"], spec["out_rows"]
    bvals = []
    if bias is not None and enc == 0:
        count = next(iter(Ys.values())).shape[1]
        bvals = np.repeat(bias[np.arange(g0, g1) // P], count // (g1 - g0)).tolist()
    Z = {}
    for p, Y in Ys.items():
        if not (Y.flags.writeable and Y.flags.c_contiguous):  # a read-only store view (x K works in place)
            Y = Y.copy(order="C")
        Z[p] = _core.pcmm_epilogue_part(ctx.native, Y, level, spec["K"], p, spec["scale_out"], bvals if p == 0 else [])
    secs[head] = secs.get(head, 0.0) + time.perf_counter() - t0
    return Z


def pcmm_in_meta(spec, metas_per_block) -> dict:
    """The PCMM's input metadata from its input blocks (all rows must share level, scale, encoding and key) and
    what follows from it: in_meta and the output scale (scale x delta K; the rescale divides by q_level)."""
    allm = [m for ms in metas_per_block for m in ms]
    meta = allm[0]
    for m in allm:
        if m[0] != meta[0] or m[2:] != meta[2:] or abs(m[1] / meta[1] - 1) > 2.0 ** -32:
            raise LevelError("pcmm: all rows of the encrypted matrix must share level, scale, encoding and key")
    if meta[0] != spec["level"]:
        raise LevelError(f"pcmm: the encrypted matrix is at level {meta[0]}, the plan expects {spec['level']}")
    return dict(in_meta=tuple(meta), scale_out=meta[1] * spec["factor"])


def pcmm_in_place(ctx, s, blocks: list, shape: tuple, chunks: int, bits: int):
    """PCMM step s read straight from its input's store blocks, no import: pcmm.pcmm_gather's product over
    (limbs, N) views of each block's rows, ct-major lists or limb-major arrays alike (pcmm_rlwe_rows: pcmm_rlwe over
    row memory, the same arithmetic and threads, so the same bits)."""
    U = np.asarray(s.U, dtype=np.float64)
    d1, d2 = U.shape
    index = np.arange(d2)[:, None] if s.index is None else np.asarray(s.index)
    if s.index is None and d2 != shape[0]:
        raise ShapeError(f"step {s.out}: U is {d1}x{d2} but its input has {shape[0]} rows")
    level = s.level_out + 1
    meta = pcmm_in_meta(dict(level=level, factor=1.0), [m for _, _, m in blocks])["in_meta"]
    where = {}  # (row, chunk) -> (part 0 view, part 1 view), each (limbs, N)
    for parts, (r0, r1, c0, c1), _ in blocks:
        for r in range(r0, r1):
            for j in range(c0, c1):
                where[r, j] = tuple(a[(r - r0) * (c1 - c0) + j - c0] if isinstance(a, list) else a[:, r - r0, j - c0]
                                    for a in parts)

    def native(plan, rows, *args):
        return _core.pcmm_rlwe_rows(ctx.native, plan, [r and r[0] for r in rows], [r and r[1] for r in rows], *args,
                                    *meta)

    cts = pcmm.gathered_product(ctx, U, index, lambda r, j: where[r, j], chunks, level, meta[3] == 0, bits, s.bias,
                                  True, native)
    return CtMatrix(ctx, cts, (d1 * index.shape[1], shape[1]), chunks, "rlwe")
