"""RNS-CKKS core micro-benchmarks: NTT, encode, encrypt, decrypt, ct×ct, ct×pt, rotations, rescale, precision.

    python -m hemlp.bench core --preset N14-d6 [--threads 1,2] [--repeats R] [--simd scalar,avx2,avx512] --json PATH

Times are medians over R repeats after one warm-up, per thread count (``hemlp.set_num_threads``).
Precision bits = -log2(max abs error) over all slots for uniform [-1, 1] inputs.  The op keys
(``ntt``, ``encode``, ...) are the ones ``scripts/bench_peers.py`` uses for the peers too; ``encode_level0``,
``mul_plain_add``, ``rescale`` and ``touch_256mib`` (PLAN_OPS) are hemlp's only: the planner's unit costs
(hemlp.planner.layouts.unit_costs).

The SIMD kernels are fixed per process (``HEMLP_SIMD``), so ``--simd`` runs the benchmark once per
listed path in a child process and prints them side by side with the speed-up over the first one;
the JSON then holds every run under ``simd_runs`` and the run of the CPU's best path under
``results`` (what a plain run reports).
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile

from hemlp.apps.bench import int_list, measure, report

HELP = "RNS-CKKS core ops (NTT, encode/encrypt/decrypt, ct x ct, ct x pt, rotations, rescale) and precision"

#: (json key, table label) — the same keys in hemlp's and the peers' JSON
OPS = [
    ("ntt", "NTT (one limb)"),
    ("encode", "encode"),
    ("encrypt", "encrypt (pk)"),
    ("decrypt", "decrypt + decode"),
    ("mul", "ct x ct + relin + rescale"),
    ("rotate", "rotate (1 step)"),
    ("rotate_hoisted8", "8 hoisted rotations"),
]
#: hemlp-only ops (not in the peers' JSON): the planner's unit costs of the diagonal products (hemlp.planner.layouts)
PLAN_OPS = [
    ("encode_level0", "encode at level 0 (one limb)"),
    ("mul_plain_add", "ct x pt + accumulate"),
    ("rescale", "rescale"),
    ("touch_256mib", "write 256 MiB of new memory"),
]
PRECISION = [("mult_bits", "precision mult (bits)"), ("rotate_bits", "precision rotate (bits)")]
ROT_STEPS = list(range(1, 9))


def bits(err: float) -> float:
    return math.inf if err == 0 else -math.log2(err)


class HemlpCore:
    """Every call into hemlp's CKKS API goes through here: an API change is a one-line fix."""

    def __init__(self, preset: str, allow_insecure: bool = False):
        import hemlp
        from hemlp import fhe

        self.hemlp, self.ckks = hemlp, fhe
        self.notes: list[str] = []
        self.params = fhe.Params.preset(preset)
        self.ctx = fhe.Context(self.params, allow_insecure=allow_insecure)
        self.sk, self.pk = self.ctx.keygen()
        self.rlk = self.ctx.relin_key(self.sk)
        self.gks = self.ctx.rotation_keys(self.sk, ROT_STEPS)
        self.slots = int(self.ctx.slots)
        self.N = int(self.ctx.N)
        self._encrypt_takes_plaintext = None

    # --- threads
    def set_threads(self, n: int) -> None:
        self.hemlp.set_num_threads(n)

    def get_threads(self) -> int:
        return int(self.hemlp.get_num_threads())

    # --- ops
    def encode(self, x):
        return self.ctx.encode(x)

    def encode_level0(self, x):
        """x encoded over the first limb alone: with ``encode`` at the fresh level, it splits an encoding's cost
        into its slot FFT (any level) and its residues (per limb): hemlp.planner.layouts.encode_seconds."""
        return self.ctx.encode(x, level=0, scale=float(self.ctx.modulus(0)))

    def encrypt(self, pt, x):
        """Public-key encryption of an encoded plaintext when the API takes one, else of ``x``."""
        if self._encrypt_takes_plaintext is None:
            try:
                self.ctx.encrypt(pt, self.pk)
                self._encrypt_takes_plaintext = True
            except (TypeError, ValueError) as e:
                self._encrypt_takes_plaintext = False
                self.notes.append(f"ctx.encrypt(Plaintext, pk) not accepted ({type(e).__name__}: "
                                  f"{e}); encrypt timing includes encode")
        return self.ctx.encrypt(pt if self._encrypt_takes_plaintext else x, self.pk)

    def decrypt(self, ct):
        return self.ctx.decrypt(ct, self.sk)

    def mul(self, a, b):
        return self.ctx.mul(a, b, relin_key=self.rlk, rescale=True)  # ModDown fused with the rescale

    def rotate(self, ct, k: int):
        return self.ctx.rotate(ct, k, self.gks)

    def plain_at(self, ct, x):
        """x encoded at ct's level and scale q_level (a weight diagonal: the product rescales to ct's scale)."""
        return self.ctx.encode(x, level=ct.level, scale=float(self.ctx.modulus(ct.level)))

    def mul_plain_add(self, acc, ct, pt):
        """acc + ct * pt: one term of a diagonal (BSGS) matrix-vector product, as layout (P) runs it."""
        return self.ctx.add(acc, self.ctx.mul(ct, pt))

    def rescale(self, ct):
        return self.ctx.rescale(ct)

    def rotate_hoisted(self, ct, steps):
        return self.ctx.rotate_hoisted(ct, list(steps), self.gks)

    def ntt(self, arr):
        return self.ctx.ntt(arr, limb=0)

    def intt(self, arr):
        return self.ctx.intt(arr, limb=0)

    # --- description
    def first_modulus(self):
        """q_0 if the API exposes it (for NTT inputs), else None."""
        for obj in (self.ctx, self.params):
            for name in ("moduli", "q", "q_moduli", "primes", "coeff_moduli"):
                v = getattr(obj, name, None)
                if callable(v):
                    try:
                        v = v()
                    except TypeError:
                        v = None
                try:
                    if v is not None and len(v) > 0:
                        return int(v[0])
                except TypeError:
                    continue
        return None

    def describe(self, preset: str) -> dict:
        info = {"name": preset, "N": self.N, "slots": self.slots}
        try:
            for d in self.ckks.Params.presets():
                if d.get("name") == preset:
                    info.update(d)
        except Exception as e:  # noqa: BLE001 - description only
            info["presets_error"] = f"{type(e).__name__}: {e}"
        for name in ("max_level", "default_scale"):
            try:
                v = getattr(self.ctx, name)
                info[name] = v.item() if hasattr(v, "item") else v
            except Exception:  # noqa: BLE001
                pass
        try:
            info["repr"] = repr(self.params)
        except Exception:  # noqa: BLE001
            pass
        return info


