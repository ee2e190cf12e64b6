"""The model zoo through the compiler: compile cost, plan and agreement with PyTorch on real images.

    python -m hemlp.bench zoo --data-root ../shared/data [--models resnet20,lenet5] [--json bench/zoo.json]

For each zoo model (hemlp.models.zoo; ``resnet20`` with the trained weights of models/weights/resnet20_cifar10.pt,
the others seeded random initialisations, as their authors' code builds them), in a fresh process each so that its
peak memory is its own: ``hemlp.compile`` with bootstraps (preset N16-boot by default, batch size 1) calibrated on
``--calibration`` training images, from the nn.Module and from its ONNX export; compile seconds (wall) and the
process's peak resident memory; the plan's layout, depth, activation choice, bootstrap points and estimated seconds
per image (one thread); simulate-vs-torch top-1 agreement and accuracy on ``--test`` real test images (CIFAR-10 test,
the exact first 1 017; EMNIST-mnist test, complete). Random-weight models have small logit margins, so their
agreement is a harder test than a trained model's, and their accuracy is chance. Their BatchNorm statistics are the
calibration images' (``--bn-stats data``, the default): a trained model's normalise its activations, the
initialisation's (mean 0, variance 1) let a deep residual stack grow past what a bootstrap refreshes (a random
ResNet-44 reaches ~2 000), which no model a user brings does.

``--json`` is written after every row; ``--append`` keeps the rows already there (one table from several
invocations, e.g. one model at a time); each row names the machine it was measured on. A child that runs out of
``--timeout`` or dies (the OOM killer) still leaves its row, saying so and in which stage (loading, torch or export,
compile, simulate). ``--layout`` and ``--simulate`` choose the layout and how the test images are simulated (the
layout's own program, or the plan's lowered steps); ``--encrypt K`` runs the first K test images encrypted too.
"""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np

from hemlp.apps.bench import report

HELP = "every zoo model compiled from torch and ONNX: compile time and memory, plan, agreement on real images"

ROOT = Path(__file__).resolve().parents[3]
WEIGHTS = {"resnet20": ROOT / "models" / "weights" / "resnet20_cifar10.pt"}
CIFAR_EXACT = "CIFAR-10 test, first 1 017 images (exact)"
EMNIST_TEST = "EMNIST-mnist test (10 000, complete)"


def add_arguments(p) -> None:
    p.add_argument("--data-root", default=str(ROOT.parent / "shared" / "data"), help="the real data sets' root")
    p.add_argument("--models", default=None, help="comma-separated zoo names (default: every model)")
    p.add_argument("--calibration", type=int, default=1000, help="training images to calibrate on")
    p.add_argument("--test", type=int, default=1017, help="test images to simulate")
    p.add_argument("--preset", default="N16-boot")
    p.add_argument("--target", type=float, default=0.99, help="target_agreement")
    p.add_argument("--train-epochs", type=int, default=0,
                   help="train models without shipped weights this many epochs on training images disjoint from the "
                        "calibration and test images (0: seeded random initialisation)")
    p.add_argument("--bn-stats", choices=("data", "init"), default="data",
                   help="BatchNorm statistics of a model without trained weights: 'data' (averaged over the "
                        "calibration images in training mode, as training leaves them) or 'init' (mean 0, variance 1)")
    p.add_argument("--frontends", default="torch,onnx")
    p.add_argument("--layout", default="auto",
                   help="compile's layout: 'auto', 'packed' (P: one image per ciphertext, seconds per image) or "
                        "'batch' (A: its estimate is per batch of up to N/2 images; its own simulate pads every batch "
                        "to N/2 slots, tens of GB for a CIFAR convnet at N16: use --simulate steps)")
    p.add_argument("--simulate", choices=("layout", "steps"), default="layout",
                   help="layout: the compiled layout's own plaintext program (bootstrap errors included; layout (P) "
                        "runs it image group by group, minutes for a CIFAR ResNet on 1 017 images); steps: the plan's "
                        "lowered steps on every image, bootstraps exact (hemlp.runtime.local.simulate, as "
                        "scripts/resnet20_report.py; the same values up to the slot program's separately rounded "
                        "diagonals and the bootstraps' ~2^-22 error)")
    p.add_argument("--timeout", type=int, default=3600, help="seconds per model and frontend")
    p.add_argument("--server-memory", default="auto",
                   help="compile's server_memory: 'auto' (this machine's), bytes, or 'none' (no limit: plans a "
                        "larger server would run are compiled and simulated here, their estimate recorded)")
    p.add_argument("--encrypt", type=int, default=0,
                   help="also run the first K test images encrypted (keys made here, one image at a time, one "
                        "thread): seconds per image, and each decrypted output against the layout's own simulation "
                        "of that image (top-1 and the largest difference)")
    p.add_argument("--json", default=None, help="write the rows here (after every row, so a stopped run keeps them)")
    p.add_argument("--append", action="store_true",
                   help="keep the rows already in --json, replacing those of the same model and frontend: one table "
                        "from several invocations")


