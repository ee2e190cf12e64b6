#!/usr/bin/env python3
"""Run hemlp's core benchmark side by side with OpenFHE and TenSEAL, in one run, and print ratios.

    python scripts/bench_peers.py core --json bench/peers_core.json [--logn 14,15] [--threads 1,2]
        [--repeats 7] [--peers hemlp,openfhe,tenseal]
    python scripts/bench_peers.py boot --json bench/peers_boot_N16.json --hemlp-json bench/boot_N16.json
        # N = 2^16: about 10 GiB each, one after the other; run it alone on the machine

Each peer runs in its own venv, created on demand under ``~/.cache/hemlp/peers/<name>``
(``HEMLP_PEERS_DIR`` overrides): OpenFHE's official wheel needs Python 3.10 (pyenv's, or
``HEMLP_PYTHON310``); TenSEAL gets a 3.11 venv (``HEMLP_PYTHON311``).  A peer that cannot be
installed or run shows ``n/a`` with the reason; no number is ever made up.

Parameters follow the hemlp presets: logN 14 -> ``N14-d6`` (Q = 60 + 6x40 bits, scale 2^40,
alpha = 2 primes per key-switching digit), logN 15 -> ``N15-d10`` (Q = 60 + 10x45, scale 2^45,
alpha = 3).  OpenFHE: FIXEDMANUAL, HYBRID, NumLargeDigits = ceil((L+1)/alpha), HEStd_128_classic
(HEStd_NotSet only if the exact ring dimension is refused; reported).  TenSEAL/SEAL: the same
Q chain plus SEAL's single special prime (<= 60 bits), i.e. dnum = L+1; reported.

Every benchmark subprocess runs without OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE and with the same
OpenMP wait policy (OMP_WAIT_POLICY, default PASSIVE as hemlp's CLI sets it: threads spinning at
barriers made every 2-thread op 2-5x slower than 1 thread whenever another process used a core,
e.g. one round of bench/peers_core_avx2.json's N = 2^15 run); OpenFHE's threads are set with
OMP_NUM_THREADS, TenSEAL's with its context ``n_threads``, hemlp's with ``hemlp.set_num_threads``.
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

try:
    from hemlp.apps.bench import report  # noqa: E402
    from hemlp.apps.bench.core import OPS, PRECISION  # noqa: E402  (constants only, no hemlp.fhe)
except ImportError:  # hemlp itself does not import (core mid-rebuild): peers must still run
    import ast
    import importlib.util

    _spec = importlib.util.spec_from_file_location("_hemlp_bench_report",
                                                   REPO / "hemlp" / "apps" / "bench" / "report.py")
    report = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(report)
    _consts = {n.targets[0].id: ast.literal_eval(n.value)
               for n in ast.parse((REPO / "hemlp" / "apps" / "bench" / "core.py").read_text()).body
               if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") in ("OPS", "PRECISION")}
    OPS, PRECISION = _consts["OPS"], _consts["PRECISION"]

PEERS_SCRIPTS = Path(__file__).resolve().parent / "peers"
PEERS_DIR = Path(os.environ.get("HEMLP_PEERS_DIR", Path.home() / ".cache" / "hemlp" / "peers"))
SUBPROCESS_TIMEOUT = int(os.environ.get("HEMLP_PEERS_TIMEOUT", "1800"))

#: hemlp preset per logN, with the chain the peers should reproduce
CONFIGS = {
    14: {"preset": "N14-d6", "depth": 6, "first_bits": 60, "scale_bits": 40,
         "log_p": [60, 60], "alpha": 2},
    15: {"preset": "N15-d10", "depth": 10, "first_bits": 60, "scale_bits": 45,
         "log_p": [61, 61, 61], "alpha": 3},
}

PEER_LABEL = {"hemlp": "hemlp", "openfhe": "OpenFHE", "tenseal": "TenSEAL"}
#: targets of the RNS-CKKS core issue: hemlp/peer time ratio upper bounds for these ops
TARGETS = {"openfhe": 1.0, "tenseal": 0.8}
TARGET_OPS = ("mul", "rotate")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- interpreters
def _version_of(python: str) -> tuple[int, int] | None:
    try:
        r = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:2])"],
                           capture_output=True, text=True, timeout=60)
        a, b = r.stdout.split()
        return int(a), int(b)
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


def find_python(minor: int) -> str | None:
    """A Python 3.<minor> interpreter: $HEMLP_PYTHON3<minor>, pyenv's, this one, or on PATH."""
    cands = []
    env = os.environ.get(f"HEMLP_PYTHON3{minor}")
    if env:
        cands.append(env)
    pyenv_root = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    cands += sorted(glob.glob(f"{pyenv_root}/versions/3.{minor}.*/bin/python3.{minor}"),
                    key=lambda p: [int(x) if x.isdigit() else 0
                                   for x in Path(p).parts[-3].split(".")], reverse=True)
    if sys.version_info[:2] == (3, minor):
        cands.append(getattr(sys, "_base_executable", None) or sys.executable)
    for name in (f"python3.{minor}",):
        w = shutil.which(name)
        if w:
            cands.append(w)
    for c in cands:
        if c and os.path.exists(c) and _version_of(c) == (3, minor):
            return c
    return None


