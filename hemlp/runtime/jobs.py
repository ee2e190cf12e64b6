"""Resumable batch jobs: one encrypted input file in, one encrypted output file out, on any executor.

    result = run_batch(WeightsJob.from_files("W.npy", preset="N14-d6"), list_inputs("in/"), "out/")

The output directory holds the outputs (same file names as the inputs) and ``batch_manifest.json``:
every item's status (done / failed), attempts and last error, plus the job's fingerprint so a
restart with other weights or another model is refused instead of mixing results. Outputs are
written atomically (temp file + fsync + rename) before the manifest records them, with their SHA-256, so a
killed job resumes with every finished item skipped and never leaves a half-written output. On resume each
finished output is checked against its recorded SHA-256: a damaged or truncated one is redone, with a warning
(``BatchResult.redone`` names it). A job holds an advisory lock (flock) on its output directory for its whole run:
a second job on the same directory gets BatchJobLockedError. Temporary files a killed run left behind are removed
when the next run starts. A deterministic failure (a typed hemlp error: a corrupted input, a wrong shape) is
recorded after one attempt; only other failures (a lost worker, an I/O error) use the retries.

A job that loses its items' workers or nodes beyond the retries (Ray's task retries, then the job's own) is
resumed by running it again: an item that failed so is recorded with RESUME_HINT in its error, and a job whose
executor itself stops (the cluster lost) raises BatchJobInterruptedError; both name that fix. The rerun continues
from the last verified output: finished items are checked against their SHA-256 and skipped, the rest run again.

A job is a small picklable object with ``key`` (its fingerprint) and ``process(data) -> bytes``
(runs inside a worker; reads the input file's bytes, returns the output file's bytes). Only the
driver touches the file system, so workers on other nodes need no shared disk.

An executor runs the items: ``LocalItems`` (this process, one after the other), ``hemlp.runtime.ray.RayItems``
(Ray tasks), or any object with the same ``run(job, todo, retries, read, done, failed)``: it calls read(path) for
an item's bytes, then done(path, output, attempt) or, once the item has used up its retries,
failed(path, exception, attempt). The job machinery here (manifest, atomic outputs, resumption) is the same for all.
"""
from __future__ import annotations

import dataclasses
import errno
import fcntl
import hashlib
import json
import os
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

import hemlp
from hemlp import fhe, pcmm
from hemlp.errors import HemlpError, SerializationError, ShapeError
from hemlp.runtime.artifacts import EncryptedBatch, EvalKeys
from hemlp.fhe.files import write_atomic
from hemlp.progress import Progress
from hemlp.runtime.ray.batch import RayItems
from hemlp.runtime.ray.node_keys import load_shared, shared_key_folder
from hemlp.runtime.retry import root_cause, transient

__all__ = ["run_batch", "list_inputs", "WeightsJob", "ModelJob", "CallableJob", "BatchResult", "BatchOutputError",
           "BatchJobMismatchError", "BatchJobLockedError", "BatchItemsFailedError", "BatchJobInterruptedError",
           "DamagedOutputWarning", "run_model_batch", "LocalItems", "MANIFEST", "TMP_TAG", "RESUME_HINT"]

MANIFEST = "batch_manifest.json"
#: the prefix of temporary output files (a killed run's are removed when the job restarts)
TMP_TAG = ".hemlp-tmp-"
#: the fix for a job stopped by lost workers or nodes (in every such item's error and in the job's error)
RESUME_HINT = ("rerun the same job (the same inputs and output directory, without --restart / --force) to resume: "
               "finished outputs are checked against their SHA-256 and skipped, the rest run again")


class BatchOutputError(HemlpError, OSError):
    """The output directory cannot be written (missing permission, read-only, disk full)."""


class BatchJobMismatchError(HemlpError, ValueError):
    """The output directory holds results of a different job (other weights or model)."""


class BatchItemsFailedError(HemlpError, RuntimeError):
    """Some items failed after every retry; the others were written."""


class BatchJobLockedError(HemlpError, RuntimeError):
    """Another job is running on the same output directory."""


