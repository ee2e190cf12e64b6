"""The standard ReLU ResNet-20 (scripts/train_resnet20.py's weights) through hemlp: compile with bootstraps on 1 000
calibration training images, simulate on the exact CIFAR-10 test images, and (--encrypted N) run N of them encrypted.

    nice -n 5 python scripts/resnet20_report.py --data-root ../shared/data \
        --weights models/weights/resnet20_cifar10.pt --json bench/resnet20_cifar10.json [--encrypted 20]

The JSON records compile seconds and peak RSS, the plan (layout, depth, activation degrees, bootstrap points and
calls, estimated seconds per image), plaintext accuracy, simulated accuracy and top-1 agreement with PyTorch on every
exact test image, and for the encrypted images: seconds each, and whether encrypted = simulated = plaintext top-1.

``--estimate`` compiles the same model again (under the active cost profile: ``HEMLP_COST_PROFILE`` or this
machine's ``hemlp calibrate``) and puts the plan's estimate by kind (bootstraps, the convolutions' diagonal products,
the rest) beside the encrypted images' measured seconds by kind, in the --json file's ``estimates``.
"""
from __future__ import annotations

import argparse
import gc
import hashlib
import resource
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from cifar_resnet_run import CIFAR_EXACT, calibration_rows, load  # noqa: E402


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20


