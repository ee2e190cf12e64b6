"""Train the standard ReLU ResNet-20 (He et al. 2016, akamaster's option-A code: hemlp.models.zoo.resnet20) on the
50 000 CIFAR-10 JPEG training images, report its plaintext accuracy on both CIFAR-10 test sets, and save its weights.

    nice -n 5 python scripts/train_resnet20.py --data-root ../shared/data --epochs 40 --threads 2 \
        --out models/weights/resnet20_cifar10.pt --json bench/resnet20_train.json

The recipe is the paper's (SGD with momentum 0.9, weight decay 1e-4 on a 4-pixel random crop and horizontal flip,
batch 128) with a one-cycle schedule instead of 182 epochs of step decay, so it fits a few hours on 2 CPU cores.
Options beyond it, each recorded in the JSON's recipe: ``--cutout 8`` (a random 8x8 square zeroed), ``--label-smoothing
0.1``, ``--ema 0.999`` (the weights' exponential moving average is evaluated and saved) and ``--exact-train`` (the
5 085 exact training images beside the 50 000 JPEG ones); ``--bf16`` trains under bfloat16 autocast (on a CPU with
AMX, its tiles run it).
A checkpoint is written after every epoch (``--out`` + ``.ckpt``) and ``--resume`` continues from it, so a run can be
spread over several sessions and machines (``--device cuda`` on a GPU, then the CPU, or back: each epoch's record
names its device); the weights file holds the model and the client's input standardisation (mean, std).
Everything is seeded; the JSON records the machine, threads, epochs, seconds and both accuracies with their sets named.
"""
from __future__ import annotations

import argparse
import hashlib
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from cifar_resnet_run import CIFAR_EXACT, CIFAR_JPEG, load, standardiser  # noqa: E402

RECIPE = dict(batch_size=128, lr=0.1, momentum=0.9, weight_decay=1e-4, label_smoothing=0.0, pct_start=0.15, pad=4,
              cutout=0, ema=0.0)


