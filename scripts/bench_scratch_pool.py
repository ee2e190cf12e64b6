"""Micro benchmark of the evaluator's scratch pool (csrc/ckks/scratch.h): the key-switching ops with the pool (the
default) against the same ops with it switched off (scratch_limit = 0: every temporary allocated and freed per op,
as before the pool), interleaved in one process so that machine noise hits both alike; with one thread it times the
calling thread's CPU time (preemption by other processes does not count). Prints a table; not a test.

    .venv/bin/python scripts/bench_scratch_pool.py [--preset N14-d6] [--repeats 15] [--threads 1]
"""
from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np

from hemlp import _core, fhe


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="N14-d6")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    _core.set_num_threads(args.threads)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ctx = fhe.Context(fhe.Params.preset(args.preset))
    sk, pk = ctx.keygen()
    rlk, gk = ctx.relin_key(sk), ctx.rotation_keys(sk, [1, 2, 3, 4, 5])
    rng = np.random.default_rng(0)
    a = ctx.encrypt(rng.uniform(-1, 1, ctx.slots), pk)
    b = ctx.encrypt(rng.uniform(-1, 1, ctx.slots), pk)
    w = rng.uniform(-1, 1, ctx.slots)
    pt = ctx.encode(w, level=a.level, scale=float(ctx.modulus(a.level)))
    e = ctx.native
    ops = {
        "rotate": lambda: ctx.rotate(a, 1, gk),
        "rotate_inplace": lambda: ctx.rotate_inplace(ctx.drop_level(a, a.level), 1, gk),   # incl. one copy
        "rotate_hoisted x5": lambda: ctx.rotate_hoisted(a, [1, 2, 3, 4, 5], gk),
        "mul + relinearize": lambda: ctx.mul(a, b, relin_key=rlk),
        "mul_relin_rescale": lambda: ctx.mul(a, b, relin_key=rlk, rescale=True),
        "rescale": lambda: ctx.rescale(ctx.mul(a, pt)),
        "rescale_inplace": lambda: ctx.rescale_inplace(ctx.mul(a, pt)),
    }
    limit = e.scratch_limit
    # one thread: the op runs on this thread, whose CPU time a busy machine's preemptions do not inflate
    clock = time.thread_time if args.threads == 1 else time.perf_counter
    print(f"{args.preset}: N = {ctx.N}, level {a.level}, {args.threads} thread(s), {args.repeats} interleaved runs "
          f"per op and mode; SIMD path {_core.ring.simd_path()}")
    print(f"best and median of the runs, ms of {'CPU' if args.threads == 1 else 'wall-clock'} time")
    print(f"{'op':<20} {'pool':>15} {'no pool':>15} {'pool / none (best)':>19}")
    for name, f in ops.items():
        times = {True: [], False: []}
        for _ in range(2):   # warm-up: keys expanded, Galois tables built, the pool filled
            f()
        for _ in range(args.repeats):
            for pooled in (True, False):
                e.scratch_limit = limit if pooled else 0
                f()   # untimed: refills the pool that the switch to 0 emptied (the pooled run measures it warm)
                t0 = clock()
                f()
                times[pooled].append(clock() - t0)
        e.scratch_limit = limit
        p, n = min(times[True]) * 1e3, min(times[False]) * 1e3
        pm, nm = statistics.median(times[True]) * 1e3, statistics.median(times[False]) * 1e3
        print(f"{name:<20} {p:>7.2f} {pm:>7.2f} {n:>7.2f} {nm:>7.2f} {p / n:>19.3f}")
    for f in ops.values():
        f()
    buffers, nbytes = e.scratch_stats()
    print(f"pool after the run: {buffers} buffers, {nbytes / 2**20:.1f} MiB (limit {limit / 2**20:.0f} MiB)")


if __name__ == "__main__":
    main()