def _data(name: str, root: str, n_cal: int, n_test: int, state=None, train: bool = True):
    """(calibration inputs, test inputs, test labels, test set name, training inputs and labels disjoint from both),
    preprocessed as the model expects (``state``: shipped weights with their standardisation, or None). ``train``
    False: the training arrays are empty (not built: 50 000 CIFAR-10 images are 0.6 GB a copy)."""
    from hemlp.models.zoo import ZOO

    e = ZOO[name]
    rng = np.random.default_rng(1)
    if e.dataset == "emnist":
        from hemlp.datasets import load_emnist

        mean, std = 0.1307, 0.3081
        perm = rng.permutation
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if e.num_classes == 47:   # no balanced test set here: held-out balanced training images
                tr = load_emnist(root, split="balanced", train=True)
                idx = perm(len(tr.y))
                held = idx[n_cal:n_cal + n_test]
                cal, x_te, y_te = tr.x[np.sort(idx[:n_cal])], tr.x[held], tr.y[held]
                rest = np.sort(idx[n_cal + n_test:])
                test_name = f"EMNIST-balanced train images held out from calibration and training ({len(y_te)})"
            else:
                tr = load_emnist(root, split="mnist", train=True)
                te = load_emnist(root, split="mnist", train=False)
                idx = perm(len(tr.y))
                cal, x_te, y_te = tr.x[np.sort(idx[:n_cal])], te.x[:n_test], te.y[:n_test]
                rest = np.sort(idx[n_cal:])
                test_name = EMNIST_TEST
        cal, x_te, x_tr, y_tr = (cal - mean) / std, (x_te - mean) / std, (tr.x[rest] - mean) / std, tr.y[rest]
    else:
        from hemlp.datasets import load_cifar10, load_cifar10_jpeg

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tr = load_cifar10_jpeg(root, train=True, cache_dir=os.environ.get("HEMLP_CIFAR_CACHE"))
            te = load_cifar10(root, train=False, verify=False)
        idx = rng.permutation(len(tr.y))
        cal = tr.x[np.sort(idx[:n_cal])]
        rest = np.sort(idx[n_cal:])
        if state is not None:
            mean, std = state["mean"], state["std"]
        else:
            mean = tr.x.mean(axis=(0, 2, 3), keepdims=True)
            std = tr.x.std(axis=(0, 2, 3), keepdims=True)
        x_te, y_te = te.x[:n_test], te.y[:n_test]
        test_name = CIFAR_EXACT
        cal, x_te = (cal - mean) / std, (x_te - mean) / std
        x_tr, y_tr = ((tr.x[rest] - mean) / std, tr.y[rest]) if train else (tr.x[:0], tr.y[:0])
    f32 = lambda a: np.ascontiguousarray(a, dtype=np.float32)  # noqa: E731
    return f32(cal), f32(x_te), np.asarray(y_te), test_name, f32(x_tr), np.asarray(y_tr)


def _model(name: str):
    """The zoo model with its shipped weights and their file's dict where it has some, else its seeded
    initialisation and None."""
    from hemlp.models.zoo import build, load_weights

    path = WEIGHTS.get(name)
    if path is None or not path.is_file():
        return build(name), None
    return load_weights(path)


def bn_statistics(model, x, batch: int = 100) -> int:
    """Set every BatchNorm's running mean and variance to their averages over x (training mode, no gradient,
    a cumulative average), leaving the weights as they are; returns how many BatchNorm layers were set."""
    import torch

    bns = [m for m in model.modules() if isinstance(m, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d,
                                                         torch.nn.BatchNorm3d))]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None                  # None: the running statistics average every batch alike
    if bns:
        model.train()
        with torch.no_grad():
            for i in range(0, len(x), batch):
                model(torch.as_tensor(x[i:i + batch], dtype=torch.float32))
    model.eval()
    return len(bns)


