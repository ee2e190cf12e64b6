"""The plan's estimates against measurements: key bytes, upload bytes, server peak memory, keygen / encrypt / run.

    python -m hemlp.bench estimates [--quick] [--json bench/estimates.json]

For each model (the tests' small models in every layout: a CNN in layout (A), an MLP in (P), an MLP in (A′),
an MLP with encrypted weights in (C); and the CIFAR-10 CNN at batch 16 in (P), 128-bit), ``compiled.plan.resources``
is read right after compile — before any key exists — then the client's keygen and encrypt run here and the server
runs in a fresh process (loads the directory, keys and ciphertexts, prepares (encodes the weights once) and runs one
batch), which reports its peak resident memory; prepare and run are compared separately (prepare times both under
50 ms are not compared). Times are CPU seconds on one thread (hemlp.set_num_threads(1), as the estimates assume;
keygen and encrypt the median of 3 after a warm-up), so a loaded machine changes them less than wall-clock time;
the table prints estimate, measured and their ratio, and ``--check`` exits 1 when a ratio is outside [1/2, 2].
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from hemlp.apps.bench import report

HELP = "the plan's estimates (key / upload bytes, server memory, keygen / encrypt / run) against measurements"

#: (name, layout options, model spec, batch): the tests' models (tests/compiler/conftest.py, tests/layouts)
CASES = [
    ("cnn-batch", dict(layout="batch"), ("cnn", (1, 8, 8)), 8),
    ("mlp-packed", dict(layout="packed"), ("mlp", (64, 32, 10)), 2),
    ("mlp-mlwe", dict(layout="mlwe", preset="test-N12-d18"), ("mlp", (64, 32, 16, 10)), 300),
    ("mlp-blocked", dict(encrypted_weights=True), ("mlp", (16, 8, 4)), 4),
    # the README's CIFAR-10 CNN (hemlp.models.CifarCNN, 32x32x3) at batch 16, 128-bit: layout (P), its convs from their
    # nonzero diagonals (242 weight diagonals, 44 rotation keys; the server peaks at ~1 GB)
    ("cifar-cnn-packed", dict(preset="N14-d6"), ("cifar-cnn", (3, 32, 32)), 16),
]
QUICK = ("cnn-batch", "mlp-packed")
#: prepare() times both under this are not compared (the layouts (A) and (C) encode nothing in advance)
MIN_PREPARE_SECONDS = 0.05

SERVER = r"""
import json, sys, time, warnings
warnings.simplefilter("ignore")
import hemlp
from hemlp.runtime.artifacts import EncryptedBatch
hemlp.set_num_threads(1)
d = sys.argv[1]
cm = hemlp.load(d + "/model", allow_insecure=True)
ek = cm.load_eval_keys(d + "/eval.keys")
ct = cm.load_encrypted(d + "/x.ct")
from hemlp.layouts.blocked import EncryptedWeights
weights = EncryptedWeights.load(d + "/weights.enc", cm) if len(sys.argv) > 2 else None
t0 = time.process_time(); cm.prepare(); prep = time.process_time() - t0
t0 = time.process_time(); y = cm.run(ct, ek, weights=weights); run = time.process_time() - t0
# VmHWM: this process's peak (ru_maxrss would include the parent's memory at fork time)
from hemlp.apps.bench.report import process_status_bytes
hwm = process_status_bytes("VmHWM")
print(json.dumps(dict(prepare_s=prep, run_s=run, peak_rss=hwm)))
"""


def add_arguments(p) -> None:
    p.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)} (seconds)")
    p.add_argument("--cases", help="comma-separated case names (default: all): " + ", ".join(c[0] for c in CASES))
    p.add_argument("--check", action="store_true", help="exit 1 when an estimate is off by more than 2x")
    p.add_argument("--json", default=None, help="write the results here")


def case_model(spec):
    import torch

    from hemlp.apps.bench import square_mlp
    from hemlp.models.layers import activation

    kind, dims = spec
    if kind == "mlp":
        return square_mlp(dims)
    if kind == "cifar-cnn":
        from hemlp.models import build

        return build("cifar-cnn", dims, 10, seed=1).eval()
    torch.manual_seed(1)
    c, h, w = dims
    return torch.nn.Sequential(torch.nn.Conv2d(c, 3, 3, padding=1), torch.nn.BatchNorm2d(3), activation("square"),
                               torch.nn.AvgPool2d(2), torch.nn.Conv2d(3, 4, 3, stride=2, padding=1),
                               activation("square"), torch.nn.Flatten(), torch.nn.Linear(4 * (h // 4) * (w // 4), 10)
                               ).eval()


def compile_case(opts, spec, batch):
    """(compiled model, input batch) of a case: the model compiled for `batch` samples of seeded inputs."""
    import hemlp

    shape = (spec[1][0],) if spec[0] == "mlp" else spec[1]
    x = np.random.default_rng(3).uniform(-1, 1, (batch,) + tuple(shape))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return hemlp.compile(case_model(spec), x, batch_size=batch, allow_insecure=True, **opts), x


def _cpu(fn, repeats: int = 3):
    """(fn's result, median CPU seconds of `repeats` calls after one untimed warm-up: the process's one-time
    start-up costs (thread pool, tables) are not the operation's)."""
    fn()
    times, out = [], None
    for _ in range(repeats):
        t0 = time.process_time()
        out = fn()
        times.append(time.process_time() - t0)
    return out, sorted(times)[len(times) // 2]


def measure_case(name, opts, spec, batch, tmp: Path) -> dict:
    import hemlp

    cm, x = compile_case(opts, spec, batch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = cm.plan.resources            # read before any key exists
        cm.context                          # the context is built once, before keygen is timed
        hemlp.set_num_threads(1)
        (sk, ek), keygen_s = _cpu(cm.keygen)
        ct, encrypt_s = _cpu(lambda: cm.encrypt(x, sk))
        d = tmp / name
        d.mkdir()
        cm.save(d / "model")
        ek.save(d / "eval.keys")
        ct.save(d / "x.ct")
        extra = []
        if cm.layout_impl.encrypted_weights:
            cm.encrypt_weights(sk).save(d / "weights.enc")
            extra = ["weights"]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-c", SERVER, str(d), *extra], capture_output=True, text=True, env=env,
                       timeout=1800)
    if p.returncode != 0:
        raise RuntimeError(f"the server process of {name} failed:\n{p.stderr[-3000:]}")
    server = json.loads(p.stdout.strip().splitlines()[-1])
    measured = dict(eval_key_bytes=len(ek.to_bytes()), upload_bytes=len(ct.to_bytes()),
                    server_memory_bytes=server["peak_rss"], keygen_seconds=keygen_s, encrypt_seconds=encrypt_s,
                    prepare_seconds=server["prepare_s"], run_seconds=server["run_s"])
    estimated = {k: (est.eval_key_bytes if k == "eval_key_bytes" else getattr(est, k)) for k in measured}
    return dict(case=name, layout=cm.layout, preset=cm.preset, batch=batch, estimated=estimated, measured=measured,
                ratio={k: ratio(estimated[k], measured[k], k) for k in measured})


def ratio(est, meas, quantity: str):
    """estimate / measurement; None when there is nothing to compare: no estimate, or a prepare() with nearly
    nothing to encode (estimate and measurement both under MIN_PREPARE_SECONDS)."""
    if est is None or not meas:
        return None
    if quantity == "prepare_seconds" and est < MIN_PREPARE_SECONDS and meas < MIN_PREPARE_SECONDS:
        return None
    return est / meas if est else 0.0


def main(args) -> int:
    names = [c[0] for c in CASES]
    want = QUICK if args.quick else (args.cases.split(",") if args.cases else names)
    bad = sorted(set(want) - set(names))
    if bad:
        raise SystemExit(f"unknown case(s) {bad}; cases: {names}")
    warn = report.busy_warning()
    if warn:
        print("warning:", warn)
    results = []
    with tempfile.TemporaryDirectory(prefix="hemlp-estimates-") as tmp:
        for name, opts, spec, batch in CASES:
            if name in want:
                results.append(measure_case(name, opts, spec, batch, Path(tmp)))
    rows, off = [], []
    for r in results:
        for k, m in r["measured"].items():
            e, q = r["estimated"][k], r["ratio"][k]
            fmt = (lambda v: "n/a" if v is None else f"{v:.3g} s") if k.endswith("seconds") else \
                (lambda v: "n/a" if v is None else f"{v / 1e6:.3g} MB")
            rows.append([r["case"], k, fmt(e), fmt(m), "n/a" if q is None else f"{q:.2f}"])
            if q is not None and not 0.5 <= q <= 2.0:
                off.append(f"{r['case']} {k}: ratio {q:.2f}")
    report.table(["model", "quantity", "estimate", "measured", "est/meas"], rows,
                 title="plan estimates (before keygen) vs measured; times: CPU seconds on one thread")
    if off:
        print("off by more than 2x: " + "; ".join(off))
    if args.json:
        report.write_json(args.json, "estimates", dict(results=results, off_by_more_than_2x=off))
    return 1 if (off and args.check) else 0
