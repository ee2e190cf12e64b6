"""Layout (C) with bootstraps (compile(..., encrypted_weights=True, bootstrap=True)): deep chains with the weights
encrypted too.

The same placement DP as layouts (A) and (P) (hemlp.planner.bootstrap_placement) on the chain's level DAG: one
LevelNode per lowered step, a linear layer CGEMM_LEVELS deep (its block CCMMs), an activation its polynomial's
depth; the ciphertexts of a value are its blocks (b_m x b_n after layer i) and a step's time at each level comes
from the FHE4DMM chain plan's block CCMMs (hemlp.planner.chain: Table II counts at this machine's unit costs, the
key switches priced at that level). The placement is written back into the lowered steps by
hemlp.layouts.batch_bootstrap.apply_placement (bootstrap and drop steps at exact levels), and hemlp.layouts.blocked
runs them on every block:

    bootstrap  block = Bootstrapper.bootstrap(block / c) * c     (two real blocks per bootstrap_pair)

A block holds a matrix column-major in the first rows x cols of the program's `slots` slots (a sparse encoding when
slots < N/2), so the bootstrapper is made for that slot count. Only the single CtS-first pipeline is planned: the
blocks come out of ciphertext x ciphertext products, not a plaintext PCMM that MaMBo could fuse. The client
encrypts every layer's weight blocks at that layer's planned input level (after a bootstrap: the level it lands
at), its bias one level above the layer's output, as for a leveled plan.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from hemlp.compiler.params import depth_of, step_cost
from hemlp.layouts.base import Planned
from hemlp.layouts.batch_bootstrap import (CTS_LOG_MESSAGE_RATIO, DEFAULT_NOISE_BITS, BootPlanning, apply_placement,
                                           scale_down_limit, scale_factor,
                                           calibration_peaks)
from hemlp.layouts.blocked import CGEMM_LEVELS, REFUSED, BlockedProgram, cgemm_weights
from hemlp.planner.bootstrap_placement import LevelNode, place_bootstraps
from hemlp.planner.keyswitch_cost import keyswitch_per_limb, keyswitch_units
from hemlp.planner.layouts import unit_costs
from hemlp.planner.obl import cgemm_ops
from hemlp.step_ops import StepOp, handler

__all__ = ["blocked_level_dag", "plan_blocked_bootstrapped", "LEVEL_NODE"]


def _dag_input(prog, s, blocks, costs):
    bk, bn, _, _ = prog.in_blocks(0)
    blocks[s.out] = bk * bn
    return LevelNode(s.out, "input", (), 0, blocks[s.out], 0.0)


def _dag_output(prog, s, blocks, costs):
    return LevelNode(s.out, "output", tuple(s.inputs), 0, blocks[s.inputs[0]], 0.0)


def _dag_layer(prog, s, blocks, costs):
    i = prog.layer_index[s.out]
    bm, bn, _, _ = prog.out_blocks(i)
    blocks[s.out] = bm * bn
    per_limb = prog.chain.steps[i].mm_cost * costs.N
    # at each level: the block CGEMMs' Table II counts, their key switches priced at that level
    lay = prog.chain.steps[i].layout
    ops = cgemm_ops(*lay.block_dims)
    c = costs.units
    at = tuple(costs.N * lay.num_blocks * ops.weighted(cgemm_weights(c, keyswitch_per_limb(costs.params, lv)))
               * (lv + 1) for lv in costs.levels)
    return LevelNode(s.out, "op", tuple(s.inputs), CGEMM_LEVELS, blocks[s.out], per_limb, level_costs=at)


def _dag_blockwise(prog, s, blocks, costs):
    """An activation (or an alias: depth 0) on every block of its input."""
    blocks[s.out] = blocks[s.inputs[0]]
    d = step_cost(s)
    at = tuple(blocks[s.out] * d * costs.units["ct_mul"] * costs.N * keyswitch_units(costs.params, lv)
               for lv in costs.levels)
    return LevelNode(s.out, "op", tuple(s.inputs), d, blocks[s.out], blocks[s.out] * d * costs.ct_mul * costs.N,
                     level_costs=at)


#: the level DAG's node of every step op: (program, lowered step, blocks by value, N and unit costs) -> its LevelNode
#: (drops and bootstraps are placed on this DAG, not in it; layout (C)'s refusals raise in BlockedProgram first)
LEVEL_NODE = {**REFUSED, StepOp.INPUT: _dag_input, StepOp.OUTPUT: _dag_output, StepOp.PCMM: _dag_layer,
              **{op: _dag_blockwise for op in (StepOp.SQUARE, StepOp.POLY, StepOp.ALIAS, StepOp.DROP,
                                               StepOp.BOOTSTRAP)}}


def blocked_level_dag(prog: BlockedProgram, steps, params) -> list[LevelNode]:
    """One LevelNode per step of the chain: its depth (a linear layer CGEMM_LEVELS, an activation its polynomial's),
    its value's blocks, its seconds per limb (a layer: the chain plan's cost of its block CCMMs; an activation:
    one ciphertext product per level of its polynomial on every block) at the top level's key-switch size, and, key
    switches not being linear in the limbs (hemlp.planner.keyswitch_cost), its seconds at every level
    (LevelNode.level_costs: what the placement prices it at)."""
    c = unit_costs()
    costs = SimpleNamespace(N=params.N, params=params, units=c, levels=range(params.max_level + 1),
                            ct_mul=c["ct_mul"] * keyswitch_per_limb(params, params.max_level))
    blocks: dict = {}
    return [handler(LEVEL_NODE, s, "layout (C)'s bootstrap placement")(prog, s, blocks, costs) for s in steps]


def plan_blocked_bootstrapped(steps, x: np.ndarray, opts: dict, batch_size, peaks: dict | None = None) -> Planned:
    """The layout (C) program with bootstraps for a lowered chain (encrypted weights). peaks: the values' per-row
    peaks on x from compile's pass (None: measured here)."""
    bp = BootPlanning.of(steps, x, opts, peaks)
    info, params, boot, X, max_out, reserve = bp.info, bp.params, bp.boot, bp.X, bp.max_out, bp.reserve
    bs = int(batch_size) if batch_size is not None else params.N // 2
    prog = BlockedProgram(steps, params.N // 2, bs, keyswitch_per_limb(params, params.max_level))
    wb = int(opts["weight_bits"])
    placement = place_bootstraps(blocked_level_dag(prog, steps, params), boot, min_output_level=reserve)
    margin = 1.0 + float(opts["activation_margin"])
    limit = scale_down_limit(params, CTS_LOG_MESSAGE_RATIO)
    factors = {}
    # a block's slots hold the value's entries (and zero padding): its coefficients are within its peak
    peaks = calibration_peaks(steps, X, {b.value for b in placement.bootstraps}, wb, known=peaks, zero_sample=False)
    for b in placement.bootstraps:
        if b.value not in factors:
            factors[b.value] = scale_factor(peaks[b.value], margin, limit, f"value {b.value!r}", params)
    bits = boot.precision_bits or DEFAULT_NOISE_BITS
    new = apply_placement(steps, placement, factors, bits, prog.slots)
    for s in new:
        if s.op == StepOp.BOOTSTRAP:
            s.info.order, s.info.kind, s.info.k = "cts_first", "single", 1
            s.info.lowering = ("single (CtS-first): layout (C)'s blocks come out of ciphertext x ciphertext "
                                  "products (no plaintext PCMM to fuse)")
    top = next(s.level_out for s in new if s.op == StepOp.INPUT)
    return Planned(new, params, dict(info), depth_of(steps, CGEMM_LEVELS), reserve, top, bs, opts, max_out)
