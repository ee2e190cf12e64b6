"""OpenFHE half of ``scripts/bench_peers.py core``: runs inside its own Python 3.10 venv.

Measures the same operations as ``python -m hemlp.bench core`` with OpenFHE's CKKS
(FIXEDMANUAL scaling, so rescale is explicit; HYBRID key switching with the same number of
digits) and prints one JSON object on stdout.  Standalone on purpose: it cannot import hemlp.

    python openfhe_core.py --logn 14 --depth 6 --scale-bits 40 --first-bits 60 --dnum 4 \
        --threads 1 --repeats 5

Threads: the ``openfhe`` wheel has no thread API; OpenMP reads ``OMP_NUM_THREADS``, which this
script sets from ``--threads`` before importing openfhe (the caller sets it as well).
"""
import argparse
import json
import os
import sys

from _common import bits, measure, openfhe_context  # noqa: E402 (sibling module, stdlib only)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logn", type=int, required=True)
    ap.add_argument("--depth", type=int, required=True, help="number of rescale primes (L)")
    ap.add_argument("--scale-bits", type=int, required=True)
    ap.add_argument("--first-bits", type=int, default=60)
    ap.add_argument("--dnum", type=int, required=True, help="number of key-switching digits (beta)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--security", choices=["auto", "128", "notset"], default="auto",
                    help="auto: HEStd_128_classic, falling back to HEStd_NotSet only if the "
                         "exact ring dimension is refused")
    a = ap.parse_args(argv)

    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    import numpy as np
    import openfhe as o

    notes = []
    N = 1 << a.logn
    slots = N // 2

    def make_cc(sec):
        return openfhe_context(o, a.logn, a.scale_bits, a.first_bits, a.depth, a.dnum, sec)

    security = "HEStd_128_classic"
    cc = None
    if a.security in ("auto", "128"):
        try:
            cc = make_cc(o.HEStd_128_classic)
            if cc.GetRingDimension() != N:
                raise RuntimeError(f"ring dimension {cc.GetRingDimension()} != {N}")
        except Exception as e:  # noqa: BLE001 - OpenFHE raises plain RuntimeError/ValueError
            if a.security == "128":
                raise
            notes.append(f"HEStd_128_classic refused N={N} ({e}); using HEStd_NotSet")
            cc = None
    if cc is None:
        security = "HEStd_NotSet"
        cc = make_cc(o.HEStd_NotSet)
        notes.append("security level HEStd_NotSet (forced to get the exact ring dimension)")
    for feat in (o.PKE, o.KEYSWITCH, o.LEVELEDSHE):
        cc.Enable(feat)

    import math
    logq = math.log2(cc.GetElementParams().GetModulus())
    kp = cc.KeyGen()
    cc.EvalMultKeyGen(kp.secretKey)
    cc.EvalRotateKeyGen(kp.secretKey, list(range(1, 9)))
    m = cc.GetCyclotomicOrder()

    rng = np.random.default_rng(a.seed)
    x = rng.uniform(-1, 1, slots)
    y = rng.uniform(-1, 1, slots)
    xl, yl = x.tolist(), y.tolist()

    pt_x = cc.MakeCKKSPackedPlaintext(xl)
    pt_y = cc.MakeCKKSPackedPlaintext(yl)
    ct_x = cc.Encrypt(kp.publicKey, pt_x)
    ct_y = cc.Encrypt(kp.publicKey, pt_y)

    # NTT of one limb: a plaintext encoded at the last level holds a single RNS limb;
    # SetFormat(COEFFICIENT) is its inverse NTT, SetFormat(EVALUATION) the forward NTT.
    pt_one = cc.MakeCKKSPackedPlaintext(xl, 1, a.depth)
    one_limb_bits = math.log2(pt_one.GetElementModulus())

    def ntt_pair():
        pt_one.SetFormat(o.COEFFICIENT)
        pt_one.SetFormat(o.EVALUATION)

    ops = {}
    r = measure(ntt_pair, a.repeats)
    for k in ("median_s", "min_s"):
        r[k] /= 2
    r["samples"] = [s / 2 for s in r["samples"]]
    r["note"] = (f"half of Plaintext.SetFormat(COEFFICIENT)+SetFormat(EVALUATION) on a one-limb "
                 f"({one_limb_bits:.0f}-bit) plaintext: INTT+NTT / 2")
    ops["ntt"] = r
    ops["encode"] = measure(lambda: cc.MakeCKKSPackedPlaintext(xl), a.repeats)
    ops["encrypt"] = measure(lambda: cc.Encrypt(kp.publicKey, pt_x), a.repeats)

    def dec():
        d = cc.Decrypt(kp.secretKey, ct_x)
        d.SetLength(slots)
        return d.GetRealPackedValue()

    ops["decrypt"] = measure(dec, a.repeats)
    ops["decrypt"]["note"] = "Decrypt (includes decode) + GetRealPackedValue"
    ops["mul"] = measure(lambda: cc.Rescale(cc.EvalMult(ct_x, ct_y)), a.repeats)
    ops["mul"]["note"] = "EvalMult (relinearises) + Rescale, FIXEDMANUAL"
    ops["rotate"] = measure(lambda: cc.EvalRotate(ct_x, 1), a.repeats)

    def hoisted():
        pre = cc.EvalFastRotationPrecompute(ct_x)
        return [cc.EvalFastRotation(ct_x, i, m, pre) for i in range(1, 9)]

    ops["rotate_hoisted8"] = measure(hoisted, a.repeats)
    ops["rotate_hoisted8"]["note"] = "EvalFastRotationPrecompute + 8 x EvalFastRotation"

    def decrypt_vec(ct):
        d = cc.Decrypt(kp.secretKey, ct)
        d.SetLength(slots)
        return np.array(d.GetRealPackedValue())

    # OpenFHE's CKKS Decrypt adds noise when decoding (IND-CPA^D hardening), so two decryptions
    # of one ciphertext differ and its measured precision includes that deliberate noise.
    twice = float(np.abs(decrypt_vec(ct_x) - decrypt_vec(ct_x)).max())
    if twice > 0:
        notes.append(f"Decrypt is randomised (two decryptions of one ciphertext differ by up to "
                     f"2^{math.log2(twice):.1f}): OpenFHE adds noise on decode, included in its "
                     "precision bits")
    prod = decrypt_vec(cc.Rescale(cc.EvalMult(ct_x, ct_y)))
    rot = decrypt_vec(cc.EvalRotate(ct_x, 1))
    hrots = hoisted()
    h_err = max(float(np.abs(decrypt_vec(c) - np.roll(x, -(i + 1))).max())
                for i, c in enumerate(hrots))
    precision = {
        "mult_bits": bits(float(np.abs(prod - x * y).max())),
        "rotate_bits": bits(float(np.abs(rot - np.roll(x, -1)).max())),
        "rotate_hoisted_bits": bits(h_err),
        "fresh_bits": bits(float(np.abs(decrypt_vec(ct_x) - x).max())),
    }

    try:
        from importlib.metadata import version
        ver = version("openfhe")
    except Exception:  # noqa: BLE001
        ver = "unknown"
    out = {
        "peer": "openfhe", "version": ver, "python": sys.version.split()[0],
        "logn": a.logn, "N": cc.GetRingDimension(), "slots": slots, "threads": a.threads,
        "params": {
            "scaling": "FIXEDMANUAL", "key_switching": "HYBRID", "num_large_digits": a.dnum,
            "multiplicative_depth": a.depth, "scaling_mod_size": a.scale_bits,
            "first_mod_size": a.first_bits, "log_q": round(logq, 1), "security": security,
            "log_p": "chosen by OpenFHE (not exposed in Python)",
        },
        "ops": ops, "precision": precision, "notes": notes,
    }
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