def _onnx_bytes(model, x) -> bytes:
    import torch

    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, torch.tensor(x[:1]), f, dynamo=False)
    return f.getvalue()


def one(name: str, frontend: str, args) -> dict:
    """One model from one frontend, in this process (the parent runs it in a child for its peak memory)."""
    import time

    import torch

    import hemlp
    from hemlp.models.train import predict

    torch.set_num_threads(1)
    hemlp.set_num_threads(1)
    model, state = _model(name)
    trained = state is not None
    x_cal, x_te, y_te, test_name, x_tr, y_tr = _data(name, args.data_root, args.calibration, args.test, state,
                                                     train=not trained and args.train_epochs > 0)
    train_s = None
    if not trained and args.train_epochs > 0:
        from hemlp.models.train import train

        t0 = time.perf_counter()
        train(model.train(), x_tr, y_tr, epochs=args.train_epochs, threads=1, progress=False)
        model.eval()
        train_s, trained = time.perf_counter() - t0, f"{args.train_epochs} epoch(s) on {len(y_tr)} images here"
    bn = "trained"
    if not trained:
        bn = "init (mean 0, variance 1)"
        if getattr(args, "bn_stats", "data") == "data" and bn_statistics(model, x_cal):
            bn = f"data: averaged over the {len(x_cal)} calibration images"
    _stage("export" if frontend == "onnx" else "torch")
    src = model
    if frontend == "onnx":
        import onnx

        src = onnx.load_from_string(_onnx_bytes(model, x_cal))
    logits = predict(model, x_te)
    rss0 = report_rss()
    _stage("compile")
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        budget = getattr(args, "server_memory", "auto")
        budget = None if str(budget).lower() == "none" else budget if budget == "auto" else int(budget)
        cm = hemlp.compile(src, x_cal[:1], calibration=x_cal, batch_size=1, bootstrap=True, preset=args.preset,
                           target_agreement=args.target, allow_insecure=args.preset.startswith("test-"),
                           server_memory=budget, layout=getattr(args, "layout", "auto"))
    compile_s = time.perf_counter() - t0
    peak = report_rss()
    info = cm.plan.info
    fit = info.get("activation_fit") or {}
    boot = info.get("bootstrap") or {}
    _stage(f"simulate (compiled in {compile_s:.0f} s, depth {info.get('depth')}, "
           f"{len(boot.get('placements', []))} bootstrap(s))")
    how = getattr(args, "simulate", "layout")
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if how == "steps":
            from hemlp.runtime.local import simulate_columns

            y = np.asarray(simulate_columns(cm.steps, x_te.reshape(len(x_te), -1).T, cm.weight_bits),
                           dtype=np.float64).T
        else:
            y = np.asarray(cm.simulate(x_te), dtype=np.float64).reshape(len(x_te), -1)
    simulate_s = time.perf_counter() - t0
    simulate_peak = report_rss()
    encrypted = _encrypted(cm, x_te[:getattr(args, "encrypt", 0)])
    return dict(model=name, frontend=frontend, trained=trained, train_seconds=train_s, bn_statistics=bn,
                test_set=test_name,
                test_images=len(x_te),
                calibration_images=len(x_cal), compile_seconds=compile_s, peak_rss_gib=peak,
                rss_before_compile_gib=rss0, peak_rss_with_simulate_gib=simulate_peak, layout=cm.layout,
                preset=info["preset"], depth=info.get("depth"),
                activations=[a["schedule"] or a["degree"] for a in fit.get("activations", [])],
                calibration_agreement=fit.get("agreement"), search_seconds=fit.get("search_seconds"),
                bootstrap_points=len(boot.get("placements", [])), estimated_seconds=boot.get("total_seconds"),
                server_memory_budget=budget, simulate_seconds=simulate_s,
                simulated_with=("the plan's lowered steps (hemlp.runtime.local.simulate), bootstraps exact"
                                if how == "steps" else
                                f"layout {cm.layout}'s own plaintext program (CompiledModel.simulate)"),
                estimated_server_gib=(info.get("resources") or {}).get("server_memory_bytes", 0) / 2 ** 30,
                agreement=float(np.mean(y.argmax(1) == logits.argmax(1))),
                simulated_accuracy=float(np.mean(y.argmax(1) == y_te)),
                plaintext_accuracy=float(np.mean(logits.argmax(1) == y_te)), **encrypted)


