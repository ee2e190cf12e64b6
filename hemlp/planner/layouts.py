"""Cost estimates of the layouts of a lowered program, for hemlp.compile's layout="auto".

Each estimate is  sum over steps of (operation count x unit cost), in seconds per batch on one thread,
client-side input encryption included (both layouts trade it against server work).
Unit costs are per (ring degree x limbs) so they scale to any preset and level:

* layout (A): PCMM = d1*d2*positions*chunks*2N*(l+1) multiply-accumulates (exact modular GEMM) and a rescale
  of every output ciphertext,
  activations = one ct x ct product per ciphertext and multiplication;
* layout (P): every diagonal a plaintext product, every rotation / hoisted rotation a key switch at
  its level, activations on the K input / 1 hidden ciphertext(s).
* layout (A′) (hemlp.layouts.mlwe): per MLWE PCMM rows_out * rows_in * (N + B') * (l+1) GEMM
  multiply-accumulates (a-parts N columns, b-parts B' columns) at ``mlwe_mac`` each, k key switches per
  output ciphertext (ModPack, costed as rotations: ModUp + inner product + ModDown at level l); per
  CoeffToSlot / SlotToCoeff and ciphertext the DFT plans' plaintext products, hoisted baby-step and
  giant-step rotations at their levels, one conjugation per split; the activations' ct x ct products on
  both real-slot parts; the client's encryption of ceil(F/k) ciphertexts.

Calibration: ``unit_costs()`` returns the active cost profile's unit costs (hemlp.planner.cost_model: the
profile `hemlp calibrate` measured on this machine, else the table packaged for its SIMD path, built by
scripts/cost_tables.py from the core benchmark (``bench/core_N14.json``: rotate, 8 hoisted rotations, ct x ct +
relin + rescale, encode, and the planner's own ops: ct x pt accumulated into a partial sum, rescale, first touch
of fresh memory, at one thread) and the PCMM benchmark (``bench/pcmm_N14.json``: RLWE PCMM seconds per
multiply-accumulate)); see docs/cost-model.md.
A diagonal product costs ``pt_mul`` = one ct x pt product and one addition into the partial sum, each a new
ciphertext (measured 5.9e-9 s per unit; the 3e-9 assumed before, the multiplication's arithmetic alone, made
layout (P) look twice as fast as it runs: the CIFAR CNN at batch 16 was estimated 21.6 s). Servers encode
the weight diagonals once (``prepare``): a plaintext's encoding costs N * ``encode`` whatever its level, plus
its bytes at ``touch`` (new memory, kept: the diagonals of that CNN are 3.5 GB).
``mlwe_mac`` (the MLWE PCMM's GEMM multiply-accumulate) runs the same ModGemmPlan kernel as the RLWE
PCMM, so it takes ``pcmm_mac``'s calibrated value; ModPack key switches are costed as rotations.
Check of estimate_mlwe against runs (one thread, warm, CPU time since the machine was shared):
784-32-10 x² on 1 000 MNIST digits at N15-d10 (B' = 1024, k = 32): estimate 2.96 s, measured 3.36 s
(MLWE PCMM 2.3 s, CoeffToSlot 0.65 s); 64-32-16-10 x² at test-N12-d18 (B' = 512, k = 8): 1.14 s vs
1.59 s; 32-16-10 GELU: 0.23 s vs 0.34 s, i.e. (A′) is underestimated by 1.1-1.5x. For that digit model
"auto" estimates (A) 2.22 s at N14-d6 and (A′) 2.96 s at N15-d10 (its DFT levels need the larger ring)
and takes (A). Recalibrate on the quiet machine with `python -m hemlp.bench infer --layout-batches`.
"""
from __future__ import annotations

import math
from typing import Optional

from hemlp.planner.cost_model import CostProfile, active_profile
from hemlp.planner.keyswitch_cost import op_units
from hemlp.step_ops import ACT_OPS, StepOp

