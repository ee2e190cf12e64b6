"""A bootstrapped plan on Ray: its bootstraps spread over 1 and 2 workers vs in process (issue #18 item 2).

    python -m hemlp.bench ray_boot [--width 16] [--workers 1,2] [--rounds 2] [--repeats 3] [--warmup 1] --json PATH
    python -m hemlp.bench ray_boot --layout packed [--features 256] [--batch 64] ... --json PATH
    python -m hemlp.bench ray_boot --pipeline batched [--k 2] ... --json PATH

--pipeline batched (layout (A)): the bootstraps lowered to S2C-first batched bootstrapping (batch_bootstrap=k): on
Ray every batch of k pairs is a task (hemlp.runtime.ray.executor), the batched keys loaded once per worker process.

--layout packed: an MLP F-W-W-3 compiled with layout="packed", bootstrap=True at test-N12-boot for a request of
--batch samples (F = 256 features: 8 samples per group of ciphertexts, so 64 samples are 8 groups). On Ray every
group is a task (hemlp.runtime.ray.requests: the model and its keys, bootstrapping keys included, put once per
run and loaded once per worker process); each group's bootstraps run inside its task. Recorded as below, with the
bootstrap / other steps' seconds summed over the groups' tasks (they run in parallel: the wall-time figure is
end to end) and the speed-up end to end.

An MLP 6-W-W-3 (SiLU, tanh; degree-3 activations) compiled with bootstrap=True at the insecure test preset
test-N12-boot (N = 2^12), batch = the slot count (one chunk): every bootstrap step refreshes W ciphertexts in W/2
pair bootstraps. In process (runtime="local", 1 thread) after a warm-up run, then runtime="ray" on a fresh local
Ray with w CPUs for every w of --workers, the worker counts alternating for --rounds blocks: in each block --warmup
untimed runs (each worker process builds its Bootstrapper from the keys put once), then --repeats timed runs.
Recorded per mode: the bootstrap steps' wall seconds (the bootstrap-heavy part: each step's tasks submitted at
once, one per pair), the other steps', end to end, the tasks' CPU seconds and processes, and bit-identity of
every output ciphertext with the in-process run; the speed-up of the bootstrap steps from 1 to 2 workers.
"CPU / wall": the CPU seconds the tasks (in process: the run) got per second of their wall time, i.e. the
share of a core each had (under 100 %: other processes took the rest). The machine's load average before and after
every block is recorded (the speed-up is a wall-time ratio: other processes on the same cores lower it); so is the
ratio of the bootstrap tasks' CPU seconds with 1 and 2 workers, from which the speed-up on two idle cores is derived.
"""
from __future__ import annotations

import statistics
import time
import warnings

import numpy as np

from hemlp.apps.bench import int_list, report
from hemlp.step_ops import StepOp

HELP = ("bootstrapped MLP (test-N12-boot) on Ray, layout (A) or (P): 1 vs 2 workers, bit-identity with "
        "in-process")


def add_arguments(p) -> None:
    p.add_argument("--width", type=int, default=16, help="hidden width W (= ciphertexts per bootstrap step)")
    p.add_argument("--workers", default="1,2")
    p.add_argument("--threads-per-task", default="1",
                   help="comma list of native threads per task (threads_per_task), each run with every worker count "
                        "of at least that many CPUs: 1,2 adds one task at a time on 2 threads")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--rounds", type=int, default=2, help="blocks per worker count, alternating (a fresh Ray each)")
    p.add_argument("--layout", choices=("batch", "packed"), default="batch",
                   help="batch: layout (A), every pair bootstrap a task; packed: layout (P), every group a task")
    p.add_argument("--pipeline", choices=("single", "batched"), default="single",
                   help="layout (A): single CtS-first pair bootstraps, or S2C-first batched bootstrapping (k pairs)")
    p.add_argument("--k", type=int, default=2, help="--pipeline batched: ciphertexts per batch")
    p.add_argument("--features", type=int, default=256, help="--layout packed: input features F")
    p.add_argument("--batch", type=int, default=64, help="--layout packed: samples in the request")
    p.add_argument("--json", default=None)


def model(width: int, features: int = 6):
    import torch

    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(features, width), torch.nn.SiLU(), torch.nn.Linear(width, width),
                               torch.nn.Tanh(), torch.nn.Linear(width, 3)).eval()


def _split(layer_seconds: dict, boots: set) -> tuple:
    b = sum(v for k, v in layer_seconds.items() if k in boots)
    return b, sum(layer_seconds.values()) - b


