"""Peer benchmark: DESILO's FHE library (desilofhe) on the GPU, the ops hemlp's GPU backend implements.

    python hemlp/apps/bench/gpu_desilo.py --device gpu --repeats 10 [--out PATH]
    python hemlp/apps/bench/gpu_desilo.py --device cpu --repeats 1 --threads 1 --skip-bootstrap --matvec-level 2

desilofhe is a benchmark peer only, never a dependency (its licence is non-commercial): every import of it is inside
measure_desilo, and this module imports nothing but the standard library and numpy (no hemlp module either, so it
also runs as a plain script on a machine where hemlp's native core is not built).  The GPU build is the wheel
``desilofhe-cu130`` (one .so that loads only libcuda.so.1; its kernels are sm_75 cubins plus PTX, so on newer GPUs
the driver JIT-compiles them on first use: the warm-up runs absorb that); the CPU build ``desilofhe`` has the same
API and serves the smoke test.

Parameters: the engine's bootstrappable set (``Engine(mode, use_bootstrap=True)``: N = 2^16, 2^15 slots, max level
26, 28 RNS limbs at the max level).  Ops, each timed after ``warmup`` untimed runs as ``repeats`` runs with the device
synchronised before and after each one (median / min / max seconds):

- ``mul_relin_rescale_top``: ``multiply(ct, ct, relinearization_key)`` at the max level (desilofhe's multiply
  relinearizes and rescales in one call: the level drops by one);
- ``rotate_top``: ``rotate(ct, fixed_rotation_key(delta=1))`` at the max level (desilofhe's rotation at the max
  level also consumes a level: level_after says so);
- the same two one level below the top (``*_top_minus1``), where desilofhe's max-level special case is gone;
- ``matvec_256``: a 256 x 256 plaintext matrix times an encrypted vector, ``multiply_matrix(PlainMatrix, ct,
  MatrixMultiplicationKey)`` on an engine with 256 slots in the same N = 2^16 ring (``Engine(mode, slot_count=256,
  use_bootstrap=True)``; desilofhe's matrix product needs a slot_count x slot_count matrix);
- ``bootstrap``: ``bootstrap(ct, relinearization_key, conjugation_key, bootstrap_key)`` (stage_count 3, the
  "medium" key of ~12.3 GB) from level 0 on uniform [-1, 1] real slots; ``--bootstrap-key small`` uses the rotation
  key + small bootstrap key instead (~3.8 GB, slower: the CPU smoke test's choice).

Per op: the level (and RNS limb count, from the ciphertext's byte size) before and after, and the precision in bits
against numpy, -log2(max |error|) over all slots (None when the error is exactly 0).  Inputs are encrypted with the
secret key.  ``chain_per_op_s`` (mul, rotate) cross-checks the synchronised times without relying on the sync
helper: ``repeats`` ops issued back to back, then one decrypt of the last result, less one decrypt alone, divided
by ``repeats``.  Each op runs in its own try/except: a failing op records ``{"error": ...}`` and the others still run.
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import json
import math
import os
import statistics
import sys
import time
import traceback

#: --device -> desilofhe Engine mode strings to try, in order
DEVICE_MODES = {
    "gpu": ("gpu",),
    "async-gpu": ("async gpu",),
    "cpu": ("cpu",),
    "parallel": ("parallel",),
}
GPU_DEVICES = {"gpu", "async-gpu"}
MATVEC_DIM = 256
STAGE_COUNT = 3
ROTATE_DELTA = 1


def _bits(err: float) -> float | None:
    return None if err == 0 else -math.log2(err)


def _host(values):
    """A decrypt result as a numpy array on the host (numpy, or anything with .get() / .cpu())."""
    import numpy as np

    if isinstance(values, np.ndarray):
        return values
    if hasattr(values, "get") and not isinstance(values, (list, tuple, dict)):  # cupy
        return np.asarray(values.get())
    if hasattr(values, "cpu"):  # torch
        return values.cpu().numpy()
    return np.asarray(values)


def _err(exc: BaseException) -> dict:
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" (line {tb[-1].lineno} in {tb[-1].name})" if tb else ""
    return {"error": f"{type(exc).__name__}: {exc}{where}"}


class _Sync:
    """Waits for the GPU: each registered engine's own ``Engine.sync()`` where the engine is in desilofhe's async
    GPU mode (the GPU builds have it; it raises "Engine is not in Async GPU mode" on a synchronous engine, which is
    then not called again), then cuCtxSynchronize of the calling thread's CUDA context through libcuda.so.1 (the one
    library desilofhe's GPU build loads), else of device ``device_id``'s primary context (pushed and popped, so the
    thread's context is unchanged), else cupy's or torch's device synchronize; a no-op on the CPU."""

    def __init__(self, gpu: bool, device_id: int = 0):
        self.gpu, self.device_id = gpu, device_id
        self.method = "none (cpu)"
        self.engine_sync = "no engine registered"
        self._engines = []
        self._lib = self._primary = self._push = self._pop = None
        self._fallback = None
        if not gpu:
            return
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            for name in ("cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuCtxGetCurrent", "cuCtxSynchronize"):
                getattr(lib, name)  # AttributeError if a symbol is missing
            # the header names push / pop map to their _v2 symbols (same signatures); cuCtxSynchronize stays v1
            self._push = getattr(lib, "cuCtxPushCurrent_v2", None) or lib.cuCtxPushCurrent
            self._pop = getattr(lib, "cuCtxPopCurrent_v2", None) or lib.cuCtxPopCurrent
            if lib.cuInit(0) != 0:
                raise RuntimeError("cuInit failed")
            self._lib = lib
            self.method = "libcuda cuCtxSynchronize"
        except Exception:  # noqa: BLE001 - no driver library: try the Python GPU packages
            self._lib = None
        if self._lib is None:
            try:
                import cupy

                self._fallback = lambda: cupy.cuda.Device(device_id).synchronize()
                self.method = "cupy Device.synchronize"
            except Exception:  # noqa: BLE001
                try:
                    import torch

                    self._fallback = lambda: torch.cuda.synchronize(device_id)
                    self.method = "torch.cuda.synchronize"
                except Exception:  # noqa: BLE001
                    self.method = "none (no libcuda, cupy or torch: times are launch times if ops are async)"

    def _primary_ctx(self):
        if self._primary is None:
            lib = self._lib
            dev = ctypes.c_int()
            ctx = ctypes.c_void_p()
            if lib.cuDeviceGet(ctypes.byref(dev), self.device_id) != 0:
                raise RuntimeError("cuDeviceGet failed")
            if lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) != 0:
                raise RuntimeError("cuDevicePrimaryCtxRetain failed")
            self._primary = ctx
        return self._primary

    def add_engine(self, engine) -> None:
        """Use ``engine.sync()`` from now on if the engine has one and is asynchronous (recorded in engine_sync)."""
        if not self.gpu:
            return
        if not hasattr(engine, "sync"):
            self.engine_sync = "absent (no Engine.sync in this build)"
            return
        try:
            engine.sync()
        except Exception as exc:  # noqa: BLE001 - "Engine is not in Async GPU mode": a synchronous engine
            note = "not needed" if "async" in str(exc).lower() else "not used"
            self.engine_sync = f"{note}: Engine.sync() raised {type(exc).__name__}: {exc}"
            return
        self._engines.append(engine)
        self.engine_sync = "Engine.sync() called before and after each timed op"

    def discard(self, engine) -> None:
        self._engines = [e for e in self._engines if e is not engine]

    def __call__(self) -> None:
        if not self.gpu:
            return
        for engine in self._engines:
            engine.sync()
        if self._lib is None:
            if self._fallback is not None:
                self._fallback()
            return
        lib = self._lib
        try:
            cur = ctypes.c_void_p()
            lib.cuCtxGetCurrent(ctypes.byref(cur))
            if cur.value:
                rc = lib.cuCtxSynchronize()
            else:
                self._push(self._primary_ctx())
                try:
                    rc = lib.cuCtxSynchronize()
                finally:
                    popped = ctypes.c_void_p()
                    self._pop(ctypes.byref(popped))
            if rc != 0:
                raise RuntimeError(f"cuCtxSynchronize returned CUDA error {rc}")
        except Exception as exc:  # noqa: BLE001 - never fail an op for the helper: drop it (recorded in method)
            self._lib = None
            self.method = (f"libcuda dropped after {type(exc).__name__}: {exc}; then "
                           + ("Engine.sync() only" if self._engines else "none: compare chain_per_op_s"))


