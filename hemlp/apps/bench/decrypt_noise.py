"""Decryption noise (IND-CPA-D): the precision and time each mode costs, measured on real ciphertexts.

For a preset: a fresh encryption of uniform [-1, 1] slots, and the same slots through a compiled chain of `--depth`
squarings (x -> x^2 -> ..., layout (A), every slot a sample: the worked example of docs/design/decryption.md §3),
decrypted with noise "none" (exact, tests only), "standard" (sigma = t) and "flood" (LMSS, s = 30, tau = 1, bound t),
where t is the bound of what is decrypted: the fresh-encryption bound for the fresh ciphertext, the compiled plan's
own bound (compile's noise analysis) for the chain's output. Precision = -log2 max |dec - reference| over all slots
(the reference is the noiseless decryption, so only the decryption noise is measured), time = median of decrypt
calls.
"""
from __future__ import annotations

import argparse
import math
import warnings

import numpy as np

from hemlp import fhe
from hemlp.errors import LevelError
from hemlp.apps.bench import measure
from hemlp.apps.bench.report import fmt_ms, table, write_json

HELP = "precision and time of decryption with IND-CPA-D noise (none / standard / flood)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default="N14-d6")
    p.add_argument("--depth", type=int, default=6, help="squarings before decryption (the deep row)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--allow-insecure", action="store_true")
    p.add_argument("--json", help="write the results here")


def main(args) -> int:
    import torch

    import hemlp
    from hemlp.models import Square

    params = fhe.Params.preset(args.preset)
    slots = params.N // 2
    depth = min(args.depth, params.max_level)
    x = np.random.default_rng(7).uniform(-1, 1, slots)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fhe.InsecureParametersWarning)
        while True:            # the deepest chain the preset holds (the first product may need a level more)
            try:
                cm = hemlp.compile(torch.nn.Sequential(*[Square() for _ in range(depth)]), x[:, None],
                                   batch_size=slots, preset=args.preset, layout="batch",
                                   allow_insecure=args.allow_insecure)
                break
            except LevelError:
                if depth == 1:
                    raise
                depth -= 1
    ctx = cm.context            # every decryption below names its noise mode
    sk, ek = cm.keygen()
    pk = ctx.wrap(fhe.PublicKey, ctx.native.public_key(sk.native))   # public-key inputs: the larger fresh error
    fresh = ctx.encrypt(x, pk)
    deep = cm.run(cm.encrypt(x[:, None], pk), ek).ctm.cts[0]
    t_fresh = math.log2(params.native.fresh_noise_bound)
    rows, out = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fhe.UnsafeDecryptionWarning)
        for label, ct, t_log2, source in (
                ("fresh", fresh, t_fresh, "fresh-encryption bound"),
                (f"after {depth} squarings", deep, cm.noise_bound_log2, "the compiled plan's noise analysis")):
            flood = fhe.FloodSpec(bound_log2=t_log2, stat_security=30, queries=1)
            ref = ctx.decrypt(ct, sk, noise="none")
            for mode in ("none", "standard", "flood"):
                kw = dict(noise=mode, bound_log2=t_log2 if mode == "standard" else None,
                          flood=flood if mode == "flood" else None)
                y, info = ctx.decrypt(ct, sk, info=True, **kw)
                err = float(np.abs(y - ref).max())
                bits = math.inf if err == 0 else -math.log2(err)
                t = measure(lambda: ctx.decrypt(ct, sk, **kw), args.repeats)
                rec = dict(ciphertext=label, level=ct.level, mode=mode, bound_log2=t_log2, bound_source=source,
                           log2_sigma=info["log2_sigma"], est_bits_per_slot=info["est_bits"], measured_bits_max=bits,
                           related_decryptions_budget=info["budget"], decrypt=t)
                out.append(rec)
                rows.append([label, f"{t_log2:.1f}", mode,
                             "-" if info["log2_sigma"] is None else f"{info['log2_sigma']:.1f}",
                             "-" if info["est_bits"] is None else f"{info['est_bits']:.1f}",
                             "exact" if bits == math.inf else f"{bits:.1f}", fmt_ms(t["median_s"])])
    table(["ciphertext", "log2 t", "noise", "log2 sigma", "est. bits (std)", "bits (max err)", "decrypt"], rows,
          title=f"decryption noise, {args.preset} (N = 2^{params.log_n}, {slots} slots, scale 2^{params.log_scale:g})")
    if args.json:
        write_json(args.json, "decrypt_noise", dict(preset=args.preset, depth=depth, model="squaring chain",
                                                    flood=dict(stat_security=30, queries=1), results=out))
    return 0
