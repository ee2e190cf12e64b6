"""Layout (P)'s server memory, measured phase by phase against the plan's estimate term by term
(hemlp.planner.resources.server_memory; docs/models.md, "Plans that fit the machine").

    .venv/bin/python scripts/packed_memory.py --cases cnn-N12,resnet8-N12 [--keygen] [--trim] [--json out.json]

Each case is compiled here (its estimate read before any key exists). By default a client subprocess makes the keys
and the input and saves them, and the server, a fresh subprocess, imports them; with --keygen the server makes its
own keys (nothing imported: its peak is the plan's running figure). The server records its resident memory (VmRSS)
after each phase (imports, model, keys, input, prepare, bootstrapper, run) and the peak (VmHWM, reset before each
phase and each step of the run); --trim runs it once more returning the heap's free pages after each phase and step
(malloc_trim), which shows what each holds rather than what the heap keeps. Mind the peaks: a bootstrapped
test-N15-boot case importing its keys peaks at ~14 GB, N16-boot ones at more than 24 GB (run those with --keygen).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch

import hemlp
from hemlp.layouts.boot_choice import boot_key_bytes
from hemlp.planner import resources

MB = 1e6


class Block(torch.nn.Module):
    """A ResNet basic block: conv-relu-conv + shortcut (a strided 1x1 conv when the shape changes), relu."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = torch.nn.Conv2d(cin, cout, 3, stride=stride, padding=1)
        self.c2 = torch.nn.Conv2d(cout, cout, 3, padding=1)
        self.short = None if stride == 1 and cin == cout else torch.nn.Conv2d(cin, cout, 1, stride=stride)

    def forward(self, x):
        h = self.c2(torch.relu(self.c1(x)))
        return torch.relu(h + (x if self.short is None else self.short(x)))


class ResNet(torch.nn.Module):
    """ResNet-20's shape with `blocks` basic blocks per stage (3: ResNet-20) and widths w, 2w, 4w on hw x hw."""

    def __init__(self, blocks=3, w=16, hw=32):
        super().__init__()
        torch.manual_seed(0)
        self.stem = torch.nn.Conv2d(3, w, 3, padding=1)
        layers, cin = [], w
        for cout, stride in ((w, 1), (2 * w, 2), (4 * w, 2)):
            for b in range(blocks):
                layers.append(Block(cin, cout, stride if b == 0 else 1))
                cin = cout
        self.blocks = torch.nn.Sequential(*layers)
        self.pool = torch.nn.AvgPool2d(hw // 4)
        self.fc = torch.nn.Linear(4 * w, 10)
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, torch.nn.Conv2d):
                    m.weight.mul_(0.5)
        self.eval()

    def forward(self, x):
        h = self.blocks(torch.relu(self.stem(x)))
        return self.fc(self.pool(h).flatten(1))


class ConvNet(torch.nn.Module):
    """A few convs with ReLUs (deep enough for a bootstrap at a boot preset), then a linear layer."""

    def __init__(self, c=4, hw=16, convs=4):
        super().__init__()
        torch.manual_seed(0)
        self.convs = torch.nn.ModuleList([torch.nn.Conv2d(3 if i == 0 else c, c, 3, padding=1) for i in range(convs)])
        self.fc = torch.nn.Linear(c * hw * hw, 10)
        self.eval()

    def forward(self, x):
        for cv in self.convs:
            x = torch.relu(cv(x))
        return self.fc(x.flatten(1))


#: name -> (model, input shape, compile options)
CASES = {
    "cnn-N12": (lambda: ConvNet(4, 16, 4), (3, 16, 16), dict(preset="test-N12-boot", activation_degree=7)),
    "cnn-N15": (lambda: ConvNet(8, 32, 4), (3, 32, 32), dict(preset="test-N15-boot", activation_degree=7)),
    "resnet8-N12": (lambda: ResNet(1, 4, 16), (3, 16, 16), dict(preset="test-N12-boot", activation_degree=7)),
    "resnet8-N15": (lambda: ResNet(1, 16, 32), (3, 32, 32), dict(preset="test-N15-boot", activation_degree=7)),
    "resnet8w8-N15": (lambda: ResNet(1, 8, 32), (3, 32, 32), dict(preset="test-N15-boot", activation_degree=7)),
    "cnn-N16": (lambda: ConvNet(8, 32, 2), (3, 32, 32), dict(preset="N16-boot", activation_degree=7)),
    "cnn4-N16": (lambda: ConvNet(1, 16, 4), (3, 16, 16), dict(preset="N16-boot", activation_degree=7)),
    "cifar-N14": (None, (3, 32, 32), dict(preset="N14-d6")),
}