def _timed(fn, sync, repeats: int, warmup: int):
    """(record, last output): ``warmup`` runs (their times apart, as warmup_s: the first one includes any CUDA JIT
    compilation), then ``repeats`` runs each between two syncs."""
    out = None
    first = []
    for _ in range(warmup):
        t0 = time.perf_counter()
        out = fn()
        sync()
        first.append(time.perf_counter() - t0)
    samples = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        out = fn()
        sync()
        samples.append(time.perf_counter() - t0)
    rec = {"median_s": statistics.median(samples), "min_s": min(samples), "max_s": max(samples),
           "repeats": repeats, "warmup": warmup, "samples": samples, "warmup_s": first}
    return rec, out


def _chain_per_op(fn, finish, sync, k: int) -> float:
    """Seconds per op of ``k`` ops issued back to back, then ``finish`` (a decrypt) of the last, less one
    ``finish`` alone: a figure that needs no sync helper (a decrypt returns host values)."""
    sync()
    t0 = time.perf_counter()
    out = None
    for _ in range(k):
        out = fn()
    finish(out)
    total = time.perf_counter() - t0
    t1 = time.perf_counter()
    finish(out)
    alone = time.perf_counter() - t1
    return max(total - alone, 0.0) / k


def _desilo_version() -> tuple[str | None, str | None]:
    from importlib import metadata

    for dist in metadata.distributions():
        name = dist.metadata["Name"] or ""
        if name.lower().replace("_", "-").startswith("desilofhe"):
            return name, dist.version
    return None, None


