"""OpenFHE half of ``scripts/bench_peers.py pcmm``: runs inside its own Python 3.10 venv.

Computes Y = U @ Enc(M) the way OpenFHE's API allows for a batch of vectors: row i of M is one
slot-packed ciphertext and output row r is EvalLinearWSum(rows, U[r, :]) (which rescales).
Ciphertexts are encrypted at the level where `--limbs` RNS limbs remain, as hemlp's PCMM runs.
Prints one JSON object: median seconds of the whole product and its precision in bits.
"""
import argparse
import json
import math
import os
import statistics
import time

from _common import openfhe_context  # noqa: E402 (sibling module, stdlib only)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logn", type=int, required=True)
    ap.add_argument("--depth", type=int, required=True)
    ap.add_argument("--scale-bits", type=int, required=True)
    ap.add_argument("--first-bits", type=int, default=60)
    ap.add_argument("--dnum", type=int, required=True)
    ap.add_argument("--limbs", type=int, default=2)
    ap.add_argument("--d", type=int, required=True, help="d1 = d2")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    import numpy as np
    import openfhe as o

    N = 1 << a.logn
    slots = N // 2
    cc = openfhe_context(o, a.logn, a.scale_bits, a.first_bits, a.depth, a.dnum, o.HEStd_128_classic)
    for feat in (o.PKE, o.KEYSWITCH, o.LEVELEDSHE, o.ADVANCEDSHE):
        cc.Enable(feat)
    kp = cc.KeyGen()
    rng = np.random.default_rng(0)
    d = a.d
    U = rng.normal(0, 1 / math.sqrt(d), (d, d))
    M = rng.uniform(-1, 1, (8, slots))  # 8 distinct rows repeated: timing does not depend on data
    level = a.depth + 1 - a.limbs
    base = [cc.Encrypt(kp.publicKey, cc.MakeCKKSPackedPlaintext(M[i].tolist(), 1, level)) for i in range(8)]
    cts = [base[i % 8] for i in range(d)]
    Mfull = np.stack([M[i % 8] for i in range(d)])

    def product(rows=d):
        # EvalLinearWSum consumes the level itself (weights encoded as constants, then rescaled),
        # so no explicit Rescale: the output has limbs - 1 towers, like hemlp's rescaled PCMM.
        return [cc.EvalLinearWSum(cts, U[r].tolist()) for r in range(rows)]

    product(1)
    samples = []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        out = product()
        samples.append(time.perf_counter() - t0)
    want = U[:2] @ Mfull
    err = 0.0
    for r in range(2):
        pt = cc.Decrypt(kp.secretKey, out[r])
        pt.SetLength(slots)
        err = max(err, float(np.max(np.abs(np.array(pt.GetRealPackedValue()) - want[r]))))
    print(json.dumps({"median_s": statistics.median(samples), "min_s": min(samples), "d": d,
                      "bits": float("inf") if err == 0 else -math.log2(err), "limbs": a.limbs,
                      "method": "EvalLinearWSum per output row (rescales internally)"}))


if __name__ == "__main__":
    main()
