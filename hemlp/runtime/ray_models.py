"""Compiled models on Ray (``CompiledModel.run(..., runtime="ray")`` -> ``run_on_ray``).

``RayProgram`` (the default): the activations stay in the object store between layers. The driver puts
the input once, in the blocks the first layer reads, then only orchestrates waves of tasks. Two kinds of
wave:

* node-local tasks: a run of steps in one task with all of a node's CPUs (its native threads), through the
  in-process code (``local.run_step``), so the bits are the in-process bits. A PCMM whose input the task takes
  from the store reads it there in place (``_pcmm_in_place``: the native PCMM over views of the rows), so the
  task imports nothing it only multiplies. On one node (workers <= a node's CPUs) the whole program is one
  such task: within a node, threads of one process do what tasks of one thread would, without copies between
  processes. A chain of elementwise steps splits its rows over the nodes;
* a sharded PCMM (across nodes, when the grid saves more than a wave costs: ``RayProgram._sharded``; or
  ``grid=``): tasks of one thread on a grid; each reads its input blocks by ObjectRef zero-copy, runs the
  exact GEMM per limb, then x K, the rescale and the bias natively and the elementwise steps that follow on its
  rows (square, polynomial, affine), and returns its output block for the next layer's tasks. Grids:
  ``planner.grid.grid_store`` (fewest object-store bytes, ``pcmm_store_bytes``), or ``grid=``.

Per step, ``stats`` gets the bytes the tasks read and wrote through the store (every argument, return and
driver put is a numpy array of known size) next to the model, the grid, the task count, nodes, and the tasks'
own wall and CPU seconds. See the block comment above ``_group_task`` for the data layout and the waves.

``RayExecutor`` (fallback for programs with steps RayProgram does not know): the per-step executor that
``local.run`` calls; PCMMs through ``ray_pcmm`` / ``ray_pcmm_gather``, elementwise steps as tasks over
groups of ciphertexts sent from and returned to the driver.

Every worker process builds the ``ckks.Context`` once and caches it by the parameter hash, and decodes the
relinearisation key (put once per run) once; tasks are pure (max_retries) and their arguments stay
referenced by the driver, so a worker killed mid-layer is re-run and the result keeps the same bits.
"""
from __future__ import annotations

import hashlib
import os
import time

import numpy as np

from hemlp.errors import LevelError, ShapeError
from hemlp.runtime.local import ElementwiseOp, elementwise
from hemlp.runtime.ray_runtime import TASK_RETRIES, _maybe_die, _ray, ray_pcmm, ray_pcmm_gather

__all__ = ["RayProgram", "RayExecutor", "run_on_ray", "release_staging", "pack_cts", "unpack_cts"]

# ----------------------------------------------------------------------------- ciphertext groups <-> arrays


def pack_cts(cts) -> tuple[np.ndarray, list]:
    """(array (n, size, L, N) uint64, metas): the exact state of each ciphertext (as Ciphertext.to_bytes)."""
    objs = [ct._obj for ct in cts]
    o0 = objs[0]
    size, L = o0.size, o0.level + 1
    uniform = all(o.size == size and o.level + 1 == L for o in objs)
    if uniform:
        arr = np.empty((len(objs), size, L, o0.poly(0).shape[-1]), dtype=np.uint64)
        for i, o in enumerate(objs):
            for j in range(size):
                arr[i, j] = o.poly(j)
    else:  # mixed sizes / levels (not produced by a compiled plan): one array per ciphertext
        arr = [np.stack([o.poly(j) for j in range(o.size)]) for o in objs]
    metas = [(o.level, o.scale, o.slots, o.encoding, o.is_complex, o.key_id,
              o.seed if (o.seeded and o.size == 2) else None) for o in objs]
    return arr, metas


def unpack_cts(ctx, arr, metas) -> list:
    from hemlp.ckks import Ciphertext

    out = []
    for i, (level, scale, slots, enc, is_complex, key_id, seed) in enumerate(metas):
        polys = arr[i]
        polys = [polys[0]] if seed is not None else [polys[j] for j in range(polys.shape[0])]
        obj = ctx._e.import_ciphertext(polys, level, scale, slots, enc, is_complex, key_id, seed)
        out.append(ctx._w(Ciphertext, obj))
    return out


# ----------------------------------------------------------------------------- worker side

_WORKER_CACHE: dict = {}   # per worker process: contexts by parameter hash, relin keys by digest
_CACHE_MAX = 8


def _cache(key, make):
    if key not in _WORKER_CACHE:
        while len(_WORKER_CACHE) >= _CACHE_MAX:
            _WORKER_CACHE.pop(next(iter(_WORKER_CACHE)))
        _WORKER_CACHE[key] = make()
    return _WORKER_CACHE[key]


def _worker_context(phash: str, params: bytes):
    import warnings

    from hemlp import ckks

    def make():
        p = ckks.Params.from_bytes(params)
        with warnings.catch_warnings():  # the driver already accepted (and warned about) these parameters
            warnings.simplefilter("ignore", ckks.InsecureParametersWarning)
            return ckks.Context(p, allow_insecure=not p.is_128_bit_secure)

    return _cache(("ctx", phash), make)


def _worker_relin_key(ray, ctx, digest: str, holder: list):
    from hemlp import ckks

    return _cache(("rlk", ctx.hash, digest), lambda: ckks.from_bytes(ray.get(holder[0]), ctx))


def _elementwise_task(phash: str, params: bytes, op: ElementwiseOp, rows, arr, metas, rlk_digest, rlk_holder,
                      threads: int):
    """One group of ciphertexts through one elementwise step; rows[i]: the (op-local) row of ciphertext i."""
    import ray

    from hemlp import _core

    _maybe_die()
    _core.set_num_threads(threads)
    ctx = _worker_context(phash, params)
    rlk = _worker_relin_key(ray, ctx, rlk_digest, rlk_holder) if op.needs_relin else None
    fn = elementwise(ctx, op, rlk)
    out = [fn(r, ct) for r, ct in zip(rows, unpack_cts(ctx, arr, metas))]
    a, m = pack_cts(out)
    return a, m, ray.get_runtime_context().get_node_id()


_REMOTE = {}


def _remote():
    if "ew" not in _REMOTE:
        ray = _ray()
        _REMOTE["ew"] = ray.remote(num_returns=3, max_retries=TASK_RETRIES, retry_exceptions=False,
                                   num_cpus=1)(_elementwise_task)
    return _REMOTE["ew"]


# ----------------------------------------------------------------------------- driver side

_LAST_RLK: list = []  # [(relin key, its bytes, their SHA-256)]: the driver's last key sent


def _relin_bytes(relin_key) -> tuple:
    """The relinearisation key's bytes and digest (the workers cache the decoded key by it), kept for the last key:
    a batch job's runs send the same key, and serialising and hashing it cost ~20 ms a run here."""
    if not _LAST_RLK or _LAST_RLK[0][0] is not relin_key:
        data = relin_key.to_bytes()
        _LAST_RLK[:] = [(relin_key, data, hashlib.sha256(data).hexdigest())]
    return _LAST_RLK[0][1:]


def _ray_driver_init(self, num_workers, grid, cts_per_task, threads_per_task) -> None:
    """The state RayExecutor and RayProgram share; they need a connected Ray (ray_session)."""
    ray = _ray()
    if not ray.is_initialized():
        raise RuntimeError(f"{type(self).__name__} needs a connected Ray: use it inside "
                           "hemlp.runtime.ray_runtime.ray_session")
    self.ray = ray
    self.num_workers = int(num_workers or max(1, int(ray.cluster_resources().get("CPU", 1))))
    self.grid, self.cts_per_task, self.threads = grid, cts_per_task, int(threads_per_task)
    self.stats: dict = {}
    self._rlk = None      # (relin key object, digest, [ref]) of this run


