"""run_groups: one request's independent groups of ciphertexts as Ray tasks, each through its layout's own program.

The data-parallel form of layouts (P), (A′) and (C) on Ray (the Layout protocol's groups / run_group /
join_groups: hemlp.layouts.base): the compiled model's files and its evaluation keys are put in the object store
once per run, every worker process loads them once (cached by their digest: a worker that has them already does not
even fetch them), and each task runs ``compiled.layout_impl.run_group`` on its group, the in-process code, so the
same bits as ``runtime="local"``. Encrypted weights (layout (C)) travel the same way. Groups are submitted at once;
Ray runs as many at a time as there are CPUs. Tasks are pure, so a lost worker's group is re-run (TASK_RETRIES).

Memory (the bootstrapping keys are GiBs at N16-boot): the keys travel as one uint8 array, which Ray stores out of
band, so a worker decodes them straight from the node's shared object store (no pickled copy in its heap) and then
holds only the decoded keys. The driver serialises them for each run and drops its serialised copy once it is in
the store; between runs it keeps only the model's files and the digest.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import resource
import tempfile
import time
from pathlib import Path

import numpy as np

from hemlp import _core
from hemlp.runtime.artifacts import EvalKeys
from hemlp.runtime.ray.blocks import pack_cts, packed_nbytes, unpack_cts
from hemlp.runtime.ray.node_keys import load_shared, shared_key_folder
from hemlp.runtime.ray.session import (TASK_RETRIES, check_task_cpus, import_ray, node_id, ray_session, spread_options,
                                      task_threads)

__all__ = ["ModelShipment", "run_groups", "group_request_task", "shipment_of", "key_array", "clear_request_cache"]


@dataclasses.dataclass
class ModelShipment:
    """What a worker needs to run a compiled model's groups: the model directory's files and the EvalKeys bytes."""

    files: dict               # the saved model directory's files by name
    keys: np.ndarray          # EvalKeys.to_bytes(ctx) as uint8 (bootstrapping keys included; out of band in the store)
    model_id: str
    allow_insecure: bool      # the driver's policy, carried to the workers
    digest: str               # SHA-256 of files and keys: the workers' cache key
    load_model: object        # load(directory, allow_insecure) -> compiled model (CompiledModel.load, pickled by name:
                              # the runtime sits below the model and does not import it)
    shared_keys: object = None  # RayOptions.shared_keys: how a machine's workers share one copy (node_keys)

    @classmethod
    def of(cls, compiled, load_model, eval_keys, known: "ModelShipment | None" = None,
           shared_keys=None) -> "ModelShipment":
        """known: an earlier shipment of the same model and keys (its files and digest are reused, the keys
        serialised again: the driver keeps no serialised copy between runs)."""
        keys = key_array(eval_keys, compiled.context)
        if known is not None:
            return cls(known.files, keys, known.model_id, known.allow_insecure, known.digest, load_model, shared_keys)
        with tempfile.TemporaryDirectory(prefix="hemlp-ship-") as tmp:
            compiled.save(tmp)
            files = {p.name: p.read_bytes() for p in sorted(Path(tmp).iterdir()) if p.is_file()}
        h = hashlib.sha256()
        for name, data in sorted(files.items()):
            h.update(name.encode() + hashlib.sha256(data).digest())
        h.update(hashlib.sha256(keys).digest())
        return cls(files, keys, compiled.model_id, bool(compiled.allow_insecure), h.hexdigest(), load_model,
                   shared_keys)

    def load(self):
        """(the compiled model, its EvalKeys), read from the shipped bytes (the keys in place, in the store), the keys
        mapped from the machine's shared copy unless shared_keys is False (node_keys)."""
        with tempfile.TemporaryDirectory(prefix=f"hemlp-model-{self.model_id}-") as tmp:
            for name, data in self.files.items():
                (Path(tmp) / name).write_bytes(data)
            compiled = self.load_model(tmp, allow_insecure=self.allow_insecure)  # reads everything into memory
        keys = load_shared(self.digest, compiled, lambda: EvalKeys.from_bytes(memoryview(self.keys), compiled),
                           self.shared_keys)
        return compiled, keys

    def light(self) -> "ModelShipment":
        """This shipment without its keys (what the driver keeps between runs)."""
        return dataclasses.replace(self, keys=np.empty(0, np.uint8))


def key_array(eval_keys, ctx) -> np.ndarray:
    """EvalKeys.to_bytes(ctx) written part by part into one uint8 array (never a second joined bytes copy)."""
    parts = [np.frombuffer(p, dtype=np.uint8) for p in eval_keys.to_parts(ctx)]
    out = np.empty(sum(p.size for p in parts), np.uint8)
    off = 0
    for p in parts:
        out[off: off + p.size] = p
        off += p.size
    return out


_LAST: list = []       # the driver's last shipment, without its keys: [(compiled, eval_keys, ModelShipment)]
_WORKER: dict = {}     # per worker process: loaded models by shipment digest, decoded weights by digest
_WORKER_MAX = 4


