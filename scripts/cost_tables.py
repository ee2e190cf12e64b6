"""Write the planner's packaged cost tables (hemlp/planner/cost_tables/<simd>.json) from the repository's bench/.

    .venv/bin/python scripts/cost_tables.py [--bench bench] [--out hemlp/planner/cost_tables] [--check]

avx512.json: the measurements of bench/*.json, all one AMD EPYC on hemlp's AVX-512 path: the unit costs from
bench/core_N14.json (its encode split into the level-0 part and the part per limb by the ratio of another core run,
ENCODE_SPLIT_RUN, while core_N14.json has no level-0 encode) and bench/pcmm_N14.json, the single bootstraps of
every bench/boot_*.json (secret-key input), the batched-bootstrapping ratios of every bench/mambo_*.json (parsed by
hemlp.apps.calibrate, which `hemlp calibrate` uses on its own runs).

avx2.json: no AVX2-only machine has run the benchmarks, so it is derived from avx512.json by measured ratios, and
every figure says so:
* unit costs: x the avx2 / avx512 ratio of the same op in bench/core_N14_simd_paths_avx2.json (one run, both paths
  side by side, one thread, CPU-time medians); pcmm_mac (and mlwe_mac, the same kernel) x the layout (A) run-time
  ratio of bench/infer_N14_avx2.json over bench/infer_N14.json (the core benchmark has no PCMM);
* bootstrap times: x the geometric mean of the key-switching ops' ratios (rotate, 8 hoisted rotations, ct x ct):
  bootstrapping is dominated by key switches; precision is the same (the paths are bit-identical);
* batched-bootstrapping ratios, key bytes and bits: carried (same-run ratios are dimensionless; keys and results do
  not depend on the SIMD path).

--check: exit 1 when the files in --out differ from what bench/ gives (tests/planner/test_cost_model.py runs it).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

from hemlp.apps.calibrate import KEY_SWITCH_OPS, batch_run, boot_measurements, unit_costs_from_runs
from hemlp.planner.cost_model import UNIT_COSTS, CostProfile

ROOT = Path(__file__).resolve().parents[1]
#: bench/boot_*.json that are not the reference single bootstrap: written before the input_encryption field existed
EXCLUDE = {"boot_N16_pk_input.json": "public-key input (its encryption noise, not bootstrapping's)"}
#: the core benchmark's op behind each unit cost (mlwe_mac, pcmm_mac: the PCMM, not in the core benchmark)
CORE_OP = {"rotate": "rotate", "rotate_hoisted": "rotate_hoisted8", "ct_mul": "mul", "encrypt": "encrypt",
           "encode": "encode", "encode_limb": "encode", "pt_mul": "mul_plain_add", "rescale": "rescale",
           "touch": "touch_256mib"}
#: a core run with the level-0 encode, for splitting the encode of a run made before it was measured (its share of
#: the fresh encode: how the code divides an encoding between the slot FFT and the residues, not a machine's speed)
ENCODE_SPLIT_RUN = "core_N14_xeon.json"


def load(bench: Path, name: str) -> dict:
    return json.loads((bench / name).read_text())


def machine_of(doc: dict, name: str, want: str) -> str:
    """The CPU model of a run, checked to be on SIMD path `want` (a table mixes no machines)."""
    m = doc["machine"]
    path = (m.get("simd") or {}).get("path") or doc.get("simd_path")
    if path not in (want, None):
        raise SystemExit(f"{name} was measured on SIMD path {path}, not {want}: it cannot enter the {want} table")
    return m["cpu"]["model"]


def avx512_table(bench: Path) -> CostProfile:
    core, pcmm = load(bench, "core_N14.json"), load(bench, "pcmm_N14.json")
    cpus = {machine_of(core, "core_N14.json", "avx512"), machine_of(pcmm, "pcmm_N14.json", "avx512")}
    costs, how = unit_costs_from_runs(core, pcmm, "bench/core_N14.json", "bench/pcmm_N14.json",
                                      encode_split(bench, core))
    boots, runs, names, dates = [], [], [], [core["machine"]["date"], pcmm["machine"]["date"]]
    for path in sorted(bench.glob("boot_*.json")):
        if path.name in EXCLUDE:
            continue
        doc = json.loads(path.read_text())
        found = boot_measurements(doc, f"bench/{path.name}")
        if found:
            cpus.add(machine_of(doc, path.name, "avx512"))
            dates.append(doc["machine"]["date"])
            names.append(f"bench/{path.name}")
        boots += found
    for path in sorted(bench.glob("mambo_*.json")):
        doc = json.loads(path.read_text())
        run = batch_run(doc, f"bench/{path.name}")
        if run is not None:
            cpus.add(machine_of(doc, path.name, "avx512"))
            dates.append(doc["machine"]["date"])
            runs.append(run)
    if len(cpus) != 1:
        raise SystemExit(f"the avx512 runs come from several CPUs ({', '.join(sorted(cpus))}): one table per machine")
    cpu = cpus.pop()
    return CostProfile(
        cpu, "avx512", costs, how, tuple(boots), tuple(runs),
        description=(f"measured on {cpu}, hemlp SIMD path avx512, 1 thread: bench/core_N14.json, bench/pcmm_N14.json, "
                     f"{', '.join(names)}, "
                     f"{', '.join(r.name for r in runs)} (scripts/cost_tables.py)"),
        created=max(dates))


def one_thread_ops(results: list) -> dict:
    """{op: one-thread CPU-time median (wall-clock where none was recorded)} of a core benchmark's results."""
    r = next(r for r in results if r["threads"] == 1)
    return {k: v.get("cpu_median_s", v["median_s"]) for k, v in r["ops"].items()}


