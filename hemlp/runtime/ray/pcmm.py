"""One PCMM sharded over a Ray cluster (``ray_pcmm``, ``ray_pcmm_gather``): exact modular GEMMs per (row block,
column block, reduction block, RNS limb), bit-identical to ``hemlp.pcmm.pcmm`` for the RLWE and MSRLWE formats.

An encrypted matrix stacks, per limb k, into X_k = (d2, columns, parts, N) residues mod q_k (RLWE: the c chunks of
a row, 2 polynomials each; MSRLWE: the k + 1 polynomials a, b_0.. of a row). The product is Y_k = K (U~ X_k) mod
q_k, followed by the same import / rescale / bias steps as ``pcmm.pcmm``. The processor grid [p_m, p_n, p_k]
(planner, eq. 5) splits the output rows, the columns and the reduction dimension d2; limbs are an extra
independent axis. Partial sums over reduction blocks are added mod q in a binary tree. Blocks travel as uint64
numpy arrays through the object store (one ray.put per input block, zero-copy reads in the tasks). Every task is
pure and idempotent (max_retries): a killed worker is re-run and the result is the same.

Whole compiled models use RayProgram (hemlp.runtime.ray.program) instead; these two are the one-product API and
the PCMMs of the per-step fallback (RayExecutor).
"""
from __future__ import annotations

import time

import numpy as np

from hemlp import _core, pcmm
from hemlp.fhe import Ciphertext
from hemlp.errors import EncodingError, LevelError, ShapeError
from hemlp.pcmm import CtMatrix, MsRow
from hemlp.runtime.ray.blocks import splits
from hemlp.runtime.ray.cost import grid_dims
from hemlp.runtime.ray.session import TASK_RETRIES, import_ray, node_id, ray_session

__all__ = ["ray_pcmm", "ray_pcmm_gather"]

def _mulmod_scalar(Y: np.ndarray, k: int, q: int) -> np.ndarray:
    """k * Y mod q exactly, as the native PCMM's Shoup multiply (a 1 x 1 exact modgemm)."""
    if k == 1:
        return Y
    flat = _core.modgemm(np.array([[k]], dtype=np.int64), Y.reshape(1, -1), q, max(1, k.bit_length()))
    return flat.reshape(Y.shape)


def _block_product(Ub: np.ndarray, Xb: np.ndarray, q: int, bU: int, Kq: int, threads: int):
    """One grid cell and limb: K (U_block @ X_block) mod q; X_block is (d2_t, columns, parts, N)."""
    _core.set_num_threads(threads)
    d2t = Xb.shape[0]
    Y = _core.modgemm(Ub, Xb.reshape(d2t, -1), q, bU)  # both parts and all chunks in one GEMM
    Y = _mulmod_scalar(Y, Kq, q).reshape((Ub.shape[0],) + Xb.shape[1:])
    return Y, node_id()


def _add_mod(a: np.ndarray, b: np.ndarray, q: int) -> np.ndarray:
    """(a + b) mod q for residues < q."""
    s = a + b  # < 2q < 2^63: no overflow
    s -= np.where(s >= np.uint64(q), np.uint64(q), np.uint64(0))
    return s


_REMOTES = {}


def _remote(name: str):
    """Ray remote functions, made on first use so importing this module does not need ray."""
    if name not in _REMOTES:
        ray = import_ray()
        opts = dict(max_retries=TASK_RETRIES, retry_exceptions=False, num_cpus=1)
        _REMOTES["product"] = ray.remote(num_returns=2, **opts)(_block_product)
        _REMOTES["add"] = ray.remote(**opts)(_add_mod)
    return _REMOTES[name]


