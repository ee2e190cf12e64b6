"""RayProgram: a lowered program on Ray with the activations in the object store between layers (the wave
scheduler).

The driver puts the input once, in the blocks the first layer reads (hemlp.runtime.ray.blocks), then only
orchestrates waves of tasks (hemlp.runtime.ray.tasks). Two kinds of wave:

* node-local tasks: a run of steps in one task with all of a node's CPUs (its native threads), through the
  in-process code (``local.run_step``), so the bits are the in-process bits. A PCMM whose input the task takes
  from the store reads it there in place (``gemm.pcmm_in_place``), so the task imports nothing it only multiplies.
  On one node (workers <= a node's CPUs) the whole program is one such task. A chain of elementwise steps splits
  its rows over the nodes;
* a sharded PCMM (``grid=``; without it, on a cluster of several nodes every PCMM): tasks on a grid; each reads
  its input blocks by ObjectRef zero-copy, runs the exact GEMM per limb, then x K, the rescale and the bias natively
  and the elementwise steps that follow on its rows, and returns its output block for the next layer's tasks.
  Grids: ``grid=`` (tasks of one thread); on several nodes without it, the plan's split of the batch over the live
  nodes (hemlp.runtime.ray.split: a task per node's share, with the node's CPUs), so each node holds what
  compile(nodes=K)'s per-node memory counted; on one node with more workers than its CPUs, when the grid saves more
  than a wave costs (``cost.sharded``), ``planner.grid.grid_store``'s (fewest object-store bytes).

A group is one task wave: a PCMM (or an add, or an elementwise step) plus the elementwise steps that follow it on
the same rows (square / poly / affine whose input has no other consumer), fused into the producing task.
Grid (p_m, p_n, p_k, p_s): p_m output-row blocks, p_n chunk blocks, p_k reduction blocks, p_s in {1, 2} part
blocks (the two polynomials of every ciphertext in different tasks).
- p_k = p_s = 1: one task per (row block, chunk block) does everything: product -> x K, rescale, bias -> fused steps.
- p_k = 1, p_s = 2: task (i, j, part) computes that part of the product and its epilogue (x K, the rescale and the
  bias act on each polynomial alone: pcmm_epilogue_part, bit-identical) and returns that part of the output block.
  The work splits exactly in two with no partial sums; the elementwise steps that followed (they need both parts)
  run as the next wave over row groups.
- p_k > 1: "partial" tasks (i, j, t, g) return their part(s) of U~[i, t] X[t, j] mod q in p_k p_s row pieces;
  "reduce" task (i, j, s) adds piece s of the partials mod q and runs the epilogue and the fused steps, so the
  rescale and the activations stay spread over p_m p_n p_k p_s tasks.

On several nodes every task is sent to the node that holds most of its arguments' bytes, its wave balanced over
the nodes (hemlp.runtime.ray.placement): a block stays where it was made, and only the rows a task lacks move.

A bootstrap step (a plan compiled with bootstrap=True; run_on_ray sends such plans here on several nodes) is a wave of
"refresh" tasks, one per tile of whole bootstrap calls (split.refresh_tiles over local.refresh_units: a pair of
ciphertexts, or k pairs of the S2C-first batched pipeline, with the in-process partners, so the same bits), each sent
to the node holding its ciphertexts and holding threads_per_task CPUs; the elementwise steps after it are fused into
those tasks. The calls pair ciphertexts by level and scale, so the driver fetches the metas of the bootstrap's input
before it submits the wave (the one wait between waves). The producer of that input returns its blocks in row pieces
cut at the tiles' rows (split.row_cuts), so a tile's task takes only its rows. The bootstrapping keys are put once
per run (a node_keys.KeyHolder: a worker fetches them only to decode them, once per machine with shared keys), or,
with shared_keys=StagedKeys(folder), written by the driver as a key file whose name alone the holder carries. A
MaMBo step is a wave of "mambo" tasks, one per unit of local.mambo_units (two chunks sharing every refresh, or one),
each on the node holding most of its chunks' rows (it reads them all: every output row reads every input row).

Per step, ``stats`` gets the bytes the tasks read and wrote through the store next to the model, the grid, the
task count, nodes, the tasks placed and those that ran where they were sent, and the tasks' own wall and CPU
seconds.
"""
from __future__ import annotations

import time
from collections import namedtuple

import numpy as np

from hemlp import pcmm
from hemlp.errors import LevelError, ShapeError
from hemlp.pcmm import CtMatrix
from hemlp.runtime.artifacts import MappedCtMatrix
from hemlp.planner.grid import grid_store, pcmm_store_bytes
from hemlp.runtime.local import ElementwiseOp, mambo_units, refresh_units
from hemlp.runtime.ray.blocks import (PARTS, Block, Dist, ct_bytes, export_block, import_block, meta_of, row_pieces,
                                      splits, staging_buffer)
from hemlp.runtime.ray.cost import node_threads, sharded, store_grid
from hemlp.runtime.ray.driver import RayDriver, bootstrap_key_bytes, relin_bytes
from hemlp.runtime.ray.gemm import pcmm_in_meta
from hemlp.run_options import StagedKeys
from hemlp.runtime.ray.node_keys import KeyHolder, stage_bootstrap_keys
from hemlp.runtime.ray.placement import Placement, live_cpus, split_nodes
from hemlp.runtime.ray.session import driver_threads, usable_cores
from hemlp.runtime.ray.split import refresh_tiles, row_cuts, split_of
from hemlp.runtime.ray.tasks import ELEMENTWISE, boot_kind, group_remote
from hemlp.step_ops import ACT_OPS, CT_PRODUCT_OPS, StepOp

__all__ = ["RayProgram", "SUPPORTED", "BOOTSTRAPPED", "supported"]

