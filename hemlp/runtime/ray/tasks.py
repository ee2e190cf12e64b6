"""What runs in the Ray workers: the task bodies, their per-process caches and their remote-function registry.

``group_task`` is every task of RayProgram's waves (see hemlp.runtime.ray.program for the kinds: node-local
"segment" tasks, sharded "pcmm" / "partial" / "reduce" tasks, "ew" row groups, "refresh": whole bootstrap calls of a
bootstrap step on the node holding their ciphertexts, "mambo": one unit of a MaMBo step); ``elementwise_task`` and
``bootstrap_task`` are the per-step executor's (RayExecutor): a group of ciphertexts through one elementwise step,
one or two ciphertexts through a bootstrap (the Bootstrapper built once per process from the keys put once). Every
worker process builds the ``fhe.Context`` once and caches it by the parameter hash, and decodes the
relinearisation key (put once per run) once by its digest. Tasks are pure: their
arguments stay referenced by the driver, so a worker killed mid-layer is re-run (TASK_RETRIES) with the same bits.
"""
from __future__ import annotations

import os
import resource
import time
import warnings

import numpy as np

from hemlp import _core
from hemlp.bootstrap import BatchBootstrapKeys, Bootstrapper, BootstrapKeys, MamboBootstrapper
from hemlp import fhe
from hemlp.fhe import Ciphertext
from hemlp.errors import MissingKeyError
from hemlp.pcmm import CtMatrix
from hemlp.runtime.artifacts import EvalKeys
from hemlp.runtime.local import (ElementwiseOp, LocalExecutor, bootstrap_retag, elementwise, mambo_unit, refresh_unit,
                                 run_step)
from hemlp.runtime.ray.blocks import (add_mod_limbs, block_pairs, export_block, import_range, meta_of, pack_cts,
                                      row_pieces, unpack_cts)
from hemlp.runtime.ray.gemm import block_product, epilogue, out_meta, pcmm_in_meta, pcmm_in_place
from hemlp.runtime.ray.malloc import malloc_tuned, tune_malloc
from hemlp.runtime.ray.node_keys import KeyHolder, load_shared, load_staged
from hemlp.runtime.ray.session import TASK_RETRIES, import_ray, node_id
from hemlp.step_ops import ELEMENTWISE_OPS, UNCHECKED_LEVEL_OPS, StepOp

__all__ = ["ELEMENTWISE", "group_task", "group_remote", "elementwise_task", "elementwise_remote", "worker_context",
           "worker_relin_key", "worker_bootstrapper", "bootstrap_task", "bootstrap_remote", "mambo_task",
           "mambo_remote", "clear_worker_cache", "resolve_metas", "BOOT_KINDS", "boot_kind"]

#: the steps that act on each ciphertext alone (fused into the task that produced their input)
ELEMENTWISE = ELEMENTWISE_OPS

_WORKER_CACHE: dict = {}   # per worker process: contexts by parameter hash, relin keys by digest
_CACHE_MAX = 8


def _cache(key, make):
    """make() once per key in this worker process (the oldest entry goes first past _CACHE_MAX)."""
    if key not in _WORKER_CACHE:
        while len(_WORKER_CACHE) >= _CACHE_MAX:
            _WORKER_CACHE.pop(next(iter(_WORKER_CACHE)))
        _WORKER_CACHE[key] = make()
    return _WORKER_CACHE[key]


def clear_worker_cache() -> None:
    """Forget this process's cached contexts and keys."""
    _WORKER_CACHE.clear()


def worker_context(phash: str, params: bytes, min_security_bits: int = 128):
    """The fhe.Context of these parameters, built once per worker process under the driver's security policy
    (min_security_bits of the driver's context: a worker never lowers it on the user's behalf)."""
    def make():
        p = fhe.Params.from_bytes(params)
        with warnings.catch_warnings():  # the driver already accepted (and warned about) these parameters
            warnings.simplefilter("ignore", fhe.InsecureParametersWarning)
            return fhe.Context(p, allow_insecure=min_security_bits == 0)

    return _cache(("ctx", phash, min_security_bits), make)


