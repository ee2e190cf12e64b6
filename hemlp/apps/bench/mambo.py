"""Batched bootstrapping and MaMBo benchmark (issue #17): throughput of k single bootstraps against
bootstrap_batch, and of a d×d PCMM followed by d bootstraps against MaMBo (PCMM fused at the bottom of an
S2C-first batched bootstrap).

    python -m hemlp.bench mambo --preset N16-boot --ks 2,4 --ds 256,1024,4096 --json PATH

At N16-boot with seeded keys (the default) k = 4 fits the default 20 GiB budget by estimate: the CtS-first keys
the stage makes hold 12.4 GiB, its working set ~4.6 GiB (k = 2: 6.9 + 4.2; k = 8: 23.5 GiB of keys, skipped);
held expanded (--unseeded) only k = 2 fits.

Stages, in one process, each freeing its keys before the next (peak RSS recorded after each):
1. PCMM of U (d×d) on d ciphertext rows (one encrypted row repeated: the GEMMs do not care) at the
   single bootstrap's output level (the conventional position) and at level 1 (MaMBo's), for d up to
   --pcmm-max-d whose d outputs are estimated within --pcmm-mem-gib (pcmm_bytes: at N16-boot d = 1024 takes
   ~2.5 GiB at level 1 but ~16 GiB at level 12); larger d extrapolated as d² from the largest measured at the same
   level (marked "extrapolated").
2. --repeats interleaved rounds of: the CtS-first single bootstrap (Bootstrapper: keys, first call apart, then
   --inner timed calls), then per k: BatchBootstrapKeys (seeded a-parts unless --unseeded); bootstrap_batch
   (CtS-first, batched CtS, one timed call); with the same key objects the S2C-first MamboBootstrapper: --inner
   timed bootstrap_batch calls and one pcmm_bootstrap on k rows. Both key sets do not fit 20 GiB together at N16,
   so every stage makes its keys again; interleaving spreads a drifting machine over both sides. Every timed call
   is recorded (single_runs, batch_runs; *_samples), the speedups use the medians. A k whose keys plus working set
   (hemlp.bootstrap.batch_keys.estimate_bytes / working_bytes, plus the process's RSS) are estimated above
   --mem-gib is skipped and reported; "memory_choice" is choose_k's report (the largest k that fits).
Derived throughput for a d×d layer (d ciphertext rows, each refreshed): separate = d / (PCMM at the
application level + d single bootstraps); MaMBo = d / (PCMM at level 1 + d/k S2C-first batched bootstraps),
from the median stage times (stated as derived in the JSON). Measured end to end per k ("end_to_end", derived:
false): the same 2k encrypted real rows at the application level through the PCMM then single bootstraps (paired;
the single stage), the PCMM then bootstrap_batch, and pcmm_bootstrap (the batch stage), --inner calls each per
round, with their precision against U·X.
"""
from __future__ import annotations

import ctypes
import gc
import math
import sys
import time

from hemlp.apps.bench import int_list, report
from hemlp.errors import HemlpError
from hemlp.planner.resources import available_memory_bytes

HELP = "batched bootstrapping and MaMBo: k singles vs bootstrap_batch, PCMM + bootstraps vs MaMBo, keys, RSS"


def _rss_gib() -> tuple:
    """(resident, peak) GiB of this process (0 where /proc cannot be read)."""
    return tuple((report.process_status_bytes(k) or 0) / 2.0 ** 30 for k in ("VmRSS", "VmHWM"))


def _mem_available_gib() -> float:
    avail = available_memory_bytes()
    return float("inf") if avail is None else avail / 2.0 ** 30


def _wait_for_memory(need_gib: float, log, timeout_s: float = 900.0) -> float:
    """Wait (up to timeout_s) until the shared machine has need_gib available; returns what is available."""
    t0 = time.perf_counter()
    avail = _mem_available_gib()
    while avail < need_gib and time.perf_counter() - t0 < timeout_s:
        log(f"waiting for memory: {avail:.1f} GiB available, {need_gib:.1f} needed")
        time.sleep(20)
        avail = _mem_available_gib()
    return avail


