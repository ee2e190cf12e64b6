"""Compiled models on Ray: the executor that ``CompiledModel.run(..., runtime="ray")`` injects into
``hemlp.runtime.local.run`` (one step loop for both runtimes).

* PCMM steps: ``ray_pcmm`` / ``ray_pcmm_gather`` (sharded exact GEMMs per grid cell and RNS limb;
  grid: the planner's ``pcmm_grid`` for the worker count, or ``grid=``);
* elementwise steps (square, polynomial, affine): Ray tasks over contiguous groups of ciphertexts.
  A group travels as one uint64 array (ciphertexts x polynomials x limbs x N) plus per-ciphertext
  metadata, and comes back the same way; the native import rebuilds exactly the same objects
  (seeded ciphertexts keep their seed). Each task gets only what its step needs: the op (square:
  two constants, poly: the coefficients, affine: its rows' alpha / beta) and, for square / poly,
  the relinearisation key, ``ray.put`` once per run and decoded once per worker process;
* residual adds and the input's level drop stay on the driver.

Every worker process builds the ``ckks.Context`` once and caches it by the parameter hash; tasks are
pure (max_retries), so a worker killed mid-layer is re-run and the result keeps the same bits.
"""
from __future__ import annotations

import hashlib
import time

import numpy as np

from hemlp.runtime.local import ElementwiseOp, elementwise
from hemlp.runtime.ray_runtime import TASK_RETRIES, _maybe_die, _ray, ray_pcmm, ray_pcmm_gather

__all__ = ["RayExecutor", "pack_cts", "unpack_cts"]

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


def run_on_ray(ctx, steps, C, relin_key, weight_bits: int, timings: dict | None = None, *, address=None,
               num_workers: int | None = None, grid=None, cts_per_task: int | None = None, stats: dict | None = None):
    """local.run with every PCMM and elementwise step on Ray (joins `address` or starts a local Ray
    for the call when none is connected; see ray_session)."""
    from hemlp.runtime.local import run
    from hemlp.runtime.ray_runtime import ray_session

    with ray_session(address, num_workers):
        ex = RayExecutor(num_workers=num_workers, grid=grid, cts_per_task=cts_per_task)
        out = run(ctx, steps, C, relin_key, weight_bits, timings, executor=ex)
    if stats is not None:
        stats.update(ex.stats)
    return out