def worker_relin_key(ray, ctx, digest: str, holder: list):
    """The relinearisation key the driver put once (holder[0]: its ObjectRef), decoded once per process by digest."""
    return _cache(("rlk", ctx.hash, digest), lambda: fhe.from_bytes(ray.get(holder[0]), ctx))


def elementwise_task(phash: str, params: bytes, op: ElementwiseOp, rows, arr, metas, rlk_digest, rlk_holder,
                     threads: int, tune: bool = False, min_security_bits: int = 128):
    """One group of ciphertexts through one elementwise step; rows[i]: the (op-local) row of ciphertext i."""
    ray = import_ray()

    if tune:
        tune_malloc()
    _core.set_num_threads(threads)
    ctx = worker_context(phash, params, min_security_bits)
    rlk = worker_relin_key(ray, ctx, rlk_digest, rlk_holder) if op.needs_relin else None
    fn = elementwise(ctx, op, rlk)
    out = [fn(r, ct) for r, ct in zip(rows, unpack_cts(ctx, arr, metas))]
    a, m = pack_cts(out)
    return a, m, node_id()


#: the bootstrapping key kinds the driver ships (RayExecutor, RayProgram): single CtS-first keys, or the batched
#: S2C-first ones
BOOT_KINDS = ("single", "batch")


def boot_kind(keys, step) -> str:
    """The kind of bootstrapping keys (BOOT_KINDS) that bootstrap step `step` runs on, checked against `keys` (the
    run's hemlp.bootstrap keys): a MissingKeyError naming the fix when they are absent or of the other pipeline."""
    if keys is None:
        raise MissingKeyError(f"step {step.out} bootstraps: run the plan with the eval keys' bootstrapping keys")
    have = "batch" if isinstance(keys, BatchBootstrapKeys) else "single"
    if have != ("batch" if step.info.order == "s2c_first" else "single"):
        raise MissingKeyError(f"step {step.out} runs the {step.info.order or 'cts_first'} bootstrapping "
                              f"pipeline; the eval keys hold {type(keys).__name__}: use the eval keys this plan's "
                              "keygen() makes")
    return have


#: what a worker process did for a key set (the tasks report it): its digest when it decoded the shipped bytes (the
#: one worker per machine that writes the shared file, or every worker without sharing)
_DECODED: list = []


def worker_bootstrapper(ray, ctx, digest: str, holder: KeyHolder, kind: str = "single"):
    """(the bootstrapper of the bootstrapping keys the driver put once (holder.ref: their ObjectRef; the keys
    mapped from the machine's shared copy per holder.shared: node_keys; or, staged, mapped from the file the driver
    staged as holder.staged, with no bytes shipped), built once per worker process by digest,
    whether this call built it). kind "single": BootstrapKeys -> Bootstrapper; "batch": BatchBootstrapKeys
    (S2C-first) -> MamboBootstrapper, which runs batched bootstraps and MaMBo steps. Whether this call decoded the
    shipped bytes (rather than mapping the machine's file): keys_decoded(digest) right after."""
    if kind not in BOOT_KINDS:
        raise ValueError(f"bootstrapping key kind must be one of {BOOT_KINDS}, got {kind!r}")
    key = ("boot", ctx.hash, digest, kind)
    miss = key not in _WORKER_CACHE
    _DECODED.clear()

    def decode():
        keys_type = BatchBootstrapKeys if kind == "batch" else BootstrapKeys
        _DECODED.append(digest)
        return EvalKeys(f"bootstrap-{digest}", bootstrap_keys=keys_type.from_bytes(ray.get(holder.ref), ctx))

    def make():
        if holder.staged is not None:
            keys = load_staged(holder.staged, ctx, holder.shared)
        else:
            keys = load_shared(f"boot-{digest}", ctx, decode, holder.shared).bootstrap_keys
        return MamboBootstrapper(ctx, keys) if kind == "batch" else Bootstrapper(ctx, keys)

    return _cache(key, make), miss


