"""Shared key files: the memory of k processes holding one machine's bootstrapping keys, mapped vs private copies.

    python -m hemlp.bench shared_keys [--preset test-N15-boot --allow-insecure] [--processes 3] --json PATH

Generates single bootstrapping keys (BootstrapKeys) at --preset, writes them once as a shared key file
(hemlp.runtime.shared_keys) and as an ordinary eval_keys file, then starts --processes processes that each open the
shared file (open_shared_keys with verify=True: the content hash reads, and so faults in, every page of the keys'
mapping); with all of them alive, each reads its own /proc/self/smaps: the shared file's mapping (Rss, Pss: its
proportional share) and the whole process. Then --private processes each decode the keys privately, as a Ray worker
does today (BootstrapKeys.from_bytes), and report the same (after the mapped ones: their allocations would evict the
file's clean pages from the page cache). Mapped, the processes' Pss of the mapping sums to one copy of the file;
decoded, each process holds its own. Also the time to open (without the hash: what a worker pays) and to decode.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hemlp.apps.bench import report

HELP = "shared key files: memory of k processes mapping one copy of the bootstrapping keys vs private copies"
GIB = 2.0 ** 30

_HOLDER = r"""
import sys
from hemlp.apps.bench.shared_keys import hold
hold(*sys.argv[1:])
"""


def add_arguments(p) -> None:
    p.add_argument("--preset", default="test-N15-boot")
    p.add_argument("--processes", type=int, default=3, help="processes mapping the shared file")
    p.add_argument("--private", type=int, default=1, help="processes loading a private copy (the baseline)")
    p.add_argument("--allow-insecure", action="store_true")
    p.add_argument("--json", default=None)


def _smaps(path: str) -> dict:
    """KiB: the mapping of `path` (map_*) and the whole process (Rss, Pss, Private), from /proc/self/smaps."""
    out, mine = {}, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and not head[0].endswith(":"):
                mine = line.rstrip("\n").endswith(path)
                continue
            if len(head) < 2 or not head[0].endswith(":"):
                continue
            name = head[0][:-1]
            if name in ("Rss", "Pss", "Private_Clean", "Private_Dirty", "Shared_Clean"):
                out[name] = out.get(name, 0) + int(head[1])
                if mine:
                    out["map_" + name] = out.get("map_" + name, 0) + int(head[1])
    return out


def hold(mode: str, path: str, preset: str, insecure: str) -> None:
    """A holder process: open (mode "mapped") or load ("private") the keys, say how long it took, report its smaps
    when asked, exit when told."""
    import gc
    import warnings

    from hemlp import fhe
    from hemlp.bootstrap import BootstrapKeys
    from hemlp.runtime.shared_keys import open_shared_keys

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ctx = fhe.Context(preset, allow_insecure=insecure == "1")
    t0 = time.perf_counter()
    if mode == "mapped":
        open_shared_keys(path, ctx)                  # what a worker pays (its pages fault in on use)
        t_open = time.perf_counter() - t0
        gc.collect()                                 # that mapping goes with its keys
        t0 = time.perf_counter()
        keys = open_shared_keys(path, ctx, verify=True)  # the hash reads every page of the keys' own mapping
        t_touch = time.perf_counter() - t0
    else:
        with open(path, "rb") as f:
            data = f.read()
        keys = BootstrapKeys.from_bytes(data, ctx)   # what a worker decodes today (tasks.worker_bootstrapper)
        del data
        t_open, t_touch = time.perf_counter() - t0, 0.0
    assert keys is not None
    print(json.dumps({"open_s": t_open, "touch_s": t_touch}), flush=True)
    sys.stdin.readline()
    print(json.dumps(_smaps(path)), flush=True)
    sys.stdin.readline()


def _holders(mode: str, count: int, path: Path, args) -> list:
    """Start `count` holder processes one after another (each maps pages the earlier ones faulted in), then, all
    alive, their smaps rows."""
    procs, rows = [], []
    try:
        for _ in range(count):
            p = subprocess.Popen([sys.executable, "-c", _HOLDER, mode, str(path), args.preset,
                                  "1" if args.allow_insecure else "0"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True, env=dict(os.environ))
            procs.append(p)
            rows.append(dict(mode=mode, **json.loads(p.stdout.readline())))
        for p, row in zip(procs, rows):
            p.stdin.write("\n")
            p.stdin.flush()
            row.update(json.loads(p.stdout.readline()))
        for p in procs:
            p.stdin.write("\n")
            p.stdin.flush()
            p.wait(timeout=120)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return rows


def main(args) -> int:
    import warnings

    from hemlp import fhe
    from hemlp.bootstrap import BootstrapKeys
    from hemlp.runtime.artifacts import EvalKeys
    from hemlp.runtime.shared_keys import write_shared_keys

    warn = report.busy_warning()
    if warn:
        print("warning:", warn)
    with warnings.catch_warnings():
        if args.allow_insecure:
            warnings.simplefilter("ignore", fhe.InsecureParametersWarning)
        ctx = fhe.Context(args.preset, allow_insecure=args.allow_insecure)
    sk, _ = ctx.keygen()
    t0 = time.perf_counter()
    keys = BootstrapKeys.generate(ctx, sk)
    t_gen = time.perf_counter() - t0
    memory = keys.memory_bytes
    with tempfile.TemporaryDirectory(prefix="hemlp-shared-keys-") as d:
        shared, private = Path(d) / "keys" / "boot.shared", Path(d) / "boot.keys"
        t0 = time.perf_counter()
        write_shared_keys(EvalKeys("bench", bootstrap_keys=keys), shared, ctx)
        t_write = time.perf_counter() - t0
        private.write_bytes(keys.to_bytes(ctx))
        del keys
        size = shared.stat().st_size
        # the private copies after the mapped ones have measured: their allocations would evict the file's clean
        # pages from the page cache (the kernel reclaims those first), and the mapped processes' RSS with them
        rows = _holders("mapped", args.processes, shared, args) + _holders("private", args.private, private, args)
    kib = size / 1024
    mapped = [r for r in rows if r["mode"] == "mapped"]
    pss_sum = sum(r["map_Pss"] for r in mapped)
    table = [[r["mode"], f"{r['open_s']:.3f} s", f"{r['Rss'] / 2**20:.2f}", f"{r['Pss'] / 2**20:.2f}",
              f"{(r.get('Private_Clean', 0) + r.get('Private_Dirty', 0)) / 2**20:.2f}",
              f"{r.get('map_Rss', 0) / 2**20:.2f}", f"{r.get('map_Pss', 0) / 2**20:.2f}"] for r in rows]
    report.table(["process", "open / load", "RSS GiB", "PSS GiB", "private GiB", "file mapped GiB",
                  "file PSS GiB"], table,
                 title=f"{args.preset} bootstrapping keys: {memory / GIB:.2f} GiB in memory, shared file "
                       f"{size / GIB:.2f} GiB ({args.processes} processes map it: their PSS of it sums to "
                       f"{pss_sum / kib:.2f} copies)")
    if args.json:
        report.write_json(args.json, "shared_keys", dict(
            preset=args.preset, key_memory_bytes=memory, file_bytes=size, keygen_s=t_gen, write_s=t_write,
            processes=args.processes, private_processes=args.private, mapped_pss_copies=pss_sum / kib,
            rows=rows))
    return 0 if abs(pss_sum / kib - 1) < 0.05 else 1
