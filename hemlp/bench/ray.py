"""PCMM (or a whole compiled MLP) in-process vs on a local Ray (1 and 2 workers).

    python -m hemlp.bench ray [--preset N14-d6] [--level 1] [--d 256] [--chunks 1] [--workers 1,2]
                              [--grids 2x1x1,1x1x2] --json PATH
    python -m hemlp.bench ray --model mlp [--dims 784,128,64,10] [--batch N] [--preset N14-d6]
                              [--workers 1,2] --json PATH

--model mlp: a compiled MLP (x^2 activations) run end to end with CompiledModel.run(runtime="local")
(1 and 2 native threads) and runtime="ray" on a fresh local Ray with 1 and 2 workers; per layer
(layer_seconds) and end to end (median of --repeats after a warm-up run), the speed-up of each Ray
run over the 1-thread in-process run, the Ray overhead (Ray 1 worker - in-process 1 thread, per layer
and in total) and whether every output ciphertext is bit-identical to the in-process one.

One d x d weight matrix times an encrypted d x (chunks * slots) matrix (RLWE, slot encoding).
In-process: linalg.pcmm with 1 and 2 native threads. Ray: ray_pcmm on a fresh local Ray with w
CPUs and the planner's grid for w workers (plus any --grids on the largest w); each result is checked bit-identical to in-process.
Recorded per Ray run: the grid, task count, bytes ray.put by the driver, bytes the tasks read and
wrote through the object store (inputs / weights / partial sums) next to eq. (5)'s
W_3D = (p_m b_k b_n + p_n b_m b_k + p_k b_m b_n) H with H = one ciphertext's bytes and every row,
column and reduction row one block; the Ray overhead is Ray(1 worker) - in-process(1 thread),
split into driver phases (stack limbs, tasks, import + rescale).
"""
from __future__ import annotations

import math
import os

import numpy as np

from hemlp.bench import measure, report

HELP = "PCMM or a compiled MLP (--model mlp) in-process vs Ray (1/2 workers), object-store bytes vs eq. (5)"


def add_arguments(p) -> None:
    p.add_argument("--preset", default="N14-d6")
    p.add_argument("--allow-insecure", action="store_true")
    p.add_argument("--level", type=int, default=1)
    p.add_argument("--d", type=int, default=256, help="d1 = d2 (weight rows and encrypted rows)")
    p.add_argument("--chunks", type=int, default=1, help="ciphertexts per encrypted row")
    p.add_argument("--workers", default="1,2")
    p.add_argument("--grids", default="", help="extra grids for the largest worker count, e.g. 2x1x1,1x1x2")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--weight-bits", type=int, default=20)
    p.add_argument("--model", choices=["pcmm", "mlp"], default="pcmm",
                   help="pcmm: one PCMM (default); mlp: a compiled MLP end to end, per layer")
    p.add_argument("--dims", default="784,128,64,10", help="--model mlp: layer widths")
    p.add_argument("--batch", type=int, default=None, help="--model mlp: batch size (default: the slot count)")
    p.add_argument("--json", default=None)


def _mb(x: float) -> str:
    return f"{x / 2**20:.1f} MB" if x >= 2**20 else f"{x / 2**10:.1f} KB"


