"""OpenFHE half of ``scripts/bench_peers.py boot``: CKKS ``EvalBootstrap`` at 128-bit, in its own Python 3.10 venv.

Standalone on purpose (it cannot import hemlp); prints one JSON object on stdout.

    python openfhe_boot.py --logn 16 --threads 1,2 --repeats 1 [--scale-bits 59,55,50] [--levels-after 2,1]

Parameters: uniform-ternary secret (hemlp's main secret; OpenFHE's sparse-ternary encapsulation is not
used), FLEXIBLEAUTO scaling (OpenFHE's recommended mode for bootstrapping), HYBRID key switching, level
budget [4, 4] (CoeffToSlot / SlotToCoeff levels, hemlp's 4 / 3 are close), HEStd_128_classic with the ring
dimension forced to 2^logn (OpenFHE refuses a chain over its 128-bit bound, 1747 bits at N = 2^16). Its
"best" 128-bit parameters are searched, without key generation, in this order: the largest scaling prime
first (precision), then the most levels left after bootstrapping, then the fewest key-switching digits
(speed); the first context OpenFHE accepts is used, and the refused candidates are reported.

Measured: key generation (EvalMultKeyGen + EvalBootstrapKeyGen), one untimed EvalBootstrap (OpenFHE
precomputes nothing lazily after EvalBootstrapSetup, but the first call warms the allocator), then
`repeats` timed EvalBootstraps per thread count; levels left (the context depth minus the output's level,
checked by that many squarings), precision -log2(max |error|) over all slots for uniform [-1, 1] real
inputs (encrypted with the secret key, as hemlp's bench does), peak RSS of this process.

Threads: OpenFHE parallelises with OpenMP; the thread count is changed between measurements with
omp_set_num_threads of the libgomp the extension loaded (one key generation serves both counts), and the
JSON records the thread count OpenMP reports inside a parallel region.
"""
import argparse
import ctypes
import json
import math
import os
import resource
import sys
import time

from _common import bits, measure  # noqa: E402 (sibling module, stdlib only)


def _libgomp():
    """The libgomp the openfhe extension linked (from this process's memory maps), or None."""
    try:
        with open("/proc/self/maps") as f:
            paths = {ln.split()[-1] for ln in f if "libgomp" in ln and "/" in ln}
    except OSError:
        return None
    for p in sorted(paths):
        try:
            return ctypes.CDLL(p)
        except OSError:
            continue
    return None


