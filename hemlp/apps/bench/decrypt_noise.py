"""Decryption noise (IND-CPA-D): the precision and time each mode costs, measured on real ciphertexts.

For a preset: fresh encryptions of uniform [-1, 1] slots and the same after a chain of squarings (the
depth-`--depth` circuit of the worked example in docs/design/decryption.md §3), decrypted with noise "none" (exact,
tests only), "standard" (sigma = the fresh-encryption bound) and "flood" (LMSS, s = 30, tau = 1, bound 2^--bound-log2).
Precision = -log2 max |dec - reference| over all slots (the reference is the noiseless decryption, so only
the decryption noise is measured), time = median of decrypt calls.
"""
from __future__ import annotations

import argparse
import math
import warnings

import numpy as np

from hemlp import fhe
from hemlp.apps.bench import measure
from hemlp.apps.bench.report import fmt_ms, table, write_json

HELP = "precision and time of decryption with IND-CPA-D noise (none / standard / flood)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default="N14-d6")
    p.add_argument("--depth", type=int, default=6, help="squarings before decryption (the deep row)")
    p.add_argument("--bound-log2", type=float, default=10.0, help="flood mode's trusted error bound t (log2)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--allow-insecure", action="store_true")
    p.add_argument("--json", help="write the results here")


def main(args) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fhe.InsecureParametersWarning)
        ctx = fhe.Context(args.preset, allow_insecure=args.allow_insecure, decrypt_noise="standard")
    sk, pk = ctx.keygen()
    rlk = ctx.relin_key(sk)
    rng = np.random.default_rng(7)
    x = rng.uniform(-1, 1, ctx.slots)
    fresh = ctx.encrypt(x, pk)
    deep = fresh
    for _ in range(min(args.depth, ctx.max_level)):
        deep = ctx.mul(deep, deep, relin_key=rlk, rescale=True)
    flood = fhe.FloodSpec(bound_log2=args.bound_log2, stat_security=30, queries=1)
    rows, out = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fhe.UnsafeDecryptionWarning)
        for label, ct in (("fresh", fresh), (f"after {min(args.depth, ctx.max_level)} squarings", deep)):
            ref = ctx.decrypt(ct, sk, noise="none")
            for mode in ("none", "standard", "flood"):
                kw = dict(noise=mode, flood=flood if mode == "flood" else None)
                y, info = ctx.decrypt(ct, sk, info=True, **kw)
                err = float(np.abs(y - ref).max())
                bits = math.inf if err == 0 else -math.log2(err)
                t = measure(lambda: ctx.decrypt(ct, sk, **kw), args.repeats)
                rec = dict(ciphertext=label, level=ct.level, mode=mode, log2_sigma=info["log2_sigma"],
                           est_bits_per_slot=info["est_bits"], measured_bits_max=bits,
                           related_decryptions_budget=info["budget"], decrypt=t)
                out.append(rec)
                rows.append([label, mode, "-" if info["log2_sigma"] is None else f"{info['log2_sigma']:.1f}",
                             "-" if info["est_bits"] is None else f"{info['est_bits']:.1f}",
                             "exact" if bits == math.inf else f"{bits:.1f}", fmt_ms(t["median_s"])])
    table(["ciphertext", "noise", "log2 sigma", "est. bits (std)", "bits (max err)", "decrypt"], rows,
          title=f"decryption noise, {args.preset} (N = 2^{ctx.params.log_n}, {ctx.slots} slots, "
                f"scale 2^{ctx.params.log_scale:g})")
    if args.json:
        write_json(args.json, "decrypt_noise", dict(preset=args.preset, depth=args.depth,
                                                    flood=dict(bound_log2=args.bound_log2, stat_security=30,
                                                               queries=1), results=out))
    return 0