def with_exact_train(tr, root):
    """The JPEG training set with the exact python training batches appended (their images' true pixels)."""
    from hemlp.datasets import load_cifar10

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")       # the partial-set notice: the JSON names the set
        ex = load_cifar10(root, train=True, verify=False)
    return type(tr)(np.concatenate([tr.x, ex.x]), np.concatenate([tr.y, ex.y]), tr.classes,
                    f"{tr.name} + {ex.name}", tr.synthetic, dict(tr.info, exact_train=int(len(ex.y))))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-root", required=True, help="folder with cifar10-jpeg/ and cifar-10-batches-py/")
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--train-limit", type=int, default=None, help="a seeded random subset (timing runs)")
    ap.add_argument("--cache-dir", default=None, help="where the decoded JPEG archive is cached as .npz")
    ap.add_argument("--out", default="models/weights/resnet20_cifar10.pt")
    ap.add_argument("--json", default=None)
    ap.add_argument("--resume", action="store_true", help="continue from --out + '.ckpt'")
    ap.add_argument("--init", default=None, help="start from these weights (a warm restart: a new one-cycle "
                                                 "schedule from the weights of an earlier run) instead of at random")
    ap.add_argument("--lr", type=float, default=RECIPE["lr"], help="the one-cycle schedule's peak learning rate")
    ap.add_argument("--device", default="cpu", help="torch device to train on (cpu, cuda); the augmentation draws "
                                                   "come from the same CPU generator on either")
    ap.add_argument("--no-exact", action="store_true", help="without the exact python batches: report and "
                                                               "monitor on the JPEG test set alone")
    ap.add_argument("--cutout", type=int, default=RECIPE["cutout"], help="zero a random square of this side in "
                                                                         "every training image (0: none)")
    ap.add_argument("--label-smoothing", type=float, default=RECIPE["label_smoothing"])
    ap.add_argument("--ema", type=float, default=RECIPE["ema"],
                    help="decay of an exponential moving average of the weights and BatchNorm statistics, which is "
                         "evaluated and saved (0: the last weights)")
    ap.add_argument("--bf16", action="store_true",
                    help="train under bfloat16 autocast (AMX or AVX-512 BF16 on a CPU that has them, tensor cores on "
                         "a GPU; the weights, optimiser and evaluation stay float32)")
    ap.add_argument("--exact-train", action="store_true",
                    help="add the exact python training batches (5 x 1 017 images, the JPEG set's images with their "
                         "true pixels; none is a test image) to the 50 000 JPEG ones")
    args = ap.parse_args(argv)

    import torch
    from torch import nn

    from hemlp.apps.bench.report import load_average, machine_info, save_json
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

    from hemlp.models.train import Cutout, RandomCropFlip, accuracy, predict, set_determinism
    from hemlp.models.zoo import build

    set_determinism(args.seed, args.threads)
    torch.use_deterministic_algorithms(False)      # channels_last convolution backward has no deterministic kernel
    device = torch.device(args.device)
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    tr, tests = load(args.data_root, args.cache_dir, args.train_limit, args.seed,
                     exact=not args.no_exact)
    if args.exact_train:
        tr = with_exact_train(tr, args.data_root)
    mean, std = standardiser(tr.x)
    prior = None
    if args.init:
        prior = torch.load(args.init, weights_only=False)
        mean, std = prior["mean"], prior["std"]     # the client's standardisation stays the one the weights know
    x = torch.as_tensor(np.ascontiguousarray((tr.x - mean) / std, dtype=np.float32)).to(device)
    y = torch.as_tensor(tr.y, dtype=torch.long).to(device)
    model = build("resnet20", 10, seed=args.seed)
    if prior is not None:
        model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in prior["state_dict"].items()})
    model = model.to(device, memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=RECIPE["momentum"],
                          weight_decay=RECIPE["weight_decay"], nesterov=True)
    steps_per_epoch = (len(y) + RECIPE["batch_size"] - 1) // RECIPE["batch_size"]
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=args.epochs * steps_per_epoch,
                                                pct_start=RECIPE["pct_start"])
    gen = torch.Generator().manual_seed(args.seed)
    history, start = [], 0
    ckpt = Path(args.out + ".ckpt")
    if args.resume and ckpt.exists():
        state = torch.load(ckpt, weights_only=False, map_location=device)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        sched.load_state_dict(state["sched"])
        gen.set_state(state["gen"].cpu())           # saved from a CUDA run, loaded onto its device
        history, start = state["history"], state["epoch"]
        print(f"resumed after epoch {start}", flush=True)
    crop, cut = RandomCropFlip(RECIPE["pad"]), Cutout(args.cutout)
    augment = (lambda xb, g: cut(crop(xb, g), g)) if args.cutout > 0 else crop      # noqa: E731
    loss_fn = nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
    # the average the run evaluates and saves (None: the trained weights themselves); BatchNorm statistics included
    ema = (AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(args.ema), use_buffers=True)
           if args.ema > 0 else None)
    if ema is not None and args.resume and ckpt.exists() and state.get("ema") is not None:
        ema.load_state_dict(state["ema"])

    def evaluated():
        return model if ema is None else ema.module
    load_before = load_average()
    for ep in range(start, args.epochs):
        model.train()
        t0, c0 = time.perf_counter(), time.process_time()
        total, correct = torch.zeros((), device=device), torch.zeros((), device=device, dtype=torch.long)
        perm = torch.randperm(len(y), generator=gen).to(device)
        for i in range(0, len(y), RECIPE["batch_size"]):
            idx = perm[i:i + RECIPE["batch_size"]]
            xb = augment(x[idx], gen).contiguous(memory_format=torch.channels_last)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.bf16):
                out = model(xb)
                loss = loss_fn(out, y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            if ema is not None:
                ema.update_parameters(model)
            total += loss.detach() * len(idx)         # summed on the device: no synchronisation per step
            correct += (out.argmax(1) == y[idx]).sum()
        rec = dict(epoch=ep + 1, loss=float(total) / len(y), train_acc=int(correct) / len(y),
                   seconds=time.perf_counter() - t0,
                   cpu_seconds=time.process_time() - c0, lr=sched.get_last_lr()[0],
                   device=device_name, precision="bfloat16 autocast" if args.bf16 else "float32",
                   threads=args.threads)                # a resumed run may change them
        if (ep + 1) % 5 == 0 or ep + 1 == args.epochs:
            name = CIFAR_EXACT if CIFAR_EXACT in tests else CIFAR_JPEG
            d = tests[name]
            xs = np.ascontiguousarray((d.x - mean) / std, dtype=np.float32)
            rec["exact_acc" if name == CIFAR_EXACT else "jpeg_acc"] = accuracy(evaluated().eval(), xs, d.y)
        history.append(rec)
        print(rec, flush=True)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        torch.save(dict(model=model.state_dict(), opt=opt.state_dict(), sched=sched.state_dict(), gen=gen.get_state(),
                        history=history, epoch=ep + 1, ema=None if ema is None else ema.state_dict()), ckpt)
    model = evaluated()
    model.eval().to("cpu", memory_format=torch.contiguous_format)
    acc = {}
    for name, d in tests.items():
        logits = predict(model, np.ascontiguousarray((d.x - mean) / std, dtype=np.float32))
        acc[name] = dict(accuracy=float(np.mean(logits.argmax(1) == d.y)), n=int(len(d.y)))
    torch.save({"state_dict": {k: v.half() if v.is_floating_point() else v for k, v in model.state_dict().items()},
                "model": "resnet20", "mean": mean, "std": std, "dtype": "float16"}, args.out)
    recipe = dict(RECIPE, lr=args.lr, epochs=args.epochs, seed=args.seed, init=args.init, cutout=args.cutout,
                  label_smoothing=args.label_smoothing, ema=args.ema, exact_train=args.exact_train,
                  precision="bfloat16 autocast" if args.bf16 else "float32")
    rep = dict(model="resnet20 (akamaster option A, ReLU)", recipe=recipe, device=str(device),
               device_name=device_name if device.type == "cuda" else None,
               train_set=tr.name, train_images=int(len(y)), threads=args.threads, history=history, accuracy=acc,
               weights=args.out, weights_sha256=hashlib.sha256(Path(args.out).read_bytes()).hexdigest(),
               train_seconds=sum(h["seconds"] for h in history),
               load_average=dict(before=load_before, after=load_average()), measured=True)
    print({k: v["accuracy"] for k, v in acc.items()}, flush=True)
    if args.json:
        save_json(args.json, "resnet20-train", rep, machine=machine_info())
    return 0


if __name__ == "__main__":
    sys.exit(main())
