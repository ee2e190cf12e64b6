"""CoeffToSlot / SlotToCoeff levels: the Python path against the native transform (single and double hoisting).

    python -m hemlp.bench lintrans [--log-n 15] [--depth 4] [--direction cts] [--threads 1,2] [--repeats 3]
                                   [--modes python,single,double] [--levels all] --json PATH

The chain is bootstrapping set B (docs/design/bootstrap.md §0, §2: 60 + 13×40 | StC 3×39 | EvalMod 8×60 | CtS 4×56,
P = 6×61, α = 6; the preset N16-boot at N = 2^16, insecure below): CtS level i runs at level 28 − i, StC level i at
16 − i, each with the plan's real merged-level diagonals on N/2 slots. Each level is timed alone with only its
own rotation keys (generated at that level, then freed), so the memory stays at one level's keys + diagonals;
the full transform's time is the sum of its levels. Every output is checked against the numpy schedule
(LinearTransform.simulate) and the precision recorded.
"""
from __future__ import annotations

import gc
import resource
import time
import warnings

import numpy as np

from hemlp.apps.bench import measure, report

HELP = "bootstrapping linear transforms: Python path vs native single / double hoisting, per level and in total"

SET_B_Q = (60,) + (40,) * 13 + (39,) * 3 + (60,) * 8 + (56,) * 4
SET_B_P = (61,) * 6


def add_arguments(p) -> None:
    p.add_argument("--log-n", type=int, default=15)
    p.add_argument("--depth", type=int, default=4, help="merged FFT levels (CtS 4 and StC 3 in set B)")
    p.add_argument("--direction", choices=("cts", "stc"), default="cts")
    p.add_argument("--slots", type=int, default=None, help="default N/2 (full packing)")
    p.add_argument("--top", type=int, default=None,
                   help="level of the first transform level (default: 28 for CtS, 16 for StC, as in set B)")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--modes", default="python,single,double")
    p.add_argument("--levels", default="all", help="'all' or comma-separated level indices of the plan")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", default=None)


def timed(fn, repeats: int) -> dict:
    """measure() plus the process CPU time of each run (robust on a loaded machine for 1 thread; at 2
    threads it is the sum over both threads)."""
    cpu = []

    def run():
        c0 = time.process_time()
        fn()
        cpu.append(time.process_time() - c0)

    r = measure(run, repeats)
    r["cpu_samples"] = cpu[1:]
    r["cpu_min_s"] = min(cpu[1:])
    return r


def rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def main(args) -> int:
    from hemlp import _core
    from hemlp import fhe
    from hemlp.he.lintrans import choose_hoisting
    from hemlp.he import dft

    warn = report.busy_warning()
    if warn:
        print("warning:", warn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fhe.InsecureParametersWarning)
        params = fhe.Params(args.log_n, SET_B_Q, SET_B_P, alpha=6, log_scale=40, name=f"set-B-N{args.log_n}")
        ctx = fhe.Context(params, allow_insecure=True)
    n = args.slots or ctx.slots
    plan = (dft.plan_coeff_to_slot if args.direction == "cts" else dft.plan_slot_to_coeff)(n, args.depth)
    top = args.top if args.top is not None else (28 if args.direction == "cts" else 16)
    threads = [int(t) for t in args.threads.split(",")]
    modes = args.modes.split(",")
    which = range(plan.depth) if args.levels == "all" else [int(i) for i in args.levels.split(",")]
    sk, pk = ctx.keygen()
    rng = np.random.default_rng(1)
    print(f"{plan}\nN = 2^{args.log_n}, chain set B (L = {ctx.max_level}), levels from {top}, threads {threads}, "
          f"modes {modes}, median of {args.repeats}; load average {report.load_average()}")
    records, rows = [], []
    for i in which:
        lt, level = plan.levels[i], top - i
        t0 = time.perf_counter()
        keys = ctx.rotation_keys(sk, lt.steps, level=level)
        keygen_s = time.perf_counter() - t0
        x = rng.uniform(-1, 1, n) + 1j * rng.uniform(-1, 1, n)
        ct = ctx.encrypt(x, pk, level=level, slots=n)
        expected = lt.simulate(ctx.decrypt(ct, sk))
        t0 = time.perf_counter()
        lt.encode_native(ctx, level)
        encode_s = time.perf_counter() - t0
        rec = dict(index=i, level=level, diagonals=lt.pmults, baby=len(lt.plan.baby), giant=len(lt.plan.giant),
                   n1=lt.plan.n1, keys=len(lt.steps), keys_bytes=keys.nbytes, keygen_s=keygen_s,
                   native_encode_s=encode_s, native_diag_bytes=lt.encode_native(ctx, level).nbytes,
                   auto=choose_hoisting(lt.plan, level, len(SET_B_P)), runs={})
        for th in threads:
            _core.set_num_threads(th)
            for mode in modes:
                kw = dict(native=False) if mode == "python" else dict(native=True, hoisting=mode)
                r = timed(lambda: lt.apply(ctx, ct, keys, **kw), args.repeats)
                y = ctx.decrypt(lt.apply(ctx, ct, keys, **kw), sk)
                err = float(np.max(np.abs(y - expected)))
                r["bits"] = float(np.log2(np.max(np.abs(expected)) / err)) if err else float("inf")
                rec["runs"][f"{mode}/{th}"] = r
                rows.append([i, level, lt.pmults, f"{len(lt.plan.baby)}+{len(lt.plan.giant)}", mode, th,
                             report.fmt_ms(r["median_s"]), report.fmt_ms(r["min_s"]), report.fmt_ms(r["cpu_min_s"]),
                             f"{r['bits']:.1f}"])
                print(f"  level {i} ({level}) {mode:6s} {th} thr: {r['median_s'] * 1e3:8.1f} ms (min "
                      f"{r['min_s'] * 1e3:.1f}, cpu {r['cpu_min_s'] * 1e3:.1f}), {r['bits']:.1f} bits", flush=True)
        rec["rss_gib"] = rss_gib()
        records.append(rec)
        lt.clear_cache()
        del keys
        gc.collect()
    _core.set_num_threads(max(threads))
    report.table(["idx", "level", "diags", "baby+giant", "mode", "threads", "median", "min", "cpu min", "bits"],
                 rows,
                 title=f"{args.direction} levels, N = 2^{args.log_n}, {n} slots")
    totals = {}
    if len(records) == plan.depth:
        for key in records[0]["runs"]:
            totals[key] = {m: sum(r["runs"][key][m] for r in records) for m in ("median_s", "min_s", "cpu_min_s")}
        trows = []
        for th in threads:
            base = totals.get(f"python/{th}")
            for mode in modes:
                t = totals[f"{mode}/{th}"]
                trows.append([mode, th, report.fmt_ms(t["median_s"]), report.fmt_ms(t["min_s"]),
                              report.fmt_ms(t["cpu_min_s"]),
                              report.fmt_ratio(base["min_s"] / t["min_s"]) if base else "-",
                              report.fmt_ratio(base["cpu_min_s"] / t["cpu_min_s"]) if base else "-"])
        report.table(["mode", "threads", "median", "min", "cpu min", "vs python (min)", "vs python (cpu)"], trows,
                     title=f"full {args.direction} (sums over the levels)")
    print(f"peak RSS {rss_gib():.2f} GiB; load average after {report.load_average()}")
    if args.json:
        report.write_json(args.json, "lintrans", dict(
            log_n=args.log_n, slots=n, depth=plan.depth, direction=args.direction, stages=list(plan.stages),
            chain=dict(q=list(SET_B_Q), p=list(SET_B_P), alpha=6), top_level=top, threads=threads, modes=modes,
            repeats=args.repeats, levels=records, totals_s=totals, peak_rss_gib=rss_gib(),
            load_average_after=report.load_average()))
    return 0