def shipment_of(compiled, load_model, eval_keys, shared_keys=None) -> ModelShipment:
    """The shipment of this model and these keys; the files and digest are kept for the last pair (a service runs
    many requests with them), the keys serialised for each run."""
    known = _LAST[0][2] if _LAST and _LAST[0][0] is compiled and _LAST[0][1] is eval_keys else None
    ship = ModelShipment.of(compiled, load_model, eval_keys, known, shared_keys)
    if known is None:
        _LAST[:] = [(compiled, eval_keys, ship.light())]
    return ship


def clear_request_cache() -> None:
    """Forget the driver's last shipment and this process's loaded models."""
    _LAST.clear()
    _WORKER.clear()


def _worker_cached(key, make):
    hit = key in _WORKER
    if not hit:
        while len(_WORKER) >= _WORKER_MAX:
            _WORKER.pop(next(iter(_WORKER)))
        _WORKER[key] = make()
    return _WORKER[key], not hit


def group_request_task(digest: str, holder: list, w_digest, w_holder, arr, metas, threads: int = 1, part=None):
    """One group through compiled.layout_impl.run_group (part: what of the program, None: all) in a worker:
    (output array, metas, task meta)."""
    ray = import_ray()
    t_start, cpu_start = time.perf_counter(), time.process_time()
    (compiled, keys), loaded = _worker_cached(("model", digest), lambda: ray.get(holder[0]).load())
    weights = None
    if w_digest is not None:
        weights, _ = _worker_cached(("weights", digest, w_digest),
                                    lambda: compiled.layout_impl.weights_from_bytes(ray.get(w_holder[0]), compiled))
    _core.set_num_threads(threads)
    ctx = compiled.context
    timings: dict = {}
    out = compiled.layout_impl.run_group(ctx, unpack_cts(ctx, arr, metas), keys, weights, timings, part)
    a, m = pack_cts(out)
    return a, m, dict(node=node_id(), pid=os.getpid(), model_loaded=loaded, timings=timings,
                      seconds=time.perf_counter() - t_start, cpu=time.process_time() - cpu_start,
                      peak_rss=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)   # Linux: KiB


_REMOTE: dict = {}


def _remote():
    if "task" not in _REMOTE:
        _REMOTE["task"] = import_ray().remote(num_returns=3, max_retries=TASK_RETRIES, retry_exceptions=False,
                                              num_cpus=1)(group_request_task)
    return _REMOTE["task"]


def run_groups(compiled, load_model, eval_keys, weights, ctx, groups: list, timings: dict | None = None, *,
               address=None, num_workers: int | None = None, stats: dict | None = None, part=None,
               threads_per_task: int = 1, shared_keys=None) -> list:
    """groups (lists of input ciphertexts) -> their output ciphertext lists, every group a Ray task (see the module
    doc). load_model: how a worker loads the compiled model's saved directory (CompiledModel.load). part: passed to
    run_group (what of the program each task runs; None: all). threads_per_task: the native threads of each task
    and the CPUs it holds (e.g. a node's cores when one N16 bootstrapping process is all its memory holds). timings:
    each step's seconds summed over the groups (as the in-process run reports them). stats: the tasks (process, node,
    seconds, peak RSS, whether the process loaded the model) and the bytes put. shared_keys: RayOptions.shared_keys."""
    t0 = time.perf_counter()
    shared_key_folder(shared_keys)     # the policy checked here, not in every worker (StagedKeys: OptionError)
    threads = task_threads(threads_per_task)
    ship = shipment_of(compiled, load_model, eval_keys, shared_keys)
    wbytes = None if weights is None else weights.to_bytes()
    with ray_session(address, num_workers) as ray:
        check_task_cpus(ray, threads)      # before anything is put: a task that cannot fit would wait forever
        holder = [ray.put(ship)]       # in a list: a task fetches it only when its process has not loaded it
        key_bytes = ship.keys.nbytes
        ship = ship.light()            # the store holds the keys now; the driver's serialised copy goes
        w_digest, w_holder = (None, None) if wbytes is None else (hashlib.sha256(wbytes).hexdigest(),
                                                                   [ray.put(wbytes)])
        task, pending, sent = _remote(), [], 0
        for g in groups:
            arr, metas = pack_cts(g)
            sent += packed_nbytes(arr)
            pending.append(task.options(**spread_options(threads)).remote(ship.digest, holder, w_digest, w_holder, arr,
                                                                          metas, threads, part))
        outs, tasks = [], []
        for a_ref, m_ref, t_ref in pending:
            arr, metas, meta = ray.get([a_ref, m_ref, t_ref])
            outs.append(unpack_cts(ctx, arr, metas))
            tasks.append(meta)
            if timings is not None:
                for k, v in meta["timings"].items():
                    timings[k] = timings.get(k, 0.0) + v
            del arr
        del holder
    if stats is not None:
        stats.update(groups=len(groups), threads_per_task=threads, tasks=tasks,
                     processes=sorted({t["pid"] for t in tasks}), sent_bytes=sent,
                     shipment_bytes=sum(map(len, ship.files.values())) + key_bytes,
                     weights_bytes=0 if wbytes is None else len(wbytes), seconds=time.perf_counter() - t0)
    return outs
