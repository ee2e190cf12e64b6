"""``hemlp calibrate``: measure this machine's costs and write the planner's cost profile for it.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE hemlp calibrate [--quick] [--output PATH] [--boot N16-boot]

At one thread, with the benchmarks' own measuring functions (hemlp.apps.bench): the core ops at N14-d6 (``python -m
hemlp.bench core``), the RLWE PCMM's multiply-accumulate at N14-d6 (``pcmm``), the single bootstrap at test-N12-boot
(``boot``) and the batched-bootstrapping ratios there (``mambo``). What takes too long to measure here (the
N16-boot bootstrap needs ~10 GiB of keys and transforms) is carried from the packaged table of this SIMD path, scaled
by the measured test-N12-boot bootstrap over the table's, and labelled derived, unless ``--boot N16-boot`` measures it
here too (refused before any measuring when the machine lacks the memory). The profile goes to the user cache
(hemlp.planner.cost_model.user_profile_path: keyed by CPU model and SIMD path), where the planner finds it.
About 2 minutes on a 2-core AMD EPYC; ``--quick`` (tiny repeat counts, for tests) about 20-30 s.

The parsers below turn benchmark payloads (bench/*.json, or what the measuring functions return) into profile
parts; scripts/cost_tables.py builds the packaged tables with them from the repository's bench/.
"""
from __future__ import annotations

import argparse
import datetime as dt
import math
import warnings
from dataclasses import replace

from hemlp.errors import InsecureParametersWarning, ParameterError, ResourceError, UnsafeDecryptionWarning
from hemlp.planner.cost_model import (PROFILE_ENV, UNIT_COSTS, BatchRun, BootMeasurement, CostProfile, RingFactors,
                                      active_profile, packaged_for, reset_profile_cache, save_profile,
                                      user_profile_path)
from hemlp.planner.keyswitch_cost import op_units

__all__ = ["unit_costs_from_runs", "boot_measurements", "batch_run", "calibrate", "print_comparison",
           "boot_measurement_bytes", "check_boot_presets", "ring_factors", "CORE_PRESET", "BOOT_PRESET",
           "KEY_SWITCH_OPS", "RING_LEVELS", "RING_OPS"]

CORE_PRESET = "N14-d6"
BOOT_PRESET = "test-N12-boot"
#: the levels of a --boot preset whose key switches and plaintext products give its ring's factors (clipped to its
#: top level): the low ones a network runs at between bootstraps, and where a bootstrap lands at N16-boot
RING_LEVELS = (1, 6, 12)
RING_OPS = ("rotate", "rotate_hoisted", "ct_mul", "pt_mul", "encode")
#: the ops of the core benchmark that are key switches: bootstrapping is dominated by them, so their speed ratio is
#: the one carried to bootstrap times (rotate, 8 hoisted rotations, ct x ct + relinearisation)
KEY_SWITCH_OPS = {"rotate": "rotate", "rotate_hoisted": "rotate_hoisted8", "ct_mul": "mul"}


# ---------------------------------------------------------------------------------------
# Benchmark payloads -> profile parts
# ---------------------------------------------------------------------------------------