# ----------------------------------------------------------------------------- peer venvs
PEER_SETUP = {
    "openfhe": {"minor": 10, "packages": ["openfhe~=1.6.1", "numpy"], "import": "openfhe",
                "script": "openfhe_core.py",
                "why_minor": "the official openfhe wheel is built for CPython 3.10 only"},
    "tenseal": {"minor": 11, "packages": ["tenseal~=0.3.18", "numpy"], "import": "tenseal",
                "script": "tenseal_core.py", "why_minor": "project Python"},
}


def _tail(text: str, n: int = 6) -> str:
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip()]
    return " | ".join(lines[-n:])


def ensure_venv(name: str) -> tuple[str | None, str | None]:
    """Return (python of the peer's venv, None) or (None, reason it cannot be had)."""
    spec = PEER_SETUP[name]
    vdir = PEERS_DIR / name
    vpy = vdir / "bin" / "python"
    stamp = vdir / ".hemlp-peer-ok"
    want = " ".join(spec["packages"])

    def importable() -> str | None:
        r = subprocess.run([str(vpy), "-c", f"import {spec['import']}"], capture_output=True,
                           text=True, timeout=300, env=report.benchmark_env())
        return None if r.returncode == 0 else _tail(r.stderr, 3)

    if vpy.exists() and stamp.exists() and stamp.read_text().strip() == want:
        err = importable()
        if err is None:
            return str(vpy), None
        log(f"[peers] {name}: existing venv broken ({err}); reinstalling")
    base = find_python(spec["minor"])
    if base is None:
        return None, (f"no Python 3.{spec['minor']} found ({spec['why_minor']}); install it "
                      f"(e.g. `pyenv install 3.{spec['minor']}`) or set HEMLP_PYTHON3{spec['minor']}")
    log(f"[peers] {name}: creating venv {vdir} with {base} and installing {want} ...")
    t0 = time.time()
    try:
        if vdir.exists() and not vpy.exists():
            shutil.rmtree(vdir)
        if not vpy.exists():
            r = subprocess.run([base, "-m", "venv", str(vdir)], capture_output=True, text=True,
                               timeout=600)
            if r.returncode != 0:
                return None, f"`{base} -m venv {vdir}` failed: {_tail(r.stderr)}"
        r = subprocess.run([str(vpy), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                            *spec["packages"]], capture_output=True, text=True, timeout=1800)
        if r.returncode != 0:
            return None, f"`pip install {want}` into {vdir} failed: {_tail(r.stderr)}"
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"cannot create venv {vdir}: {type(e).__name__}: {e}"
    err = importable()
    if err is not None:
        return None, f"{spec['import']} installed into {vdir} but does not import: {err}"
    stamp.write_text(want + "\n")
    log(f"[peers] {name}: ready in {time.time() - t0:.0f} s")
    return str(vpy), None


# ----------------------------------------------------------------------------- running
def _run_json(cmd, env, what: str) -> tuple[dict | None, str | None]:
    log(f"[peers] {what}: {' '.join(cmd)}")
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=SUBPROCESS_TIMEOUT,
                           cwd=str(REPO))
    except subprocess.TimeoutExpired:
        return None, f"{what} timed out after {SUBPROCESS_TIMEOUT} s"
    except OSError as e:
        return None, f"{what} could not start: {e}"
    if r.returncode != 0:
        return None, f"{what} exited {r.returncode}: {_tail(r.stderr or r.stdout)}"
    for line in reversed(r.stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line), None
            except json.JSONDecodeError:
                break
    return None, f"{what} printed no JSON: {_tail(r.stdout + r.stderr)}"


def run_openfhe(py, logn, cfg, threads, repeats, seed):
    L = cfg["depth"]
    dnum = math.ceil((L + 1) / cfg["alpha"])
    env = report.benchmark_env()
    env["OMP_NUM_THREADS"] = str(threads)
    cmd = [py, str(PEERS_SCRIPTS / "openfhe_core.py"), "--logn", str(logn), "--depth", str(L),
           "--scale-bits", str(cfg["scale_bits"]), "--first-bits", str(cfg["first_bits"]),
           "--dnum", str(dnum), "--threads", str(threads), "--repeats", str(repeats),
           "--seed", str(seed)]
    return _run_json(cmd, env, f"OpenFHE logN={logn} threads={threads}")


