"""RayExecutor: the per-step executor that ``local.run`` calls, on a connected Ray.

The fallback for programs with steps RayProgram does not know: PCMMs through ``ray_pcmm`` / ``ray_pcmm_gather``,
elementwise steps as tasks over groups of ciphertexts sent from and returned to the driver (``pack_cts``).
"""
from __future__ import annotations

import time

import numpy as np

from hemlp.pcmm import CtMatrix
from hemlp.runtime.local import ElementwiseOp
from hemlp.runtime.ray.blocks import pack_cts, unpack_cts
from hemlp.runtime.ray.driver import RayDriver, relin_bytes
from hemlp.runtime.ray.pcmm import ray_pcmm, ray_pcmm_gather
from hemlp.runtime.ray.tasks import elementwise_remote

__all__ = ["RayExecutor"]


class RayExecutor(RayDriver):
    """The executor of ``local.run`` on a connected Ray (use inside ``ray_session``).

    num_workers: the worker count the planner's grids and the group count are made for (default: the
    cluster's CPUs). grid: None (planner), (p_m, p_n, p_k) for every PCMM (ray_pcmm: no part axis), or
    {step name: grid}.
    cts_per_task: ciphertexts per elementwise task (default: the step's ciphertexts spread over
    2 x num_workers tasks). stats: filled per step (PCMM: ray_pcmm's stats; elementwise: tasks, bytes,
    nodes, phases). tune_malloc: see RayDriver (the elementwise tasks; ray_pcmm's tasks never tune)."""

    name = "ray"

    def __init__(self, num_workers: int | None = None, grid=None, cts_per_task: int | None = None,
                 threads_per_task: int = 1, tune_malloc: bool | None = None):
        super().__init__(num_workers, grid, cts_per_task, threads_per_task, tune_malloc)
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
            data, digest = relin_bytes(relin_key)
            self._rlk = (relin_key, digest, [self.ray.put(data)])
        return self._rlk[1], self._rlk[2]

    def map_cts(self, ctx, C, op: ElementwiseOp, relin_key, step=None):
        ray = self.ray
        t0 = time.perf_counter()
        if ctx.hash not in self._params:
            self._params[ctx.hash] = ctx.params.to_bytes()
        params = self._params[ctx.hash]
        digest, holder = self._relin(relin_key) if op.needs_relin else (None, None)
        n = len(C.cts)
        per = self.cts_per_task or max(1, -(-n // (2 * self.num_workers)))
        task = elementwise_remote()
        pending, sent = [], 0
        for g0 in range(0, n, per):
            g1 = min(n, g0 + per)
            r0, r1 = g0 // C.chunks, (g1 - 1) // C.chunks + 1
            rows = [i // C.chunks - r0 for i in range(g0, g1)]
            arr, metas = pack_cts(C.cts[g0:g1])
            sent += arr.nbytes if isinstance(arr, np.ndarray) else sum(a.nbytes for a in arr)
            refs = task.options(scheduling_strategy="SPREAD").remote(
                ctx.hash, params, op.rows(r0, r1), rows, arr, metas, digest, holder, self.threads, self.tune_malloc,
                ctx.native.min_security_bits)
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