class BatchJobInterruptedError(HemlpError, RuntimeError):
    """The executor stopped in the middle of the job (its cluster lost, an unexpected error); the finished items
    are kept, and running the same job again resumes it (RESUME_HINT). The executor's error is the __cause__."""


class DamagedOutputWarning(UserWarning):
    """A finished output no longer matches its recorded SHA-256 and is redone."""


# ----------------------------------------------------------------------------- jobs

_CACHE: dict = {}  # per worker process: contexts, loaded models (jobs run many items)


def _cached(key, make):
    if key not in _CACHE:
        _CACHE[key] = make()
    return _CACHE[key]


def _sha(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(hashlib.sha256(p).digest())
    return h.hexdigest()[:16]


@dataclasses.dataclass
class WeightsJob:
    """out = pcmm(W, in) (+ bias): the input files are CtMatrix files (CtMatrix.save)."""

    weights: np.ndarray
    params: bytes                      # fhe.Params.to_bytes(): workers rebuild the context from it
    bias: np.ndarray | None = None
    weight_bits: int = 20
    allow_insecure: bool = False

    @classmethod
    def from_files(cls, weights, *, preset: str | None = None, params=None, bias=None, weight_bits: int = 20,
                   allow_insecure: bool = False) -> "WeightsJob":
        W = _load_npy(weights, "weights")
        if W.ndim != 2:
            raise ShapeError(f"the weight matrix {weights} must be 2-D, got shape {W.shape}")
        b = None if bias is None else _load_npy(bias, "bias").reshape(-1)
        if b is not None and b.shape[0] != W.shape[0]:
            raise ShapeError(f"bias has {b.shape[0]} entries for {W.shape[0]} output rows")
        if (preset is None) == (params is None):
            raise ValueError("give exactly one of preset (a Params.preset name) or params (a params file)")
        if preset is not None:
            pbytes = fhe.Params.preset(preset).to_bytes()
        else:
            try:
                pbytes = Path(params).read_bytes()
            except OSError as exc:
                raise SerializationError(f"cannot read the parameters file {params}: {exc.strerror}") from None
            fhe.Params.from_bytes(pbytes)   # validate here, not in every worker
        return cls(W, pbytes, b, int(weight_bits), bool(allow_insecure))

    @property
    def key(self) -> str:
        b = b"" if self.bias is None else np.ascontiguousarray(self.bias, np.float64).tobytes()
        return "weights:" + _sha(np.ascontiguousarray(self.weights, np.float64).tobytes(), str(self.weights.shape).encode(),
                                 b, str(self.weight_bits).encode(), self.params)

    def context(self):
        def make():
            with warnings.catch_warnings():  # warned once by the driver, not once per worker
                warnings.simplefilter("ignore", fhe.InsecureParametersWarning)
                return fhe.Context(fhe.Params.from_bytes(self.params), allow_insecure=self.allow_insecure)

        return _cached(("ctx", self.params, self.allow_insecure), make)

    def process(self, data: bytes) -> bytes:
        C = pcmm.CtMatrix.from_bytes(data, self.context())
        return pcmm.pcmm(self.weights, C, weight_bits=self.weight_bits, bias=self.bias).to_bytes()


@dataclasses.dataclass
class ModelJob:
    """out = compiled.run(in, eval_keys): inputs are EncryptedBatch files of a compiled model directory.

    shared_keys: how the Ray workers of one machine hold the evaluation keys (bootstrapping keys included), as
    RayOptions.shared_keys (hemlp.runtime.ray.node_keys): None / True (default), the first worker of a machine
    decodes them and writes the machine's shared key file in the temporary folder hemlp-keys-<uid>, every worker
    there maps it (one copy per machine); a path, that private folder; False, a decoded copy per worker. The same
    bits either way, so it is not part of the job's fingerprint. In this process (LocalItems, InProcessItems) the
    default writes no file: run_batch turns None into False there."""

    files: dict                         # the model directory's files, by name (shipped to workers as bytes)
    keys: np.ndarray                    # the EvalKeys file as uint8: Ray keeps it out of band, so every task reads it
                                        # in place in the store (no per-task copy of GiBs of bootstrapping keys)
    model_id: str
    allow_insecure: bool = False        # the driver's policy (the caller's decision), carried to the workers
    keys_sha: str = ""                  # _sha(keys), computed once on the driver (not once per item)
    shared_keys: object = None          # RayOptions.shared_keys' policy for the workers' keys (see above)

    @classmethod
    def from_paths(cls, model, keys, allow_insecure: bool = False, shared_keys=None) -> "ModelJob":
        """model: a compiled model directory (hemlp.load) or a CompiledModel (whose own policy then applies); keys:
        an EvalKeys file. allow_insecure: accept a directory below 128-bit security (tests only). shared_keys: see
        the class (a ValueError here, not in the workers, for a value that is none of its forms)."""
        shared_key_folder(shared_keys)
        if not isinstance(model, (str, os.PathLike)):  # a CompiledModel in memory: ship its saved files
            with tempfile.TemporaryDirectory(prefix="hemlp-model-") as tmp:
                model.save(tmp)
                return cls._from_dir(Path(tmp), keys, model.allow_insecure, shared_keys)
        return cls._from_dir(Path(model), keys, allow_insecure, shared_keys)

    @classmethod
    def _from_dir(cls, d: Path, keys, allow_insecure: bool, shared_keys=None) -> "ModelJob":
        try:
            files = {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.is_file()}
            kbytes = Path(keys).read_bytes()
        except OSError as exc:
            raise SerializationError(f"cannot read the compiled model {d} or keys {keys}: {exc}") from None
        compiled = hemlp.load(d, allow_insecure=allow_insecure)  # validates the directory and keys once, on the driver
        EvalKeys.from_bytes(kbytes, compiled)
        return cls(files, np.frombuffer(kbytes, np.uint8), compiled.model_id, bool(allow_insecure), _sha(kbytes),
                   shared_keys)

    @property
    def key(self) -> str:
        return f"model:{self.model_id}:" + (self.keys_sha or _sha(self.keys))

    def _loaded(self):
        sha = self.keys_sha or _sha(self.keys)

        def make():
            with tempfile.TemporaryDirectory(prefix=f"hemlp-model-{self.model_id}-") as tmp:
                for name, data in self.files.items():
                    (Path(tmp) / name).write_bytes(data)
                compiled = hemlp.load(tmp, allow_insecure=self.allow_insecure)  # reads everything into memory
            # the machine's one copy (named after the key set), written by the first worker that decodes them
            keys = load_shared(f"job-{sha}", compiled, lambda: EvalKeys.from_bytes(memoryview(self.keys), compiled),
                               self.shared_keys)
            return compiled, keys

        # by policy too: a job that asks for a private copy gets one, whatever an earlier job of the process mapped
        return _cached(("model", self.model_id, sha, repr(self.shared_keys)), make)

    def process(self, data: bytes) -> bytes:
        compiled, keys = self._loaded()
        return compiled.run(EncryptedBatch.from_bytes(data, compiled), keys).to_bytes()


@dataclasses.dataclass
class CallableJob:
    """Any fn(bytes) -> bytes; `key` names it in the manifest (change it when fn changes)."""

    fn: object
    key: str

    def process(self, data: bytes) -> bytes:
        return self.fn(data)


def _load_npy(path, what) -> np.ndarray:
    try:
        a = np.load(path, allow_pickle=False)
    except OSError as exc:
        raise SerializationError(f"cannot load the {what} file {path}: {exc}") from None
    except Exception as exc:  # a damaged .npy header: ValueError, EOFError, SyntaxError / TokenError from its dict
        raise SerializationError(f"the {what} file {path} is not a readable .npy array ({type(exc).__name__}: "
                                 f"{str(exc)[:200]})") from None
    if not isinstance(a, np.ndarray):  # an .npz archive
        raise SerializationError(f"the {what} file {path} must hold one .npy array, not an .npz archive")
    if not np.issubdtype(a.dtype, np.number) or np.iscomplexobj(a):
        raise SerializationError(f"the {what} file {path} must hold real numbers, got dtype {a.dtype}")
    return a.astype(np.float64)


# ----------------------------------------------------------------------------- inputs and manifest

def list_inputs(source, pattern: str = "*") -> list[Path]:
    """A directory (its files matching pattern, sorted) or a manifest: a .json list / {"inputs": [...]}
    or a text file with one path per line (relative paths are relative to the manifest)."""
    src = Path(source)
    if src.is_dir():
        files = [p for p in sorted(src.glob(pattern)) if p.is_file() and not p.name.startswith(".") and p.name != MANIFEST]
    elif src.is_file():
        text = src.read_text()
        if src.suffix == ".json":
            data = json.loads(text)
            entries = data["inputs"] if isinstance(data, dict) else data
        else:
            entries = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
        files = [p if p.is_absolute() else src.parent / p for p in map(Path, entries)]
    else:
        raise FileNotFoundError(f"batch inputs {src}: no such directory or manifest file")
    names = [p.name for p in files]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ShapeError(f"batch inputs share file names {dup[:5]}: outputs are named after inputs; rename them")
    return files


class Manifest:
    """batch_manifest.json: {job, items: {name: {status, attempts, error?, output?}}}, rewritten atomically."""

    def __init__(self, out_dir: Path, job_key: str, restart: bool):
        self.path = out_dir / MANIFEST
        self.items: dict = {}
        if self.path.exists() and not restart:
            try:
                data = json.loads(self.path.read_text())
                old_key, self.items = data["job"], dict(data["items"])
            except (OSError, ValueError, KeyError, TypeError):
                raise BatchJobMismatchError(f"{self.path} is unreadable; move it away (or pass restart=True / "
                                            "--restart) to start the job over") from None
            if old_key != job_key:
                raise BatchJobMismatchError(f"{out_dir} holds results of another job ({old_key}, this one is {job_key}: "
                                            "other weights, bias, parameters or model); use a new output directory "
                                            "or --restart")
        self.job_key = job_key

    def done(self, name: str, out_dir: Path) -> bool:
        """Finished and intact: the output file is there and its SHA-256 is the one recorded when it was written.
        A damaged output (missing, truncated, altered) is not done; damaged() says why."""
        return self.damaged(name, out_dir) is None and self.items.get(name, {}).get("status") == "done"

    def damaged(self, name: str, out_dir: Path) -> str | None:
        """Why a finished item's output cannot be trusted (None when it can, or when the item is not finished)."""
        it = self.items.get(name)
        if not it or it.get("status") != "done":
            return None
        path = out_dir / it.get("output", name)
        want = it.get("sha256")
        if not isinstance(want, str):
            return f"{path.name}: the manifest records no SHA-256 for it"
        try:
            with open(path, "rb") as f:
                got = hashlib.file_digest(f, "sha256").hexdigest()
        except OSError as exc:
            return f"{path.name}: {exc.strerror or exc}"
        if got != want:
            return f"{path.name}: SHA-256 {got[:16]}... differs from the recorded {want[:16]}... (damaged or truncated)"
        return None

    def record(self, name: str, **fields) -> None:
        self.items[name] = dict(self.items.get(name, {}), **fields)
        self.save()

    def save(self) -> None:
        data = json.dumps(dict(format="hemlp-batch-manifest", version=1, job=self.job_key, items=self.items),
                          indent=1, sort_keys=True).encode()
        _atomic_write(self.path, data)


def _atomic_write(path: Path, data: bytes) -> None:
    write_atomic(path, data, tmp_prefix=TMP_TAG)   # the tag marks stale temporaries of killed runs


def _output_error(out_dir: Path, exc: OSError) -> BatchOutputError:
    why = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exceeded",
           errno.EROFS: "the file system is read-only"}.get(exc.errno, exc.strerror or str(exc))
    return BatchOutputError(exc.errno, f"cannot write to the output directory {out_dir}: {why}. Free space or choose "
                                       "another output directory; finished items are kept and skipped when the job "
                                       "is run again")