def keys_decoded(digest: str) -> bool:
    """Whether the last worker_bootstrapper call of this process decoded key set `digest` from the shipped bytes."""
    return digest in _DECODED


def _boot_task_setup(phash: str, params: bytes, digest, holder, kind: str, threads: int, tune: bool,
                     min_security_bits: int) -> tuple:
    """What a bootstrapping task starts with: (the context, the bootstrapper of kind, whether it was built now)."""
    ray = import_ray()
    if tune:
        tune_malloc()
    _core.set_num_threads(threads)
    ctx = worker_context(phash, params, min_security_bits)
    boot, miss = worker_bootstrapper(ray, ctx, digest, holder, kind)
    return ctx, boot, miss


def _task_meta(t_start: float, cpu_start: float, miss: bool, t0: float, t1: float) -> dict:
    return dict(node=node_id(), pid=os.getpid(), keys_loaded=miss, keys_decoded=bool(_DECODED),
                bootstrap_seconds=t1 - t0,
                seconds=time.perf_counter() - t_start, cpu=time.process_time() - cpu_start,
                span=(time.time() - (time.perf_counter() - t_start), time.time()))


def bootstrap_task(phash: str, params: bytes, step, arr, metas, boot_digest, boot_holder, threads: int,
                   tune: bool = False, min_security_bits: int = 128, kind: str = "single", pair: bool = False):
    """One unit of a bootstrap step (one ciphertext or two refreshed together: local.bootstrap_units; a group of
    the S2C-first batched pipeline: local.batch_units) through local.refresh_unit, the in-process arithmetic, so
    the same bits. Returns (array, metas, task meta)."""
    t_start, cpu_start = time.perf_counter(), time.process_time()
    ctx, boot, miss = _boot_task_setup(phash, params, boot_digest, boot_holder, kind, threads, tune, min_security_bits)
    t0 = time.perf_counter()
    out = refresh_unit(ctx, boot, unpack_cts(ctx, arr, metas), step, pair)
    t1 = time.perf_counter()
    a, m = pack_cts(out)
    return a, m, _task_meta(t_start, cpu_start, miss, t0, t1)


def mambo_task(phash: str, params: bytes, step, arr, metas, rows: int, weight_bits: int, real: bool, boot_digest,
               boot_holder, threads: int, tune: bool = False, min_security_bits: int = 128):
    """One unit of a MaMBo step (one chunk of the input's rows, or two sharing every refresh: local.mambo_units)
    through local.mambo_unit, so the same bits. The ciphertexts arrive chunk after chunk, `rows` each; returns the
    outputs the same way (d1 per chunk) and the task meta."""
    t_start, cpu_start = time.perf_counter(), time.process_time()
    ctx, boot, miss = _boot_task_setup(phash, params, boot_digest, boot_holder, "batch", threads, tune,
                                       min_security_bits)
    cts = unpack_cts(ctx, arr, metas)
    chunks = [cts[i:i + rows] for i in range(0, len(cts), rows)]
    t0 = time.perf_counter()
    outs = mambo_unit(ctx, boot, step, chunks, weight_bits, real)
    t1 = time.perf_counter()
    a, m = pack_cts([y for ys in outs for y in ys])
    return a, m, _task_meta(t_start, cpu_start, miss, t0, t1)


_REMOTE = {}


def _remote(key: str, fn):
    """fn as a Ray remote function of three returns on one CPU, made on first use (importing this module does not
    need ray)."""
    if key not in _REMOTE:
        _REMOTE[key] = import_ray().remote(num_returns=3, max_retries=TASK_RETRIES, retry_exceptions=False,
                                           num_cpus=1)(fn)
    return _REMOTE[key]


def bootstrap_remote():
    """bootstrap_task as a Ray remote function."""
    return _remote("boot", bootstrap_task)


def mambo_remote():
    """mambo_task as a Ray remote function."""
    return _remote("mambo", mambo_task)


