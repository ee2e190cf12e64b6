"""CKKS bootstrapping benchmark: time per bootstrap, levels left, precision, key generation, memory.

    python -m hemlp.bench boot --preset N16-boot --threads 1,2 [--repeats R] [--pair] --json PATH

Precision bits = -log2(max |error|) over all slots for uniform [-1, 1] complex inputs (mean bits too), against
the data and against the decrypted input (what bootstrapping itself adds). The input is encrypted with the
secret key by default (--encrypt pk: public key; at N = 2^16 that input alone has only ~20.4 bits max).
Times are medians over R repeats per thread count, after one first bootstrap (timed apart as
first_bootstrap_s: it encodes and caches the CtS / StC diagonals). Peak RSS is the process maximum (keys +
plans + ciphertexts). The SIMD path is the core's run-time dispatch (AVX-512, AVX2 or scalar). Outputs are
decrypted without IND-CPA-D noise (decrypt_noise "none": the precision bootstrapping itself leaves).
"""
from __future__ import annotations

import math
import resource
import sys
import time

from hemlp.apps.bench import int_list, measure, report
from hemlp.errors import HemlpError

HELP = "CKKS bootstrapping: time (1/2 threads), levels left, precision, keygen time, key bytes, peak RSS"


def _bits(err: float) -> float:
    return math.inf if err == 0 else -math.log2(err)


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2.0 ** 20


def rss_gib() -> float:
    """Current resident set size (GiB; Linux /proc, else the peak)."""
    rss = report.process_status_bytes("VmRSS")
    return peak_rss_gib() if rss is None else rss / 2.0 ** 30