def seal_bits(cfg) -> list[int]:
    special = min(60, max(cfg["log_p"]))  # SEAL primes are at most 60 bits
    return [cfg["first_bits"]] + [cfg["scale_bits"]] * cfg["depth"] + [special]


def run_tenseal(py, logn, cfg, threads, repeats, seed):
    env = report.benchmark_env()
    env["OMP_NUM_THREADS"] = str(threads)
    cmd = [py, str(PEERS_SCRIPTS / "tenseal_core.py"), "--logn", str(logn),
           "--bits", ",".join(map(str, seal_bits(cfg))), "--scale-bits", str(cfg["scale_bits"]),
           "--threads", str(threads), "--repeats", str(repeats), "--seed", str(seed)]
    return _run_json(cmd, env, f"TenSEAL logN={logn} threads={threads}")


def hemlp_python() -> str:
    venv_py = REPO / ".venv" / "bin" / "python"
    return os.environ.get("HEMLP_PYTHON") or (str(venv_py) if venv_py.exists() else sys.executable)


def run_hemlp(logn, cfg, threads_list, repeats, seed) -> dict[int, tuple[dict | None, str | None]]:
    """One hemlp process per logN (all thread counts); returns {threads: (result, error)}."""
    with tempfile.TemporaryDirectory(prefix="hemlp-bench-") as td:
        out = Path(td) / "core.json"
        cmd = [hemlp_python(), "-m", "hemlp.bench", "core", "--preset", cfg["preset"],
               "--threads", ",".join(map(str, threads_list)), "--repeats", str(repeats),
               "--seed", str(seed), "--json", str(out)]
        log(f"[peers] hemlp logN={logn}: {' '.join(cmd)}")
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, env=report.benchmark_env(),
                               timeout=SUBPROCESS_TIMEOUT, cwd=str(REPO))
            err = None if r.returncode == 0 else f"hemlp exited {r.returncode}: {_tail(r.stderr or r.stdout)}"
        except subprocess.TimeoutExpired:
            err = f"hemlp timed out after {SUBPROCESS_TIMEOUT} s"
        if err is None and not out.exists():
            err = f"hemlp wrote no JSON: {_tail(r.stdout + r.stderr)}"
        if err is not None:
            return {t: (None, err) for t in threads_list}
        doc = json.loads(out.read_text())
    res = {}
    for t in threads_list:
        match = [r for r in doc.get("results", []) if r.get("threads") == t]
        if not match:
            res[t] = (None, f"hemlp JSON has no result for {t} threads")
            continue
        one = dict(match[0])
        one.update({"peer": "hemlp", "preset": doc.get("preset"), "notes": doc.get("notes", []),
                    "repeats": doc.get("repeats")})
        res[t] = (one, None)
    return res


def cpu_busy(seconds: float = 1.0) -> float:
    """Fraction of all CPU time used by anything over ``seconds`` (from /proc/stat)."""
    def snap():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        idle = v[3] + (v[4] if len(v) > 4 else 0)
        return sum(v), idle
    try:
        t0, i0 = snap()
        time.sleep(seconds)
        t1, i1 = snap()
    except (OSError, ValueError, IndexError):
        return 0.0
    return 0.0 if t1 == t0 else 1.0 - (i1 - i0) / (t1 - t0)


def wait_idle(max_seconds: float, threshold: float = 0.15) -> None:
    """Wait (at most ``max_seconds``) until other processes leave the CPUs nearly idle."""
    if max_seconds <= 0:
        return
    deadline = time.time() + max_seconds
    busy = cpu_busy()
    if busy < threshold:
        return
    log(f"[peers] CPUs {busy:.0%} busy with other work; waiting up to {max_seconds:.0f} s for idle")
    while time.time() < deadline:
        busy = cpu_busy(2.0)
        if busy < threshold:
            return
    log(f"[peers] still {busy:.0%} busy after {max_seconds:.0f} s; measuring anyway")


def merge_rounds(results: list[tuple[dict | None, str | None]]) -> tuple[dict | None, str | None]:
    """One (result, error) from several rounds: per-op median of the rounds' medians."""
    import statistics

    ok = [r for r, _ in results if r is not None]
    if not ok:
        return results[0] if results else (None, "not run")
    if len(ok) == 1 and len(results) == 1:
        return ok[0], None
    merged = dict(ok[0])
    merged["ops"] = {}
    for key in ok[0].get("ops", {}):
        meds = [r["ops"][key]["median_s"] for r in ok if key in r.get("ops", {})]
        rec = dict(ok[0]["ops"][key])
        rec.update({"median_s": statistics.median(meds), "round_medians": meds,
                    "min_s": min(r["ops"][key]["min_s"] for r in ok if key in r.get("ops", {})),
                    "samples": [s for r in ok for s in r["ops"][key].get("samples", [])]})
        merged["ops"][key] = rec
    prec = {}
    for key, v in ok[0].get("precision", {}).items():
        vals = [r["precision"][key] for r in ok if isinstance(r["precision"].get(key), (int, float))]
        prec[key] = statistics.median(vals) if vals else v
    merged["precision"] = prec
    merged["rounds"] = len(ok)
    failed = [e for r, e in results if r is None]
    if failed:
        merged.setdefault("notes", [])
        merged["notes"] = list(merged["notes"]) + [f"{len(failed)} round(s) failed: {failed[0]}"]
    return merged, None