def status_gib(field: str) -> float | None:
    """VmRSS / VmHWM of this process from /proc/self/status (None where it cannot be read)."""
    from hemlp.apps.bench.report import process_status_bytes

    b = process_status_bytes(field)
    return None if b is None else b / 2 ** 30


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux: 5 > /proc/self/clear_refs), so that the next peak is the compile's alone,
    not the data loading's before it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-root", required=True)
    ap.add_argument("--weights", default="models/weights/resnet20_cifar10.pt")
    ap.add_argument("--json", default=None)
    ap.add_argument("--calibration", type=int, default=1000, help="training images to calibrate on")
    ap.add_argument("--preset", default="N16-boot")
    ap.add_argument("--target", type=float, default=0.99, help="target_agreement")
    ap.add_argument("--agreement-safety", type=float, default=1.0,
                    help="compile's agreement_safety (4: the target holds on held-out images, at ~1.8x the run time)")
    ap.add_argument("--agreement-holdout", type=float, default=0.0,
                    help="compile's agreement_holdout (0.2: 200 of 1 000 calibration images check the search's choice)")
    ap.add_argument("--test", type=int, default=None, help="exact test images to simulate (default all)")
    ap.add_argument("--unseen", type=int, default=0,
                    help="also simulate this many training images outside the calibration rows (agreement only: "
                         "more samples the search never saw than the 1 017 exact test images)")
    ap.add_argument("--encrypted", type=int, default=0, help="exact test images to run encrypted, one at a time")
    ap.add_argument("--threads", type=int, default=1, help="threads of torch, the native core and numpy's BLAS")
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--server-memory", type=float, default=None,
                    help="compile's server_memory in GiB (default: compile's 'auto'); the plan sizes its diagonal cache "
                         "to it")
    ap.add_argument("--resume", action="store_true", help="continue the --json file's run (same compiled model)")
    ap.add_argument("--estimate", action="store_true",
                    help="compile only: record the plan's estimate by kind beside the --json run's measurement")
    args = ap.parse_args(argv)
    if args.estimate and args.resume:
        raise SystemExit("--estimate and --resume: one at a time")
    import json

    old = None
    if args.resume or args.estimate:
        if not args.json or not Path(args.json).exists():
            raise SystemExit("--resume and --estimate need an existing --json file (a run's report)")
        old = json.loads(Path(args.json).read_text())
        if args.server_memory is None and old.get("server_memory_gib") is not None:
            # the run's memory budget: it sized the diagonal cache, and with it what each run encodes again
            args.server_memory = float(old["server_memory_gib"])

    import torch

    import hemlp
    from hemlp.apps.bench.report import machine_info, save_json
    from hemlp.models.train import predict
    from hemlp.models.zoo import load_weights
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(args.threads)
    hemlp.set_num_threads(args.threads)
    # numpy's own BLAS too (the compile's plaintext pass multiplies through it): its idle threads otherwise spin
    # against the one working on a loaded machine
    threadpool_limits(args.threads)
    model, state = load_weights(args.weights)
    mean, std = state["mean"], state["std"]
    tr, tests = load(args.data_root, args.cache_dir, None)
    d = tests[CIFAR_EXACT]
    n = len(d.y) if args.test is None else min(args.test, len(d.y))
    x = np.ascontiguousarray((d.x[:n] - mean) / std, dtype=np.float32)
    rows = calibration_rows(len(tr.y), args.calibration)
    x_cal = np.ascontiguousarray((tr.x[rows] - mean) / std, dtype=np.float32)
    # the rows after the calibration rows in the same seeded permutation: disjoint from them
    unseen = np.sort(np.random.default_rng(1).permutation(len(tr.y))[len(rows):len(rows) + args.unseen])
    x_unseen = np.ascontiguousarray((tr.x[unseen] - mean) / std, dtype=np.float32)
    del tr, tests                  # the 50 000 training images: not needed past the calibration rows (memory for keys)
    # torchvision's loader leaves its frames in a reference cycle (an import inside it) that holds the images: only
    # the cycle collector frees them, so collect now, or the RSS at compile start counts ~0.7 GiB the compile frees
    gc.collect()
    logits = predict(model, x)
    # the file's digest: the same path may hold other weights later
    weights_sha256 = hashlib.sha256(Path(args.weights).read_bytes()).hexdigest()
    rep = dict(model="resnet20 (akamaster option A, ReLU)", weights=args.weights, weights_sha256=weights_sha256,
               test_set=CIFAR_EXACT, n=n,
               calibration_images=len(rows), preset=args.preset, target_agreement=args.target, threads=args.threads,
               agreement_safety=args.agreement_safety, agreement_holdout=args.agreement_holdout,
               server_memory_gib=args.server_memory,
               plaintext_accuracy=float(np.mean(logits.argmax(1) == d.y[:n])))
    print(f"plaintext accuracy on {n} exact images: {rep['plaintext_accuracy']:.2%}", flush=True)
    t0, c0 = time.perf_counter(), time.process_time()
    rss_before = peak_rss_gib()
    # the compile's own peak: the process's high-water mark from here (what it holds at the start counted)
    hwm_reset = reset_peak_rss()
    rss_at_start = status_gib("VmRSS")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # the keys are made in this process (encrypt_images): nothing imported, the run's peak is what counts
        cm = hemlp.compile(model, x[:1], calibration=x_cal, batch_size=1, bootstrap=True, preset=args.preset,
                           target_agreement=args.target, allow_insecure=args.preset.startswith("test-"),
                           import_keys=False, agreement_safety=args.agreement_safety,
                           agreement_holdout=args.agreement_holdout,
                           server_memory="auto" if args.server_memory is None else int(args.server_memory * 2 ** 30))
    rep["compile_seconds"] = time.perf_counter() - t0
    rep["compile_cpu_seconds"] = time.process_time() - c0      # what a loaded machine's wall time hides
    rep["compile_peak_rss_gib"] = peak_rss_gib()
    rep["peak_rss_before_compile_gib"] = rss_before     # the data sets and torch, loaded before compile
    if hwm_reset:
        rep["compile_process_peak_gib"] = status_gib("VmHWM")    # from the compile's start: what compiling needs
        rep["rss_at_compile_start_gib"] = rss_at_start            # torch, the model, the calibration rows
    info = cm.plan.info
    boot = info.get("bootstrap") or {}
    fit = info.get("activation_fit") or {}
    rep["plan"] = dict(layout=cm.layout, depth=info.get("depth"), degrees=[a["schedule"] or a["degree"] for a in fit.get("activations", [])],
                       calibration_agreement=fit.get("agreement"),
                       # what the search certified: top-1 kept under `safety` times the plan's error, its 90 % bound
                       calibration_agreement_safety=fit.get("agreement_safety"), safety=fit.get("safety"),
                       calibration_agreement_bound=fit.get("agreement_bound"),
                       # agreement_holdout: the calibration images the search did not select on, and their check
                       search_samples=fit.get("search_samples"), held_out=fit.get("held_out"),
                       bootstrap_points=len(boot.get("placements", [])),
                       bootstrap_calls=sum(p.get("bootstraps", 0) for p in boot.get("placements", [])),
                       estimated_seconds=boot.get("total_seconds"), resources=info.get("resources"),
                       # by the kinds encrypt_images measures: the layout's per-step estimate (layout (P)'s)
                       estimated_step_seconds=step_summary(cm.layout_impl.step_estimates())
                       if hasattr(cm.layout_impl, "step_estimates") else None,
                       search_seconds=fit.get("search_seconds"), text=str(cm.plan))
    print(cm.plan, flush=True)
    print(f"compile: {rep['compile_seconds']:.1f} s, peak RSS {rep['compile_peak_rss_gib']:.2f} GiB", flush=True)

    machine = machine_info()              # at the start: the code that runs (later commits must not relabel it)
    if args.estimate:
        return record_estimate(args.json, old, cm, machine)

    def save(complete: bool) -> None:     # after every stage: a long run interrupted keeps what it measured
        if args.json:
            save_json(args.json, "resnet20-report", dict(rep, complete=complete), machine=machine)

    rep["measured"] = True
    rep["model_id"] = cm.model_id
    if old is not None:
        if old.get("model_id") != cm.model_id or old.get("n") != n:
            raise SystemExit(f"--resume: {args.json} is a run of compiled model {old.get('model_id')} on "
                             f"{old.get('n')} images, this is {cm.model_id} on {n}: rerun without --resume")
        keep = ("compile_seconds", "compile_peak_rss_gib", "peak_rss_before_compile_gib", "compile_process_peak_gib",
                "rss_at_compile_start_gib", "compile_cpu_seconds", "plan", "simulate_seconds",
                "simulated_with", "simulated_accuracy", "top1_agreement", "encrypted")
        rep.update({k: old[k] for k in keep if k in old})
        rep["resumed"] = old.get("resumed", 0) + 1
        return encrypt_images(args, cm, x, d, logits, rep, save, set(r["index"] for r in rep.get("encrypted", [])))
    save(False)
    t0 = time.perf_counter()
    # the plan's lowered steps on every image, bootstraps exact (their layout-(A) range model does not apply to a
    # packed plan): the same values as the layout's slot program up to its separately rounded diagonals (~1e-6
    # relative) and the bootstraps' ~2^-22 error, at a fraction of the time; the layout's own simulate (bootstrap
    # errors included) runs on the encrypted images
    y_sim = simulate_steps_rows(cm, x)
    rep["simulate_seconds"] = time.perf_counter() - t0
    rep["simulated_with"] = "the plan's lowered steps (hemlp.runtime.local.simulate), bootstraps exact"
    rep["simulated_accuracy"] = float(np.mean(y_sim.argmax(1) == d.y[:n]))
    rep["top1_agreement"] = float(np.mean(y_sim.argmax(1) == logits.argmax(1)))
    print(f"simulated: accuracy {rep['simulated_accuracy']:.2%}, agreement with torch {rep['top1_agreement']:.2%}",
          flush=True)
    save(False)
    if len(x_unseen):
        y_un = simulate_steps_rows(cm, x_unseen)
        flips = int(np.sum(y_un.argmax(1) != predict(model, x_unseen).argmax(1)))
        rep["unseen_training_images"] = dict(n=len(x_unseen), flips=flips, top1_agreement=1.0 - flips / len(x_unseen),
                                             rows="calibration_rows' seeded permutation after the calibration rows")
        print(f"unseen training images: {flips} flips of {len(x_unseen)}", flush=True)
        save(False)
    return encrypt_images(args, cm, x, d, logits, rep, save, set())


