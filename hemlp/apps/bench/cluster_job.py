"""Issue #30's batch job run for real on local raylets: the EMNIST GELU MLP over a full batch, encrypted end to end.

    python -m hemlp.bench cluster --run --raylets 1,2,4 --json bench/cluster_emnist_N16.json
    python -m hemlp.bench cluster --run --preset test-N12-boot --batch 2048 --hidden 64 --raylets 1,2   (a check)

The job: a GELU MLP 784-H-H-H-10 (H = --hidden, 1 024 by default) trained here on the EMNIST-mnist training images
(the 17 368 in the data root, less the calibration images; cached in --work-dir), compiled with bootstraps in layout
(A) for a batch of --batch images (32 768 at N16-boot: one chunk of 32 768 slots), calibrated on 1 000 training
images. The input is the complete EMNIST-mnist test set (10 000 real images) repeated to fill the batch. The client
(this process) makes the keys, stages them once as a shared key file (every raylet's workers map that one file, as
the workers of one machine of a real cluster would; no key bytes go through Ray: RayOptions.shared_keys=StagedKeys)
and encrypts the batch straight to a file in --work-dir (CompiledModel.encrypt(..., path=): a row at a time, never the
whole batch in memory), which each run reads mapped (EncryptedBatch.load(..., mapped=True): the driver imports, puts
and drops one block at a time); the file is deleted at the end unless --keep-input, and the staged key file is pruned
(prune_staged_keys); for each raylet count K a
fresh local cluster (scripts/local_cluster.py, 1 CPU per raylet: with K above the cores the raylets time-share them)
runs the plan; the client decrypts.

Per K it records: wall seconds, the CPU seconds of each raylet's worker processes (/proc), images per second and
amortised milliseconds per image, CPU-normalised throughput (images per CPU second) and its scaling from the smallest
K; memory sampled every second over the run: the driver's private memory (RssAnon), per raylet its processes'
private memory (RssAnon) and proportional set
(Pss: pages shared between processes, the key file's included, divided among them), the machine's used memory, and
the key file's size (one copy per machine); encrypted = simulated top-1 on every image, the largest logit error,
accuracy on the real labels, and whether the output ciphertexts are bit-identical across K. Measured: the JSON says
so, with the preset, its security, the CPU and its SIMD path.
"""
from __future__ import annotations

import os
import threading
import time
import warnings
from pathlib import Path

import numpy as np

from hemlp.apps.bench import report
from hemlp.run_options import StagedKeys
from hemlp.runtime.artifacts import EncryptedBatch
from hemlp.runtime.shared_keys import prune_staged_keys, stage_shared_keys
from hemlp.apps.bench.local_raylets import connected_cluster, cpu_since, local_cluster_script, node_cpu, node_trees

#: the job's hidden width (issue #30: 784-1024-1024-1024-10)
HIDDEN = 1024
#: calibration images (training images kept out of the MLP's training)
CALIBRATION = 1000
#: how often the memory sampler reads /proc (seconds)
SAMPLE_SECONDS = 1.0
GIB = 2 ** 30


# ---------------------------------------------------------------------------------------------- data and model
def emnist(data_root: str):
    """(train x, train y, test x, test y): EMNIST-mnist, images flattened to 784 values in [0, 1]."""
    from hemlp.datasets.emnist import load_emnist

    tr, te = load_emnist(data_root, split="mnist", train=True), load_emnist(data_root, split="mnist", train=False)
    return tr.x.reshape(len(tr), -1), tr.y, te.x.reshape(len(te), -1), te.y


def gelu_mlp(hidden: int):
    import torch

    return torch.nn.Sequential(torch.nn.Linear(784, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, hidden),
                               torch.nn.GELU(), torch.nn.Linear(hidden, hidden), torch.nn.GELU(),
                               torch.nn.Linear(hidden, 10))


def train_mlp(x, y, hidden: int, epochs: int, seed: int, cache: Path | None):
    """The GELU MLP trained (Adam, seeded) on (x, y); loaded from `cache` when a run with the same settings wrote
    it there. Returns (net in eval mode, training seconds or None when loaded)."""
    import torch

    torch.manual_seed(seed)
    net = gelu_mlp(hidden)
    if cache is not None and cache.is_file():
        net.load_state_dict(torch.load(cache, weights_only=True))
        return net.eval(), None
    t0 = time.perf_counter()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    xt, yt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)), torch.from_numpy(y)
    gen = torch.Generator().manual_seed(seed)
    net.train()
    for _ in range(epochs):
        for idx in torch.randperm(len(xt), generator=gen).split(128):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(xt[idx]), yt[idx]).backward()
            opt.step()
    seconds = time.perf_counter() - t0
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        torch.save(net.state_dict(), cache)
    return net.eval(), seconds