class RayExecutor:
    """The executor of ``local.run`` on a connected Ray (use inside ``ray_session``).

    num_workers: the worker count the planner's grids and the group count are made for (default: the
    cluster's CPUs). grid: None (planner), (p_m, p_n, p_k) for every PCMM (ray_pcmm: no part axis), or
    {step name: grid}.
    cts_per_task: ciphertexts per elementwise task (default: the step's ciphertexts spread over
    2 x num_workers tasks). stats: filled per step (PCMM: ray_pcmm's stats; elementwise: tasks, bytes,
    nodes, phases)."""

    name = "ray"

    def __init__(self, num_workers: int | None = None, grid=None, cts_per_task: int | None = None,
                 threads_per_task: int = 1):
        _ray_driver_init(self, num_workers, grid, cts_per_task, threads_per_task)
        self._params = {}     # phash -> Params bytes

    def _grid_for(self, step):
        g = self.grid
        if isinstance(g, dict):
            return g.get(step)
        return g

    def pcmm(self, U, C, *, bias=None, weight_bits: int = 20, step=None):
        st = {}
        y = ray_pcmm(U, C, num_workers=self.num_workers, grid=self._grid_for(step), weight_bits=weight_bits,
                     bias=bias, stats=st)
        self.stats[step] = dict(st, op="pcmm")
        return y

    def pcmm_gather(self, U, C, index, *, bias=None, weight_bits: int = 20, step=None):
        st = {}
        y = ray_pcmm_gather(U, C, index, num_workers=self.num_workers, grid=self._grid_for(step),
                            weight_bits=weight_bits, bias=bias, stats=st)
        self.stats[step] = dict(st, op="pcmm_gather")
        return y

    def _relin(self, relin_key):
        if self._rlk is None or self._rlk[0] is not relin_key:
            data, digest = _relin_bytes(relin_key)
            self._rlk = (relin_key, digest, [self.ray.put(data)])
        return self._rlk[1], self._rlk[2]

    def map_cts(self, ctx, C, op: ElementwiseOp, relin_key, step=None):
        from hemlp.linalg import CtMatrix

        ray = self.ray
        t0 = time.perf_counter()
        if ctx.hash not in self._params:
            self._params[ctx.hash] = ctx.params.to_bytes()
        params = self._params[ctx.hash]
        digest, holder = self._relin(relin_key) if op.needs_relin else (None, None)
        n = len(C.cts)
        per = self.cts_per_task or max(1, -(-n // (2 * self.num_workers)))
        task = _remote()
        pending, sent = [], 0
        for g0 in range(0, n, per):
            g1 = min(n, g0 + per)
            r0, r1 = g0 // C.chunks, (g1 - 1) // C.chunks + 1
            rows = [i // C.chunks - r0 for i in range(g0, g1)]
            arr, metas = pack_cts(C.cts[g0:g1])
            sent += arr.nbytes if isinstance(arr, np.ndarray) else sum(a.nbytes for a in arr)
            refs = task.options(scheduling_strategy="SPREAD").remote(
                ctx.hash, params, op.rows(r0, r1), rows, arr, metas, digest, holder, self.threads)
            pending.append((g0, refs))
        t_sub = time.perf_counter()
        out = [None] * n
        got, nodes = 0, set()
        for g0, (a_ref, m_ref, node_ref) in pending:
            arr, metas = ray.get([a_ref, m_ref])
            got += arr.nbytes if isinstance(arr, np.ndarray) else sum(a.nbytes for a in arr)
            out[g0: g0 + len(metas)] = unpack_cts(ctx, arr, metas)
            nodes.add(ray.get(node_ref))
            del arr
        self.stats[step] = dict(op=op.kind, tasks=len(pending), cts_per_task=per, sent_bytes=sent, result_bytes=got,
                                nodes=sorted(nodes), seconds=time.perf_counter() - t0,
                                phases=dict(submit=t_sub - t0, wait_import=time.perf_counter() - t_sub))
        return CtMatrix(ctx, out, C.shape, C.chunks, C.format)


# ============================================================================= whole programs, blocks stay in the store
#
# A value between layers is a _Dist: blocks of ciphertexts (a row range x a chunk range). A block lives in the object
# store as two uint64 arrays, one per polynomial part (c0, c1), each (L, rows, chunks, N), limb-major: one limb of a
# part is a contiguous (rows, chunks N) matrix that the exact GEMM reads in place (zero-copy; a chunk range is a
# row-strided view), and a task that works on one part takes only that part's object (across nodes only it moves).
# Several input blocks are summed mod q (exact, so the sum of the per-block products has the same bits as one
# product). A layer's tasks return their output blocks and the next layer's tasks take them by ObjectRef; the driver
# only sees small per-block metadata (levels, scales, timings, byte counts) and materialises the final output.
#
# A group is one task wave: a PCMM (or an add, or an elementwise step) plus the elementwise steps that follow it on
# the same rows (square / poly / affine whose input has no other consumer), fused into the producing task.
# Grid (p_m, p_n, p_k, p_s): p_m output-row blocks, p_n chunk blocks, p_k reduction blocks, p_s in {1, 2} part
# blocks (the two polynomials of every ciphertext in different tasks).
# - p_k = p_s = 1: one task per (row block, chunk block) does everything: product -> x K, rescale, bias -> fused steps.
# - p_k = 1, p_s = 2: task (i, j, part) computes that part of the product and its epilogue (x K, the rescale and the
#   bias act on each polynomial alone: pcmm_epilogue_part, bit-identical) and returns that part of the output block.
#   The work splits exactly in two with no partial sums; the elementwise steps that followed (they need both parts)
#   run as the next wave over row groups.
# - p_k > 1: "partial" tasks (i, j, t, g) return their part(s) of U~[i, t] X[t, j] mod q in p_k p_s row pieces;
#   "reduce" task (i, j, s) adds piece s of the partials mod q and runs the epilogue and the fused steps, so the
#   rescale and the activations stay spread over p_m p_n p_k p_s tasks.

_PARTS = (0, 1)

_MALLOC_TUNED = []


def _tune_malloc() -> None:
    """Once per worker process: glibc serves large arrays from the heap and keeps freed memory (M_MMAP_MAX = 0,
    M_TRIM_THRESHOLD = 2 GiB). Otherwise every array above 32 MB (a limb of a layer's product, a block) is a fresh
    mmap whose pages fault in one by one on first touch, every task (measured here: 1.1 GB in 3.7 s fresh vs
    0.09 s reused, on a VM under load). The in-process runtime never allocates such arrays (its ciphertexts are
    0.8 MB each). And one arena (M_ARENA_MAX = 1): the native kernels' OpenMP threads allocate scratch per call
    (the PCMM's per-thread GEMM output, 16 MB at N = 2^14), and a thread's own arena gave that memory back to the
    kernel between calls whatever the trim threshold (measured, 784-128-64-10 at batch 8 192 in a 2-thread task:
    about 10 k page faults and 0.2 CPU seconds per run more than with one arena; the in-process runtime, on
    glibc's defaults, faults none)."""
    if _MALLOC_TUNED:
        return
    _MALLOC_TUNED.append(True)
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.mallopt(-8, 1)            # M_ARENA_MAX
        libc.mallopt(-4, 0)            # M_MMAP_MAX
        libc.mallopt(-1, 2**31 - 1)    # M_TRIM_THRESHOLD
    except (OSError, AttributeError):  # not glibc: nothing to tune
        pass


_STAGING: dict = {}


def _staging(shape) -> np.ndarray:
    """The driver's reused export buffer for input blocks (ray.put copies it into the store; see _tune_malloc)."""
    n = int(np.prod(shape))
    buf = _STAGING.get("buf")
    if buf is None or buf.size < n:
        _STAGING.clear()
        buf = _STAGING["buf"] = np.empty(n, dtype=np.uint64)
    return buf[:n].reshape(shape)


def release_staging() -> None:
    """Free the driver's input export buffer (kept between runs to avoid page faults on every input)."""
    _STAGING.clear()


def _ct_bytes(ctx, level: int) -> int:
    """Bytes of one RLWE ciphertext's residues at `level` (2 polynomials, level + 1 limbs, N uint64 each)."""
    return 2 * (level + 1) * ctx.N * 8


def _meta_of(o) -> tuple:
    return (o.level, o.scale, o.slots, o.encoding, o.is_complex, o.key_id)


def _export(objs, nr: int, nc: int, N: int, out: np.ndarray | None = None) -> np.ndarray:
    """(2, L, nr, nc, N) uint64: part p of nr x nc (row-major) native ciphertexts of one level is arr[p]."""
    L = objs[0].level + 1
    if any(o.level + 1 != L or o.size != 2 for o in objs):
        raise LevelError("a block of ciphertexts must share one level and be relinearised (size 2)")
    from hemlp import _core

    arr = np.empty((2, L, nr, nc, N), dtype=np.uint64) if out is None else out
    if not arr.flags.c_contiguous:
        raise ValueError("_export: out must be C-contiguous (the native copy writes through a reshaped view)")
    for p in _PARTS:
        _core.export_part(objs, p, arr[p].reshape(L, nr * nc, N))  # one native copy per polynomial
    return arr


def _import_block(ctx, cells: dict, parts, desc, metas, rows, cols) -> None:
    """Ciphertexts (r, j) of the block (global indices) that fall in rows x cols, into cells[(r, j)]."""
    from hemlp import _core
    from hemlp.ckks import Ciphertext

    r0, r1, c0, c1 = desc
    nc = c1 - c0
    ra, rb, ca, cb = max(r0, rows[0]), min(r1, rows[1]), max(c0, cols[0]), min(c1, cols[1])
    if ra >= rb or ca >= cb:
        return
    if isinstance(parts[0], list):  # a ct-major input part: (limbs, N) arrays, row-major over rows x chunks
        for r in range(ra, rb):
            for j in range(ca, cb):
                k = (r - r0) * nc + (j - c0)
                m = metas[k]
                obj = ctx._e.import_ciphertext([parts[0][k], parts[1][k]], m[0], m[1], m[2], m[3], m[4], m[5], None)
                cells[r, j] = ctx._w(Ciphertext, obj)
        return
    sel = [metas[(r - r0) * nc + (j - c0)] for r in range(ra, rb) for j in range(ca, cb)]
    if all(m == sel[0] for m in sel):  # one native call for the range: one copy per polynomial, range-checked
        objs = _core.cts_from_parts(ctx._e, parts[0][:, ra - r0: rb - r0, ca - c0: cb - c0],
                                    parts[1][:, ra - r0: rb - r0, ca - c0: cb - c0], *sel[0])
        w = cb - ca
        for k, obj in enumerate(objs):
            cells[ra + k // w, ca + k % w] = ctx._w(Ciphertext, obj)
        return
    for r in range(ra, rb):
        for j in range(ca, cb):
            m = metas[(r - r0) * nc + (j - c0)]
            obj = ctx._e.import_ciphertext([parts[0][:, r - r0, j - c0], parts[1][:, r - r0, j - c0]],
                                           m[0], m[1], m[2], m[3], m[4], m[5], None)
            cells[r, j] = ctx._w(Ciphertext, obj)


def _import_range(ctx, blocks, rows, cols) -> list:
    cells = {}
    for parts, desc, metas in blocks:
        _import_block(ctx, cells, parts, desc, metas, rows, cols)
    return [cells[r, j] for r in range(*rows) for j in range(*cols)]


def _pairs(arrays, descs) -> list:
    """(parts, desc, metas) per block from task arguments that hold both parts of each block in turn."""
    return [((arrays[2 * k], arrays[2 * k + 1]), d, m) for k, (d, m) in enumerate(descs)]


def _limb_rows(part, l: int, a: int, b: int, j: int, nc: int) -> list:
    """Limb l of the ciphertexts in local rows a:b, local chunk j of a block's part, as (1, N) row views: from a
    limb-major array (limbs, rows, chunks, N) or a ct-major input part (a list of (limbs, N) arrays, row-major
    over the block's rows x nc chunks)."""
    if isinstance(part, list):
        return [part[r * nc + j][l: l + 1] for r in range(a, b)]
    return [part[l, r, j][None] for r in range(a, b)]


def _product(ctx, spec, U: np.ndarray, blocks) -> dict:
    """{part: Y (L, |R| P |J|, N)} for the parts in spec["parts"]: U~[R, T] X[T, J] mod q_l, limb-major with output
    ciphertext (r, p, j) at index (r P + p) |J| + j (rows (r, p) -> r P + p): the layout of a block's part, so the
    epilogue writes output blocks directly. The GEMM writes into Y in place. The factor K is applied in the
    epilogue (the same Shoup product as the native PCMM's)."""
    from hemlp import _core

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
                                    _limb_rows(arrs[p], l, a, b, j - c0, ncb)], q,
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
                        rows[row] = _limb_rows(arrs[p], l, rr, rr + 1, lj, where[row, J0][3])[0]
                    else:  # the chunks are in several blocks or ciphertexts: this row is joined once per limb
                        rows[row] = np.concatenate([_limb_rows(w[0][p], l, w[1], w[1] + 1, w[2], w[3])[0]
                                                    for w in (where[row, jj] for jj in range(J0, J1))], axis=1)
                for pp in range(P):
                    plan.apply([rows[int(row)] for row in index[:, pp]], q, out=Y[l, :, pp])
            Ys[p] = Y.reshape(L, nR * P * nJ, N)
    return Ys


def _out_meta(ctx, spec) -> tuple:
    """Metadata of the PCMM's outputs: one level down, scale / q_level (as the native rescale computes it)."""
    level, _, slots, enc, is_complex, key_id = spec["in_meta"]
    return (level - 1, spec["scale_out"] / float(ctx.modulus(level)), slots, enc, is_complex, key_id)


def _epilogue(ctx, spec, Ys: dict, secs: dict, head: str) -> dict:
    """{part: Z (L - 1, count, N)}: x K, rescale and, in slot encoding, the bias (a constant on c0), per part in one
    native kernel: the same arithmetic as linalg.pcmm's native epilogue. Y is consumed (x K in place)."""
    from hemlp import _core

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
        Z[p] = _core.pcmm_epilogue_part(ctx._e, Y, level, spec["K"], p, spec["scale_out"], bvals if p == 0 else [])
    secs[head] = secs.get(head, 0.0) + time.perf_counter() - t0
    return Z


def _apply_ops(ctx, spec, cts: list, nc: int, rlk, secs: dict, levels: dict) -> list:
    for name, op in spec["ops"]:
        t0 = time.perf_counter()
        fn = elementwise(ctx, op, rlk)
        cts = [fn(i // nc, ct) for i, ct in enumerate(cts)]  # op rows are local to the block (op.rows(r0, r1))
        secs[name] = secs.get(name, 0.0) + time.perf_counter() - t0
        levels[name] = cts[0].level
    return cts


def _block_out(ctx, spec, Z: dict, rlk, secs: dict, levels: dict):
    """Both parts of a PCMM's output block (after the epilogue), through the coefficient-encoding bias and the
    fused steps when there are any: (part 0, part 1, block metas)."""
    from hemlp import _core
    from hemlp.ckks import Ciphertext

    head, (r0, r1), (c0, c1) = spec["head"], spec["out_rows"], spec["J"]
    nr, nc = r1 - r0, c1 - c0
    meta = _out_meta(ctx, spec)
    levels[head] = meta[0]
    coeff_bias = spec["bias"] is not None and meta[3] != 0
    shape = (meta[0] + 1, nr, nc, ctx.N)
    if not spec["ops"] and not coeff_bias:  # the epilogue's arrays are the block
        return Z[0].reshape(shape), Z[1].reshape(shape), [meta] * (nr * nc)
    t0 = time.perf_counter()
    cts = [ctx._w(Ciphertext, o) for o in _core.cts_from_parts(ctx._e, Z[0].reshape(shape), Z[1].reshape(shape), *meta)]
    if coeff_bias:  # an encoded constant, as linalg.pcmm_gather does in coefficient encoding
        cts = [ctx.add(ct, float(spec["bias"][(r0 + i // nc) // spec["P"]])) for i, ct in enumerate(cts)]
    secs[head] = secs.get(head, 0.0) + time.perf_counter() - t0
    cts = _apply_ops(ctx, spec, cts, nc, rlk, secs, levels)
    t0 = time.perf_counter()
    objs = [ct._obj for ct in cts]
    out = _export(objs, nr, nc, ctx.N)
    last = spec["ops"][-1][0] if spec["ops"] else head
    secs[last] = secs.get(last, 0.0) + time.perf_counter() - t0
    return out[0], out[1], [_meta_of(o) for o in objs]


def _resolve_metas(m, meta_dicts) -> list:
    """A block's per-ciphertext metas: a list, or ("arg", k, a, b) = the metas a:b of the k-th meta dict argument
    (a block produced by an earlier wave, whose metas the driver has not fetched)."""
    if isinstance(m, tuple) and m and m[0] == "arg":
        _, k, a, b = m
        got = meta_dicts[k]["metas"]
        return got if a is None else got[a:b]
    return m


def _pcmm_in_meta(spec, metas_per_block) -> dict:
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


def _nbytes(a) -> int:
    """Bytes of a task argument: an array, or a ct-major input part (a list of (limbs, N) arrays)."""
    return sum(x.nbytes for x in a) if isinstance(a, list) else a.nbytes


def _minor_faults() -> int:
    """This process's minor page faults so far (first touches of fresh memory: a task's page faults say whether
    its arrays landed on memory the process had already mapped)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _group_task(spec: dict, *arrays):
    """One task of a group (see above). arrays: the ObjectRef arguments, resolved zero-copy by Ray (weights, then
    the parts of the input blocks, or partial pieces). Returns the output array(s) and a small meta dict (last)."""
    import ray

    from hemlp import _core

    _maybe_die()
    t_start, cpu_start, wall_start = time.perf_counter(), time.process_time(), time.time()
    faults_start = _minor_faults()
    _tune_malloc()
    _core.set_num_threads(spec["threads"])
    ctx = _worker_context(spec["phash"], spec["params"])
    kind, head = spec["kind"], spec["head"]
    key_read = 0
    rlk = None
    if spec["rlk"] is not None:
        digest, holder = spec["rlk"]
        miss = ("rlk", ctx.hash, digest) not in _WORKER_CACHE
        rlk = _worker_relin_key(ray, ctx, digest, holder)
        key_read = spec["rlk_bytes"] if miss else 0
    secs, levels = {}, {}
    n_meta = spec.get("n_meta", 0)
    if n_meta:  # the previous waves' meta dicts (their block metas), resolved by Ray like the arrays
        arrays, meta_dicts = arrays[:-n_meta], arrays[-n_meta:]
    else:
        meta_dicts = ()
    descs = [(d, _resolve_metas(m, meta_dicts)) for d, m in spec["inputs"]]
    if spec.get("factor") is not None:  # a PCMM: its input's metadata is known here, not at submission
        src = ([_resolve_metas(m, meta_dicts) for m in spec["meta_inputs"]] if "meta_inputs" in spec  # reduce tasks
               else [m for _, m in descs])
        spec = dict(spec, **_pcmm_in_meta(spec, src))

    def finish(outs, metas=None):
        meta = dict(node=ray.get_runtime_context().get_node_id(), read=sum(map(_nbytes, arrays)),
                    key_read=key_read, written=sum(o.nbytes for o in outs), secs=secs, levels=levels, metas=metas,
                    wave=spec["wave"], pid=os.getpid(), threads=spec["threads"],
                    page_faults=_minor_faults() - faults_start, seconds=time.perf_counter() - t_start,
                    cpu=time.process_time() - cpu_start,
                    span=(wall_start, time.time()))
        return (*outs, meta)

    if kind == "segment":
        return finish(*_segment_run(ctx, spec, arrays, descs, rlk, secs, levels))
    if kind in ("pcmm", "partial"):
        parts = spec["parts"]
        n = len(parts)
        U = arrays[0]
        blocks = [(dict(zip(parts, arrays[1 + n * k: 1 + n * (k + 1)])), d, m) for k, (d, m) in enumerate(descs)]
        t0 = time.perf_counter()
        Ys = _product(ctx, spec, U, blocks)
        secs[head] = time.perf_counter() - t0
        if kind == "partial":  # p_k > 1: U~ X mod q in row pieces, one per reduce task, each part in turn
            nJ = spec["J"][1] - spec["J"][0]
            outs = [np.ascontiguousarray(Ys[p][:, a * nJ: b * nJ]) for a, b in spec["pieces"] for p in parts]
            return finish(outs)
        Z = _epilogue(ctx, spec, Ys, secs, head)
        del Ys
        if n == 1:  # p_s = 2: this task's part of the output block, in row pieces (one per following task)
            meta = _out_meta(ctx, spec)
            levels[head] = meta[0]
            g0, nc = spec["out_rows"][0], spec["J"][1] - spec["J"][0]
            z = Z[parts[0]]
            outs = [np.ascontiguousarray(z[:, (a - g0) * nc: (b - g0) * nc]).reshape(z.shape[0], b - a, nc, ctx.N)
                    for a, b in spec["pieces"]]
            return finish(outs, [meta] * ((spec["out_rows"][1] - g0) * nc))
        *outs, metas = _block_out(ctx, spec, Z, rlk, secs, levels)
        return finish(outs, metas)
    if kind == "reduce":
        t0 = time.perf_counter()
        L = arrays[0].shape[0]
        qv = np.array([[[ctx.modulus(l)]] for l in range(L)], dtype=np.uint64)
        Ys = {}
        for p, piece in zip(spec["piece_parts"], arrays):
            Ys[p] = piece if p not in Ys else _add_mod_limbs(Ys[p], piece, qv)  # read-only views; sums are new
        secs[head] = time.perf_counter() - t0
        Z = _epilogue(ctx, spec, Ys, secs, head)
        del Ys
        *outs, metas = _block_out(ctx, spec, Z, rlk, secs, levels)
        return finish(outs, metas)
    if kind == "ew":
        t0 = time.perf_counter()
        cts = _import_range(ctx, _pairs(arrays, descs), spec["out_rows"], spec["J"])
        secs["_import"] = time.perf_counter() - t0
    else:
        raise AssertionError(kind)
    nc = spec["J"][1] - spec["J"][0]
    cts = _apply_ops(ctx, spec, cts, nc, rlk, secs, levels)
    t0 = time.perf_counter()
    objs = [ct._obj for ct in cts]
    out = _export(objs, len(objs) // nc, nc, ctx.N)
    last = spec["ops"][-1][0] if spec["ops"] else head
    secs[last] = secs.get(last, 0.0) + time.perf_counter() - t0
    return finish([out[0], out[1]], [_meta_of(o) for o in objs])


def _pieces(rows: int, n: int) -> list:
    """rows split into min(rows, n) contiguous (a, b) ranges, as the grids split them."""
    from hemlp.runtime.ray_runtime import _splits

    return [(r.start, r.stop) for r in _splits(rows, max(1, min(rows, n)))]


def _pcmm_in_place(ctx, s, blocks: list, shape: tuple, chunks: int, bits: int):
    """PCMM step s read straight from its input's store blocks, no import: linalg.pcmm_gather's product over
    (limbs, N) views of each block's rows, ct-major lists or limb-major arrays alike (pcmm_rlwe_rows: pcmm_rlwe over
    row memory, the same arithmetic and threads, so the same bits)."""
    from hemlp import _core, linalg
    from hemlp.linalg import CtMatrix

    U = np.asarray(s.U, dtype=np.float64)
    d1, d2 = U.shape
    index = np.arange(d2)[:, None] if s.index is None else np.asarray(s.index)
    if s.index is None and d2 != shape[0]:
        raise ShapeError(f"step {s.out}: U is {d1}x{d2} but its input has {shape[0]} rows")
    level = s.level_out + 1
    meta = _pcmm_in_meta(dict(level=level, factor=1.0), [m for _, _, m in blocks])["in_meta"]
    where = {}  # (row, chunk) -> (part 0 view, part 1 view), each (limbs, N)
    for parts, (r0, r1, c0, c1), _ in blocks:
        for r in range(r0, r1):
            for j in range(c0, c1):
                where[r, j] = tuple(a[(r - r0) * (c1 - c0) + j - c0] if isinstance(a, list) else a[:, r - r0, j - c0]
                                    for a in parts)

    def native(plan, rows, *args):
        return _core.pcmm_rlwe_rows(ctx._e, plan, [r and r[0] for r in rows], [r and r[1] for r in rows], *args,
                                    *meta)

    cts = linalg.gathered_product(ctx, U, index, lambda r, j: where[r, j], chunks, level, meta[3] == 0, bits, s.bias,
                                  True, native)
    return CtMatrix(ctx, cts, (d1 * index.shape[1], shape[1]), chunks, "rlwe")


def _segment_run(ctx, spec, arrays, descs, rlk, secs: dict, levels: dict):
    """A node-local task's steps (RayProgram._segment_wave): its input values imported from their blocks (its
    rows only for a split elementwise chain), the steps run by local.run_step on spec["threads"] native threads
    (the in-process arithmetic, so the same bits), then the output values exported part by part. An input that
    only PCMMs read (spec["in_place"]) is not imported: they read its blocks in the store (_pcmm_in_place)."""
    from hemlp.linalg import CtMatrix
    from hemlp.runtime.local import LocalExecutor, run_step

    t0 = time.perf_counter()
    rows, vals, stored, k = spec["out_rows"], {}, {}, 0
    for name, nb, shape, chunks in spec["values"]:
        blocks = [((arrays[2 * i], arrays[2 * i + 1]), *descs[i]) for i in range(k, k + nb)]
        k += nb
        if name in spec.get("in_place", ()):
            stored[name] = (blocks, shape, chunks)
            continue
        rr = rows if rows is not None else (0, shape[0])
        vals[name] = CtMatrix(ctx, _import_range(ctx, blocks, rr, (0, chunks)), (rr[1] - rr[0], shape[1]), chunks,
                              "rlwe")
    secs["_import"] = time.perf_counter() - t0
    ex = LocalExecutor()
    for s in spec["steps"]:
        t0 = time.perf_counter()
        if s.op == "pcmm" and s.inputs[0] in stored:
            y = _pcmm_in_place(ctx, s, *stored[s.inputs[0]], spec["bits"])
        elif s.op in _ELEMENTWISE and rows is not None:  # rows r0:r1 of the chain: per-row constants of those rows
            y = ex.map_cts(ctx, vals[s.inputs[0]], ElementwiseOp.from_step(s).rows(*rows), rlk, step=s.out)
        else:
            y = run_step(ctx, s, vals, ex, rlk, spec["bits"])
        vals[s.out] = y
        secs[s.out] = secs.get(s.out, 0.0) + time.perf_counter() - t0
        if s.op not in ("alias", "add"):
            levels[s.out] = y.level
    t0 = time.perf_counter()
    outs, metas = [], []
    for name in spec["outputs"]:  # in row pieces, so that a next task reads only the rows it needs
        C = vals[name]
        objs = [ct._obj for ct in C.cts]
        nc = C.chunks
        for a, b in _pieces(len(objs) // nc, spec["n_pieces"]):
            out = _export(objs[a * nc: b * nc], b - a, nc, ctx.N)
            outs += [out[0], out[1]]
        metas += [_meta_of(o) for o in objs]
    last = spec["steps"][-1].out
    secs[last] = secs.get(last, 0.0) + time.perf_counter() - t0
    return outs, metas


def _add_mod_limbs(a: np.ndarray, b: np.ndarray, qv: np.ndarray) -> np.ndarray:
    """(a + b) mod q_l for limb-major arrays (L, ..., N); qv: the moduli as a (L, 1, 1) uint64 array."""
    s = a + b  # < 2 q < 2^63: no overflow
    np.subtract(s, qv, out=s, where=s >= qv)
    return s


def _group_remote(num_returns: int):
    key = ("group", num_returns)
    if key not in _REMOTE:
        ray = _ray()
        _REMOTE[key] = ray.remote(num_returns=num_returns, max_retries=TASK_RETRIES, retry_exceptions=False,
                                  num_cpus=1)(_group_task)
    return _REMOTE[key]


# ----------------------------------------------------------------------------- driver


class _Block:
    """A block in the store: refs, one ObjectRef per polynomial part."""
    __slots__ = ("refs", "r0", "r1", "c0", "c1", "metas", "nbytes", "meta_src")

    def __init__(self, refs, r0, r1, c0, c1, metas, nbytes, meta_src=None):
        self.refs, self.r0, self.r1, self.c0, self.c1, self.metas, self.nbytes = refs, r0, r1, c0, c1, metas, nbytes
        self.meta_src = meta_src  # (meta ref, a, b) while metas is None: the producing task's metas a:b

    @property
    def desc(self):
        return (self.r0, self.r1, self.c0, self.c1)


class _Dist:
    """A ciphertext matrix (rows x chunks) as blocks in the object store."""

    def __init__(self, shape, chunks: int, blocks: list, planned: tuple | None = None):
        self.shape, self.chunks, self.blocks = shape, chunks, blocks
        # (level, None, slots, encoding, is_complex, key_id) of blocks still being computed: the plan's level and
        # the input's labels; the scale is only known to the tasks (they get the producers' metas as arguments)
        self.planned = planned

    @property
    def rows(self) -> int:
        return self.shape[0]

    @property
    def level(self) -> int:
        return self.meta[0]

    @property
    def meta(self) -> tuple:
        m = self.blocks[0].metas
        return m[0] if m is not None else self.planned

    def overlapping(self, rows, cols) -> list:
        return [b for b in self.blocks if b.r0 < rows[1] and rows[0] < b.r1 and b.c0 < cols[1] and cols[0] < b.c1]


class _Wave:
    """What a group's submission returns: output blocks (both part refs, the meta ref whose block metas count, out
    rows, chunks), the other tasks' meta refs, the task count and the group's info (grid, model, shape)."""

    def __init__(self, final, others, tasks: int, info: dict):
        self.final, self.others, self.tasks, self.info = final, others, tasks, info


_ELEMENTWISE = ("square", "poly", "affine")
_SUPPORTED = ("input", "pcmm", "add", "alias", "output") + _ELEMENTWISE

#: RayProgram's choice between sharding a PCMM on its grid over several nodes and running it in a node-local task
#: (see _sharded). Measured on the 2-core reference VM (bench ray --model mlp): one more wave of dependent tasks
#: costs about 5 ms of Ray's dispatch, and a task copies its returns into the store at about 6 GB/s.
RAY_WAVE_SECONDS = 0.005
RAY_STORE_COPY_BYTES_PER_S = 6e9
#: blocks pulled from another node's store: 1.4 GB/s between two raylets on this VM (a 600 MB object; 10 GbE
#: would give about 1.2 GB/s)
RAY_NODE_TRANSFER_BYTES_PER_S = 1.4e9


def _node_threads(ray, num_workers: int) -> int:
    """Threads (and CPUs) of a node-local task: the fewest CPUs of an alive node that has any, so that the task
    fits on every node, and at most num_workers."""
    cpus = [int(n["Resources"]["CPU"]) for n in ray.nodes() if n.get("Alive") and n["Resources"].get("CPU", 0) >= 1]
    return max(1, min([int(num_workers)] + cpus))


def _store_grid(g, d1: int, c: int, d2: int, num_workers: int, parts_ok: bool, default) -> tuple:
    """A validated (p_m, p_n, p_k, p_s) from a planner Grid / 3- or 4-tuple (p_s = 1 if absent) or default()."""
    from hemlp.runtime.ray_runtime import _grid_dims

    if g is None:
        return default()
    dims = (g.p_m, g.p_n, g.p_k, g.p_s) if hasattr(g, "p_s") else tuple(g)
    ps = 1
    if len(dims) == 4:
        dims, ps = dims[:3], dims[3]
        if not isinstance(ps, (int, np.integer)) or ps not in (1, 2):
            raise ShapeError(f"grid: p_s (the part split) must be 1 or 2 (a ciphertext has two polynomials), got {ps!r}")
        if ps == 2 and not parts_ok:
            raise ShapeError("grid: p_s = 2 needs a slot-encoded bias (a coefficient-encoded bias is added to whole "
                             "ciphertexts); use p_s = 1")
    return (*_grid_dims(dims, d1, c, d2, num_workers), int(ps))


def _usable_cores() -> int:
    import os

    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


class _driver_threads:
    """Runs a block of the driver's native work (exporting the input, importing the output) on n threads, then
    restores the caller's setting."""

    def __init__(self, n: int):
        self.n = n

    def __enter__(self):
        from hemlp import _core

        self.prev = _core.get_num_threads()
        _core.set_num_threads(self.n)

    def __exit__(self, *exc):
        from hemlp import _core

        _core.set_num_threads(self.prev)
        return False


class RayProgram:
    """Runs a lowered program on a connected Ray with the activations in the object store between layers
    (use inside ``ray_session``; ``run_on_ray`` does both).

    num_workers: the worker count the grids are made for (default: the cluster's CPUs). grid: None (on one node
    the program runs node-local; across nodes, PCMMs worth a wave on the planner's ``grid_store`` for the workers,
    fewest object-store bytes, see ``_sharded``), (p_m, p_n, p_k[, p_s]) for every PCMM, or {step: grid} (those
    steps on their grids).
    cts_per_task: None (default) fuses every elementwise step into the task that produced its input or the next
    node-local task; a number runs elementwise steps as their own tasks over groups of that many ciphertexts. stats
    (after run): per step, the grid (sharded) or threads (node-local), tasks, nodes, bytes read / written through
    the store (measured: every put, argument and return is a numpy array whose size the tasks report) next to the
    model, seconds and the tasks' own seconds."""

    def __init__(self, num_workers: int | None = None, grid=None, cts_per_task: int | None = None,
                 threads_per_task: int = 1):
        _ray_driver_init(self, num_workers, grid, cts_per_task, threads_per_task)
        self.node_threads = _node_threads(self.ray, self.num_workers)

    # hooks (tests inject faults here)
    def _layer_start(self, name: str) -> None:
        pass

    # ---- helpers
    def _common(self, ctx, kind: str, head: str, needs_relin: bool) -> dict:
        spec = dict(kind=kind, head=head, phash=ctx.hash, params=self._params, threads=self.threads, rlk=None,
                    rlk_bytes=0, ops=[], index=None, bias=None, P=1, wave=0)
        if needs_relin:
            spec["rlk"], spec["rlk_bytes"] = self._rlk[1:], self._rlk_bytes
        return spec

    def _put_input(self, ctx, C, row_parts: int, col_parts: int, ctmajor: bool = False) -> _Dist:
        """The client's ciphertexts into the store once, in the blocks the first consumer reads (one object per
        part). All of it before the first task: a part split's second task needs the second part anyway, so
        putting the parts one by one under the first task only shifts the wait (measured).

        ctmajor (a PCMM reads the input): each part object is the list of the block's ciphertexts' polynomials,
        (limbs, N) views of the native memory that the put copies straight into the store — one copy instead of an
        export into a staging array and then the put's copy; the GEMM reads the rows from that list in place.
        Otherwise (elementwise steps and additions import whole ciphertexts) one limb-major array per part,
        exported on every core: no task runs yet."""
        from hemlp.runtime.ray_runtime import _splits

        t0 = time.perf_counter()
        ray, d, c = self.ray, C.shape[0], C.chunks
        blocks, put = [], 0
        with _driver_threads(_usable_cores()):
            for rs in _splits(d, min(row_parts, d)):
                for cs in _splits(c, min(col_parts, c)):
                    objs = [C.cts[r * c + j]._obj for r in range(rs.start, rs.stop) for j in range(cs.start, cs.stop)]
                    L = objs[0].level + 1
                    if any(o.level + 1 != L or o.size != 2 for o in objs):
                        raise LevelError("a block of ciphertexts must share one level and be relinearised (size 2)")
                    nbytes = 2 * L * len(objs) * ctx.N * 8
                    if ctmajor:
                        refs = tuple(ray.put([o.poly_view(p) for o in objs]) for p in _PARTS)
                    else:
                        shape = (2, L, rs.stop - rs.start, cs.stop - cs.start, ctx.N)
                        arr = _export(objs, shape[2], shape[3], ctx.N, _staging(shape))
                        refs = (ray.put(arr[0]), ray.put(arr[1]))
                        del arr
                    blocks.append(_Block(refs, rs.start, rs.stop, cs.start, cs.stop, [_meta_of(o) for o in objs],
                                         nbytes))
                    put += nbytes
        self._input_stats = dict(op="input", put_bytes=put, blocks=len(blocks), nodes=[], tasks=0,
                                 seconds=time.perf_counter() - t0)
        self._t_ready = time.time()  # the first wave's time starts after the put
        return _Dist((d, C.shape[1]), c, blocks)

    def _submit(self, num_returns: int, spec: dict, *args, metas: list = (), cpus: int = 1, spread: bool = True):
        """One group task, spread over the nodes (spread=False: Ray's default, locality-aware placement, for a
        wave of one task: it goes where its arguments' bytes are). metas: the meta refs its spec names ("arg", k,
        ..): passed after the arrays, so the task waits for them as for its arrays and the driver never waits
        between waves. cpus: the CPUs it holds (= its native threads, spec["threads"])."""
        if metas:
            spec = dict(spec, n_meta=len(metas))
        opts = dict(scheduling_strategy="SPREAD" if spread else "DEFAULT")
        if cpus != 1:
            opts["num_cpus"] = cpus
        return _group_remote(num_returns).options(**opts).remote(spec, *args, *metas)

    @staticmethod
    def _meta_spec(b: "_Block", metas: list):
        """A block's metas for a task spec: the list when known, else ("arg", k, a, b) naming the producing task's
        meta ref, appended to `metas` (the task's meta arguments) once."""
        if b.metas is not None:
            return b.metas
        ref, a, bb = b.meta_src
        for k, r in enumerate(metas):
            if r == ref:
                return ("arg", k, a, bb)
        metas.append(ref)
        return ("arg", len(metas) - 1, a, bb)

    def _as_dist(self, ctx, v, row_parts: int, col_parts: int, ctmajor: bool = False) -> _Dist:
        if isinstance(v, _Dist):
            return v
        return self._put_input(ctx, v, row_parts, col_parts, ctmajor)

    def _materialise(self, ctx, D: _Dist):
        from hemlp.linalg import CtMatrix

        cells = {}
        for b in D.blocks:
            parts = self.ray.get(list(b.refs))
            _import_block(ctx, cells, parts, b.desc, b.metas, (b.r0, b.r1), (b.c0, b.c1))
            del parts
        return CtMatrix(ctx, [cells[r, j] for r in range(D.rows) for j in range(D.chunks)], D.shape, D.chunks, "rlwe")

    def _grid(self, s, d1: int, c: int, d2: int, H_in: float, H_out: float, d_in: int, P: int, parts_ok: bool,
              deferred_H: float | None):
        from hemlp.planner.grid import grid_store

        g = self.grid.get(s.out) if isinstance(self.grid, dict) else self.grid
        return _store_grid(g, d1, c, d2, self.num_workers, parts_ok, default=lambda: grid_store(
            d1, c, d2, self.num_workers, H_in, H_out, 8.0, d_in, P, parts=2 if parts_ok else 1,
            deferred_H=deferred_H).dims4)

    def _sharded(self, ctx, s, chunks: int) -> bool:
        """Whether PCMM step s runs on its grid (tasks of one thread each over the workers) or in a node-local task
        with the steps around it. Sharded when a grid is given for it; otherwise only when the workers outnumber a
        node-local task's threads (several nodes) and the grid saves more time than one more wave costs
        (RAY_WAVE_SECONDS + its tasks' copy of the outputs into the store) plus the transfer between nodes of the
        share of its input and output that the other nodes' tasks read and write (RAY_NODE_TRANSFER_BYTES_PER_S;
        measured on two raylets: a 128 x 64 layer sharded took 0.21 s against 0.16 s in one task). The work: the
        planner's PCMM cost (multiply-accumulates of the exact GEMM x planner.layouts.unit_costs()["pcmm_mac"]).
        Within a node a task
        with all its CPUs runs the same cells as threads, reading its input in place: no wave, no copy of the
        output between processes (measured: bench ray --model mlp)."""
        if self.grid is not None and (not isinstance(self.grid, dict) or s.out in self.grid):
            return True
        p, t = self.num_workers, self.node_threads
        if p <= t:
            return False
        from hemlp.planner.layouts import unit_costs

        d1, d2 = np.shape(s.U)
        P = 1 if s.index is None else np.shape(s.index)[1]
        work = d1 * d2 * P * chunks * 2 * ctx.N * (s.level_out + 2) * unit_costs()["pcmm_mac"]  # input: l_out + 2 limbs
        out_bytes = d1 * P * chunks * _ct_bytes(ctx, s.level_out)
        wave = RAY_WAVE_SECONDS + out_bytes / (p * RAY_STORE_COPY_BYTES_PER_S)
        moved = (1 - t / p) * (d2 * chunks * _ct_bytes(ctx, s.level_out + 1) + out_bytes)  # the other nodes' share
        return work / t - work / p > wave + moved / RAY_NODE_TRANSFER_BYTES_PER_S

    def _segment_wave(self, ctx, seg: list, vals: dict, outputs: list) -> dict:
        """Steps `seg` (no sharded PCMM among them) in node-local tasks of node_threads threads: a task imports its
        input blocks (both parts; an input that only PCMMs read is read in place instead), runs the steps with the
        in-process code (local.run_step) and returns the values that later steps read (`outputs`). A chain of
        elementwise steps splits its rows over num_workers // node_threads tasks; anything else is one task.
        Returns {name: _Dist}."""
        from hemlp.runtime.ray_runtime import _splits

        t0 = time.perf_counter()
        produced = {e.out for e in seg}
        ins = list(dict.fromkeys(n for e in seg for n in e.inputs if n not in produced))
        X = {n: self._as_dist(ctx, vals[n], 1, 1, ctmajor=True) for n in ins}
        shapes = {n: X[n].shape for n in ins}
        levels = {n: X[n].level for n in ins}
        for e in seg:
            rows, cols = shapes[e.inputs[0]]
            if e.op == "pcmm":
                rows = np.shape(e.U)[0] * (1 if e.index is None else np.shape(e.index)[1])
            shapes[e.out] = (rows, cols)
            levels[e.out] = levels[e.inputs[0]] if e.op == "alias" else e.level_out
        x0 = X[ins[0]]
        chunks, t = x0.chunks, self.node_threads
        chain = (len(ins) == 1 and all(e.op in _ELEMENTWISE for e in seg)
                 and all(e.inputs[0] == a.out for a, e in zip(seg, seg[1:])))
        R = shapes[ins[0]][0]
        ranges = [(r.start, r.stop) for r in _splits(R, min(R, max(1, self.num_workers // t)))] if chain else [None]
        needs_relin = any(e.op in ("square", "poly", "mul", "matmul") for e in seg)
        base = self._common(ctx, "segment", seg[0].out, needs_relin)
        # inputs that only PCMMs of the segment read stay in the store: the PCMM reads their blocks in place
        in_place = [n for n in ins if all(e.op == "pcmm" and e.inputs == [n] for e in seg if n in e.inputs)]
        base.update(threads=t, bits=int(self._weight_bits), steps=seg, outputs=outputs, in_place=in_place)
        final, reads = [], 0
        for rr in ranges:
            margs: list = []
            inputs, args, values = [], [], []
            for n in ins:
                blks = X[n].blocks if rr is None else X[n].overlapping(rr, (0, chunks))
                values.append((n, len(blks), shapes[n], X[n].chunks))
                for b in blks:
                    inputs.append((b.desc, self._meta_spec(b, margs)))
                    args += list(b.refs)
                    reads += b.nbytes
            # each output in row pieces (num_workers in all): the next wave's tasks read only their rows
            n_pieces = max(1, self.num_workers // len(ranges))
            out_rows = {o: rr if rr is not None else (0, shapes[o][0]) for o in outputs}
            pieces = {o: _pieces(out_rows[o][1] - out_rows[o][0], n_pieces) for o in outputs}
            spec = dict(base, inputs=inputs, values=values, out_rows=rr, n_pieces=n_pieces)
            # one task: where its inputs are (on two raylets, SPREAD sent a one-task program's 1.2 GB input to the
            # other node: +50 % end to end, bench ray --nodes 2); several: over the nodes
            refs = self._submit(2 * sum(map(len, pieces.values())) + 1, spec, *args, metas=margs, cpus=t,
                                spread=len(ranges) > 1)
            k, off = 0, 0
            for o in outputs:
                r0 = out_rows[o][0]
                for a, b in pieces[o]:
                    count = (b - a) * chunks
                    final.append(((refs[k], refs[k + 1]), refs[-1], (r0 + a, r0 + b), (0, chunks),
                                  (off, off + count), o))
                    k, off = k + 2, off + count
        writes = sum(shapes[o][0] * chunks * _ct_bytes(ctx, levels[o]) for o in outputs)
        model = dict(reads=dict(inputs=reads), writes=dict(outputs=writes), total=reads + writes)
        wave = _Wave([f[:5] for f in final], [], len(ranges), dict(model=model, threads=t, in_place=in_place))
        labels = x0.meta[2:]
        blocks, dists = [], {}
        for f in final:
            nb = (f[2][1] - f[2][0]) * chunks * _ct_bytes(ctx, levels[f[5]])
            b = _Block(f[0], f[2][0], f[2][1], 0, chunks, None, nb, meta_src=(f[1], *f[4]))
            blocks.append(b)
            d = dists.setdefault(f[5], _Dist(shapes[f[5]], chunks, [], planned=(levels[f[5]], None, *labels)))
            d.blocks.append(b)
        group = [e for e in seg if e.op != "alias"] or seg[:1]
        self._pending.append((group, wave, blocks, time.perf_counter() - t0))
        return dists

    # ---- groups
    def _pcmm_group(self, ctx, s, X, ops, weight_bits: int, level_out: int) -> _Wave:
        from hemlp import linalg
        from hemlp.planner.grid import pcmm_store_bytes
        from hemlp.runtime.ray_runtime import _splits

        ray = self.ray
        U = np.asarray(s.U, dtype=np.float64)
        d1, d2 = U.shape
        index = None if s.index is None else np.asarray(s.index)
        P = 1 if index is None else index.shape[1]
        c = X.chunks
        d_in = X.shape[0]
        if index is None and d2 != d_in:
            raise ShapeError(f"step {s.out}: U is {d1}x{d2} but its input has {d_in} rows")
        level_in = X.level
        meta = X.meta if isinstance(X, _Dist) else _meta_of(X.cts[0]._obj)  # planned (scale None) while pending
        N = ctx.N
        H_in, H_out = 2 * (level_in + 1) * N * 8, 2 * (level_out + 1) * N * 8
        # Splitting the parts defers the fused steps to their own wave (they need both parts): the PCMM's output
        # (H_pcmm per ciphertext) is then written and read once more; grid_store weighs that.
        H_pcmm = 2 * level_in * N * 8
        parts_ok = s.bias is None or meta[3] == 0
        pm, pn, pk, ps = self._grid(s, d1, c, d2, H_in, H_out, d_in, P, parts_ok, H_pcmm if ops else None)
        X = self._as_dist(ctx, X, pk if index is None else 1, pn, ctmajor=True)
        meta = X.meta
        if meta[0] == 0:
            raise LevelError("pcmm: the encrypted matrix is at level 0; a PCMM needs one level for its rescale")
        if all(b.metas is not None for b in X.blocks):  # the client's input: checked before any task (tasks check
            _pcmm_in_meta(dict(level=meta[0], factor=1.0), [b.metas for b in X.blocks])  # computed blocks)
        Uq, delta = linalg.quantize(U, weight_bits)
        K = max(1, round(ctx.modulus(meta[0]) / delta))
        bias = None if s.bias is None else np.asarray(s.bias, dtype=np.float64).reshape(-1)
        rows, cols, reds = _splits(d1, pm), _splits(c, pn), _splits(d2, pk)
        groups = [list(_PARTS)] if ps == 1 else [[p] for p in _PARTS]
        defer = ps > 1 and pk == 1 and bool(ops)  # part tasks alone: the steps need both parts, so the next wave
        fused = [] if defer else ops
        u_refs, put = {}, 0
        for i, r in enumerate(rows):
            for t, red in enumerate(reds):
                blk = np.ascontiguousarray(Uq[r, red])
                u_refs[i, t] = ray.put(blk)
                put += blk.nbytes
        needs_relin = any(op.needs_relin for _, op in fused)
        base = self._common(ctx, "pcmm" if pk == 1 else "partial", s.out, needs_relin)
        base.update(level=meta[0], bits=int(weight_bits), K=int(K), factor=float(delta * K), in_meta=None,
                    scale_out=None, bias=bias, P=P)
        final, others, tasks = [], [], 0
        for i, r in enumerate(rows):
            for j, cs in enumerate(cols):
                J = (cs.start, cs.stop)
                out_rows = (r.start * P, r.stop * P)
                nrow = out_rows[1] - out_rows[0]
                pieces_rows = [(out_rows[0] + p.start, out_rows[0] + p.stop)
                               for p in _splits(nrow, min(nrow, pk * ps))] if pk > 1 else [out_rows]
                # p_s = 2 with deferred steps: each part task returns its rows in one piece per task of the next
                # (node-local) wave, so that each of those reads only its rows (of both parts); one piece is the
                # epilogue's array itself, no copy
                next_tasks = max(1, self.num_workers // self.node_threads) if defer else 1
                out_pieces = [(p.start, p.stop) for p in _splits(nrow, min(nrow, next_tasks))]
                out_pieces = [(out_rows[0] + a, out_rows[0] + b_) for a, b_ in out_pieces]
                partial_refs = []  # per (t, group): its piece refs, piece-major then part
                part_refs = {}
                for t, red in enumerate(reds):
                    if index is None:
                        inb = X.overlapping((red.start, red.stop), J)
                    else:
                        inb = X.overlapping((0, d_in), J)
                    for g in groups:
                        margs: list = []
                        inputs = [(b.desc, self._meta_spec(b, margs)) for b in inb]
                        spec = dict(base, T=(red.start, red.stop), J=J, out_rows=out_rows, parts=g, inputs=inputs,
                                    index=None if index is None else index[red], ops=[])
                        args = [b.refs[p] for b in inb for p in g]
                        if pk == 1:
                            spec["ops"] = [(name, op.rows(*out_rows)) for name, op in fused]
                            if len(g) == 2:
                                r0_ref, r1_ref, meta_ref = self._submit(3, spec, u_refs[i, t], *args, metas=margs)
                                final.append(((r0_ref, r1_ref), meta_ref, out_rows, J, None))
                            else:
                                spec["pieces"] = out_pieces
                                part_refs[g[0]] = self._submit(len(out_pieces) + 1, spec, u_refs[i, t], *args,
                                                               metas=margs)
                        else:
                            spec["pieces"] = [(a - out_rows[0], b_ - out_rows[0]) for a, b_ in pieces_rows]
                            refs = self._submit(len(pieces_rows) * len(g) + 1, spec, u_refs[i, t], *args,
                                                metas=margs)
                            partial_refs.append((g, refs[:-1]))
                            others.append(refs[-1])
                        tasks += 1
                if part_refs:
                    nc = J[1] - J[0]
                    for k, (a, b_) in enumerate(out_pieces):
                        final.append(((part_refs[0][k], part_refs[1][k]), part_refs[0][-1], (a, b_), J,
                                      ((a - out_rows[0]) * nc, (b_ - out_rows[0]) * nc)))
                    others.append(part_refs[1][-1])
                if pk > 1:
                    for sidx, pr in enumerate(pieces_rows):
                        args, piece_parts = [], []
                        for g, refs in partial_refs:
                            for k, p in enumerate(g):
                                args.append(refs[sidx * len(g) + k])
                                piece_parts.append(p)
                        margs = []  # no input blocks: the input's metadata from one of its blocks
                        spec = dict(base, kind="reduce", J=J, out_rows=pr, inputs=[], wave=1, piece_parts=piece_parts,
                                    meta_inputs=[self._meta_spec(X.blocks[0], margs)],
                                    ops=[(name, op.rows(*pr)) for name, op in fused])
                        r0_ref, r1_ref, meta_ref = self._submit(3, spec, *args, metas=margs)
                        final.append(((r0_ref, r1_ref), meta_ref, pr, J, None))
                        tasks += 1
        model = pcmm_store_bytes((pm, pn, pk, ps), d1, d2, c, H_in, H_pcmm if defer else H_out, float(Uq.itemsize),
                                 d_in, P)
        return _Wave(final, others, tasks, dict(grid=(pm, pn, pk, ps), put_bytes=put, model=model,
                                                ct_bytes=(H_in, H_out), shape=(d1 * P, X.shape[1]), chunks=c,
                                                deferred=defer))

    def _ew_group(self, ctx, s, X, ops, level_out: int) -> _Wave:
        from hemlp.runtime.ray_runtime import _splits

        X = self._as_dist(ctx, X, self.num_workers, 1)
        needs_relin = any(op.needs_relin for _, op in ops)
        base = self._common(ctx, "ew", s.out, needs_relin)
        final, reads = [], 0
        parts = max(1, -(-self.num_workers // len(X.blocks)))
        H_in, H_out = _ct_bytes(ctx, X.level), _ct_bytes(ctx, level_out)
        for b in X.blocks:
            nr, nc = b.r1 - b.r0, b.c1 - b.c0
            if self.cts_per_task:
                n_tasks = -(-nr // max(1, self.cts_per_task // nc))
            else:
                n_tasks = min(nr, parts)
            for rs in _splits(nr, n_tasks):
                rows = (b.r0 + rs.start, b.r0 + rs.stop)
                margs: list = []
                spec = dict(base, J=(b.c0, b.c1), out_rows=rows, inputs=[(b.desc, self._meta_spec(b, margs))],
                            ops=[(name, op.rows(*rows)) for name, op in ops])
                r0_ref, r1_ref, meta_ref = self._submit(3, spec, *b.refs, metas=margs)
                final.append(((r0_ref, r1_ref), meta_ref, rows, (b.c0, b.c1), None))
            reads += n_tasks * nr * nc * H_in  # every task of a block takes the whole block (both parts)
        n = X.rows * X.chunks
        model = dict(reads=dict(inputs=reads), writes=dict(outputs=n * H_out), total=reads + n * H_out)
        return _Wave(final, [], len(final), dict(shape=X.shape, chunks=X.chunks, cts_per_task=self.cts_per_task,
                                                 model=model))

    def _finish(self, group: list, wave: _Wave, t0: float, planned: tuple) -> _Dist:
        """A group's output as a _Dist right after its submission: the blocks name their producing tasks' meta refs
        (the next waves take them as task arguments), so the driver submits the whole program without waiting
        between waves; _collect fetches the metas and the statistics at the end."""
        blocks = []
        for f in wave.final:
            nb = (f[2][1] - f[2][0]) * (f[3][1] - f[3][0]) * 2 * (planned[0] + 1) * self._N * 8
            a, b = f[4] if f[4] is not None else (None, None)
            blocks.append(_Block(f[0], f[2][0], f[2][1], f[3][0], f[3][1], None, nb, meta_src=(f[1], a, b)))
        self._pending.append((group, wave, blocks, time.perf_counter() - t0))
        return _Dist(wave.info["shape"], wave.info["chunks"], blocks, planned=planned)

    def _collect(self, timings: dict | None) -> None:
        """Waits for every wave (a task's error is raised here, typed as its cause), fills the blocks' metas,
        checks the planned levels and records the statistics per step. A wave's time runs from the end of the
        previous wave's last task (the run's first wave: from the submission after the input put) to the end of
        its own last task (the tasks' wall clocks: time.time() on their nodes)."""
        ray = self.ray
        prev_end = self._t_ready
        for group, wave, blocks, t_sub in self._pending:
            # part tasks return several blocks under one meta: fetch each task's meta once
            refs = list({f[1]: None for f in wave.final}) + list(wave.others)
            got = dict(zip(refs, ray.get(refs)))
            allm = [got[r] for r in refs]
            for b, f in zip(blocks, wave.final):
                m = got[f[1]]["metas"]
                b.metas, b.meta_src = (m if f[4] is None else m[f[4][0]: f[4][1]]), None
            for e in group:
                lv = {m["levels"].get(e.out) for m in allm if e.out in m["levels"]}
                if lv and lv != {e.level_out}:
                    raise AssertionError(f"step {e.out}: level {sorted(lv)}, planned {e.level_out}")
            end = max(m["span"][1] for m in allm)
            wall = max(0.0, end - prev_end)
            prev_end = max(prev_end, end)
            task_secs = {e.out: sum(m["secs"].get(e.out, 0.0) for m in allm) for e in group}
            task_secs[group[0].out] += sum(m["secs"].get("_import", 0.0) for m in allm)
            total = sum(task_secs.values()) or 1.0
            read = sum(m["read"] for m in allm)
            key_read = sum(m["key_read"] for m in allm)
            written = sum(m["written"] for m in allm) + wave.info.get("put_bytes", 0)
            nodes = sorted({m["node"] for m in allm})
            waves = sorted({m["wave"] for m in allm})
            info = wave.info
            for k, e in enumerate(group):
                share = wall * task_secs[e.out] / total
                if timings is not None:
                    timings[e.out] = share
                st = dict(op="pcmm_gather" if (e.op == "pcmm" and e.index is not None) else e.op, tasks=wave.tasks,
                          nodes=nodes, seconds=share, task_seconds=task_secs[e.out])
                if k == 0:
                    st.update(group=[g.out for g in group], group_seconds=wall, submit_seconds=t_sub,
                              bytes=dict(read=read, written=written, total=read + written, keys_read=key_read),
                              model_bytes=info["model"], bytes_vs_model=(read + written) / info["model"]["total"],
                              group_task_seconds=sum(m["seconds"] for m in allm),
                              group_task_cpu_seconds=sum(m["cpu"] for m in allm),
                              # first touches of fresh memory in the tasks (~0.3 GB/s on a loaded VM: worth watching)
                              page_faults=sum(m["page_faults"] for m in allm),
                              # the group's critical path if every task had its own cores: the longest task per
                              # wave (CPU seconds per thread of a node-local task)
                              critical_cpu_seconds=sum(max(m["cpu"] / m["threads"] for m in allm if m["wave"] == w)
                                                       for w in waves),
                              # wall-clock span of the tasks (first start, last end; time.time() on their nodes)
                              task_span=(min(m["span"][0] for m in allm), end))
                    if "grid" in info:
                        st.update(grid=info["grid"], ct_bytes=info["ct_bytes"])
                    if "cts_per_task" in info:
                        st["cts_per_task"] = info["cts_per_task"]
                    if "threads" in info:  # node-local tasks: their threads, the inputs their PCMMs read in place
                        st.update(threads=info["threads"], in_place=info["in_place"])
                else:
                    st.update(fused_into=group[0].out, grid=info.get("grid"), cts_per_task=info.get("cts_per_task"))
                self.stats[e.out] = st
        self._pending = []

    def _run_segment(self, ctx, steps, i: int, vals: dict, users: dict) -> int:
        """Steps i, i + 1, .. up to the next sharded PCMM (or the output) as one wave of node-local tasks; returns
        the index of the step after them."""
        j = i
        while (j < len(steps) and steps[j].op not in ("input", "output")
               and steps[j].out not in self._on_grid
               and not (self.cts_per_task is not None and steps[j].op in _ELEMENTWISE)):
            j += 1
        seg = steps[i:j]
        produced = {e.out for e in seg}
        outputs = list(dict.fromkeys(n for e in steps[j:] for n in e.inputs if n in produced))
        for e in seg:
            self._layer_start(e.out)
        vals.update(self._segment_wave(ctx, seg, vals, outputs))
        self._record_input(steps)
        for e in seg:
            for name in e.inputs:
                _release(vals, users, name)
        return j

    def _record_input(self, steps) -> None:
        if self._input_stats is not None and not any(v.get("op") == "input" for v in self.stats.values()):
            self.stats[next(x.out for x in steps if x.op == "input")] = self._input_stats

    # ---- the program
    def run(self, ctx, steps, C, relin_key, weight_bits: int, timings: dict | None = None):
        from hemlp.linalg import CtMatrix

        ray = self.ray
        self._params = ctx.params.to_bytes()
        self._N, self._weight_bits = ctx.N, weight_bits
        self._on_grid = {s.out for s in steps if s.op == "pcmm" and self._sharded(ctx, s, C.chunks)}
        if relin_key is not None and any(s.op in ("square", "poly") for s in steps):
            data, digest = _relin_bytes(relin_key)
            self._rlk = (relin_key, digest, [ray.put(data)])
            self._rlk_bytes = len(data)
            self.stats["_keys"] = dict(op="keys", put_bytes=len(data), nodes=[], tasks=0)
        users: dict = {}
        for s in steps:
            for name in s.inputs:
                users[name] = users.get(name, 0) + 1
        vals, i, out_name = {}, 0, None
        self._input_stats, self._pending, self._after, self._t_ready = None, [], {}, time.time()
        while i < len(steps):
            s = steps[i]
            if s.op == "input":
                if C.level != s.level_out:
                    if C.level < s.level_out:
                        raise LevelError(f"the input is at level {C.level} but the plan starts at level {s.level_out}")
                    C = CtMatrix(ctx, [ctx.drop_level(ct, s.level_out) for ct in C.cts], C.shape, C.chunks, C.format)
                vals[s.out] = C
                i += 1
                continue
            if s.op in ("alias", "output"):
                vals[s.out] = vals[s.inputs[0]]
                _release(vals, users, s.inputs[0])
                out_name = s.out if s.op == "output" else out_name
                i += 1
                continue
            if s.out not in self._on_grid and not (self.cts_per_task is not None and s.op in _ELEMENTWISE):
                i = self._run_segment(ctx, steps, i, vals, users)
                continue
            # the group: s plus the elementwise steps that only consume the previous one
            group = [s]
            if self.cts_per_task is None or s.op not in _ELEMENTWISE:
                while (i + len(group) < len(steps) and steps[i + len(group)].op in _ELEMENTWISE
                       and steps[i + len(group)].inputs[0] == group[-1].out and users.get(group[-1].out, 0) == 1
                       and (self.cts_per_task is None)):
                    group.append(steps[i + len(group)])
            ops = [(e.out, ElementwiseOp.from_step(e)) for e in (group[1:] if s.op not in _ELEMENTWISE else group)]
            self._layer_start(s.out)
            t0 = time.perf_counter()
            x = vals[s.inputs[0]]
            if s.op == "pcmm":
                wave = self._pcmm_group(ctx, s, x, ops, weight_bits, group[-1].level_out)
            else:
                wave = self._ew_group(ctx, s, x, ops, group[-1].level_out)
            labels = (x.meta if isinstance(x, _Dist) else _meta_of(x.cts[0]._obj))[2:]  # slots, encoding, .., key
            if wave.info.get("deferred"):  # part-split PCMM: its steps need both parts, so they start the next wave
                for e in group[1:]:
                    self._after[e.out] = s.out
                group = [s]
            D = self._finish(group, wave, t0, (group[-1].level_out, None, *labels))
            for e in group:
                vals[e.out] = D
            self._record_input(steps)
            # values no later step reads leave the store now, so the next waves' outputs reuse their memory
            del x, D, wave
            for e in group[:-1]:  # fused into the group: read only by its next member
                vals.pop(e.out, None)
            for e in group:
                for name in e.inputs:
                    if name not in {g.out for g in group}:
                        _release(vals, users, name)
            i += len(group)
        out = vals[out_name]
        self._collect(timings)
        for name, head in self._after.items():
            self.stats[name]["after"] = head
        t0 = time.perf_counter()
        with _driver_threads(_usable_cores()):  # the last wave is done: the driver has the machine
            res = self._materialise(ctx, out) if isinstance(out, _Dist) else out
        self.stats["_output"] = dict(op="output", seconds=time.perf_counter() - t0, nodes=[], tasks=0,
                                     get_bytes=sum(b.nbytes for b in out.blocks) if isinstance(out, _Dist) else 0)
        return res


def _release(vals: dict, users: dict, name: str) -> None:
    """One read of value `name` is done; after its last read the program drops it (its blocks' objects are freed
    once no task argument holds them)."""
    users[name] -= 1
    if users[name] == 0:
        vals.pop(name, None)


def _supported(steps, C) -> bool:
    return C.format == "rlwe" and all(s.op in _SUPPORTED for s in steps)


def run_on_ray(ctx, steps, C, relin_key, weight_bits: int, timings: dict | None = None, *, address=None,
               num_workers: int | None = None, grid=None, cts_per_task: int | None = None, stats: dict | None = None):
    """Run a lowered program on Ray (joins `address` or starts a local Ray for the call when none is connected;
    see ray_session): RayProgram, activations kept in the object store between layers. Programs with steps it
    does not know fall back to local.run with a RayExecutor (one Ray call per step)."""
    from hemlp.runtime.local import run
    from hemlp.runtime.ray_runtime import ray_session

    with ray_session(address, num_workers):
        if _supported(steps, C):
            ex = RayProgram(num_workers=num_workers, grid=grid, cts_per_task=cts_per_task)
            out = ex.run(ctx, steps, C, relin_key, weight_bits, timings)
        else:
            ex = RayExecutor(num_workers=num_workers, grid=grid, cts_per_task=cts_per_task)
            out = run(ctx, steps, C, relin_key, weight_bits, timings, executor=ex)
    if stats is not None:
        stats.update(ex.stats)
    return out