def measure_desilo(repeats: int = 10, device: str = "gpu", *, warmup: int = 1, skip_matvec: bool = False,
                   skip_bootstrap: bool = False, bootstrap_key: str | None = None, bootstrap_repeats: int | None = None,
                   matvec_level: int | None = None, threads: int | None = None, device_id: int = 0, seed: int = 0,
                   progress=None) -> dict:
    """Time desilofhe's ct x ct (+ relin + rescale), rotate by 1, 256 x 256 matvec and bootstrap at N = 2^16.

    device: "gpu" (Engine mode "gpu"), "async-gpu", "cpu" or "parallel" (CPU builds, for a smoke test).
    bootstrap_key: "full" (create_bootstrap_key, default on a GPU) or "small" (rotation key + small bootstrap key,
    default on a CPU); a "full" key that fails to build falls back to "small" (noted).  matvec_level: the level of the
    matvec's ciphertext, plain matrix and key (default: the max level; lower is smaller and faster to set up).
    progress(name, record) is called after each op and setup step.  Returns the JSON-ready dict; a failure to
    import desilofhe or build the engine is reported under "error", never raised.
    """
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    if device not in DEVICE_MODES:
        raise ValueError(f"device must be one of {sorted(DEVICE_MODES)}, got {device!r}")
    gpu = device in GPU_DEVICES
    if bootstrap_key is None:
        bootstrap_key = "full" if gpu else "small"
    if bootstrap_key not in ("full", "small"):
        raise ValueError(f"bootstrap_key must be 'full' or 'small', got {bootstrap_key!r}")
    boot_repeats = bootstrap_repeats or repeats
    dist, version = _desilo_version()
    result = {"library": "desilofhe", "version": version, "distribution": dist, "device": device,
              "params": {}, "setup": {}, "ops": {}, "notes": []}
    ops, setup, notes = result["ops"], result["setup"], result["notes"]

    def report(name, rec):
        if progress is not None:
            try:
                progress(name, rec)
            except Exception:  # noqa: BLE001 - a progress sink never stops the benchmark
                pass

    try:
        import numpy as np
        import desilofhe
    except Exception as exc:  # noqa: BLE001
        result.update(_err(exc))
        return result

    sync = _Sync(gpu, device_id)
    result["sync"] = sync.method
    rng = np.random.default_rng(seed)
    engine_kw = {"use_bootstrap": True, "device_id": device_id}
    if threads is not None:
        engine_kw["thread_count"] = threads

    def make_engine(**kw):
        last = None
        for mode in DEVICE_MODES[device]:
            try:
                return desilofhe.Engine(mode=mode, **engine_kw, **kw), mode
            except Exception as exc:  # noqa: BLE001 - try the next spelling of the mode
                last = exc
        raise last

    def keygen(name, fn):
        t0 = time.perf_counter()
        key = fn()
        sync()
        setup[name + "_s"] = time.perf_counter() - t0
        try:
            setup[name + "_bytes"] = int(key.nbytes)
        except Exception:  # noqa: BLE001
            pass
        report("setup." + name, {"s": setup[name + "_s"]})
        return key

    # ---- the main engine: bootstrappable N = 2^16, full slots
    try:
        t0 = time.perf_counter()
        engine, mode = make_engine()
        setup["engine_s"] = time.perf_counter() - t0
        slots = int(engine.slot_count)
        top = int(engine.max_level)
        log_n = int(round(math.log2(2 * slots)))
        n = 1 << log_n
        result["params"] = {"mode": mode, "log_n": log_n, "slot_count": slots, "max_level": top,
                            "levels": top, "use_bootstrap": True, "stage_count": STAGE_COUNT,
                            "threads": threads, "device_id": device_id, "encrypt": "secret_key"}
        try:
            result["params"]["build_hash"] = str(engine.build_hash)
        except Exception:  # noqa: BLE001
            pass
        sync.add_engine(engine)
        result["engine_sync"] = sync.engine_sync
        sk = keygen("secret_key", engine.create_secret_key)
    except Exception as exc:  # noqa: BLE001
        result.update(_err(exc))
        return result

    def limbs(ct, ring_n=None):
        try:
            return int(round(ct.nbytes / (ct.polynomial_count * (ring_n or n) * 8)))
        except Exception:  # noqa: BLE001
            return None

    def dec(eng, ct):
        return _host(eng.decrypt(ct, sk))

    x = rng.uniform(-1.0, 1.0, slots)
    y = rng.uniform(-1.0, 1.0, slots)

    # ---- ct x ct + relin + rescale, rotate by 1: at the top level and one below
    rlk = fk = None
    try:
        rlk = keygen("relinearization_key", lambda: engine.create_relinearization_key(sk))
    except Exception as exc:  # noqa: BLE001
        for lv in ("top", "top_minus1"):
            ops["mul_relin_rescale_" + lv] = _err(exc)
    try:
        fk = keygen("fixed_rotation_key", lambda: engine.create_fixed_rotation_key(sk, ROTATE_DELTA))
    except Exception as exc:  # noqa: BLE001
        for lv in ("top", "top_minus1"):
            ops["rotate_" + lv] = _err(exc)
    for tag, level in (("top", top), ("top_minus1", top - 1)):
        try:
            cx = engine.encrypt(x, sk, level=level)
            cy = engine.encrypt(y, sk, level=level)
            sync()
            if tag == "top":
                result["params"]["ciphertext_bytes_top"] = int(cx.nbytes)
                result["params"]["limbs_top"] = limbs(cx)
                try:
                    result["params"]["ciphertext_is_cuda"] = bool(cx.is_cuda)
                    if gpu and not cx.is_cuda:
                        notes.append("the GPU engine's ciphertexts report is_cuda False: check the times are GPU ones")
                except Exception:  # noqa: BLE001
                    pass
        except Exception as exc:  # noqa: BLE001
            for op in ("mul_relin_rescale_", "rotate_"):
                ops.setdefault(op + tag, _err(exc))
            continue
        if rlk is not None:
            name = "mul_relin_rescale_" + tag
            try:
                rec, out = _timed(lambda: engine.multiply(cx, cy, rlk), sync, repeats, warmup)
                err = float(np.max(np.abs(dec(engine, out) - x * y)))
                rec.update(level_before=int(cx.level), level_after=int(out.level), limbs_before=limbs(cx),
                           limbs_after=limbs(out), precision_bits=_bits(err))
                rec["chain_per_op_s"] = _chain_per_op(lambda: engine.multiply(cx, cy, rlk),
                                                      lambda c: dec(engine, c), sync, repeats)
                ops[name] = rec
            except Exception as exc:  # noqa: BLE001
                ops[name] = _err(exc)
            report(name, ops[name])
        if fk is not None:
            name = "rotate_" + tag
            try:
                rec, out = _timed(lambda: engine.rotate(cx, fk), sync, repeats, warmup)
                got = dec(engine, out)
                errs = {s: float(np.max(np.abs(got - np.roll(x, s)))) for s in (ROTATE_DELTA, -ROTATE_DELTA)}
                shift = min(errs, key=errs.get)
                rec.update(level_before=int(cx.level), level_after=int(out.level), limbs_before=limbs(cx),
                           limbs_after=limbs(out), precision_bits=_bits(errs[shift]),
                           direction=f"np.roll(x, {shift})")
                rec["chain_per_op_s"] = _chain_per_op(lambda: engine.rotate(cx, fk), lambda c: dec(engine, c), sync,
                                                      repeats)
                ops[name] = rec
            except Exception as exc:  # noqa: BLE001
                ops[name] = _err(exc)
            report(name, ops[name])
        cx = cy = out = None
    fk = None
    gc.collect()

    # ---- 256 x 256 plaintext matrix x encrypted vector, same ring (256 sparse slots)
    if skip_matvec:
        ops["matvec_256"] = {"skipped": True}
    else:
        me = mmk = pm = cv = out = msk = None
        try:
            t0 = time.perf_counter()
            me, _ = make_engine(slot_count=MATVEC_DIM)
            setup["matvec_engine_s"] = time.perf_counter() - t0
            sync.add_engine(me)
            if int(me.slot_count) != MATVEC_DIM:
                raise RuntimeError(f"matvec engine has {me.slot_count} slots, not {MATVEC_DIM}")
            lv = int(me.max_level) if matvec_level is None else int(matvec_level)
            msk = me.create_secret_key()
            mmk = keygen("matrix_multiplication_key", lambda: me.create_matrix_multiplication_key(msk, lv))
            mat = rng.uniform(-1.0, 1.0, (MATVEC_DIM, MATVEC_DIM))
            vec = rng.uniform(-1.0, 1.0, MATVEC_DIM)
            t0 = time.perf_counter()
            pm = me.encode_to_plain_matrix(mat, lv)
            sync()
            setup["plain_matrix_encode_s"] = time.perf_counter() - t0
            setup["plain_matrix_bytes"] = int(pm.nbytes)
            cv = me.encrypt(vec, msk, level=lv)
            sync()
            rec, out = _timed(lambda: me.multiply_matrix(pm, cv, mmk), sync, repeats, warmup)
            got = _host(me.decrypt(out, msk))[:MATVEC_DIM]
            rec.update(level_before=int(cv.level), level_after=int(out.level), limbs_before=limbs(cv),
                       limbs_after=limbs(out), precision_bits=_bits(float(np.max(np.abs(got - mat @ vec)))),
                       dim=MATVEC_DIM, slot_count=int(me.slot_count), ciphertext_bytes=int(cv.nbytes),
                       method="multiply_matrix(PlainMatrix, ct, MatrixMultiplicationKey)")
            ops["matvec_256"] = rec
        except Exception as exc:  # noqa: BLE001
            ops["matvec_256"] = _err(exc)
        report("matvec_256", ops["matvec_256"])
        if me is not None:
            sync.discard(me)
        me = mmk = pm = cv = out = msk = None
        gc.collect()

    # ---- bootstrap from level 0
    if skip_bootstrap:
        ops["bootstrap"] = {"skipped": True}
    else:
        ck = bk = rk = sbk = cb = out = None
        try:
            if rlk is None:
                raise RuntimeError("no relinearization key (see mul_relin_rescale_top's error)")
            ck = keygen("conjugation_key", lambda: engine.create_conjugation_key(sk))
            kind = bootstrap_key
            if kind == "full":
                try:
                    bk = keygen("bootstrap_key", lambda: engine.create_bootstrap_key(sk, stage_count=STAGE_COUNT))
                except Exception as exc:  # noqa: BLE001 - e.g. out of memory: the small key needs ~3x less
                    notes.append(f"full bootstrap key failed ({type(exc).__name__}: {exc}); used the small key")
                    bk, kind = None, "small"
                    gc.collect()
            if kind == "small":
                rk = keygen("rotation_key", lambda: engine.create_rotation_key(sk))
                sbk = keygen("small_bootstrap_key", lambda: engine.create_small_bootstrap_key(sk))

                def boot():
                    return engine.bootstrap(cb, rlk, ck, rk, sbk, STAGE_COUNT)
            else:
                def boot():
                    return engine.bootstrap(cb, rlk, ck, bk)
            cb = engine.encrypt(x, sk, level=0)
            sync()
            rec, out = _timed(boot, sync, boot_repeats, warmup)
            rec.update(level_before=int(cb.level), level_after=int(out.level), levels_left=int(out.level),
                       limbs_before=limbs(cb), limbs_after=limbs(out),
                       precision_bits=_bits(float(np.max(np.abs(dec(engine, out) - x)))),
                       bootstrap_key=kind, stage_count=STAGE_COUNT, input="uniform [-1, 1] real, all slots")
            ops["bootstrap"] = rec
        except Exception as exc:  # noqa: BLE001
            ops["bootstrap"] = _err(exc)
        report("bootstrap", ops["bootstrap"])
        ck = bk = rk = sbk = cb = out = None
        gc.collect()
    result["sync"] = sync.method  # the helper may have dropped libcuda on an error
    return result