def _release() -> None:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def _bits(err: float) -> float:
    return math.inf if err == 0 else -math.log2(err)


def batch_key_estimate(ctx, params, k: int, seeded: bool = True) -> int:
    """Bytes BatchBootstrapKeys for k hold in memory (hemlp.bootstrap.batch_keys.estimate_bytes)."""
    from hemlp.bootstrap.batch_keys import estimate_bytes

    return estimate_bytes(ctx, k, params, seeded)


def _median(xs: list) -> float:
    v = sorted(xs)
    m = len(v) // 2
    return v[m] if len(v) % 2 else 0.5 * (v[m - 1] + v[m])


def pcmm_bytes(ctx, d: int, level: int) -> int:
    """Peak bytes of a d×d PCMM on d rows at `level` (the d output ciphertexts dominate; 1.25x for the GEMM's
    temporaries: measured 3.97 GiB RSS for d = 256 at N16-boot's application level 12 against 3.25 counted)."""
    return int(1.25 * d * 2 * (level + 1) * ctx.N * 8)


def run(preset: str, ks: list, ds: list, threads: int, pcmm_max_d: int, mem_gib: float, allow_insecure: bool,
        log=print, checkpoint=lambda payload: None, repeats: int = 3, inner: int = 2, seeded: bool = True,
        pcmm_mem_gib: float = 6.0, end_to_end: bool = True) -> dict:
    """repeats: interleaved rounds (single stage, then each k's batch stage, again ...), each stage timing `inner`
    calls after its first; the speedups use the medians over every timed call of each side. end_to_end=False skips
    the measured end-to-end paths (hemlp calibrate needs only the stage ratios)."""
    import numpy as np

    import hemlp
    from hemlp import pcmm as pcmm_pkg
    from hemlp import fhe
    from hemlp.bootstrap import BootParams, BootstrapKeys, Bootstrapper
    from hemlp.bootstrap.batch import BatchBootstrapKeys, BatchBootstrapper
    from hemlp.bootstrap.batch_keys import choose_k, working_bytes
    from hemlp.bootstrap.keys import dft_plans
    from hemlp.bootstrap.mambo import S2C_LOG_MESSAGE_RATIO, MamboBootstrapper

    repeats, inner = max(1, int(repeats)), max(1, int(inner))
    hemlp.set_num_threads(threads)
    ctx = fhe.Context(preset, allow_insecure=allow_insecure)
    sk, pk = ctx.keygen()
    bp = BootParams.for_context(ctx)
    n = bp.slot_count(ctx)
    rng = np.random.default_rng(1)
    out = {"peer": "hemlp", "preset": preset, "N": ctx.N, "slots": n, "threads": threads,
           "security": "128-bit" if ctx.params.is_128_bit_secure else "INSECURE",
           "simd_path": report.simd_info()["path"], "repeats": repeats, "inner": inner, "stages": {}, "notes": []}
    st = out["stages"]
    app_level = ctx.max_level - bp.levels_consumed

    def clear_plans():
        # the cached DFT plans keep every level's encoded diagonals (≈ 2.6 GiB at N = 2^16) after their
        # bootstrapper is gone: drop them between stages
        for plan in dft_plans(n, bp.cts_depth, bp.stc_depth):
            for lt in plan.levels:
                lt.clear_cache()
        _release()

    # ---- 1. PCMM at the application level and at level 1 (each d measured when d <= pcmm_max_d and its outputs fit
    # pcmm_mem_gib, else extrapolated as d² from the largest d measured at that level)
    pcmm, pcmm_cpu = {}, {}
    for where, level in (("application", app_level), ("level1", 1)):
        row = ctx.encrypt(rng.uniform(-1, 1, n), sk, level=level)
        for d in ds:
            if d > pcmm_max_d or pcmm_bytes(ctx, d, level) > pcmm_mem_gib * 2 ** 30:
                continue
            U = rng.uniform(-1, 1, (d, d)) / d
            X = pcmm_pkg.CtMatrix(ctx, [row] * d, (d, n), 1, "rlwe")
            t0, c0 = time.perf_counter(), time.process_time()
            Y = pcmm_pkg.pcmm(U, X)
            pcmm[(where, d)] = time.perf_counter() - t0
            pcmm_cpu[(where, d)] = time.process_time() - c0
            del Y, X
            _release()
            log(f"PCMM {d}x{d} at level {level} ({where}): {pcmm[(where, d)]:.2f} s")
    rows = []
    for d in ds:
        r = {"d": d}
        for where, level in (("application", app_level), ("level1", 1)):
            measured = sorted(m for (w, m) in pcmm if w == where)
            if (where, d) in pcmm:
                r[f"pcmm_{where}_s"] = pcmm[(where, d)]
                r[f"pcmm_{where}_cpu_s"] = pcmm_cpu[(where, d)]
            elif measured:
                dm = max(measured)
                r[f"pcmm_{where}_s"] = pcmm[(where, dm)] * (d / dm) ** 2
                r[f"pcmm_{where}_cpu_s"] = pcmm_cpu[(where, dm)] * (d / dm) ** 2
                r[f"{where}_extrapolated_from_d"] = dm
                r["extrapolated_from_d"] = dm
                r[f"{where}_estimated_gib"] = pcmm_bytes(ctx, d, level) / 2 ** 30
        rows.append(r)
    st["pcmm"] = {"application_level": app_level, "rows": rows, "rss_gib": _rss_gib()}
    checkpoint(out)

    # ---- 2./3. interleaved rounds: the CtS-first single bootstrap (≈ 11 GiB at N = 2^16), then per k the batched
    # stages (keys generated again each round: both key sets do not fit 20 GiB together); a drifting machine then
    # spreads over both sides instead of favouring one
    single_need = 12.0 if ctx.N >= 1 << 16 else 1.0

    def single_stage(rnd):
        if _wait_for_memory(single_need, log) < single_need:
            raise MemoryError(f"the shared machine never had {single_need} GiB available for the single bootstrap")
        z = rng.uniform(-1, 1, n) + 1j * rng.uniform(-1, 1, n)
        ct = ctx.encrypt(z, sk, level=1)
        t0 = time.perf_counter()
        keys = BootstrapKeys.generate(ctx, sk, bp)
        kg = time.perf_counter() - t0
        boot = Bootstrapper(ctx, keys)
        t0 = time.perf_counter()
        boot.bootstrap(ct)
        first = time.perf_counter() - t0
        walls, cpus = [], []
        for _ in range(inner):
            t0, c0 = time.perf_counter(), time.process_time()
            o = boot.bootstrap(ct)
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
        d_out = ctx.decrypt(o, sk)
        e2e = {k: e2e_single(boot, k) for k in e2e_in}
        rec = {"round": rnd, "keygen_s": kg, "first_s": first, "bootstrap_s": walls, "bootstrap_cpu_s": cpus,
               "end_to_end": e2e,
               "key_bytes": keys.nbytes, "level_out": o.level, "max_bits": _bits(float(np.max(np.abs(d_out - z)))),
               "rss_gib": _rss_gib(), "load_average": report.load_average()}
        log(f"round {rnd}: single CtS-first bootstrap {', '.join(f'{t:.2f}' for t in walls)} s (first {first:.2f} s), "
            f"keys {keys.nbytes / 2**30:.2f} GiB, {rec['max_bits']:.2f} bits")
        del boot, keys, o
        clear_plans()
        return rec

    s2c = BootParams.for_context(ctx, order="s2c_first", log_message_ratio=S2C_LOG_MESSAGE_RATIO)
    base = _rss_gib()[0] * 2 ** 30
    _, choice = choose_k(ctx, mem_gib * 2 ** 30, bp, candidates=ks, seeded=seeded, reserved_bytes=base)
    choice["baseline_rss_gib"] = base / 2 ** 30
    out["memory_choice"] = choice
    log(f"memory choice (budget {mem_gib} GiB, process baseline {base / 2**30:.1f} GiB, keys "
        f"{'seeded' if seeded else 'expanded'}): {choice['reason']}")

    def batch_stage(k, rnd):
        """One round of k's batched stages, or a skip record (keys + working set over the budget or the free memory)."""
        est = batch_key_estimate(ctx, bp, k, seeded)
        work = working_bytes(ctx, k, bp)
        need = (est + work + base) / 2 ** 30
        skip = {"k": k, "skipped": True, "estimated_key_gib": est / 2 ** 30, "estimated_working_gib": work / 2 ** 30}
        if need > mem_gib:
            log(f"k = {k}: skipped (keys ≈ {est / 2**30:.1f} GiB, working set ≈ {work / 2**30:.1f} GiB)")
            return dict(skip, reason=f"batched keys ≈ {est / 2**30:.1f} GiB + working set ≈ {work / 2**30:.1f} GiB "
                                     f"+ process {base / 2**30:.1f} GiB > {mem_gib} GiB")
        # the machine is shared: never start a stage the free memory cannot hold
        avail = _wait_for_memory(need - base / 2 ** 30, log, timeout_s=300)
        if need - base / 2 ** 30 > avail:
            log(f"k = {k}: skipped ({avail:.1f} GiB available)")
            return dict(skip, reason=f"batched keys ≈ {est / 2**30:.1f} GiB + working set ≈ {work / 2**30:.1f} GiB "
                                     f"> {avail:.1f} GiB available on the shared machine when the stage started")
        zs = [rng.uniform(-1, 1, n) + 1j * rng.uniform(-1, 1, n) for _ in range(k)]
        cts = [ctx.encrypt(v, sk, level=1) for v in zs]
        t0 = time.perf_counter()
        bkeys = BatchBootstrapKeys.generate(ctx, sk, k, bp, seeded=seeded)
        kg = time.perf_counter() - t0
        bb = BatchBootstrapper(ctx, bkeys)
        t0 = time.perf_counter()
        bb.bootstrap_batch(cts)
        first = time.perf_counter() - t0
        t0, c0 = time.perf_counter(), time.process_time()
        outs = bb.bootstrap_batch(cts)
        t_batch = time.perf_counter() - t0
        t_batch_cpu = time.process_time() - c0
        bits = min(_bits(float(np.max(np.abs(ctx.decrypt(c, sk) - v)))) for c, v in zip(outs, zs))
        rec = {"k": k, "round": rnd, "load_average": report.load_average(), "keygen_s": kg, "key_bytes": bkeys.nbytes,
               "key_memory_bytes": bkeys.memory_bytes, "seeded": seeded, "estimated_key_gib": est / 2 ** 30,
               "estimated_working_gib": work / 2 ** 30,
               "s2c_key_memory_bytes": batch_key_estimate(ctx, s2c, k, seeded),
               "first_s": first, "bootstrap_batch_s": [t_batch], "bootstrap_batch_cpu_s": [t_batch_cpu],
               "min_max_bits": bits, "rss_after_batch_gib": _rss_gib()}
        log(f"round {rnd}, k = {k}: CtS-first bootstrap_batch {t_batch:.2f} s, keys {bkeys.memory_bytes / 2**30:.2f} "
            f"GiB in memory ({bkeys.nbytes / 2**30:.2f} GiB serialised), {bits:.2f} bits")
        del bb, outs
        clear_plans()
        # S2C-first with the same key objects (the batched CtS keys do not depend on the order)
        mkeys = BatchBootstrapKeys(s2c, k, bkeys.conversion, bkeys.ms_galois, bkeys.galois, bkeys.relin,
                                   bkeys.cts_levels, bkeys.stc_levels, bkeys.conj_level, bkeys.param_hash)
        mb = MamboBootstrapper(ctx, mkeys)
        hi = [ctx.encrypt(v, sk, level=s2c.stc_depth + 1) for v in zs]
        t0 = time.perf_counter()
        mb.bootstrap_batch(hi)
        rec["s2c_first_s"] = time.perf_counter() - t0
        rec["s2c_batch_s"], rec["s2c_batch_cpu_s"] = [], []
        for _ in range(inner):
            t0, c0 = time.perf_counter(), time.process_time()
            outs = mb.bootstrap_batch(hi)
            rec["s2c_batch_s"].append(time.perf_counter() - t0)
            rec["s2c_batch_cpu_s"].append(time.process_time() - c0)
        rec["s2c_min_max_bits"] = min(_bits(float(np.max(np.abs(ctx.decrypt(c, sk) - v)))) for c, v in zip(outs, zs))
        xs = [v.real for v in zs]
        hr = [ctx.encrypt(x, sk, level=s2c.stc_depth + 1) for x in xs]
        U = rng.uniform(-1, 1, (k, k)) / k
        t0, c0 = time.perf_counter(), time.process_time()
        ys = mb.pcmm_bootstrap(U, hr)
        rec["pcmm_bootstrap_s"] = time.perf_counter() - t0
        rec["pcmm_bootstrap_cpu_s"] = time.process_time() - c0
        want = U @ np.array(xs)
        rec["pcmm_bootstrap_min_max_bits"] = min(_bits(float(np.max(np.abs(ctx.decrypt(y, sk) - w))))
                                                 for y, w in zip(ys, want))
        rec["s2c_level_out"] = ys[0].level
        if k in e2e_in:
            rec["end_to_end"] = e2e_batch(mb, k)
        rec["rss_after_mambo_gib"] = _rss_gib()
        log(f"   S2C-first batch {', '.join(f'{t:.2f}' for t in rec['s2c_batch_s'])} s "
            f"({rec['s2c_min_max_bits']:.2f} bits); pcmm_bootstrap {k}x{k}: {rec['pcmm_bootstrap_s']:.2f} s "
            f"({rec['pcmm_bootstrap_min_max_bits']:.2f} bits)")
        del mb, mkeys, bkeys, outs, ys
        clear_plans()
        return rec

    # ---- measured end to end (not derived): per k, the same 2k encrypted real rows at the application level (a
    # layer's input after a bootstrap) and one U; the single stage runs the conventional path on them (the PCMM there,
    # then CtS-first single bootstraps, paired), the batch stage MaMBo's pcmm_bootstrap on them (dropped to
    # SlotToCoeff's level) and the PCMM then bootstrap_batch (on the same values encrypted one level above
    # SlotToCoeff's); every output checked against U·X
    e2e_in = {}
    for k in [k for k in ks if end_to_end and k <= int(choice.get("k") or 0)]:      # the k whose keys fit
        xs = rng.uniform(-1, 1, (2 * k, n))
        U = rng.uniform(-1, 1, (2 * k, 2 * k)) / (2 * k)       # |U·X| <= 1: inside EvalMod's range as it is
        # the S2C-first batch needs its PCMM's outputs at SlotToCoeff's level: those rows are encrypted again there
        e2e_in[k] = (U, U @ xs, [ctx.encrypt(x, sk, level=app_level) for x in xs],
                     [ctx.encrypt(x, sk, level=s2c.stc_depth + 2) for x in xs])

    def drop(c, level):
        return c if c.level == level else ctx.drop_level(c, level)

    def timed(fn):
        t0, c0 = time.perf_counter(), time.process_time()
        out_ = fn()
        return out_, time.perf_counter() - t0, time.process_time() - c0

    def e2e_bits(outs, want):
        return min(_bits(float(np.max(np.abs(ctx.decrypt(y, sk) - w)))) for y, w in zip(outs, want))

    def e2e_single(boot, k):
        U, want, rows_in, _ = e2e_in[k]
        rec = {"single_s": [], "single_cpu_s": []}
        for _ in range(inner):
            def path():
                Y = pcmm_pkg.pcmm(U, pcmm_pkg.CtMatrix(ctx, rows_in, (len(rows_in), n), 1, "rlwe")).cts
                Y = [drop(y, 1) for y in Y]
                return [c for a, b in zip(Y[0::2], Y[1::2]) for c in boot.bootstrap_pair(a, b)]
            outs, w, c = timed(path)
            rec["single_s"].append(w)
            rec["single_cpu_s"].append(c)
        rec["single_min_bits"] = e2e_bits(outs, want)
        return rec

    def e2e_batch(mb, k):
        U, want, rows_in, rows_hi = e2e_in[k]
        lower = [drop(c, s2c.stc_depth + 1) for c in rows_in]
        rec = {"mambo_s": [], "mambo_cpu_s": [], "batched_s": [], "batched_cpu_s": []}
        for _ in range(inner):
            ys, w, c = timed(lambda: mb.pcmm_bootstrap(U, lower, pair=True))
            rec["mambo_s"].append(w)
            rec["mambo_cpu_s"].append(c)
            def path():
                Y = pcmm_pkg.pcmm(U, pcmm_pkg.CtMatrix(ctx, rows_hi, (len(rows_hi), n), 1, "rlwe")).cts
                return mb.bootstrap_batch(Y, pair=True)
            zs_, w, c = timed(path)
            rec["batched_s"].append(w)
            rec["batched_cpu_s"].append(c)
        rec["mambo_min_bits"], rec["batched_min_bits"] = e2e_bits(ys, want), e2e_bits(zs_, want)
        log(f"   end to end, {2 * k} rows: MaMBo {', '.join(f'{t:.2f}' for t in rec['mambo_s'])} s "
            f"({rec['mambo_min_bits']:.2f} bits), PCMM then bootstrap_batch "
            f"{', '.join(f'{t:.2f}' for t in rec['batched_s'])} s ({rec['batched_min_bits']:.2f} bits)")
        return rec

    single_runs, batch_runs = [], {k: [] for k in ks}
    for rnd in range(repeats):
        single_runs.append(single_stage(rnd))
        st["single_runs"] = single_runs
        checkpoint(out)
        for k in ks:
            if batch_runs[k] and batch_runs[k][-1].get("skipped"):
                continue
            batch_runs[k].append(batch_stage(k, rnd))
            st["batch_runs"] = {str(kk): v for kk, v in batch_runs.items()}
            checkpoint(out)

    # ---- medians over every timed call of each side
    flat = lambda recs, key: [t for r in recs for t in r[key]]  # noqa: E731
    t_single = _median(flat(single_runs, "bootstrap_s"))
    t_single_cpu = _median(flat(single_runs, "bootstrap_cpu_s"))
    s0 = single_runs[0]
    st["single"] = {"keygen_s": s0["keygen_s"], "first_s": s0["first_s"], "bootstrap_s": t_single,
                    "bootstrap_cpu_s": t_single_cpu, "samples_s": flat(single_runs, "bootstrap_s"),
                    "cpu_samples_s": flat(single_runs, "bootstrap_cpu_s"), "key_bytes": s0["key_bytes"],
                    "level_out": s0["level_out"], "max_bits": min(r["max_bits"] for r in single_runs),
                    "rss_gib": max((r["rss_gib"] for r in single_runs), key=lambda v: v[1])}
    st["single_s_used"], st["single_cpu_s_used"] = t_single, t_single_cpu
    batches = st["batches"] = []
    for k in ks:
        recs = batch_runs[k]
        if recs and recs[0].get("skipped"):
            batches.append(recs[0])
            continue
        b = dict(recs[0])
        b.pop("round", None)
        for key in ("bootstrap_batch_s", "bootstrap_batch_cpu_s", "s2c_batch_s", "s2c_batch_cpu_s"):
            b[key[:-2] + "_samples"] = flat(recs, key)
            b[key] = _median(flat(recs, key))
        for key in ("pcmm_bootstrap_s", "pcmm_bootstrap_cpu_s"):
            b[key] = _median([r[key] for r in recs])
        for key in ("min_max_bits", "s2c_min_max_bits", "pcmm_bootstrap_min_max_bits"):
            b[key] = min(r[key] for r in recs)
        b["per_ciphertext_s"] = b["bootstrap_batch_s"] / k
        b["speedup_vs_single"] = t_single * k / b["bootstrap_batch_s"]
        b["s2c_speedup_vs_single"] = t_single * k / b["s2c_batch_s"]
        b["cpu_speedup_vs_single"] = t_single_cpu * k / b["bootstrap_batch_cpu_s"]
        b["s2c_cpu_speedup_vs_single"] = t_single_cpu * k / b["s2c_batch_cpu_s"]
        b["rss_after_mambo_gib"] = max((r["rss_after_mambo_gib"] for r in recs), key=lambda v: v[1])
        if k not in e2e_in:
            batches.append(b)
            continue
        e2e = [r["end_to_end"] for r in recs]
        singles = [r["end_to_end"][k] for r in single_runs]
        row = {"k": k, "rows": 2 * k, "input_level": app_level, "derived": False}
        for key, src in (("mambo", e2e), ("batched", e2e), ("single", singles)):
            row[f"{key}_s"] = _median(flat(src, f"{key}_s"))
            row[f"{key}_cpu_s"] = _median(flat(src, f"{key}_cpu_s"))
            row[f"{key}_samples_s"] = flat(src, f"{key}_s")
            row[f"{key}_cpu_samples_s"] = flat(src, f"{key}_cpu_s")
            row[f"{key}_min_bits"] = min(r[f"{key}_min_bits"] for r in src)
        row["mambo_vs_single_cpu"] = row["single_cpu_s"] / row["mambo_cpu_s"]
        row["mambo_vs_batched_cpu"] = row["batched_cpu_s"] / row["mambo_cpu_s"]
        row["mambo_vs_single_wall"] = row["single_s"] / row["mambo_s"]
        b["end_to_end"] = row
        batches.append(b)

    # ---- derived: d×d layer throughput
    done = [b for b in batches if not b.get("skipped")]
    layer = []
    if done:
        best = min(done, key=lambda b: b["s2c_batch_s"] / b["k"])
        for r in rows:
            d = r["d"]
            sep = r["pcmm_application_s"] + d * t_single
            mam = r["pcmm_level1_s"] + d * best["s2c_batch_s"] / best["k"]
            bat = r["pcmm_application_s"] + d * best["bootstrap_batch_s"] / best["k"]
            sep_cpu = r["pcmm_application_cpu_s"] + d * t_single_cpu
            mam_cpu = r["pcmm_level1_cpu_s"] + d * best["s2c_batch_cpu_s"] / best["k"]
            layer.append({"d": d, "k": best["k"], "separate_s": sep, "mambo_s": mam,
                          "separate_cpu_s": sep_cpu, "mambo_cpu_s": mam_cpu, "mambo_cpu_ratio": sep_cpu / mam_cpu,
                          "pcmm_then_batched_cts_first_s": bat,
                          "separate_cts_per_s": d / sep, "mambo_cts_per_s": d / mam,
                          "mambo_throughput_ratio": sep / mam, "derived": True,
                          "pcmm_extrapolated": "extrapolated_from_d" in r,
                          "pcmm_application_extrapolated": "application_extrapolated_from_d" in r,
                          "pcmm_level1_extrapolated": "level1_extrapolated_from_d" in r})
    out["layer"] = layer
    out["rss_gib_final"] = _rss_gib()
    out["peak_rss_gib"] = _rss_gib()[1]
    return out