def main(args) -> int:
    if args.model == "mlp":
        return main_mlp(args)
    import hemlp
    from hemlp import ckks, linalg
    from hemlp.runtime import ray_runtime as rr

    import ray

    warn = report.busy_warning()
    if warn:
        print("warning:", warn)
    ctx = ckks.Context(ckks.Params.preset(args.preset), allow_insecure=args.allow_insecure)
    sk, _ = ctx.keygen()
    rng = np.random.default_rng(0)
    d, c = args.d, args.chunks
    distinct = min(d, 8)  # the timing does not depend on the data: tile a few encryptions
    M = rng.uniform(-1, 1, (distinct, c * ctx.slots))
    base = linalg.encrypt_matrix(ctx, M, sk, level=args.level)
    C = linalg.CtMatrix(ctx, [base.cts[(i % distinct) * c + j] for i in range(d) for j in range(c)],
                        (d, c * ctx.slots), c, "rlwe")
    U = rng.normal(0, 1 / math.sqrt(d), (d, d))
    kw = dict(weight_bits=args.weight_bits)
    results, rows = [], []
    local = {}
    for th in (1, 2):
        hemlp.set_num_threads(th)  # the driver's own threads; Ray tasks pin themselves to 1
        local[th] = measure(lambda: linalg.pcmm(U, C, **kw), args.repeats)["median_s"]
        results.append(dict(mode="in-process", threads=th, seconds=local[th]))
        rows.append([f"in-process, {th} thread(s)", report.fmt_seconds(local[th]), "", "", "", "", ""])
    ref = linalg.pcmm(U, C, **kw)
    H = 2 * (args.level + 1) * ctx.N * 8
    workers = [int(x) for x in args.workers.split(",")]
    runs = [(w, None) for w in workers]
    runs += [(max(workers), tuple(int(v) for v in g.split("x"))) for g in args.grids.split(",") if g]
    for w, grid in runs:
        if not ray.is_initialized() or int(ray.cluster_resources().get("CPU", 0)) != w:
            if ray.is_initialized():
                ray.shutdown()
            ray.init(address="local", num_cpus=w, include_dashboard=False, log_to_driver=False)
        st = {}
        out = rr.ray_pcmm(U, C, num_workers=w, grid=grid, stats=st, **kw)  # also warms the workers up
        identical = all(a.to_bytes() == b.to_bytes() for a, b in zip(out.cts, ref.cts))
        samples = []

        def run():
            s = {}
            rr.ray_pcmm(U, C, num_workers=w, grid=grid, stats=s, **kw)
            samples.append(s)

        t = measure(run, args.repeats, warmup=0)["median_s"]
        phases = {k: float(np.median([s["phases"][k] for s in samples])) for k in samples[0]["phases"]}
        moved, model = st["moved_bytes"], st["w3d_bytes"]
        rec = dict(mode="ray", workers=w, planner_grid=grid is None, seconds=t, grid=list(st["grid"]), tasks=st["tasks"],
                   bit_identical=identical, put_bytes=st["put_bytes"], result_bytes=st["result_bytes"],
                   moved_bytes=moved, moved_total=sum(moved.values()), w3d_bytes=model,
                   w3d_total=sum(model.values()), ciphertext_bytes=H, phases=phases,
                   speedup_vs_1_thread=local[1] / t)
        if w == 1 and grid is None:
            rec["overhead_s"] = t - local[1]
        results.append(rec)
        ct_moved, ct_model = moved["inputs"] + moved["partials"], model["inputs"] + model["partials"]
        label = f"Ray, {w} worker(s), grid {'x'.join(map(str, st['grid']))}{'' if grid else ' (planner)'}"
        rows.append([label, report.fmt_seconds(t),
                     str(st["tasks"]), _mb(st["put_bytes"]), f"{_mb(ct_moved)} / {_mb(ct_model)}",
                     f"{_mb(moved['weights'])} / {_mb(model['weights'])}", "yes" if identical else "NO"])
    # eq. (5) counts the weight blocks as H-sized ciphertexts; in a PCMM they are 8-byte plaintext entries
    if ray.is_initialized():
        ray.shutdown()
    report.table(["run", "PCMM", "tasks", "put", "ct moved / W_3D", "weights moved / W_3D", "identical"], rows,
                 title=f"PCMM {d}x{d} @ Enc({d}x{c}*{ctx.slots}) at level {args.level} ({args.preset}, "
                       f"H = {_mb(H)}, {os.cpu_count()} cores)")
    ov = [r for r in results if r.get("overhead_s") is not None]
    if ov:
        print(f"Ray overhead (1 worker vs 1 thread): {ov[0]['overhead_s']:.3f} s; driver phases "
              + ", ".join(f"{k} {v:.3f} s" for k, v in ov[0]["phases"].items()))
    if args.json:
        report.write_json(args.json, "ray", {"preset": args.preset, "level": args.level, "d": d, "chunks": c,
                                             "weight_bits": args.weight_bits, "results": results})
    return 0 if all(r.get("bit_identical", True) for r in results) else 1


# ----------------------------------------------------------------------------- --model mlp

def _fresh_ray(ray, w: int) -> None:
    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_cpus=w, include_dashboard=False, log_to_driver=False)