def _check(U, C, weight_bits: int, gathered: bool = False, rescale: bool = True):
    if not isinstance(C, CtMatrix):
        raise TypeError("ray_pcmm: C must be a CtMatrix (see hemlp.pcmm.encrypt_matrix)")
    if C.format not in ("rlwe", "msrlwe"):
        raise EncodingError(f"ray_pcmm shards RLWE and MSRLWE matrices; this one is {C.format!r} (use pcmm.pcmm)")
    U = np.asarray(U, dtype=np.float64)
    if U.ndim != 2:
        raise ShapeError(f"pcmm: U must be 2-D, got shape {U.shape}")
    if not gathered and U.shape[1] != C.shape[0]:
        raise ShapeError(f"pcmm: U is {U.shape[0]}x{U.shape[1]} but the encrypted matrix is "
                         f"{C.shape[0]}x{C.shape[1]}: U's columns must equal the encrypted rows")
    if not 1 <= weight_bits <= 40:
        raise EncodingError("weight_bits must be in [1, 40]")
    ref = C.cts[0].native
    if ref.level == 0 and rescale:
        raise LevelError("pcmm: the encrypted matrix is at level 0; a PCMM needs one level for its rescale")
    for ct in C.cts:
        o = ct.native
        if C.format == "rlwe" and o.size != 2:
            raise EncodingError("pcmm: relinearise the ciphertexts first")
        if (o.level != ref.level or o.encoding != ref.encoding or o.slots != ref.slots
                or abs(o.scale / ref.scale - 1) > 2.0 ** -32 or (o.key_id and ref.key_id and o.key_id != ref.key_id)
                or (C.format == "msrlwe" and o.k != ref.k)):
            raise LevelError("pcmm: all rows of the encrypted matrix must share level, scale, encoding and key")
    return U


def _stack_limbs(C) -> np.ndarray:
    """(L, d2, columns, P, N) uint64, limb-major so one limb of one block is a single slice.

    RLWE: the columns are the c chunks of a row, P = 2 polynomials each. MSRLWE: a row is one
    ciphertext (a, b_0 .. b_{k-1}); its k + 1 polynomials are the columns (P = 1), all multiplied
    by the same U, so they split across tasks like ciphertext columns."""
    ctx, d2, L = C.ctx, C.shape[0], C.level + 1
    if C.format == "msrlwe":
        k = C.cts[0].native.k
        X = np.empty((L, d2, k + 1, 1, ctx.N), dtype=np.uint64)
        for i, row in enumerate(C.cts):
            o = row.native
            X[:, i, 0, 0, :] = o.poly_a()
            for j in range(k):
                X[:, i, j + 1, 0, :] = o.poly_b(j)
        return X
    c = C.chunks
    X = np.empty((L, d2, c, 2, ctx.N), dtype=np.uint64)
    for idx, ct in enumerate(C.cts):
        i, j = divmod(idx, c)
        for part in range(2):
            X[:, i, j, part, :] = ct.native.poly(part)
    return X


def _stack_gathered(C, index: np.ndarray) -> np.ndarray:
    """(L, d2, P c, 2, N): column p c + j of gathered row i is chunk j of C's row index[i, p] (zeros
    for -1), the (i, p, j) order of pcmm.pcmm_gather, so output row r, column p c + j is row r P + p."""
    ctx, L, c = C.ctx, C.level + 1, C.chunks
    d2, P = index.shape
    X = np.zeros((L, d2, P * c, 2, ctx.N), dtype=np.uint64)
    for i in range(d2):
        for p in range(P):
            if index[i, p] < 0:
                continue
            for j, ct in enumerate(C.row(int(index[i, p]))):
                for part in range(2):
                    X[:, i, p * c + j, part, :] = ct.native.poly(part)
    return X


