"""Scale on paper (issue #30 item 5): a batch job projected onto 1 to 64 nodes from its plan alone, and the model
checked against real runs on local raylets.

    python -m hemlp.bench cluster --project 64 [--json bench/cluster_projection.json] [--measure 1,2,4]

The jobs (compiled, never run at their own size): the EMNIST GELU MLP 784-1024-1024-1024-10 at batch 32 768 with
bootstrap=True at N16-boot (issue #30's job; activation degree 15 as its plan: one refresh point of 1 024 ciphertexts
in batched k = 4 calls), and FHE4DMM's CIFAR-10 network (hemlp.models.FHE4DMMNet, Conv 3->64 5x5/3 -> x^2 -> FC
6400->128 -> x^2 -> FC 128->10, leveled) at batch 32 768 on the 128-bit preset the compiler picks: the network FHE4DMM
ran on 64 machines. Both in layout (A), split over K nodes as hemlp.runtime.shards models it (p_n groups of chunks,
each group's feature rows over p_r nodes; every PCMM a gather, a reduce or streamed by blocks). Per K:

* compute: each step's one-thread seconds from the plan (hemlp.planner.layouts.estimate_batch per step with the
  active cost profile; a bootstrap or MaMBo step its placement's seconds), times the node's share of the work: its
  chunks, and its rows (a gather's output rows, a reduce's input rows, an elementwise step's or a refresh's rows;
  a refresh in whole calls of its batch). The largest node's seconds (CPU seconds at one thread);
* network, bytes per batch: per matrix step what every node receives (shards' choice: the rows it gathers or the
  partial sums sent to it), the input pulled from the node the batch arrives at (the rows each node's first layer
  reads: its share, or with a gather every row of its chunks) and the output collected there; network seconds at
  NETWORK_BYTES_PER_S per node (10 GbE), not overlapped with compute (an upper bound). Apart: the evaluation keys
  (bootstrapping keys at their in-memory size) every other node receives once per job (the Ray runtime today puts
  them with each run: the measured check counts them);
* memory per node: hemlp.planner.resources.estimate_nodes (keys once per node).

Images per second = batch / (compute + network) of the largest node, one thread per node; CPU-normalised scaling
= that over K times the one-node figure. Derived, never measured at this size: the JSON says so, with the cost
profile, the CPU and the SIMD path the unit costs are for.

--measure K1,K2,..: the check at a test preset (test-N12-d6, an x^2 MLP 64-128-128-128 at batch 2 048, one chunk):
for each K a local cluster of K raylets (scripts/local_cluster.py, 1 CPU each) runs the plan with every PCMM on the
grid of the projection's split (K row blocks: gathers), once to warm the workers, then measured: the CPU seconds
of each node's worker processes (/proc), the bytes each raylet received from the others (Ray's
ray_object_manager_bytes{Type="Received"} metric), Ray's per-step stats (RayOptions.stats: the tasks' CPU
seconds, their nodes); against the same model's compute and network bytes. tests/apps/bench/test_cluster.py runs it
at 1, 2 and 3 raylets (slow).
"""
from __future__ import annotations

import math
import os
import re
import time
import urllib.request
import warnings

import numpy as np

from hemlp.apps.bench import cluster_job, report
from hemlp.apps.bench.local_raylets import connected_cluster, cpu_since, local_cluster_script, node_cpu

HELP = "a batch job projected to 1..64 nodes: compute, network bytes per layer, memory per node (--measure: raylets)"