def _real(v, n):
    import numpy as np
    v = np.asarray(v)
    if np.iscomplexobj(v):
        v = v.real
    return v[:n].astype(np.float64)


def touch_new_memory(total: int = 2 ** 28) -> None:
    """Write `total` bytes of memory new to the process (an anonymous mapping, so every page faults in fresh
    whatever the allocator kept from earlier calls): what a server's prepare() pays on top of encoding for the
    weight diagonals it keeps (the planner's ``touch`` unit cost)."""
    import mmap

    import numpy as np

    m = mmap.mmap(-1, total)
    a = np.frombuffer(m, dtype=np.uint64)
    a.fill(1)
    del a
    m.close()


def run_core(preset: str, threads: list[int], repeats: int, seed: int = 1,
             allow_insecure: bool = False, log=print) -> dict:
    """Run the core benchmark and return the JSON payload (without the machine envelope)."""
    import numpy as np

    h = HemlpCore(preset, allow_insecure=allow_insecure)
    n = h.slots
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, n)
    y = rng.uniform(-1, 1, n)

    q0 = h.first_modulus()
    bound = q0 if q0 else (1 << 28)
    ntt_in = rng.integers(0, bound, h.N, dtype=np.uint64)

    threads_before = h.get_threads()
    results = []
    try:
        for t in threads:
            h.set_threads(t)
            log(f"[core] preset {preset}: N={h.N}, threads={t}, repeats={repeats} ...")
            pt_x, pt_y = h.encode(x), h.encode(y)
            ct_x = h.encrypt(pt_x, x)
            ct_y = h.encrypt(pt_y, y)
            pt_w = h.plain_at(ct_x, y)
            acc = h.ctx.mul(ct_x, pt_w)   # a partial sum of products (their scale: Delta q_level)
            ops = {
                "ntt": measure(lambda: h.ntt(ntt_in), repeats),
                "encode": measure(lambda: h.encode(x), repeats),
                "encode_level0": measure(lambda: h.encode_level0(x), repeats),
                "encrypt": measure(lambda: h.encrypt(pt_x, x), repeats),
                "decrypt": measure(lambda: h.decrypt(ct_x), repeats),
                "mul": measure(lambda: h.mul(ct_x, ct_y), repeats),
                "rotate": measure(lambda: h.rotate(ct_x, 1), repeats),
                "rotate_hoisted8": measure(lambda: h.rotate_hoisted(ct_x, ROT_STEPS), repeats),
                "mul_plain_add": measure(lambda: h.mul_plain_add(acc, ct_x, pt_w), repeats),
                "rescale": measure(lambda: h.rescale(ct_y), repeats),
                "touch_256mib": measure(touch_new_memory, repeats),
            }
            ops["ntt"]["note"] = "ctx.ntt on one limb (limb 0), new array returned"

            prod = _real(h.decrypt(h.mul(ct_x, ct_y)), n)
            rot = _real(h.decrypt(h.rotate(ct_x, 1)), n)
            left, right = np.abs(rot - np.roll(x, -1)).max(), np.abs(rot - np.roll(x, 1)).max()
            if right < left and "rotation" not in " ".join(h.notes):
                h.notes.append("rotate(ct, 1) matches np.roll(x, +1) (right rotation), not the "
                               "left rotation OpenFHE/SEAL use; precision measured that way")
            hro = h.rotate_hoisted(ct_x, ROT_STEPS)
            sign = -1 if left <= right else 1
            h_err = max(float(np.abs(_real(h.decrypt(c), n) - np.roll(x, sign * k)).max())
                        for k, c in zip(ROT_STEPS, hro))
            ntt_ok = bool(np.array_equal(np.asarray(h.intt(h.ntt(ntt_in))), ntt_in))
            precision = {
                "mult_bits": bits(float(np.abs(prod - x * y).max())),
                "rotate_bits": bits(float(min(left, right))),
                "rotate_hoisted_bits": bits(h_err),
                "fresh_bits": bits(float(np.abs(_real(h.decrypt(ct_x), n) - x).max())),
            }
            results.append({"threads": t, "threads_effective": h.get_threads(), "ops": ops,
                            "precision": precision, "ntt_roundtrip_ok": ntt_ok,
                            "levels": {"fresh": getattr(ct_x, "level", None)}})
    finally:
        try:
            h.set_threads(threads_before)
        except Exception:  # noqa: BLE001
            pass

    if q0 is None:
        h.notes.append("q_0 not exposed: NTT input drawn below 2^28")
    from hemlp._core import ring
    return {
        "peer": "hemlp",
        "simd_path": ring.simd_path(),
        "preset": h.describe(preset),
        "repeats": repeats, "warmup": 1, "seed": seed,
        "results": results,
        "notes": h.notes,
    }