def print_table(p: dict) -> None:
    st = p["stages"]
    s = st["single"]
    t1 = st.get("single_s_used", s["bootstrap_s"])
    rows = [["single CtS-first", "1", report.fmt_seconds(t1), f"{1 / t1:.3f}", "1.00",
             f"{s['key_bytes'] / 2**30:.2f}", report.fmt_bits(s["max_bits"]), "1.00"]]
    for b in st["batches"]:
        if b.get("skipped"):
            rows.append([f"batch k={b['k']}", str(b["k"]), "skipped", "", "", f"≈{b['estimated_key_gib']:.1f}", "", ""])
            continue
        rows.append([f"batch CtS-first k={b['k']}", str(b["k"]), report.fmt_seconds(b["bootstrap_batch_s"]),
                     f"{b['k'] / b['bootstrap_batch_s']:.3f}", report.fmt_ratio(b["speedup_vs_single"]),
                     f"{b.get('key_memory_bytes', b['key_bytes']) / 2**30:.2f}", report.fmt_bits(b["min_max_bits"]),
                     report.fmt_ratio(b["cpu_speedup_vs_single"])])
        rows.append([f"batch S2C-first k={b['k']}", str(b["k"]), report.fmt_seconds(b["s2c_batch_s"]),
                     f"{b['k'] / b['s2c_batch_s']:.3f}",
                     report.fmt_ratio(b["s2c_speedup_vs_single"]), "same",
                     report.fmt_bits(b["s2c_min_max_bits"]), report.fmt_ratio(b["s2c_cpu_speedup_vs_single"])])
    report.table(["pipeline", "k", "time", "ct/s", "vs single", "keys GiB", "bits", "vs single (CPU time)"], rows,
                 title=f"bootstrapping throughput — {p['preset']} (N={p['N']}, {p['threads']} threads, SIMD "
                       f"{p['simd_path']}, peak RSS {p['peak_rss_gib']:.2f} GiB)")
    lrows = [[r["d"], r["k"], report.fmt_seconds(r["separate_s"]), report.fmt_seconds(r["mambo_s"]),
              report.fmt_ratio(r["mambo_throughput_ratio"]), report.fmt_ratio(r["mambo_cpu_ratio"]),
              "yes" if r["pcmm_extrapolated"] else "no"]
             for r in p["layer"]]
    report.table(["d", "k", "PCMM + d bootstraps", "MaMBo", "throughput ratio", "CPU-time ratio", "PCMM extrapolated"], lrows,
                 title="d×d layer then refresh (derived from the stage times)")
    erows = [[b["k"], e["rows"], report.fmt_seconds(e["single_s"]), report.fmt_seconds(e["batched_s"]),
              report.fmt_seconds(e["mambo_s"]), report.fmt_ratio(e["mambo_vs_single_cpu"]),
              report.fmt_ratio(e["mambo_vs_batched_cpu"]), report.fmt_bits(e["single_min_bits"]),
              report.fmt_bits(e["mambo_min_bits"])]
             for b in st["batches"] if (e := b.get("end_to_end"))]
    if erows:
        report.table(["k", "rows", "PCMM + single", "PCMM + batch", "MaMBo", "MaMBo vs single (CPU)",
                      "vs batch (CPU)", "bits single", "bits MaMBo"], erows,
                     title="measured end to end: the same encrypted rows through each path (medians)")
    if p.get("memory_choice"):
        print(f"memory choice: {p['memory_choice']['reason']}")
    for note in p.get("notes", []):
        print(f"note: {note}")


