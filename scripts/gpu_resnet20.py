"""The CIFAR-10 ResNet-20 encrypted on a GPU (compiled.run(..., runtime="cuda")), in two halves so the lent GPU
machine, which has neither the data sets nor time to spare, only runs:

    # here: compile (target 0.995, as resnet20_report), save the compiled model and N exact test images with their
    # simulated logits into an ignored folder to carry
    python scripts/gpu_resnet20.py prepare --data-root ../shared/data --out .gpu_resnet --images 8
    # there (carry .gpu_resnet): keys, then each image encrypted, run on the GPU, decrypted; the JSON records seconds
    # per image, the first call's (keys uploaded, diagonals encoded and cached), and top-1 against simulate
    python scripts/gpu_resnet20.py run --dir .gpu_resnet --images 8 --json $OUT/resnet20_gpu.json

`run --runtime local --images 1` times the CPU run of the same model on that machine's threads, for the ratio.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))


def prepare(args) -> int:
    import torch

    import hemlp
    from cifar_resnet_run import CIFAR_EXACT, calibration_rows, load
    from hemlp.models.zoo import load_weights

    model, state = load_weights(args.weights)
    mean, std = state["mean"], state["std"]
    tr, tests = load(args.data_root, None, None)
    d = tests[CIFAR_EXACT]
    x = np.ascontiguousarray((d.x[:args.images] - mean) / std, dtype=np.float32)
    x_cal = np.ascontiguousarray((tr.x[calibration_rows(len(tr.y), args.calibration)] - mean) / std,
                                 dtype=np.float32)
    del tr, tests
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = hemlp.compile(model, x[:1], calibration=x_cal, batch_size=1, bootstrap=True, preset=args.preset,
                           target_agreement=args.target, allow_insecure=args.preset.startswith("test-"),
                           import_keys=False)
    seconds = time.perf_counter() - t0
    out = Path(args.out)
    cm.save(out / "model")
    sim = np.stack([np.asarray(cm.simulate(x[i:i + 1])).reshape(-1) for i in range(len(x))])
    np.savez(out / "images.npz", x=x, label=d.y[:args.images], simulated=sim,
             plaintext=model(torch.from_numpy(x)).detach().numpy())
    (out / "prepare.json").write_text(json.dumps(dict(weights=args.weights, target=args.target, preset=args.preset,
                                                      compile_seconds=seconds, model_id=cm.model_id), indent=1))
    print(f"prepared {out}: model {cm.model_id}, {len(x)} images, compiled in {seconds:.0f} s")
    return 0


def run(args) -> int:
    import hemlp
    from hemlp.apps.bench.report import machine_info, save_json

    folder = Path(args.dir)
    cm = hemlp.load(folder / "model", allow_insecure=True)
    data = np.load(folder / "images.npz")
    x, sim = data["x"][:args.images], data["simulated"][:args.images]
    if args.threads:
        hemlp.set_num_threads(args.threads)
    machine = machine_info()    # once, at the start: the code and machine the whole run is labelled with
    t0 = time.perf_counter()
    sk, ek = cm.keygen()
    rec = dict(model_id=cm.model_id, runtime=args.runtime, keygen_seconds=time.perf_counter() - t0, images=[],
               prepared=json.loads((folder / "prepare.json").read_text()))
    if args.runtime == "cuda":
        from hemlp.gpu import device_info

        rec["device"] = device_info()
    for i in range(len(x)):
        ct = cm.encrypt(x[i:i + 1], sk)
        t0 = time.perf_counter()
        out = cm.run(ct, ek, runtime=args.runtime)
        seconds = time.perf_counter() - t0
        y = np.asarray(cm.decrypt(out, sk)).reshape(-1)
        rec["images"].append(dict(index=i, seconds=seconds, encrypted_top1=int(y.argmax()),
                                  simulated_top1=int(sim[i].argmax()), label=int(data["label"][i]),
                                  max_abs_error_vs_simulate=float(np.max(np.abs(y - sim[i])))))
        print(rec["images"][-1], flush=True)
        if args.json:
            save_json(args.json, "gpu-resnet20", rec, machine=machine)
    later = [r["seconds"] for r in rec["images"][1:]]
    rec["seconds_per_image_after_first"] = float(np.median(later)) if later else None
    rec["encrypted_equals_simulated_top1"] = all(r["encrypted_top1"] == r["simulated_top1"] for r in rec["images"])
    if args.json:
        save_json(args.json, "gpu-resnet20", rec, machine=machine)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--data-root", required=True)
    p.add_argument("--weights", default="models/weights/resnet20_cifar10.pt")
    p.add_argument("--out", default=".gpu_resnet")
    p.add_argument("--images", type=int, default=8)
    p.add_argument("--calibration", type=int, default=1000)
    p.add_argument("--target", type=float, default=0.995)
    p.add_argument("--preset", default="N16-boot")
    r = sub.add_parser("run")
    r.add_argument("--dir", default=".gpu_resnet")
    r.add_argument("--images", type=int, default=8)
    r.add_argument("--runtime", default="cuda", choices=["cuda", "local"])
    r.add_argument("--threads", type=int, default=None)
    r.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    return prepare(args) if args.cmd == "prepare" else run(args)


if __name__ == "__main__":
    sys.exit(main())
