#!/usr/bin/env python3
"""Exact modular GEMM (hemlp._core.modgemm) vs numpy float64 matmul of the same shape.

For d1 = d2 = d and n columns, times ModGemmPlan.apply (U prepared once, as in PCMM where the plan is
reused across RNS primes) for one 60-bit and one 40-bit NTT prime against numpy's (d x d) @ (d x n) in
float64, with 1 and 2 threads. Each thread count runs in a fresh subprocess with OPENBLAS_NUM_THREADS
and OMP_NUM_THREADS set, because both BLAS libraries read them once at load time.

Run as docs/design/peers.md (BLAS) says, without the CI's OpenBLAS overrides so both BLAS pick their own kernels:
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python scripts/bench_modgemm.py
Options: --d 256 1024 4096 --n 8192 16384 --threads 1 2 --json bench/modgemm.json
On a shared machine, --merge A.json B.json ... keeps, per entry, the minimum times over earlier runs
and this one (pass --runs 0 to only merge).
"""
import argparse
import ctypes
import glob
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np


def ntt_prime(bits: int, log_2n: int = 17) -> int:
    """Largest prime q < 2^bits with q = 1 mod 2^log_2n (an NTT prime for N = 2^(log_2n - 1))."""
    from hemlp._core import ring

    step = 1 << log_2n
    q = ((1 << bits) - 1) // step * step + 1
    while not ring.is_prime(q):
        q -= step
    return q


def blas_cores():
    """Kernel names the two BLAS libraries picked (they differ in version and CPU detection)."""
    out = {}
    try:
        lib = ctypes.CDLL("libopenblas.so.0")  # the system OpenBLAS hemlp._core links
        lib.openblas_get_corename.restype = ctypes.c_char_p
        lib.openblas_get_config.restype = ctypes.c_char_p
        out["hemlp_openblas"] = f"{lib.openblas_get_config().decode()} core={lib.openblas_get_corename().decode()}"
    except (OSError, AttributeError) as e:
        out["hemlp_openblas"] = f"unknown ({e})"
    try:
        libdir = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
        path = glob.glob(os.path.join(libdir, "libscipy_openblas*.so"))[0]
        lib = ctypes.CDLL(path)
        for prefix in ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename"):
            if hasattr(lib, prefix):
                fn = getattr(lib, prefix)
                fn.restype = ctypes.c_char_p
                out["numpy_openblas"] = f"{os.path.basename(path)} core={fn().decode()}"
                break
    except (OSError, IndexError) as e:
        out["numpy_openblas"] = f"unknown ({e})"
    return out


def interleaved_min(fns: dict, min_reps: int = 2, max_reps: int = 5, budget_s: float = 20.0):
    """Minimum wall and CPU (process) time of each callable, run round-robin so that all see the same
    machine load (the benchmark machine may be shared); at least min_reps rounds, more within budget_s.
    With one thread, CPU time is what the work costs even when other processes share the cores."""
    wall = {k: float("inf") for k in fns}
    cpu = dict(wall)
    spent, rounds = 0.0, 0
    while rounds < min_reps or (rounds < max_reps and spent * (rounds + 1) / rounds < budget_s):
        for k, fn in fns.items():
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            dt, dc = time.perf_counter() - t0, time.process_time() - c0
            wall[k], cpu[k] = min(wall[k], dt), min(cpu[k], dc)
            spent += dt
        rounds += 1
    return wall, cpu


def worker(args) -> list:
    from hemlp import _core as core

    rng = np.random.default_rng(7)
    primes = {bits: ntt_prime(bits) for bits in args.bits}
    bU = args.bU
    rows = []
    np.ones((64, 64)) @ np.ones((64, 64))  # load numpy's BLAS and start its threads
    for d in args.d:
        U = rng.integers(-(1 << bU), 1 << bU, size=(d, d), endpoint=True, dtype=np.int64)
        plan = core.ModGemmPlan(U, bU)
        A = U.astype(np.float64)
        for n in args.n:
            B = rng.standard_normal((d, n))
            Xs = {bits: rng.integers(0, q, size=(d, n), dtype=np.uint64) for bits, q in primes.items()}
            for bits, q in primes.items():
                plan.apply(Xs[bits][:, :64].copy(), q)  # warm-up: splits U once (cached in the plan)
            fns = {"numpy": lambda: A @ B}
            for bits, q in primes.items():
                fns[bits] = (lambda X, q: lambda: plan.apply(X, q))(Xs[bits], q)
            t, tc = interleaved_min(fns)
            for bits, q in primes.items():
                cfg = plan.config(q)
                rows.append(
                    dict(
                        threads=args.worker_threads, d=d, n=n, q_bits=bits, q=q, bU=bU,
                        w=cfg["w"], T=cfg["T"], TU=cfg["TU"], kb=cfg["kb"],
                        numpy_s=t["numpy"], modgemm_s=t[bits], ratio=t[bits] / t["numpy"],
                        numpy_cpu_s=tc["numpy"], modgemm_cpu_s=tc[bits],
                        numpy_gflops=2.0 * d * d * n / t["numpy"] * 1e-9,
                        modgemm_gflops_equiv=2.0 * d * d * n / t[bits] * 1e-9,
                    )
                )
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
            del B, Xs, fns
    return rows


