"""PCMM (or a whole compiled MLP) in-process vs on a local Ray (1 and 2 workers).

    python -m hemlp.bench ray [--preset N14-d6] [--level 1] [--d 256] [--chunks 1] [--workers 1,2]
                              [--grids 2x1x1,1x1x2] --json PATH
    python -m hemlp.bench ray --model mlp [--dims 784,128,64,10] [--batch N] [--preset N14-d6]
                              [--workers 1,2] [--repeats 5] [--warmup 2] --json PATH

--model mlp: a compiled MLP (x^2 activations, layout "batch") end to end: in-process
(CompiledModel.run, 1 and 2 native threads) and runtime="ray" (RayProgram: the activations stay in
the object store, each PCMM's task also runs the rescale, the bias and the square that follows it)
with 1 and 2 workers of one thread each, on one local Ray with max(--workers) CPUs. The modes are
interleaved round by round (warm-up rounds first: the object store's and the workers' memory is
touched once) so that the load of other processes falls on all of them alike; medians of --repeats.
Recorded: per step and per group (one task wave) seconds, the driver's input put, end to end, the
overhead of Ray over in-process with the same total threads (1 worker vs 1 thread, 2 workers vs 2
threads), the 1 -> 2 worker speed-up per group and end to end, bit-identity of every output
ciphertext, and per layer the bytes the tasks read and wrote through the object store (measured:
every argument, return and driver put) next to planner.grid.pcmm_store_bytes and to eq. (5) read
literally (every block, weights too, an H-sized ciphertext).

Default (--model pcmm): one d x d weight matrix times an encrypted d x (chunks * slots) matrix (RLWE,
slot encoding). In-process: pcmm.pcmm with 1 and 2 native threads. Ray: ray_pcmm on a fresh local
Ray with w CPUs and the planner's grid for w workers (plus any --grids on the largest w); each result
is checked bit-identical to in-process. Recorded per Ray run: the grid, task count, bytes ray.put by
the driver, bytes the tasks read and wrote through the object store (inputs / weights / partial
sums) next to eq. (5)'s W_3D = (p_m b_k b_n + p_n b_m b_k + p_k b_m b_n) H, H = one ciphertext's
bytes, every row, column and reduction row one block, with the weight term plaintext-sized (8-byte
entries); the Ray overhead is Ray(1 worker) - in-process(1 thread), split into driver phases.

--model mlp turns on the Ray workers' malloc tuning (opt-in, hemlp.runtime.ray.malloc) unless --default-malloc,
and records the choice as "tune_malloc" in the JSON.
"""
from __future__ import annotations

import math
import os

import numpy as np

from hemlp.apps.bench import measure, report, square_mlp
from hemlp.step_ops import UNTIMED_OPS

HELP = "PCMM or a compiled MLP (--model mlp) in-process vs Ray (1/2 workers), object-store bytes vs eq. (5)"


def add_arguments(p) -> None:
    p.add_argument("--preset", default="N14-d6")
    p.add_argument("--allow-insecure", action="store_true")
    p.add_argument("--level", type=int, default=1)
    p.add_argument("--d", type=int, default=256, help="d1 = d2 (weight rows and encrypted rows)")
    p.add_argument("--chunks", type=int, default=1, help="ciphertexts per encrypted row")
    p.add_argument("--workers", default="1,2")
    p.add_argument("--grids", default="", help="extra grids for the largest worker count, e.g. 2x1x1,1x1x2; "
                   "--model mlp: one grid (3 or 4 numbers) for every PCMM instead of the planner's")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=2, help="--model mlp: untimed rounds first (the object store's "
                   "memory and the workers' heaps are touched once)")
    p.add_argument("--weight-bits", type=int, default=20)
    p.add_argument("--model", choices=["pcmm", "mlp"], default="pcmm",
                   help="pcmm: one PCMM (default); mlp: a compiled MLP end to end, per layer")
    p.add_argument("--dims", default="784,128,64,10", help="--model mlp: layer widths")
    p.add_argument("--batch", type=int, default=None, help="--model mlp: batch size (default: the slot count)")
    p.add_argument("--back-to-back", type=int, default=3, help="--model mlp: then this many Ray runs with the most "
                   "workers one right after the other (a batch job's case), timed on their own")
    p.add_argument("--ray-default-frees", action="store_true", help="start Ray with its default one-second batching "
                   "of object frees instead of hemlp's LOCAL_SYSTEM_CONFIG (to measure what that setting does)")
    p.add_argument("--nodes", type=int, default=1, help="--model mlp: run Ray as this many raylets on this machine "
                   "(ray.cluster_utils.Cluster, max(--workers) / NODES CPUs each), so that PCMMs shard on their grids "
                   "across nodes and blocks move between object stores; default 1 (one node: one node-local task)")
    p.add_argument("--default-malloc", action="store_true", help="--model mlp: leave the Ray workers' malloc at "
                   "glibc's defaults instead of turning on hemlp's opt-in tuning (hemlp.runtime.ray.malloc: one "
                   "arena, large arrays from the heap), to measure what the tuning does")
    p.add_argument("--json", default=None)