def elementwise_remote():
    """elementwise_task as a Ray remote function."""
    return _remote("ew", elementwise_task)


def _apply_ops(ctx, spec, cts: list, nc: int, rlk, secs: dict, levels: dict) -> list:
    for name, op in spec["ops"]:
        t0 = time.perf_counter()
        fn = elementwise(ctx, op, rlk)
        cts = [fn(i // nc, ct) for i, ct in enumerate(cts)]  # op rows are local to the block (op.rows(r0, r1))
        secs[name] = secs.get(name, 0.0) + time.perf_counter() - t0
        levels[name] = cts[0].level
    return cts


def _ops_export(ctx, spec, cts: list, nc: int, rlk, secs: dict, levels: dict) -> tuple[list, list]:
    """A task's output block: the fused elementwise steps on its ciphertexts (row-major over nc chunks), then their
    export as one block: ([part 0, part 1], their metas). The export's time counts to the last fused step (none:
    the task's head)."""
    cts = _apply_ops(ctx, spec, cts, nc, rlk, secs, levels)
    t0 = time.perf_counter()
    objs = [ct.native for ct in cts]
    out = export_block(objs, len(objs) // nc, nc, ctx.N)
    last = spec["ops"][-1][0] if spec["ops"] else spec["head"]
    secs[last] = secs.get(last, 0.0) + time.perf_counter() - t0
    return [out[0], out[1]], [meta_of(o) for o in objs]


def _block_out(ctx, spec, Z: dict, rlk, secs: dict, levels: dict):
    """Both parts of a PCMM's output block (after the epilogue), through the coefficient-encoding bias and the
    fused steps when there are any: (part 0, part 1, block metas)."""
    head, (r0, r1), (c0, c1) = spec["head"], spec["out_rows"], spec["J"]
    nr, nc = r1 - r0, c1 - c0
    meta = out_meta(ctx, spec)
    levels[head] = meta[0]
    coeff_bias = spec["bias"] is not None and meta[3] != 0
    shape = (meta[0] + 1, nr, nc, ctx.N)
    if not spec["ops"] and not coeff_bias:  # the epilogue's arrays are the block
        return Z[0].reshape(shape), Z[1].reshape(shape), [meta] * (nr * nc)
    t0 = time.perf_counter()
    objs = _core.cts_from_parts(ctx.native, Z[0].reshape(shape), Z[1].reshape(shape), *meta)
    cts = [ctx.wrap(Ciphertext, o) for o in objs]
    if coeff_bias:  # an encoded constant, as pcmm.pcmm_gather does in coefficient encoding
        cts = [ctx.add(ct, float(spec["bias"][(r0 + i // nc) // spec["P"]])) for i, ct in enumerate(cts)]
    secs[head] = secs.get(head, 0.0) + time.perf_counter() - t0
    (part0, part1), metas = _ops_export(ctx, spec, cts, nc, rlk, secs, levels)
    return part0, part1, metas


def _row_cuts(outs: list, cuts) -> list:
    """Both parts of an output block (L, rows, chunks, N) as row pieces (cuts: local (a, b) ranges; None: whole),
    part after part per piece: the pieces a next wave's tasks read alone (a bootstrap call's rows)."""
    if not cuts or len(cuts) == 1:
        return list(outs)
    return [np.ascontiguousarray(o[:, a:b]) for a, b in cuts for o in outs]


def resolve_metas(m, meta_dicts) -> list:
    """A block's per-ciphertext metas: a list, or ("arg", k, a, b) = the metas a:b of the k-th meta dict argument
    (a block produced by an earlier wave, whose metas the driver has not fetched)."""
    if isinstance(m, tuple) and m and m[0] == "arg":
        _, k, a, b = m
        got = meta_dicts[k]["metas"]
        return got if a is None else got[a:b]
    return m


def _nbytes(a) -> int:
    """Bytes of a task argument: an array, or a ct-major input part (a list of (limbs, N) arrays)."""
    return sum(x.nbytes for x in a) if isinstance(a, list) else a.nbytes


def _minor_faults() -> int:
    """This process's minor page faults so far (first touches of fresh memory: a task's page faults say whether
    its arrays landed on memory the process had already mapped)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def group_task(spec: dict, *arrays):
    """One task of a group (see above). arrays: the ObjectRef arguments, resolved zero-copy by Ray (weights, then
    the parts of the input blocks, or partial pieces). Returns the output array(s) and a small meta dict (last)."""
    ray = import_ray()

    t_start, cpu_start, wall_start = time.perf_counter(), time.process_time(), time.time()
    faults_start = _minor_faults()
    if spec.get("tune_malloc"):  # opt-in (hemlp.runtime.ray.malloc)
        tune_malloc()
    _core.set_num_threads(spec["threads"])
    ctx = worker_context(spec["phash"], spec["params"], spec["min_security_bits"])
    kind, head = spec["kind"], spec["head"]
    key_read = 0
    rlk = None
    if spec["rlk"] is not None:
        digest, holder = spec["rlk"]
        miss = ("rlk", ctx.hash, digest) not in _WORKER_CACHE
        rlk = worker_relin_key(ray, ctx, digest, holder)
        key_read = spec["rlk_bytes"] if miss else 0
    secs, levels = {}, {}
    n_meta = spec.get("n_meta", 0)
    if n_meta:  # the previous waves' meta dicts (their block metas), resolved by Ray like the arrays
        arrays, meta_dicts = arrays[:-n_meta], arrays[-n_meta:]
    else:
        meta_dicts = ()
    descs = [(d, resolve_metas(m, meta_dicts)) for d, m in spec["inputs"]]
    if spec.get("factor") is not None:  # a PCMM: its input's metadata is known here, not at submission
        src = ([resolve_metas(m, meta_dicts) for m in spec["meta_inputs"]] if "meta_inputs" in spec  # reduce tasks
               else [m for _, m in descs])
        spec = dict(spec, **pcmm_in_meta(spec, src))

    def finish(outs, metas=None, **extra):
        meta = dict(node=node_id(), read=sum(map(_nbytes, arrays)),
                    key_read=key_read, written=sum(o.nbytes for o in outs), secs=secs, levels=levels, metas=metas,
                    wave=spec["wave"], pid=os.getpid(), threads=spec["threads"], malloc_tuned=malloc_tuned(),
                    page_faults=_minor_faults() - faults_start, seconds=time.perf_counter() - t_start,
                    cpu=time.process_time() - cpu_start,
                    span=(wall_start, time.time()), **extra)
        return (*outs, meta)

    if kind == "segment":
        return finish(*segment_run(ctx, spec, arrays, descs, rlk, secs, levels))
    if kind in ("refresh", "mambo"):
        digest, holder, boot_kind_ = spec["boot"]
        boot, loaded = worker_bootstrapper(ray, ctx, digest, holder, boot_kind_)
        decoded = keys_decoded(digest)
        body = refresh_run if kind == "refresh" else mambo_run
        outs, metas = body(ctx, spec, boot, block_pairs(arrays, descs), rlk, secs, levels)
        return finish(outs, metas, keys_loaded=loaded, keys_decoded=decoded)
    if kind in ("pcmm", "partial"):
        parts = spec["parts"]
        n = len(parts)
        U = arrays[0]
        blocks = [(dict(zip(parts, arrays[1 + n * k: 1 + n * (k + 1)])), d, m) for k, (d, m) in enumerate(descs)]
        t0 = time.perf_counter()
        Ys = block_product(ctx, spec, U, blocks)
        secs[head] = time.perf_counter() - t0
        if kind == "partial":  # p_k > 1: U~ X mod q in row pieces, one per reduce task, each part in turn
            nJ = spec["J"][1] - spec["J"][0]
            outs = [np.ascontiguousarray(Ys[p][:, a * nJ: b * nJ]) for a, b in spec["pieces"] for p in parts]
            return finish(outs)
        Z = epilogue(ctx, spec, Ys, secs, head)
        del Ys
        if n == 1:  # p_s = 2: this task's part of the output block, in row pieces (one per following task)
            meta = out_meta(ctx, spec)
            levels[head] = meta[0]
            g0, nc = spec["out_rows"][0], spec["J"][1] - spec["J"][0]
            z = Z[parts[0]]
            outs = [np.ascontiguousarray(z[:, (a - g0) * nc: (b - g0) * nc]).reshape(z.shape[0], b - a, nc, ctx.N)
                    for a, b in spec["pieces"]]
            return finish(outs, [meta] * ((spec["out_rows"][1] - g0) * nc))
        *outs, metas = _block_out(ctx, spec, Z, rlk, secs, levels)
        return finish(_row_cuts(outs, spec.get("cuts")), metas)
    if kind == "reduce":
        t0 = time.perf_counter()
        L = arrays[0].shape[0]
        qv = np.array([[[ctx.modulus(l)]] for l in range(L)], dtype=np.uint64)
        Ys = {}
        for p, piece in zip(spec["piece_parts"], arrays):
            Ys[p] = piece if p not in Ys else add_mod_limbs(Ys[p], piece, qv)  # read-only views; sums are new
        secs[head] = time.perf_counter() - t0
        Z = epilogue(ctx, spec, Ys, secs, head)
        del Ys
        *outs, metas = _block_out(ctx, spec, Z, rlk, secs, levels)
        return finish(_row_cuts(outs, spec.get("cuts")), metas)
    if kind == "ew":
        t0 = time.perf_counter()
        cts = import_range(ctx, block_pairs(arrays, descs), spec["out_rows"], spec["J"])
        secs["_import"] = time.perf_counter() - t0
    else:
        raise AssertionError(kind)
    return finish(*_ops_export(ctx, spec, cts, spec["J"][1] - spec["J"][0], rlk, secs, levels))


def _refreshed_block(ctx, spec, out: list, nc: int, rlk, secs: dict, levels: dict):
    """A refresh task's outputs (row-major over nc chunks) through the level drop fused after the refresh
    (spec["drop"]: (name, level), or None; as local.run's DROP) and the fused elementwise steps, exported as one
    block: (both parts, its ciphertexts' metas)."""
    head = spec["head"]
    levels[head] = out[0].level
    if spec.get("drop"):
        name, level = spec["drop"]
        t0 = time.perf_counter()
        out = [ctx.drop_level(ct, level) for ct in out]
        secs[name] = time.perf_counter() - t0
        levels[name] = out[0].level
    return _ops_export(ctx, spec, out, nc, rlk, secs, levels)


def refresh_run(ctx, spec, boot, blocks: list, rlk, secs: dict, levels: dict):
    """One tile of a bootstrap step in a RayProgram wave (spec["rect"]: whole bootstrap calls, spec["calls"]: each
    call's ciphertexts as a range of the tile's, row-major; split.refresh_tiles): its ciphertexts imported from the
    blocks, re-tagged, refreshed call by call and restored by the in-process code (local.bootstrap_retag,
    local.refresh_unit: the same partners, so the same bits), then the fused elementwise steps and the export.
    Returns (both parts of the tile's block, its ciphertexts' metas)."""
    step, head = spec["step"], spec["head"]
    r0, r1, c0, c1 = spec["rect"]
    t0 = time.perf_counter()
    cts = bootstrap_retag(ctx, import_range(ctx, blocks, (r0, r1), (c0, c1)), step)
    secs["_import"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = [y for a, b in spec["calls"] for y in refresh_unit(ctx, boot, cts[a:b], step, spec["pair"])]
    del cts
    secs[head] = time.perf_counter() - t0
    return _refreshed_block(ctx, spec, out, c1 - c0, rlk, secs, levels)


def mambo_run(ctx, spec, boot, blocks: list, rlk, secs: dict, levels: dict):
    """One unit of a MaMBo step in a RayProgram wave (spec["J"]: one chunk, or two sharing every refresh:
    local.mambo_units): every input row of its chunks imported from the blocks, local.mambo_unit (the in-process
    arithmetic, so the same bits), then the fused elementwise steps and the export of the d1 output rows of its
    chunks. Returns (both parts of that block, its ciphertexts' metas)."""
    step, head, R = spec["step"], spec["head"], spec["rows"]
    J0, J1 = spec["J"]
    nc = J1 - J0
    t0 = time.perf_counter()
    cts = import_range(ctx, blocks, (0, R), (J0, J1))
    secs["_import"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    outs = mambo_unit(ctx, boot, step, [cts[k::nc] for k in range(nc)], spec["bits"], spec["real"])
    del cts
    out = [outs[k][r] for r in range(len(outs[0])) for k in range(nc)]     # row-major: d1 rows x its chunks
    secs[head] = time.perf_counter() - t0
    return _refreshed_block(ctx, spec, out, nc, rlk, secs, levels)


def segment_run(ctx, spec, arrays, descs, rlk, secs: dict, levels: dict):
    """A node-local task's steps (RayProgram._segment_wave): its input values imported from their blocks (its
    rows only for a split elementwise chain), the steps run by local.run_step on spec["threads"] native threads
    (the in-process arithmetic, so the same bits), then the output values exported part by part. An input that
    only PCMMs read (spec["in_place"]) is not imported: they read its blocks in the store (pcmm_in_place)."""
    t0 = time.perf_counter()
    rows, vals, stored, k = spec["out_rows"], {}, {}, 0
    for name, nb, shape, chunks in spec["values"]:
        blocks = [((arrays[2 * i], arrays[2 * i + 1]), *descs[i]) for i in range(k, k + nb)]
        k += nb
        if name in spec.get("in_place", ()):
            stored[name] = (blocks, shape, chunks)
            continue
        rr = rows if rows is not None else (0, shape[0])
        vals[name] = CtMatrix(ctx, import_range(ctx, blocks, rr, (0, chunks)), (rr[1] - rr[0], shape[1]), chunks,
                              "rlwe")
    secs["_import"] = time.perf_counter() - t0
    ex = LocalExecutor()
    for s in spec["steps"]:
        t0 = time.perf_counter()
        if s.op == StepOp.PCMM and s.inputs[0] in stored:
            y = pcmm_in_place(ctx, s, *stored[s.inputs[0]], spec["bits"])
        elif s.op in ELEMENTWISE and rows is not None:  # rows r0:r1 of the chain: per-row constants of those rows
            y = ex.map_cts(ctx, vals[s.inputs[0]], ElementwiseOp.from_step(s).rows(*rows), rlk, step=s.out)
        else:
            y = run_step(ctx, s, vals, ex, rlk, spec["bits"])
        vals[s.out] = y
        secs[s.out] = secs.get(s.out, 0.0) + time.perf_counter() - t0
        if s.op not in UNCHECKED_LEVEL_OPS:
            levels[s.out] = y.level
    t0 = time.perf_counter()
    outs, metas = [], []
    for name in spec["outputs"]:  # in row pieces, so that a next task reads only the rows it needs
        C = vals[name]
        objs = [ct.native for ct in C.cts]
        nc = C.chunks
        pieces = spec.get("pieces", {}).get(name) or row_pieces(len(objs) // nc, spec["n_pieces"])
        for a, b in pieces:
            out = export_block(objs[a * nc: b * nc], b - a, nc, ctx.N)
            outs += [out[0], out[1]]
        metas += [meta_of(o) for o in objs]
    last = spec["steps"][-1].out
    secs[last] = secs.get(last, 0.0) + time.perf_counter() - t0
    return outs, metas


def group_remote(num_returns: int):
    """group_task as a Ray remote function with num_returns returns (made once per count)."""
    key = ("group", num_returns)
    if key not in _REMOTE:
        ray = import_ray()
        _REMOTE[key] = ray.remote(num_returns=num_returns, max_retries=TASK_RETRIES, retry_exceptions=False,
                                  num_cpus=1)(group_task)
    return _REMOTE[key]