__all__ = ["unit_costs", "op_seconds", "poly_muls", "act_muls", "estimate_batch", "estimate_packed",
           "packed_step_seconds", "estimate_mlwe", "encode_seconds"]


def unit_costs(profile: Optional[CostProfile] = None, N: Optional[int] = None) -> dict:
    """Seconds per (N * limbs) unit at one thread of the ops the layouts run (``rotate``, ``rotate_hoisted`` and
    ``ct_mul`` per N * key-switch units: hemlp.planner.keyswitch_cost; ``encode`` per ring coefficient: the part of
    an encoding any level pays, its FFT over the slots; ``encode_limb`` per N * limbs: its residues; ``touch`` per
    byte of memory a process writes for the first time: what keeping every encoded diagonal costs on top of
    encoding), from `profile` (default: the active cost profile); with N, times the profile's factors for that ring
    degree where it has them (CostProfile.ring_factors)."""
    p = profile or active_profile()
    c = dict(p.unit_costs)
    for ring in p.ring_factors:
        if N is not None and ring.N == int(N):
            c.update({k: c[k] * f for k, f in ring.factors.items()})
    return c


def encode_seconds(encodings, N: int, kept_bytes: int) -> float:
    """Seconds to encode plaintexts of ring degree N, `encodings` pairs (plaintexts, limbs of each), of which the
    server keeps kept_bytes in all: the encodings plus the first touch of the memory that holds them."""
    c = unit_costs(N=N)
    return sum(int(n) * N * (c["encode"] + int(limbs) * c["encode_limb"]) for n, limbs in encodings) \
        + kept_bytes * c["touch"]


def op_seconds(c: dict, params, level: int, op: str, group: int = 1) -> float:
    """One `op` at `level`: N x the planner's units of it (hemlp.planner.keyswitch_cost.op_units) x its unit cost
    in `c` (unit_costs)."""
    return params.N * op_units(params, level, op, group) * c[op]


def poly_muls(degree: int) -> int:
    """ct x ct products of a polynomial of this degree (baby-step giant-step evaluation)."""
    return max(1, math.ceil(2 * math.sqrt(degree)) + math.ceil(math.log2(degree + 1)))


def act_muls(step) -> int:
    if step.op == StepOp.SQUARE:
        return 1
    if step.op == StepOp.POLY:
        return poly_muls(len(step.act.coeffs) - 1)
    return 0


