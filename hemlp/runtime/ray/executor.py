"""RayExecutor: the per-step executor that ``local.run`` calls, on a connected Ray.

The fallback for programs with steps RayProgram does not know (and for bootstrapped plans on one node; on several
nodes RayProgram runs them on the plan's split): PCMMs through ``ray_pcmm`` / ``ray_pcmm_gather``,
elementwise steps as tasks over groups of ciphertexts sent from and returned to the driver (``pack_cts``), and a
bootstrap step as one task per bootstrap (one ciphertext or a pair: ``local.bootstrap_units``; an S2C-first batch
of k pairs: ``local.batch_units``) and a MaMBo step as one task per chunk pair (``local.mambo_units``), spread over
the workers, each of which builds its bootstrapper once from the bootstrapping keys put once per run (with
shared_keys=StagedKeys(folder): from the key file the driver staged, no key bytes put).
"""
from __future__ import annotations

import time

from hemlp.pcmm import CtMatrix
from hemlp.errors import MissingKeyError
from hemlp.bootstrap import BatchBootstrapKeys
from hemlp.runtime.local import ElementwiseOp, bootstrap_retag, mambo_chunk, mambo_units, refresh_units
from hemlp.runtime.ray.blocks import pack_cts, packed_nbytes, unpack_cts
from hemlp.runtime.ray.driver import RayDriver, bootstrap_key_bytes, relin_bytes
from hemlp.run_options import StagedKeys
from hemlp.runtime.ray.node_keys import KeyHolder, stage_bootstrap_keys
from hemlp.runtime.ray.session import spread_options
from hemlp.runtime.ray.pcmm import ray_pcmm, ray_pcmm_gather
from hemlp.runtime.ray.tasks import boot_kind, bootstrap_remote, elementwise_remote, mambo_remote

__all__ = ["RayExecutor"]