def main_mlp(args) -> int:
    import warnings

    import torch

    import hemlp
    from hemlp.bench import measure

    import ray

    warn = report.busy_warning()
    if warn:
        print("warning:", warn)
    from hemlp import ckks

    dims = [int(v) for v in args.dims.split(",")]
    slots = ckks.Params.preset(args.preset).N // 2
    batch = args.batch or slots
    torch.manual_seed(0)
    layers = []
    for i in range(len(dims) - 1):
        layers.append(torch.nn.Linear(dims[i], dims[i + 1]))
        if i < len(dims) - 2:
            from hemlp.models.layers import activation

            layers.append(activation("square"))
    net = torch.nn.Sequential(*layers).eval()
    x = np.random.default_rng(0).uniform(0, 1, (batch, dims[0]))
    with warnings.catch_warnings():
        if args.allow_insecure:
            warnings.simplefilter("ignore", ckks.InsecureParametersWarning)
        cm = hemlp.compile(net, x, batch_size=batch, preset=args.preset, allow_insecure=args.allow_insecure,
                           layout="batch")
        sk, ek = cm.keygen()
        ct = cm.encrypt(x, sk)
    steps = [s for s in cm.steps if s.op not in ("input", "alias", "output")]
    names = [s.out for s in steps]
    results, ref = [], None

    def record(label, mode, fn, **extra):
        outs = []

        def once():
            outs.append(fn())

        m = measure(once, args.repeats, warmup=1)
        runs = outs[1:]  # the timed ones
        per_layer = {n: float(np.median([o.layer_seconds[n] for o in runs])) for n in names}
        rec = dict(label=label, mode=mode, seconds=m["median_s"], samples=m["samples"], layer_seconds=per_layer,
                   **extra)
        results.append(rec)
        return rec, outs[-1]

    for th in (1, 2):
        rec, out = record(f"local, {th} thread(s)", "local", lambda th=th: cm.run(ct, ek, threads=th), threads=th)
        if ref is None:
            ref = out
        rec["bit_identical"] = True
    hemlp.set_num_threads(1)  # the driver's own import / rescale work, as the 1-thread baseline
    local1 = results[0]
    for w in [int(v) for v in args.workers.split(",")]:
        _fresh_ray(ray, w)
        st = {}
        rec, out = record(f"Ray, {w} worker(s)", "ray",
                          lambda w=w: cm.run(ct, ek, runtime="ray", num_workers=w, stats=st), workers=w)
        rec["bit_identical"] = all(a.to_bytes() == b.to_bytes() for a, b in zip(out.ctm.cts, ref.ctm.cts, strict=True))
        rec["tasks"] = {n: st[n]["tasks"] for n in names if n in st}
        rec["grids"] = {n: list(st[n]["grid"]) for n in names if n in st and "grid" in st[n]}
        rec["phases"] = {n: st[n].get("phases") for n in names if n in st}  # driver phases of the last run
        rec["speedup_vs_local_1_thread"] = local1["seconds"] / rec["seconds"]
        if w == 1:
            rec["overhead_s"] = rec["seconds"] - local1["seconds"]
            rec["overhead_layer_s"] = {n: rec["layer_seconds"][n] - local1["layer_seconds"][n] for n in names}
    if ray.is_initialized():
        ray.shutdown()
    kinds = {s.out: s.op for s in steps}
    rows = [[f"{n} ({kinds[n]})"] + [report.fmt_seconds(r["layer_seconds"][n]) for r in results] for n in names]
    rows.append(["end to end"] + [report.fmt_seconds(r["seconds"]) for r in results])
    rows.append(["speed-up vs local 1 thread"] + [f"{local1['seconds'] / r['seconds']:.2f}x" for r in results])
    rows.append(["bit-identical"] + ["yes" if r["bit_identical"] else "NO" for r in results])
    report.table(["layer"] + [r["label"] for r in results], rows,
                 title=f"MLP {'-'.join(map(str, dims))}, batch {batch} ({cm.preset}, {cm.capacity // slots} chunk(s) "
                       f"of {slots} slots, {os.cpu_count()} cores, median of {args.repeats})")
    ov = next((r for r in results if "overhead_s" in r), None)
    if ov:
        print(f"Ray overhead (1 worker vs in-process 1 thread): {ov['overhead_s']:.3f} s end to end; per layer "
              + ", ".join(f"{n} {v:+.3f} s" for n, v in ov["overhead_layer_s"].items()))
    if args.json:
        report.write_json(args.json, "ray", {"model": "mlp", "dims": dims, "batch": batch, "preset": cm.preset,
                                             "weight_bits": cm.weight_bits, "layers": kinds, "results": results})
    return 0 if all(r["bit_identical"] for r in results) else 1
