"""Layout (P) with bootstraps (compile(..., layout="packed", bootstrap=True); issue #18 item 1 for layout P).

The same placement DP as layout (A) (hemlp.planner.bootstrap_placement) on the same level DAG: one LevelNode
per lowered step, its depth, the ciphertexts of its packed value (1, or the replicated input's K) and its time
per limb and per level from layout (P)'s unit costs (hemlp.planner.layouts.packed_step_seconds of the packed step:
its diagonal products, hoisted baby-step and giant-step rotations). The placement is written back into the lowered
steps by hemlp.layouts.batch_bootstrap.apply_placement (bootstrap and drop steps at exact levels), and
hemlp.layouts.packed runs them on the packed ciphertexts:

    bootstrap  out = Bootstrapper.bootstrap(in / c) * c     (c: a power of two above the calibrated slot values)

Only the single CtS-first pipeline is planned here: one packed value is one ciphertext, so there is nothing to
batch (k ciphertexts per call) and no PCMM to fuse (MaMBo); a value of two or more ciphertexts (the replicated
input, or a value wider than the slots held as channel blocks) is refreshed two by two with bootstrap_pair.

Sparse slots: a per(p) value of b interleaved samples repeats every n = p*b slots, and a full-slot ciphertext
whose slots repeat with period n is, read with n slots, the sparse encoding of its first n slots (the message
polynomial lies in the subring Z[X^(N/2n)]; the bootstrapper's subring trace removes what the noise has outside).
So the program bootstraps with n = the largest period of any refreshed value (a power of two, so every other
refreshed value repeats with it too): fewer CoeffToSlot / SlotToCoeff diagonals than full slots when the tensors
are small. The time estimate stays the full-slot measurement (an upper bound) and the simulated error the
measured full-slot precision.
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from hemlp.bootstrap.params import preset_levels_consumed
from hemlp.compiler.params import depth_of, output_reserve, step_cost
from hemlp.fhe import Params
from hemlp.layouts.base import Planned
from hemlp.layouts.batch_bootstrap import (CTS_LOG_MESSAGE_RATIO, DEFAULT_NOISE_BITS, OWN_NODE_OPS, apply_placement,
                                           boot_preset, peak_of, scale_down_limit, scale_factor)
from hemlp.layouts.packed import SIMULATE_GROUPS, PackedProgram
from hemlp.layouts.packed_split import PART, block_index, bootstrap_pairs, origin, split_wide_steps, value_of
from hemlp.planner.bootstrap_placement import BootstrapCost, LevelNode, place_bootstraps
from hemlp.planner.layouts import packed_step_seconds
from hemlp.runtime.local import simulate as simulate_rows
from hemlp.step_ops import StepOp

__all__ = ["PEAK_TOLERANCE", "packed_level_dag", "packed_peaks", "plan_packed_bootstrapped"]


def packed_level_dag(prog: PackedProgram, params, levels_after: int, unsplit=None) -> list[LevelNode]:
    """One LevelNode per step of the unsplit program (`unsplit`: its steps' names when prog runs values wider than a
    ciphertext as channel blocks, hemlp.layouts.packed_split, a step's parts priced together; None: one node per
    step of prog) for ONE group of b samples: its depth, the ciphertexts of its value in a group, its seconds per limb
    (the step priced at the level a bootstrap lands at, divided by that level's limbs) and, key switches not being
    linear in the limbs, the step priced at every level a bootstrap leaves (LevelNode.level_costs: the placement's
    total is then the sum of the steps' estimates at their levels). A wide value's blocks are refreshed together (the
    placement is the unsplit program's: one state per value, not per block, no bootstrap between a PCMM's partial
    products). Groups run apart (in process one after the other, on Ray as separate tasks), so a value's ciphertexts
    pair for bootstrap_pair only within a group: every cost is the group's times prog.groups, and the placement that
    is cheapest for one group is cheapest for all (plan_packed_bootstrapped scales the totals)."""
    def whole(name):
        return name if unsplit is None else origin(name, unsplit)

    parts: dict = {}                               # unsplit step -> the program's steps that run it, in order
    for s in prog.steps:
        parts.setdefault(whole(s.out), []).append(s)
    nodes = []
    for name, ps in parts.items():
        first = ps[0]
        at = tuple(sum(packed_step_seconds(prog, s, params, lv) for s in ps) for lv in range(levels_after + 1))
        own = first.src.op in OWN_NODE_OPS
        depth = 0 if own else step_cost(first.src)
        cts = sum(s.layout.K for s in ps if unsplit is None or value_of(s.out) is not None)
        nodes.append(LevelNode(name, str(first.src.op) if own else "op", tuple(whole(v) for v in first.inputs),
                               depth, cts, at[-1] / (levels_after + 1), level_costs=at))
    return nodes


def _slot_peaks(prog: PackedProgram, X: np.ndarray) -> tuple[dict, float]:
    """Per value, the largest |slot| over every slot of its ciphertexts (pad positions and the zero samples of a
    partial group included) on the samples X, by the packed program itself; and the largest |output| of the real
    samples."""
    peaks: dict = {}
    max_out, samples = 0.0, 0

    def peak(name, vecs):
        nonlocal max_out
        peaks[name] = max(peaks.get(name, 0.0), max(float(np.max(np.abs(u))) for u in vecs))
        if name == prog.output.out:         # the real samples' output features bound the final rescale
            for g in range(vecs[0].shape[0]):
                y = prog.unpack(np.stack([v[g] for v in vecs]), min(prog.b, samples - g * prog.b))
                max_out = max(max_out, float(np.max(np.abs(y))) if y.size else 0.0)

    chunk = SIMULATE_GROUPS * prog.b             # groups evaluated together, each value freed after its last use
    for i in range(0, len(X), chunk):
        samples = min(chunk, len(X) - i)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prog.run_plain(X[i: i + chunk], on_value=peak)
    return peaks, max_out


#: a wide value's block j is refreshed with the simulated error seed (the value's seed) * SEED_STRIDE + j
SEED_STRIDE = 1 << 16

#: how far the packed program's slot values may sit above the lowered steps' values of the same features (its
#: diagonals are quantised on their own: measured ~3e-6 relative on a ResNet-20); the feature peaks are raised by it
PEAK_TOLERANCE = 1e-4


def packed_peaks(prog: PackedProgram, steps, X: np.ndarray, weight_bits: int,
                 known: dict | None = None, whole: bool = False) -> tuple[dict, float]:
    """Per value, the largest |slot| any calibration sample puts in its ciphertexts (every slot enters EvalMod), and
    the largest |output| (X: samples x features).

    A slot holds either a feature of a sample, or a value no sample's features reach: a pad position (the
    diagonals and the folded biases are zero there, so it carries the activations' constant p(0) and sums of such
    constants) or a zero sample of a partial group (the model's features on input 0). So the features' peaks come
    from one pass of the lowered steps over all samples (rows, hemlp.runtime.local.simulate: no rotations, no
    diagonals), and the other slots' from the packed program on one group of real samples and one of zeros. The
    packed pass is the check: if its slots on the real group exceed the combined peak (beyond rounding), the
    argument failed for this program and every sample runs through the packed program instead (PEAK_TOLERANCE
    allows for the rounding that differs between the two). known: the values' per-row peaks on X from a pass of the
    lowered steps already made (compile's), which replace the features' pass. whole: the peaks of the unsplit
    program's values (`steps` hold wide values as channel blocks: a value's peak is its blocks' largest; a PCMM's
    partial products and sums are part of no value), and `known` names them."""
    def feature_peaks(rows: np.ndarray) -> dict:
        feat: dict = {}

        def see(step, v):
            feat[step.out] = float(np.max(np.abs(v))) if v.size else 0.0

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            simulate_rows(steps, rows.T, weight_bits, on_value=see)
        return feat

    def by_value(peaks: dict) -> dict:
        if not whole:
            return peaks
        out: dict = {}
        for name, v in peaks.items():
            if (w := value_of(name)) is not None:
                out[w] = max(out.get(w, 0.0), v)
        return out

    first = X[:prog.b]
    other, _ = _slot_peaks(prog, np.zeros((prog.b,) + X.shape[1:]))     # pads, zero samples: the same for any input
    real, _ = _slot_peaks(prog, first)
    feat_first = feature_peaks(first)
    tol = 1.0 + PEAK_TOLERANCE
    if any(v > max(feat_first.get(name, 0.0), other[name]) * tol + 1e-12 for name, v in real.items()):
        every, max_out = _slot_peaks(prog, X)
        return by_value(every), max_out
    other = by_value(other)
    if known is not None and all(n in known for n in other):
        feat = {n: peak_of(known[n]) for n in other}
    else:
        feat = by_value(feature_peaks(X))
    return ({name: max(feat.get(name, 0.0) * tol, v) for name, v in other.items()},
            feat.get(prog.output.out, 0.0) * tol)


def plan_packed_bootstrapped(steps, x: np.ndarray, opts: dict, batch_size, peaks: dict | None = None) -> Planned:
    """The layout (P) program with bootstraps for a lowered model. batch_size None: one sample (the single-image
    layout). peaks: the values' per-row peaks on x from compile's pass (None: measured here)."""
    info = boot_preset(opts.get("preset"), bool(opts["allow_insecure"]))
    params = Params.preset(info["name"])
    slots = params.N // 2
    # values wider than a ciphertext held as channel blocks: the program's shape and costs are the split steps', the
    # placement is on the unsplit steps (a value's blocks refreshed together) and split after it
    blocks_memo: dict = {}
    split = split_wide_steps(steps, slots, blocks_memo)
    wide = split is not steps
    boot = BootstrapCost.from_params(params, preset_levels_consumed(info["name"]))
    bs = 1 if batch_size is None else int(batch_size)
    prog = PackedProgram(split, slots, bs)
    peaks, max_out = packed_peaks(prog, split, x.reshape(x.shape[0], -1), int(opts["weight_bits"]), peaks, wide)
    reserve = output_reserve(max_out, params.log_scale, int(math.log2(params.q[0])))
    nodes = packed_level_dag(prog, params, boot.levels_after, {t.out for t in steps} if wide else None)
    # a value's ciphertexts (a wide value's channel blocks too: bootstrap_pairs) are refreshed two by two
    placement = place_bootstraps(nodes, boot, min_output_level=reserve)
    margin = 1.0 + float(opts["activation_margin"])
    limit = scale_down_limit(params, CTS_LOG_MESSAGE_RATIO)
    factors = {}
    for b in placement.bootstraps:
        if b.value not in factors:
            factors[b.value] = scale_factor(peaks[b.value], margin, limit, f"value {b.value!r}", params)
    bits = boot.precision_bits or DEFAULT_NOISE_BITS
    new = apply_placement(steps, placement, factors, bits, slots)
    if wide:                                # the same block weights, so prog's products are reused
        new = split_wide_steps(new, slots, blocks_memo)
    pairs = bootstrap_pairs(new)
    second = {b: a for a, b in pairs.items()}
    for s in new:
        if wide and s.op == StepOp.BOOTSTRAP and (b := block_index(s.out)) is not None:   # a wide value's block
            value = s.info.value
            s.info.value, s.info.ciphertexts = f"{value}{PART}{b}", 1
            # the pair's bootstrap is its first block's; the second rides along
            s.info.bootstraps = 0 if s.out in second else 1
            s.info.seconds = 0.0 if s.out in second else boot.seconds_for(2 if s.out in pairs else 1)
            if s.out in pairs or s.out in second:
                s.info.paired_with = f"{value}{PART}{b + 1 if s.out in pairs else b - 1}"
            s.info.seed = int(s.info.seed) * SEED_STRIDE + b     # each block its own simulated error
        if s.op == StepOp.BOOTSTRAP:
            # the placement priced one group: every group refreshes its own ciphertexts (no pairing across groups)
            s.info.ciphertexts = int(s.info.ciphertexts) * prog.groups
            s.info.bootstraps = int(s.info.bootstraps) * prog.groups
            s.info.seconds = float(s.info.seconds) * prog.groups
            s.info.order, s.info.kind, s.info.k = "cts_first", "single", 1
            s.info.lowering = ("single (CtS-first): layout (P) refreshes one packed ciphertext per value (nothing "
                                  "to batch, no PCMM to fuse)")
    top = next(s.level_out for s in new if s.op == StepOp.INPUT)
    # the placed steps keep the weights: layout (P)'s program of them reuses prog's matrix-vector products
    return Planned(new, params, dict(info), depth_of(steps), reserve, top, bs, opts, max_out,
                   reuse={"packed_matvecs": prog.memo})