PROBE = r"""
import ctypes, json, os, sys, time, warnings
warnings.simplefilter("ignore")
TRIM = os.environ.get("PMEM_TRIM") == "1"
libc = ctypes.CDLL("libc.so.6")
from hemlp.apps.bench.report import process_status_bytes as status
def reset():
    if TRIM:
        libc.malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
rec = dict(phases=[], steps=[])
def phase(name):
    rec["phases"].append(dict(name=name, rss=status("VmRSS"), hwm=status("VmHWM")))
    reset()
"""

CLIENT = PROBE + r"""
import numpy as np, hemlp
import hemlp.layouts, hemlp.runtime.artifacts, hemlp.bootstrap
phase("imports")
d = sys.argv[1]
cm = hemlp.load(d + "/model", allow_insecure=True)
cm.context
x = np.load(d + "/x.npy")
phase("model")
sk, ek = cm.keygen()
phase("keygen")
ek.save(d + "/eval.keys", cm.context)
phase("save keys")
cm.encrypt(x, sk).save(d + "/x.ct")
phase("encrypt")
print(json.dumps(rec))
"""

SERVER = PROBE + r"""
import numpy as np
import hemlp
from hemlp.layouts.packed import PackedRunner, program_bytes
import hemlp.layouts, hemlp.runtime.artifacts, hemlp.bootstrap   # the modules loading a model imports
hemlp.set_num_threads(1)
phase("imports")
d = sys.argv[1]
cm = hemlp.load(d + "/model", allow_insecure=True)
lay = cm.layout_impl
prog = lay.program
cm.context
phase("model")
if os.environ.get("PMEM_KEYGEN") == "1":     # the keys made in this process: no import
    sk, ek = cm.keygen()
    phase("keys")
    from hemlp.runtime.artifacts import EncryptedBatch     # the layout's encrypt: no plaintext range pass
    xin = np.load(d + "/x.npy")
    ct = EncryptedBatch(cm.model_id, lay.encrypt(cm.context, xin, sk, cm.top_level), len(xin), cm.input_shape, "input")
    del sk
    phase("input")
else:
    ek = cm.load_eval_keys(d + "/eval.keys")
    phase("keys")
    ct = cm.load_encrypted(d + "/x.ct")
    phase("input")
cm.prepare()
phase("prepare")
if lay.bootstrapped:
    boot = lay.bootstrapper(cm.context, ek.bootstrap_keys)
    phase("bootstrapper")
run = dict(PackedRunner.RUN)
def wrap(op, f):
    def g(self, s, *a):
        reset()
        r0 = status("VmRSS")
        y = f(self, s, *a)
        rec["steps"].append(dict(step=s.out, op=str(op), rss_before=r0, rss=status("VmRSS"), hwm=status("VmHWM")))
        return y
    return g
for op, f in run.items():
    if callable(f):
        PackedRunner.RUN[op] = wrap(op, f)
t0 = time.process_time()
y = cm.run(ct, ek)
rec["run_s"] = time.process_time() - t0
phase("run")
rec["peak_rss"] = max([p["hwm"] for p in rec["phases"]] + [s["hwm"] for s in rec["steps"]])
runner = lay.runner(cm.context, None)
rec["cached_bytes"] = runner.cached_bytes
rec["dft_bytes"] = (boot.cts_plan.nbytes + boot.stc_plan.nbytes) if lay.bootstrapped else 0
bk = ek.bootstrap_keys
rec["key_memory_bytes"] = dict(
    relin=ek.relin_key.memory_bytes if ek.relin_key is not None else 0,
    rotation=ek.galois_keys.memory_bytes if ek.galois_keys is not None else 0,
    rotation_nbytes=ek.galois_keys.nbytes if ek.galois_keys is not None else 0,
    boot=bk.memory_bytes if bk is not None else 0)
rec["program_bytes"] = program_bytes(prog)
print(json.dumps(rec))
"""


def build(name):
    make, shape, opts = CASES[name]
    if make is None:
        from hemlp.models import build as build_model

        return build_model("cifar-cnn", shape, 10, seed=1).eval(), shape, dict(opts, batch_size=16), 16
    return make(), shape, dict(opts, batch_size=1, bootstrap=True, layout="packed"), 1