def _assemble(C, out: np.ndarray, scale: float, bias, rescale: bool = True) -> list:
    """Native objects from the product residues, rescaled (unless rescale=False) and biased exactly as pcmm.pcmm
    does."""
    ctx, ref, level = C.ctx, C.cts[0].native, C.level
    d1 = out.shape[0]
    b = None
    if bias is not None:
        b = np.asarray(bias, dtype=np.float64).reshape(-1)
        if b.shape[0] != d1:
            raise ShapeError(f"pcmm: bias has {b.shape[0]} entries for {d1} output rows")
    if C.format == "msrlwe":
        rows = []
        for r in range(d1):
            o = _core.ms_import(ctx.native, out[r, 0, 0], [out[r, j, 0] for j in range(1, out.shape[1])], level, scale,
                                ref.slots, ref.encoding, ref.key_id, None)
            if rescale:
                o = _core.ms_rescale(ctx.native, o)
            if b is not None:
                enc = "slot" if o.encoding == 0 else "coeff"
                width = ctx.slots if enc == "slot" else ctx.N
                pt = ctx.encode(np.full(width, b[r]), level=o.level, scale=o.scale, encoding=enc).native
                for j in range(o.k):
                    o = _core.ms_add_plain(ctx.native, o, j, pt)
            rows.append(MsRow(o, ctx))
        return rows
    ncols, cts = out.shape[1], []  # ncols = P c for a gathered product
    for r in range(d1):
        for j in range(ncols):
            obj = ctx.native.import_ciphertext([out[r, j, 0], out[r, j, 1]], level, scale, ref.slots, ref.encoding,
                                           ref.is_complex, ref.key_id, None)
            ct = ctx.wrap(Ciphertext, obj)
            cts.append(ctx.rescale_inplace(ct) if rescale else ct)
    if b is not None:
        cts = [ctx.add(ct, float(b[idx // ncols])) for idx, ct in enumerate(cts)]
    return cts


def _tree_sum(ray, refs: list, q: int):
    add = _remote("add")
    while len(refs) > 1:  # pairwise: depth log2(p_k), each add runs where its inputs are
        nxt = [add.remote(refs[i], refs[i + 1], q) for i in range(0, len(refs) - 1, 2)]
        if len(refs) % 2:
            nxt.append(refs[-1])
        refs = nxt
    return refs[0]


def ray_pcmm(U, C, *, address: str | None = None, num_workers: int | None = None, grid=None,
             weight_bits: int = 20, bias=None, stats: dict | None = None, rescale: bool = True):
    """Enc(U @ M + bias[:, None]) on Ray; bit-identical to pcmm.pcmm(U, C, weight_bits=..., bias=..., rescale=...)
    for RLWE and MSRLWE matrices (MLWE needs key switches: use pcmm.pcmm). rescale=False: the product without its
    rescale (K = 1; at level 0 too: a final layer of compile(..., final_rescale=False)).

    address: None = the running Ray / a local one started here (num_workers CPUs), or a cluster
    address ("host:port", "ray://host:10001", "auto"). grid: a planner Grid or (p_m, p_n, p_k)
    over (output rows, columns, reduction rows); default: planner.grid.grid_3d for
    num_workers. stats: a dict to fill with the grid, task count, object-store bytes and nodes used."""
    t0 = time.perf_counter()
    U = _check(U, C, weight_bits, rescale=rescale)
    return _product(U, C, _stack_limbs(C), 1, t0, address, num_workers, grid, weight_bits, bias, stats, rescale)


def ray_pcmm_gather(U, C, index, *, address: str | None = None, num_workers: int | None = None, grid=None,
                    weight_bits: int = 20, bias=None, stats: dict | None = None, rescale: bool = True):
    """pcmm.pcmm_gather on Ray, bit-identical: out[r P + p] = sum_i U[r, i] C.row(index[i, p]) (+ bias[r]).

    The P gathered blocks become P c extra columns of one product (a convolution as im2col over
    ciphertext rows), so the grid's column axis also splits the output positions."""
    t0 = time.perf_counter()
    U = _check(U, C, weight_bits, gathered=True, rescale=rescale)
    if C.format != "rlwe":
        raise EncodingError("pcmm_gather works on RLWE matrices; convert with pcmm.to_rlwe first")
    index = np.asarray(index)
    if index.ndim != 2 or index.shape[0] != U.shape[1]:
        raise ShapeError(f"pcmm_gather: U {U.shape} needs an index of shape ({U.shape[1]}, P), got {index.shape}")
    if not np.issubdtype(index.dtype, np.integer) or index.min() < -1 or index.max() >= C.shape[0]:
        raise ShapeError(f"pcmm_gather: index entries must be -1 or row numbers < {C.shape[0]}")
    P = index.shape[1]
    return _product(U, C, _stack_gathered(C, index), P, t0, address, num_workers, grid, weight_bits, bias, stats,
                    rescale)


def _product(U, C, X, P_out: int, t0: float, address, num_workers, grid, weight_bits, bias, stats,
             rescale: bool = True):
    """The sharded product of U with the stacked residues X; P_out output rows per row of U."""
    ctx, level = C.ctx, C.level
    d1, d2 = U.shape
    Uq, delta = pcmm.quantize(U, weight_bits)
    K = max(1, round(ctx.modulus(level) / delta)) if rescale else 1   # as pcmm.gathered_product
    ref = C.cts[0].native
    c, P = X.shape[2], X.shape[3]
    t_stack = time.perf_counter()
    with ray_session(address, num_workers) as ray:
        t_session = time.perf_counter()
        workers = num_workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
        pm, pn, pk = grid_dims(grid, d1, c, d2, workers)
        rows, cols, reds = splits(d1, pm), splits(c, pn), splits(d2, pk)
        product = _remote("product")
        u_refs = {(i, t): ray.put(np.ascontiguousarray(Uq[r, s])) for i, r in enumerate(rows) for t, s in enumerate(reds)}
        put_bytes = sum(Uq[r, s].nbytes for r in rows for s in reds)
        out = np.empty((d1, c, P, level + 1, ctx.N), dtype=np.uint64)
        pending, node_refs, tasks = {}, [], 0
        for k in range(level + 1):
            q = ctx.modulus(k)
            Kq = K % q
            x_refs = {}
            for t, s in enumerate(reds):
                for j, cs in enumerate(cols):
                    blk = np.ascontiguousarray(X[k, s, cs])
                    x_refs[t, j] = ray.put(blk)
                    put_bytes += blk.nbytes
            for i, r in enumerate(rows):
                for j, cs in enumerate(cols):
                    parts = []
                    for t in range(len(reds)):
                        y, node = product.options(scheduling_strategy="SPREAD").remote(
                            u_refs[i, t], x_refs[t, j], q, int(weight_bits), Kq, 1)
                        parts.append(y)
                        node_refs.append(node)
                        tasks += 1
                    tasks += len(parts) - 1
                    pending[_tree_sum(ray, parts, q)] = (r, cs, k)
        del X
        result_bytes = 0
        while pending:  # fill the output as blocks finish; each is read zero-copy, then released
            done, _ = ray.wait(list(pending), num_returns=1)
            r, cs, k = pending.pop(done[0])
            blk = ray.get(done[0])
            out[r, cs, :, k, :] = blk
            result_bytes += blk.nbytes
            del blk
        nodes = sorted(set(ray.get(node_refs)))
        t_tasks = time.perf_counter()
    scale = ref.scale * float(delta * K)  # the native PCMM's out_scale_factor: the same double product
    cts = _assemble(C, out, scale, bias, rescale)
    del out
    if stats is not None:
        H = P * (level + 1) * ctx.N * 8  # bytes of one column unit: a ciphertext (RLWE), a polynomial (MSRLWE)
        x_bytes, u_bytes = d2 * c * H, Uq.nbytes
        stats.update(grid=(pm, pn, pk), workers=workers, tasks=tasks, limbs=level + 1, nodes=nodes,
                     put_bytes=put_bytes, result_bytes=result_bytes, ciphertext_bytes=H,
                     # what the tasks read / write through the store, term by term as in eq. (5)
                     moved_bytes=dict(inputs=pm * x_bytes, weights=pn * (level + 1) * u_bytes,
                                      partials=pk * d1 * c * H),
                     # eq. (5) with every term sized by what it carries: the weight blocks are plaintext
                     # int64 entries (read once per limb: the tasks are per limb), not H-sized ciphertexts
                     w3d_bytes=dict(inputs=pm * d2 * c * H, weights=pn * (level + 1) * u_bytes,
                                    partials=pk * d1 * c * H),
                     w3d_literal_bytes=dict(inputs=pm * d2 * c * H, weights=pn * d1 * d2 * H, partials=pk * d1 * c * H),
                     seconds=time.perf_counter() - t0,
                     phases=dict(stack=t_stack - t0, session=t_session - t_stack, tasks=t_tasks - t_session,
                                 assemble=time.perf_counter() - t_tasks))
    return CtMatrix(ctx, cts, (d1 * P_out, C.shape[1]), C.chunks, C.format)
