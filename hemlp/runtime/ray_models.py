"""Compiled models on Ray (``CompiledModel.run(..., runtime="ray")`` -> ``run_on_ray``).

``RayProgram`` (the default): the activations stay in the object store between layers. The driver puts
the input once, in the blocks the first layer reads, then only orchestrates waves of tasks; each PCMM
task reads its input blocks by ObjectRef zero-copy, runs the exact GEMM per limb, then x K, the rescale
and the bias natively and the elementwise steps that follow on its rows (square, polynomial, affine),
and returns its output block for the next layer's tasks. Grids: ``planner.grid.grid_store`` (fewest
object-store bytes, ``pcmm_store_bytes``), or ``grid=``. Per step, ``stats`` gets the bytes the tasks
read and wrote through the store (every argument, return and driver put is a numpy array of known size)
next to the model, the grid, the task count, nodes, and the tasks' own wall and CPU seconds. See the
block comment above ``_group_task`` for the data layout and the waves.

``RayExecutor`` (fallback for programs with steps RayProgram does not know): the per-step executor that
``local.run`` calls; PCMMs through ``ray_pcmm`` / ``ray_pcmm_gather``, elementwise steps as tasks over
groups of ciphertexts sent from and returned to the driver.

Every worker process builds the ``ckks.Context`` once and caches it by the parameter hash, and decodes the
relinearisation key (put once per run) once; tasks are pure (max_retries) and their arguments stay
referenced by the driver, so a worker killed mid-layer is re-run and the result keeps the same bits.
"""
from __future__ import annotations

import hashlib
import time

import numpy as np

from hemlp.errors import LevelError, ShapeError
from hemlp.runtime.local import ElementwiseOp, elementwise
from hemlp.runtime.ray_runtime import TASK_RETRIES, _add_mod, _maybe_die, _ray, ray_pcmm, ray_pcmm_gather

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

class RayExecutor:
    """The executor of ``local.run`` on a connected Ray (use inside ``ray_session``).

    num_workers: the worker count the planner's grids and the group count are made for (default: the
    cluster's CPUs). grid: None (planner), (p_m, p_n, p_k) for every PCMM, or {step name: grid}.
    cts_per_task: ciphertexts per elementwise task (default: the step's ciphertexts spread over
    2 x num_workers tasks). stats: filled per step (PCMM: ray_pcmm's stats; elementwise: tasks, bytes,
    nodes, phases)."""

    name = "ray"

    def __init__(self, num_workers: int | None = None, grid=None, cts_per_task: int | None = None,
                 threads_per_task: int = 1):
        ray = _ray()
        if not ray.is_initialized():
            raise RuntimeError("RayExecutor needs a connected Ray: use it inside hemlp.runtime.ray_runtime.ray_session")
        self.ray = ray
        self.num_workers = int(num_workers or max(1, int(ray.cluster_resources().get("CPU", 1))))
        self.grid, self.cts_per_task, self.threads = grid, cts_per_task, int(threads_per_task)
        self.stats: dict = {}
        self._rlk = None      # (relin key object, digest, [ref]) of this run
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
            data = relin_key.to_bytes()
            self._rlk = (relin_key, hashlib.sha256(data).hexdigest(), [self.ray.put(data)])
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
# A value between layers is a _Dist: blocks of ciphertexts (a row range x a chunk range) whose residues live in
# the object store as one uint64 array (L, rows, chunks, 2, N) each, limb-major, so that one limb of a block is a
# contiguous (rows, chunks 2 N) matrix: the exact GEMM reads it in place (zero-copy) and several input blocks are
# summed mod q (exact, so the sum of the per-block products has the same bits as one product). A layer's tasks
# return their output blocks and the next layer's tasks take them by ObjectRef; the driver only sees the small
# per-block metadata (levels, scales, timings, byte counts) and materialises ciphertexts for the final output.
#
# A group is one task wave: a PCMM (or an add, or an elementwise step) plus the elementwise steps that follow it
# on the same rows (square / poly / affine whose input has no other consumer), fused into the producing task:
# product -> import + rescale + bias -> activation(s) -> one export, no round trip per step.
# Grid (p_m, p_n, p_k): p_m output-row blocks, p_n chunk blocks, p_k reduction blocks. p_k = 1: one task per
# (row block, chunk block) does everything. p_k > 1: "partial" tasks (i, j, t) return U~[i, t] X[t, j] mod q
# in p_k row pieces; "reduce" task (i, j, s) adds piece s of the p_k partials mod q and runs the epilogue
# (x K, rescale, bias, fused steps), so the rescale and the activations stay spread over p_m p_n p_k tasks.


