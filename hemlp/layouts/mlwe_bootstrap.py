"""Layout (A′) with bootstraps (compile(..., layout="mlwe", bootstrap=True)): refreshes placed at activation segments.

Every activation segment of layout (A′) starts with a CoeffToSlot on coefficient-encoded ciphertexts. A refresh
(hemlp.layouts.mlwe_refresh) is that CoeffToSlot run inside a bootstrap, so it costs a bootstrap without its
SlotToCoeff and lands at the preset's refresh level whatever level it starts from (>= 0). Placement: the program is a
chain, and a refresh can only sit where a segment starts; going along the chain, a segment keeps its plain
CoeffToSlot when the levels left cover it and everything up to the next segment (or the output's reserve), else it
is refreshed. This greedy rule places the fewest refreshes: a refresh resets the level to the same constant wherever it
sits, so refreshing later never leaves fewer levels for what follows (tests compare it with every subset on small
chains). Of the DFT depths, the one with the fewest refreshes; the input level is then the lowest that keeps that
count. A linear layer whose output is refreshed runs at level 1 (its inputs dropped there: MaMBo's arrangement, the
PCMM's GEMMs and ModPack on 2 limbs, and no SlotToCoeff before the refresh since the values are coefficients). Each
refresh divides its input by c, the power of two above the value's calibrated peak (times 1 + activation_margin; the
zero sample of the padding columns included), as the other layouts' bootstraps do; simulate models it as an S2C-first
bootstrap (range check |x| <= c, error 2^-bits · c).
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from hemlp.compiler.lower import Step
from hemlp.compiler.params import depth_of
from hemlp.errors import LevelError, ParameterError
from hemlp.layouts.base import Planned
from hemlp.layouts.batch_bootstrap import (DEFAULT_NOISE_BITS, BootPlanning, scale_down_limit, scale_factor,
                                           calibration_peaks)
from hemlp.layouts.mlwe import MlweProgram, dft_depth_candidates
from hemlp.layouts.mlwe_refresh import REFRESH_LOG_MESSAGE_RATIO, refresh_key_bytes, refresh_level
from hemlp.planner.bootstrap_lowering import MAX_BATCH_KEY_BYTES, PipelineCosts
from hemlp.bootstrap.params import PRESET_DEPTHS
from hemlp.step_ops import RefreshInfo

__all__ = ["greedy_refreshes", "feasible_refreshes", "refresh_batch", "plan_mlwe_bootstrapped"]


def _segments(prog: MlweProgram) -> tuple[list, list]:
    """(the indices of the CoeffToSlot steps, the levels each stretch between them uses): stretch 0 runs from the
    input to the first CoeffToSlot, stretch i from CoeffToSlot i - 1 (excluded) to CoeffToSlot i, the last one to the
    output."""
    cts = [i for i, m in enumerate(prog.steps) if m.kind == "cts"]
    bounds = [-1] + cts + [len(prog.steps)]
    use = [sum(prog.consumes(prog.steps[t]) for t in range(a + 1, b)) for a, b in zip(bounds, bounds[1:])]
    return cts, use


def feasible_refreshes(prog: MlweProgram, top: int, land: int, reserve: int, chosen: set) -> bool:
    """Whether refreshing the CoeffToSlot points `chosen` (their indices among the program's CoeffToSlot steps) runs
    from an input at `top`: every level >= 0, a refresh's input >= 0, the output >= reserve."""
    cts, use = _segments(prog)
    lv = top - use[0]
    if lv < (reserve if not cts else 0):
        return False
    for i in range(len(cts)):
        lv = (land if i in chosen else lv - prog.dft_depth) - use[i + 1]
        if lv < (reserve if i == len(cts) - 1 else 0):
            return False
    return True


def greedy_refreshes(prog: MlweProgram, top: int, land: int, reserve: int) -> list:
    """The CoeffToSlot points (indices among the program's CoeffToSlot steps) to refresh, fewest first: a segment
    keeps its plain CoeffToSlot while the levels cover it up to the next point (or the output's reserve).
    LevelError when even a refresh cannot (a stretch deeper than the levels a refresh leaves)."""
    cts, use = _segments(prog)
    lv = top - use[0]
    if lv < (reserve if not cts else 0):
        raise LevelError(f"layout (A') with bootstraps: the input at level {top} cannot reach the first activation "
                         f"segment ({use[0]} levels before it)")
    chosen = []
    for i in range(len(cts)):
        need = reserve if i == len(cts) - 1 else 0
        plain = lv - prog.dft_depth - use[i + 1]
        if plain >= need:
            lv = plain
            continue
        if land - use[i + 1] < need:
            m = prog.steps[cts[i] + 1]
            raise LevelError(f"layout (A') with bootstraps: the stretch from activation {m.out} on uses "
                             f"{use[i + 1]} levels (activations, SlotToCoeff {prog.dft_depth}, linear layers) but a "
                             f"refresh leaves {land}" + (f" and the output keeps {reserve}" if need else "")
                             + ": lower the activation degrees, or use layout='batch' / 'packed' (bootstraps between "
                             "any two layers)")
        chosen.append(i)
        lv = land - use[i + 1]
    return chosen


def plan_mlwe_bootstrapped(steps, x: np.ndarray, opts: dict, batch_size, peaks: dict | None = None) -> Planned:
    """The layout (A′) program with refreshes for a lowered model: the preset, the DFT depth (the first of
    dft_depth_candidates that places), the refreshes as bootstrap steps before the activations they start, the input
    level. peaks: the values' per-row peaks on x from compile's pass (None: measured here)."""
    bp = BootPlanning.of(steps, x, opts, peaks)
    params, reserve, boot = bp.params, bp.reserve, bp.boot
    land, L = refresh_level(params), int(params.max_level)
    bs = 1 if batch_size is None else int(batch_size)
    depths = [int(opts["dft_depth"])] if opts.get("dft_depth") is not None else dft_depth_candidates(params.N)
    # the DFT depth with the fewest refreshes (a refresh costs far more than a DFT level); ties: the first candidate,
    # whose DFT levels have the fewest diagonals
    best, err = None, None
    for d in depths:
        prog = MlweProgram(steps, params.N, bs, d)        # UnsupportedError: not a chain this layout runs
        try:
            n = len(greedy_refreshes(prog, L, land, reserve))
        except LevelError as exc:
            err = exc
            continue
        if best is None or n < best[0]:
            best = (n, d, prog)
    if best is None:
        raise err
    _, d, prog = best
    # the lowest input level with as few refreshes
    top = next(t for t in range(L + 1) if _count(prog, t, land, reserve) == best[0])
    chosen = greedy_refreshes(prog, top, land, reserve)
    cts = [i for i, m in enumerate(prog.steps) if m.kind == "cts"]
    wb = int(opts["weight_bits"])
    margin = 1.0 + float(opts["activation_margin"])
    limit = scale_down_limit(params, REFRESH_LOG_MESSAGE_RATIO)
    costs = PipelineCosts.for_preset(params, boot, PRESET_DEPTHS[params.name][1])
    acts = [prog.steps[cts[i] + 1] for i in chosen]
    k, call, why = refresh_batch(costs, params, [a.cts for a in acts], opts.get("batch_bootstrap", "auto"))
    bits = costs.s2c_bits(k) or DEFAULT_NOISE_BITS
    before = {}
    # the calibration rows and the padding columns' zero sample
    peaks = calibration_peaks(steps, bp.X, {act.src.inputs[0] for act in acts}, wb, known=peaks)
    for n, act in enumerate(acts):
        v = act.src.inputs[0]
        peak = peaks[v]
        c = scale_factor(peak, margin, limit, f"value {v!r}", params)
        name = f"{v}#refresh{n}"
        calls = -(-act.cts // k)
        info = RefreshInfo(scale_factor=c, noise_bits=float(bits), seed=n, slots=params.N // 2, value=v,
                           before=act.out, ciphertexts=act.cts, bootstraps=calls, seconds=calls * call(k),
                           level_after=land, order="s2c_first", kind="batched" if k > 1 else "single", k=k,
                           single_seconds=act.cts * call(1), batched_seconds=calls * call(k),
                           cost_source=f"{boot.source}, less its SlotToCoeff share (a refresh runs none)"
                                       + (f"; batches x {costs.ratio(k):.3f} ({costs.source})" if k > 1 else ""),
                           lowering=f"layout (A') refresh: the activation segment's CoeffToSlot inside an S2C-first "
                                    f"bootstrap without its SlotToCoeff, k = {k} ciphertexts a call ({why})")
        before[act.src.out] = Step("bootstrap", name, [v], act.rows, "", level_out=land, info=info)
    new = []
    for s in steps:
        b = before.get(s.out)
        if b is not None:
            new.append(b)
            s = replace(s, inputs=[b.out] + list(s.inputs[1:]), info=s.info.copy())
        new.append(s)
    check = MlweProgram(new, params.N, bs, d, top=top)
    if any(m.level_out is not None and m.level_out < 0 for m in check.steps):
        raise AssertionError("layout (A') refresh placement left a negative level")
    if check.output.level_in < reserve:
        raise AssertionError(f"layout (A') refresh placement: output at {check.output.level_in} < reserve {reserve}")
    return Planned(new, params, dict(bp.info), depth_of(steps), reserve, top, bs, dict(opts, dft_depth=d), bp.max_out)


def refresh_batch(costs: PipelineCosts, params, counts: list, option) -> tuple:
    """(k, seconds of one call of k refreshes as a function of k, why): the batch size of the refreshes' shared-a
    MSRLWE calls. option "auto": the measured k (costs.batch_sizes, keys within MAX_BATCH_KEY_BYTES, at most the
    largest refreshed value's ciphertexts) with the fewest estimated seconds over all refreshes, 1 included (ties: the
    smaller k, fewer key bytes); False: 1; an int: that k. A call of k costs k single bootstraps times the measured
    S2C-first batch ratio rho(k), less k SlotToCoeff shares (a refresh runs none)."""
    def call(k: int) -> float:
        return k * max(0.0, costs.single.seconds * costs.ratio(k) - costs.stc_seconds())

    def total(k: int) -> float:
        return sum(-(-c // k) for c in counts) * call(k)

    if option is False or option is None:
        return 1, call, "batch_bootstrap=False"
    if option != "auto":
        k = int(option)
        if k < 1:
            raise ParameterError(f"batch_bootstrap must be 'auto', False or a batch size >= 1, got {option!r}")
        return k, call, f"batch_bootstrap={k}"
    top = max(counts, default=1)
    cands = [1] + [k for k in costs.batch_sizes(MAX_BATCH_KEY_BYTES)
                   if k <= top and refresh_key_bytes(params, k) <= MAX_BATCH_KEY_BYTES]
    k = min(cands, key=lambda m: (total(m), m))
    if len(cands) == 1:
        return 1, call, ("one ciphertext per refreshed value: nothing to batch" if top == 1 else
                         "no measured batch size fits the key budget")
    est = ", ".join(f"k={m} ~{total(m):.3g} s" for m in cands)
    return k, call, f"the fewest estimated seconds: {est}"


def _count(prog, top: int, land: int, reserve: int) -> float:
    try:
        return len(greedy_refreshes(prog, top, land, reserve))
    except LevelError:
        return math.inf
