"""The plan (no encryption) of a ResNet-20-like CIFAR-10 net in layout (P) with bootstraps at N16-boot, one image:
estimated seconds per image (layers + bootstraps, one thread) and key bytes, per-layer rotation / plaintext-product
counts. Random weights (the trained model is another task): the counts and the placement depend on the structure
and the activation degree only; the scale factors c depend on the value ranges, so a trained model's plan differs
there (not in time).

    PYTHONPATH=. python scripts/plan_resnet20_packed.py [--degree 7] [--calib 4] \
        [--json bench/plan_resnet20_packed.json]
"""
from __future__ import annotations

import argparse
import json
import platform
import resource
import time
import warnings

import numpy as np

import hemlp
from hemlp.bootstrap import BootParams
from hemlp.bootstrap.keys import rotation_levels
from hemlp.planner.bootstrap_lowering import batch_ratios

# ResNet-20's shape with random weights scaled by 0.5 (the same net scripts/packed_memory.py measures; the script's
# folder is on sys.path when it runs)
from packed_memory import ResNet


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--degree", type=int, default=7, help="activation polynomial degree (ReLU fitted)")
    ap.add_argument("--calib", type=int, default=4, help="calibration images (random, uniform in [-1, 1])")
    ap.add_argument("--preset", default="N16-boot")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    net = ResNet()
    x = np.random.default_rng(0).uniform(-1, 1, (a.calib, 3, 32, 32))
    t0 = time.time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = hemlp.compile(net, x, layout="packed", bootstrap=True, preset=a.preset, batch_size=1,
                           activation_degree=a.degree, allow_insecure=a.preset != "N16-boot",
                           server_memory=None)      # planned only, whatever this machine's memory
    compile_s = time.time() - t0
    info = cm.plan.info
    b = info["bootstrap"]
    prog = cm.layout_impl.program
    layers = []
    for s in prog.steps:
        if s.op == "matvec":
            c = s.count()
            layers.append(dict(name=s.out, layout=s.layout.describe(), pt_mul=c["pt_mul"],
                               rot_hoisted=c["rot_hoisted"], rot=c["rot"], g1=s.g1, level_in=s.src.level_in))
    res = info["resources"]
    _, keys, _, src = batch_ratios(a.preset, cm.context.params.N)
    boot_keys = keys.get("single")
    ctx, P = cm.context, cm.context.params

    def boot_key_bytes(slots):
        """Switching keys of a bootstrapper with `slots` slots (Galois keys at their levels, the conjugation and
        relinearisation keys at EvalMod's level), as serialised (a-halves as seeds); the encapsulation keys aside."""
        bp = BootParams.for_context(ctx, slots=slots)
        em = ctx.max_level - bp.cts_depth
        return sum(P.switch_key_bytes(lv) for lv in rotation_levels(ctx, bp).values()) + 2 * P.switch_key_bytes(em)
    out = dict(schema="hemlp-bench/1", subcommand="plan_resnet20_packed", preset=a.preset, degree=a.degree,
               boot_slots=prog.boot_slots, depth=info["depth"],
               levels_after=b["levels_after"], bootstraps=len(b["placements"]),
               boot_seconds=b["boot_seconds"], layer_seconds=b["layer_seconds"], total_seconds=b["total_seconds"],
               cost_source=b["cost_source"], rotation_keys=info["rotation_keys"],
               eval_key_bytes_without_bootstrap=res.get("eval_key_bytes"),
               bootstrap_key_bytes_full_slots=boot_keys, bootstrap_key_source=src,
               bootstrap_switch_key_bytes_full=boot_key_bytes(None),
               bootstrap_switch_key_bytes_sparse=boot_key_bytes(prog.boot_slots),
               prepared_bytes=cm.layout_impl.prepared_bytes(),
               all_diagonal_bytes=sum(len(s.diags) * cm.context.params.N * 8 * (s.src.level_in + 1)
                                      for s in prog.steps if s.op == "matvec"),
               uncached_diagonals=cm.layout_impl.uncached_diagonals(),
               estimate_seconds=cm.layout_impl.estimate(), layers=layers,
               compile_seconds=compile_s, peak_rss_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
               machine=platform.processor() or platform.machine(),
               note="plan only (no encryption); times are the planner's one-thread estimates")
    for L in layers:
        print(f"{L['name']:>14}: {L['layout']:<48} {L['pt_mul']:5d} pt products, {L['rot_hoisted']:4d} hoisted + "
              f"{L['rot']:3d} rotations (g1 {L['g1']}) at L{L['level_in']}")
    print(f"bootstraps: {out['bootstraps']} ({prog.boot_slots} slots each), {b['levels_after']} levels after; "
          f"estimated {b['boot_seconds']:.1f} s bootstrapping + {b['layer_seconds']:.1f} s layers = "
          f"{b['total_seconds']:.1f} s per image (1 thread; {b['cost_source']}); with the "
          f"{out['uncached_diagonals']} diagonals beyond the runner's cache encoded per run: "
          f"{out['estimate_seconds']:.1f} s")
    print(f"keys: {info['rotation_keys']} rotation keys + relin = {res.get('eval_key_bytes', 0) / 1e9:.2f} GB, "
          f"bootstrapping keys (full slots, measured) {(boot_keys or 0) / 1e9:.2f} GB, "
          f"switching keys counted: full slots {out['bootstrap_switch_key_bytes_full'] / 1e9:.2f} GB, "
          f"{prog.boot_slots} slots {out['bootstrap_switch_key_bytes_sparse'] / 1e9:.2f} GB; encoded diagonals "
          f"{out['all_diagonal_bytes'] / 1e9:.2f} GB, {out['prepared_bytes'] / 1e9:.2f} GB kept; compile "
          f"{compile_s:.0f} s, peak RSS {out['peak_rss_gb']:.2f} GB")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