_MALLOC_TUNED = []


def _tune_malloc() -> None:
    """Once per worker process: glibc serves large arrays from the heap and keeps freed memory (M_MMAP_MAX = 0,
    M_TRIM_THRESHOLD = 2 GiB). Otherwise every array above 32 MB (a limb of a layer's product, a block) is a fresh
    mmap whose pages fault in one by one on first touch, every task (measured here: 1.1 GB in 3.7 s fresh vs
    0.09 s reused, on a VM under load). The in-process runtime never allocates such arrays (its ciphertexts are
    0.8 MB each)."""
    if _MALLOC_TUNED:
        return
    _MALLOC_TUNED.append(True)
    try:
        import ctypes

        libc = ctypes.CDLL(None)
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
    """(L, nr, nc, 2, N) uint64 residues of nr x nc (row-major) native ciphertexts of one level."""
    L = objs[0].level + 1
    if any(o.level + 1 != L or o.size != 2 for o in objs):
        raise LevelError("a block of ciphertexts must share one level and be relinearised (size 2)")
    arr = np.empty((L, nr, nc, 2, N), dtype=np.uint64) if out is None else out
    for idx, o in enumerate(objs):
        r, j = divmod(idx, nc)
        arr[:, r, j, 0] = o.poly(0)
        arr[:, r, j, 1] = o.poly(1)
    return arr


def _import_block(ctx, cells: dict, arr: np.ndarray, desc, metas, rows, cols) -> None:
    """Ciphertexts (r, j) of the block (global indices) that fall in rows x cols, into cells[(r, j)]."""
    from hemlp.ckks import Ciphertext

    r0, r1, c0, c1 = desc
    nc = c1 - c0
    for r in range(max(r0, rows[0]), min(r1, rows[1])):
        for j in range(max(c0, cols[0]), min(c1, cols[1])):
            m = metas[(r - r0) * nc + (j - c0)]
            obj = ctx._e.import_ciphertext([arr[:, r - r0, j - c0, 0], arr[:, r - r0, j - c0, 1]],
                                           m[0], m[1], m[2], m[3], m[4], m[5], None)
            cells[r, j] = ctx._w(Ciphertext, obj)


def _import_range(ctx, blocks, rows, cols) -> list:
    cells = {}
    for arr, desc, metas in blocks:
        _import_block(ctx, cells, arr, desc, metas, rows, cols)
    return [cells[r, j] for r in range(*rows) for j in range(*cols)]


def _product(ctx, spec, U: np.ndarray, blocks) -> np.ndarray:
    """Y (|R| P, |J|, 2, L, N) = U~[R, T] X[T, J] mod q_l, ciphertext-major (rows (r, p) -> r P + p), so that
    each output polynomial is one contiguous (L, N) array for the import and a row range is contiguous. The
    factor K is applied in the epilogue (native mul_integer: the same Shoup product as the native PCMM's)."""
    from hemlp import _core

    T0, T1 = spec["T"]
    J0, J1 = spec["J"]
    nR, nJ, N, L = U.shape[0], J1 - J0, ctx.N, spec["level"] + 1
    bits, index = spec["bits"], spec["index"]
    P = 1 if index is None else index.shape[1]
    Y = np.empty((nR, P, nJ, 2, L, N), dtype=np.uint64)
    if index is None:
        pieces = []  # (plan, block, local rows a:b, local chunks): U~[R, a:b] X[a:b] per input block
        for arr, (r0, r1, c0, c1), _ in blocks:
            a, b = max(r0, T0), min(r1, T1)
            if a < b:
                plan = _core.ModGemmPlan(np.ascontiguousarray(U[:, a - T0: b - T0]), bits)
                pieces.append((plan, arr, a - r0, b - r0, J0 - c0, J1 - c0, c1 - c0))
        for l in range(L):
            q = ctx.modulus(l)
            acc = None
            for plan, arr, a, b, j0, j1, nc in pieces:
                X = arr[l, a:b] if (j0, j1) == (0, nc) else arr[l, a:b, j0:j1]
                y = plan.apply(X.reshape(b - a, -1), q)  # zero-copy when the block holds exactly the chunks J
                acc = y if acc is None else _add_mod(acc, y, q)
            Y[:, 0, :, :, l] = acc.reshape(nR, nJ, 2, N)
    else:  # gathered rows (im2col over ciphertext rows); -1 = a zero row
        plan = _core.ModGemmPlan(U, bits)
        where = {}
        for arr, (r0, r1, c0, c1), _ in blocks:
            for r in range(r0, r1):
                if c0 <= J0 and J1 <= c1:
                    where[r] = (arr, r - r0, J0 - c0, J1 - c0)
        G = np.empty((T1 - T0, nJ * 2 * N), dtype=np.uint64)
        for l in range(L):
            q = ctx.modulus(l)
            for p in range(P):
                for i, row in enumerate(index[:, p]):
                    if row < 0:
                        G[i] = 0
                    else:
                        arr, rr, j0, j1 = where[int(row)]
                        G[i] = arr[l, rr, j0:j1].reshape(-1)
                Y[:, p, :, :, l] = plan.apply(G, q).reshape(nR, nJ, 2, N)
    return Y.reshape(nR * P, nJ, 2, L, N)