def simulate_steps_rows(cm, x):
    """The plan's lowered steps on images x (n, 3, 32, 32), bootstraps exact: (n, 10) logits."""
    from hemlp.runtime.local import simulate_columns

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.asarray(simulate_columns(cm.steps, x.reshape(len(x), -1).T, cm.weight_bits), dtype=np.float64).T


def step_summary(layer_seconds: dict) -> dict:
    """An encrypted run's step seconds by kind: bootstraps (#boot), the convolutions' diagonal products (matvec:
    plaintext products, rotations and the encoding of the diagonals the cache does not keep), the rest
    (activations' polynomials, adds)."""
    out = {"bootstrap": 0.0, "matvec": 0.0, "other": 0.0}
    for k, v in layer_seconds.items():
        kind = "bootstrap" if "#boot" in k else "matvec" if ("conv" in k or "linear" in k or "slice" in k) else "other"
        out[kind] += float(v)
    return out


def record_estimate(path, doc: dict, cm, machine: dict) -> int:
    """The plan's estimate by kind (the layout's per-step estimate, the names the run times) beside the median
    measured seconds by kind of the report's encrypted images, appended to its ``estimates`` (one entry per cost
    profile and profile schema: a later one replaces it). The plan must be the measured run's (its model id)."""
    import json

    from hemlp.planner.cost_model import SCHEMA, active_profile

    if cm.model_id != doc.get("model_id"):
        raise SystemExit(f"--estimate: {path} measured compiled model {doc.get('model_id')}, this compile made "
                         f"{cm.model_id} (another plan: the cost profile moved a bootstrap or changed the layout)")
    runs = [r for r in doc.get("encrypted", []) if r.get("step_seconds")]
    if not runs:
        raise SystemExit(f"--estimate: {path} has no encrypted image with its step seconds")
    est = step_summary(cm.layout_impl.step_estimates())
    measured = {k: float(np.median([r["step_seconds"][k] for r in runs])) for k in est}
    # a profile file in the checkout named by its path in it, as a relative HEMLP_COST_PROFILE names it
    source = active_profile().source.replace(str(ROOT) + "/", "")
    # the schema names the cost model's units: an estimate under an older model is kept beside a newer one
    entry = dict(cost_profile=source, cost_profile_schema=SCHEMA,
                 commit=machine["git"]["commit"][:7], cpu=machine["cpu"]["model"], estimated=est,
                 estimated_total=sum(est.values()),
                 measured_median=measured, measured_median_total=float(np.median([sum(r["step_seconds"].values())
                                                                                  for r in runs])),
                 measured_images=[r["index"] for r in runs],
                 measured_over_estimated={k: measured[k] / est[k] for k in est if est[k] > 0})
    doc["estimates"] = [e for e in doc.get("estimates", [])
                        if (e.get("cost_profile"), e.get("cost_profile_schema")) != (entry["cost_profile"], SCHEMA)]
    doc["estimates"].append(entry)
    Path(path).write_text(json.dumps(doc, indent=2) + "\n")       # as hemlp.apps.bench.report.write_json
    for k in est:
        print(f"{k:>9}: estimated {est[k]:7.1f} s, measured {measured[k]:7.1f} s (median of {len(runs)} images), "
              f"x{measured[k] / est[k]:.2f}" if est[k] > 0 else f"{k}: estimated 0", flush=True)
    print(f"wrote {path}: estimates under {entry['cost_profile']}", flush=True)
    return 0


