"""The trained CIFAR-10 ResNet (scripts/train_deploy.py --resnet) run encrypted on single images: layout (P) (one
image in the slots of one ciphertext), bootstraps placed by the planner, 128-bit N16-boot. Per image: seconds (wall
and CPU), encrypted top-1 against simulated and plaintext top-1, the largest logit difference; once: compile and
keygen seconds, evaluation-key bytes, peak RSS. Writes a bench JSON.

    python scripts/cifar_resnet_encrypted.py --data-root ../shared/data --weights bench/cifar_resnet.pt \
        --images 4 --calibration 128 --json bench/cifar_resnet_encrypted.json

With --poly-json it also scores the network that runs encrypted (the compiled graph with its fitted polynomial
activations, float64) on the whole JPEG and exact test sets, and --images 0 stops there (no keys):

    python scripts/cifar_resnet_encrypted.py --data-root ../shared/data --images 0 \
        --poly-json bench/cifar_resnet_poly_accuracy.json

Needs about 15 GiB (keys, the cached weight diagonals, the bootstrapping working set).
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import resource
import time
import warnings
from pathlib import Path

import numpy as np

#: Orion's ResNet-20 (literature, not measured here: it does not fit this machine)
ORION_RESNET20 = ("not run here: its README says its ResNet needs ~32 GB of RAM, more than this 24 GiB machine "
                  "(Lattigo v6, LogN 16 per its configs/resnet.yml); measured by others at 1 040.4 s per image on one "
                  "thread of a Xeon E5-2690 v4, 91.70 % accuracy (SAFHIRE, arXiv 2509.01253, Table 3)")


def trim_heap() -> None:
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:          # not glibc: nothing to trim
        pass


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-root", required=True, help="folder with cifar-10-batches-py/ and cifar10-jpeg/")
    ap.add_argument("--weights", default="bench/cifar_resnet.pt", help="the .pt written by train_deploy.py --resnet")
    ap.add_argument("--images", type=int, default=4, help="first n images of the exact CIFAR-10 test set")
    ap.add_argument("--calibration", type=int, default=128, help="training images for ranges and activation fits")
    ap.add_argument("--preset", default="N16-boot")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cache-dir", default=None, help="decoded JPEG cache (as train_deploy.py)")
    ap.add_argument("--diagonal-cache-gib", type=float, default=2.0,
                    help="encoded weight diagonals kept between runs (the rest are encoded when used)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--resume", action="store_true",
                    help="keep the rows already in --json (same preset, calibration and bootstrap plan, else an "
                         "error) and run the images after them; the JSON is rewritten after every image")
    ap.add_argument("--poly-json", default=None,
                    help="also measure the compiled polynomial network (the fitted activations, float64, no "
                         "encryption) on the whole JPEG and exact test sets and write this JSON")
    ap.add_argument("--poly-simulate", type=int, default=8,
                    help="images on which the polynomial network is checked against cm.simulate (the encrypted "
                         "plan in plaintext, quantised weights and bootstraps included)")
    return ap


def poly_accuracy(cm, sets: dict, mean, std, n_simulate: int, chunk: int = 250) -> dict:
    """Accuracy of the network that runs encrypted (the compiled IR with its fitted polynomial activations, in
    float64) beside the trained network (exact activations, same folded graph) on whole test sets; per activation,
    how many inputs fell outside the fitted range and outside the polynomial's guarded domain (where it is garbage).
    The first n_simulate images are also run through cm.simulate, the encrypted plan's plaintext oracle."""
    g = cm.plan.graph
    acts = [n for n in g.nodes if n.op == "act" and "approx" in n.attrs]
    out = {}
    for name, data in sets.items():
        hits = np.zeros(3, dtype=np.int64)           # exact correct, polynomial correct, top-1 agree
        outside = {n.name: [0, 0, 0] for n in acts}  # [inputs, outside the fitted range, outside the domain]
        max_diff = 0.0
        n_img = len(data.y)
        for i in range(0, n_img, chunk):
            x = (data.x[i:i + chunk] - mean) / std
            exact = g.reference(x, exact=True)[g.output.name].reshape(len(x), -1)
            vals = g.reference(x, exact=False)
            poly = vals[g.output.name].reshape(len(x), -1)
            y = data.y[i:i + chunk]
            hits += [np.sum(exact.argmax(1) == y), np.sum(poly.argmax(1) == y),
                     np.sum(poly.argmax(1) == exact.argmax(1))]
            max_diff = max(max_diff, float(np.max(np.abs(poly - exact))))
            for n in acts:
                v, p = vals[n.inputs[0]], n.attrs["approx"]
                lo, hi = p.domain
                o = outside[n.name]
                o[0] += v.size
                o[1] += int(np.sum((v < p.lo) | (v > p.hi)))
                o[2] += int(np.sum((v < lo) | (v > hi)))
            del vals
        out[name] = {"images": n_img, "accuracy_trained": hits[0] / n_img, "accuracy_polynomial": hits[1] / n_img,
                     "top1_polynomial_equals_trained": hits[2] / n_img, "max_abs_logit_difference": max_diff,
                     "activations_outside": {k: {"inputs": v[0], "outside_fitted_range": v[1],
                                                 "outside_domain": v[2]} for k, v in outside.items()}}
        print(f"{name}: trained {hits[0] / n_img:.2%}, polynomial {hits[1] / n_img:.2%}, top-1 agreement "
              f"{hits[2] / n_img:.2%} of {n_img}", flush=True)
    first = next(iter(sets.values()))
    x = (first.x[:n_simulate] - mean) / std
    sim = np.asarray(cm.simulate(x), dtype=np.float64).reshape(len(x), -1)
    poly = g.reference(x, exact=False)[g.output.name].reshape(len(x), -1)
    out["simulate_check"] = {"images": int(len(x)), "top1_equal": float(np.mean(sim.argmax(1) == poly.argmax(1))),
                             "max_abs_logit_difference": float(np.max(np.abs(sim - poly))) if len(x) else 0.0}
    out["activations"] = [{"node": n.name, "kind": n.attrs["approx"].kind, "degree": n.attrs["approx"].degree,
                           "range": [n.attrs["approx"].lo, n.attrs["approx"].hi],
                           "domain": list(n.attrs["approx"].domain), "max_err": n.attrs["approx"].max_err}
                          for n in acts]
    return out


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    import torch

    import hemlp
    from hemlp.layouts import packed
    from hemlp.apps.bench.report import load_average, machine_info, save_json
    from hemlp.datasets import load_cifar10, load_cifar10_jpeg
    from hemlp.models.cifar_resnet import CifarResNet

    load_before = load_average()
    state = torch.load(args.weights, weights_only=False)
    torch.set_num_threads(args.threads)
    model = CifarResNet(widths=state["widths"], act=state["act"])
    model.load_state_dict(state["state_dict"])
    model.eval()
    mean, std = state["mean"], state["std"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")            # the partial-set notice: the set is named in the report
        test = load_cifar10(args.data_root, train=False, verify=False)
    train = load_cifar10_jpeg(args.data_root, train=True, cache_dir=args.cache_dir)
    rows = np.sort(np.random.default_rng(1).permutation(len(train.y))[:args.calibration])   # sorted by class
    x_cal = np.ascontiguousarray((train.x[rows] - mean) / std, dtype=np.float32)
    n = min(args.images, len(test.y))
    x = np.ascontiguousarray((test.x[:n] - mean) / std, dtype=np.float32)
    with torch.no_grad():
        plain = model(torch.as_tensor(x)).numpy().astype(np.float64)

    t0 = time.perf_counter()
    example = np.ascontiguousarray((test.x[:1] - mean) / std, dtype=np.float32)
    cm = hemlp.compile(model, example, calibration=x_cal, layout="packed", bootstrap=True, preset=args.preset,
                       batch_size=1, import_keys=False)      # keygen below, in this process: nothing imported
    compile_s = time.perf_counter() - t0
    del train, x_cal
    gc.collect()
    trim_heap()          # calibration's numpy temporaries: give the pages back before keys and bootstraps
    packed.MAX_CACHED_DIAGONAL_BYTES = int(args.diagonal_cache_gib * 2**30)
    print(cm.plan, flush=True)
    if args.poly_json:
        jpeg = load_cifar10_jpeg(args.data_root, train=False, cache_dir=args.cache_dir)
        t0 = time.perf_counter()
        rep = poly_accuracy(cm, {"jpeg_test": jpeg, "exact_test": test}, mean, std, args.poly_simulate)
        rep.update(weights=str(args.weights), preset=args.preset, layout=cm.layout,
                   calibration_images=args.calibration, compile_seconds=compile_s,
                   seconds=time.perf_counter() - t0,
                   activation_fit=cm.plan.info.get("activation_fit"))
        save_json(args.poly_json, "cifar-resnet-polynomial-accuracy", rep, machine=machine_info())
        del jpeg
        gc.collect()
        trim_heap()
    if n == 0:               # --images 0: the polynomial network only, no keys
        return 0
    boot = cm.plan.info.get("bootstrap") or {}
    t0 = time.perf_counter()
    sk, ek = cm.keygen()
    keygen_s = time.perf_counter() - t0
    key_bytes = int(ek.nbytes)
    print(f"compile {compile_s:.0f} s, keygen {keygen_s:.0f} s, evaluation keys {key_bytes / 2**30:.2f} GiB",
          flush=True)
    rows_out, earlier = resumed_rows(args, cm, boot)
    machine = machine_info()
    machine["load_average_before"] = load_before
    for i in range(len(rows_out), n):
        xi = x[i:i + 1]
        sim = np.asarray(cm.simulate(xi), dtype=np.float64).reshape(-1)
        ct = cm.encrypt(xi, sk)
        t0, c0 = time.perf_counter(), time.process_time()
        out = cm.run(ct, ek, threads=args.threads)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        y = np.asarray(cm.decrypt(out, sk), dtype=np.float64).reshape(-1)
        r = {"image": i, "label": int(test.y[i]), "seconds": wall, "cpu_seconds": cpu,
             "top1_encrypted": int(y.argmax()), "top1_simulated": int(sim.argmax()),
             "top1_plaintext": int(plain[i].argmax()),
             "max_abs_error_vs_simulated": float(np.max(np.abs(y - sim))),
             "max_abs_error_vs_plaintext": float(np.max(np.abs(y - plain[i])))}
        rows_out.append(r)
        del ct, out
        trim_heap()
        print(f"image {i}: {wall:.1f} s wall, {cpu:.1f} s CPU; top-1 encrypted {r['top1_encrypted']}, simulated "
              f"{r['top1_simulated']}, plaintext {r['top1_plaintext']}, label {r['label']}; |enc - sim| "
              f"{r['max_abs_error_vs_simulated']:.2e}", flush=True)
        rep = report(args, state, cm, boot, rows_out, earlier, compile_s, keygen_s, key_bytes)
        if args.json:        # after every image: a stopped run keeps what it measured
            machine["load_average_after"] = load_average()
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            save_json(args.json, "cifar-resnet-encrypted", rep, machine=machine)
    rep = report(args, state, cm, boot, rows_out, earlier, compile_s, keygen_s, key_bytes)
    print(f"{len(rows_out)} images: {rep['seconds_per_image_mean']:.1f} s/image, encrypted top-1 = simulated on "
          f"{rep['top1_encrypted_equals_simulated'] * 100:.0f} %, keys {key_bytes / 2**30:.2f} GiB, peak RSS "
          f"{rep['peak_rss_gib']:.1f} GiB")
    return 0


def plan_fingerprint(args, boot) -> dict:
    """What two runs must share for their rows to be one measurement: the same compiled bootstrap plan."""
    return {"preset": args.preset, "calibration_images": args.calibration,
            "bootstrap_points": len(boot.get("placements", [])), "estimated_seconds": boot.get("total_seconds")}


def resumed_rows(args, cm, boot) -> tuple[list, dict]:
    """(rows, the earlier run's figures) from --json under --resume; ([], {}) otherwise."""
    if not (args.resume and args.json and Path(args.json).exists()):
        return [], {}
    import json
    old = json.loads(Path(args.json).read_text())
    mine = plan_fingerprint(args, boot)
    theirs = {k: old.get(k) for k in mine}
    if theirs != mine or old.get("layout") != cm.layout:
        raise SystemExit(f"--resume: {args.json} was measured on another plan ({theirs}, layout {old.get('layout')}"
                         f"), this run compiles {mine}, layout {cm.layout}; write to a new --json")
    rows = list(old.get("rows", []))
    if [r["image"] for r in rows] != list(range(len(rows))):
        raise SystemExit(f"--resume: the rows of {args.json} are not images 0..{len(rows) - 1} in order")
    print(f"resuming after {len(rows)} images of {args.json}", flush=True)
    return rows, {"peak_rss_gib": old.get("peak_rss_gib", 0.0), "runs": old.get("runs", 1)}


def report(args, state, cm, boot, rows_out, earlier, compile_s, keygen_s, key_bytes) -> dict:
    n = len(rows_out)
    peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, earlier.get("peak_rss_gib", 0.0))
    return {"model": {"name": "cifar-resnet", "weights": str(args.weights), "widths": list(state["widths"]),
                     "activation": state["act"]},
           "test_set": "CIFAR-10 test, first 1 017 images (exact)", "images": n, "preset": args.preset,
           "runs": earlier.get("runs", 0) + 1,
           "correct_encrypted": int(sum(r["top1_encrypted"] == r["label"] for r in rows_out)),
           "correct_plaintext": int(sum(r["top1_plaintext"] == r["label"] for r in rows_out)),
           "layout": cm.layout, "threads": args.threads, "calibration_images": args.calibration,
           "diagonal_cache_gib": args.diagonal_cache_gib,
           "bootstrap_points": len(boot.get("placements", [])), "estimated_seconds": boot.get("total_seconds"),
           "compile_seconds": compile_s, "keygen_seconds": keygen_s, "eval_key_bytes": key_bytes,
           "rows": rows_out,
           "seconds_per_image_mean": float(np.mean([r["seconds"] for r in rows_out])),
           "cpu_seconds_per_image_mean": float(np.mean([r["cpu_seconds"] for r in rows_out])),
           "top1_encrypted_equals_simulated": float(np.mean([r["top1_encrypted"] == r["top1_simulated"]
                                                             for r in rows_out])),
           "top1_encrypted_equals_plaintext": float(np.mean([r["top1_encrypted"] == r["top1_plaintext"]
                                                             for r in rows_out])),
           "peak_rss_gib": peak,
           "peers": {"openfhe_resnet20": "about 1 000 s per image, 31.8 GB of keys (issue #18's figure)",
                     "orion_resnet20": ORION_RESNET20}}


if __name__ == "__main__":
    raise SystemExit(main())
