"""Encrypted weights (layout C): a small MLP whose weights are encrypted too, on real MNIST digits.

    python -m hemlp.bench weights [--hidden 32] [--batch 16] [--downsample 2] --json PATH

Trains a (784/d²)-hidden-10 MLP with x² (MNIST downsampled by `--downsample`), compiles it with
encrypted_weights=True at a 128-bit preset (the chain DP's block layouts, rectangular CCMM blocks),
and measures keygen, weight encryption, the server run (per layer) and the agreement with plaintext.
"""
from __future__ import annotations

import time

import numpy as np

from hemlp.apps.bench import report

HELP = "encrypted-weights (layout C) MLP on real MNIST digits: agreement, latency, keys"


def add_arguments(p) -> None:
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--downsample", type=int, default=2)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--preset", default=None, help="default: the compiler's 128-bit choice")
    p.add_argument("--allow-insecure", action="store_true")
    p.add_argument("--json", default=None)


def main(args) -> int:
    import torch

    import hemlp
    from hemlp.datasets.mnist_sample import load_mnist_sample
    from hemlp.models import Square
    from hemlp.models.train import predict, train

    warn = report.busy_warning()
    if warn:
        print("warning:", warn)
    hemlp.set_num_threads(args.threads)
    tr, te = load_mnist_sample(train=True), load_mnist_sample(train=False)
    d = int(args.downsample)
    side = 28 // d

    def ds(x):
        return x.reshape(-1, side, d, side, d).mean((2, 4)).reshape(-1, side * side)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(side * side, args.hidden), Square(), torch.nn.Linear(args.hidden, 10))
    train(model, ds(tr.x), tr.y, epochs=args.epochs, seed=0, progress=False)
    model.eval()
    opts = dict(allow_insecure=args.allow_insecure)
    if args.preset:
        opts["preset"] = args.preset
    t0 = time.perf_counter()
    cm = hemlp.compile(model, ds(tr.x[:256]), batch_size=args.batch, encrypted_weights=True, **opts)
    t_compile = time.perf_counter() - t0
    t0 = time.perf_counter()
    sk, ek = cm.keygen()
    t_keygen = time.perf_counter() - t0
    key_bytes = len(ek.to_bytes())
    t0 = time.perf_counter()
    w = cm.encrypt_weights(sk)
    t_wenc = time.perf_counter() - t0
    x = ds(te.x[: args.batch])
    ct = cm.encrypt(x, sk)
    t0 = time.perf_counter()
    out = cm.run(ct, ek, weights=w)
    t_run = time.perf_counter() - t0
    y = cm.decrypt(out, sk)
    plain = predict(model, x)
    agree = float(np.mean(y.argmax(1) == plain.argmax(1)))
    err = float(np.max(np.abs(y - plain)))
    weight_bytes = len(w.to_bytes())
    res = dict(preset=cm.preset, batch=args.batch, inputs=side * side, hidden=args.hidden, compile_s=t_compile,
               keygen_s=t_keygen, rotation_keys=cm.plan.info["rotation_keys"], eval_key_bytes=key_bytes,
               encrypt_weights_s=t_wenc,
               encrypted_weight_bytes=weight_bytes, run_s=t_run, run_s_per_image=t_run / args.batch,
               layer_seconds=out.layer_seconds, agreement=agree, max_abs_err_vs_plaintext=err,
               blocks=[list(L.layout.blocks) for L in cm.blocked.layers], threads=args.threads, plan=str(cm.plan))
    rows = [["preset", cm.preset], ["blocks [b_m, b_n, b_k] per layer", str(res["blocks"])],
            ["rotation keys / keygen", f"{res['rotation_keys']} / {report.fmt_seconds(t_keygen)}"],
            ["evaluation keys", f"{key_bytes / 1e6:.0f} MB"],
            ["encrypt weights", f"{report.fmt_seconds(t_wenc)} ({weight_bytes / 1e6:.1f} MB)"],
            ["server run", f"{report.fmt_seconds(t_run)} ({report.fmt_seconds(t_run / args.batch)} per image)"],
            ["agreement with plaintext", f"{100 * agree:.1f} % of {args.batch}"],
            ["max |encrypted - plaintext| logit", f"{err:.2e}"]]
    report.table([f"MLP {side * side}-{args.hidden}-10 (x^2), encrypted weights", f"batch {args.batch}"], rows)
    if args.json:
        report.write_json(args.json, "weights", res)
    return 0