def encrypt_images(args, cm, x, d, logits, rep, save, done: set) -> int:
    """Run the first --encrypted exact images encrypted, one request each (those in `done` are skipped), saving the
    JSON after each."""
    todo = [i for i in range(min(args.encrypted, len(x))) if i not in done]
    if todo:
        sk, keys = cm.keygen()
        runs = list(rep.get("encrypted", []))
        for i in todo:
            t0, c0 = time.perf_counter(), time.process_time()
            out = cm.run(cm.encrypt(x[i:i + 1], sk), keys)
            y = cm.decrypt(out, sk).reshape(-1)
            seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
            y_lay = np.asarray(cm.simulate(x[i:i + 1]), dtype=np.float64).reshape(-1)
            y_sim = simulate_steps_rows(cm, x[i:i + 1]).reshape(-1)
            runs.append(dict(index=i, seconds=seconds, cpu_seconds=cpu,
                             encrypted_top1=int(y.argmax()), simulated_top1=int(y_sim.argmax()),
                             layout_simulated_top1=int(y_lay.argmax()),
                             max_abs_error_vs_layout_simulate=float(np.max(np.abs(y - y_lay))),
                             plaintext_top1=int(logits[i].argmax()), label=int(d.y[i]),
                             step_seconds=step_summary(out.layer_seconds)))
            print(runs[-1], flush=True)
            rep["encrypted"] = sorted(runs, key=lambda r: r["index"])
            save(False)
    save(True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