# ----------------------------------------------------------------------------- report
def _median(res, key):
    if not res:
        return None
    v = res.get("ops", {}).get(key, {})
    m = v.get("median_s") if isinstance(v, dict) else None
    return m if isinstance(m, (int, float)) and m > 0 else None


def _prec(res, key):
    if not res:
        return None
    v = res.get("precision", {}).get(key)
    if v == "inf":
        return math.inf
    return v if isinstance(v, (int, float)) else None


def build_run(logn, threads, cfg, peers: dict[str, tuple[dict | None, str | None]]) -> dict:
    ratios, prec_diff = {}, {}
    h = peers.get("hemlp", (None, None))[0]
    for name in ("openfhe", "tenseal"):
        p = peers.get(name, (None, None))[0]
        ratios[name] = {k: (_median(h, k) / _median(p, k)
                            if _median(h, k) and _median(p, k) else None) for k, _ in OPS}
        prec_diff[name] = {k: (_prec(h, k) - _prec(p, k)
                               if _prec(h, k) is not None and _prec(p, k) is not None
                               and math.isfinite(_prec(h, k)) and math.isfinite(_prec(p, k))
                               else None) for k, _ in PRECISION}
    return {
        "logn": logn, "N": 1 << logn, "threads": threads, "hemlp_preset": cfg["preset"],
        "peers": {name: (res if res is not None else {"error": err})
                  for name, (res, err) in peers.items()},
        "ratios_hemlp_over_peer": ratios,
        "precision_bits_hemlp_minus_peer": prec_diff,
    }


def check_targets(run) -> list[dict]:
    out = []
    for peer, bound in TARGETS.items():
        if peer not in run["peers"]:
            continue
        for op in TARGET_OPS:
            r = run["ratios_hemlp_over_peer"].get(peer, {}).get(op)
            out.append({"logn": run["logn"], "threads": run["threads"], "op": op, "peer": peer,
                        "ratio": r, "bound": bound,
                        "status": "n/a" if r is None else ("PASS" if r <= bound else "FAIL")})
    if "openfhe" in run["peers"]:
        for key, _ in PRECISION:
            d = run["precision_bits_hemlp_minus_peer"].get("openfhe", {}).get(key)
            out.append({"logn": run["logn"], "threads": run["threads"], "op": key, "peer": "openfhe",
                        "bits_diff": d, "bound": ">= 0 bits",
                        "status": "n/a" if d is None else ("PASS" if d >= -0.5 else "FAIL")})
    return out


def print_run(run, names) -> None:
    def cell_ms(name, key):
        res = run["peers"].get(name, {})
        if "error" in res:
            return "n/a"
        return report.fmt_ms(_median(res, key))

    def cell_bits(name, key):
        res = run["peers"].get(name, {})
        return "n/a" if "error" in res else report.fmt_bits(_prec(res, key))

    peers_only = [n for n in names if n != "hemlp"]
    headers = (["op"] + [f"{PEER_LABEL[n]} ms" for n in names]
               + [f"hemlp/{PEER_LABEL[n]}" for n in peers_only if "hemlp" in names])
    rows = []
    for key, label in OPS:
        row = [label] + [cell_ms(n, key) for n in names]
        if "hemlp" in names:
            row += [report.fmt_ratio(run["ratios_hemlp_over_peer"][n][key]) for n in peers_only]
        rows.append(row)
    for key, label in PRECISION:
        row = [label] + [cell_bits(n, key) for n in names]
        if "hemlp" in names:
            row += [("n/a" if (d := run["precision_bits_hemlp_minus_peer"][n][key]) is None
                     else f"{d:+.1f} b") for n in peers_only]
        rows.append(row)
    title = (f"\nN=2^{run['logn']} (hemlp preset {run['hemlp_preset']}), {run['threads']} thread"
             f"{'s' if run['threads'] > 1 else ''} — median ms; ratio < 1 means hemlp is faster")
    report.table(headers, rows, title=title)
    for n in names:
        res = run["peers"].get(n, {})
        if "error" in res:
            print(f"  {PEER_LABEL[n]}: n/a — {res['error']}")
        else:
            for note in res.get("notes", []):
                print(f"  {PEER_LABEL[n]}: {note}")
            prm = res.get("params")
            if prm:
                short = {k: v for k, v in prm.items() if k in (
                    "security", "log_q", "log_p", "num_large_digits", "dnum", "coeff_mod_bit_sizes")}
                print(f"  {PEER_LABEL[n]} {res.get('version', '')} params: {short}")