def measure(name: str, tmp: Path, server_memory=None, trim: bool = False, keygen: bool = False) -> dict:
    net, shape, opts, batch = build(name)
    xc = np.random.default_rng(0).uniform(-1, 1, (8,) + tuple(shape))
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = hemlp.compile(net, xc, allow_insecure=True, server_memory=server_memory, **opts)
    compile_s = time.perf_counter() - t0
    lay = cm.layout_impl
    res = cm.plan.resources
    boot = boot_key_bytes(lay)
    terms = dict(resources.server_memory(lay, boot).to_json(), **lay.memory_parts())
    # the estimate before this model (#33): 40 MiB, 5x the serialised keys, the bootstrapping keys, the input twice,
    # the cache and the values, summed
    old = (40 * 2 ** 20 + 5 * res.eval_key_bytes + boot + terms["input"] + lay.prepared_bytes()
           + lay.memory_parts()["values"])
    d = tmp / name
    d.mkdir(parents=True, exist_ok=True)
    cm.save(d / "model")
    np.save(d / "x.npy", xc[:batch])
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", PYTHONPATH=str(Path(__file__).parent.parent))
    def child(code, trim=False, keygen=False):
        p = subprocess.run([sys.executable, "-c", code, str(d)], capture_output=True, text=True,
                           env=dict(env, PMEM_TRIM="1" if trim else "0", PMEM_KEYGEN="1" if keygen else "0"))
        if p.returncode:
            raise RuntimeError(p.stderr[-3000:])
        return json.loads(p.stdout.strip().splitlines()[-1])

    if keygen:          # one process: keys made in it, never imported
        client = dict(phases=[])
        rec = child(SERVER, keygen=True)
        live = child(SERVER, trim=True, keygen=True) if trim else None
        keys_serialised = 0
    else:
        client = child(CLIENT)
        rec = child(SERVER)
        live = child(SERVER, trim=True) if trim else None
        keys_serialised = (d / "eval.keys").stat().st_size
    return dict(case=name, preset=cm.preset, compile_s=compile_s, estimate=res.server_memory_bytes, terms=terms,
                estimate_run=res.run_memory_bytes, estimate_import=res.import_memory_bytes, old_estimate=old,
                keys_serialised=keys_serialised, client=client, live=live, keygen=keygen, **rec)


def show_phases(phases, what):
    prev = 0
    for ph in phases:
        print(f"   {what} {ph['name']:<13} rss {ph['rss'] / MB:8.0f} (+{(ph['rss'] - prev) / MB:7.0f})  "
              f"peak {ph['hwm'] / MB:8.0f}")
        prev = ph["rss"]


def show(r: dict) -> None:
    est = r["estimate_run"] if r["keygen"] else r["estimate"]     # keys made in process: nothing imported
    print(f"== {r['case']} ({r['preset']}{', keys made in process' if r['keygen'] else ''}): measured peak "
          f"{r['peak_rss'] / MB:.0f} MB, estimate {est / MB:.0f} MB (ratio {est / r['peak_rss']:.2f}; importing "
          f"{r['estimate_import'] / MB:.0f}, running {r['estimate_run'] / MB:.0f}; old estimate "
          f"{r['old_estimate'] / MB:.0f}), run {r['run_s']:.1f} s CPU")
    print("   estimate terms: " + ", ".join(f"{k} {v / MB:.0f}" for k, v in r["terms"].items()))
    show_phases(r["client"]["phases"], "client")
    show_phases(r["phases"], "server")
    if r["live"]:
        show_phases(r["live"]["phases"], "trimmed")
        top = sorted(r["live"]["steps"], key=lambda s: -s["hwm"])[:3]
        for s in top:
            print(f"   trimmed step {s['step']:<22} {s['op']:<10} rss before {s['rss_before'] / MB:8.0f} after "
                  f"{s['rss'] / MB:8.0f} peak {s['hwm'] / MB:8.0f} (+{(s['hwm'] - s['rss_before']) / MB:.0f})")
    top = sorted(r["steps"], key=lambda s: -s["hwm"])[:4]
    for s in top:
        print(f"   step {s['step']:<22} {s['op']:<10} rss before {s['rss_before'] / MB:8.0f} after "
              f"{s['rss'] / MB:8.0f} peak {s['hwm'] / MB:8.0f} (+{(s['hwm'] - s['rss_before']) / MB:.0f})")
    print(f"   cached diagonals {r['cached_bytes'] / MB:.0f} MB, bootstrap DFT plaintexts {r['dft_bytes'] / MB:.0f} MB,"
          f" keys in memory " + ", ".join(f"{k} {v / MB:.0f}" for k, v in r["key_memory_bytes"].items())
          + f", key file {r['keys_serialised'] / MB:.0f} MB, program diagonals {r['program_bytes'] / MB:.0f} MB")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="cnn-N12")
    ap.add_argument("--server-memory", type=float, default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--keygen", action="store_true", help="the server makes the keys itself (no key import; the "
                                                         "client subprocess is skipped)")
    ap.add_argument("--trim", action="store_true", help="also run the server trimming the heap after every phase "
                                                       "(malloc_trim: what is live, phase by phase)")
    ap.add_argument("--keep", default=None, help="keep the case directories (model, keys, input) under this folder")
    a = ap.parse_args()
    out = []
    with tempfile.TemporaryDirectory(prefix="hemlp-pmem-") as tmp:
        for name in a.cases.split(","):
            r = measure(name, Path(a.keep or tmp), a.server_memory, a.trim, a.keygen)
            show(r)
            out.append(r)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
