"""Encrypted batch files: how long a client's batch takes to serialise, save, load and deserialise.

    python -m hemlp.bench files [--batch 8192] [--preset N14-d6] [--repeats 3] --json PATH

The compiled MLP 784-128-64-10 (x², layout "batch"), one batch of `--batch` random images encrypted with the
secret key (seeded ciphertexts, as the client writes them): EncryptedBatch.to_bytes / from_bytes in memory and
save / load through a file in a temporary folder, each the median of `--repeats` runs after one warm-up. Every
loaded batch is checked to be the same ciphertexts (bytes) as the one saved.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from hemlp.apps.bench import measure, report, square_mlp

HELP = "encrypted batch files: serialise / save / load / deserialise times of a client's batch"


def add_arguments(p) -> None:
    p.add_argument("--batch", type=int, default=8192)
    p.add_argument("--preset", default="N14-d6")
    p.add_argument("--dims", default="784,128,64,10", help="layer widths (the input width sets the file size)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--allow-insecure", action="store_true")
    p.add_argument("--json", default=None)


def main(args) -> int:
    import warnings

    import hemlp
    from hemlp import fhe
    from hemlp.runtime.artifacts import EncryptedBatch

    warn = report.busy_warning()
    if warn:
        print("warning:", warn)
    dims = [int(v) for v in args.dims.split(",")]
    x = np.random.default_rng(0).uniform(0, 1, (args.batch, dims[0]))
    with warnings.catch_warnings():
        if args.allow_insecure:
            warnings.simplefilter("ignore", fhe.InsecureParametersWarning)
        cm = hemlp.compile(square_mlp(dims), x, batch_size=args.batch, preset=args.preset,
                           allow_insecure=args.allow_insecure, layout="batch")
        sk, _ = cm.keygen()
        ct = cm.encrypt(x, sk)
    want = [c.to_bytes() for c in ct.ctm.cts]

    def same(b) -> bool:
        return [c.to_bytes() for c in b.ctm.cts] == want

    data = ct.to_bytes()
    ok = True
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "x.ct"
        # the file path first (what a client and a server do), then the in-memory conversions; the order matters on
        # a VM where first touches of fresh pages are slow: an earlier step's freed memory serves the next one
        ops = {"save": measure(lambda: ct.save(path), args.repeats)}
        ok &= same(EncryptedBatch.load(path, cm)) and path.stat().st_size == len(data)
        ops["load"] = measure(lambda: EncryptedBatch.load(path, cm), args.repeats)
        ops["to_bytes"] = measure(ct.to_bytes, args.repeats)
        ops["from_bytes"] = measure(lambda: EncryptedBatch.from_bytes(data, cm), args.repeats)
        ok &= same(EncryptedBatch.from_bytes(data, cm))
    size = len(data)
    rows = [[name, report.fmt_seconds(r["median_s"]), f"{size / r['median_s'] / 2**20:.0f} MiB/s"]
            for name, r in ops.items()]
    report.table(["operation", "median", "throughput"], rows,
                 title=f"EncryptedBatch of {args.batch} x {dims[0]} ({len(ct.ctm.cts)} ciphertexts, {cm.preset}, "
                       f"{size / 2**20:.1f} MiB), median of {args.repeats}; loaded = saved: {'yes' if ok else 'NO'}")
    if args.json:
        report.write_json(args.json, "files", dict(batch=args.batch, dims=dims, preset=cm.preset, bytes=size,
                                                   ciphertexts=len(ct.ctm.cts), ops=ops, round_trip_equal=ok))
    return 0 if ok else 1