def main(args) -> int:
    import ray

    import hemlp
    from hemlp.runtime.ray.session import shutdown_local

    warn = report.busy_warning()
    if warn:
        print("warning:", warn)
    rng = np.random.default_rng(11)
    packed = args.layout == "packed"
    F = args.features if packed else 6
    cal = rng.uniform(-1, 1, (64, F))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if packed:     # layout (P): the request's groups of samples as tasks, their bootstraps inside
            cm = hemlp.compile(model(args.width, F), cal, batch_size=args.batch, layout="packed", bootstrap=True,
                               allow_insecure=True, activation_degree=3)
        else:          # single (CtS-first) pair bootstraps, or S2C-first batches of k pairs: a task each on Ray
            cm = hemlp.compile(model(args.width), cal, layout="batch", bootstrap=True, mambo=False,
                               batch_bootstrap=args.k if args.pipeline == "batched" else False, allow_insecure=True,
                               activation_degree=3)
        sk, ek = cm.keygen()
    n = args.batch if packed else cm.capacity
    x = rng.uniform(-0.9, 0.9, (n, F)) + rng.uniform(-0.1, 0.2, F)        # asymmetric per feature
    ct = cm.encrypt(x, sk)
    boots = {s.out for s in cm.steps if s.op == StepOp.BOOTSTRAP}
    n_boot = sum(s.info.bootstraps for s in cm.steps if s.op == StepOp.BOOTSTRAP)
    groups = cm.layout_impl.program.groups if packed else None
    cm.run(ct, ek, threads=1)          # warm-up: the first bootstrap encodes the DFT matrices
    t0, tc = time.perf_counter(), time.process_time()
    ref = cm.run(ct, ek, threads=1)
    local_s, local_cpu = time.perf_counter() - t0, time.process_time() - tc
    lb, lo = _split(ref.layer_seconds, boots)
    modes = [dict(mode="in-process", workers=None, threads=1, end_to_end_s=local_s, cpu_s=local_cpu,
                  bootstrap_steps_s=lb, other_steps_s=lo, bit_identical=True)]
    rows = [["in-process, 1 thread", f"{lb:.3f} s", f"{lo:.3f} s", f"{local_s:.3f} s", "",
             f"{local_cpu / local_s:.0%}", "yes", ""]]
    workers = int_list(args.workers)
    configs = [(w, t) for t in int_list(args.threads_per_task) for w in workers if t <= w]
    samples = {c: [] for c in configs}
    blocks = {c: [] for c in configs}
    identical = {c: True for c in configs}
    for _ in range(args.rounds):        # the worker counts alternate, so that the load falls on all of them alike
        for w, tpt in configs:
            shutdown_local()             # a fresh local Ray with w CPUs (compiled.run starts it)
            if ray.is_initialized():
                ray.shutdown()
            block = dict(load_average_before=report.load_average())
            for k in range(args.warmup + args.repeats):
                st = {}
                t0 = time.perf_counter()
                out = cm.run(ct, ek, runtime="ray", num_workers=w, stats=st, threads_per_task=tpt)
                wall = time.perf_counter() - t0
                identical[w, tpt] &= all(p.to_bytes() == q.to_bytes()
                                    for p, q in zip(ref.ctm.cts, out.ctm.cts, strict=True))
                if k < args.warmup:     # each worker process builds its Bootstrapper from the keys once
                    continue
                b, o = _split(out.layer_seconds, boots)    # layout (P): summed over the groups' tasks
                if packed:
                    tasks = st["tasks"]
                    tb = sum(v for t in tasks for k, v in t["timings"].items() if k in boots)
                    loaded = sum(t["model_loaded"] for t in tasks)
                else:
                    tasks = [t for name in boots for t in st[name]["tasks"]]
                    tb = sum(t["bootstrap_seconds"] for t in tasks)
                    loaded = sum(t["keys_loaded"] for t in tasks)
                samples[w, tpt].append(dict(end_to_end_s=wall, bootstrap_steps_s=b, other_steps_s=o,
                                       task_cpu_s=sum(t["cpu"] for t in tasks),
                                       task_wall_s=sum(t["seconds"] for t in tasks), task_bootstrap_s=tb,
                                       processes=len({t["pid"] for t in tasks}), keys_loaded=loaded))
                if packed:     # what a worker holds: the model, its keys, the Bootstrapper, one group's values
                    samples[w, tpt][-1].update(worker_peak_rss_bytes=max(t["peak_rss"] for t in tasks),
                                          shipment_bytes=st["shipment_bytes"])
            block["load_average_after"] = report.load_average()
            blocks[w, tpt].append(block)
    for w, tpt in configs:
        c = (w, tpt)
        med = {k: statistics.median(s[k] for s in samples[c]) for k in samples[c][0]}
        modes.append(dict(mode="ray", workers=w, threads=tpt, bit_identical=identical[c], samples=samples[c],
                          blocks=blocks[c], **med))
        la = blocks[c][0]["load_average_before"]
        label = f"Ray, {w} worker(s)" + (f", {tpt} threads per task" if tpt > 1 else "")
        rows.append([label, f"{med['bootstrap_steps_s']:.3f} s", f"{med['other_steps_s']:.3f} s",
                     f"{med['end_to_end_s']:.3f} s", f"{med['task_bootstrap_s'] / n_boot:.3f} s",
                     f"{med['task_cpu_s'] / med['task_wall_s']:.0%}", "yes" if identical[c] else "NO",
                     str(la[0] if la else "?")])
    shutdown_local()
    by_w = {m["workers"]: m for m in modes if m["mode"] == "ray" and m["threads"] == 1}
    speedup = None
    if 1 in by_w and 2 in by_w:
        # measured: wall-time ratios. Derived (not a wall-time measurement): the bootstrap tasks' CPU seconds with
        # 1 and 2 workers; 2 x their ratio is the speed-up two otherwise idle cores would give (each worker a core)
        cpu_ratio = by_w[1]["task_cpu_s"] / by_w[2]["task_cpu_s"]
        speedup = dict(bootstrap_steps=by_w[1]["bootstrap_steps_s"] / by_w[2]["bootstrap_steps_s"],
                       end_to_end=by_w[1]["end_to_end_s"] / by_w[2]["end_to_end_s"],
                       task_cpu_ratio=cpu_ratio, derived_idle_2_cores=2 * cpu_ratio)
    two = next((m for m in modes if m["mode"] == "ray" and m["workers"] == 2 and m["threads"] == 2), None)
    if two is not None and 1 in by_w:
        # one task at a time on 2 native threads (a node whose memory holds one task) vs 1 worker of 1 thread
        speedup = dict(speedup or {}, threads_2_vs_1_end_to_end=by_w[1]["end_to_end_s"] / two["end_to_end_s"])
    what = (f"layout (P), batch {n} = {groups} groups of {cm.layout_impl.program.b}: {len(boots)} bootstrap points, "
            f"{n_boot} bootstraps (steps summed over the groups' tasks)" if packed else
            f"batch {cm.capacity}: {len(boots)} bootstrap steps, {n_boot} "
            f"{'pair bootstraps' if args.pipeline == 'single' else f'batched calls (k = {args.k} pairs)'}")
    report.table(["mode", "bootstrap steps", "other steps", "end to end", "per bootstrap (in task)", "CPU / wall",
                  "bit-identical", "load avg before"], rows,
                 title=f"bootstrapped MLP {F}-{args.width}-{args.width}-3, {cm.preset}, {what}; medians of "
                       f"{args.repeats}")
    if speedup and "threads_2_vs_1_end_to_end" in speedup:
        print(f"one task at a time on 2 threads vs 1 worker of 1 thread: {speedup['threads_2_vs_1_end_to_end']:.2f}x "
              "end to end")
    if speedup and "end_to_end" in speedup:
        print(f"{'end to end' if packed else 'bootstrap steps'} 1 -> 2 workers: "
              f"{speedup['end_to_end' if packed else 'bootstrap_steps']:.2f}x wall; the tasks' CPU seconds 1 / 2 "
              f"workers: {speedup['task_cpu_ratio']:.2f} (derived: {speedup['derived_idle_2_cores']:.2f}x on two "
              "idle cores)")
    if args.json:
        extra = dict(layout="packed", features=F, groups=groups, samples_per_group=cm.layout_impl.program.b,
                     boot_slots=cm.layout_impl.program.boot_slots) if packed else \
            dict(layout="batch", pipeline=args.pipeline, k=args.k if args.pipeline == "batched" else None)
        report.save_json(args.json, "ray_boot", dict(
            preset=cm.preset, width=args.width, batch=n, bootstrap_steps=len(boots), bootstraps=n_boot,
            ciphertexts_per_step=None if packed else args.width, repeats=args.repeats, warmup=args.warmup,
            rounds=args.rounds, threads_per_task=int_list(args.threads_per_task), modes=modes, speedup=speedup,
            **extra,
            notes=("wall-time medians; layout (P): every group of samples one Ray task (its bootstraps inside), the "
                   "bootstrap / other steps' seconds summed over the tasks; " if packed else
                   "wall-time medians; bootstrap steps = the layer_seconds of the plan's bootstrap steps (all their "
                   "tasks submitted at once, one per pair); ") + "every Ray worker and the driver use 1 native thread"))
    return 0 if all(m["bit_identical"] for m in modes) else 1
