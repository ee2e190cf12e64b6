"""TenSEAL (Microsoft SEAL) half of ``scripts/bench_peers.py core``: runs inside its own venv.

Measures the same operations as ``python -m hemlp.bench core`` through ``tenseal.sealapi`` (SEAL's
raw API: ``CKKSVector`` has no plain rotate) on keys made by a ``tenseal.context`` with
``n_threads``; prints one JSON object on stdout.  Standalone on purpose: it cannot import hemlp.

    python tenseal_core.py --logn 14 --bits 60,40,40,40,40,40,40,60 --scale-bits 40 --threads 1

Differences to hemlp/OpenFHE that the output records as notes: SEAL has a single special prime
(the last of --bits), i.e. one key-switching digit per limb (dnum = L+1); SEAL has no hoisted
rotations (8 rotations = 8 x rotate_vector); SEAL evaluates one operation on one thread
(TenSEAL's n_threads only parallelises its batched vector/matrix ops).
"""
import argparse
import json
import sys

from _common import bits, measure  # noqa: E402 (sibling module, stdlib only)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logn", type=int, required=True)
    ap.add_argument("--bits", required=True,
                    help="coeff_mod_bit_sizes, comma separated; the last one is SEAL's special prime")
    ap.add_argument("--scale-bits", type=int, required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)

    import numpy as np
    import tenseal as ts
    import tenseal.sealapi as sealapi

    N = 1 << a.logn
    bit_sizes = [int(b) for b in a.bits.split(",")]
    scale = float(2 ** a.scale_bits)
    tctx = ts.context(ts.SCHEME_TYPE.CKKS, poly_modulus_degree=N,
                      coeff_mod_bit_sizes=bit_sizes, n_threads=a.threads)
    tctx.global_scale = scale
    sctx = tctx.seal_context().data
    sk = tctx.secret_key().data
    keygen = sealapi.KeyGenerator(sctx, sk)
    pk = sealapi.PublicKey()
    keygen.create_public_key(pk)
    rlk = sealapi.RelinKeys()
    keygen.create_relin_keys(rlk)
    gal_elts_steps = list(range(1, 9))
    # create_galois_keys(list) wants Galois elements, not steps: element for a left rotation by
    # s is 3^s mod 2N (SEAL's generator), computed here to ask for exactly the 8 keys needed.
    gk = sealapi.GaloisKeys()
    keygen.create_galois_keys([pow(3, s, 2 * N) for s in gal_elts_steps], gk)

    encoder = sealapi.CKKSEncoder(sctx)
    encryptor = sealapi.Encryptor(sctx, pk)
    decryptor = sealapi.Decryptor(sctx, sk)
    ev = sealapi.Evaluator(sctx)
    slots = encoder.slot_count()

    rng = np.random.default_rng(a.seed)
    x = rng.uniform(-1, 1, slots)
    y = rng.uniform(-1, 1, slots)
    xl, yl = x.tolist(), y.tolist()

    def encode(v):
        pt = sealapi.Plaintext()
        encoder.encode(v, scale, pt)
        return pt

    def encrypt(pt):
        ct = sealapi.Ciphertext(sctx)
        encryptor.encrypt(pt, ct)
        return ct

    def decrypt(ct):
        pt = sealapi.Plaintext()
        decryptor.decrypt(ct, pt)
        return encoder.decode_double(pt)

    pt_x, pt_y = encode(xl), encode(yl)
    ct_x, ct_y = encrypt(pt_x), encrypt(pt_y)

    def mul():
        out = sealapi.Ciphertext(sctx)
        ev.multiply(ct_x, ct_y, out)
        ev.relinearize_inplace(out, rlk)
        ev.rescale_to_next_inplace(out)
        return out

    def rotate(ct, s):
        out = sealapi.Ciphertext(sctx)
        ev.rotate_vector(ct, s, gk, out)
        return out

    def rot8():
        return [rotate(ct_x, s) for s in gal_elts_steps]

    # NTT of one limb: a ciphertext switched down to the last data level has one limb per
    # polynomial; transform_to_ntt on its coefficient form runs 2 one-limb NTTs (c0, c1).
    ct_last = sealapi.Ciphertext(sctx)
    ev.mod_switch_to(ct_x, sctx.last_parms_id(), ct_last)
    ct_coef = sealapi.Ciphertext(sctx)
    ev.transform_from_ntt(ct_last, ct_coef)

    def ntt2():
        out = sealapi.Ciphertext(sctx)
        ev.transform_to_ntt(ct_coef, out)
        return out

    ops = {}
    r = measure(ntt2, a.repeats)
    for k in ("median_s", "min_s"):
        r[k] /= 2
    r["samples"] = [s / 2 for s in r["samples"]]
    r["note"] = (f"half of Evaluator.transform_to_ntt on a ciphertext with {ct_coef.coeff_modulus_size()} "
                 "limb (2 polynomials), copy included")
    ops["ntt"] = r
    ops["encode"] = measure(lambda: encode(xl), a.repeats)
    ops["encrypt"] = measure(lambda: encrypt(pt_x), a.repeats)
    ops["decrypt"] = measure(lambda: decrypt(ct_x), a.repeats)
    ops["decrypt"]["note"] = "Decryptor.decrypt + CKKSEncoder.decode_double"
    ops["mul"] = measure(mul, a.repeats)
    ops["mul"]["note"] = "multiply + relinearize_inplace + rescale_to_next_inplace"
    ops["rotate"] = measure(lambda: rotate(ct_x, 1), a.repeats)
    ops["rotate_hoisted8"] = measure(rot8, a.repeats)
    ops["rotate_hoisted8"]["note"] = "SEAL has no hoisting: 8 x rotate_vector"

    dec = lambda ct: np.array(decrypt(ct))  # noqa: E731
    h_err = max(float(np.abs(dec(c) - np.roll(x, -(i + 1))).max()) for i, c in enumerate(rot8()))
    precision = {
        "mult_bits": bits(float(np.abs(dec(mul()) - x * y).max())),
        "rotate_bits": bits(float(np.abs(dec(rotate(ct_x, 1)) - np.roll(x, -1)).max())),
        "rotate_hoisted_bits": bits(h_err),
        "fresh_bits": bits(float(np.abs(dec(ct_x) - x).max())),
    }

    try:
        from importlib.metadata import version
        ver = version("tenseal")
    except Exception:  # noqa: BLE001
        ver = "unknown"
    L = len(bit_sizes) - 2
    out = {
        "peer": "tenseal", "version": ver, "python": sys.version.split()[0],
        "logn": a.logn, "N": N, "slots": slots, "threads": a.threads,
        "params": {
            "coeff_mod_bit_sizes": bit_sizes, "log_q": sum(bit_sizes[:-1]), "log_p": bit_sizes[-1],
            "dnum": L + 1, "scale_bits": a.scale_bits, "security": "SEAL tc128 (checked by SEAL)",
        },
        "ops": ops, "precision": precision,
        "notes": [
            f"SEAL has a single special prime ({bit_sizes[-1]} bits): dnum = L+1 = {L + 1}",
            "no hoisted rotations in SEAL: 8 x rotate_vector",
            f"n_threads={a.threads} is TenSEAL's pool for batched ops; each SEAL op runs on one thread",
        ],
    }
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