def _encrypted(cm, xs) -> dict:
    """The row's encrypted run of the images xs (none: {}): keys made once, then each image encrypted, run on one
    thread and decrypted; compared with the layout's own simulation of it (the oracle of the encrypted run)."""
    import time

    if not len(xs):
        return {}
    _stage(f"encrypted run of {len(xs)} image(s): keys")
    t0 = time.perf_counter()
    sk, ek = cm.keygen()
    keygen_s = time.perf_counter() - t0
    runs = []
    for i, x in enumerate(xs):
        _stage(f"encrypted run: image {i + 1} of {len(xs)}")
        ct = cm.encrypt(x[None], sk)
        t0 = time.perf_counter()
        y = np.asarray(cm.decrypt(cm.run(ct, ek, threads=1), sk), dtype=np.float64).reshape(-1)
        seconds = time.perf_counter() - t0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sim = np.asarray(cm.simulate(x[None]), dtype=np.float64).reshape(-1)
        runs.append(dict(seconds=seconds, top1_equal=bool(y.argmax() == sim.argmax()),
                         max_abs_diff=float(np.max(np.abs(y - sim)))))
    return dict(encrypted_images=len(runs), keygen_seconds=keygen_s,
                encrypted_seconds_median=float(np.median([r["seconds"] for r in runs])),
                encrypted_top1_equal_simulated=sum(r["top1_equal"] for r in runs),
                encrypted_max_abs_diff=max(r["max_abs_diff"] for r in runs), encrypted_runs=runs,
                peak_rss_with_encrypted_gib=report_rss())


def _stage(what: str) -> None:
    """Tell the parent what the child is doing now: a timed-out row says which stage ran out of time."""
    print(f"ZOO-STAGE {what}", flush=True)


def report_rss() -> float:
    """This process's peak resident memory so far, GiB (VmHWM; 0 where /proc cannot be read)."""
    return (report.process_status_bytes("VmHWM") or 0) / 2 ** 30


CHILD = r"""
import json, sys, argparse
from hemlp.apps.bench import zoo
args = argparse.Namespace(**json.loads(sys.argv[3]))
try:
    row = zoo.one(sys.argv[1], sys.argv[2], args)
except Exception as e:            # the table records the failure, typed, and the next model runs
    row = dict(model=sys.argv[1], frontend=sys.argv[2], error=f"{type(e).__name__}: {e}"[:500])
print("ZOO-ROW " + json.dumps(row, default=float))
"""


def main(args) -> int:
    from hemlp.models.zoo import ZOO

    names = args.models.split(",") if args.models else list(ZOO)
    unknown = [n for n in names if n not in ZOO]
    if unknown:
        print(f"unknown zoo model(s) {unknown}; the zoo has {sorted(ZOO)}", file=sys.stderr)
        return 2
    kept = _kept_rows(args) if getattr(args, "append", False) else []
    here = row_machine(report.machine_info())
    rows = []
    child_args = {k: v for k, v in vars(args).items() if k not in ("json", "append")}
    for name in names:
        for frontend in args.frontends.split(","):
            load_before = report.load_average()
            try:
                out = subprocess.run([sys.executable, "-c", CHILD, name, frontend, json.dumps(child_args)],
                                     capture_output=True, text=True, timeout=args.timeout,
                                     env=report.benchmark_env(dict(os.environ)))
                line = next((ln for ln in out.stdout.splitlines() if ln.startswith("ZOO-ROW ")), None)
                row = json.loads(line[8:]) if line else _died(name, frontend, out)
            except subprocess.TimeoutExpired as e:
                row = _timed_out(name, frontend, args.timeout, e.stdout)
            # a row measured beside other work says so (compile seconds are wall seconds on one thread)
            row.update(settings=_settings(args), machine=here,
                       load_average=dict(before=load_before, after=report.load_average()))
            rows.append(row)
            print(json.dumps(row, default=float), flush=True)
            if args.json and args.json != "-":
                _save(args, _merge(kept, rows), quiet=True)
    _print(rows, args.preset)
    if args.json:
        _save(args, _merge(kept, rows))
    return 0 if all("error" not in r for r in rows) else 1


def _settings(args) -> dict:
    """What a row was measured with (rows from several invocations share one file)."""
    return dict(test=args.test, calibration=args.calibration, train_epochs=args.train_epochs, target=args.target,
                timeout_s=args.timeout, server_memory=args.server_memory, layout=getattr(args, "layout", "auto"),
                simulate=getattr(args, "simulate", "layout"), bn_stats=getattr(args, "bn_stats", "data"),
                encrypt=getattr(args, "encrypt", 0))