#: the node counts of the projection (those up to --project, and --project itself)
NODE_COUNTS = (1, 2, 4, 16, 64)
#: bytes per second each node sends or receives: 10 GbE (~1.25 GB/s of payload)
NETWORK_BYTES_PER_S = 1.25e9
#: the jobs: name -> (what, batch)
JOBS = {
    "emnist-gelu-mlp": ("EMNIST GELU MLP 784-1024-1024-1024-10, bootstrap=True", 32768),
    "cifar10-fhe4dmm": ("CIFAR-10 FHE4DMM network (Conv 3->64 5x5/3, x^2, FC 6400->128, x^2, FC 128->10)", 32768),
}
#: the measured check's model and batch (test-N12-d6: 2 048 slots, so one chunk and every split is a row split)
CHECK_DIMS, CHECK_BATCH = (64, 128, 128, 128), 2048
#: the metric each raylet exports with the bytes it received from other nodes' stores (cumulative)
RECEIVED_METRIC = re.compile(r'^ray_object_manager_bytes\{[^}]*Type="Received"[^}]*\}\s+(\S+)', re.M)
#: how often the raylets of a measured cluster report their metrics (ms)
METRICS_INTERVAL_MS = 300


# ---------------------------------------------------------------------------------------------- the model
def step_seconds(lay) -> dict:
    """{step: one-thread seconds of the server's work} of a layout (A) plan: estimate_batch on the step alone, a
    bootstrap or MaMBo step its placement's seconds; the input's encryption (the client's) is not the server's."""
    from hemlp.planner.layouts import estimate_batch

    out = {}
    for s in lay.steps:
        if s.op == "input":
            continue
        if s.op in ("bootstrap", "mambo"):
            out[s.out] = float(s.info.seconds)
        else:
            out[s.out] = float(estimate_batch([s], lay.params, lay.batch_size))
    return out


def encrypt_seconds(lay) -> float:
    """The client's encryption of the input (the rest of the plan's estimate)."""
    from hemlp.planner.layouts import estimate_batch

    return float(estimate_batch([s for s in lay.steps if s.op == "input"], lay.params, lay.batch_size))