def _mb(x: float) -> str:
    return f"{x / 2**20:.1f} MB" if x >= 2**20 else f"{x / 2**10:.1f} KB"


def main(args) -> int:
    if args.model == "mlp":
        return main_mlp(args)
    import hemlp
    from hemlp import fhe, pcmm
    from hemlp.runtime import ray as rr

    import ray

    warn = report.busy_warning()
    if warn:
        print("warning:", warn)
    ctx = fhe.Context(fhe.Params.preset(args.preset), allow_insecure=args.allow_insecure)
    sk, _ = ctx.keygen()
    rng = np.random.default_rng(0)
    d, c = args.d, args.chunks
    distinct = min(d, 8)  # the timing does not depend on the data: tile a few encryptions
    M = rng.uniform(-1, 1, (distinct, c * ctx.slots))
    base = pcmm.encrypt_matrix(ctx, M, sk, level=args.level)
    C = pcmm.CtMatrix(ctx, [base.cts[(i % distinct) * c + j] for i in range(d) for j in range(c)],
                        (d, c * ctx.slots), c, "rlwe")
    U = rng.normal(0, 1 / math.sqrt(d), (d, d))
    kw = dict(weight_bits=args.weight_bits)
    results, rows = [], []
    local = {}
    for th in (1, 2):
        hemlp.set_num_threads(th)  # the driver's own threads; Ray tasks pin themselves to 1
        local[th] = measure(lambda: pcmm.pcmm(U, C, **kw), args.repeats)["median_s"]
        results.append(dict(mode="in-process", threads=th, seconds=local[th]))
        rows.append([f"in-process, {th} thread(s)", report.fmt_seconds(local[th]), "", "", "", "", ""])
    ref = pcmm.pcmm(U, C, **kw)
    H = 2 * (args.level + 1) * ctx.N * 8
    workers = [int(x) for x in args.workers.split(",")]
    runs = [(w, None) for w in workers]
    runs += [(max(workers), tuple(int(v) for v in g.split("x"))) for g in args.grids.split(",") if g]
    for w, grid in runs:
        if not ray.is_initialized() or int(ray.cluster_resources().get("CPU", 0)) != w:
            if ray.is_initialized():
                ray.shutdown()
            ray.init(address="local", num_cpus=w, include_dashboard=False, log_to_driver=False,
                     _system_config=rr.LOCAL_SYSTEM_CONFIG)
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
    # W_3D: eq. (5) with the weight term plaintext-sized (8-byte entries, per limb task), see ray_pcmm stats
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

def _between_waves(st: dict) -> float:
    spans = sorted(v["task_span"] for v in st.values() if "task_span" in v)
    return sum(max(0.0, b[0] - a[1]) for a, b in zip(spans, spans[1:]))


def _units(groups: list, names: list) -> list:
    """The finest partition of the steps `names` (in program order) in which every group (a list of steps) lies
    within one part: steps that share a group in any run are joined."""
    root = {n: n for n in names}

    def find(n):
        while root[n] != n:
            n = root[n]
        return n

    for g in groups:
        for a in g[1:]:
            root[find(a)] = find(g[0])
    parts: dict = {}
    for n in names:
        parts.setdefault(find(n), []).append(n)
    return sorted(parts.values(), key=lambda u: names.index(u[0]))