# ----------------------------------------------------------------------------- CLI
def _ints(s):
    return [int(v) for v in s.split(",") if v.strip()]


def cmd_core(a) -> int:
    lognlist, threads = _ints(a.logn), _ints(a.threads)
    names = [n for n in _names(a.peers)]
    for logn in lognlist:
        if logn not in CONFIGS:
            print(f"--logn {logn}: no hemlp preset mapped (known: {sorted(CONFIGS)})", file=sys.stderr)
            return 2

    machine = report.machine_info()
    busy = report.busy_warning()
    if busy:
        log(f"[peers] WARNING: {busy}")
    pythons, setup_err = {}, {}
    for name in names:
        if name == "hemlp":
            continue
        py, err = ensure_venv(name)
        if err:
            log(f"[peers] {name}: UNAVAILABLE — {err}")
        pythons[name], setup_err[name] = py, err

    runs, all_targets = [], []
    for logn in lognlist:
        cfg = CONFIGS[logn]
        # rounds interleave the peers (hemlp, OpenFHE, TenSEAL, hemlp, ...) so that load from
        # other processes hits all of them alike; each op's figure is the median over rounds.
        got = {t: {n: [] for n in names} for t in threads}
        for rnd in range(a.rounds):
            if a.rounds > 1:
                log(f"[peers] logN={logn}: round {rnd + 1}/{a.rounds}")
            if "hemlp" in names:
                wait_idle(a.wait_idle)
                for t, res in run_hemlp(logn, cfg, threads, a.repeats, a.seed).items():
                    got[t]["hemlp"].append(res)
            for t in threads:
                for name in names:
                    if name == "hemlp":
                        continue
                    if pythons[name] is None:
                        got[t][name].append((None, setup_err[name]))
                        continue
                    wait_idle(a.wait_idle)
                    runner = run_openfhe if name == "openfhe" else run_tenseal
                    got[t][name].append(runner(pythons[name], logn, cfg, t, a.repeats, a.seed))
        for t in threads:
            peers = {n: merge_rounds(got[t][n]) for n in names}
            run = build_run(logn, t, cfg, peers)
            runs.append(run)
            print_run(run, names)
            all_targets += check_targets(run)

    if all_targets and "hemlp" in names:
        print("\ntargets (ct x ct+relin+rescale and rotate <= 1.0x OpenFHE and <= 0.8x TenSEAL; "
              "precision >= OpenFHE's, 0.5-bit tolerance):")
        for tg in all_targets:
            if "ratio" in tg:
                what, bound = report.fmt_ratio(tg["ratio"]), f"<= {tg['bound']:.1f}x"
            else:
                what = "n/a" if tg["bits_diff"] is None else f"{tg['bits_diff']:+.1f} bits"
                bound = ">= peer"
            print(f"  N=2^{tg['logn']} {tg['threads']}t  {tg['op']:<12} vs {PEER_LABEL[tg['peer']]:<8} "
                  f"{what:>10}  {bound:<8}  {tg['status']}")
    payload = {"configs": {str(k): CONFIGS[k] for k in lognlist}, "repeats": a.repeats,
               "rounds": a.rounds, "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
               "seed": a.seed, "peers": names, "runs": runs, "targets": all_targets,
               "load_average_after": report.load_average(), "warnings": [busy] if busy else []}
    if busy:
        print(f"\nWARNING: {busy}")
    if a.json:
        report.write_json(a.json, "peers-core", payload, machine=machine)
        if a.json != "-":
            print(f"\nwrote {a.json}")
    return 0