def measure_cpu(fn, repeats):
    """_common.measure's record (no warm-up) plus the process CPU time of each call (cpu_median_s)."""
    cpu = []

    def timed():
        c0 = time.process_time()
        fn()
        cpu.append(time.process_time() - c0)

    rec = measure(timed, repeats, warmup=0)
    rec["cpu_samples"] = cpu
    rec["cpu_median_s"] = sorted(cpu)[len(cpu) // 2]
    return rec


def candidates(scales, levels_after, dnums):
    for s in scales:
        for lv in levels_after:
            for d in dnums:
                yield s, lv, d


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logn", type=int, default=16)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--scale-bits", default="59,55,50", help="scaling-prime sizes to try, best first")
    ap.add_argument("--first-bits", type=int, default=60)
    ap.add_argument("--levels-after", default="2,1", help="levels left after bootstrapping to try, best first")
    ap.add_argument("--dnum", default="3,4,5,6,7,8", help="key-switching digit counts to try, fastest first")
    ap.add_argument("--level-budget", default="4,4")
    ap.add_argument("--insecure", action="store_true", help="HEStd_NotSet (smoke tests at small N only)")
    a = ap.parse_args(argv)
    threads = [int(t) for t in a.threads.split(",")]
    os.environ["OMP_NUM_THREADS"] = str(max(threads))
    import numpy as np
    import openfhe as o

    N = 1 << a.logn
    slots = N // 2
    budget = [int(x) for x in a.level_budget.split(",")]
    dist = o.SecretKeyDist.UNIFORM_TERNARY if hasattr(o, "SecretKeyDist") else o.UNIFORM_TERNARY
    boot_depth = o.CryptoContext.GetBootstrapDepth(budget, dist)
    refused, cc, chosen = [], None, None
    t_probe = time.perf_counter()
    for s, lv, d in candidates([int(x) for x in a.scale_bits.split(",")],
                               [int(x) for x in a.levels_after.split(",")],
                               [int(x) for x in a.dnum.split(",")]):
        depth = boot_depth + lv
        p = o.CCParamsCKKSRNS()
        p.SetSecretKeyDist(dist)
        p.SetSecurityLevel(o.HEStd_NotSet if a.insecure else o.HEStd_128_classic)
        p.SetRingDim(N)
        p.SetScalingTechnique(o.FLEXIBLEAUTO)
        p.SetScalingModSize(s)
        p.SetFirstModSize(a.first_bits)
        p.SetMultiplicativeDepth(depth)
        p.SetKeySwitchTechnique(o.HYBRID)
        p.SetNumLargeDigits(d)
        p.SetBatchSize(slots)
        try:
            c = o.GenCryptoContext(p)
            if c.GetRingDimension() != N:
                raise RuntimeError(f"ring dimension {c.GetRingDimension()}")
        except Exception as e:  # noqa: BLE001 - OpenFHE raises plain RuntimeError
            refused.append({"scale_bits": s, "levels_after": lv, "dnum": d, "why": str(e).splitlines()[0][:160]})
            continue
        cc, chosen = c, {"scale_bits": s, "first_bits": a.first_bits, "levels_after_requested": lv, "dnum": d,
                         "depth": depth, "bootstrap_depth": boot_depth}
        break
    probe_s = time.perf_counter() - t_probe
    if cc is None:
        print(json.dumps({"error": "no candidate parameter set is accepted at 128-bit", "refused": refused}))
        return 1
    for feat in (o.PKE, o.KEYSWITCH, o.LEVELEDSHE, o.ADVANCEDSHE, o.FHE):
        cc.Enable(feat)
    log_q = math.log2(cc.GetElementParams().GetModulus())
    log_p = None  # the Python binding does not expose P; OpenFHE checked Q·P against its 128-bit bound

    t0 = time.perf_counter()
    cc.EvalBootstrapSetup(budget)
    setup_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    kp = cc.KeyGen()
    cc.EvalMultKeyGen(kp.secretKey)
    cc.EvalBootstrapKeyGen(kp.secretKey, slots)
    keygen_s = time.perf_counter() - t0

    rng = np.random.default_rng(a.seed)
    x = rng.uniform(-1, 1, slots)
    depth = chosen["depth"]
    pt = cc.MakeCKKSPackedPlaintext(x, 1, depth - 1)
    pt.SetLength(slots)
    ct = cc.Encrypt(kp.secretKey, pt)

    gomp = _libgomp()
    notes = []
    if gomp is None:
        notes.append("libgomp not found in the process: every measurement ran at OMP_NUM_THREADS="
                     f"{max(threads)}")
    out = {}

    def once():
        out["ct"] = cc.EvalBootstrap(ct)

    t0 = time.perf_counter()
    once()
    first_s = time.perf_counter() - t0
    results = []
    for th in threads:
        if gomp is not None:
            gomp.omp_set_num_threads(th)
        rec = measure_cpu(once, a.repeats)
        res = cc.Decrypt(out["ct"], kp.secretKey)
        res.SetLength(slots)
        got = np.array(res.GetRealPackedValue()[:slots])
        err = np.abs(got - x)
        seen = gomp.omp_get_max_threads() if gomp is not None else max(threads)
        results.append({"threads": th, "omp_max_threads": seen, "bootstrap": rec,
                        "max_bits": bits(float(err.max())), "mean_bits": bits(float(err.mean()))})
        print(f"openfhe boot: {th} thread(s) {rec['median_s']:.2f} s, {results[-1]['max_bits']:.2f} bits",
              file=sys.stderr, flush=True)
    level_after = out["ct"].GetLevel()
    left = depth - level_after
    # the levels really left: squarings (FLEXIBLEAUTO rescales automatically) that go through and decrypt to
    # x^(2^k) within 2^-8; the depth-minus-level count is recorded beside it
    y, checked, square_bits = out["ct"], 0, []
    try:
        for k in range(1, left + 2):
            y = cc.EvalMult(y, y)
            r = cc.Decrypt(y, kp.secretKey)
            r.SetLength(slots)
            b = bits(float(np.max(np.abs(np.array(r.GetRealPackedValue()[:slots]) - x ** (2 ** k)))))
            square_bits.append(b)
            if b < 8:
                break
            checked = k
    except Exception as e:  # noqa: BLE001
        notes.append(f"squaring {checked + 1} after bootstrapping failed: {str(e).splitlines()[0][:160]}")
    print(json.dumps({
        "peer": "openfhe", "version": getattr(o, "__version__", None) or "1.6.1", "N": N, "slots": slots,
        "security": "HEStd_NotSet (INSECURE)" if a.insecure else "HEStd_128_classic", "secret": "uniform ternary", "scaling": "FLEXIBLEAUTO",
        "level_budget": budget, "params": chosen, "refused": refused, "log_q": log_q, "log_p": log_p,
        "log_qp": (log_q + log_p) if log_p is not None else None, "probe_s": probe_s, "setup_s": setup_s,
        "keygen_s": keygen_s, "first_bootstrap_s": first_s, "level_after": level_after, "depth_minus_level": left,
        "levels_left": checked, "squaring_bits": square_bits,
        "input": "real uniform [-1, 1], secret-key encryption", "results": results,
        "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2.0 ** 20, "notes": notes}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
