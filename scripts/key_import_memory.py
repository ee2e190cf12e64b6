"""The peak memory of importing evaluation keys (EvalKeys.load / from_bytes) in a fresh server process, per key kind,
against the factors of the server-memory estimate (hemlp.planner.resources: KEY_IMPORT_FACTOR,
BOOT_KEY_IMPORT_FACTOR).

    .venv/bin/python scripts/key_import_memory.py --preset test-N12-boot [--kinds rotation,boot,batch] [--json out]

A client subprocess makes the keys of each kind and saves them as one eval-keys file; a server subprocess makes
the context, then imports the file (mapped: load; read into memory after the baseline: from_bytes, an upload
body) and records its peak resident memory (VmHWM, reset after the baseline) less the baseline. Kinds: rotation
(relinearisation + rotation keys: the factor per serialised byte), boot (single bootstrapping keys alone: per byte
in memory), batch (batched bootstrapping keys alone, k = 2: per byte in memory).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

MB = 1e6

CLIENT = r"""
import json, sys, warnings
warnings.simplefilter("ignore")
from hemlp.fhe import Context
from hemlp.bootstrap import BatchBootstrapKeys, BootstrapKeys
from hemlp.runtime.artifacts import EvalKeys
preset, kind, path = sys.argv[1:4]
ctx = Context(preset, allow_insecure=True)
sk, _ = ctx.keygen()
relin = galois = bk = None
if kind == "rotation":
    relin = ctx.relin_key(sk)
    galois = ctx.rotation_keys(sk, [1 << i for i in range(8)] + [-1, -3, 5])
elif kind == "boot":
    bk = BootstrapKeys.generate(ctx, sk)
else:
    bk = BatchBootstrapKeys.generate(ctx, sk, 2)
ek = EvalKeys("m", relin, galois, None, bk)
ek.save(path, ctx)
print(json.dumps(dict(serialised=sum(k.nbytes for k in (relin, galois) if k is not None),
                      boot_memory=bk.memory_bytes if bk is not None else 0)))
"""

SERVER = r"""
import json, sys, types, warnings
from pathlib import Path
warnings.simplefilter("ignore")
from hemlp.fhe import Context
from hemlp.runtime.artifacts import EvalKeys
from hemlp.apps.bench.report import process_status_bytes as status
preset, path, how = sys.argv[1:4]
ctx = Context(preset, allow_insecure=True)
ctx.native
compiled = types.SimpleNamespace(model_id="m", context=ctx)
base = status("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
if how == "load":
    ek = EvalKeys.load(path, compiled)
else:
    ek = EvalKeys.from_bytes(Path(path).read_bytes(), compiled)
print(json.dumps(dict(peak=status("VmHWM") - base, resident=status("VmRSS") - base)))
"""


def run(code: str, *args) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(preset: str, kind: str, how: str = "load") -> dict:
    """One kind's import: peak and resident bytes over the server's baseline, and the factor the estimate uses
    (per serialised byte for rotation keys, per byte in memory for bootstrapping keys)."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "eval.keys"
        sizes = run(CLIENT, preset, kind, path)
        m = run(SERVER, preset, path, how)
        m.update(sizes, preset=preset, kind=kind, how=how, file=path.stat().st_size)
    per = m["serialised"] if kind == "rotation" else m["boot_memory"]
    m["factor"] = m["peak"] / per
    return m


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="test-N12-boot")
    ap.add_argument("--kinds", default="rotation,boot,batch")
    ap.add_argument("--how", default="load,bytes", help="load (mapped file), bytes (read into memory), or both")
    ap.add_argument("--json", help="write the measurements here")
    a = ap.parse_args()
    rows = []
    for kind in a.kinds.split(","):
        for how in a.how.split(","):
            r = measure(a.preset, kind, how)
            rows.append(r)
            print(f"{a.preset} {kind:8s} {how:5s}: file {r['file'] / MB:8.1f} MB, peak {r['peak'] / MB:8.1f} MB, "
                  f"resident {r['resident'] / MB:8.1f} MB, factor {r['factor']:.2f}", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