#: what the driver knows of a ciphertext when it cuts a bootstrap step into calls (local.refresh_units reads these)
_CtMeta = namedtuple("_CtMeta", "level scale is_complex")
#: and of a value when it cuts a MaMBo step into chunk units (local.mambo_units reads these)
_Cts = namedtuple("_Cts", "cts chunks")


class _Wave:
    """What a group's submission returns: output blocks (both part refs, the meta ref whose block metas count, out
    rows, chunks), the other tasks' meta refs, the task count and the group's info (grid, model, shape)."""

    def __init__(self, final, others, tasks: int, info: dict):
        self.final, self.others, self.tasks, self.info = final, others, tasks, info


#: the step ops RayProgram runs (run_on_ray falls back to RayExecutor for any other)
SUPPORTED = (StepOp.INPUT, StepOp.PCMM, StepOp.ADD, StepOp.ALIAS, StepOp.OUTPUT) + ELEMENTWISE
#: and with refreshes (run_on_ray sends bootstrapped plans here on several nodes; on one, to RayExecutor)
BOOTSTRAPPED = SUPPORTED + (StepOp.BOOTSTRAP, StepOp.MAMBO)
#: the refresh steps: a wave of their own (never in a node-local segment), their tasks next to their ciphertexts
REFRESH = (StepOp.BOOTSTRAP, StepOp.MAMBO)


