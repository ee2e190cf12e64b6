"""The planner's bootstrapping pipelines, estimated vs measured: compile(bootstrap=True) of small models with the
bootstraps forced single (CtS-first, paired), batched (S2C-first, the planner's k) and 'auto' (batched and MaMBo
where the estimates say so), each run encrypted; per mode the plan's estimate, the run's median wall and CPU time
and the error against simulate (decrypted without the client's decryption noise: the pipelines' own error).

    python -m hemlp.bench lowering --json bench/lowering_small.json

The models are tiny on purpose (the insecure test presets: a run is seconds); what they check is that the
planner's ranking of the pipelines matches the measured one on this machine, not absolute speed.
"""
from __future__ import annotations

import sys
import time
import warnings

import numpy as np

from hemlp.apps.bench import report

HELP = "bootstrapping pipelines (single / batched / MaMBo): the planner's estimates against measured runs"

MODES = {"single": dict(mambo=False, batch_bootstrap=False), "batched": dict(mambo=False), "auto": {}}


def _models():
    import torch

    from hemlp.models import Square

    def mlp():
        torch.manual_seed(3)
        return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.SiLU(), torch.nn.Linear(8, 8), torch.nn.Tanh(),
                                   torch.nn.Linear(8, 3))

    def squares(dims, seed):
        torch.manual_seed(seed)
        layers = []
        for a, b in zip(dims, dims[1:]):
            layers += [torch.nn.Linear(a, b), Square()]
        return torch.nn.Sequential(*layers[:-1])

    def expanding():
        return squares((6, 16, 16, 16, 3), 6)

    def wide():
        return squares((6, 128, 128, 128, 3), 8)

    # name -> (model factory, compile options, batch size); layout (A) unless the options name another
    return {"mlp-N12": (mlp, dict(activation_degree=3, preset="test-N12-boot"), 32),
            "expanding-N10": (expanding, dict(preset="test-N10-boot"), 1024),
            # layout (A'): 128 features in 2 coefficient-encoded ciphertexts, refreshed one or two a call
            "wide-mlwe-N12": (wide, dict(preset="test-N12-boot", layout="mlwe"), 64)}


def run(cases: list, modes: list, repeats: int, threads: int, log=lambda m: None) -> dict:
    import hemlp

    models = _models()
    bad = [c for c in cases if c not in models] + [m for m in modes if m not in MODES]
    if bad:
        raise ValueError(f"unknown case(s) / mode(s) {bad}: cases {sorted(models)}, modes {sorted(MODES)}")
    rng = np.random.default_rng(11)
    x = rng.uniform(-1, 1, (48, 6))
    rows = []
    for name in cases:
        make, opts, bs = models[name]
        xt = rng.uniform(-0.6, 0.9, (bs, 6))
        for mode in modes:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cm = hemlp.compile(make(), x, batch_size=bs, bootstrap=True, allow_insecure=True,
                                   **dict(dict(layout="batch"), **opts), **MODES[mode])
                b = cm.plan.info["bootstrap"]
                sk, ek = cm.keygen()
                ct = cm.encrypt(xt, sk)
                out = cm.run(ct, ek, threads=threads)              # warm-up (plans, encoded diagonals)
                # the pipelines' own error: decrypted without the decryption noise a client adds
                y = cm.decrypt(out, sk, noise="none")
                wall, cpu = [], []
                for _ in range(repeats):
                    t0, c0 = time.perf_counter(), time.process_time()
                    cm.run(ct, ek, threads=threads)
                    wall.append(time.perf_counter() - t0)
                    cpu.append(time.process_time() - c0)
            err = float(np.max(np.abs(y - cm.simulate(xt))))
            row = dict(case=name, mode=mode, batch=bs, preset=cm.plan.info["preset"], layout=cm.layout,
                       kinds=sorted({f"{r['kind']} k={r['k']}" for r in b["placements"]}),
                       pipeline=b.get("lowering", ""), estimate_s=b["total_seconds"],
                       wall_s=float(np.median(wall)), cpu_s=float(np.median(cpu)), repeats=repeats,
                       bits_vs_simulate=float("inf") if err == 0 else -float(np.log2(err)))
            rows.append(row)
            log(f"{name} {mode}: {row['kinds']} estimate {row['estimate_s']:.3f} s, measured {row['cpu_s']:.3f} s CPU")
    return dict(threads=threads, rows=rows, notes=[])


def print_table(p: dict) -> None:
    out = []
    for name in dict.fromkeys(r["case"] for r in p["rows"]):
        rs = [r for r in p["rows"] if r["case"] == name]
        base = next((r for r in rs if r["mode"] == "single"), None)
        for r in rs:
            est = "" if base is None else report.fmt_ratio(base["estimate_s"] / r["estimate_s"])
            meas = "" if base is None else report.fmt_ratio(base["cpu_s"] / r["cpu_s"])
            out.append([name, r["mode"], ", ".join(r["kinds"]), report.fmt_seconds(r["estimate_s"]),
                        report.fmt_seconds(r["wall_s"]), report.fmt_seconds(r["cpu_s"]), est, meas,
                        report.fmt_bits(r["bits_vs_simulate"])])
    report.table(["case", "mode", "bootstraps", "estimate", "wall", "CPU", "est. vs single", "CPU vs single",
                  "bits vs simulate"], out, title=f"bootstrapping pipelines, {p['threads']} thread(s)")
    for note in p.get("notes", []):
        print(f"note: {note}")


def add_arguments(parser) -> None:
    parser.add_argument("--cases", default="mlp-N12,expanding-N10", help="also: wide-mlwe-N12 (layout A')")
    parser.add_argument("--modes", default="single,batched,auto")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", metavar="PATH")


def main(args) -> int:
    machine = report.machine_info()
    busy = report.busy_warning()
    payload = run(args.cases.split(","), args.modes.split(","), args.repeats, args.threads,
                  log=lambda m: print(m, file=sys.stderr, flush=True))
    return report.publish(payload, "lowering", args.json, machine, busy, print_table)