def torch_logits(net, x) -> np.ndarray:
    import torch

    with torch.no_grad():
        return np.concatenate([net(torch.from_numpy(np.ascontiguousarray(b, dtype=np.float32))).numpy()
                               for b in np.array_split(x, max(1, len(x) // 4096))])


# ---------------------------------------------------------------------------------------------- memory
def _status(pid: int) -> dict:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("RssAnon", "RssFile", "RssShmem", "VmHWM"):
                out[k] = int(v.split()[0]) * 1024
    return out


def _pss(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    return 0


def machine_used() -> int:
    """MemTotal - MemAvailable: what the machine's processes hold (the page cache it can drop not counted)."""
    info = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, _, v = line.partition(":")
            info[k] = int(v.split()[0]) * 1024
    return info["MemTotal"] - info["MemAvailable"]


class MemorySampler:
    """Samples, every SAMPLE_SECONDS until stopped, each raylet's processes (RssAnon and Pss summed over its tree),
    this process's (the driver's) RssAnon and the machine's used memory; keeps the peaks."""

    def __init__(self, lc, desc):
        self.lc, self.desc = lc, desc
        self.peak_driver_anon = 0
        self.peak_anon: dict = {}
        self.peak_pss: dict = {}
        self.peak_machine = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self) -> None:
        for port, (_, pids) in node_trees(self.lc, self.desc).items():
            anon = pss = 0
            for p in pids:
                try:
                    anon += _status(p).get("RssAnon", 0)
                    pss += _pss(p)
                except (OSError, ValueError):
                    continue
            key = str(port)
            self.peak_anon[key] = max(self.peak_anon.get(key, 0), anon)
            self.peak_pss[key] = max(self.peak_pss.get(key, 0), pss)
        self.peak_driver_anon = max(self.peak_driver_anon, _status(os.getpid()).get("RssAnon", 0))
        self.peak_machine = max(self.peak_machine, machine_used())
        self.samples += 1

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._sample()
            except OSError:
                pass
            self._stop.wait(SAMPLE_SECONDS)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._sample()


# ---------------------------------------------------------------------------------------------- the runs
def run_on_cluster(lc, K: int, cm, input_path: Path, ek, key_folder: Path, node_memory: int,
                   object_store: int) -> tuple:
    """(measured row, output EncryptedBatch) of the plan on a fresh local cluster of K raylets, stopped after. The
    input is read mapped, afresh for each run: a run that imports all of it (one raylet: bootstraps step by step)
    leaves nothing behind for the next."""
    ct = EncryptedBatch.load(input_path, cm, mapped=True)
    with connected_cluster(lc, K, node_memory, object_store) as desc:
        before = node_cpu(lc, desc)
        st: dict = {}
        with MemorySampler(lc, desc) as mem:
            t0 = time.perf_counter()
            out = cm.run(ct, ek, runtime="ray", num_workers=int(K), shared_keys=StagedKeys(str(key_folder)), stats=st)
            wall = time.perf_counter() - t0
        cpu = cpu_since(before, node_cpu(lc, desc))
    steps = {k: v for k, v in st.items() if isinstance(v, dict) and not k.startswith("_")}
    row = dict(raylets=int(K), wall_seconds=wall, cpu_seconds_by_node=cpu, cpu_seconds=sum(cpu.values()),
               peak_driver_private_bytes=mem.peak_driver_anon, input_import=ct.ctm.import_stats,
               peak_private_bytes_by_node=mem.peak_anon, peak_pss_bytes_by_node=mem.peak_pss,
               peak_machine_used_bytes=mem.peak_machine, memory_samples=mem.samples,
               nodes_by_step={k: len(v.get("nodes", [])) for k, v in steps.items()})
    return row, out


def key_file_bytes(folder: Path) -> int:
    """The size of the largest key file in `folder` (the run's key set: one copy per machine)."""
    sizes = [p.stat().st_size for p in folder.glob("*.keys")]
    return max(sizes) if sizes else 0


def run_job(args) -> dict:
    """The job at every raylet count of --raylets (module docstring)."""
    import hemlp
    from hemlp.apps.bench import int_list
    from hemlp.layouts.boot_choice import boot_key_bytes
    from hemlp.planner.resources import estimate_nodes

    counts = int_list(args.raylets)
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    key_folder = work / "keys"
    key_folder.mkdir(mode=0o700, exist_ok=True)
    os.chmod(key_folder, 0o700)
    for p in key_folder.glob("*.keys"):        # the folder holds this job's key set only
        p.unlink()
    lc = local_cluster_script()
    saved = {k: os.environ.get(k) for k in lc.auth_env()}

    xtr, ytr, xte, yte = emnist(args.data_root)
    rng = np.random.default_rng(0)
    order = rng.permutation(len(xtr))
    cal, fit = order[:CALIBRATION], order[CALIBRATION:]
    cache = work / f"mlp_h{args.hidden}_e{args.epochs}_s{args.seed}.pt"
    net, train_s = train_mlp(xtr[fit], ytr[fit], args.hidden, args.epochs, args.seed, cache)
    idx = np.arange(args.batch) % len(xte)
    x, labels = xte[idx].astype(np.float64), yte[idx]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        cm = hemlp.compile(net, xtr[cal].astype(np.float64), batch_size=args.batch, bootstrap=True, layout="batch",
                           preset=args.preset, allow_insecure=args.preset.startswith("test"),
                           target_agreement=args.target, activation_degree=args.degree, server_memory=None,
                           batch_bootstrap=args.batch_bootstrap)
        compile_s = time.perf_counter() - t0
    lay = cm.layout_impl
    plan_nodes = {str(K): estimate_nodes(lay, K, boot_key_bytes(lay)).peak_bytes for K in counts}
    ref_torch = torch_logits(net, x)
    sim = cm.simulate(x)
    t0 = time.perf_counter()
    sk, ek = cm.keygen()
    keygen_s = time.perf_counter() - t0
    # staged: the driver writes the key file once and runs on it mapped; no key bytes go through Ray
    ek = stage_shared_keys(ek, key_folder, cm).keys
    input_path = work / "input.hct"
    t0 = time.perf_counter()
    cm.encrypt(x, sk, path=input_path)      # a row at a time into the file: the batch is never whole in memory
    encrypt_s = time.perf_counter() - t0
    input_bytes = input_path.stat().st_size

    rows, first = [], None
    lc.driver_auth(lc.auth_env())         # the driver of a token-authenticated cluster
    try:
        if args.check_in_process:        # the reference bits: the same plan in this process (small jobs only)
            first = [c.to_bytes() for c in cm.run(EncryptedBatch.load(input_path, cm), ek).ctm.cts]
        for K in counts:
            row, out = run_on_cluster(lc, K, cm, input_path, ek, key_folder, args.node_memory, args.object_store)
            t0 = time.perf_counter()
            got = cm.decrypt(out, sk).reshape(len(x), -1)
            row["decrypt_seconds"] = time.perf_counter() - t0
            cts = [c.to_bytes() for c in out.ctm.cts]
            if first is None:
                first = cts
            row["bit_identical_to_first"] = cts == first      # to the in-process run with --check-in-process
            top = got.argmax(1)
            row.update(images=len(x), images_per_second=len(x) / row["wall_seconds"],
                       amortised_ms_per_image=1e3 * row["wall_seconds"] / len(x),
                       images_per_cpu_second=len(x) / row["cpu_seconds"] if row["cpu_seconds"] else None,
                       encrypted_equals_simulated=int((top == sim.argmax(1)).sum()),
                       encrypted_equals_torch=int((top == ref_torch.argmax(1)).sum()),
                       max_abs_error_vs_simulated=float(np.abs(got - sim).max()),
                       accuracy=float((top == labels).mean()),
                       key_file_bytes=key_file_bytes(key_folder), plan_node_peak_bytes=plan_nodes[str(K)])
            rows.append(row)
            del out
    finally:
        lc.driver_auth(saved)
        if not args.keep_input:
            input_path.unlink(missing_ok=True)
        prune_staged_keys(key_folder)       # this job's keys: made for it, of no use after it
    base = rows[0]
    for r in rows:
        if base.get("images_per_cpu_second") and r.get("images_per_cpu_second"):
            r["cpu_normalised_scaling"] = r["images_per_cpu_second"] / base["images_per_cpu_second"]
    info = cm.plan.info
    boot = info.get("bootstrap") or {}
    return dict(
        job="emnist-gelu-mlp", measured=True, preset=cm.preset, security=info["security"],
        model=f"GELU MLP 784-{args.hidden}-{args.hidden}-{args.hidden}-10, trained {args.epochs} epoch(s) on "
              f"{len(fit)} EMNIST-mnist training images (seed {args.seed})",
        data=f"EMNIST-mnist test (10 000, complete), repeated to {args.batch}", batch=args.batch,
        layout=lay.name, depth=info.get("depth"), bootstrap_points=len(boot.get("placements", [])),
        estimate_seconds_one_thread=float(lay.estimate()), train_seconds=train_s, compile_seconds=compile_s,
        keygen_seconds=keygen_s, encrypt_seconds=encrypt_s, input_file_bytes=input_bytes,
        input_file=str(input_path) if args.keep_input else None, node_memory=args.node_memory,
        object_store_bytes=args.object_store, torch_accuracy=float((ref_torch.argmax(1) == labels).mean()),
        simulated_accuracy=float((sim.argmax(1) == labels).mean()),
        simulated_equals_torch=int((sim.argmax(1) == ref_torch.argmax(1)).sum()), runs=rows,
        bits_compared_to="the in-process run" if args.check_in_process else f"the {rows[0]['raylets']}-raylet run",
        notes=["driver: peak_driver_private_bytes is the RssAnon of this process during the run (the input read "
               "mapped from input_file_bytes of file, a block at a time: input_import counts the ciphertexts imported "
               "and the most alive at once)",
               "per raylet: private = the RssAnon of its processes summed, Pss = their proportional set (shared "
               "pages, the key file's among them, divided among the processes mapping them); a node of a real "
               "cluster holds its private memory, one copy of the keys (key_file_bytes) and its object store",
               "raylets have 1 CPU each and share this machine's cores: CPU seconds are per raylet"])


def batch_bootstrap_option(text: str):
    """--batch-bootstrap: 'auto', 'off' (single bootstraps) or an int k >= 2."""
    if text in ("auto", "off"):
        return "auto" if text == "auto" else False
    try:
        return int(text)
    except ValueError:
        raise SystemExit(f"--batch-bootstrap: auto, off or an int k >= 2, got {text!r}") from None


def add_arguments(p) -> None:
    p.add_argument("--run", action="store_true", help="run the EMNIST job encrypted on local raylets (--raylets)")
    p.add_argument("--raylets", default="1,2,4", help="raylet counts of --run (a fresh cluster each)")
    p.add_argument("--preset", default="N16-boot", help="--run's preset")
    p.add_argument("--batch", type=int, default=32768, help="--run's batch (the test images repeated)")
    p.add_argument("--hidden", type=int, default=HIDDEN, help="--run's hidden width")
    p.add_argument("--epochs", type=int, default=3, help="--run: training epochs of the MLP")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target", type=float, default=0.99, help="--run's target_agreement")
    p.add_argument("--degree", type=int, default=None, help="--run: a fixed activation degree (default: searched)")
    p.add_argument("--batch-bootstrap", type=batch_bootstrap_option, default="auto",
                   help="--run: compile's batch_bootstrap: auto, off, or k (smaller keys: at N16-boot k=4 holds "
                        "~11.4 GiB of keys, k=2 ~5.9, off ~3.3)")
    p.add_argument("--check-in-process", action="store_true",
                   help="--run: also run the plan in this process and compare every output bit (small jobs only)")
    p.add_argument("--data-root", default=str(report.REPO_ROOT.parent / "shared" / "data"))
    p.add_argument("--work-dir", default="runs/cluster_emnist",
                   help="--run: the trained MLP, the key file, the encrypted input file")
    p.add_argument("--keep-input", action="store_true",
                   help="--run: keep the encrypted input file (<work-dir>/input.hct; deleted after the job otherwise)")
    p.add_argument("--node-memory", type=lambda s: int(float(s)), default=20 * GIB,
                   help="--run: Ray's memory resource per raylet (bytes)")
    p.add_argument("--object-store", type=lambda s: int(float(s)), default=2 * GIB,
                   help="--run: each raylet's object store (bytes; Ray spills the rest to disk)")


def print_run(run: dict) -> None:
    rows = [[r["raylets"], report.fmt_seconds(r["wall_seconds"]), f"{r['cpu_seconds']:.0f}",
             f"{r['images_per_second']:.1f}", f"{r['amortised_ms_per_image']:.2f}",
             f"{r.get('cpu_normalised_scaling', 1.0):.2f}", f"{r.get('peak_driver_private_bytes', 0) / GIB:.2f}",
             f"{max(r['peak_private_bytes_by_node'].values(), default=0) / GIB:.2f}",
             f"{max(r['peak_pss_bytes_by_node'].values(), default=0) / GIB:.2f}",
             f"{r['peak_machine_used_bytes'] / GIB:.2f}", f"{r['key_file_bytes'] / GIB:.2f}",
             f"{r['encrypted_equals_simulated']}/{r['images']}", f"{100 * r['accuracy']:.2f} %",
             "yes" if r["bit_identical_to_first"] else "NO"] for r in run["runs"]]
    report.table(["raylets", "wall", "CPU s", "img/s", "ms/img", "scaling", "driver GiB", "private GiB/node", "Pss GiB/node",
                  "machine GiB", "keys GiB", "enc = sim", "accuracy", "same bits"], rows,
                 title=f"{run['job']} encrypted ({run['preset']}, {run['security']}, batch {run['batch']}, "
                       f"layout {run['layout']}; measured)")