def add_arguments(parser) -> None:
    parser.add_argument("--preset", default="N16-boot")
    parser.add_argument("--ks", default="2,4,8,16", help="batch sizes (skipped when their keys do not fit)")
    parser.add_argument("--ds", default="256,1024,4096", help="PCMM sizes d (d×d weights, d ciphertext rows)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pcmm-max-d", type=int, default=1024,
                        help="largest d measured (also only while its outputs fit --pcmm-mem-gib); larger d "
                             "extrapolated (d²) from the largest measured at the same level")
    parser.add_argument("--pcmm-mem-gib", type=float, default=6.0,
                        help="a PCMM whose d output ciphertexts are estimated above this is extrapolated, not run")
    parser.add_argument("--repeats", type=int, default=3,
                        help="interleaved rounds: single stage, then each k's batched stages, again ... (medians)")
    parser.add_argument("--inner", type=int, default=2, help="timed calls per stage and round (after its first)")
    parser.add_argument("--mem-gib", type=float, default=20.0, help="memory budget for keys + working set")
    parser.add_argument("--unseeded", action="store_true",
                        help="hold the keys' uniform a-parts expanded (more memory, no expansion per use)")
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--allow-insecure", action="store_true")


def main(args) -> int:
    machine = report.machine_info()
    busy = report.busy_warning()
    try:
        payload = run(args.preset, int_list(args.ks), int_list(args.ds), args.threads, args.pcmm_max_d, args.mem_gib,
                      args.allow_insecure, log=lambda m: print(m, file=sys.stderr, flush=True), seeded=not args.unseeded,
                      repeats=args.repeats, inner=args.inner, pcmm_mem_gib=args.pcmm_mem_gib,
                      checkpoint=(lambda p: report.write_json(args.json, "mambo", p, machine=machine))
                      if args.json and args.json != "-" else (lambda p: None))
    except HemlpError as e:
        print(f"hemlp.bench mambo: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    return report.publish(payload, "mambo", args.json, machine, busy, print_table)