def print_core_table(payload: dict) -> None:
    res = payload["results"]
    headers = ["op"] + [f"{r['threads']} thr (ms)" for r in res]
    rows = [[label] + [report.fmt_ms(r["ops"][key]["median_s"]) for r in res] for key, label in OPS + PLAN_OPS
            if all(key in r["ops"] for r in res)]
    rows += [[label] + [report.fmt_bits(r["precision"][key]) for r in res] for key, label in PRECISION]
    p = payload["preset"]
    title = (f"hemlp core — preset {p.get('name')} (N={p.get('N')}, slots={p.get('slots')}, "
             f"security={p.get('security', '?')}), median of {payload['repeats']} after 1 warm-up")
    report.table(headers, rows, title=title)
    for note in payload.get("notes", []):
        print(f"note: {note}")


def run_simd_paths(args, paths: list[str], log=print) -> dict:
    """One child ``python -m hemlp.bench core`` per SIMD path (HEMLP_SIMD=path); returns the merged
    payload (see the module docstring)."""
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for path in paths:
            out = os.path.join(tmp, f"{path}.json")
            cmd = [sys.executable, "-m", "hemlp.bench", "core", "--preset", args.preset, "--threads",
                   args.threads, "--repeats", str(args.repeats), "--seed", str(args.seed), "--json", out]
            if args.allow_insecure:
                cmd.append("--allow-insecure")
            env = dict(os.environ, HEMLP_SIMD=path)
            env.pop("HEMLP_DISABLE_AVX512", None)
            log(f"[core] SIMD path {path} (child process) ...")
            r = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError(f"core benchmark on SIMD path {path} failed:\n{r.stderr[-2000:]}")
            with open(out) as f:
                runs[path] = json.load(f)
    best = [p for p in ("avx512", "avx2", "scalar") if p in runs][0]
    merged = {k: v for k, v in runs[best].items() if k not in ("schema", "subcommand", "machine")}
    merged["simd_runs"] = {p: {"simd_path": d.get("simd_path"), "results": d["results"],
                               "load_average_before": d["machine"].get("load_average")}
                           for p, d in runs.items()}
    merged["simd_paths"] = paths
    base = runs[paths[0]]["results"]
    merged["speedup_vs_" + paths[0]] = {
        p: [{"threads": r["threads"],
             "ops": {k: b["ops"][k]["median_s"] / r["ops"][k]["median_s"] for k, _ in OPS}}
            for r, b in zip(d["results"], base)]
        for p, d in runs.items()}
    return merged


