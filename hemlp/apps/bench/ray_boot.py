"""A bootstrapped plan on Ray: its bootstraps spread over 1 and 2 workers vs in process (issue #18 item 2).

    python -m hemlp.bench ray_boot [--width 16] [--workers 1,2] [--rounds 2] [--repeats 3] [--warmup 1] --json PATH

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

HELP = "bootstrapped MLP (test-N12-boot) on Ray: bootstrap steps on 1 vs 2 workers, bit-identity with in-process"


def add_arguments(p) -> None:
    p.add_argument("--width", type=int, default=16, help="hidden width W (= ciphertexts per bootstrap step)")
    p.add_argument("--workers", default="1,2")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--rounds", type=int, default=2, help="blocks per worker count, alternating (a fresh Ray each)")
    p.add_argument("--json", default=None)


def model(width: int):
    import torch

    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(6, width), torch.nn.SiLU(), torch.nn.Linear(width, width),
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
    cal = rng.uniform(-1, 1, (64, 6))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # single (CtS-first) bootstraps: Ray runs that pipeline (the S2C-first batched one runs in process)
        cm = hemlp.compile(model(args.width), cal, bootstrap=True, mambo=False, batch_bootstrap=False,
                           allow_insecure=True, activation_degree=3)
        sk, ek = cm.keygen()
    x = rng.uniform(-0.9, 0.9, (cm.capacity, 6))
    ct = cm.encrypt(x, sk)
    boots = {s.out for s in cm.steps if s.op == "bootstrap"}
    n_boot = sum(s.info["bootstraps"] for s in cm.steps if s.op == "bootstrap")
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
    samples = {w: [] for w in workers}
    blocks = {w: [] for w in workers}
    identical = {w: True for w in workers}
    for _ in range(args.rounds):        # the worker counts alternate, so that the load falls on all of them alike
        for w in workers:
            shutdown_local()             # a fresh local Ray with w CPUs (compiled.run starts it)
            if ray.is_initialized():
                ray.shutdown()
            block = dict(load_average_before=report.load_average())
            for k in range(args.warmup + args.repeats):
                st = {}
                t0 = time.perf_counter()
                out = cm.run(ct, ek, runtime="ray", num_workers=w, stats=st)
                wall = time.perf_counter() - t0
                identical[w] &= all(p.to_bytes() == q.to_bytes()
                                    for p, q in zip(ref.ctm.cts, out.ctm.cts, strict=True))
                if k < args.warmup:     # each worker process builds its Bootstrapper from the keys once
                    continue
                b, o = _split(out.layer_seconds, boots)
                tasks = [t for name in boots for t in st[name]["tasks"]]
                samples[w].append(dict(end_to_end_s=wall, bootstrap_steps_s=b, other_steps_s=o,
                                       task_cpu_s=sum(t["cpu"] for t in tasks),
                                       task_wall_s=sum(t["seconds"] for t in tasks),
                                       task_bootstrap_s=sum(t["bootstrap_seconds"] for t in tasks),
                                       processes=len({t["pid"] for t in tasks}),
                                       keys_loaded=sum(t["keys_loaded"] for t in tasks)))
            block["load_average_after"] = report.load_average()
            blocks[w].append(block)
    for w in workers:
        med = {k: statistics.median(s[k] for s in samples[w]) for k in samples[w][0]}
        modes.append(dict(mode="ray", workers=w, threads=1, bit_identical=identical[w], samples=samples[w],
                          blocks=blocks[w], **med))
        la = blocks[w][0]["load_average_before"]
        rows.append([f"Ray, {w} worker(s)", f"{med['bootstrap_steps_s']:.3f} s", f"{med['other_steps_s']:.3f} s",
                     f"{med['end_to_end_s']:.3f} s", f"{med['task_bootstrap_s'] / n_boot:.3f} s",
                     f"{med['task_cpu_s'] / med['task_wall_s']:.0%}", "yes" if identical[w] else "NO",
                     str(la[0] if la else "?")])
    shutdown_local()
    by_w = {m["workers"]: m for m in modes if m["mode"] == "ray"}
    speedup = None
    if 1 in by_w and 2 in by_w:
        # measured: wall-time ratios. Derived (not a wall-time measurement): the bootstrap tasks' CPU seconds with
        # 1 and 2 workers; 2 x their ratio is the speed-up two otherwise idle cores would give (each worker a core)
        cpu_ratio = by_w[1]["task_cpu_s"] / by_w[2]["task_cpu_s"]
        speedup = dict(bootstrap_steps=by_w[1]["bootstrap_steps_s"] / by_w[2]["bootstrap_steps_s"],
                       end_to_end=by_w[1]["end_to_end_s"] / by_w[2]["end_to_end_s"],
                       task_cpu_ratio=cpu_ratio, derived_idle_2_cores=2 * cpu_ratio)
    report.table(["mode", "bootstrap steps", "other steps", "end to end", "per bootstrap (in task)", "CPU / wall",
                  "bit-identical", "load avg before"], rows,
                 title=f"bootstrapped MLP 6-{args.width}-{args.width}-3, test-N12-boot, batch {cm.capacity}: "
                       f"{len(boots)} bootstrap steps, {n_boot} pair bootstraps; medians of {args.repeats}")
    if speedup:
        print(f"bootstrap steps 1 -> 2 workers: {speedup['bootstrap_steps']:.2f}x wall (end to end "
              f"{speedup['end_to_end']:.2f}x); the tasks' CPU seconds 1 / 2 workers: {speedup['task_cpu_ratio']:.2f} "
              f"(derived: {speedup['derived_idle_2_cores']:.2f}x on two idle cores)")
    if args.json:
        report.save_json(args.json, "ray_boot", dict(
            preset=cm.preset, width=args.width, batch=cm.capacity, bootstrap_steps=len(boots), bootstraps=n_boot,
            ciphertexts_per_step=args.width, repeats=args.repeats, warmup=args.warmup, rounds=args.rounds, modes=modes,
            speedup=speedup,
            notes="wall-time medians; bootstrap steps = the layer_seconds of the plan's bootstrap steps (all their "
                  "tasks submitted at once, one per pair); every Ray worker and the driver use 1 native thread"))
    return 0 if all(m["bit_identical"] for m in modes) else 1
