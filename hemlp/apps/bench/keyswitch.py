"""Key switches and plaintext products at every level of N14-d6 and N16-boot, against the planner's counts.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m hemlp.bench keyswitch \
        --json bench/keyswitch_levels_xeon.json

Measures, at one thread (CPU-time medians), a rotation, one of 8 hoisted rotations, ct x ct + relin + rescale and a
ct x pt product accumulated into a partial sum, at each level. Each cost model is calibrated on this run's own point
at N14-d6's fresh level (as ``hemlp calibrate`` calibrates the planner) and predicts every other level and preset:
the planner's key-switch units (hemlp.planner.keyswitch_cost) and the limb count it used before. The table gives
predicted / measured. N16-boot needs ~3 GiB (keys for 8 rotations over 28 levels); about 2 minutes.
``hemlp calibrate --boot N16-boot`` measures that preset's levels with ``measure_levels`` too (its ring factors).
"""
from __future__ import annotations

import argparse
import warnings

HELP = "rotations, hoisted rotations, ct x ct and ct x pt at every level, against the planner's cost counts"

#: (preset, levels, repeats): N14-d6's every level, N16-boot's application levels and one above them
RUNS = (("N14-d6", (0, 1, 2, 3, 4, 5, 6), 9), ("N16-boot", (0, 1, 2, 4, 6, 9, 12, 16), 5))
CALIBRATION = ("N14-d6", 6)
STEPS = (1, 2, 3, 4, 5, 6, 7, 8)
#: the ops measured, named as the planner's unit costs they check (encode: an encoding at the level, priced
#: N x (encode + limbs x encode_limb))
OPS = ("rotate", "rotate_hoisted", "ct_mul", "pt_mul", "encode")
#: the ops the two counts are compared on (an encoding is priced the same way by both)
MODEL_OPS = OPS[:4]


def measure_levels(preset: str, levels, repeats: int, log=print, allow_insecure: bool = False) -> dict:
    """{level: {op: CPU seconds}} at the caller's threads (one: hemlp.apps.bench.one_thread): rotate, one of 8
    hoisted rotations, ct x ct + relin + rescale (levels >= 1), ct x pt accumulated (pt_mul, as a diagonal product
    runs) and the encoding of a diagonal at the level (encode). allow_insecure: for the test presets (hemlp calibrate
    --quick)."""
    import numpy as np

    from hemlp import fhe
    from hemlp.apps.bench import measure

    ctx = fhe.Context(fhe.Params.preset(preset), allow_insecure=allow_insecure)
    sk, pk = ctx.keygen()
    rlk, gk = ctx.relin_key(sk), ctx.rotation_keys(sk, list(STEPS))
    x = np.random.default_rng(1).uniform(-1, 1, ctx.slots)
    top = ctx.encrypt(x, pk)
    rows = {}
    for lv in levels:
        ct = ctx.drop_level(top, lv) if lv < top.level else top
        pt = ctx.encode(x, level=lv, scale=float(ctx.modulus(lv)))
        acc = ctx.mul(ct, pt)

        def cpu(fn):
            return measure(fn, repeats)["cpu_median_s"]
        row = {"rotate": cpu(lambda: ctx.rotate(ct, 1, gk)),
               "rotate_hoisted": cpu(lambda: ctx.rotate_hoisted(ct, list(STEPS), gk)) / len(STEPS),
               "pt_mul": cpu(lambda: ctx.add(acc, ctx.mul(ct, pt))),
               "encode": cpu(lambda: ctx.encode(x, level=lv, scale=float(ctx.modulus(lv))))}
        if lv >= 1:
            row["ct_mul"] = cpu(lambda: ctx.mul(ct, ct, relin_key=rlk, rescale=True))
        rows[lv] = row
        log(f"  {preset} level {lv}: " + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in row.items()))
    return rows


def model_units(params, level: int, op: str, model: str, costs: dict | None = None) -> float:
    """Units of one op at `level`: 'keyswitch' (the planner's: key-switch units for key-switching ops, limbs for
    pt_mul) or 'limbs' (N x limbs for all, the planner's count before), times N. An encoding's units are its price
    in seconds over the ``encode`` unit cost: N x (1 + limbs x encode_limb / encode), from `costs` (unit costs)."""
    from hemlp.planner.keyswitch_cost import op_units

    if op == "encode":
        return params.N * (1 + (level + 1) * costs["encode_limb"] / costs["encode"])
    if model == "limbs":
        return params.N * (level + 1)
    return params.N * op_units(params, level, op, len(STEPS))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument("--quick", action="store_true", help="two repeats and three levels per preset (a smoke run)")


def main(args: argparse.Namespace) -> int:
    from hemlp import fhe
    from hemlp.apps.bench import one_thread
    from hemlp.apps.bench.report import machine_info, save_json, table

    measured = {}
    with one_thread(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for preset, levels, repeats in RUNS:
            if args.quick:
                levels, repeats = (levels[0], levels[len(levels) // 2], levels[-1]), 2
            print(f"[keyswitch] {preset} ...", flush=True)
            measured[preset] = measure_levels(preset, levels, repeats)
    ref_preset, ref_level = CALIBRATION
    ref_params = fhe.Params.preset(ref_preset)
    ref = measured[ref_preset][ref_level]
    models = ("keyswitch", "limbs")
    unit = {m: {op: ref[op] / model_units(ref_params, ref_level, op, m) for op in MODEL_OPS} for m in models}
    rows = []
    for preset, per_level in measured.items():
        params = fhe.Params.preset(preset)
        for lv, ops in per_level.items():
            for op in (op for op in MODEL_OPS if op in ops):
                sec = ops[op]
                ratio = {m: unit[m][op] * model_units(params, lv, op, m) / sec for m in models}
                rows.append(dict(preset=preset, level=lv, op=op, seconds=sec, predicted_over_measured=ratio))
    table(["preset", "level", "op", "measured ms", "key-switch units", "limbs"],
          [[r["preset"], r["level"], r["op"], f"{r['seconds'] * 1e3:.2f}",
            f"{r['predicted_over_measured']['keyswitch']:.2f}", f"{r['predicted_over_measured']['limbs']:.2f}"]
           for r in rows],
          title=f"predicted / measured (each model calibrated on {ref_preset} level {ref_level}; one thread)")
    summary = {m: {op: {"min": min(r["predicted_over_measured"][m] for r in rows if r["op"] == op),
                        "max": max(r["predicted_over_measured"][m] for r in rows if r["op"] == op)}
                    for op in MODEL_OPS}
               for m in models}
    if args.json:
        save_json(args.json, "keyswitch", dict(
            calibrated_on=dict(preset=ref_preset, level=ref_level), threads=1, quick=args.quick, rows=rows,
            summary=summary, models=dict(keyswitch="hemlp.planner.keyswitch_cost (the planner's; pt_mul per limb)",
                                         limbs="N x (level + 1) for every op, the planner's count before"),
            measured=True), machine=machine_info())
    return 0