def _write(path: str | None, doc: dict) -> None:
    if not path:
        return
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2)
    os.replace(tmp, path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=10, help="timed runs per op (default 10)")
    p.add_argument("--device", default="gpu", choices=sorted(DEVICE_MODES), help="engine mode (default gpu)")
    p.add_argument("--warmup", type=int, default=1, help="untimed runs before the timed ones (default 1)")
    p.add_argument("--skip-bootstrap", action="store_true", help="do not build bootstrap keys nor bootstrap")
    p.add_argument("--skip-matvec", action="store_true", help="do not run the 256 x 256 matvec")
    p.add_argument("--bootstrap-key", choices=("full", "small"), default=None,
                   help="full bootstrap key (default on a GPU) or rotation + small bootstrap key (default on a CPU)")
    p.add_argument("--bootstrap-repeats", type=int, default=None, help="timed bootstraps (default: --repeats)")
    p.add_argument("--matvec-level", type=int, default=None, help="matvec level (default: the max level)")
    p.add_argument("--threads", type=int, default=None, help="desilofhe thread_count (CPU modes)")
    p.add_argument("--device-id", type=int, default=0)
    p.add_argument("--out", default=None, help="also write the JSON here, rewritten after each op")
    args = p.parse_args(argv)

    partial = {"library": "desilofhe", "device": args.device, "partial": True, "progress": {}}

    def progress(name, rec):
        print(f"[desilo] {name}: {json.dumps(rec)}", file=sys.stderr, flush=True)
        partial["progress"][name] = rec
        _write(args.out, partial)

    doc = measure_desilo(args.repeats, args.device, warmup=args.warmup, skip_matvec=args.skip_matvec,
                         skip_bootstrap=args.skip_bootstrap, bootstrap_key=args.bootstrap_key,
                         bootstrap_repeats=args.bootstrap_repeats, matvec_level=args.matvec_level,
                         threads=args.threads, device_id=args.device_id, progress=progress)
    _write(args.out, doc)
    print(json.dumps(doc, indent=2))
    return 1 if "error" in doc else 0


if __name__ == "__main__":
    sys.exit(main())