def unit_costs_from_runs(core: dict, pcmm: dict, core_name: str, pcmm_name: str,
                         encode_split: tuple | None = None) -> tuple[dict, dict]:
    """({unit cost: seconds}, {unit cost: how}) from a core benchmark (`python -m hemlp.bench core`: its one-thread
    CPU-time medians per N * limbs of a fresh ciphertext) and a PCMM benchmark (the median over its one-thread RLWE
    rows at d3 = N/2 of seconds per multiply-accumulate). ValueError naming the file when a figure is missing.

    An encoding costs N * (encode + limbs * encode_limb) (hemlp.planner.layouts.encode_seconds): the two from the
    run's encodes at the fresh level and at level 0. encode_split = (level-0 share of the fresh encode, how) splits
    the fresh encode of a run made before the benchmark measured level 0 (scripts/cost_tables.py), and says so."""
    r = next((r for r in core.get("results", []) if r.get("threads") == 1), None)
    if r is None:
        raise ValueError(f"{core_name}: no one-thread run (python -m hemlp.bench core --threads 1)")
    N = int(core["preset"]["N"])
    fresh = r.get("levels", {}).get("fresh", 6)
    limbs = 1 + fresh
    units = N * limbs
    # key switches are priced per key-switch unit of their level (hemlp.planner.keyswitch_cost), not per limb
    params = _preset_params(core["preset"], core_name)
    ks, hoisted = N * op_units(params, fresh, "rotate"), N * op_units(params, fresh, "rotate_hoisted", 8)
    # CPU seconds of the one-thread run where recorded (the machine may have been shared), else wall-clock
    op = {k: v.get("cpu_median_s", v["median_s"]) for k, v in r["ops"].items()}
    missing = [k for k in ("rotate", "rotate_hoisted8", "mul", "encrypt", "encode", "mul_plain_add", "rescale",
                           "touch_256mib") if k not in op]
    if missing:
        raise ValueError(f"{core_name} lacks the ops {', '.join(missing)}: rerun python -m hemlp.bench core")
    c = {"rotate": op["rotate"] / ks, "rotate_hoisted": op["rotate_hoisted8"] / 8 / hoisted,
         "ct_mul": op["mul"] / ks, "encrypt": op["encrypt"] / units,
         "pt_mul": op["mul_plain_add"] / units, "rescale": op["rescale"] / units, "touch": op["touch_256mib"] / 2 ** 28}
    per = f"1 thread, CPU-time median / (N x limbs) of a fresh N={N} ciphertext"
    c["encode"], c["encode_limb"], how_enc = _encode_split(op, N, limbs, core_name, encode_split)
    per_ks = (f"1 thread, CPU-time median / (N x key-switch units) of a fresh N={N} ciphertext "
              f"({ks / N:.4g} units: hemlp.planner.keyswitch_cost)")
    per_h = (f"1 thread, CPU-time median / (N x hoisted key-switch units) of a fresh N={N} ciphertext "
             f"({hoisted / N:.4g} units, one of 8: hemlp.planner.keyswitch_cost)")
    how = {"rotate": f"measured: {core_name} rotate, {per_ks}",
           "rotate_hoisted": f"measured: {core_name} rotate_hoisted8 / 8, {per_h}",
           "ct_mul": f"measured: {core_name} mul (ct x ct + relin + rescale), {per_ks}",
           "encrypt": f"measured: {core_name} encrypt, {per}",
           **how_enc,
           "pt_mul": f"measured: {core_name} mul_plain_add (ct x pt accumulated), {per}",
           "rescale": f"measured: {core_name} rescale, {per}",
           "touch": f"measured: {core_name} touch_256mib / 2^28 bytes, 1 thread, CPU-time median"}
    per_mac = [r["pcmm_s"] / (r["d"] * r["d"] * 2 * (2 * r["d3"]) * (r["level"] + 1)) for r in pcmm.get("results", [])
               if r.get("format") == "rlwe" and r.get("threads") == 1 and r.get("d3_label") == "N/2"
               and "pcmm_s" in r]
    if not per_mac:
        raise ValueError(f"{pcmm_name}: no one-thread RLWE row at d3 = N/2 (python -m hemlp.bench pcmm --threads 1)")
    c["pcmm_mac"] = sorted(per_mac)[len(per_mac) // 2]
    how["pcmm_mac"] = (f"measured: {pcmm_name}, median of {len(per_mac)} one-thread RLWE PCMM row(s) at d3 = N/2, "
                       "seconds per multiply-accumulate of the exact modular GEMM")
    c["mlwe_mac"] = c["pcmm_mac"]   # the same exact modular GEMM kernel (ModGemmPlan)
    how["mlwe_mac"] = "= pcmm_mac: the MLWE PCMM runs the same ModGemmPlan kernel"
    return {k: c[k] for k in UNIT_COSTS}, {k: how[k] for k in UNIT_COSTS}


def _preset_params(preset: dict, core_name: str):
    """The parameters a core benchmark ran (its payload's ``preset``: a named preset), for the key-switch units
    of its fresh level. ValueError naming the file for a preset this hemlp does not know."""
    from hemlp import fhe

    try:
        params = fhe.Params.preset(preset["name"])
    except (KeyError, ParameterError) as e:
        raise ValueError(f"{core_name}: ran preset {preset.get('name')!r}, which this hemlp does not know: rerun "
                         "python -m hemlp.bench core") from e
    if int(params.N) != int(preset["N"]):
        raise ValueError(f"{core_name}: preset {preset['name']!r} ran at N = {preset['N']}, this hemlp's has "
                         f"N = {params.N}: rerun python -m hemlp.bench core")
    return params


def _encode_split(op: dict, N: int, limbs: int, core_name: str, split) -> tuple[float, float, dict]:
    """(encode, encode_limb, how): the level-independent part of an encoding (seconds per ring coefficient: the
    slot FFT and the rounding) and its part per limb (seconds per N * limbs: the residues), from the encode at the
    fresh level (`limbs` limbs) and at level 0 (one limb), or from `split` (share of the fresh encode that a level-0
    encode takes, how it was obtained) for a run without the level-0 op."""
    fresh = op["encode"]
    if split is not None:
        share, why = float(split[0]), str(split[1])
        level0, src = share * fresh, f"derived: {core_name} encode x {share:.3g} ({why})"
    elif "encode_level0" in op:
        level0, src = op["encode_level0"], f"measured: {core_name} encode_level0"
    else:
        raise ValueError(f"{core_name} lacks the op encode_level0: rerun python -m hemlp.bench core")
    # the two encodes differ by limbs - 1 limbs of residues
    limb = (fresh - level0) / (N * max(limbs - 1, 1))
    fixed = level0 / N - limb
    if not (limb > 0 and fixed > 0):
        raise ValueError(f"{core_name}: encodes at level 0 ({level0:.3g} s) and at the fresh level ({fresh:.3g} s, "
                         f"{limbs} limbs) give no positive split (a disturbed run?): rerun python -m hemlp.bench core")
    per = "1 thread, CPU-time medians"
    return fixed, limb, {
        "encode": f"{src} / N minus encode_limb, {per}: an encoding's part at any level (its slot FFT)",
        "encode_limb": f"{src} and encode, {per}: (fresh - level 0) / (N x {limbs - 1} limbs)"}


def boot_measurements(doc: dict, name: str) -> list:
    """The BootMeasurement of every thread count of a bootstrapping benchmark (`python -m hemlp.bench boot`, in its
    JSON envelope); [] for a run whose input was not encrypted with the secret key (another quantity)."""
    if doc.get("subcommand") != "boot" or doc.get("input_encryption", "sk") != "sk":
        return []
    p = doc["params"]
    levels = doc["levels_left"] + p["cts_depth"] + p["stc_depth"] + math.ceil(math.log2(p["degree"] + 1)) \
        + p["double_angles"]
    bits = [x["max_bits"] for x in doc["results"] if "max_bits" in x]
    out = []
    for r in doc["results"]:
        pair = r.get("bootstrap_pair", {}).get("median_s")
        out.append(BootMeasurement(
            doc["preset"], int(doc["N"]), int(levels), int(r["threads"]), float(r["bootstrap"]["median_s"]),
            None if pair is None else float(pair), float(min(bits)) if bits else None,
            f"measured, {name} ({doc['preset']}, {r['threads']} thread(s), {doc['machine']['cpu']['model']})"))
    return out


def batch_run(doc: dict, name: str) -> "BatchRun | None":
    """The BatchRun of a `python -m hemlp.bench mambo` payload (in its envelope), or None when it measured no
    S2C-first batch. Each ratio is against the single bootstrap of the same run (CPU times); key bytes are the
    S2C-first keys' memory where recorded (what the planned pipelines hold), else the keys the run made."""
    if doc.get("subcommand") != "mambo":
        return None
    st = doc["stages"]
    single = float(st.get("single_cpu_s_used") or st["single"]["bootstrap_cpu_s"])
    single_bits = float(st["single"]["max_bits"])
    rho, keys, bits = {}, {}, {}
    for b in st.get("batches", []):
        if "s2c_batch_cpu_s" not in b:
            continue
        k = int(b["k"])
        rho[k] = float(b["s2c_batch_cpu_s"]) / (k * single)
        keys[k] = int(b.get("s2c_key_memory_bytes") or b.get("key_memory_bytes") or b["key_bytes"])
        bits[k] = (float(b["s2c_min_max_bits"]) - single_bits, float(b["pcmm_bootstrap_min_max_bits"]) - single_bits)
    if not rho:
        return None
    return BatchRun(name, doc["preset"], int(doc["N"]), int(doc.get("threads", 2)),
                    str((doc.get("machine") or {}).get("date", "")), rho, keys, int(st["single"]["key_bytes"]), bits)


# ---------------------------------------------------------------------------------------
# Measuring this machine
# ---------------------------------------------------------------------------------------

def boot_measurement_bytes(preset: str) -> int:
    """What measuring a preset's single bootstrap holds, from its parameters: the full-slot keys and the
    Bootstrapper's encoded transforms and temporaries (the server memory model's terms)."""
    from hemlp.fhe import Params
    from hemlp.layouts.batch_bootstrap import family_key_bytes
    from hemlp.layouts.boot_memory import single_boot_bytes

    params = Params.preset(preset)
    return family_key_bytes(params, "cts_first") + single_boot_bytes(params, params.N // 2)


def check_boot_presets(presets) -> list:
    """The bootstrapping presets to measure besides BOOT_PRESET, in order, each checked before any measuring: a
    ParameterError naming the choices for one that is not a bootstrapping preset, a ResourceError naming the
    fix for one whose keys and transforms exceed this machine's available memory."""
    from hemlp.bootstrap.params import PRESET_DEPTHS
    from hemlp.planner.resources import available_memory_bytes

    out = [p for p in dict.fromkeys(presets) if p != BOOT_PRESET]
    for p in out:
        if p not in PRESET_DEPTHS:
            raise ParameterError(f"--boot {p}: not a bootstrapping preset; choose from "
                                 f"{', '.join(sorted(PRESET_DEPTHS))}")
        need, free = boot_measurement_bytes(p), available_memory_bytes()
        if free is not None and need > free:
            raise ResourceError(f"--boot {p}: its single bootstrap needs ~{need / 2 ** 30:.1f} GiB (keys and "
                                f"transforms) and this machine has {free / 2 ** 30:.1f} GiB available; free memory "
                                f"or leave {p} out (its time is then derived from {BOOT_PRESET}'s)")
    return out


def calibrate(quick: bool = False, output=None, log=print, boot_presets=()) -> CostProfile:
    """Measure this machine (see the module doc), write its profile (default: the user cache path for this CPU
    model and SIMD path) and return it, its ``source`` naming the file. quick: tiny repeat counts (tests).
    boot_presets: bootstrapping presets whose one-thread single bootstrap is measured here too (e.g. N16-boot:
    minutes and its keys' memory) instead of derived from BOOT_PRESET's."""
    from hemlp import machine
    from hemlp.apps.bench import report
    from hemlp.extras import require

    # typed errors before minutes of measuring, not after
    require("threadpoolctl", "hemlp calibrate (the PCMM benchmark caps BLAS threads)")
    require("mpmath", "hemlp calibrate (bootstrapping's EvalMod coefficients)")
    extra = check_boot_presets(boot_presets)
    cpu, simd = machine.cpu_model(), machine.simd_path()
    base = packaged_for(simd)
    log(f"[calibrate] {cpu}, SIMD path {simd}, 1 thread{' (quick)' if quick else ''}")
    with warnings.catch_warnings():
        # test-N12-boot is a measurement chain (insecure, decrypted exactly): its warnings are expected here
        warnings.simplefilter("ignore", InsecureParametersWarning)
        warnings.simplefilter("ignore", UnsafeDecryptionWarning)
        info = report.machine_info()
        core_doc, pcmm_doc, boot_doc, mambo_doc = _measure(quick, info, log)
        extra_docs = [_measure_boot(p, quick, info, log) for p in extra]
        extra_levels = {p: _measure_levels(p, quick, log) for p in extra}
    name = "hemlp calibrate" + (" --quick" if quick else "")
    costs, how = unit_costs_from_runs(core_doc, pcmm_doc, f"{name} core {CORE_PRESET}", f"{name} pcmm {CORE_PRESET}")
    rings = tuple(ring_factors(p, rows, costs, name) for p, rows in extra_levels.items())
    measured_boot = boot_measurements(boot_doc, name) + [m for d in extra_docs for m in boot_measurements(d, name)]
    run = batch_run(mambo_doc, name)
    # the packaged table's other presets, scaled by this machine's bootstrap speed over the table's
    mine = next(m for m in measured_boot if m.threads == 1)
    ref = next((m for m in base.bootstrap if m.preset == BOOT_PRESET and m.threads == 1), None)
    if ref is not None:
        ratio, why = mine.seconds / ref.seconds, f"{BOOT_PRESET} bootstrap measured here / the {base.source}'s"
    else:   # no such row in the table: the key-switching ops' speed ratio
        ratio = math.prod(costs[k] / base.unit_costs[k] for k in KEY_SWITCH_OPS) ** (1 / len(KEY_SWITCH_OPS))
        why = f"key-switching ops measured here / the {base.source}'s (geometric mean)"
    derived = [replace(m, seconds=m.seconds * ratio,
                       pair_seconds=None if m.pair_seconds is None else m.pair_seconds * ratio,
                       source=f"derived: {m.source.removeprefix('derived: ')} x {ratio:.3g} ({why})")
               for m in base.bootstrap if m.preset != BOOT_PRESET and not (m.preset in extra and m.threads == 1)]
    carried = [r if r.derived else replace(r, derived=f"carried from the {base.source}: same-run ratios are "
                                                      "dimensionless")
               for r in base.batch_runs if run is None or r.preset != run.preset]
    profile = CostProfile(
        cpu, simd, costs, how, tuple(measured_boot + derived), tuple(carried + ([run] if run else [])),
        description=(f"measured by {name} on {cpu} (SIMD path {simd}, 1 thread): core ops and PCMM at {CORE_PRESET}, "
                     f"the single bootstrap and batched ratios at {BOOT_PRESET}"
                     + "".join(f", the single bootstrap and the ring's key switches at {p}" for p in extra)
                     + "; other bootstrap times derived "
                     f"from the {base.source} x {ratio:.3g}, their batched ratios carried"),
        created=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), ring_factors=rings)
    path = save_profile(profile, output or user_profile_path(cpu, simd))
    reset_profile_cache()
    return replace(profile, source=str(path))


def _measure(quick: bool, info: dict, log) -> tuple:
    """The four benchmark payloads (in their envelopes) at one thread."""
    from hemlp.apps.bench import core, mambo, one_thread, pcmm, report

    with one_thread():
        log(f"[calibrate] core ops at {CORE_PRESET} ...")
        core_doc = report.envelope("core", core.run_core(CORE_PRESET, [1], 2 if quick else 10, log=lambda m: None),
                                   info)
        log(f"[calibrate] PCMM at {CORE_PRESET} ...")
        args = argparse.Namespace(allow_insecure=False, level=1, sizes="256", threads="1", d3="N/2",
                                  repeats=1 if quick else 3, weight_bits=12, no_rescale=False, fresh="", baseline=False)
        pcmm_doc = {"results": pcmm.run_preset(CORE_PRESET, args)[0]}
        boot_doc = _measure_boot(BOOT_PRESET, quick, info, log)
        log(f"[calibrate] batched bootstrapping at {BOOT_PRESET} ...")
        mambo_doc = report.envelope("mambo", mambo.run(
            BOOT_PRESET, [2] if quick else [2, 4, 8], [], 1, 0, 4.0, True, log=lambda m: None,
            repeats=1 if quick else 3, inner=1 if quick else 2, end_to_end=False), info)
    return core_doc, pcmm_doc, boot_doc, mambo_doc


def _measure_levels(preset: str, quick: bool, log) -> dict:
    """A bootstrapping preset's key switches and plaintext products at RING_LEVELS, one thread."""
    from hemlp.apps.bench import one_thread
    from hemlp.apps.bench.keyswitch import measure_levels
    from hemlp.fhe import Params

    top = Params.preset(preset).max_level
    levels = sorted({min(lv, top) for lv in RING_LEVELS})
    with one_thread():
        log(f"[calibrate] key switches at {preset}, levels {', '.join(map(str, levels))} ...")
        return measure_levels(preset, levels[:2] if quick else levels, 1 if quick else 3, log=lambda m: None,
                              allow_insecure=preset.startswith("test-"))


def ring_factors(preset: str, rows: dict, costs: dict, name: str) -> RingFactors:
    """The RingFactors of a preset's ring degree from its measured levels ({level: {op: seconds}}) and this run's
    unit costs (measured at CORE_PRESET): per op, the median over the levels of seconds per N x units (the
    planner's count: hemlp.planner.keyswitch_cost, limbs for pt_mul; an encoding's price for encode and
    encode_limb) over the unit cost."""
    from statistics import median

    from hemlp.apps.bench.keyswitch import model_units
    from hemlp.fhe import Params

    params = Params.preset(preset)
    factors = {op: median(r[op] / model_units(params, lv, op, "keyswitch", costs) for lv, r in rows.items()
                          if op in r) / costs[op] for op in RING_OPS}
    factors["encode_limb"] = factors["encode"]          # one factor for an encoding's price, both of its parts
    return RingFactors(int(params.N), factors, (
        f"measured: {name} --boot {preset}, levels {', '.join(map(str, rows))}, 1 thread, CPU-time medians: median "
        f"over the levels of seconds per N x units / the unit cost measured at {CORE_PRESET} in the same run"))


def _measure_boot(preset: str, quick: bool, info: dict, log) -> dict:
    """One preset's single bootstrap (and pair) at one thread, in its benchmark envelope."""
    from hemlp.apps.bench import boot, one_thread, report

    with one_thread():
        log(f"[calibrate] single bootstrap at {preset} ...")
        return report.envelope("boot", boot.run_boot(preset, [1], 1 if quick else 3, pair=True,
                                                     allow_insecure=preset.startswith("test-"), log=lambda m: None),
                               info)


def print_comparison(profile: CostProfile, out=print) -> None:
    """What calibrate measured next to the packaged table it replaces, and which profile the planner now uses."""
    from hemlp.apps.bench import report

    base = packaged_for(profile.simd_path)
    rows = [[k, f"{profile.unit_costs[k]:.3g}", f"{base.unit_costs[k]:.3g}",
             report.fmt_ratio(profile.unit_costs[k] / base.unit_costs[k])] for k in UNIT_COSTS]
    for m in profile.bootstrap:
        if m.threads != 1 or m.source.startswith("derived"):
            continue
        ref = next((b for b in base.bootstrap if b.preset == m.preset and b.threads == 1), None)
        rows.append([f"bootstrap {m.preset} (s)", f"{m.seconds:.3g}", "-" if ref is None else f"{ref.seconds:.3g}",
                     "-" if ref is None else report.fmt_ratio(m.seconds / ref.seconds)])
    for r in profile.batch_runs:
        if r.derived:
            continue
        ref = next((b for b in base.batch_runs if b.preset == r.preset and b.threads == r.threads), None) or next(
            (b for b in base.batch_runs if b.preset == r.preset), None)
        for k, v in sorted(r.rho.items()):
            old = None if ref is None else ref.rho.get(k)
            rows.append([f"rho k={k} {r.preset}", f"{v:.3f}", "-" if old is None else f"{old:.3f}",
                         "-" if old is None else report.fmt_ratio(v / old)])
    for ring in profile.ring_factors:            # packaged tables have none: a factor of 1
        rows += [[f"N={ring.N} {k} (x unit cost)", f"{f:.3f}", "1", report.fmt_ratio(f)]
                 for k, f in ring.factors.items()]
    report.table(["cost (unit costs: s per N x limbs or key-switch units)", "this machine", base.source,
                  "this / packaged"], rows,
                 title=f"hemlp calibrate — {profile.cpu_model}, SIMD path {profile.simd_path}, 1 thread")
    out(f"wrote {profile.source}")
    now = active_profile().source
    if profile.source not in now:
        out(f"note: the planner uses {now}; {PROFILE_ENV}={profile.source} selects this profile")
