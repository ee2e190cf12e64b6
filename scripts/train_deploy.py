#!/usr/bin/env python
"""Train → evaluate → export ONNX → hemlp.compile → simulate → encrypted inference → report.

    python scripts/train_deploy.py --dataset mnist-sample --model fhe4dmm --epochs 8 --samples 16 --out runs/m1
    python scripts/train_deploy.py --dataset emnist --data-root ~/data --split digits --model mlp --out runs/e1
    python scripts/train_deploy.py --dataset cifar10 --data-root ~/data --model cifar-cnn --out runs/c1
    python scripts/train_deploy.py --data-root ../shared/data --table bench/accuracy_real.json
    python scripts/train_deploy.py --data-root ../shared/data --resnet bench/cifar_resnet.json

--table: the real-data accuracy table (scripts/accuracy_table.py): EMNIST-mnist and CIFAR-10, FHE4DMM's network
and hemlp's best leveled model, plaintext / simulated / encrypted accuracy per named test set; writes the JSON,
its markdown table (.md), a plot of accuracy vs activation degree (.png) and, with --readme, the README block.

--resnet: hemlp's CIFAR-10 ResNet (hemlp.models.cifar_resnet, degree-2 trainable polynomial activations) trained
on the 50 000 JPEG training images (scripts/cifar_resnet_run.py): plaintext accuracy on both CIFAR-10 test sets,
training wall / CPU time and the machine's load in the JSON, weights beside it (.pt), and hemlp.compile with
bootstraps + simulate on --sim-samples exact test images.

The output directory must not exist (``--force`` replaces a previous report directory). It
receives report.json, report.md, PNG figures (accuracy plaintext / simulated / encrypted, latency
per stage and per layer, key and ciphertext sizes, training curve), model.onnx, the compiled
model (server artefact) and, unless ``--no-wandb``, a W&B run (offline unless W&B is configured:
``WANDB_MODE`` or ``WANDB_API_KEY`` set). Everything is seeded; training runs on the CPU with 2
threads by default.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script from a source checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DEFAULT_LR = {"fhe4dmm": 1e-2, "mlp": 2e-3, "mlp-poly": 2e-3, "cifar-cnn": 2e-3}


# ----------------------------------------------------------------------------------------------
# helpers
class Stages:
    """Wall-clock time per pipeline stage."""

    def __init__(self, log):
        self.seconds, self.log = {}, log

    def __call__(self, name):
        stages = self

        class _T:
            def __enter__(self):
                stages.log(f"[{name}] ...")
                self.t0 = time.perf_counter()

            def __exit__(self, *exc):
                stages.seconds[name] = time.perf_counter() - self.t0
                if exc[0] is None:
                    stages.log(f"[{name}] done in {stages.seconds[name]:.2f} s")

        return _T()


def nbytes(obj) -> int | None:
    """Serialised size of a hemlp object (or a container of them); None when unknown."""
    if obj is None:
        return None
    if isinstance(obj, (bytes, bytearray)):
        return len(obj)
    if isinstance(obj, (str, Path)) and Path(obj).exists():
        p = Path(obj)
        return p.stat().st_size if p.is_file() else sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
    if hasattr(obj, "nbytes") and not isinstance(obj, np.ndarray) and isinstance(getattr(obj, "nbytes"), int):
        return obj.nbytes
    if hasattr(obj, "to_bytes"):
        try:
            return len(obj.to_bytes())
        except Exception:  # noqa: BLE001 — a size is informative only
            pass
    if isinstance(obj, dict):
        sizes = [nbytes(v) for v in obj.values()]
        return sum(s for s in sizes if s is not None) if any(s is not None for s in sizes) else None
    if isinstance(obj, (list, tuple)):
        sizes = [nbytes(v) for v in obj]
        return sum(s for s in sizes if s is not None) if any(s is not None for s in sizes) else None
    if hasattr(obj, "save"):
        with tempfile.TemporaryDirectory() as tmp:
            p = Path(tmp) / "obj"
            try:
                obj.save(p)
            except Exception:  # noqa: BLE001
                return None
            return nbytes(p)
    return None


def per_layer_seconds(compiled, ct_out) -> list[dict]:
    """Per-layer latency of the last encrypted run (recorded by the runtime on its output)."""
    return [{"layer": str(k), "seconds": float(v)} for k, v in getattr(ct_out, "layer_seconds", {}).items()]


def downsample(d, k: int):
    n, c, h, w = d.x.shape
    if h % k or w % k:
        raise SystemExit(f"error: --downsample {k} does not divide the image size {h}x{w}")
    x = d.x.reshape(n, c, h // k, k, w // k, k).mean(axis=(3, 5), dtype=np.float64).astype(np.float32)
    return type(d)(np.ascontiguousarray(x), d.y, d.classes, d.name, d.synthetic, dict(d.info, downsample=k))


def compile_available():
    """(hemlp.compile or None, reason)."""
    import hemlp

    try:
        fn = getattr(hemlp, "compile")
    except (AttributeError, ImportError) as exc:
        return None, f"hemlp.compile is not available in this checkout ({type(exc).__name__}: {exc})"
    if not callable(fn):
        return None, "hemlp.compile is not callable"
    return fn, ""


def wandb_mode() -> str:
    """Offline unless the user configured W&B (WANDB_MODE, or an API key in the environment)."""
    mode = os.environ.get("WANDB_MODE")
    if mode:
        return mode
    return "online" if os.environ.get("WANDB_API_KEY") else "offline"


def prepare_out(out: Path, force: bool) -> None:
    if out.exists():
        if not force:
            raise SystemExit(f"error: output directory {out} exists; pass --force to replace it")
        if out.is_file() or not (out / "report.json").exists() and any(out.iterdir()):
            raise SystemExit(f"error: {out} exists and is not a previous train_deploy report directory "
                             f"(no report.json); refusing to delete it even with --force")
        shutil.rmtree(out)
    out.mkdir(parents=True)


# ----------------------------------------------------------------------------------------------
# figures and report
def make_figures(rep: dict, out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []

    def save(fig, name):
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        files.append(name)

    acc = rep["accuracy"]
    names = [k for k in ("plaintext", "simulated", "encrypted") if acc.get(k) is not None]
    fig, ax = plt.subplots(figsize=(5, 3.2))
    vals = [acc[k] * 100 for k in names]
    bars = ax.bar(names, vals, color=["#4c72b0", "#55a868", "#c44e52"][: len(names)])
    for b, k in zip(bars, names):
        ax.text(b.get_x() + b.get_width() / 2, b.get_height(), f"{acc[k] * 100:.1f}%\nn={acc['n_' + k]}",
                ha="center", va="bottom", fontsize=8)
    ax.set_ylim(0, 115)
    ax.set_ylabel("accuracy (%)")
    ax.set_title(f"{rep['config']['model']} on {rep['data']['name']}" + (" (SYNTHETIC)" if rep["data"]["synthetic"] else ""))
    save(fig, "accuracy.png")

    st = rep["latency"]["stages"]
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.barh(list(st), list(st.values()), color="#4c72b0")
    ax.set_xscale("log")
    ax.set_xlabel("seconds (log)")
    ax.set_title("latency per stage")
    save(fig, "latency_stages.png")

    layers = rep["latency"]["layers"]
    if layers:
        fig, ax = plt.subplots(figsize=(7.5, 0.4 * len(layers) + 1.2))
        ax.barh([r["layer"] for r in layers][::-1], [r["seconds"] for r in layers][::-1], color="#dd8452")
        ax.set_xlabel("seconds")
        ax.set_title("encrypted run: latency per layer")
        save(fig, "latency_layers.png")

    sz = {k: v for k, v in rep["sizes"].items() if v}
    if sz:
        fig, ax = plt.subplots(figsize=(6.5, 3.2))
        ax.barh(list(sz), list(sz.values()), color="#8172b2")
        ax.set_xscale("log")
        for i, v in enumerate(sz.values()):
            ax.text(v, i, " " + fmt_bytes(v), va="center", fontsize=8)
        ax.set_xlim(right=max(sz.values()) * 30)
        ax.set_xlabel("bytes (log)")
        ax.set_title("key, ciphertext and model sizes")
        save(fig, "sizes.png")

    hist = rep["training"]["history"]
    if hist:
        fig, ax = plt.subplots(figsize=(5, 3.2))
        ep = [h["epoch"] for h in hist]
        ax.plot(ep, [h["loss"] for h in hist], "o-", label="train loss")
        ax2 = ax.twinx()
        ax2.plot(ep, [h["train_acc"] * 100 for h in hist], "s--", color="#55a868", label="train acc")
        if "val_acc" in hist[0]:
            ax2.plot(ep, [h["val_acc"] * 100 for h in hist], "^--", color="#c44e52", label="held-out acc")
        ax.set_xlabel("epoch")
        ax.set_ylabel("loss")
        ax2.set_ylabel("accuracy (%)")
        ax2.legend(loc="center right", fontsize=8)
        save(fig, "training.png")
    return files


def fmt_bytes(n):
    if n is None:
        return "—"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024


def write_markdown(rep: dict, out: Path) -> None:
    c, d, acc = rep["config"], rep["data"], rep["accuracy"]
    L = [f"# hemlp train → deploy: {c['model']} on {d['name']}", ""]
    if d["synthetic"]:
        L += ["**Data: SYNTHETIC files in the torchvision format (smoke test), not the real data set.**", ""]
    L += [f"- command: `{rep['command']}`", f"- seed {c['seed']}, {c['epochs']} epochs, lr {c['lr']}, "
          f"{rep['training']['threads']} CPU threads; train {d['n_train']} / test {d['n_test']} samples",
          f"- model: multiplicative depth {rep['model']['mult_depth']}, {rep['model']['parameters']} parameters",
          f"- compile: {rep['compile']['status']}" + (f" — {rep['compile']['reason']}" if rep['compile'].get('reason') else ""),
          "", "## Accuracy", "", "| path | accuracy | samples |", "|---|---|---|"]
    for k in ("plaintext", "simulated", "encrypted"):
        v = acc.get(k)
        L.append(f"| {k} | {'—' if v is None else f'{v * 100:.2f} %'} | {acc.get('n_' + k) or '—'} |")
    enc = rep.get("encrypted") or {}
    if enc:
        L += ["", f"Encrypted vs plaintext: argmax agreement {enc.get('agreement_plaintext')}, "
              f"max |logit error| {enc.get('max_abs_err_plaintext')}; vs simulation: "
              f"max |logit error| {enc.get('max_abs_err_simulated')}."]
    L += ["", "## Latency", "", "| stage | seconds |", "|---|---|"]
    L += [f"| {k} | {v:.3f} |" for k, v in rep["latency"]["stages"].items()]
    if rep["latency"]["layers"]:
        L += ["", "| layer (encrypted run) | seconds |", "|---|---|"]
        L += [f"| {r['layer']} | {r['seconds']:.3f} |" for r in rep["latency"]["layers"]]
    L += ["", "## Sizes", "", "| object | size |", "|---|---|"]
    L += [f"| {k} | {fmt_bytes(v)} |" for k, v in rep["sizes"].items()]
    if rep["compile"].get("plan"):
        L += ["", "## Plan", "", "```", rep["compile"]["plan"], "```"]
    if rep["errors"]:
        L += ["", "## Errors", ""] + [f"- {e}" for e in rep["errors"]]
    L += ["", "## Figures", ""] + [f"![{f}]({f})" for f in rep["figures"]]
    (out / "report.md").write_text("\n".join(L) + "\n")


# ----------------------------------------------------------------------------------------------
def run(args) -> dict:
    import torch

    from hemlp.datasets import load
    from hemlp.models import build
    from hemlp.models.train import predict, shift_augment, train

    out = Path(args.out)
    if out.exists() and not args.force:  # fail before spending time on anything
        raise SystemExit(f"error: output directory {out} exists; pass --force to replace it")
    log = (lambda *a: None) if args.quiet else (lambda *a: print(*a, flush=True))
    stage = Stages(log)
    # 1. data (before the output directory is created: a missing data set leaves nothing behind)
    with stage("data"):
        kw = {"split": args.split} if args.dataset == "emnist" else {}
        if args.dataset == "cifar10" and args.cifar_unverified:
            kw["verify"] = False
        tr = load(args.dataset, args.data_root, train=True, **kw).subset(args.train_limit)
        te = load(args.dataset, args.data_root, train=False, **kw).subset(args.test_limit)
        if args.downsample > 1:  # average-pool the images: fewer input ciphertexts (layout A: one per pixel)
            tr, te = downsample(tr, args.downsample), downsample(te, args.downsample)
    rep_data = {"name": tr.name, "synthetic": tr.synthetic, "n_train": len(tr), "n_test": len(te),
                "classes": tr.num_classes, "input_shape": list(tr.x.shape[1:])}
    if tr.synthetic:
        log("NOTE: synthetic data (torchvision-format test files), accuracy is a smoke check only")

    prepare_out(out, args.force)
    lr = args.lr if args.lr is not None else DEFAULT_LR.get(args.model, 2e-3)
    rep = {"command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:]) if args.argv is None else
           "train_deploy.py " + " ".join(args.argv),
           "config": {k: v for k, v in vars(args).items() if k not in ("argv",)} | {"lr": lr},
           "environment": {"python": platform.python_version(), "torch": torch.__version__,
                           "machine": platform.machine(), "cpus": os.cpu_count()},
           "data": rep_data, "errors": [], "figures": []}

    # W&B (offline by default)
    wb = None
    if not args.no_wandb:
        try:
            import wandb

            os.environ.setdefault("WANDB_SILENT", "true")
            mode = wandb_mode()
            wb = wandb.init(project=args.wandb_project, dir=str(out), mode=mode, config=rep["config"],
                            name=out.name, reinit=True)
            rep["wandb"] = {"mode": mode, "dir": str(out / "wandb"), "run_id": wb.id}
            log(f"W&B run {wb.id} ({mode}; sync later with `wandb sync {out / 'wandb'}`)" if mode == "offline"
                else f"W&B run {wb.id} ({mode})")
        except Exception as exc:  # noqa: BLE001 — reporting must not die with the logger
            rep.setdefault("warnings", []).append(f"wandb: {type(exc).__name__}: {exc}")
            print(f"warning: W&B logging disabled: {type(exc).__name__}: {exc}", file=sys.stderr)
            wb = None

    def wlog(d):
        if wb is not None:
            wb.log(d)

    # 2. train (seeded) and evaluate in plaintext
    model = build(args.model, tuple(tr.x.shape[1:]), max(tr.num_classes, int(tr.y.max()) + 1), seed=args.seed,
                  width=args.width)
    x_train, y_train = shift_augment(tr.x, tr.y) if args.augment else (tr.x, tr.y)
    with stage("train"):
        hist = train(model, x_train, y_train, epochs=args.epochs, batch_size=args.batch_size or 64, lr=lr, seed=args.seed,
                     threads=args.threads, x_val=te.x, y_val=te.y, progress=not args.quiet,
                     callback=lambda r: wlog({f"train/{k}": v for k, v in r.items()}))
    with stage("evaluate"):
        logits_plain = predict(model, te.x)
        acc_plain = float(np.mean(logits_plain.argmax(1) == te.y))
    log(f"plaintext accuracy {acc_plain * 100:.2f} % on {len(te)} held-out samples")
    rep["training"] = {"history": hist, "threads": args.threads}
    rep["model"] = {"name": args.model, "mult_depth": model.mult_depth(),
                    "parameters": int(sum(p.numel() for p in model.parameters())), "repr": repr(model)}
    rep["accuracy"] = {"plaintext": acc_plain, "n_plaintext": len(te), "simulated": None, "n_simulated": None,
                       "encrypted": None, "n_encrypted": None}
    torch.save(model.state_dict(), out / "model.pt")

    # 3. ONNX
    example = torch.as_tensor(te.x[:1])
    onnx_path = out / "model.onnx"
    with stage("export_onnx"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model, (example,), str(onnx_path), dynamo=False, input_names=["x"],
                              output_names=["logits"], dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}},
                              opset_version=17)
        import onnx

        onnx.checker.check_model(onnx.load(str(onnx_path)))
    rep["onnx"] = {"path": "model.onnx", "ops": sorted({n.op_type for n in onnx.load(str(onnx_path)).graph.node})}

    # 4-7. compile, simulate, encrypted inference
    sizes = {"model.onnx": onnx_path.stat().st_size}
    rep["compile"] = {"status": "skipped"}
    compile_fn, reason = compile_available()
    if args.no_compile:
        compile_fn, reason = None, "--no-compile given"
    if compile_fn is None:
        rep["compile"]["reason"] = reason
        log(f"compile skipped: {reason}")
    else:
        try:
            _deploy(args, rep, stage, log, compile_fn, model, onnx_path, te, logits_plain, sizes, out,
                    tr.x[np.random.default_rng(args.seed).permutation(len(tr.x))[:1000]])
        except Exception as exc:  # noqa: BLE001 — the report records what failed and where
            rep["compile"]["status"] = rep["compile"].get("status", "skipped")
            if rep["compile"]["status"] == "skipped":
                rep["compile"]["status"] = "failed"
            rep["errors"].append(f"{type(exc).__name__}: {exc}")
            (out / "error.txt").write_text(traceback.format_exc())
            print(f"error: deploy failed at stage {rep['compile']['status']!r}: {type(exc).__name__}: {exc} "
                  f"(traceback in {out / 'error.txt'})", file=sys.stderr)

    rep["sizes"] = sizes
    rep["latency"] = {"stages": dict(stage.seconds), "layers": rep.pop("_layers", [])}
    rep["figures"] = make_figures(rep, out)
    (out / "report.json").write_text(json.dumps(rep, indent=1, default=str))
    write_markdown(rep, out)
    if wb is not None:
        import wandb

        wb.summary.update({"acc/" + k: v for k, v in rep["accuracy"].items() if v is not None})
        wb.summary.update({"latency/" + k: v for k, v in rep["latency"]["stages"].items()})
        wb.summary.update({"bytes/" + k: v for k, v in sizes.items() if v})
        wb.log({f"fig/{Path(f).stem}": wandb.Image(str(out / f)) for f in rep["figures"]})
        if rep["latency"]["layers"]:
            wb.log({"latency/layers": wandb.Table(columns=["layer", "seconds"], data=[
                [r["layer"], r["seconds"]] for r in rep["latency"]["layers"]])})
        art = wandb.Artifact(f"report-{wb.id}", type="report")
        for f in ["report.json", "report.md", "model.onnx"] + rep["figures"]:
            art.add_file(str(out / f))
        wb.log_artifact(art)
        wb.finish()
    log(f"report: {out / 'report.md'}")
    return rep


def _deploy(args, rep, stage, log, compile_fn, model, onnx_path, te, logits_plain, sizes, out, calib):
    n = min(args.samples, len(te))
    x_enc, y_enc = te.x[:n], te.y[:n]
    options = {}
    if args.preset:
        options["preset"] = args.preset
    src = str(onnx_path) if args.compile_from == "onnx" else model
    with stage("compile"):
        # 1 000 representative training inputs calibrate the activation ranges and degrees
        compiled = compile_fn(src, calib[:1], calibration=calib, batch_size=max(1, n), allow_insecure=args.insecure,
                              **options)
    rep["compile"] = {"status": "ok", "from": args.compile_from, "batch_size": max(1, n), "options": options,
                      "plan": str(compiled.plan)}
    log(str(compiled.plan))
    compiled.save(out / "compiled")
    sizes["compiled model"] = nbytes(out / "compiled")

    # simulation: the same plan in plaintext (fast) on the whole evaluation set
    m_sim = len(te) if args.sim_samples is None else min(args.sim_samples, len(te))
    with stage("simulate"):  # the plan's batch size only limits encryption; simulation takes any batch
        logits_sim = np.concatenate([np.asarray(compiled.simulate(te.x[i : i + 1000]), dtype=np.float64)
                                     .reshape(len(te.x[i : i + 1000]), -1) for i in range(0, m_sim, 1000)])[:m_sim]
    rep["accuracy"]["simulated"] = float(np.mean(logits_sim.argmax(1) == te.y[:m_sim]))
    rep["accuracy"]["n_simulated"] = m_sim
    log(f"simulated accuracy {rep['accuracy']['simulated'] * 100:.2f} % on {m_sim} samples")
    if args.samples <= 0:
        return

    with stage("keygen"):
        sk, eval_keys = compiled.keygen()
    with stage("encrypt"):
        ct = compiled.encrypt(x_enc, sk)
    with stage("run_encrypted"):
        ct_out = compiled.run(ct, eval_keys)
    with stage("decrypt"):
        logits_enc = np.asarray(compiled.decrypt(ct_out, sk), dtype=np.float64).reshape(n, -1)
    sizes.update({"secret key": nbytes(sk), "evaluation keys": nbytes(eval_keys), "input ciphertext": nbytes(ct),
                  "output ciphertext": nbytes(ct_out)})
    rep["_layers"] = per_layer_seconds(compiled, ct_out)
    pred = logits_enc.argmax(1)
    ncls = logits_plain.shape[1]
    rep["accuracy"]["encrypted"] = float(np.mean(pred == y_enc))
    rep["accuracy"]["n_encrypted"] = n
    rep["encrypted"] = {
        "agreement_plaintext": float(np.mean(pred == logits_plain[:n].argmax(1))),
        "max_abs_err_plaintext": float(np.max(np.abs(logits_enc[:, :ncls] - logits_plain[:n]))),
        "max_abs_err_simulated": float(np.max(np.abs(logits_enc - logits_sim[:n]))) if m_sim >= n else None,
        "seconds_per_sample": (stage.seconds["encrypt"] + stage.seconds["run_encrypted"]
                               + stage.seconds["decrypt"]) / n,
    }
    log(f"encrypted accuracy {rep['accuracy']['encrypted'] * 100:.2f} % on {n} samples; "
        f"argmax agreement with plaintext {rep['encrypted']['agreement_plaintext'] * 100:.1f} %")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n", 2)[2])
    ap.add_argument("--dataset", choices=("mnist-sample", "emnist", "cifar10"), default="mnist-sample")
    ap.add_argument("--data-root", help="folder holding EMNIST/raw/ or cifar-10-batches-py/ (nothing is downloaded)")
    ap.add_argument("--split", default="digits", help="EMNIST split (byclass, bymerge, balanced, letters, digits, mnist)")
    ap.add_argument("--model", choices=("fhe4dmm", "mlp", "mlp-poly", "cifar-cnn"), default="fhe4dmm")
    ap.add_argument("--width", type=int, default=None, help="cifar-cnn: channels of the first conv (default 16)")
    ap.add_argument("--epochs", type=int, default=None, help="default 8 (--resnet: 12)")
    ap.add_argument("--augment", action="store_true",
                    help="also train on one-pixel shifted copies of the images (small data sets: +1 pp on MNIST)")
    ap.add_argument("--batch-size", type=int, default=None, help="default 64 (--resnet: 512)")
    ap.add_argument("--lr", type=float, default=None, help="default: 1e-2 for fhe4dmm, 2e-3 otherwise")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--downsample", type=int, default=1,
                    help="average-pool images by this factor (e.g. 2: 28x28 -> 14x14; not for fhe4dmm)")
    ap.add_argument("--train-limit", type=int, default=None, help="use the first N training samples")
    ap.add_argument("--test-limit", type=int, default=None, help="evaluate on the first N test samples")
    ap.add_argument("--samples", type=int, default=16,
                    help="test samples run encrypted (= the compiled batch size; with one feature per ciphertext, "
                         "any batch up to the slot count costs the same, e.g. --samples 1000)")
    ap.add_argument("--sim-samples", type=int, default=None, help="samples for simulation (default: whole test set)")
    ap.add_argument("--compile-from", choices=("onnx", "torch"), default="onnx")
    ap.add_argument("--preset", help="CKKS parameter preset for hemlp.compile (default: the compiler's choice)")
    ap.add_argument("--insecure", action="store_true", help="allow INSECURE test presets (tests only)")
    ap.add_argument("--no-compile", action="store_true", help="stop after the ONNX export")
    ap.add_argument("--out", help="output directory (must not exist unless --force; not with --table)")
    ap.add_argument("--force", action="store_true", help="replace a previous report directory")
    ap.add_argument("--no-wandb", action="store_true", help="do not log to W&B")
    ap.add_argument("--wandb-project", default="hemlp")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--cifar-unverified", action="store_true",
                    help="load CIFAR-10 batches without their md5 check (e.g. exact but partial batches); the report "
                         "names the set as partial")
    ap.add_argument("--table", nargs="?", const="bench/accuracy_real.json", default=None, metavar="JSON",
                    help="produce the real-data accuracy table (needs --data-root; default bench/accuracy_real.json)")
    ap.add_argument("--table-rows", default=None,
                    help="comma-separated subset of the table rows (fhe4dmm-emnist, hemlp-emnist-cnn, fhe4dmm-cifar10, "
                         "hemlp-cifar-wide, sweep)")
    ap.add_argument("--cache-dir", default=None, help="--table: where decoded JPEG images are cached (.npz)")
    ap.add_argument("--max-gib", type=float, default=None,
                    help="--table: skip encrypted runs whose layout-(A) ciphertexts would exceed this many GiB")
    ap.add_argument("--readme", action="store_true", help="--table: also rewrite the README's accuracy block")
    ap.add_argument("--table-merge", default=None, metavar="A.json,B.json",
                    help="--table: merge partial table JSONs (rows run as separate processes) instead of running")
    ap.add_argument("--table-quick", action="store_true",
                    help="--table: smoke run (3 000 training images, 1 epoch, 1 200 test images per set)")
    ap.add_argument("--resnet", default=None, metavar="JSON",
                    help="train the CIFAR-10 ResNet on the JPEG training images, report to JSON (needs --data-root; "
                         "also reads --epochs/--lr if given, --threads, --seed, --train-limit, --cache-dir, "
                         "--sim-samples, --preset)")
    ap.add_argument("--resnet-compile-only", action="store_true",
                    help="--resnet: no training; add the compile check of the JSON's saved weights (.pt) to it")
    ap.add_argument("--widths", default=None, help="--resnet: channel widths prep,layer1,layer2,layer3 "
                                                   "(default 16,32,64,128)")
    ap.add_argument("--act", default="poly", choices=("poly", "relu", "gelu"),
                    help="--resnet: activation (poly: trainable degree 2, depth 1)")
    ap.add_argument("--big-lock", default=None, metavar="FILE",
                    help="--table: hold this flock file around encrypted runs above 3.5 GiB (shared machines)")
    return ap


def table_main(args) -> int:
    import accuracy_table as at

    log = (lambda *a: None) if args.quiet else (lambda *a: print(*a, flush=True))
    if args.max_gib is None:
        args.max_gib = at.DEFAULT_MAX_GIB
    out = Path(args.table)
    rep = at.merge(args.table_merge.split(",")) if args.table_merge else at.run_table(args, log)
    at.save(rep, out)
    md = out.with_suffix(".md")
    md.write_text("# Accuracy on the real EMNIST and CIFAR-10 files\n\n" + at.render(rep))
    figs = []
    if rep.get("sweep"):
        at.plot(rep, out.with_suffix(".png"))
        figs.append(str(out.with_suffix(".png")))
    if args.readme:
        at.update_readme(Path(__file__).resolve().parents[1] / "README.md", rep)
    log(at.render(rep))
    log(f"wrote {out}, {md}" + "".join(", " + f for f in figs))
    return 0


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    args.argv = argv
    if args.resnet is not None:
        if not args.data_root:
            parser().error("--resnet needs --data-root (e.g. ../shared/data)")
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import cifar_resnet_run

        args.command = " ".join(["train_deploy.py"] + (sys.argv[1:] if argv is None else list(argv)))
        log = (lambda *a: None) if args.quiet else (lambda *a: print(*a, flush=True))
        from hemlp.errors import HemlpError

        try:
            return cifar_resnet_run.main(args, log)
        except HemlpError as exc:   # typed data / compile errors: their message names the fix
            print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 2
    if args.epochs is None:
        args.epochs = 8
    if args.table is not None:
        if not args.data_root and not args.table_merge:
            parser().error("--table needs --data-root (e.g. ../shared/data)")
    elif not args.out:
        parser().error("--out is required")
    if args.dataset != "mnist-sample" and not args.data_root:
        parser().error(f"--dataset {args.dataset} needs --data-root (nothing is downloaded at run time)")
    from hemlp.errors import HemlpError

    try:
        if args.table is not None:
            sys.path.insert(0, str(Path(__file__).resolve().parent))
            return table_main(args)
        rep = run(args)
    except HemlpError as exc:   # typed data / compile errors: their message names the fix
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    if rep["errors"]:
        print("error: failed stage(s): " + "; ".join(rep["errors"]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