def _lock_output(out_dir: Path) -> int:
    """An exclusive advisory lock (flock) on the output directory itself, held until the returned descriptor is
    closed (by the run, or by the kernel when the process dies: a killed job never leaves a stale lock)."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(out_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise _output_error(out_dir, exc) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise BatchJobLockedError(f"another batch job is running on {out_dir}: wait for it to finish (its "
                                      "finished items are then skipped) or use another output directory") from None
        raise _output_error(out_dir, exc) from None
    return fd


def _prepare_output(out_dir: Path) -> list:
    """Removes the temporary files a killed run left (never complete outputs); returns their names."""
    try:
        stale = sorted(out_dir.glob(TMP_TAG + "*"))
        for p in stale:
            p.unlink()
        _atomic_write(out_dir / f"{TMP_TAG}probe", b"probe")
        (out_dir / f"{TMP_TAG}probe").unlink()
    except OSError as exc:
        raise _output_error(out_dir, exc) from None
    return [p.name for p in stale]


# ----------------------------------------------------------------------------- execution

@dataclasses.dataclass
class BatchResult:
    done: list            # names finished in this run
    skipped: list         # names already done before this run
    failed: dict          # name -> last error (after every retry)
    out_dir: Path
    seconds: float = 0.0
    redone: dict = dataclasses.field(default_factory=dict)  # name -> why its earlier output was not trusted
    stale_removed: list = dataclasses.field(default_factory=list)  # temporary files of a killed run, removed

    @property
    def outputs(self) -> list:
        return [self.out_dir / n for n in sorted(self.done + self.skipped)]

    def raise_failed(self) -> None:
        """BatchItemsFailedError naming every failed item, its error and what to do, when any failed."""
        if not self.failed:
            return
        lines = "; ".join(f"{n}: {r}" for n, r in sorted(self.failed.items()))
        n = len(self.done) + len(self.skipped) + len(self.failed)
        raise BatchItemsFailedError(f"{len(self.failed)} of {n} items failed (see {self.out_dir / MANIFEST}): {lines}. "
                                    f"Fix the inputs whose error says so, then {RESUME_HINT}")

    def summary(self) -> dict:
        return dict(done=len(self.done), skipped=len(self.skipped), failed=dict(self.failed),
                    redone=dict(self.redone), stale_removed=len(self.stale_removed), out_dir=str(self.out_dir), manifest=str(self.out_dir / MANIFEST), seconds=round(self.seconds, 3))


def _cause(exc: BaseException) -> str:
    exc = root_cause(exc)  # ray.exceptions.RayTaskError wraps the worker's exception
    return f"{type(exc).__name__}: {exc}".strip()[:2000]


def _reason(exc: BaseException) -> str:
    """The item's error for the manifest; a failure that another attempt may pass (a lost worker or node) names
    the fix after the cause."""
    return f"{_cause(exc)} -- {RESUME_HINT}" if transient(exc) else _cause(exc)


def _read_input(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise SerializationError(f"cannot read the input {path}: {exc.strerror}") from None


def run_batch(job, inputs, out_dir, *, retries: int = 2, executor="ray", address: str | None = None,
              num_workers: int | None = None, progress: bool = True, restart: bool = False,
              limit: int | None = None) -> BatchResult:
    """Process every input not already done into out_dir; retry a failing item `retries` more times,
    then record it as failed (the job goes on). executor: "ray" (RayItems: tasks on the running / local /
    `address` cluster), "local" (LocalItems: this process) or an executor object (see the module's docstring;
    address and num_workers are then its business). limit: stop after this many new items. Deterministic
    failures (typed hemlp errors) are not retried. BatchJobLockedError when another job runs on out_dir."""
    if isinstance(executor, str):
        if executor not in ("ray", "local"):
            raise ValueError(f"executor must be 'ray', 'local' or an executor object, got {executor!r}")
        executor = LocalItems() if executor == "local" else RayItems(address, num_workers)
    if isinstance(executor, LocalItems) and isinstance(job, ModelJob) and job.shared_keys is None:
        job = dataclasses.replace(job, shared_keys=False)   # one process holds one copy: no key file for it
    if retries < 0:
        raise ValueError("retries must be >= 0")
    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    inputs = [Path(p) for p in inputs]
    lock = _lock_output(out_dir)
    try:
        return _run_locked(job, inputs, out_dir, executor, retries, progress, restart, limit, t0)
    finally:
        os.close(lock)  # releases the flock


def _run_locked(job, inputs, out_dir: Path, executor, retries: int, progress: bool, restart: bool, limit, t0):
    stale = _prepare_output(out_dir)
    manifest = Manifest(out_dir, job.key, restart)
    redone = {p.name: why for p in inputs if (why := manifest.damaged(p.name, out_dir)) is not None}
    if redone:
        warnings.warn(f"{len(redone)} finished output(s) in {out_dir} are damaged and will be redone: "
                      + "; ".join(redone.values()), DamagedOutputWarning, stacklevel=3)
    skipped = [p.name for p in inputs if manifest.done(p.name, out_dir)]
    seen = set(skipped)
    todo = [p for p in inputs if p.name not in seen]
    if limit is not None:
        todo = todo[: max(0, int(limit))]
    result = BatchResult([], skipped, {}, out_dir, redone=redone, stale_removed=stale)
    bar = Progress("batch", total=len(inputs), verbose=None if progress else False, unit="item",
                   initial=len(skipped))   # hemlp.progress: tqdm when installed, never required
    def done(path: Path, out: bytes, attempts: int) -> None:
        _finish(path.name, out, out_dir, manifest, attempts, result, bar)

    def failed(path: Path, exc: BaseException, attempts: int) -> None:
        _fail(path.name, _reason(exc), manifest, attempts, result, bar, out_dir)

    try:
        executor.run(job, todo, retries, _read_input, done, failed)
    except Exception as exc:
        if isinstance(exc, (HemlpError, ValueError, TypeError)):   # typed, or a usage error: it names its own fix
            raise
        left = len(todo) - len(result.done) - len(result.failed)
        raise BatchJobInterruptedError(
            f"the batch job stopped with {left} of {len(inputs)} items not run ({_cause(exc)}); "
            f"{len(result.done) + len(skipped)} finished outputs are in {out_dir}: {RESUME_HINT}") from exc
    finally:
        bar.close()
        result.seconds = time.perf_counter() - t0
    return result


def _finish(name: str, out: bytes, out_dir: Path, manifest: Manifest, attempts: int, result: BatchResult, bar) -> None:
    try:
        _atomic_write(out_dir / name, out)
        manifest.record(name, status="done", attempts=attempts, output=name, error=None,
                        sha256=hashlib.sha256(out).hexdigest())
    except OSError as exc:
        raise _output_error(out_dir, exc) from None
    result.done.append(name)
    result.failed.pop(name, None)
    bar.update(1)


def _fail(name: str, reason: str, manifest: Manifest, attempts: int, result: BatchResult, bar, out_dir: Path) -> None:
    try:
        manifest.record(name, status="failed", attempts=attempts, error=reason)
    except OSError as exc:
        raise _output_error(out_dir, exc) from None
    result.failed[name] = reason
    bar.update(1)


class LocalItems:
    """The items one after the other in this process (an executor of run_batch); a deterministic failure (see
    hemlp.runtime.retry) is recorded at once, other failures use the retries."""

    def run(self, job, todo, retries: int, read, done, failed) -> None:
        for path in todo:
            for attempt in range(1, retries + 2):
                try:
                    out = job.process(read(path))
                except Exception as exc:  # noqa: BLE001  (the item fails, the job goes on)
                    if attempt == retries + 1 or not transient(exc):
                        failed(path, exc, attempt)
                        break
                    continue
                done(path, out, attempt)
                break


def run_model_batch(compiled, eval_keys, inputs, out_dir, *, address: str | None = None, allow_insecure: bool = False,
                    shared_keys=None, **kw) -> list:
    """`hemlp batch`: run a compiled model (directory or CompiledModel) over EncryptedBatch files. shared_keys: how
    the Ray workers of a machine hold the keys (ModelJob). Returns the output paths; raises BatchItemsFailedError
    naming the items that failed."""
    res = run_batch(ModelJob.from_paths(compiled, eval_keys, allow_insecure, shared_keys), inputs, out_dir,
                    address=address, **kw)
    res.raise_failed()
    return res.outputs