def cmd_pcmm(a) -> int:
    """U (d x d) @ Enc(d x N/2): hemlp's PCMM vs OpenFHE's EvalLinearWSum, same ring, same limbs."""
    import numpy as np

    import hemlp
    from hemlp import fhe, pcmm
    from hemlp.apps.bench import measure

    py, why = ensure_venv("openfhe")
    cfg = CONFIGS[a.logn]
    rows = []
    results = []
    ctx = fhe.Context(cfg["preset"])
    sk, pk = ctx.keygen()
    rng = np.random.default_rng(0)
    for d in _ints(a.sizes):
        U = rng.normal(0, 1 / math.sqrt(d), (d, d))
        M = rng.uniform(-1, 1, (8, ctx.slots))
        base = pcmm.encrypt_matrix(ctx, M, pk, level=a.limbs - 1)
        C = pcmm.CtMatrix(ctx, [base.cts[i % 8] for i in range(d)], (d, ctx.slots), 1, "rlwe")
        for th in _ints(a.threads):
            hemlp.set_num_threads(th)
            m = measure(lambda: pcmm.pcmm(U, C, weight_bits=a.weight_bits), a.repeats)
            got = pcmm.decrypt_matrix(ctx, pcmm.pcmm(U, C, weight_bits=a.weight_bits), sk)[:2]
            want = U[:2] @ np.stack([M[i % 8] for i in range(d)])
            hb = -math.log2(float(np.max(np.abs(got - want))))
            peer, perr = (None, why)
            if py:
                env = report.benchmark_env()
                env["OMP_NUM_THREADS"] = str(th)
                dnum = math.ceil((cfg["depth"] + 1) / cfg["alpha"])
                peer, perr = _run_json([py, str(PEERS_SCRIPTS / "openfhe_pcmm.py"), "--logn", str(a.logn),
                                        "--depth", str(cfg["depth"]), "--scale-bits", str(cfg["scale_bits"]),
                                        "--first-bits", str(cfg["first_bits"]), "--dnum", str(dnum),
                                        "--limbs", str(a.limbs), "--d", str(d), "--threads", str(th),
                                        "--repeats", str(a.repeats)], env, f"openfhe pcmm d={d}")
            ratio = peer["median_s"] / m["median_s"] if peer else None
            results.append(dict(d=d, threads=th, hemlp_s=m["median_s"], hemlp_bits=hb,
                                openfhe_s=peer["median_s"] if peer else None,
                                openfhe_bits=peer["bits"] if peer else None, openfhe_error=perr,
                                speedup_vs_openfhe=ratio))
            rows.append([f"{d}x{d} @ Enc({d}x{ctx.slots})", th, report.fmt_seconds(m["median_s"]),
                         report.fmt_seconds(peer["median_s"]) if peer else f"n/a ({perr})",
                         f"{ratio:.0f}x" if ratio else "n/a", f"{hb:.1f}",
                         f"{peer['bits']:.1f}" if peer else "n/a"])
    report.table(["product", "thr", "hemlp PCMM", "OpenFHE LinearWSum", "hemlp speed-up", "bits hemlp",
                  "bits OpenFHE"], rows,
                 title=f"PCMM at {a.limbs} RNS limbs, N=2^{a.logn} ({cfg['preset']})")
    if a.json:
        report.write_json(a.json, "peers-pcmm", {"logn": a.logn, "limbs": a.limbs, "results": results})
    return 0


def mem_available_gib() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 2.0 ** 20
    except OSError:
        pass
    return None


def wait_memory(min_gib: float, max_seconds: float) -> float:
    """Sleep until MemAvailable >= min_gib or max_seconds passed; returns the seconds waited."""
    t0 = time.time()
    while time.time() - t0 < max_seconds:
        avail = mem_available_gib()
        if avail is None or avail >= min_gib:
            break
        log(f"[peers] waiting for memory: {avail:.1f} GiB available, {min_gib:.1f} wanted")
        time.sleep(10)
    return time.time() - t0


