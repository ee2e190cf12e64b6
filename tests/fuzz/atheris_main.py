"""Coverage-guided fuzzing of one deserialiser with Atheris (libFuzzer for Python).

    python -m tests.fuzz.atheris_main TARGET CORPUS_ROOT [libFuzzer flags, e.g. -runs=100000]

CORPUS_ROOT is a corpus built by ``python -m tests.fuzz.targets CORPUS_ROOT``; its TARGET folder seeds the run
(new inputs that reach new code are written to a work folder, never into the seeds). TARGET "all" fuzzes every
target in one process: an input's first byte picks the target, the rest is its bytes (the quick run of the
test suite). hemlp's modules are
instrumented for coverage (``atheris.instrument_imports``); the native core is not (the libFuzzer + sanitizer
targets of ``make fuzz`` cover it). Every input is resealed first (``hemlp.fhe.serialize.recompute_checksums``), then
loaded: a typed hemlp error is a pass, any other exception is reported by libFuzzer as a crash with the input
saved. HEMLP_FUZZ_STATS=path: the outcomes per target and type (JSON), rewritten every 256 executions and at the
last one (libFuzzer ends the process without Python's exit handlers); libFuzzer's own "Done N runs" line is the
execution count.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import atheris

with atheris.instrument_imports(include=["hemlp"]):
    import hemlp  # noqa: F401
    from hemlp import pcmm    # noqa: F401
    from hemlp import fhe
    from hemlp.fhe import serialize
    from hemlp.bootstrap import keys  # noqa: F401
    from hemlp.layouts import blocked  # noqa: F401
    from hemlp.runtime import artifacts, jobs  # noqa: F401

from tests.fuzz.targets import Targets  # noqa: E402


def main() -> None:
    name, root, flags = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
    targets = Targets(root)
    names = sorted(targets.loaders)
    if name != "all" and name not in targets.loaders:
        raise SystemExit(f"unknown target {name!r}; targets: all, {', '.join(names)}")
    work = Path(tempfile.mkdtemp(prefix=f"hemlp-fuzz-{name}-"))
    if name == "all":  # one seed folder: each seed prefixed by its target's index
        seeds = work / "seeds"
        seeds.mkdir()
        for i, n in enumerate(names):
            for p in sorted((root / n).iterdir()):
                (seeds / f"{n}-{p.name}").write_bytes(bytes([i]) + p.read_bytes())
    else:
        seeds = root / name
    stats_path = os.environ.get("HEMLP_FUZZ_STATS")
    runs = next((int(f.split("=", 1)[1]) for f in flags if f.startswith("-runs=")), None)
    outcomes: dict = {}
    count = [0]

    def one(data: bytes) -> None:
        if name == "all":
            if not data:
                return
            n, data = names[data[0] % len(names)], data[1:]
        else:
            n = name
        r = targets.run(n, data)
        per = outcomes.setdefault(n, {})
        per[r] = per.get(r, 0) + 1
        count[0] += 1
        if stats_path and (count[0] % 256 == 0 or count[0] == runs):
            Path(stats_path).write_text(json.dumps(dict(target=name, executions=count[0], outcomes=outcomes)))

    atheris.Setup([sys.argv[0], *flags, str(work / "new"), str(seeds)], one)
    (work / "new").mkdir()
    try:
        atheris.Fuzz()
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(targets.tmp, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