def _cdiv(a: int, b: int) -> int:
    return -(-int(a) // int(b))


def node_fractions(lay, nodes: int, peak: dict) -> dict:
    """{step: the share of its work the busiest node does} when the batch is split over `nodes` nodes as
    shards.node_peak (`peak`) splits it."""
    p_n, p_r = peak["p_n"], peak["p_r"]
    chunks = lay.chunks
    c_share = _cdiv(chunks, p_n) / chunks
    kind, chained, reduced = {}, set(), set()
    for m in peak["splits"]:
        kind[m["step"]] = m["split"]
        if "chain" in m:
            chained.update(m["chain"][1:-1])
            reduced.add(m["chain"][-1])      # B multiplies the node's rows of A into partial sums of all its rows
    rows = lambda n: _cdiv(n, p_r) / n  # noqa: E731  the node's share of n rows
    out = {}
    for s in lay.steps:
        if s.op == "input":
            continue
        if s.op in ("pcmm", "mambo") and s.out not in chained:
            d1, d2 = int(np.shape(s.U)[0]), int(np.shape(s.U)[1])
            share = rows(d2) if (s.out in reduced or kind.get(s.out) == "reduce") else rows(d1)
            f = share * c_share
            if s.op == "mambo":        # its refresh runs in whole calls of its batch
                f = _calls_share(s, _cdiv(d1, p_r) * _cdiv(chunks, p_n))
        elif s.op == "bootstrap":
            f = _calls_share(s, _cdiv(s.rows, p_r) * _cdiv(chunks, p_n))
        else:
            f = rows(max(1, int(s.rows))) * c_share
        out[s.out] = float(f)
    return out


def _calls_share(s, node_cts: int) -> float:
    """A refresh's share on a node holding node_cts of its ciphertexts: whole calls of the placement's batch."""
    cts, calls = int(s.info.ciphertexts), int(s.info.bootstraps)
    per_call = max(1, _cdiv(cts, calls))
    return min(1.0, _cdiv(min(node_cts, cts), per_call) / calls)


def _input_step(lay):
    return next(s for s in lay.steps if s.op == "input")


def _ct_bytes(N: int, level: int) -> int:
    return 2 * N * (int(level) + 1) * 8


def project_nodes(lay, nodes: int, boot_key_bytes: int = 0, resources=None, seconds: dict | None = None) -> dict:
    """The projection of a planned layout (A) batch onto `nodes` nodes (the module docstring): compute per node,
    network bytes per layer and in all, memory per node (estimate_nodes), throughput."""
    from hemlp.planner.resources import estimate_nodes, estimate_resources
    from hemlp.runtime import shards

    if lay.name != "batch":
        raise NotImplementedError(f"layout {lay.label} is not split over nodes (hemlp.runtime.shards models layout "
                                  "(A) only): a projection would count its whole run on every node")
    res = estimate_resources(lay, boot_key_bytes) if resources is None else resources
    secs = step_seconds(lay) if seconds is None else seconds
    K, N, C = int(nodes), lay.params.N, lay.chunks
    peak = shards.node_peak(lay.steps, N, C, K)
    frac = node_fractions(lay, K, peak)
    per_node = {k: secs[k] * frac[k] for k in secs}
    compute = sum(per_node.values())
    p_n, p_r = peak["p_n"], peak["p_r"]
    c_node = _cdiv(C, p_n)
    # the input: each other node pulls what its first layer reads (all rows of its chunks for a gather)
    inp = _input_step(lay)
    first = next((m for m in peak["splits"]), None)
    gather_first = first is not None and first["split"] in ("gather", "streamed") and \
        next(s for s in lay.steps if s.out == first["step"]).inputs[0] == inp.out
    in_rows = inp.rows if gather_first else _cdiv(inp.rows, p_r)
    input_bytes = (K - 1) * in_rows * c_node * _ct_bytes(N, inp.level_out)
    layers = []
    for m in peak["splits"]:
        moved = 0 if (gather_first and m is first and "chain_reduce" not in m) else int(m["moved"])
        if gather_first and m is first and "chain_reduce" in m:
            moved = int(m["chain_reduce"])           # A's gathered rows are the input's, B's partial sums move
        layers.append(dict(step=m["step"], split=m["split"], chain=m.get("chain"), bytes_per_node=moved,
                           bytes=moved * K, block_rows=m.get("block_rows")))
    n_out, lv_out = lay.ciphertexts_out()
    output_bytes = int(n_out * _ct_bytes(N, lv_out) * (K - 1) / K)
    serial_keys = int(res.eval_key_bytes + boot_key_bytes)     # bootstrapping keys: their in-memory size
    key_bytes = (K - 1) * serial_keys
    layer_bytes = sum(x["bytes"] for x in layers)
    total = input_bytes + layer_bytes + output_bytes
    # a node other than the one the batch arrives at: what it receives of the layers and its input (the keys
    # arrive once per job, not per batch)
    node_bytes = sum(x["bytes_per_node"] for x in layers) + (input_bytes // (K - 1) if K > 1 else 0)
    net_s = node_bytes / NETWORK_BYTES_PER_S
    mem = estimate_nodes(lay, K, boot_key_bytes, res)
    wall = compute + net_s
    return dict(nodes=K, p_n=p_n, p_r=p_r, split=mem.split, compute_seconds_per_node=compute,
                compute_seconds_total=compute * K, compute_by_step=per_node, network_bytes_total=int(total),
                network=dict(input=int(input_bytes), layers=layers, output=output_bytes, keys=int(key_bytes)),
                network_bytes_per_node=int(node_bytes), network_seconds_per_node=net_s, seconds_per_batch=wall,
                images_per_second=lay.batch_size / wall if wall > 0 else math.inf,
                memory_per_node=mem.to_json())


def project(lay, node_counts, boot_key_bytes: int = 0) -> list:
    """project_nodes for each count, with each count's speed-up and CPU-normalised efficiency against one node."""
    from hemlp.planner.resources import estimate_resources

    res, secs = estimate_resources(lay, boot_key_bytes), step_seconds(lay)
    rows = [project_nodes(lay, k, boot_key_bytes, res, secs) for k in node_counts]
    one = project_nodes(lay, 1, boot_key_bytes, res, secs)["seconds_per_batch"]
    for r in rows:
        r["speedup"] = one / r["seconds_per_batch"]
        r["efficiency"] = r["speedup"] / r["nodes"]
    return rows


# ---------------------------------------------------------------------------------------------- the jobs
def compile_job(name: str):
    """The job's compiled model (compile only: no key, no ciphertext)."""
    import torch

    import hemlp

    what, batch = JOBS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name == "emnist-gelu-mlp":
            torch.manual_seed(0)
            net = torch.nn.Sequential(torch.nn.Linear(784, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 1024),
                                      torch.nn.GELU(), torch.nn.Linear(1024, 1024), torch.nn.GELU(),
                                      torch.nn.Linear(1024, 10)).eval()
            x = np.random.default_rng(0).uniform(0, 1, (64, 784))
            return hemlp.compile(net, x, batch_size=batch, bootstrap=True, layout="batch", activation_degree=15,
                                 server_memory=None)
        if name == "cifar10-fhe4dmm":
            from hemlp.models import build

            net = build("fhe4dmm", (3, 32, 32))
            x = np.random.default_rng(0).uniform(0, 1, (64, 3, 32, 32))
            return hemlp.compile(net, x, batch_size=batch, layout="batch", server_memory=None)
    raise KeyError(name)


def job_payload(name: str, node_counts) -> dict:
    from hemlp.layouts.boot_choice import boot_key_bytes
    from hemlp.planner.cost_model import active_profile

    cm = compile_job(name)
    lay = cm.layout_impl
    boot = boot_key_bytes(lay)
    info = cm.plan.info
    return dict(job=name, what=JOBS[name][0], batch=cm.batch_size, preset=cm.preset, layout=lay.name,
                chunks=lay.chunks, slots=lay.params.N // 2, estimate_seconds=float(lay.estimate()),
                encrypt_seconds=encrypt_seconds(lay), boot_key_bytes=int(boot),
                bootstrap=info.get("bootstrap", {}).get("lowering") if info.get("bootstrap") else None,
                cost_profile=active_profile().source, projection=project(lay, node_counts, boot))


# ---------------------------------------------------------------------------------------------- the check
def check_case():
    """(compiled model, inputs) of the measured check: an x^2 MLP at test-N12-d6, one chunk of 2 048 slots."""
    import hemlp
    from hemlp.apps.bench import square_mlp

    x = np.random.default_rng(5).uniform(-1, 1, (CHECK_BATCH, CHECK_DIMS[0]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = hemlp.compile(square_mlp(CHECK_DIMS), x[:64], batch_size=CHECK_BATCH, allow_insecure=True,
                           layout="batch", preset="test-N12-d6")
    return cm, x


def received_bytes(metrics_ports) -> int:
    """Bytes the raylets received from other nodes' object stores so far (their ray_object_manager_bytes metric)."""
    total = 0
    for port in metrics_ports:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        total += sum(float(v) for v in RECEIVED_METRIC.findall(text))
    return int(total)


def settle_metrics(ports, wait: float = 10.0) -> int:
    """The raylets' received bytes once four readings two report intervals apart agree (the metric is reported
    every METRICS_INTERVAL_MS: a transfer that just ended shows up one or two reports later)."""
    deadline, seen = time.monotonic() + wait, []
    while True:
        time.sleep(2 * METRICS_INTERVAL_MS / 1000)
        seen.append(received_bytes(ports))
        if (len(seen) >= 4 and len(set(seen[-4:])) == 1) or time.monotonic() > deadline:
            return seen[-1]


def measure_on_cluster(lc, desc, cm, ek, ct, ref=None) -> dict:
    """One measured run of the check's plan on the connected cluster `desc` (K raylets): every PCMM on the grid
    (K, 1, 1) (the projection's split: K row blocks, a gather each), after one run that warms the workers."""
    import ray

    K = len(desc["nodes"])
    ports = [n["MetricsExportPort"] for n in ray.nodes() if n.get("Alive")]
    grid = (K, 1, 1)
    warm = cm.run(ct, ek, runtime="ray", grid=grid)
    before_bytes, before_cpu = settle_metrics(ports), node_cpu(lc, desc)
    st: dict = {}
    t0 = time.perf_counter()
    out = cm.run(ct, ek, runtime="ray", grid=grid, stats=st)
    wall = time.perf_counter() - t0
    after_cpu = node_cpu(lc, desc)
    got = settle_metrics(ports) - before_bytes
    cpu = cpu_since(before_cpu, after_cpu)
    same = ref is None or all(a.to_bytes() == b.to_bytes() for a, b in zip(out.ctm.cts, ref.ctm.cts, strict=True))
    warm_same = ref is None or all(a.to_bytes() == b.to_bytes() for a, b in zip(warm.ctm.cts, ref.ctm.cts,
                                                                                 strict=True))
    steps = {k: v for k, v in st.items() if isinstance(v, dict) and not k.startswith("_")}
    return dict(nodes=K, grid=list(grid), wall_seconds=wall, received_bytes=int(got), cpu_seconds_by_node=cpu,
                cpu_seconds=sum(cpu.values()),
                task_cpu_seconds=sum(v.get("group_task_cpu_seconds", 0.0) for v in steps.values()),
                store_read_bytes=sum(v.get("bytes", {}).get("read", 0) for v in steps.values()),
                nodes_by_step={k: len(v.get("nodes", [])) for k, v in steps.items()},
                bit_identical=bool(same and warm_same))


def model_for_check(cm, K: int) -> dict:
    """The model's figures for the check's plan on K nodes (as the projection computes them)."""
    lay = cm.layout_impl
    p = project_nodes(lay, K)
    # the runtime puts the keys with every run: each other node pulls them
    return dict(nodes=K, compute_seconds_per_node=p["compute_seconds_per_node"],
                compute_seconds_total=sum(step_seconds(lay).values()),
                network_bytes_total=p["network_bytes_total"] + p["network"]["keys"], network=p["network"],
                split=p["split"])


def measure(node_counts, memory: int = 2 * 2 ** 30) -> list:
    """The check at each node count: a fresh local cluster of K raylets (1 CPU each) per count, stopped after.
    A driver of a cluster with token authentication needs RAY_AUTH_MODE before it imports ray (Ray reads it then):
    this sets it when ray is not imported yet (a process that imported it must have set it itself)."""
    lc = local_cluster_script()
    saved = {k: os.environ.get(k) for k in ("RAY_metrics_report_interval_ms", *lc.auth_env())}
    os.environ.update(RAY_metrics_report_interval_ms=str(METRICS_INTERVAL_MS), **lc.auth_env())
    cm, x = check_case()
    sk, ek = cm.keygen()
    ct = cm.encrypt(x, sk)
    ref = cm.run(ct, ek)
    rows = []
    try:
        for K in node_counts:
            with connected_cluster(lc, int(K), memory, 256 * 2 ** 20) as desc:
                got = measure_on_cluster(lc, desc, cm, ek, ct, ref)
            rows.append(dict(measured=got, model=model_for_check(cm, int(K))))
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return rows


# ---------------------------------------------------------------------------------------------- output
def human(n: float) -> str:
    for unit, f in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= f:
            return f"{n / f:.3g} {unit}"
    return f"{n:.0f} B"


def table_rows(job: dict) -> list[str]:
    """The projection of one job as markdown table rows (docs/ray.md renders them from the JSON)."""
    out = []
    for r in job["projection"]:
        mem = r["memory_per_node"]["peak_bytes"]
        out.append(f"| {job['job']} | {r['nodes']} | {r['p_n']} x {r['p_r']} | {r['compute_seconds_per_node']:.4g} "
                   f"| {human(r['network_bytes_per_node'])} | {human(r['network_bytes_total'])} | "
                   f"{mem / 2 ** 30:.3g} GiB | {r['images_per_second']:.3g} | {r['efficiency']:.2f} |")
    return out


TABLE_HEAD = ("| job | nodes | split (chunk groups x row split) | compute s / node (1 thread) | network / node | "
              "network in all | memory / node | images / s | CPU-normalised efficiency |\n"
              "|---|---|---|---|---|---|---|---|---|")


def layer_rows(job: dict) -> list[str]:
    """Network bytes per batch of each layer (and the input, output and keys) at each node count, as table rows."""
    proj = job["projection"]
    by_k = [{x["step"]: x for x in r["network"]["layers"]} for r in proj]
    steps = list(dict.fromkeys(name for m in by_k for name in m))
    rows = [("input (from the node the batch arrives at)", [human(r["network"]["input"]) for r in proj])]
    for name in steps:
        kinds = list(dict.fromkeys(m[name]["split"] + (" chain to " + m[name]["chain"][-1] if m[name]["chain"]
                                                          else "") for m in by_k if name in m))
        # a step missing at a count is part of a chain there (its bytes in the chain's first PCMM)
        rows.append((f"{name} ({' / '.join(kinds)})", [human(m[name]["bytes"]) if name in m else "in a chain"
                                                       for m in by_k]))
    rows.append(("output (to that node)", [human(r["network"]["output"]) for r in proj]))
    rows.append(("evaluation keys (to each other node, once per job)", [human(r["network"]["keys"])
                                                                         for r in proj]))
    return [f"| {job['job']} | {what} | " + " | ".join(vals) + " |" for what, vals in rows]


def render_table(doc: dict) -> str:
    """The projection tables and their label (docs/ray.md, between the markers) from a cluster JSON."""
    m = doc["machine"]
    cpu, simd = m.get("cpu", {}).get("model", "?"), (m.get("simd") or {}).get("path", "?")
    profile = doc["jobs"][0]["cost_profile"].replace("`", "")
    lines = [f"Derived, not measured (`bench/cluster_projection.json`, `python -m hemlp.bench cluster --project "
             f"{doc['project']}`): unit costs from the cost profile \"{profile}\" ({cpu}, SIMD path {simd}); one "
             f"thread per node; network at {doc['network_bytes_per_s'] / 1e9:.3g} GB/s per node, not overlapped "
             "with compute.", "", TABLE_HEAD]
    for job in doc["jobs"]:
        lines += table_rows(job)
    counts = doc["node_counts"]
    lines += ["", "Network bytes per batch, in all, by layer (hemlp.runtime.shards' gather / reduce / streamed "
              "choice per PCMM; a chain runs by blocks, its B's partial sums counted under its first PCMM), and the "
              "keys once per job:", "",
              "| job | what moves | " + " | ".join(f"{k} node(s)" for k in counts) + " |",
              "|---|---|" + "---|" * len(counts)]
    for job in doc["jobs"]:
        lines += layer_rows(job)
    lines.append("")
    for job in doc["jobs"]:
        lines.append(f"* {job['job']}: {job['what']}, batch {job['batch']}, {job['preset']}, {job['chunks']} "
                     f"chunk(s) of {job['slots']} slots; the plan's estimate {job['estimate_seconds']:.4g} s on one "
                     f"thread (client encryption {job['encrypt_seconds']:.3g} s of it)"
                     + (f"; bootstrapping keys {job['boot_key_bytes'] / 2 ** 30:.3g} GiB per node"
                        if job["boot_key_bytes"] else "") + ".")
    for c in doc.get("check", []):
        me, mo = c["measured"], c["model"]
        ratio = me["received_bytes"] / mo["network_bytes_total"] if mo["network_bytes_total"] else None
        lines.append(f"* check, {me['nodes']} raylet(s) at test-N12-d6 (measured): CPU {me['cpu_seconds']:.3g} s "
                     f"(the tasks' own {me['task_cpu_seconds']:.3g} s) against {mo['compute_seconds_total']:.3g} s "
                     f"modelled ({me['cpu_seconds'] / mo['compute_seconds_total']:.2g}x); "
                     f"{human(me['received_bytes'])} received between nodes against "
                     f"{human(mo['network_bytes_total'])} modelled" + (f" ({ratio:.2f}x)" if ratio else "")
                     + ("" if me["bit_identical"] else "; OUTPUT NOT BIT-IDENTICAL") + ".")
    return "\n".join(lines)


def print_table(payload: dict) -> None:
    for job in payload["jobs"]:
        print(f"{job['job']}: {job['what']}, batch {job['batch']}, {job['preset']}, estimate "
              f"{job['estimate_seconds']:.4g} s (1 thread)")
        print("  nodes  split    compute s/node  net/node    net total   mem/node     img/s    eff")
        for r in job["projection"]:
            print(f"  {r['nodes']:>5}  {r['p_n']:>2}x{r['p_r']:<4} {r['compute_seconds_per_node']:>14.4g}  "
                  f"{human(r['network_bytes_per_node']):>10}  {human(r['network_bytes_total']):>10}  "
                  f"{r['memory_per_node']['peak_bytes'] / 2 ** 30:>7.3g} GiB  {r['images_per_second']:>7.3g}  "
                  f"{r['efficiency']:.2f}")
        for r in job["projection"][-1:]:
            for x in r["network"]["layers"]:
                print(f"    {x['step']}: {x['split']}, {human(x['bytes'])} per batch on {r['nodes']} nodes")
    for c in payload.get("check", []):
        me, mo = c["measured"], c["model"]
        print(f"check K={me['nodes']}: CPU {me['cpu_seconds']:.3g} s (tasks {me['task_cpu_seconds']:.3g}) vs model "
              f"{mo['compute_seconds_total']:.3g} s; received {human(me['received_bytes'])} vs model "
              f"{human(mo['network_bytes_total'])}; bit-identical {me['bit_identical']}")
    if "run" in payload:
        cluster_job.print_run(payload["run"])
    for n in payload["notes"]:
        print("note:", n)


def add_arguments(p) -> None:
    p.add_argument("--project", type=int, default=64, help="the largest node count projected (default 64)")
    p.add_argument("--jobs", default=",".join(JOBS), help=f"comma-separated among {', '.join(JOBS)}")
    p.add_argument("--measure", default=None, metavar="K1,K2,..",
                   help="also run the check on local clusters of these raylet counts (e.g. 1,2,3)")
    p.add_argument("--json", default=None, help="write the results here")
    cluster_job.add_arguments(p)


def main(args) -> int:
    from hemlp.apps.bench import int_list

    if args.project < 1:
        raise SystemExit("--project must be >= 1")
    counts = sorted({k for k in NODE_COUNTS if k <= args.project} | {args.project})
    names = [j.strip() for j in args.jobs.split(",") if j.strip()]
    for j in names:
        if j not in JOBS:
            raise SystemExit(f"unknown job {j!r}; jobs: {', '.join(JOBS)}")
    busy = report.busy_warning()
    payload = dict(project=args.project, node_counts=counts, network_bytes_per_s=NETWORK_BYTES_PER_S,
                   derived=True, notes=["derived from the plans (compiled only, no key or ciphertext at this size); "
                                        "one thread per node; network not overlapped with compute"],
                   jobs=[job_payload(j, counts) for j in names])
    if args.measure:
        payload["check"] = measure(int_list(args.measure))
    if args.run:
        payload["run"] = cluster_job.run_job(args)
    return report.publish(payload, "cluster", args.json, None, busy, print_table)