def cmd_boot(a) -> int:
    """hemlp's Bootstrapper (python -m hemlp.bench boot) and OpenFHE's EvalBootstrap at 128-bit, one after the
    other in one run (never overlapping: each holds about 10 GiB at N = 2^16), with time ratios."""
    machine = report.machine_info()
    busy = report.busy_warning()
    threads = _ints(a.threads)
    load = {"before": report.load_average()}
    # hemlp: one process, every thread count (keys generated once); first wait (bounded) for its ~10 GiB
    load["hemlp_waited_for_memory_s"] = wait_memory(a.hemlp_free_gib, a.wait_memory)
    with tempfile.TemporaryDirectory(prefix="hemlp-bench-") as td:
        out = Path(td) / "boot.json"
        cmd = [hemlp_python(), "-m", "hemlp.bench", "boot", "--preset", a.preset, "--threads", a.threads,
               "--repeats", str(a.repeats), "--seed", str(a.seed), "--pair", "--json", str(out)]
        cmd += ["--allow-insecure"] if a.insecure else []
        log(f"[peers] hemlp boot: {' '.join(cmd)}")
        hemlp_doc, herr = None, None
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, env=report.benchmark_env(),
                               timeout=SUBPROCESS_TIMEOUT, cwd=str(REPO))
            if r.returncode != 0:
                herr = f"hemlp exited {r.returncode}: {_tail(r.stderr or r.stdout)}"
            elif not out.exists():
                herr = f"hemlp wrote no JSON: {_tail(r.stdout + r.stderr)}"
            else:
                hemlp_doc = json.loads(out.read_text())
                if a.hemlp_json:  # hemlp's own bench JSON of this run, as python -m hemlp.bench boot writes it
                    shutil.copyfile(out, a.hemlp_json)
                    print(f"wrote {a.hemlp_json}")
        except subprocess.TimeoutExpired:
            herr = f"hemlp timed out after {SUBPROCESS_TIMEOUT} s"
    load["after_hemlp"] = report.load_average()
    # OpenFHE: its own venv (Python 3.10), one process per thread count started with OMP_NUM_THREADS at that count
    # (omp_set_num_threads inside one process did not hold: on a quiet machine its "1 thread" run used 2 cores);
    # on a shared machine wait (up to --wait-memory seconds) until it has the memory it needs (10.6-15.6 GiB here)
    py, why = ensure_venv("openfhe")
    ofhe, oerr = None, why
    waited = 0.0
    for th in threads if py else []:
        waited += wait_memory(a.min_free_gib, a.wait_memory)
        env = report.benchmark_env()
        env["OMP_NUM_THREADS"] = str(th)
        doc, oerr = _run_json([py, str(PEERS_SCRIPTS / "openfhe_boot.py"), "--logn", str(a.logn), "--threads",
                               str(th), "--repeats", str(a.repeats), "--seed", str(a.seed)]
                              + (["--insecure"] if a.insecure else []), env,
                              f"OpenFHE EvalBootstrap N=2^{a.logn}, {th} thread(s)")
        if doc is not None and "error" in doc:
            doc, oerr = None, doc["error"]
        if doc is None:
            ofhe = None
            break
        if ofhe is None:
            ofhe = doc
        else:
            ofhe["results"] += doc["results"]
    load["waited_for_memory_s"] = waited
    if oerr and "exited -9" in oerr:
        oerr += ("(SIGKILL: on Linux the kernel's OOM killer, typically - see dmesg; OpenFHE's EvalBootstrap "
                 "needs more than 15 GiB at N = 2^16)")
    load["after_openfhe"] = report.load_average()

    def by_threads(doc, th):
        return next((r for r in (doc or {}).get("results", []) if r.get("threads") == th), None)

    rows, ratios = [], []
    for th in threads:
        h, o = by_threads(hemlp_doc, th), by_threads(ofhe, th)
        ht = h["bootstrap"]["median_s"] if h else None
        ot = o["bootstrap"]["median_s"] if o else None
        hp = h["bootstrap_pair"]["median_s"] if h and "bootstrap_pair" in h else None
        ratio = ht / ot if ht and ot else None
        hc = h["bootstrap"].get("cpu_median_s") if h else None
        oc = o["bootstrap"].get("cpu_median_s") if o else None
        ratios.append({"threads": th, "hemlp_s": ht, "openfhe_s": ot, "hemlp_pair_s": hp, "ratio": ratio,
                       "hemlp_cpu_s": hc, "openfhe_cpu_s": oc, "cpu_ratio": hc / oc if hc and oc else None,
                       "pair_ratio_per_real": (hp / 2) / ot if hp and ot else None,
                       "target": 0.7, "met": None if ratio is None else ratio <= 0.7})
        rows.append([th, report.fmt_seconds(ht) if ht else f"n/a ({herr})", report.fmt_seconds(ot) if ot else
                     f"n/a ({oerr})", "n/a" if ratio is None else f"{ratio:.2f}x",
                     report.fmt_seconds(hp) if hp else "n/a",
                     "n/a" if not (hc and oc) else f"{hc / oc:.2f}x",
                     "n/a" if not h else report.fmt_bits(h["max_bits"]),
                     "n/a" if not o else report.fmt_bits(o["max_bits"])])
    hl = hemlp_doc.get("levels_left") if hemlp_doc else None
    ol = ofhe.get("levels_left") if ofhe else None
    title = (f"Bootstrapping at N=2^{a.logn}, 128-bit: hemlp {a.preset} ({hl} levels left at 2^40, complex slots) vs "
             f"OpenFHE EvalBootstrap ({ol} levels left, real slots"
             + (f", scale 2^{ofhe['params']['scale_bits']}, dnum {ofhe['params']['dnum']}" if ofhe else "") + ")")
    report.table(["thr", "hemlp", "OpenFHE", "hemlp/OpenFHE", "hemlp pair (2 reals)", "CPU-time ratio", "bits hemlp",
                  "bits OpenFHE"],
                 rows, title=title)
    extra = [["keygen (s)", f"{hemlp_doc['keygen_s']:.1f}" if hemlp_doc else "n/a",
              f"{ofhe['keygen_s']:.1f}" if ofhe else "n/a"],
             ["peak RSS (GiB)", f"{hemlp_doc['peak_rss_gib']:.2f}" if hemlp_doc else "n/a",
              f"{ofhe['peak_rss_gib']:.2f}" if ofhe else "n/a"],
             ["levels left", hl if hl is not None else "n/a", ol if ol is not None else "n/a"]]
    report.table(["", "hemlp", "OpenFHE"], extra)
    for r in ratios:
        if r["ratio"] is not None:
            print(f"target hemlp <= 0.7x OpenFHE at {r['threads']} thread(s): {r['ratio']:.2f}x "
                  f"{'met' if r['met'] else 'MISSED'}")
    if busy:
        print(f"\nWARNING: {busy}")
    if a.json:
        report.write_json(a.json, "peers-boot", {"logn": a.logn, "preset": a.preset, "threads": threads,
                                                  "repeats": a.repeats, "seed": a.seed, "hemlp": hemlp_doc,
                                                  "hemlp_error": herr, "openfhe": ofhe, "openfhe_error": oerr,
                                                  "ratios": ratios, "load_average": load,
                                                  "warnings": [busy] if busy else []}, machine=machine)
        if a.json != "-":
            print(f"\nwrote {a.json}")
    return 0 if hemlp_doc is not None else 1


