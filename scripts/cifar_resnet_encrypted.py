"""The trained CIFAR-10 ResNet (scripts/train_deploy.py --resnet) run encrypted on single images: layout (P) (one
image in the slots of one ciphertext), bootstraps placed by the planner, 128-bit N16-boot. Per image: seconds (wall
and CPU), encrypted top-1 against simulated and plaintext top-1, the largest logit difference; once: compile and
keygen seconds, evaluation-key bytes, peak RSS. Writes a bench JSON.

    python scripts/cifar_resnet_encrypted.py --data-root ../shared/data --weights bench/cifar_resnet.pt \
        --images 4 --calibration 128 --json bench/cifar_resnet_encrypted.json

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
    return ap


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
    cm = hemlp.compile(model, x[:1], calibration=x_cal, layout="packed", bootstrap=True, preset=args.preset,
                       batch_size=1)
    compile_s = time.perf_counter() - t0
    del train, x_cal
    gc.collect()
    trim_heap()          # calibration's numpy temporaries: give the pages back before keys and bootstraps
    packed.MAX_CACHED_DIAGONAL_BYTES = int(args.diagonal_cache_gib * 2**30)
    print(cm.plan, flush=True)
    boot = cm.plan.info.get("bootstrap") or {}
    t0 = time.perf_counter()
    sk, ek = cm.keygen()
    keygen_s = time.perf_counter() - t0
    key_bytes = int(ek.nbytes)
    print(f"compile {compile_s:.0f} s, keygen {keygen_s:.0f} s, evaluation keys {key_bytes / 2**30:.2f} GiB",
          flush=True)
    rows_out = []
    for i in range(n):
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
    rep = {"model": {"name": "cifar-resnet", "weights": str(args.weights), "widths": list(state["widths"]),
                     "activation": state["act"]},
           "test_set": "CIFAR-10 test, first 1 017 images (exact)", "images": n, "preset": args.preset,
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
           "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
           "peers": {"openfhe_resnet20": "about 1 000 s per image, 31.8 GB of keys (issue #18's figure)"}}
    machine = machine_info()
    machine["load_average_before"] = load_before
    machine["load_average_after"] = load_average()
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        save_json(args.json, "cifar-resnet-encrypted", rep, machine=machine)
    print(f"{n} images: {rep['seconds_per_image_mean']:.1f} s/image, encrypted top-1 = simulated on "
          f"{rep['top1_encrypted_equals_simulated'] * 100:.0f} %, keys {key_bytes / 2**30:.2f} GiB, peak RSS "
          f"{rep['peak_rss_gib']:.1f} GiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