def estimate_batch(steps, params, batch: int) -> float:
    """Seconds for one batch in layout (A)."""
    c, N = unit_costs(N=params.N), params.N
    chunks = -(-int(batch) // (N // 2))
    t = 0.0
    for s in steps:
        lv = s.level_in if s.level_in is not None else params.max_level
        if s.op == StepOp.INPUT:      # the client encrypts one ciphertext per feature and chunk
            t += s.rows * chunks * N * (lv + 1) * c["encrypt"]
        elif s.op == StepOp.PCMM:     # the exact modular GEMM, then every output ciphertext's rescale
            P = 1 if s.index is None else s.index.shape[1]
            t += s.U.shape[0] * s.U.shape[1] * P * chunks * 2 * N * (lv + 1) * c["pcmm_mac"]
            t += s.rows * chunks * N * (lv + 1) * c["rescale"]
        elif s.op in ACT_OPS:
            t += s.rows * chunks * act_muls(s) * op_seconds(c, params, lv, "ct_mul")
        elif s.op == StepOp.AFFINE:
            t += s.rows * chunks * N * (lv + 1) * (c["pt_mul"] + c["rescale"])
        elif s.op == StepOp.MUL:
            t += s.rows * chunks * op_seconds(c, params, lv, "ct_mul")
        elif s.op == StepOp.MATMUL:     # k tensor products (4 limb-wise products each) + one relin/rescale per row
            k = s.info.a_shape[-1]
            t += s.rows * chunks * (op_seconds(c, params, lv, "ct_mul") + N * 2 * k * (lv + 1) * c["pt_mul"])
    return t


def packed_step_seconds(prog, s, params, level: int) -> float:
    """Seconds of one step of a layout (P) program (a hemlp.layouts.packed.PackedStep) run at `level`, one group
    of prog.b samples (the giant-step and reduction rotations follow the products' rescale: `level` limbs)."""
    c, N = unit_costs(N=params.N), params.N
    u = N * (level + 1)
    if s.op == "matvec":
        k = s.count()
        groups = max(1, len(s.giant))
        # the baby steps hoisted from the input at `level`, the giant steps and reductions after the rescale
        return (u * (k["pt_mul"] * c["pt_mul"] + groups * c["rescale"])
                + k["rot_hoisted"] * op_seconds(c, params, level, "rotate_hoisted", k["rot_hoisted"])
                + k["rot"] * op_seconds(c, params, level - 1, "rotate"))
    if s.op in ACT_OPS:
        return s.layout.K * act_muls(s.src) * op_seconds(c, params, level, "ct_mul")
    if s.op == StepOp.AFFINE:
        return s.layout.K * u * (c["pt_mul"] + c["rescale"])
    if s.op == StepOp.MUL:
        return s.layout.K * op_seconds(c, params, level, "ct_mul")
    if s.op == StepOp.INPUT:          # the client's encryption of the input layout's K ciphertexts
        return s.layout.K * u * c["encrypt"]
    return 0.0


def estimate_packed(prog, steps, params) -> float:
    """Seconds for one batch (up to prog.b samples) in layout (P), the client's input encryption included
    (the replicated input layout trades server rotations for K input ciphertexts); bootstraps not included
    (hemlp.layouts.packed adds the placement's estimate)."""
    t = 0.0
    for s in prog.steps:
        if s.op in (StepOp.BOOTSTRAP, StepOp.DROP):     # bootstraps: the placement's estimate
            continue
        if s.op == StepOp.INPUT:
            lv = s.src.level_out
        else:
            lv = s.src.level_in
        lv = lv if lv is not None else params.max_level
        t += packed_step_seconds(prog, s, params, lv)
    return t * prog.groups


def estimate_mlwe(prog, params) -> float:
    """Seconds for one batch (up to prog.d3 samples) in layout (A′), the client's input encryption included."""
    c, N = unit_costs(N=params.N), params.N
    steps = prog.steps
    t = prog.input.cts * N * (prog.input.level_out + 1) * c["encrypt"]
    prev = prog.input
    for m in steps:
        lv = m.level_in
        if m.kind == "pcmm":
            rows_in, rows_out = prev.cts * prog.k, m.cts * prog.k
            t += rows_out * rows_in * (N + prog.d3) * (lv + 1) * c["mlwe_mac"]
            t += m.cts * prog.k * op_seconds(c, params, lv, "rotate") + m.cts * N * lv * c["rescale"]
        elif m.kind in ("cts", "stc"):
            plan = prog.cts_plan if m.kind == "cts" else prog.stc_plan
            for i, lt in enumerate(plan.levels):      # level i of the DFT runs at lv - i
                u = N * (lv - i + 1)
                p = lt.plan
                t += m.cts * (u * (lt.pmults * c["pt_mul"] + c["rescale"])
                              + len(p.baby) * op_seconds(c, params, lv - i, "rotate_hoisted", len(p.baby))
                              + len(p.giant) * op_seconds(c, params, lv - i, "rotate"))
            if m.kind == "cts":
                t += m.cts * op_seconds(c, params, m.level_out, "rotate")     # conjugation of the split
        elif m.kind == "act":
            u = N * (lv + 1)
            if m.src.op in ACT_OPS:
                t += 2 * m.cts * act_muls(m.src) * op_seconds(c, params, lv, "ct_mul")
            elif m.src.op == StepOp.AFFINE:
                t += 2 * m.cts * u * (c["pt_mul"] + c["rescale"])
        if m.kind != "output":
            prev = m
    return t