def _groups(st: dict, names) -> dict:
    return {k: v for k, v in st.items() if k in names and "group" in v}


def main_mlp(args) -> int:
    """A compiled MLP end to end: in-process (1 and 2 native threads) and RayProgram (1 and 2 workers of one
    thread each) on one local Ray with max(--workers) CPUs, interleaved run by run so that the load of other
    processes on the shared cores falls on every mode alike. "Ray, 1 worker" = num_workers=1: every PCMM grid is
    1x1x1 and every group one task, so one task runs at a time (checked)."""
    import statistics
    import time
    import warnings

    import hemlp
    from hemlp import fhe
    from hemlp.planner.grid import w3d
    from hemlp.planner.obl import Layout

    import ray

    la0 = report.load_average()
    warn = report.busy_warning()
    if warn:
        print("warning:", warn)
    dims = [int(v) for v in args.dims.split(",")]
    slots = fhe.Params.preset(args.preset).N // 2
    batch = args.batch or slots
    net = square_mlp(dims)
    x = np.random.default_rng(0).uniform(0, 1, (batch, dims[0]))
    with warnings.catch_warnings():
        if args.allow_insecure:
            warnings.simplefilter("ignore", fhe.InsecureParametersWarning)
        cm = hemlp.compile(net, x, batch_size=batch, preset=args.preset, allow_insecure=args.allow_insecure,
                           layout="batch")
        sk, ek = cm.keygen()
        ct = cm.encrypt(x, sk)
    steps = [s for s in cm.steps if s.op not in UNTIMED_OPS]
    names = [s.out for s in steps]
    kinds = {s.out: s.op for s in steps}
    input_name = next(s.out for s in cm.steps if s.op == "input")
    workers = [int(v) for v in args.workers.split(",")]
    mlp_grid = tuple(int(v) for v in args.grids.split("x")) if args.grids else None
    if ray.is_initialized():
        ray.shutdown()
    from hemlp.runtime.ray import LOCAL_SYSTEM_CONFIG, TUNE_MALLOC_ENV

    # the workers' malloc tuning is opt-in (hemlp.runtime.ray.malloc): on here unless --default-malloc; the
    # driver reads the choice from the environment (CompiledModel.run has no option for it)
    tune_malloc = not args.default_malloc
    os.environ[TUNE_MALLOC_ENV] = "1" if tune_malloc else "0"
    config = None if args.ray_default_frees else LOCAL_SYSTEM_CONFIG
    cluster = None
    if args.nodes > 1:
        from ray.cluster_utils import Cluster

        per_node = max(workers) // args.nodes
        if per_node < 1 or per_node * args.nodes != max(workers):
            raise SystemExit(f"--nodes {args.nodes}: max(--workers) = {max(workers)} must be a multiple of it")
        # Cluster's nodes default to a 150 MiB store (the input would spill to disk): Ray's single-node default
        # (30 % of the memory) split over the nodes instead
        store = int(0.3 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / args.nodes)
        cluster = Cluster(initialize_head=True, head_node_args=dict(num_cpus=per_node, include_dashboard=False,
                                                                     object_store_memory=store, _system_config=config))
        for _ in range(args.nodes - 1):
            cluster.add_node(num_cpus=per_node, object_store_memory=store)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
    else:
        ray.init(address="local", num_cpus=max(workers), include_dashboard=False, log_to_driver=False,
                 _system_config=config)

    modes = [("local", th) for th in (1, 2)] + [("ray", w) for w in workers]
    runs = {m: [] for m in modes}  # (seconds, layer_seconds, stats)
    ref = None
    loads = []
    warmup = max(0, args.warmup)
    for rep in range(warmup + args.repeats):
        for mode, n in modes:
            st = {}
            t0, c0 = time.perf_counter(), time.process_time()
            if mode == "local":
                out = cm.run(ct, ek, threads=n)
            else:
                hemlp.set_num_threads(1)  # the driver's own work (input export, output import) on one thread
                out = cm.run(ct, ek, runtime="ray", num_workers=n, stats=st, grid=mlp_grid if n > 1 else None)
            sec, cpu = time.perf_counter() - t0, time.process_time() - c0  # cpu: this process (driver) only
            if ref is None:
                ref = out
            same = all(a.to_bytes() == b.to_bytes() for a, b in zip(out.ctm.cts, ref.ctm.cts, strict=True))
            if st:  # the workers' CPU seconds (the tasks report their own)
                cpu += sum(v.get("group_task_cpu_seconds", 0.0) for v in st.values())
            if rep >= warmup:
                runs[mode, n].append((sec, dict(out.layer_seconds), st, same, cpu))
            del out
        loads.append(report.load_average())
        print(f"  round {rep + 1}/{warmup + args.repeats}" + (" (warm-up)" if rep < warmup else "")
              + f", load average {loads[-1]}", flush=True)
    back = []  # (seconds, input put seconds) of Ray runs one right after the other
    for _ in range(max(0, args.back_to_back)):
        st = {}
        hemlp.set_num_threads(1)
        t0 = time.perf_counter()
        out = cm.run(ct, ek, runtime="ray", num_workers=max(workers), stats=st, grid=mlp_grid)
        back.append((time.perf_counter() - t0, st[input_name]["seconds"]))
        del out
    ray.shutdown()
    if cluster is not None:
        cluster.shutdown()
    med = statistics.median
    results = []
    for (mode, n), rs in runs.items():
        rec = dict(label=f"local, {n} thread(s)" if mode == "local" else f"Ray, {n} worker(s)", mode=mode,
                   seconds=med(r[0] for r in rs), samples=[r[0] for r in rs],
                   layer_seconds={k: med(r[1][k] for r in rs) for k in names},
                   bit_identical=all(r[3] for r in rs), cpu_seconds=med(r[4] for r in rs),
                   # cores this run actually got: CPU seconds (driver + tasks) per wall second
                   cores_used=med(r[4] / r[0] for r in rs))
        if mode == "local":
            rec["threads"] = n
        else:
            g_all = [_groups(r[2], names) for r in rs]
            g_last = g_all[-1]
            rec["workers"] = n
            # what the workers did (each task reports whether its process had tuned its malloc)
            rec["malloc_tuned"] = all(v["malloc_tuned"] for r in rs for v in r[2].values() if "malloc_tuned" in v)
            rec["input_put_s"] = med(r[2][input_name]["seconds"] for r in rs)
            rec["input_put_bytes"] = rs[-1][2][input_name]["put_bytes"]
            rec["output_get_s"] = med(r[2]["_output"]["seconds"] for r in rs)
            # idle time between consecutive waves (last task end -> first task start of the next; the driver's
            # wait for results and its submission of the next wave), from the tasks' own wall-clock spans
            rec["between_waves_s"] = med(_between_waves(r[2]) for r in rs)
            rec["groups"] = {}
            for k, v in g_last.items():
                s = next(x for x in steps if x.out == k)
                gr = dict(steps=v["group"], seconds=med(g[k]["group_seconds"] for g in g_all),
                          task_seconds=med(g[k]["group_task_seconds"] for g in g_all),
                          task_cpu_seconds=med(g[k]["group_task_cpu_seconds"] for g in g_all),
                          cores_used=med(g[k]["group_task_cpu_seconds"] / g[k]["group_seconds"] for g in g_all),
                          critical_cpu_seconds=med(g[k]["critical_cpu_seconds"] for g in g_all),
                          tasks=v["tasks"],
                          grid=list(v["grid"]) if v.get("grid") else None, bytes=v["bytes"], model_bytes=v["model_bytes"],
                          bytes_vs_model=v["bytes_vs_model"], after=v.get("after"))
                if s.op == "pcmm" and v.get("grid"):
                    d1, d2 = s.U.shape
                    pm, pn, pk = v["grid"][:3]
                    Hct = v["ct_bytes"][0]  # one input ciphertext's bytes
                    c = cm.capacity // slots
                    lay = Layout(d1, c, d2, d1, c, d2, d1, c, d2, 1, "pcmm")
                    gr["eq5_literal_bytes"] = w3d(lay, pm, pn, pk, Hct)  # every block (weights too) counted as H
                rec["groups"][k] = gr
                if n == 1:
                    assert v["tasks"] == 1, "1 worker must run one task per group"
        results.append(rec)
    by = {(r["mode"], r.get("threads") or r.get("workers")): r for r in results}
    local1, local2 = by["local", 1], by["local", 2]
    rays = [r for r in results if r["mode"] == "ray"]
    summary = {}
    r1 = by.get(("ray", 1))
    r2 = by.get(("ray", 2))
    # overhead: the ratio of the medians, and the median of the rounds' own ratios (a round runs every mode one
    # after the other, so a slow phase of a shared machine falls on both runs of a pair)
    for w, r in ((1, r1), (2, r2)):
        if r:
            loc = by["local", w]
            summary[f"overhead_ray{w}_vs_local{w}"] = r["seconds"] / loc["seconds"] - 1
            summary[f"overhead_ray{w}_vs_local{w}_paired"] = med(
                a / b - 1 for a, b in zip(r["samples"], loc["samples"], strict=True))
    # groups compared across worker counts: the smallest runs of steps that are whole groups in every Ray run (a
    # part-split PCMM's steps run in the next wave, with 2 workers the light layers join a node-local task, ...)
    units = _units([g["steps"] for r in rays for g in r["groups"].values()], names)
    for r in rays:
        merged = {}
        for unit in units:
            gs = [g for g in r["groups"].values() if g["steps"][0] in unit]
            m = dict(steps=unit, grid=[g["grid"] for g in gs])
            for f in ("seconds", "task_seconds", "task_cpu_seconds", "critical_cpu_seconds", "tasks"):
                m[f] = sum(g[f] for g in gs)
            m["cores_used"] = m["task_cpu_seconds"] / m["seconds"]
            merged[unit[0]] = m
        r["groups_merged"] = merged
    if r1 and r2:
        g1s, g2s = r1["groups_merged"], r2["groups_merged"]
        summary["speedup_1_to_2_workers"] = r1["seconds"] / r2["seconds"]
        summary["group_speedup_1_to_2_workers"] = {k: g1s[k]["seconds"] / g2s[k]["seconds"] for k in g1s}
        # what the split itself costs, independent of the load: CPU seconds of the 1-worker task over the
        # critical path (longest task per wave) of the 2-worker tasks = the speed-up with two free cores
        summary["group_speedup_1_to_2_workers_cpu_critical_path"] = {
            k: g1s[k]["task_cpu_seconds"] / g2s[k]["critical_cpu_seconds"] for k in g1s}
        # the PCMM steps alone (1 worker: the PCMM's share of its fused task; 2 workers: its own wave when split)
        summary["pcmm_speedup_1_to_2_workers"] = {
            k: r1["layer_seconds"][k] / r2["layer_seconds"][k] for k in names if kinds[k] == "pcmm"}
    summary["local_speedup_1_to_2_threads"] = local1["seconds"] / local2["seconds"]
    # ---- tables
    cols = results
    rows = [[f"{n} ({kinds[n]})"] + [report.fmt_seconds(r["layer_seconds"][n]) for r in cols] for n in names]
    rows.append(["input put (driver)"] + ["" if r["mode"] == "local" else report.fmt_seconds(r["input_put_s"])
                                          for r in cols])
    rows.append(["idle between waves"] + ["" if r["mode"] == "local" else report.fmt_seconds(r["between_waves_s"])
                                          for r in cols])
    rows.append(["end to end"] + [report.fmt_seconds(r["seconds"]) for r in cols])
    rows.append(["vs local, same threads"] + [
        "" if r["mode"] == "local" else f"{r['seconds'] / by['local', min(2, r['workers'])]['seconds'] - 1:+.1%}"
        for r in cols])
    paired = {w: summary.get(f"overhead_ray{w}_vs_local{w}_paired") for w in (1, 2)}
    rows.append(["  median of the rounds' ratios"] + [
        "" if r["mode"] == "local" or paired.get(r["workers"]) is None else f"{paired[r['workers']]:+.1%}"
        for r in cols])
    rows.append(["cores used (CPU s / wall s)"] + [f"{r['cores_used']:.2f}" for r in cols])
    rows.append(["bit-identical"] + ["yes" if r["bit_identical"] else "NO" for r in cols])
    report.table(["layer"] + [r["label"] for r in cols], rows,
                 title=f"MLP {'-'.join(map(str, dims))}, batch {batch} ({cm.preset}, {cm.capacity // slots} chunk(s) "
                       f"of {slots} slots, {os.cpu_count()} cores"
                       + (f", Ray as {args.nodes} raylets" if args.nodes > 1 else "")
                       + f", median of {args.repeats} interleaved rounds after "
                       f"{warmup} warm-up; load average {la0[0] if la0 else '?'} before)")
    if r1 and r2:
        grows = []
        for k, g1 in r1["groups_merged"].items():
            g2 = r2["groups_merged"][k]
            loc1 = sum(local1["layer_seconds"][s] for s in g1["steps"])
            loc2 = sum(local2["layer_seconds"][s] for s in g1["steps"])
            grows.append(["+".join(g1["steps"]), report.fmt_seconds(loc1), report.fmt_seconds(loc2),
                          report.fmt_seconds(g1["seconds"]), report.fmt_seconds(g2["seconds"]),
                          f"{g1['seconds'] / g2['seconds']:.2f}x", f"{g2['cores_used']:.2f}",
                          f"{g1['task_cpu_seconds'] / g2['critical_cpu_seconds']:.2f}x",
                          f"{g1['seconds'] / loc1 - 1:+.1%}"])
        report.table(["group (one task wave)", "local 1 thr", "local 2 thr", "Ray 1 wkr", "Ray 2 wkr",
                      "Ray 1->2", "cores got (2 wkr)", "CPU 1->2", "Ray 1 vs local 1"], grows,
                     title="per group (steps that run in one task wave with 1 worker and with 2: a PCMM with its "
                           "activation, fused or in the next wave, light layers in node-local tasks); cores got = tasks' CPU s / wall s; CPU 1->2 = CPU s of the 1-worker "
                           "task / longest 2-worker task per wave (speed-up with 2 free cores)")
    brows = []
    for r in rays:
        for k, g in r["groups"].items():
            brows.append([f"{k}, {r['workers']} worker(s)", "x".join(map(str, g["grid"] or [])),
                          _mb(g["bytes"]["read"]), _mb(g["bytes"]["written"]), _mb(g["bytes"]["total"]),
                          _mb(g["model_bytes"]["total"]), f"{g['bytes_vs_model']:.3f}",
                          _mb(g["eq5_literal_bytes"]) if "eq5_literal_bytes" in g else ""])
    report.table(["group", "grid", "read", "written", "measured", "model", "measured/model", "eq. (5) literal"],
                 brows, title="object-store bytes per layer (tasks' arguments and returns, driver puts)")
    if back:
        summary["back_to_back_s"] = med(b[0] for b in back)
        summary["back_to_back_input_put_s"] = med(b[1] for b in back)
        print(f"{len(back)} Ray runs ({max(workers)} workers) one right after the other"
              f"{' (Ray default frees)' if args.ray_default_frees else ''}"
              f"{'' if tune_malloc else ' (default malloc)'}: "
              + ", ".join(f"{b[0]:.2f} s (input put {b[1]:.2f} s)" for b in back))
    for k, v in summary.items():
        print(f"{k}: {v if isinstance(v, dict) else round(v, 4)}")
    if args.json:
        report.write_json(args.json, "ray", {"model": "mlp", "dims": dims, "batch": batch, "preset": cm.preset,
                                             "weight_bits": cm.weight_bits, "layers": kinds, "results": results,
                                             "summary": summary, "warmup": warmup, "repeats": args.repeats,
                                             "load_average_before": la0, "load_average_rounds": loads,
                                             "back_to_back": [dict(seconds=b[0], input_put_s=b[1]) for b in back],
                                             "ray_default_frees": bool(args.ray_default_frees),
                                             "tune_malloc": tune_malloc,
                                             "nodes": args.nodes})
    return 0 if all(r["bit_identical"] for r in results) else 1
