"""Run the Python-level fuzz targets with Atheris, one process per target, and report.

    python -m tests.fuzz.run [--runs 100000] [--targets a,b] [--corpus DIR] [--json out.json]

Builds the seed corpus (tests/fuzz/targets.py) unless --corpus names one, runs
``python -m tests.fuzz.atheris_main TARGET CORPUS -runs=N`` per target, prints a table (executions, seconds,
outcomes by type, findings) and exits non-zero when any target found a crash, a hang or an untyped exception.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.fuzz.targets import NAMES, build_corpus

ROOT = Path(__file__).resolve().parents[2]


def run_target(name: str, corpus: Path, runs: int, work: Path, timeout_s: int = 300, wall: float | None = None) -> dict:
    """One Atheris run; {target, executions, seconds, outcomes, finding (None or the error text)}. timeout_s: the
    wall-clock seconds one input may take before libFuzzer calls it a hang (generous: on a machine shared with other
    jobs a process can stall for tens of seconds; every input here takes milliseconds)."""
    stats = work / f"{name}.stats.json"
    # TMPDIR: the child's temporary folders go under `work` (libFuzzer ends the child without Python's clean-up)
    env = dict(os.environ, HEMLP_FUZZ_STATS=str(stats), PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS="1", TMPDIR=str(work))
    cmd = [sys.executable, "-m", "tests.fuzz.atheris_main", name, str(corpus), f"-runs={runs}", "-len_control=0",
           # libFuzzer's RSS limit reads the peak RSS, which a child inherits from its parent (a multi-GiB test
           # process) across fork and exec: bound single allocations instead
           f"-timeout={timeout_s}", "-rss_limit_mb=0", "-malloc_limit_mb=3000", f"-artifact_prefix={work}/{name}-"]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=wall)
    secs = time.perf_counter() - t0
    m = re.search(r"^Done (\d+) runs", r.stderr, re.M)
    outcomes = json.loads(stats.read_text())["outcomes"] if stats.exists() else {}
    finding = None
    if r.returncode != 0 or m is None:
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        key = [ln for ln in lines if re.search(r"Uncaught|Error|ERROR|timeout|crash|Traceback", ln)]
        finding = "\n".join((key or lines)[-25:])
    return dict(target=name, executions=int(m.group(1)) if m else 0, seconds=round(secs, 1), outcomes=outcomes,
                finding=finding)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=100_000)
    ap.add_argument("--targets", default=",".join(NAMES))
    ap.add_argument("--corpus", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="hemlp-fuzz-run-"))
    corpus = args.corpus
    if corpus is None:
        corpus = work / "corpus"
        build_corpus(corpus)
    rows = []
    print(f"{'target':<18} {'executions':>10} {'seconds':>8}  outcomes")
    for name in args.targets.split(","):
        row = run_target(name, corpus, args.runs, work)
        rows.append(row)
        outs = ", ".join(f"{k} {v}" for k, v in sorted(row["outcomes"].get(name, {}).items()))
        print(f"{name:<18} {row['executions']:>10} {row['seconds']:>8}  {outs}"
              + ("" if row["finding"] is None else f"\n  FINDING:\n{row['finding']}"), flush=True)
    if args.json:
        args.json.write_text(json.dumps(dict(runs=args.runs, targets=rows), indent=1))
        print(f"wrote {args.json}")
    bad = [r["target"] for r in rows if r["finding"] is not None or r["executions"] < args.runs]
    if bad:
        print(f"findings or short runs: {', '.join(bad)} (crash inputs under {work})")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