def print_simd_table(payload: dict) -> None:
    paths = payload["simd_paths"]
    runs = payload["simd_runs"]
    threads = [r["threads"] for r in runs[paths[0]]["results"]]
    headers, rows = ["op"], []
    for ti, t in enumerate(threads):
        headers += [f"{p} {t}thr (ms)" for p in paths] + [f"{p}/{paths[0]}" for p in paths[1:]]
    for key, label in OPS:
        row = [label]
        for ti in range(len(threads)):
            ts = [runs[p]["results"][ti]["ops"][key]["median_s"] for p in paths]
            row += [report.fmt_ms(v) for v in ts] + [report.fmt_ratio(ts[0] / v) for v in ts[1:]]
        rows.append(row)
    p = payload["preset"]
    report.table(headers, rows, title=f"hemlp core per SIMD path — preset {p.get('name')} (N={p.get('N')}), "
                                      f"median of {payload['repeats']}; ratio = speed-up over {paths[0]}")


# ----------------------------------------------------------------------------- CLI
def add_arguments(parser) -> None:
    parser.add_argument("--preset", default="N14-d6",
                        help="parameter preset (see --list-presets); default N14-d6")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    parser.add_argument("--repeats", type=int, default=10, help="timed repeats per op (default 10)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the random inputs")
    parser.add_argument("--json", metavar="PATH", help="write results as JSON to PATH ('-' = stdout)")
    parser.add_argument("--allow-insecure", action="store_true",
                        help="allow presets below 128-bit security (test-N12, test-N10)")
    parser.add_argument("--list-presets", action="store_true", help="list presets and exit")
    parser.add_argument("--simd", metavar="PATHS",
                        help="comma-separated SIMD paths (scalar, avx2, avx512, or 'all' the CPU has): one "
                             "child run per path, compared side by side")


def main(args) -> int:
    try:
        from hemlp import fhe
    except ImportError as e:
        print(f"hemlp.bench core: cannot import hemlp.fhe ({e}); build it with `make build`",
              file=sys.stderr)
        return 1
    if args.list_presets:
        report.table(["name", "N", "depth", "log_qp", "security", "slots"],
                     [[d.get(k) for k in ("name", "N", "depth", "log_qp", "security", "slots")]
                      for d in fhe.Params.presets()], title="hemlp CKKS presets")
        return 0
    if args.repeats < 1:
        print("--repeats must be >= 1", file=sys.stderr)
        return 2
    threads = int_list(args.threads)
    machine = report.machine_info()  # before the run: records the load the run started under
    busy = report.busy_warning()
    if args.simd:
        from hemlp._core import ring
        have = [p.strip() for p in ring.simd_available().split(",")]
        paths = have[::-1] if args.simd == "all" else [p.strip() for p in args.simd.split(",") if p.strip()]
        bad = [p for p in paths if p not in have]
        if bad or not paths:
            print(f"hemlp.bench core: --simd {args.simd}: this CPU has {', '.join(have)}", file=sys.stderr)
            return 2
        payload = run_simd_paths(args, paths, log=lambda m: print(m, file=sys.stderr, flush=True))
        return report.publish(payload, "core", args.json, machine, busy, print_simd_table)
    try:
        payload = run_core(args.preset, threads, args.repeats, seed=args.seed,
                           allow_insecure=args.allow_insecure,
                           log=lambda m: print(m, file=sys.stderr, flush=True))
    except Exception as e:  # typed hemlp errors carry their own fix in the message
        from hemlp.errors import HemlpError
        if isinstance(e, HemlpError):
            print(f"hemlp.bench core: {type(e).__name__}: {e}", file=sys.stderr)
            if "insecure" in type(e).__name__.lower() or "insecure" in str(e).lower():
                print("(pass --allow-insecure for the test presets)", file=sys.stderr)
            return 2
        raise
    return report.publish(payload, "core", args.json, machine, busy, print_core_table)