def _names(s):
    names = [n.strip() for n in s.split(",") if n.strip()]
    bad = [n for n in names if n not in PEER_LABEL]
    if bad:
        raise SystemExit(f"unknown peer(s) {bad}; known: {list(PEER_LABEL)}")
    return names


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/bench_peers.py",
                                 description=__doc__.strip().splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("core", help="RNS-CKKS core ops vs OpenFHE and TenSEAL")
    c.add_argument("--json", metavar="PATH", help="write all results as JSON ('-' = stdout)")
    c.add_argument("--logn", default="14,15", help="comma-separated log2 N (14, 15); default 14,15")
    c.add_argument("--threads", default="1,2", help="comma-separated thread counts; default 1,2")
    c.add_argument("--repeats", type=int, default=7, help="timed repeats per op (default 7)")
    c.add_argument("--rounds", type=int, default=1,
                   help="repeat the whole hemlp/OpenFHE/TenSEAL sequence R times, interleaved, and "
                        "take per-op medians over rounds (use 3+ on a shared machine)")
    c.add_argument("--wait-idle", type=float, default=0, metavar="SECONDS",
                   help="before each measurement wait up to SECONDS for other processes to leave "
                        "the CPUs idle (default 0: don't wait)")
    c.add_argument("--seed", type=int, default=1)
    c.add_argument("--peers", default="hemlp,openfhe,tenseal",
                   help="which of hemlp,openfhe,tenseal to run (default all)")
    pc = sub.add_parser("pcmm", help="PCMM vs OpenFHE's EvalLinearWSum on the same product")
    pc.add_argument("--json", metavar="PATH")
    pc.add_argument("--logn", type=int, default=14)
    pc.add_argument("--sizes", default="64,256", help="comma-separated d (d1 = d2)")
    pc.add_argument("--limbs", type=int, default=2, help="RNS limbs left when the product runs")
    pc.add_argument("--threads", default="1,2")
    pc.add_argument("--repeats", type=int, default=3)
    pc.add_argument("--weight-bits", type=int, default=20)
    bo = sub.add_parser("boot", help="bootstrapping vs OpenFHE's EvalBootstrap (N = 2^16, 128-bit)")
    bo.add_argument("--json", metavar="PATH")
    bo.add_argument("--logn", type=int, default=16)
    bo.add_argument("--preset", default="N16-boot", help="hemlp's bootstrapping preset (default N16-boot)")
    bo.add_argument("--threads", default="1,2")
    bo.add_argument("--repeats", type=int, default=1)
    bo.add_argument("--seed", type=int, default=1)
    bo.add_argument("--min-free-gib", type=float, default=14.0,
                    help="memory OpenFHE's EvalBootstrap needs at N = 2^16 (default 14 GiB)")
    bo.add_argument("--hemlp-free-gib", type=float, default=10.5,
                    help="memory hemlp's bootstrapping needs at N = 2^16 (default 10.5 GiB)")
    bo.add_argument("--wait-memory", type=float, default=900, metavar="SECONDS",
                    help="wait up to SECONDS for that much memory before starting each peer (default 900)")
    bo.add_argument("--hemlp-json", metavar="PATH",
                    help="also keep hemlp's own bench JSON of this run (e.g. bench/boot_N16.json: one N = 2^16 run "
                         "serves both files)")
    bo.add_argument("--insecure", action="store_true",
                    help="smoke test at a small N: hemlp's insecure test chain and OpenFHE's HEStd_NotSet")
    a = ap.parse_args(argv)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # every peer's subprocess inherits it (report.benchmark_env)
    if a.cmd == "boot":
        return cmd_boot(a)
    if a.cmd == "core":
        return cmd_core(a)
    if a.cmd == "pcmm":
        return cmd_pcmm(a)
    return 2


if __name__ == "__main__":
    sys.exit(main())