def _add_mod_limbs(a: np.ndarray, b: np.ndarray, qv: np.ndarray) -> np.ndarray:
    """(a + b) mod q_l for ciphertext-major arrays (..., L, N); qv: the moduli as a (L, 1) uint64 array."""
    s = a + b  # < 2 q < 2^63: no overflow
    np.subtract(s, qv, out=s, where=s >= qv)
    return s


def _epilogue(ctx, spec, Y: np.ndarray, secs: dict, head: str) -> list:
    """Native ciphertexts from the product residues, rescaled and biased as linalg.pcmm does (the native PCMM's
    rescale, then its fused constant bias add_const in slot encoding; an encoded constant in coefficient
    encoding, as linalg.pcmm_gather)."""
    from hemlp.ckks import Ciphertext

    t0 = time.perf_counter()
    e = ctx._e
    level, _, slots, enc, is_complex, key_id = spec["in_meta"]
    scale, bias, P, g0, K = spec["scale_out"], spec["bias"], spec["P"], spec["out_rows"][0], spec["K"]
    slot_enc = enc == 0
    out = []
    for r in range(Y.shape[0]):
        for j in range(Y.shape[1]):
            obj = e.import_ciphertext([Y[r, j, 0], Y[r, j, 1]], level, scale, slots, enc, is_complex, key_id, None)
            obj = e.rescale(e.mul_integer(obj, K) if K != 1 else obj)
            if bias is not None and slot_enc:
                obj = e.add_const(obj, float(bias[(g0 + r) // P]))
            ct = ctx._w(Ciphertext, obj)
            if bias is not None and not slot_enc:
                ct = ctx.add(ct, float(bias[(g0 + r) // P]))
            out.append(ct)
    secs[head] = secs.get(head, 0.0) + time.perf_counter() - t0
    return out


def _apply_ops(ctx, spec, cts: list, nc: int, rlk, secs: dict, levels: dict) -> list:
    for name, op in spec["ops"]:
        t0 = time.perf_counter()
        fn = elementwise(ctx, op, rlk)
        cts = [fn(i // nc, ct) for i, ct in enumerate(cts)]  # op rows are local to the block (op.rows(r0, r1))
        secs[name] = secs.get(name, 0.0) + time.perf_counter() - t0
        levels[name] = cts[0].level
    return cts


def _group_task(spec: dict, *arrays):
    """One task of a group (see above). arrays: the ObjectRef arguments, resolved zero-copy by Ray (weights, then
    input blocks or partial pieces). Returns the output array(s) and a small meta dict (the last return)."""
    import ray

    from hemlp import _core

    _maybe_die()
    t_start, cpu_start = time.perf_counter(), time.process_time()
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
    descs = spec["inputs"]
    if kind in ("pcmm", "partial"):
        U, blocks = arrays[0], [(a, d, m) for a, (d, m) in zip(arrays[1:], descs)]
        t0 = time.perf_counter()
        Y = _product(ctx, spec, U, blocks)
        secs[head] = time.perf_counter() - t0
        if kind == "partial":  # p_k > 1: K U~ X mod q in row pieces, one per reduce task
            outs = [Y[a:b] for a, b in spec["pieces"]]  # contiguous row ranges
            meta = dict(node=ray.get_runtime_context().get_node_id(), read=sum(a.nbytes for a in arrays),
                        key_read=key_read, written=sum(o.nbytes for o in outs), secs=secs, levels={},
                        seconds=time.perf_counter() - t_start, cpu=time.process_time() - cpu_start)
            return (*outs, meta)
        cts = _epilogue(ctx, spec, Y, secs, head)
        del Y
        levels[head] = cts[0].level
    elif kind == "reduce":
        t0 = time.perf_counter()
        qv = np.array([[ctx.modulus(l)] for l in range(arrays[0].shape[-2])], dtype=np.uint64)
        Y = arrays[0]  # read-only views into the store; the sums are new arrays
        for piece in arrays[1:]:
            Y = _add_mod_limbs(Y, piece, qv)
        secs[head] = time.perf_counter() - t0
        cts = _epilogue(ctx, spec, Y, secs, head)
        del Y
        levels[head] = cts[0].level
    elif kind == "ew":
        t0 = time.perf_counter()
        cts = _import_range(ctx, [(a, d, m) for a, (d, m) in zip(arrays, descs)], spec["out_rows"], spec["J"])
        secs["_import"] = time.perf_counter() - t0
    elif kind == "add":
        from hemlp.linalg import CtMatrix
        from hemlp.runtime.local import _add

        t0 = time.perf_counter()
        na = spec["n_a"]
        rows, cols = spec["out_rows"], spec["J"]
        A = _import_range(ctx, [(a, d, m) for a, (d, m) in zip(arrays[:na], descs[:na])], rows, cols)
        B = _import_range(ctx, [(a, d, m) for a, (d, m) in zip(arrays[na:], descs[na:])], rows, cols)
        shape = (rows[1] - rows[0], cols[1] - cols[0])
        cts = _add(ctx, CtMatrix(ctx, A, shape, shape[1], "rlwe"), CtMatrix(ctx, B, shape, shape[1], "rlwe"),
                   spec["add_level"]).cts
        secs[head] = time.perf_counter() - t0
        levels[head] = cts[0].level
    else:
        raise AssertionError(kind)
    nc = spec["J"][1] - spec["J"][0]
    cts = _apply_ops(ctx, spec, cts, nc, rlk, secs, levels)
    t0 = time.perf_counter()
    objs = [ct._obj for ct in cts]
    out = _export(objs, len(objs) // nc, nc, ctx.N)
    last = spec["ops"][-1][0] if spec["ops"] else head
    secs[last] = secs.get(last, 0.0) + time.perf_counter() - t0
    meta = dict(node=ray.get_runtime_context().get_node_id(), read=sum(a.nbytes for a in arrays), key_read=key_read,
                written=out.nbytes, secs=secs, levels=levels, metas=[_meta_of(o) for o in objs],
                seconds=time.perf_counter() - t_start, cpu=time.process_time() - cpu_start)
    return out, meta


def _group_remote(num_returns: int):
    key = ("group", num_returns)
    if key not in _REMOTE:
        ray = _ray()
        _REMOTE[key] = ray.remote(num_returns=num_returns, max_retries=TASK_RETRIES, retry_exceptions=False,
                                  num_cpus=1)(_group_task)
    return _REMOTE[key]


# ----------------------------------------------------------------------------- driver


class _Block:
    __slots__ = ("ref", "r0", "r1", "c0", "c1", "metas", "nbytes")

    def __init__(self, ref, r0, r1, c0, c1, metas, nbytes):
        self.ref, self.r0, self.r1, self.c0, self.c1, self.metas, self.nbytes = ref, r0, r1, c0, c1, metas, nbytes

    @property
    def desc(self):
        return (self.r0, self.r1, self.c0, self.c1)


class _Dist:
    """A ciphertext matrix (rows x chunks) as blocks in the object store."""

    def __init__(self, shape, chunks: int, blocks: list):
        self.shape, self.chunks, self.blocks = shape, chunks, blocks

    @property
    def rows(self) -> int:
        return self.shape[0]

    @property
    def level(self) -> int:
        return self.blocks[0].metas[0][0]

    @property
    def meta(self) -> tuple:
        return self.blocks[0].metas[0]

    def overlapping(self, rows, cols) -> list:
        return [b for b in self.blocks if b.r0 < rows[1] and rows[0] < b.r1 and b.c0 < cols[1] and cols[0] < b.c1]


_ELEMENTWISE = ("square", "poly", "affine")
_SUPPORTED = ("input", "pcmm", "add", "alias", "output") + _ELEMENTWISE


class RayProgram:
    """Runs a lowered program on a connected Ray with the activations in the object store between layers
    (use inside ``ray_session``; ``run_on_ray`` does both).

    num_workers: the worker count the grids are made for (default: the cluster's CPUs). grid: None (the
    planner's ``grid_store`` for the workers: fewest bytes through the store), (p_m, p_n, p_k) for every PCMM, or {step: grid}.
    cts_per_task: None (default) fuses every elementwise step into the task that produced its input; a number
    runs elementwise steps as their own tasks over groups of that many ciphertexts. stats (after run): per step,
    the grid, tasks, nodes, bytes read / written through the store (measured: every put, argument and return is
    a numpy array whose size the tasks report) next to the planner's model, seconds and the tasks' own seconds."""

    def __init__(self, num_workers: int | None = None, grid=None, cts_per_task: int | None = None,
                 threads_per_task: int = 1):
        ray = _ray()
        if not ray.is_initialized():
            raise RuntimeError("RayProgram needs a connected Ray: use it inside hemlp.runtime.ray_runtime.ray_session")
        self.ray = ray
        self.num_workers = int(num_workers or max(1, int(ray.cluster_resources().get("CPU", 1))))
        self.grid, self.cts_per_task, self.threads = grid, cts_per_task, int(threads_per_task)
        self.stats: dict = {}
        self._rlk = None

    # hooks (tests inject faults here)
    def _layer_start(self, name: str) -> None:
        pass

    # ---- helpers
    def _common(self, ctx, kind: str, head: str, needs_relin: bool) -> dict:
        spec = dict(kind=kind, head=head, phash=ctx.hash, params=self._params, threads=self.threads, rlk=None,
                    rlk_bytes=0, ops=[], index=None, bias=None, P=1)
        if needs_relin:
            spec["rlk"], spec["rlk_bytes"] = self._rlk[1:], self._rlk_bytes
        return spec

    def _put_input(self, ctx, C, row_parts: int, col_parts: int) -> _Dist:
        """The client's ciphertexts into the store once, in the blocks the first consumer reads."""
        from hemlp.runtime.ray_runtime import _splits

        t0 = time.perf_counter()
        ray, d, c = self.ray, C.shape[0], C.chunks
        blocks, put = [], 0
        for rs in _splits(d, min(row_parts, d)):
            for cs in _splits(c, min(col_parts, c)):
                objs = [C.cts[r * c + j]._obj for r in range(rs.start, rs.stop) for j in range(cs.start, cs.stop)]
                L = objs[0].level + 1
                shape = (L, rs.stop - rs.start, cs.stop - cs.start, 2, ctx.N)
                arr = _export(objs, shape[1], shape[2], ctx.N, _staging(shape))
                blocks.append(_Block(ray.put(arr), rs.start, rs.stop, cs.start, cs.stop, [_meta_of(o) for o in objs],
                                     arr.nbytes))
                put += arr.nbytes
                del arr
        self._input_stats = dict(op="input", put_bytes=put, blocks=len(blocks), nodes=[], tasks=0,
                                 seconds=time.perf_counter() - t0)
        return _Dist((d, C.shape[1]), c, blocks)

    def _as_dist(self, ctx, v, row_parts: int, col_parts: int) -> _Dist:
        if isinstance(v, _Dist):
            return v
        return self._put_input(ctx, v, row_parts, col_parts)

    def _materialise(self, ctx, D: _Dist):
        from hemlp.linalg import CtMatrix

        cells = {}
        for b in D.blocks:
            arr = self.ray.get(b.ref)
            _import_block(ctx, cells, arr, b.desc, b.metas, (b.r0, b.r1), (b.c0, b.c1))
            del arr
        return CtMatrix(ctx, [cells[r, j] for r in range(D.rows) for j in range(D.chunks)], D.shape, D.chunks, "rlwe")

    def _grid(self, s, d1: int, c: int, d2: int, H_in: float, H_out: float, d_in: int, P: int):
        from hemlp.planner.grid import grid_store

        from hemlp.runtime.ray_runtime import _grid_dims

        g = self.grid.get(s.out) if isinstance(self.grid, dict) else self.grid
        return _grid_dims(g, d1, c, d2, self.num_workers,
                          default=lambda: grid_store(d1, c, d2, self.num_workers, H_in, H_out, 8.0, d_in, P).dims)

    # ---- groups
    def _pcmm_group(self, ctx, s, X, ops, weight_bits: int, level_out: int):
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
        level_in = X.level if isinstance(X, _Dist) else X.level
        N = ctx.N
        H_in, H_out = 2 * (level_in + 1) * N * 8, 2 * (level_out + 1) * N * 8
        pm, pn, pk = self._grid(s, d1, c, d2, H_in, H_out, d_in, P)
        X = self._as_dist(ctx, X, pk if index is None else 1, pn)
        meta = X.meta
        if meta[0] == 0:
            raise LevelError("pcmm: the encrypted matrix is at level 0; a PCMM needs one level for its rescale")
        for b in X.blocks:
            for m in b.metas:
                if m[0] != meta[0] or m[2:] != meta[2:] or abs(m[1] / meta[1] - 1) > 2.0 ** -32:
                    raise LevelError("pcmm: all rows of the encrypted matrix must share level, scale, encoding and key")
        Uq, delta = linalg.quantize(U, weight_bits)
        K = max(1, round(ctx.modulus(meta[0]) / delta))
        bias = None if s.bias is None else np.asarray(s.bias, dtype=np.float64).reshape(-1)
        rows, cols, reds = _splits(d1, pm), _splits(c, pn), _splits(d2, pk)
        u_refs, put = {}, 0
        for i, r in enumerate(rows):
            for t, red in enumerate(reds):
                blk = np.ascontiguousarray(Uq[r, red])
                u_refs[i, t] = ray.put(blk)
                put += blk.nbytes
        needs_relin = any(op.needs_relin for _, op in ops)
        base = self._common(ctx, "pcmm" if pk == 1 else "partial", s.out, needs_relin)
        base.update(level=meta[0], bits=int(weight_bits), K=int(K), in_meta=meta, scale_out=meta[1] * float(delta * K),
                    bias=bias, P=P)
        final, metas_refs, tasks = [], [], 0
        for i, r in enumerate(rows):
            for j, cs in enumerate(cols):
                J = (cs.start, cs.stop)
                out_rows = (r.start * P, r.stop * P)
                pieces_rows = [(out_rows[0] + p.start, out_rows[0] + p.stop)
                               for p in _splits(out_rows[1] - out_rows[0], pk)] if pk > 1 else [out_rows]
                partial_refs = []
                for t, red in enumerate(reds):
                    if index is None:
                        inb = X.overlapping((red.start, red.stop), J)
                    else:
                        inb = X.overlapping((0, d_in), J)
                    spec = dict(base, T=(red.start, red.stop), J=J, out_rows=out_rows,
                                inputs=[(b.desc, b.metas) for b in inb],
                                index=None if index is None else index[red], ops=[])
                    if pk == 1:
                        spec["ops"] = [(name, op.rows(*out_rows)) for name, op in ops]
                        out_ref, meta_ref = _group_remote(2).options(scheduling_strategy="SPREAD").remote(
                            spec, u_refs[i, t], *[b.ref for b in inb])
                        final.append((out_ref, meta_ref, out_rows, J))
                    else:
                        spec["pieces"] = [(a - out_rows[0], b_ - out_rows[0]) for a, b_ in pieces_rows]
                        refs = _group_remote(pk + 1).options(scheduling_strategy="SPREAD").remote(
                            spec, u_refs[i, t], *[b.ref for b in inb])
                        partial_refs.append(refs[:-1])
                        metas_refs.append(refs[-1])
                    tasks += 1
                if pk > 1:
                    for sidx, pr in enumerate(pieces_rows):
                        spec = dict(base, kind="reduce", J=J, out_rows=pr, inputs=[],
                                    ops=[(name, op.rows(*pr)) for name, op in ops])
                        out_ref, meta_ref = _group_remote(2).options(scheduling_strategy="SPREAD").remote(
                            spec, *[partial_refs[t][sidx] for t in range(pk)])
                        final.append((out_ref, meta_ref, pr, J))
                        tasks += 1
        model = pcmm_store_bytes((pm, pn, pk), d1, d2, c, H_in, H_out, float(Uq.itemsize), d_in, P)
        return final, metas_refs, tasks, dict(grid=(pm, pn, pk), put_bytes=put, model=model, ct_bytes=(H_in, H_out),
                                              shape=(d1 * P, X.shape[1]), chunks=c)

    def _ew_group(self, ctx, s, X, ops, level_out: int):
        from hemlp.runtime.ray_runtime import _splits

        X = self._as_dist(ctx, X, self.num_workers, 1)
        needs_relin = any(op.needs_relin for _, op in ops)
        base = self._common(ctx, "ew", s.out, needs_relin)
        final = []
        parts = max(1, -(-self.num_workers // len(X.blocks)))
        for b in X.blocks:
            nr, nc = b.r1 - b.r0, b.c1 - b.c0
            if self.cts_per_task:
                n_tasks = -(-nr // max(1, self.cts_per_task // nc))
            else:
                n_tasks = min(nr, parts)
            for rs in _splits(nr, n_tasks):
                rows = (b.r0 + rs.start, b.r0 + rs.stop)
                spec = dict(base, J=(b.c0, b.c1), out_rows=rows, inputs=[(b.desc, b.metas)],
                            ops=[(name, op.rows(*rows)) for name, op in ops])
                out_ref, meta_ref = _group_remote(2).options(scheduling_strategy="SPREAD").remote(spec, b.ref)
                final.append((out_ref, meta_ref, rows, (b.c0, b.c1)))
        H_in, H_out = _ct_bytes(ctx, X.level), _ct_bytes(ctx, level_out)
        n = X.rows * X.chunks
        model = dict(reads=dict(inputs=n * H_in), writes=dict(outputs=n * H_out), total=n * (H_in + H_out))
        return final, [], len(final), dict(shape=X.shape, chunks=X.chunks, cts_per_task=self.cts_per_task,
                                           model=model)

    def _add_group(self, ctx, s, A, B, ops, level_out: int):
        A = self._as_dist(ctx, A, self.num_workers, 1)
        B = self._as_dist(ctx, B, self.num_workers, 1)
        needs_relin = any(op.needs_relin for _, op in ops)
        base = self._common(ctx, "add", s.out, needs_relin)
        final = []
        for b in A.blocks:
            rows, J = (b.r0, b.r1), (b.c0, b.c1)
            bb = B.overlapping(rows, J)
            spec = dict(base, J=J, out_rows=rows, n_a=1, add_level=s.level_out,
                        inputs=[(b.desc, b.metas)] + [(x.desc, x.metas) for x in bb],
                        ops=[(name, op.rows(*rows)) for name, op in ops])
            out_ref, meta_ref = _group_remote(2).options(scheduling_strategy="SPREAD").remote(
                spec, b.ref, *[x.ref for x in bb])
            final.append((out_ref, meta_ref, rows, J))
        n = A.rows * A.chunks
        reads = n * (_ct_bytes(ctx, A.level) + _ct_bytes(ctx, B.level))  # aligned blocks: each read once
        model = dict(reads=dict(inputs=reads), writes=dict(outputs=n * _ct_bytes(ctx, level_out)),
                     total=reads + n * _ct_bytes(ctx, level_out))
        return final, [], len(final), dict(shape=A.shape, chunks=A.chunks, model=model)

    # ---- the program
    def run(self, ctx, steps, C, relin_key, weight_bits: int, timings: dict | None = None):
        from hemlp.linalg import CtMatrix

        ray = self.ray
        self._params = ctx.params.to_bytes()
        if relin_key is not None and any(s.op in ("square", "poly") for s in steps):
            data = relin_key.to_bytes()
            self._rlk = (relin_key, hashlib.sha256(data).hexdigest(), [ray.put(data)])
            self._rlk_bytes = len(data)
            self.stats["_keys"] = dict(op="keys", put_bytes=len(data), nodes=[], tasks=0)
        users: dict = {}
        for s in steps:
            for name in s.inputs:
                users[name] = users.get(name, 0) + 1
        vals, i, out_name = {}, 0, None
        self._input_stats, self._input_counted = None, False
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
                out_name = s.out if s.op == "output" else out_name
                i += 1
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
            info = {}
            if s.op == "pcmm":
                final, partial_metas, tasks, info = self._pcmm_group(ctx, s, x, ops, weight_bits, group[-1].level_out)
            elif s.op in _ELEMENTWISE:
                final, partial_metas, tasks, info = self._ew_group(ctx, s, x, ops, group[-1].level_out)
            elif s.op == "add":
                final, partial_metas, tasks, info = self._add_group(ctx, s, x, vals[s.inputs[1]], ops,
                                                                    group[-1].level_out)
            else:
                raise AssertionError(s.op)
            t_sub = time.perf_counter()
            metas = ray.get([f[1] for f in final])
            pmetas = ray.get(partial_metas)
            wall = time.perf_counter() - t0
            if self._input_stats is not None and not self._input_counted:
                wall -= self._input_stats["seconds"]  # the input put is reported on its own (stats[input])
                t_sub -= self._input_stats["seconds"]
                self._input_counted = True
            blocks = [_Block(f[0], f[2][0], f[2][1], f[3][0], f[3][1], m["metas"], 0) for f, m in zip(final, metas)]
            for b, m in zip(blocks, metas):
                b.nbytes = m["written"]
            allm = metas + pmetas
            for e in group:
                lv = {m["levels"].get(e.out) for m in metas if e.out in m["levels"]}
                if lv and lv != {e.level_out}:
                    raise AssertionError(f"step {e.out}: level {sorted(lv)}, planned {e.level_out}")
            task_secs = {e.out: sum(m["secs"].get(e.out, 0.0) for m in allm) for e in group}
            task_secs[group[0].out] += sum(m["secs"].get("_import", 0.0) for m in allm)
            total = sum(task_secs.values()) or 1.0
            read = sum(m["read"] for m in allm)
            key_read = sum(m["key_read"] for m in allm)
            written = sum(m["written"] for m in allm) + info.get("put_bytes", 0)
            nodes = sorted({m["node"] for m in allm})
            for k, e in enumerate(group):
                share = wall * task_secs[e.out] / total
                if timings is not None:
                    timings[e.out] = share
                st = dict(op="pcmm_gather" if (e.op == "pcmm" and e.index is not None) else e.op, tasks=tasks,
                          nodes=nodes, seconds=share, task_seconds=task_secs[e.out])
                if k == 0:
                    st.update(group=[g.out for g in group], group_seconds=wall, submit_seconds=t_sub - t0,
                              bytes=dict(read=read, written=written, total=read + written, keys_read=key_read),
                              model_bytes=info["model"], bytes_vs_model=(read + written) / info["model"]["total"],
                              group_task_seconds=sum(m["seconds"] for m in allm),
                              group_task_cpu_seconds=sum(m["cpu"] for m in allm),
                              # the wave's critical path if every task had its own core
                              critical_cpu_seconds=max(m["cpu"] for m in metas)
                              + (max(m["cpu"] for m in pmetas) if pmetas else 0.0))
                    if "grid" in info:
                        st.update(grid=info["grid"], ct_bytes=info["ct_bytes"])
                    if "cts_per_task" in info:
                        st["cts_per_task"] = info["cts_per_task"]
                else:
                    st.update(fused_into=group[0].out, grid=info.get("grid"), cts_per_task=info.get("cts_per_task"))
                self.stats[e.out] = st
            if self._input_stats is not None and not any(v.get("op") == "input" for v in self.stats.values()):
                first_input = next(x.out for x in steps if x.op == "input")
                self.stats[first_input] = self._input_stats
            D = _Dist(info["shape"], info["chunks"], blocks)
            for e in group:
                vals[e.out] = D
            i += len(group)
        out = vals[out_name]
        t0 = time.perf_counter()
        res = self._materialise(ctx, out) if isinstance(out, _Dist) else out
        self.stats["_output"] = dict(op="output", seconds=time.perf_counter() - t0, nodes=[], tasks=0,
                                     get_bytes=sum(b.nbytes for b in out.blocks) if isinstance(out, _Dist) else 0)
        return res


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