class RayExecutor(RayDriver):
    """The executor of ``local.run`` on a connected Ray (use inside ``ray_session``).

    num_workers: the worker count the planner's grids and the group count are made for (default: the
    cluster's CPUs). grid: None (planner), (p_m, p_n, p_k) for every PCMM (ray_pcmm: no part axis), or
    {step name: grid}.
    cts_per_task: ciphertexts per elementwise task (default: the step's ciphertexts spread over
    2 x num_workers tasks). stats: filled per step (PCMM: ray_pcmm's stats; elementwise: tasks, bytes,
    nodes, phases; bootstrap: its tasks' processes, seconds and whether they loaded the keys). tune_malloc: see
    RayDriver (the elementwise and bootstrap tasks; ray_pcmm's tasks never tune). bootstrap_keys: the
    hemlp.bootstrap.BootstrapKeys (CtS-first single bootstraps) or BatchBootstrapKeys (S2C-first batched
    bootstraps and MaMBo steps) of a plan with bootstrap steps."""

    name = "ray"

    def __init__(self, num_workers: int | None = None, grid=None, cts_per_task: int | None = None,
                 threads_per_task: int = 1, tune_malloc: bool | None = None, bootstrap_keys=None, shared_keys=None):
        super().__init__(num_workers, grid, cts_per_task, threads_per_task, tune_malloc)
        self._params = {}     # phash -> Params bytes
        self.bootstrap_keys = bootstrap_keys
        self.shared_keys = shared_keys    # how a machine's workers hold them (node_keys)
        self._boot = None     # (context hash, digest, [ref]) of the bootstrapping keys put in this run

    def _params_of(self, ctx) -> bytes:
        if ctx.hash not in self._params:
            self._params[ctx.hash] = ctx.params.to_bytes()
        return self._params[ctx.hash]

    def _grid_for(self, step):
        g = self.grid
        if isinstance(g, dict):
            return g.get(step)
        return g

    def pcmm(self, U, C, *, bias=None, weight_bits: int = 20, step=None, rescale: bool = True):
        st = {}
        y = ray_pcmm(U, C, num_workers=self.num_workers, grid=self._grid_for(step), weight_bits=weight_bits,
                     bias=bias, stats=st, rescale=rescale)
        self.stats[step] = dict(st, op="pcmm")
        return y

    def pcmm_gather(self, U, C, index, *, bias=None, weight_bits: int = 20, step=None, rescale: bool = True):
        st = {}
        y = ray_pcmm_gather(U, C, index, num_workers=self.num_workers, grid=self._grid_for(step),
                            weight_bits=weight_bits, bias=bias, stats=st, rescale=rescale)
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
        params = self._params_of(ctx)
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
            sent += packed_nbytes(arr)
            refs = task.options(**spread_options(self.threads)).remote(
                ctx.hash, params, op.rows(r0, r1), rows, arr, metas, digest, holder, self.threads, self.tune_malloc,
                ctx.native.min_security_bits)
            pending.append((g0, refs))
        t_sub = time.perf_counter()
        out = [None] * n
        got, nodes = 0, set()
        for g0, (a_ref, m_ref, node_ref) in pending:
            arr, metas = ray.get([a_ref, m_ref])
            got += packed_nbytes(arr)
            out[g0: g0 + len(metas)] = unpack_cts(ctx, arr, metas)
            nodes.add(ray.get(node_ref))
            del arr
        self.stats[step] = dict(op=op.kind, tasks=len(pending), cts_per_task=per, sent_bytes=sent, result_bytes=got,
                                nodes=sorted(nodes), seconds=time.perf_counter() - t0,
                                phases=dict(submit=t_sub - t0, wait_import=time.perf_counter() - t_sub))
        return CtMatrix(ctx, out, C.shape, C.chunks, C.format)

    def _boot_keys(self, ctx):
        if self._boot is None or self._boot[0] != ctx.hash:
            if isinstance(self.shared_keys, StagedKeys):
                # only the staged file's name travels: every worker maps the file the driver wrote
                staged = stage_bootstrap_keys(self.bootstrap_keys, ctx, self.shared_keys)
                digest, holder, put = f"staged-{staged}", KeyHolder(None, self.shared_keys, staged), 0
            else:
                data, digest = bootstrap_key_bytes(self.bootstrap_keys, ctx)
                # in a holder: a task fetches the bytes only when its machine has no shared copy and it decodes them
                holder, put, staged = KeyHolder(self.ray.put(data), self.shared_keys), len(data), None
            self._boot = (ctx.hash, digest, holder)
            self.stats["_bootstrap_keys"] = dict(op="keys", put_bytes=put, staged=staged, nodes=[], tasks=0)
        return self._boot[1], self._boot[2]

    def _collect(self, ctx, pending: list, n: int) -> tuple[list, list]:
        """The outputs of (indices, refs) tasks placed by index, and the tasks' metas."""
        out, tasks = [None] * n, []
        for u, (a_ref, m_ref, t_ref) in pending:
            arr, metas, meta = self.ray.get([a_ref, m_ref, t_ref])
            for i, ct in zip(u, unpack_cts(ctx, arr, metas)):
                out[i] = ct
            tasks.append(dict(meta, ciphertexts=len(u)))
            del arr
        return out, tasks

    def bootstrap(self, ctx, C, step, boot=None):
        """A bootstrap step: every bootstrap (unit) a task of its own, so the workers take them as they free up;
        the results land where local.bootstrap_rows puts them, with the same bits. CtS-first single bootstraps go
        one or two ciphertexts a task; the S2C-first batched pipeline one batch (k pairs) a task."""
        kind = boot_kind(self.bootstrap_keys, step)
        t0 = time.perf_counter()
        params = self._params_of(ctx)
        digest, holder = self._boot_keys(ctx)
        cts = bootstrap_retag(ctx, C.cts, step)
        units, pair = refresh_units(cts, step)
        task = bootstrap_remote()
        pending, sent = [], 0
        for u in units:
            arr, metas = pack_cts([cts[i] for i in u])
            sent += packed_nbytes(arr)
            refs = task.options(**spread_options(self.threads)).remote(
                ctx.hash, params, step, arr, metas, digest, holder, self.threads, self.tune_malloc,
                ctx.native.min_security_bits, kind, pair)
            pending.append((u, refs))
        out, tasks = self._collect(ctx, pending, len(cts))
        self.stats[step.out] = dict(op="bootstrap", tasks=tasks, bootstraps=len(units), sent_bytes=sent,
                                    processes=sorted({t["pid"] for t in tasks}),
                                    seconds=time.perf_counter() - t0)
        return CtMatrix(ctx, out, C.shape, C.chunks, C.format)

    def mambo(self, ctx, C, step, boot, weight_bits: int):
        """A MaMBo step: every unit (one chunk, or two sharing every refresh: local.mambo_units) a task, through
        local.mambo_unit in the worker with the batched bootstrapping keys put once per run: the same bits as
        local.mambo_rows."""
        if not isinstance(self.bootstrap_keys, BatchBootstrapKeys):
            raise MissingKeyError(f"step {step.out} runs MaMBo: run the plan with its eval keys' batched "
                                  "bootstrapping keys (BatchBootstrapKeys, made by this plan's keygen())")
        t0 = time.perf_counter()
        params = self._params_of(ctx)
        digest, holder = self._boot_keys(ctx)
        ch, d1, rows = C.chunks, step.U.shape[0], C.shape[0]
        units, real = mambo_units(C)
        task = mambo_remote()
        pending, sent = [], 0
        for u in units:
            arr, metas = pack_cts([ct for j in u for ct in mambo_chunk(C, j)])
            sent += packed_nbytes(arr)
            refs = task.options(**spread_options(self.threads)).remote(
                ctx.hash, params, step, arr, metas, rows, int(weight_bits), real, digest, holder, self.threads,
                self.tune_malloc, ctx.native.min_security_bits)
            # the task returns d1 outputs per chunk of u, chunk after chunk: output row r of chunk j goes to r*ch + j
            pending.append(([r * ch + j for j in u for r in range(d1)], refs))
        out, tasks = self._collect(ctx, pending, d1 * ch)
        self.stats[step.out] = dict(op="mambo", tasks=tasks, units=len(units), sent_bytes=sent,
                                    processes=sorted({t["pid"] for t in tasks}),
                                    seconds=time.perf_counter() - t0)
        return CtMatrix(ctx, out, (d1, C.shape[1]), ch, C.format)