class RayProgram(RayDriver):
    """Runs a lowered program on a connected Ray with the activations in the object store between layers
    (use inside ``ray_session``; ``run_on_ray`` does both).

    num_workers: the worker count the grids are made for (default: the cluster's CPUs). grid: None (on a cluster of
    several live nodes, every PCMM on the plan's split over them: hemlp.runtime.ray.split, stats['_split']; on one
    node the program runs node-local, or with more workers than the node's CPUs, PCMMs worth a wave on the
    planner's ``grid_store``, see ``cost.sharded``), (p_m, p_n, p_k[, p_s]) for every PCMM, or {step: grid} (those
    steps on their grids, tasks of one thread).
    cts_per_task: None (default) fuses every elementwise step into the task that produced its input or the next
    node-local task; a number runs elementwise steps as their own tasks over groups of that many ciphertexts.
    bootstrap_keys: the hemlp.bootstrap keys of a program with bootstrap steps (BootstrapKeys or BatchBootstrapKeys);
    shared_keys: how a machine's workers hold them (RayOptions.shared_keys, hemlp.runtime.ray.node_keys). stats
    (after run): per step, the grid (sharded) or threads (node-local), tasks, nodes, bytes read / written through
    the store (measured: every put, argument and return is a numpy array whose size the tasks report) next to the
    model, seconds and the tasks' own seconds. tune_malloc: see RayDriver (off by default)."""

    def __init__(self, num_workers: int | None = None, grid=None, cts_per_task: int | None = None,
                 threads_per_task: int = 1, tune_malloc: bool | None = None, bootstrap_keys=None, shared_keys=None):
        super().__init__(num_workers, grid, cts_per_task, threads_per_task, tune_malloc)
        self.node_threads = node_threads(self.ray, self.num_workers)
        self.bootstrap_keys, self.shared_keys = bootstrap_keys, shared_keys
        self._grids = grid              # this run's grids: grid=, or the plan's split (run)
        self._share_threads = None      # the threads of a task per node's share (the split), else None
        self._boot = None               # (digest, KeyHolder, kind) of the bootstrapping keys put in this run
        self._cuts: dict = {}           # value -> the rows its producer cuts its blocks at (a bootstrap reads it)

    def split_nodes(self) -> int:
        """K, the nodes a run splits over: the live nodes with CPUs, at most num_workers (1 on one node)."""
        return split_nodes(live_cpus(self.ray), self.num_workers)

    # hooks (tests inject faults here)
    def _layer_start(self, name: str) -> None:
        pass

    # ---- helpers
    def _common(self, ctx, kind: str, head: str, needs_relin: bool) -> dict:
        spec = dict(kind=kind, head=head, phash=ctx.hash, params=self._params,
                    min_security_bits=ctx.native.min_security_bits, threads=self.threads, rlk=None,
                    rlk_bytes=0, ops=[], index=None, bias=None, P=1, wave=0, tune_malloc=self.tune_malloc)
        if needs_relin:
            spec["rlk"], spec["rlk_bytes"] = self._rlk[1:], self._rlk_bytes
        return spec

    def _put_input(self, ctx, C, row_parts: int, col_parts: int, ctmajor: bool = False, row_ranges=None) -> Dist:
        """The client's ciphertexts into the store once, in the blocks the first consumer reads (one object per
        part). All of it before the first task: a part split's second task needs the second part anyway, so
        putting the parts one by one under the first task only shifts the wait (measured).

        ctmajor (a PCMM reads the input): each part object is the list of the block's ciphertexts' polynomials,
        (limbs, N) views of the native memory that the put copies straight into the store — one copy instead of an
        export into a staging array and then the put's copy; the GEMM reads the rows from that list in place.
        Otherwise (elementwise steps and additions import whole ciphertexts) one limb-major array per part,
        exported on every core: no task runs yet. row_ranges: the blocks' (a, b) row ranges instead of row_parts
        even ones (a bootstrap's tiles). A mapped batch (hemlp.runtime.artifacts.MappedCtMatrix) goes in row pieces
        of at most its block_bytes, each imported from the file, put and let go before the next: the driver holds one
        piece at a time (stats: "mapped"); run() checks the file's SHA-256 before it fetches the output."""
        t0 = time.perf_counter()
        ray, d, c = self.ray, C.shape[0], C.chunks
        blocks, put = [], 0
        mapped = isinstance(C, MappedCtMatrix)
        with driver_threads(usable_cores()):
            rows = (splits(d, min(row_parts, d)) if row_ranges is None else [slice(a, b) for a, b in row_ranges])
            for rs0 in rows:
                for cs in splits(c, min(col_parts, c)):
                    # a mapped batch: in row pieces of at most C.block_bytes, each imported, put and dropped before
                    # the next (the tasks read a value's row pieces as they read a previous wave's)
                    for rs in (_pieces_of(rs0, cs, C, ctx) if mapped else [rs0]):
                        objs = ([ct.native for ct in C.block(rs, cs)] if mapped else
                                [C.cts[r * c + j].native for r in range(rs.start, rs.stop)
                                 for j in range(cs.start, cs.stop)])
                        L = objs[0].level + 1
                        if any(o.level + 1 != L or o.size != 2 for o in objs):
                            raise LevelError("a block of ciphertexts must share one level and be relinearised (size 2)")
                        nbytes = 2 * L * len(objs) * ctx.N * 8
                        if ctmajor:
                            refs = tuple(ray.put([o.poly_view(p) for o in objs]) for p in PARTS)
                        else:
                            shape = (2, L, rs.stop - rs.start, cs.stop - cs.start, ctx.N)
                            arr = export_block(objs, shape[2], shape[3], ctx.N, staging_buffer(shape))
                            refs = (ray.put(arr[0]), ray.put(arr[1]))
                            del arr
                        for r in refs:
                            self._place.put(r)
                        blocks.append(Block(refs, rs.start, rs.stop, cs.start, cs.stop, [meta_of(o) for o in objs],
                                             nbytes))
                        put += nbytes
                        del objs      # the block is in the store: the driver lets it go before the next
        self._input_stats = dict(op="input", put_bytes=put, blocks=len(blocks), nodes=[], tasks=0,
                                 seconds=time.perf_counter() - t0)
        if mapped:   # the ciphertexts the driver imported from the file, and the most it held at once
            self._input_stats["mapped"] = C.import_stats
        self._t_ready = time.time()  # the first wave's time starts after the put
        return Dist((d, C.shape[1]), c, blocks)

    def _submit(self, num_returns: int, spec: dict, *args, sizes: list, metas: list = (), cpus: int = 1):
        """One group task of the open wave (Placement.wave), sent to the node that holds most of its arguments'
        bytes (sizes: the bytes of each of args) among those with room in the wave. metas: the meta refs its spec
        names ("arg", k, ..): passed after the arrays, so the task waits for them as for its arrays and the driver
        never waits between waves. cpus: the CPUs it holds (= its native threads, spec["threads"])."""
        if metas:
            spec = dict(spec, n_meta=len(metas))
        node = self._place.node(zip(args, sizes, strict=True))
        opts = self._place.options(node)
        if cpus != 1:
            opts["num_cpus"] = cpus
        refs = group_remote(num_returns).options(**opts).remote(spec, *args, *metas)
        self._place.produced(refs, node)
        return refs

    @staticmethod
    def _meta_spec(b: "Block", metas: list):
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

    def _as_dist(self, ctx, v, row_parts: int, col_parts: int, ctmajor: bool = False) -> Dist:
        if isinstance(v, Dist):
            return v
        return self._put_input(ctx, v, row_parts, col_parts, ctmajor)

    def _materialise(self, ctx, D: Dist):
        cells = {}
        for b in D.blocks:
            parts = self.ray.get(list(b.refs))
            import_block(ctx, cells, parts, b.desc, b.metas, (b.r0, b.r1), (b.c0, b.c1))
            del parts
        return CtMatrix(ctx, [cells[r, j] for r in range(D.rows) for j in range(D.chunks)], D.shape, D.chunks, "rlwe")

    def _grid(self, s, d1: int, c: int, d2: int, H_in: float, H_out: float, d_in: int, P: int, parts_ok: bool,
              deferred_H: float | None):
        g = self._grids.get(s.out) if isinstance(self._grids, dict) else self._grids
        return store_grid(g, d1, c, d2, self.num_workers, parts_ok, default=lambda: grid_store(
            d1, c, d2, self.num_workers, H_in, H_out, 8.0, d_in, P, parts=2 if parts_ok else 1,
            deferred_H=deferred_H).dims4)

    def _sharded(self, ctx, s, chunks: int) -> bool:
        """Whether PCMM step s runs on its grid or in a node-local task (hemlp.runtime.ray.cost.sharded)."""
        return sharded(ctx, s, chunks, self.num_workers, self.node_threads, self._grids)

    def _segment_wave(self, ctx, seg: list, vals: dict, outputs: list) -> dict:
        """Steps `seg` (no sharded PCMM among them) in node-local tasks of node_threads threads: a task imports its
        input blocks (both parts; an input that only PCMMs read is read in place instead), runs the steps with the
        in-process code (local.run_step) and returns the values that later steps read (`outputs`). A chain of
        elementwise steps splits its rows over num_workers // node_threads tasks; anything else is one task.
        Returns {name: Dist}."""
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
        chain = (len(ins) == 1 and all(e.op in ELEMENTWISE for e in seg)
                 and all(e.inputs[0] == a.out for a, e in zip(seg, seg[1:])))
        R = shapes[ins[0]][0]
        ranges = [(r.start, r.stop) for r in splits(R, min(R, max(1, self.num_workers // t)))] if chain else [None]
        needs_relin = any(e.op in CT_PRODUCT_OPS for e in seg)
        base = self._common(ctx, "segment", seg[0].out, needs_relin)
        # inputs that only PCMMs of the segment read stay in the store: the PCMM reads their blocks in place
        in_place = [n for n in ins if all(e.op == "pcmm" and e.inputs == [n] for e in seg if n in e.inputs)]
        base.update(threads=t, bits=int(self._weight_bits), steps=seg, outputs=outputs, in_place=in_place)
        final, reads = [], 0
        self._place.wave(len(ranges), t)
        for rr in ranges:
            margs: list = []
            inputs, args, sizes, values = [], [], [], []
            for n in ins:
                blks = X[n].blocks if rr is None else X[n].overlapping(rr, (0, chunks))
                values.append((n, len(blks), shapes[n], X[n].chunks))
                for b in blks:
                    inputs.append((b.desc, self._meta_spec(b, margs)))
                    args += list(b.refs)
                    sizes += [b.nbytes // len(b.refs)] * len(b.refs)
                    reads += b.nbytes
            # each output in row pieces (num_workers in all): the next wave's tasks read only their rows
            n_pieces = max(1, self.num_workers // len(ranges))
            out_rows = {o: rr if rr is not None else (0, shapes[o][0]) for o in outputs}
            # a value a bootstrap reads: in pieces at its tiles' rows (the tasks of its calls read only theirs)
            pieces = {o: (self._pieces(self._cuts[o], out_rows[o]) if o in self._cuts
                          else row_pieces(out_rows[o][1] - out_rows[o][0], n_pieces)) for o in outputs}
            spec = dict(base, inputs=inputs, values=values, out_rows=rr, n_pieces=n_pieces, pieces=pieces)
            # one task: where its inputs are (on two raylets, SPREAD sent a one-task program's 1.2 GB input to the
            # other node: +50 % end to end, bench ray --nodes 2); several: each next to its rows
            refs = self._submit(2 * sum(map(len, pieces.values())) + 1, spec, *args, sizes=sizes, metas=margs,
                                cpus=t)
            k, off = 0, 0
            for o in outputs:
                r0 = out_rows[o][0]
                for a, b in pieces[o]:
                    count = (b - a) * chunks
                    final.append(((refs[k], refs[k + 1]), refs[-1], (r0 + a, r0 + b), (0, chunks),
                                  (off, off + count), o))
                    k, off = k + 2, off + count
        writes = sum(shapes[o][0] * chunks * ct_bytes(ctx, levels[o]) for o in outputs)
        model = dict(reads=dict(inputs=reads), writes=dict(outputs=writes), total=reads + writes)
        wave = _Wave([f[:5] for f in final], [], len(ranges), dict(model=model, threads=t, in_place=in_place))
        labels = x0.meta[2:]
        blocks, dists = [], {}
        for f in final:
            nb = (f[2][1] - f[2][0]) * chunks * ct_bytes(ctx, levels[f[5]])
            b = Block(f[0], f[2][0], f[2][1], 0, chunks, None, nb, meta_src=(f[1], *f[4]))
            blocks.append(b)
            d = dists.setdefault(f[5], Dist(shapes[f[5]], chunks, [], planned=(levels[f[5]], None, *labels)))
            d.blocks.append(b)
        group = [e for e in seg if e.op != "alias"] or seg[:1]
        self._pending.append((group, wave, blocks, time.perf_counter() - t0))
        return dists

    @staticmethod
    def _pieces(cuts, rows) -> list:
        """Rows (r0, r1) cut at the global rows `cuts`, as local (a, b) ranges."""
        r0, r1 = rows
        edges = [r0, *[x for x in cuts if r0 < x < r1], r1]
        return [(a - r0, b - r0) for a, b in zip(edges, edges[1:])]

    def _submit_cut(self, spec, cuts, out_rows, J, *args, sizes, metas, cpus) -> list:
        """A task returning one output block (rows out_rows x chunks J), in row pieces at `cuts` (split.row_cuts):
        its blocks' final entries."""
        pcs = self._pieces(cuts, out_rows) if cuts else [(0, out_rows[1] - out_rows[0])]
        if len(pcs) > 1:
            spec = dict(spec, cuts=pcs)
        refs = self._submit(2 * len(pcs) + 1, spec, *args, sizes=sizes, metas=metas, cpus=cpus)
        nc = J[1] - J[0]
        return [((refs[2 * k], refs[2 * k + 1]), refs[-1], (out_rows[0] + a, out_rows[0] + b), J,
                 None if len(pcs) == 1 else (a * nc, b * nc)) for k, (a, b) in enumerate(pcs)]

    def _put_boot_keys(self, ctx, steps, chunks: int) -> None:
        """The bootstrapping keys of the program's bootstrap steps into the store once (their kind checked against
        the steps: tasks.boot_kind), and the rows at which the values the bootstraps read are cut (their tiles as
        planned: every call pairs, as it does when the ciphertexts share level and scale)."""
        self._boot, self._cuts = None, {}
        boots = [s for s in steps if s.op in REFRESH]
        if not boots:
            return
        kind = {boot_kind(self.bootstrap_keys, s) for s in boots}.pop()   # MaMBo: the S2C-first (batch) keys
        if isinstance(self.shared_keys, StagedKeys):
            # only the staged file's name travels: every worker maps the file the driver wrote
            staged = stage_bootstrap_keys(self.bootstrap_keys, ctx, self.shared_keys)
            self._boot = (f"staged-{staged}", KeyHolder(None, self.shared_keys, staged), kind)
            put = 0
        else:
            data, digest = bootstrap_key_bytes(self.bootstrap_keys, ctx)
            # in a holder: a task fetches the bytes only when its machine has no shared copy and it decodes them
            self._boot = (digest, KeyHolder(self.ray.put(data), self.shared_keys), kind)
            put, staged = len(data), None
        self.stats["_bootstrap_keys"] = dict(op="keys", put_bytes=put, staged=staged, nodes=[], tasks=0, kind=kind)
        for s in (s for s in boots if s.op == StepOp.BOOTSTRAP):
            units, _ = refresh_units([_CtMeta(s.level_out, 1.0, False)] * (int(s.rows) * chunks), s)
            self._cuts[s.inputs[0]] = row_cuts(refresh_tiles(units, int(s.rows), chunks))

    def _known_metas(self, D: Dist) -> None:
        """Fill the metas of D's blocks still being computed: the driver waits for their producers' meta dicts."""
        pending = list(dict.fromkeys(b.meta_src[0] for b in D.blocks if b.metas is None))
        got = dict(zip(pending, self.ray.get(pending))) if pending else {}
        for b in D.blocks:
            if b.metas is None:
                ref, a, bb = b.meta_src
                m = got[ref]["metas"]
                b.metas, b.meta_src = (m if a is None else m[a:bb]), None

    # ---- groups
    @staticmethod
    def _cell_metas(X) -> list:
        """The metas of a Dist's ciphertexts, row-major over (rows, chunks)."""
        R, c = X.shape[0], X.chunks
        metas = [None] * (R * c)
        for b in X.blocks:
            cells = [r * c + j for r in range(b.r0, b.r1) for j in range(b.c0, b.c1)]
            for i, m in zip(cells, b.metas, strict=True):
                metas[i] = m
        return metas

    def _boot_group(self, ctx, s, X, ops, level_out: int, drop=None) -> _Wave:
        """Bootstrap step s (and the elementwise steps `ops` fused after it; drop: the (name, level) of the level
        drop right after it, or None) as refresh tasks, one per tile of whole bootstrap calls (split.refresh_tiles
        over local.refresh_units: the in-process calls and partners), each sent to the node that holds most of its
        ciphertexts, on threads_per_task CPUs."""
        R, c = X.shape[0], X.chunks
        if not isinstance(X, Dist):    # the client's input: in blocks of the tiles' rows
            X = self._put_input(ctx, X, 1, 1, row_ranges=self._pieces(self._cuts.get(s.inputs[0], ()), (0, R)))
        self._known_metas(X)           # the calls pair ciphertexts by level and scale: the one wait
        metas = self._cell_metas(X)
        f = int(s.info.scale_factor)    # local.bootstrap_retag's scale x c, before the calls pair
        units, pair = refresh_units([_CtMeta(m[0], m[1] * f if f != 1 else m[1], m[4]) for m in metas], s)
        tiles = refresh_tiles(units, R, c)
        base = self._common(ctx, "refresh", s.out, any(op.needs_relin for _, op in ops))
        base.update(step=s, boot=self._boot, pair=pair, drop=drop)
        H_in, H_out = ct_bytes(ctx, X.level), ct_bytes(ctx, level_out)
        final, reads = [], 0
        self._place.wave(len(tiles), self.threads)
        for (r0, r1, c0, c1), calls in tiles:
            inb = X.overlapping((r0, r1), (c0, c1))
            # placement weighs the tile's own ciphertexts in each block (a block a producer cut at the tiles' rows
            # holds no others)
            cells = [(min(r1, b.r1) - max(r0, b.r0)) * (min(c1, b.c1) - max(c0, b.c0)) for b in inb]
            spec = dict(base, rect=(r0, r1, c0, c1), calls=calls, inputs=[(b.desc, b.metas) for b in inb],
                        ops=[(name, op.rows(r0, r1)) for name, op in ops])
            r0_ref, r1_ref, meta_ref = self._submit(3, spec, *[ref for b in inb for ref in b.refs],
                                                    sizes=[n * H_in // 2 for n in cells for _ in PARTS],
                                                    cpus=self.threads)
            final.append(((r0_ref, r1_ref), meta_ref, (r0, r1), (c0, c1), None))
            reads += sum(b.nbytes for b in inb)
        model = dict(reads=dict(inputs=reads), writes=dict(outputs=R * c * H_out), total=reads + R * c * H_out)
        return _Wave(final, [], len(tiles), dict(shape=X.shape, chunks=c, model=model, bootstraps=len(units),
                                                 boot_kind=self._boot[2]))

    def _mambo_group(self, ctx, s, X, ops, weight_bits: int, level_out: int, drop=None) -> _Wave:
        """MaMBo step s (U X refreshed by pcmm_bootstrap: its outputs read every input row of their chunks; and the
        level drop and elementwise steps fused after it, as _boot_group's) as tasks, one per unit of
        local.mambo_units (two chunks sharing every refresh, or one), each sent to the node holding most of its
        chunks' rows and returning the d1 output rows of its chunks: the in-process units, so the same bits."""
        R, c = X.shape[0], X.chunks
        d1 = np.shape(s.U)[0]
        if not isinstance(X, Dist):    # the client's input: a block per chunk
            X = self._put_input(ctx, X, 1, c)
        self._known_metas(X)           # whether the rows are real decides the units: the one wait
        metas = self._cell_metas(X)
        units, real = mambo_units(_Cts([_CtMeta(m[0], m[1], m[4]) for m in metas], c))
        base = self._common(ctx, "mambo", s.out, any(op.needs_relin for _, op in ops))
        base.update(step=s, boot=self._boot, bits=int(weight_bits), real=real, rows=R, drop=drop,
                    ops=[(name, op.rows(0, d1)) for name, op in ops])
        H_in, H_out = ct_bytes(ctx, X.level), ct_bytes(ctx, level_out)
        final, reads = [], 0
        self._place.wave(len(units), self.threads)
        for u in units:
            J = (u[0], u[-1] + 1)
            inb = X.overlapping((0, R), J)
            cells = [(b.r1 - b.r0) * (min(J[1], b.c1) - max(J[0], b.c0)) for b in inb]
            spec = dict(base, J=J, inputs=[(b.desc, b.metas) for b in inb])
            r0_ref, r1_ref, meta_ref = self._submit(3, spec, *[ref for b in inb for ref in b.refs],
                                                    sizes=[n * H_in // 2 for n in cells for _ in PARTS],
                                                    cpus=self.threads)
            final.append(((r0_ref, r1_ref), meta_ref, (0, d1), J, None))
            reads += sum(b.nbytes for b in inb)
        model = dict(reads=dict(inputs=reads), writes=dict(outputs=d1 * c * H_out), total=reads + d1 * c * H_out)
        return _Wave(final, [], len(units), dict(shape=(d1, X.shape[1]), chunks=c, model=model, bootstraps=len(units),
                                                 boot_kind=self._boot[2]))

    def _pcmm_group(self, ctx, s, X, ops, weight_bits: int, level_out: int, cuts=None) -> _Wave:
        """A PCMM (and the elementwise steps fused after it) on its grid; cuts: the rows at which its output blocks
        are returned in pieces (a bootstrap reads them: split.row_cuts), None: whole blocks."""
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
        meta = X.meta if isinstance(X, Dist) else _first_meta(X)  # planned (scale None) while pending
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
            pcmm_in_meta(dict(level=meta[0], factor=1.0), [b.metas for b in X.blocks])  # computed blocks)
        Uq, delta = pcmm.quantize(U, weight_bits)
        K = max(1, round(ctx.modulus(meta[0]) / delta))
        bias = None if s.bias is None else np.asarray(s.bias, dtype=np.float64).reshape(-1)
        rows, cols, reds = splits(d1, pm), splits(c, pn), splits(d2, pk)
        groups = [list(PARTS)] if ps == 1 else [[p] for p in PARTS]
        defer = ps > 1 and pk == 1 and bool(ops)  # part tasks alone: the steps need both parts, so the next wave
        fused = [] if defer else ops
        u_refs, u_bytes, put = {}, {}, 0
        for i, r in enumerate(rows):
            for t, red in enumerate(reds):
                blk = np.ascontiguousarray(Uq[r, red])
                u_refs[i, t] = ray.put(blk)
                u_bytes[i, t] = blk.nbytes
                self._place.put(u_refs[i, t])
                put += blk.nbytes
        needs_relin = any(op.needs_relin for _, op in fused)
        base = self._common(ctx, "pcmm" if pk == 1 else "partial", s.out, needs_relin)
        base.update(level=meta[0], bits=int(weight_bits), K=int(K), factor=float(delta * K), in_meta=None,
                    scale_out=None, bias=bias, P=P)
        # the plan's split: a task per node's share, with the node's CPUs (else tasks of one CPU)
        cpus = self._share_threads or 1
        if self._share_threads:
            base["threads"] = cpus
        final, others, tasks = [], [], 0
        reduces = []   # p_k > 1: per (i, j), its reduce wave's inputs (submitted once every partial is placed)
        self._place.wave(len(rows) * len(cols) * len(reds) * len(groups), cpus)
        for i, r in enumerate(rows):
            for j, cs in enumerate(cols):
                J = (cs.start, cs.stop)
                out_rows = (r.start * P, r.stop * P)
                nrow = out_rows[1] - out_rows[0]
                pieces_rows = [(out_rows[0] + p.start, out_rows[0] + p.stop)
                               for p in splits(nrow, min(nrow, pk * ps))] if pk > 1 else [out_rows]
                # p_s = 2 with deferred steps: each part task returns its rows in one piece per task of the next
                # (node-local) wave, so that each of those reads only its rows (of both parts); one piece is the
                # epilogue's array itself, no copy
                next_tasks = max(1, self.num_workers // self.node_threads) if defer else 1
                out_pieces = [(p.start, p.stop) for p in splits(nrow, min(nrow, next_tasks))]
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
                        sizes = [u_bytes[i, t]] + [b.nbytes // len(b.refs) for b in inb for _ in g]
                        if pk == 1:
                            spec["ops"] = [(name, op.rows(*out_rows)) for name, op in fused]
                            if len(g) == 2:
                                final += self._submit_cut(spec, cuts, out_rows, J, u_refs[i, t], *args, sizes=sizes,
                                                          metas=margs, cpus=cpus)
                            else:
                                spec["pieces"] = out_pieces
                                part_refs[g[0]] = self._submit(len(out_pieces) + 1, spec, u_refs[i, t], *args,
                                                               sizes=sizes, metas=margs, cpus=cpus)
                        else:
                            spec["pieces"] = [(a - out_rows[0], b_ - out_rows[0]) for a, b_ in pieces_rows]
                            refs = self._submit(len(pieces_rows) * len(g) + 1, spec, u_refs[i, t], *args,
                                                sizes=sizes, metas=margs, cpus=cpus)
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
                    reduces.append((J, pieces_rows, partial_refs))
        self._place.wave(sum(len(pr) for _, pr, _ in reduces), cpus)
        for J, pieces_rows, partial_refs in reduces:
            for sidx, pr in enumerate(pieces_rows):
                args, piece_parts = [], []
                for g, refs in partial_refs:
                    for k, p in enumerate(g):
                        args.append(refs[sidx * len(g) + k])
                        piece_parts.append(p)
                piece = (pr[1] - pr[0]) * (J[1] - J[0]) * (meta[0] + 1) * N * 8   # one part's partial sums
                margs = []  # no input blocks: the input's metadata from one of its blocks
                spec = dict(base, kind="reduce", J=J, out_rows=pr, inputs=[], wave=1, piece_parts=piece_parts,
                            meta_inputs=[self._meta_spec(X.blocks[0], margs)],
                            ops=[(name, op.rows(*pr)) for name, op in fused])
                final += self._submit_cut(spec, cuts, pr, J, *args, sizes=[piece] * len(args), metas=margs,
                                          cpus=cpus)
                tasks += 1
        model = pcmm_store_bytes((pm, pn, pk, ps), d1, d2, c, H_in, H_pcmm if defer else H_out, float(Uq.itemsize),
                                 d_in, P)
        return _Wave(final, others, tasks, dict(grid=(pm, pn, pk, ps), put_bytes=put, model=model,
                                                ct_bytes=(H_in, H_out), shape=(d1 * P, X.shape[1]), chunks=c,
                                                deferred=defer))

    def _ew_group(self, ctx, s, X, ops, level_out: int) -> _Wave:
        X = self._as_dist(ctx, X, self.num_workers, 1)
        needs_relin = any(op.needs_relin for _, op in ops)
        base = self._common(ctx, "ew", s.out, needs_relin)
        final, reads = [], 0
        parts = max(1, -(-self.num_workers // len(X.blocks)))
        H_in, H_out = ct_bytes(ctx, X.level), ct_bytes(ctx, level_out)
        per_block = [-(-(b.r1 - b.r0) // max(1, self.cts_per_task // (b.c1 - b.c0))) if self.cts_per_task
                     else min(b.r1 - b.r0, parts) for b in X.blocks]
        self._place.wave(sum(per_block))
        for b, n_tasks in zip(X.blocks, per_block):
            nr, nc = b.r1 - b.r0, b.c1 - b.c0
            for rs in splits(nr, n_tasks):
                rows = (b.r0 + rs.start, b.r0 + rs.stop)
                margs: list = []
                spec = dict(base, J=(b.c0, b.c1), out_rows=rows, inputs=[(b.desc, self._meta_spec(b, margs))],
                            ops=[(name, op.rows(*rows)) for name, op in ops])
                r0_ref, r1_ref, meta_ref = self._submit(3, spec, *b.refs, sizes=[b.nbytes // len(b.refs)] * 2,
                                                        metas=margs)
                final.append(((r0_ref, r1_ref), meta_ref, rows, (b.c0, b.c1), None))
            reads += n_tasks * nr * nc * H_in  # every task of a block takes the whole block (both parts)
        n = X.rows * X.chunks
        model = dict(reads=dict(inputs=reads), writes=dict(outputs=n * H_out), total=reads + n * H_out)
        return _Wave(final, [], len(final), dict(shape=X.shape, chunks=X.chunks, cts_per_task=self.cts_per_task,
                                                 model=model))

    def _finish(self, group: list, wave: _Wave, t0: float, planned: tuple) -> Dist:
        """A group's output as a Dist right after its submission: the blocks name their producing tasks' meta refs
        (the next waves take them as task arguments), so the driver submits the whole program without waiting
        between waves; _collect fetches the metas and the statistics at the end."""
        blocks = []
        for f in wave.final:
            nb = (f[2][1] - f[2][0]) * (f[3][1] - f[3][0]) * 2 * (planned[0] + 1) * self._N * 8
            a, b = f[4] if f[4] is not None else (None, None)
            blocks.append(Block(f[0], f[2][0], f[2][1], f[3][0], f[3][1], None, nb, meta_src=(f[1], a, b)))
        self._pending.append((group, wave, blocks, time.perf_counter() - t0))
        return Dist(wave.info["shape"], wave.info["chunks"], blocks, planned=planned)

    def _collect(self, timings: dict | None) -> None:
        """Waits for every wave (a task's error is raised here, typed as its cause), fills the blocks' metas,
        checks the planned levels and records the statistics per step. A wave's time runs from the end of the
        previous wave's last task (the run's first wave: from the submission after the input put) to the end of
        its own last task (the tasks' wall clocks: time.time() on their nodes)."""
        ray = self.ray
        prev_end = self._t_ready
        for group, wave, blocks, t_sub in self._pending:
            # part tasks return several blocks under one meta: fetch each task's meta once
            refs = list({f[1]: None for f in wave.final}) + list(wave.others)   # one meta per task
            got = dict(zip(refs, ray.get(refs)))
            allm = [got[r] for r in refs]
            planned = [self._place.planned(r) for r in refs]
            placed = [sum(p is not None for p in planned),
                      sum(p == m["node"] for p, m in zip(planned, allm) if p is not None)]
            self._placed = [a + b for a, b in zip(self._placed, placed)]
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
                              # tasks sent to a node (several nodes: next to their inputs), and those that ran there
                              placement=dict(placed=placed[0], on_node=placed[1]),
                              group_task_seconds=sum(m["seconds"] for m in allm),
                              group_task_cpu_seconds=sum(m["cpu"] for m in allm),
                              # first touches of fresh memory in the tasks (~0.3 GB/s on a loaded VM: worth watching)
                              page_faults=sum(m["page_faults"] for m in allm),
                              # whether every task's process had tuned its malloc (opt-in: hemlp.runtime.ray.malloc)
                              malloc_tuned=all(m["malloc_tuned"] for m in allm),
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
                    if "bootstraps" in info:  # refresh tasks: the calls, and how their processes got the keys
                        st.update(bootstraps=info["bootstraps"], boot_kind=info["boot_kind"],
                                  processes=sorted({m["pid"] for m in allm}),
                                  keys_loaded=sum(bool(m.get("keys_loaded")) for m in allm),
                                  keys_decoded=sum(bool(m.get("keys_decoded")) for m in allm))
                else:
                    st.update(fused_into=group[0].out, grid=info.get("grid"), cts_per_task=info.get("cts_per_task"))
                self.stats[e.out] = st
        self._pending = []

    def _run_segment(self, ctx, steps, i: int, vals: dict, users: dict) -> int:
        """Steps i, i + 1, .. up to the next sharded PCMM (or the output) as one wave of node-local tasks; returns
        the index of the step after them."""
        j = i
        while (j < len(steps) and steps[j].op not in (StepOp.INPUT, StepOp.OUTPUT, *REFRESH)
               and steps[j].out not in self._on_grid
               and not (self.cts_per_task is not None and steps[j].op in ELEMENTWISE)):
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
        ray = self.ray
        self._params = ctx.params.to_bytes()
        self._N, self._weight_bits = ctx.N, weight_bits
        self._place = Placement(ray)
        self._placed = [0, 0]   # tasks placed on a node, and those that ran there
        # the grids of this run: grid=, else on several nodes the plan's split over them (one task per node's share)
        self._grids, split = self.grid, None
        nodes = split_nodes(self._place.cpus, self.num_workers)
        if self.grid is None and nodes > 1:
            split = split_of(steps, ctx.N, C.chunks, nodes)
            self._grids = split.grids
            self.stats["_split"] = split.stats()
        self._share_threads = self.node_threads if split is not None else None
        self._on_grid = {s.out for s in steps if s.op == "pcmm" and self._sharded(ctx, s, C.chunks)}
        if relin_key is not None and any(s.op in ACT_OPS for s in steps):
            data, digest = relin_bytes(relin_key)
            self._rlk = (relin_key, digest, [ray.put(data)])
            self._rlk_bytes = len(data)
            self.stats["_keys"] = dict(op="keys", put_bytes=len(data), nodes=[], tasks=0)
        self._put_boot_keys(ctx, steps, C.chunks)
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
                    C = (C.dropped(s.level_out) if isinstance(C, MappedCtMatrix) else
                         CtMatrix(ctx, [ctx.drop_level(ct, s.level_out) for ct in C.cts], C.shape, C.chunks, C.format))
                vals[s.out] = C
                i += 1
                continue
            if s.op in (StepOp.ALIAS, StepOp.OUTPUT):
                vals[s.out] = vals[s.inputs[0]]
                _release(vals, users, s.inputs[0])
                out_name = s.out if s.op == "output" else out_name
                i += 1
                continue
            if (s.out not in self._on_grid and s.op not in REFRESH
                    and not (self.cts_per_task is not None and s.op in ELEMENTWISE)):
                i = self._run_segment(ctx, steps, i, vals, users)
                continue
            # the group: s plus the elementwise steps that only consume the previous one
            group = [s]
            if s.op in REFRESH and _refresh_drop(steps, i + 1, users):   # its level drop, in its tasks
                group.append(steps[i + 1])
            if self.cts_per_task is None or s.op not in ELEMENTWISE:
                while (i + len(group) < len(steps) and steps[i + len(group)].op in ELEMENTWISE
                       and steps[i + len(group)].inputs[0] == group[-1].out and users.get(group[-1].out, 0) == 1
                       and (self.cts_per_task is None)):
                    group.append(steps[i + len(group)])
            ops = [(e.out, ElementwiseOp.from_step(e)) for e in (group[1:] if s.op not in ELEMENTWISE else group)
                   if e.op != StepOp.DROP]
            self._layer_start(s.out)
            t0 = time.perf_counter()
            x = vals[s.inputs[0]]
            if s.op == "pcmm":
                wave = self._pcmm_group(ctx, s, x, ops, weight_bits, group[-1].level_out,
                                        self._cuts.get(group[-1].out))
            elif s.op in REFRESH:
                drop = next(((e.out, e.level_out) for e in group if e.op == StepOp.DROP), None)
                wave = (self._boot_group(ctx, s, x, ops, group[-1].level_out, drop) if s.op == StepOp.BOOTSTRAP
                        else self._mambo_group(ctx, s, x, ops, weight_bits, group[-1].level_out, drop))
            else:
                wave = self._ew_group(ctx, s, x, ops, group[-1].level_out)
            labels = (x.meta if isinstance(x, Dist) else _first_meta(x))[2:]  # slots, encoding, .., key
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
        if isinstance(C, MappedCtMatrix):
            C.verify()   # the file's SHA-256 (hashed meanwhile on a second core): no output of a corrupted file
        # the run's totals (nodes: none of its own, as the other entries that are not steps)
        self.stats["_placement"] = dict(op="placement", nodes=[], tasks=self._placed[0], on_node=self._placed[1],
                                        cluster_nodes=len(self._place.cpus))
        for name, head in self._after.items():
            self.stats[name]["after"] = head
        t0 = time.perf_counter()
        with driver_threads(usable_cores()):  # the last wave is done: the driver has the machine
            res = self._materialise(ctx, out) if isinstance(out, Dist) else out
        self.stats["_output"] = dict(op="output", seconds=time.perf_counter() - t0, nodes=[], tasks=0,
                                     get_bytes=sum(b.nbytes for b in out.blocks) if isinstance(out, Dist) else 0)
        return res


def _first_meta(C) -> tuple:
    """meta_of the matrix's first ciphertext (of a mapped batch: that one imported alone)."""
    return meta_of((C.element(0) if isinstance(C, MappedCtMatrix) else C.cts[0]).native)


def _pieces_of(rows: slice, cols: slice, C, ctx) -> list:
    """rows cut into pieces whose ciphertexts (x cols) hold at most C.block_bytes (one row at least)."""
    per_row = (cols.stop - cols.start) * ct_bytes(ctx, C.level)
    n = max(1, C.block_bytes // per_row)
    return [slice(a, min(a + n, rows.stop)) for a in range(rows.start, rows.stop, n)]


def _release(vals: dict, users: dict, name: str) -> None:
    """One read of value `name` is done; after its last read the program drops it (its blocks' objects are freed
    once no task argument holds them)."""
    users[name] -= 1
    if users[name] == 0:
        vals.pop(name, None)


def _refresh_drop(steps, i: int, users: dict) -> bool:
    """Whether step i is a level drop of the refresh before it, its only reader (fused into the refresh's tasks)."""
    return (0 < i < len(steps) and steps[i].op == StepOp.DROP and steps[i - 1].op in REFRESH
            and steps[i].inputs[0] == steps[i - 1].out and users.get(steps[i - 1].out, 0) == 1)


def supported(steps, C, bootstraps: bool = False) -> bool:
    """Whether RayProgram runs this program (RLWE input, every step in SUPPORTED; with bootstraps=True, in
    BOOTSTRAPPED, or a level drop right after a refresh that only it reads)."""
    ops = BOOTSTRAPPED if bootstraps else SUPPORTED
    users: dict = {}
    for s in steps:
        for name in s.inputs:
            users[name] = users.get(name, 0) + 1
    # an unrescaled PCMM (final_rescale=False) runs through RayExecutor's ray_pcmm(rescale=False)
    return C.format == "rlwe" and all(
        (s.op in ops or (bootstraps and _refresh_drop(steps, i, users)))
        and not (s.op == StepOp.PCMM and s.info.rescale is False) for i, s in enumerate(steps))