def measure_cpu(fn, repeats: int) -> dict:
    """hemlp.apps.bench.measure's record (no warm-up) plus the process CPU time of each call (cpu_median_s): on a
    loaded machine the 1-thread CPU time is the figure that stays comparable across processes."""
    cpu = []

    def timed():
        c0 = time.process_time()
        fn()
        cpu.append(time.process_time() - c0)

    rec = measure(timed, repeats, warmup=0)
    rec["cpu_samples"] = cpu
    rec["cpu_median_s"] = sorted(cpu)[len(cpu) // 2]
    return rec


def run_boot(preset: str, threads: list[int], repeats: int, seed: int = 1, slots: int | None = None,
             pair: bool = False, allow_insecure: bool = False, encrypt_with: str = "sk", seeded="auto",
             log=print) -> dict:
    import numpy as np

    import hemlp
    from hemlp import fhe
    from hemlp.bootstrap import BootParams, BootstrapKeys, Bootstrapper

    # precision of bootstrapping itself: decrypted without the client's IND-CPA-D noise (a measurement, not a
    # deployment; that noise is chosen per application, docs/security.md)
    ctx = fhe.Context(preset, allow_insecure=allow_insecure, decrypt_noise="none")
    sk, pk = ctx.keygen()
    bp = BootParams.for_context(ctx, **({} if slots is None else {"slots": slots}))
    n = bp.slot_count(ctx)
    log(f"keygen ({preset}, {n} slots) ...")
    t0 = time.perf_counter()
    keys = BootstrapKeys.generate(ctx, sk, bp, seeded=seeded)
    keygen_s = time.perf_counter() - t0
    rss_keys = rss_gib()
    log(keys.describe(ctx))
    t0 = time.perf_counter()
    boot = Bootstrapper(ctx, keys)
    setup_s = time.perf_counter() - t0
    rng = np.random.default_rng(seed)
    z = rng.uniform(-1, 1, n) + 1j * rng.uniform(-1, 1, n)
    key = sk if encrypt_with == "sk" else pk
    ct = ctx.encrypt(z, key, level=1, slots=n)
    d_in = ctx.decrypt(ct, sk)
    if pair:
        b = rng.uniform(-1, 1, n)
        ca, cb = ctx.encrypt(z.real, key, level=1, slots=n), ctx.encrypt(b, key, level=1, slots=n)
    # the first bootstrap encodes the CtS / StC diagonals (cached per level): timed apart, as setup
    hemlp.set_num_threads(max(threads))
    t0 = time.perf_counter()
    boot.bootstrap(ct)
    first_s = time.perf_counter() - t0
    rss_first = rss_gib()
    results = []
    for th in threads:
        hemlp.set_num_threads(th)
        log(f"bootstrap, {th} thread(s) ...")
        out = {}

        def once():
            out["ct"] = boot.bootstrap(ct)

        rec = measure_cpu(once, repeats)
        d = ctx.decrypt(out["ct"], sk)
        err = np.abs(d - z)
        row = {"threads": th, "bootstrap": rec, "level_out": out["ct"].level, "scale_log2": math.log2(out["ct"].scale),
               "max_bits": _bits(float(err.max())), "mean_bits": _bits(float(err.mean())),
               "max_bits_vs_input": _bits(float(np.max(np.abs(d - d_in)))),
               "input_max_bits": _bits(float(np.max(np.abs(d_in - z))))}
        if pair:
            got = {}

            def once_pair():
                got["ab"] = boot.bootstrap_pair(ca, cb)

            row["bootstrap_pair"] = measure_cpu(once_pair, repeats)
            pa, pb = got["ab"]
            row["pair_max_bits"] = min(_bits(float(np.max(np.abs(ctx.decrypt(pa, sk) - z.real)))),
                                       _bits(float(np.max(np.abs(ctx.decrypt(pb, sk) - b)))))
        results.append(row)
        log(f"  {rec['median_s']:.2f} s, level {row['level_out']}, {row['max_bits']:.2f} bits max")
    return {
        "peer": "hemlp", "preset": preset, "N": ctx.N, "slots": n, "log_qp": round(ctx.params.log_qp, 1),
        "security": "128-bit" if ctx.params.is_128_bit_secure else "INSECURE",
        "params": {k: getattr(bp, k) for k in ("order", "log_message_ratio", "K", "degree", "double_angles",
                                               "cts_depth", "stc_depth", "h")},
        "levels_left": boot.output_level, "keygen_s": keygen_s, "setup_s": setup_s,
        "first_bootstrap_s": first_s,
        "key_bytes_in_memory": keys.memory_bytes, "key_bytes_serialised": keys.nbytes,
        "seeded_keys": seeded, "plan_bytes": boot.cts_plan.nbytes + boot.stc_plan.nbytes,
        "rss_after_keygen_gib": rss_keys, "rss_after_first_bootstrap_gib": rss_first,
        "decrypt_noise": "none",
        "rotation_keys": len(keys.rotation_levels), "repeats": repeats, "seed": seed, "simd_path": report.simd_info()["path"],
        "input_encryption": encrypt_with,
        "peak_rss_gib": peak_rss_gib(), "results": results, "notes": [],
    }


def print_boot_table(p: dict) -> None:
    res = p["results"]
    headers = ["metric"] + [f"{r['threads']} thr" for r in res]
    rows = [["bootstrap (s)"] + [report.fmt_seconds(r["bootstrap"]["median_s"]) for r in res],
            ["levels left"] + [r["level_out"] for r in res],
            ["precision max (bits)"] + [report.fmt_bits(r["max_bits"]) for r in res],
            ["precision mean (bits)"] + [report.fmt_bits(r["mean_bits"]) for r in res],
            ["vs decrypted input (bits)"] + [report.fmt_bits(r["max_bits_vs_input"]) for r in res],
            ["input itself (bits)"] + [report.fmt_bits(r["input_max_bits"]) for r in res]]
    if res and "bootstrap_pair" in res[0]:
        rows.append(["pair bootstrap (s)"] + [report.fmt_seconds(r["bootstrap_pair"]["median_s"]) for r in res])
        rows.append(["pair precision (bits)"] + [report.fmt_bits(r["pair_max_bits"]) for r in res])
    title = (f"hemlp bootstrapping — {p['preset']} (N={p['N']}, {p['slots']} slots, log QP {p['log_qp']}, "
             f"{p['security']}), keygen {p['keygen_s']:.1f} s, first bootstrap {p['first_bootstrap_s']:.1f} s, keys {p['key_bytes_in_memory'] / 2**30:.2f} GiB "
             f"in memory (seeded: {p.get('seeded_keys', 'none')}), plans {p.get('plan_bytes', 0) / 2**30:.2f} GiB, peak RSS {p['peak_rss_gib']:.2f} GiB, SIMD {p['simd_path']}")
    report.table(headers, rows, title=title)
    for note in p.get("notes", []):
        print(f"note: {note}")


def add_arguments(parser) -> None:
    parser.add_argument("--preset", default="N16-boot", help="bootstrapping preset (default N16-boot)")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    parser.add_argument("--repeats", type=int, default=1, help="timed bootstraps per thread count (default 1)")
    parser.add_argument("--slots", type=int, default=None, help="slots (default N/2)")
    parser.add_argument("--pair", action="store_true", help="also time bootstrap_pair (two real ciphertexts)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--encrypt", choices=("sk", "pk"), default="sk",
                        help="encrypt the input with the secret key (default; Lattigo's precision tests do) or the "
                             "public key (its encryption noise alone caps N = 2^16 inputs at about 20.4 bits max)")
    parser.add_argument("--seeded", choices=("auto", "all", "none"), default="auto",
                        help="Galois keys held as seeds, expanded on use (BootstrapKeys.generate): auto (default) "
                             "the keys of the last CoeffToSlot level and below, all, none")
    parser.add_argument("--json", metavar="PATH", help="write results as JSON to PATH ('-' = stdout)")
    parser.add_argument("--allow-insecure", action="store_true", help="allow the test chains (test-N12-boot)")


def main(args) -> int:
    if args.repeats < 1:
        print("--repeats must be >= 1", file=sys.stderr)
        return 2
    threads = int_list(args.threads)
    machine = report.machine_info()
    busy = report.busy_warning()
    try:
        payload = run_boot(args.preset, threads, args.repeats, seed=args.seed, slots=args.slots, pair=args.pair,
                           allow_insecure=args.allow_insecure, encrypt_with=args.encrypt,
                           seeded={"auto": "auto", "all": True, "none": False}[args.seeded], log=lambda m: print(m, file=sys.stderr, flush=True))
    except HemlpError as e:  # typed errors carry their own fix in the message
        print(f"hemlp.bench boot: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    return report.publish(payload, "boot", args.json, machine, busy, print_boot_table)