def _died(name: str, frontend: str, out) -> dict:
    """A row for a child that ended without its row: its exit (a signal: SIGKILL is the kernel's OOM killer when
    nothing else killed it), the stage it was in and its stderr's tail."""
    stage = _stage_of(out.stdout)
    how = f"killed by signal {-out.returncode}" if out.returncode < 0 else f"exit status {out.returncode}"
    if out.returncode == -9:
        how += " (SIGKILL: out of memory, if nothing else killed it)"
    return dict(model=name, frontend=frontend, stage=stage,
                error=f"{how}, in stage: {stage}; stderr: {(out.stderr or '')[-300:]}")


def _stage_of(stdout) -> str:
    """The child's last ZOO-STAGE line ('loading' before the first)."""
    if isinstance(stdout, bytes):
        stdout = stdout.decode(errors="replace")
    stages = [ln[10:] for ln in (stdout or "").splitlines() if ln.startswith("ZOO-STAGE ")]
    return stages[-1] if stages else "loading"


def _timed_out(name: str, frontend: str, timeout: int, stdout) -> dict:
    """A row for a child stopped at ``timeout`` seconds: the stage it was in (its last ZOO-STAGE line)."""
    stage = _stage_of(stdout)
    return dict(model=name, frontend=frontend, timed_out=True, timeout_s=timeout, stage=stage,
                error=f"timed out after {timeout} s, in stage: {stage}")


def _kept_rows(args) -> list:
    """The rows already in --json (none if the file is absent); a file of another preset is refused."""
    if not args.json or args.json == "-" or not Path(args.json).is_file():
        return []
    doc = json.loads(Path(args.json).read_text())
    if doc.get("subcommand") != "zoo" or doc.get("preset") != args.preset:
        raise SystemExit(f"--append: {args.json} is not a zoo table at preset {args.preset}")
    rows = list(doc.get("rows", []))
    for r in rows:      # rows from before rows carried their machine: the file's, of the run that wrote them
        r.setdefault("machine", row_machine(doc.get("machine", {})))
    return rows


def row_machine(machine: dict) -> dict:
    """The machine a row was measured on (the file's own ``machine`` is the last invocation's; --append may join
    rows from several machines): CPU model, SIMD path, cores, date."""
    cpu, simd = machine.get("cpu", {}), machine.get("simd") or {}
    return dict(cpu=cpu.get("model"), simd_path=simd.get("path"), logical_cores=cpu.get("logical_cores"),
                date=machine.get("date"))


def _merge(kept: list, rows: list) -> list:
    """``kept`` with the rows of the same (model, frontend) replaced by ``rows``' (in place), the new ones after."""
    new = {(r["model"], r["frontend"]): r for r in rows}
    out = [new.pop((r["model"], r["frontend"]), r) for r in kept]
    return out + [r for r in rows if (r["model"], r["frontend"]) in new]


def _save(args, rows: list, quiet: bool = False) -> None:
    payload = dict(measured=True, preset=args.preset, threads=1, calibration_images=args.calibration,
                   target_agreement=args.target, rows=rows,
                   note="compile wall seconds and peak RSS (VmHWM, the child process: data and torch included) on "
                        "one thread; estimated seconds are the planner's one-thread estimates per image (layout "
                        "packed) or per batch (layout batch); each row's settings say what it was measured with")
    if quiet:
        report.write_json(args.json, "zoo", payload, machine=report.machine_info())
    else:
        report.save_json(args.json, "zoo", payload, machine=report.machine_info())


def _print(rows, preset: str) -> None:
    body = []
    for r in rows:
        if "error" in r:
            body.append([r["model"], r["frontend"], "error: " + r["error"][:60]] + [""] * 8)
            continue
        body.append([r["model"], r["frontend"], f"{r['compile_seconds']:.0f}", f"{r['peak_rss_gib']:.2f}", r["layout"],
                     str(r["depth"]), str(r["bootstrap_points"]),
                     "" if r["estimated_seconds"] is None else f"{r['estimated_seconds']:.0f}",
                     f"{r.get('estimated_server_gib', 0):.1f}",
                     f"{r['agreement']:.2%} of {r['test_images']}", f"{r['simulated_accuracy']:.2%}"])
    report.table(["model", "frontend", "compile s", "peak GiB", "layout", "depth", "boot points", "est. s/img",
                  "server GiB (est.)", "agreement", "sim. accuracy"], body, title=f"hemlp zoo ({preset}, one thread)")