def encode_split(bench: Path, core: dict):
    """None when `core` measured the level-0 encode itself; else (level-0 / fresh encode, how) from
    ENCODE_SPLIT_RUN (one thread, CPU-time medians), whose preset must be `core`'s."""
    if "encode_level0" in one_thread_ops(core["results"]):
        return None
    doc = load(bench, ENCODE_SPLIT_RUN)
    if doc["preset"]["name"] != core["preset"]["name"]:
        raise SystemExit(f"bench/{ENCODE_SPLIT_RUN} ran {doc['preset']['name']}, not {core['preset']['name']}")
    ops = one_thread_ops(doc["results"])
    return (ops["encode_level0"] / ops["encode"],
            f"the level-0 / fresh encode ratio of bench/{ENCODE_SPLIT_RUN}, {doc['machine']['cpu']['model']}, "
            f"commit {doc['machine']['git']['commit'][:7]}")


def op_ratios(bench: Path) -> dict:
    """{core op: avx2 / avx512 one-thread CPU-time median} of the side-by-side run."""
    runs = load(bench, "core_N14_simd_paths_avx2.json")["simd_runs"]
    fast, slow = one_thread_ops(runs["avx512"]["results"]), one_thread_ops(runs["avx2"]["results"])
    return {k: slow[k] / fast[k] for k in fast}


def avx2_table(fast: CostProfile, bench: Path) -> CostProfile:
    r = op_ratios(bench)
    side = "bench/core_N14_simd_paths_avx2.json"
    costs, how = {}, {}
    for k, op in CORE_OP.items():
        costs[k] = fast.unit_costs[k] * r[op]
        how[k] = (f"derived: avx512 {fast.unit_costs[k]:.4g} x {r[op]:.3f}, the avx2/avx512 ratio of {op} in {side} "
                  "(1 thread, CPU-time medians)")
    a, b = load(bench, "infer_N14_avx2.json"), load(bench, "infer_N14.json")
    pcmm_ratio = a["run_s"] / b["run_s"]
    for k in ("pcmm_mac", "mlwe_mac"):
        costs[k] = fast.unit_costs[k] * pcmm_ratio
        how[k] = (f"derived: avx512 {fast.unit_costs[k]:.4g} x {pcmm_ratio:.3f}, the layout (A) run-time ratio of "
                  f"bench/infer_N14_avx2.json / bench/infer_N14.json (784-128-64-10 x², batch 4096, {b['threads']} "
                  "threads, median of 3; PCMM-dominated; no PCMM benchmark per SIMD path exists)")
    boot = math.prod(r[op] for op in KEY_SWITCH_OPS.values()) ** (1 / len(KEY_SWITCH_OPS))
    why = f"avx2/avx512 of the key-switching ops, {side}"
    boots = tuple(replace(m, seconds=m.seconds * boot,
                          pair_seconds=None if m.pair_seconds is None else m.pair_seconds * boot,
                          source=f"derived: avx512 {m.source.removeprefix('measured, ')} x {boot:.3f} ({why})")
                  for m in fast.bootstrap)
    runs = tuple(replace(x, derived="carried from avx512 (dimensionless)") for x in fast.batch_runs)
    return CostProfile(
        fast.cpu_model, "avx2", {k: costs[k] for k in UNIT_COSTS}, {k: how[k] for k in UNIT_COSTS}, boots, runs,
        description=(f"derived from the avx512 table ({fast.cpu_model}) by measured avx2/avx512 ratios: unit costs "
                     f"per op ({side}), the PCMM by the layout (A) run (bench/infer_N14_avx2.json), bootstraps x "
                     f"{boot:.3f} (the geometric mean of the key-switching ops' ratios: rotate, rotate_hoisted8, mul); batched ratios, key "
                     "bytes and bits carried: same-run ratios are dimensionless, keys and results do not depend on the "
                     "SIMD path (scripts/cost_tables.py)"),
        created=fast.created)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", default=str(ROOT / "bench"), help="the benchmark JSON folder (default bench/)")
    ap.add_argument("--out", default=str(ROOT / "hemlp" / "planner" / "cost_tables"), help="where the tables go")
    ap.add_argument("--check", action="store_true", help="compare with the files in --out instead of writing")
    a = ap.parse_args(argv)
    bench, out = Path(a.bench), Path(a.out)
    fast = avx512_table(bench)
    tables = {"avx512": fast, "avx2": avx2_table(fast, bench)}
    stale = []
    for simd, prof in tables.items():
        text = json.dumps(prof.to_json(), indent=1) + "\n"
        path = out / f"{simd}.json"
        if a.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(str(path))
            continue
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path}: {len(prof.bootstrap)} bootstrap row(s), {len(prof.batch_runs)} batched run(s)")
    if stale:
        print(f"stale (rerun scripts/cost_tables.py): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