def merge_min(runs: list) -> list:
    """Per (threads, d, n, q_bits): the minimum numpy and modgemm times over all runs."""
    best = {}
    for rows in runs:
        for r in rows:
            key = (r["threads"], r["d"], r["n"], r["q_bits"])
            b = best.setdefault(key, dict(r, runs=0))
            b["numpy_s"] = min(b["numpy_s"], r["numpy_s"])
            b["modgemm_s"] = min(b["modgemm_s"], r["modgemm_s"])
            for k in ("numpy_cpu_s", "modgemm_cpu_s"):
                if k in r:
                    b[k] = min(b.get(k, float("inf")), r[k])
            b["runs"] += 1
    out = []
    for key in sorted(best):
        r = best[key]
        d, n = r["d"], r["n"]
        r["ratio"] = r["modgemm_s"] / r["numpy_s"]
        if "numpy_cpu_s" in r:
            r["cpu_ratio"] = r["modgemm_cpu_s"] / r["numpy_cpu_s"]
        r["numpy_gflops"] = 2.0 * d * d * n / r["numpy_s"] * 1e-9
        r["modgemm_gflops_equiv"] = 2.0 * d * d * n / r["modgemm_s"] * 1e-9
        out.append(r)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--d", type=int, nargs="+", default=[256, 1024, 4096])
    ap.add_argument("--n", type=int, nargs="+", default=[8192, 16384])
    ap.add_argument("--bits", type=int, nargs="+", default=[60, 40], help="prime sizes")
    ap.add_argument("--bU", type=int, default=18,
                    help="|U| <= 2^bU (docs/design/pcmm-and-planning.md §2.5: Delta_U = 2^18)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--json", default="bench/modgemm.json")
    ap.add_argument("--merge", nargs="*", default=[], help="earlier JSON outputs to fold in (min times)")
    ap.add_argument("--runs", type=int, default=1, help="benchmark passes in this invocation")
    ap.add_argument("--worker-threads", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker_threads is not None:
        json.dump(worker(args), sys.stdout)
        return

    load_before = os.getloadavg()
    results = []
    for _ in range(args.runs):
        for t in args.threads:
            env = dict(os.environ, OPENBLAS_NUM_THREADS=str(t), OMP_NUM_THREADS=str(t))
            cmd = [sys.executable, os.path.abspath(__file__), "--worker-threads", str(t), "--bU", str(args.bU),
                   "--d", *map(str, args.d), "--n", *map(str, args.n), "--bits", *map(str, args.bits)]
            print(f"# {t} thread(s) ...", file=sys.stderr, flush=True)
            out = subprocess.run(cmd, env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
            results.extend(json.loads(out))
    runs = [results] + [json.load(open(f))["results"] for f in args.merge]
    results = merge_min(runs)
    header = (f"{'thr':>3} {'d':>5} {'n':>6} {'q':>3} {'T':>2} {'w':>3} {'numpy s':>9} {'modgemm s':>10} "
              f"{'ratio':>6} {'np GF/s':>8} {'mg GF/s*':>8} {'cpu ratio':>9}")
    print(header)
    print("-" * len(header))
    for r in results:
        print(f"{r['threads']:>3} {r['d']:>5} {r['n']:>6} {r['q_bits']:>3} {r['T']:>2} {r['w']:>3} "
              f"{r['numpy_s']:>9.3f} {r['modgemm_s']:>10.3f} {r['ratio']:>6.2f} "
              f"{r['numpy_gflops']:>8.1f} {r['modgemm_gflops_equiv']:>8.1f} "
              + (f"{r['cpu_ratio']:>9.2f}" if r["threads"] == 1 and "cpu_ratio" in r else f"{'-':>9}"))
    print("* 2*d*d*n / time: the float64 GEMM rate modgemm matches (its DGEMMs do T times that work)")
    print("cpu ratio: process CPU time ratio, shown for 1 thread, where it is robust to other load")

    meta = dict(
        machine=platform.machine(), processor=platform.processor(), cpus=os.cpu_count(),
        env={k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")},
        blas=blas_cores(), numpy=np.__version__, bU=args.bU,
        loadavg_before=load_before, loadavg_after=os.getloadavg(),
        runs=max((r["runs"] for r in results), default=0),
        note="minimum of interleaved runs (and of merged passes); modgemm_s times ModGemmPlan.apply (U prepared once); "
        "ratio = modgemm_s / numpy_s",
    )
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(dict(meta=meta, results=results), f, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
