"""Helpers shared by the peer scripts. They run inside each peer's own venv (the script's folder
is on sys.path there), so this module uses the standard library only."""
import math
import statistics
import time


def measure(fn, repeats, warmup=1):
    """Median/min seconds of `fn` over `repeats` timed calls after `warmup` untimed ones."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return {"median_s": statistics.median(samples), "min_s": min(samples),
            "repeats": repeats, "samples": samples}


def bits(err):
    return float("inf") if err == 0 else -math.log2(err)


def openfhe_context(o, logn, scale_bits, first_bits, depth, dnum, security):
    """An OpenFHE CKKS context with hemlp's chain: FIXEDMANUAL scaling, HYBRID key switching."""
    p = o.CCParamsCKKSRNS()
    p.SetRingDim(1 << logn)
    p.SetScalingTechnique(o.FIXEDMANUAL)
    p.SetScalingModSize(scale_bits)
    p.SetFirstModSize(first_bits)
    p.SetMultiplicativeDepth(depth)
    p.SetKeySwitchTechnique(o.HYBRID)
    p.SetNumLargeDigits(dnum)
    p.SetSecurityLevel(security)
    p.SetBatchSize((1 << logn) // 2)
    return o.GenCryptoContext(p)
