"""Level planning and parameter choice (docs/design/pcmm-and-planning.md §1.8, §6.4): fail at compile time, never at
run time.

Costs: PCMM 1 level (its rescale), square 1, polynomial of degree d ceil(log2(d + 1)), affine 1,
residual add 0 when the branches are at different levels (the higher one is brought to the other's
scale with one set_scale inside its spare level) and 1 otherwise.

``choose_preset`` picks the smallest 128-bit preset of ``fhe.Params.presets()`` whose depth fits, except the
ones that trade precision for something else (*-flood, N14-pcmm: by name only)
(with allow_insecure=True the test presets test-N12 then test-N12-d6 are tried first) and raises
LevelError naming the missing level count when none does.
"""
from __future__ import annotations

import math

import numpy as np

from hemlp.errors import LevelError, ParameterError
from hemlp.step_ops import PRODUCT_PAIR_OPS, StepOp, handler, lint_pass

TEST_PRESETS = ("test-N12", "test-N12-d6")
BY_NAME_ONLY = ("N14-pcmm",)


def _one(step) -> int:
    return 1


def _none(step) -> int:
    return 0


#: the levels each step op consumes (a PCMM: its rescale, none when unrescaled; layouts whose linear layers cost more
#: give plan_levels their pcmm_levels); bootstrap / MaMBo steps are placed with their own levels
STEP_LEVELS = {
    StepOp.PCMM: lambda step: 0 if unrescaled(step) else 1,
    StepOp.SQUARE: _one, StepOp.AFFINE: _one, StepOp.MUL: _one, StepOp.MATMUL: _one,
    StepOp.POLY: lambda step: step.act.depth,
    StepOp.INPUT: _none, StepOp.OUTPUT: _none, StepOp.ALIAS: _none, StepOp.PERM: _none, StepOp.ADD: _none,
    StepOp.DROP: _none, StepOp.BOOTSTRAP: _none, StepOp.MAMBO: _none,
}


def step_cost(step) -> int:
    """The levels a step consumes (STEP_LEVELS)."""
    return handler(STEP_LEVELS, step, "level planning")(step)


def plan_levels(steps, top: int, pcmm_levels: int = 1) -> int:
    """Assign level_in/level_out to every step for an input encrypted at `top`; returns the output level.
    Levels may go negative here (the caller checks)."""
    lv = {}
    for s in steps:
        if s.op == StepOp.INPUT:
            s.level_in = s.level_out = top
        elif s.op == StepOp.ADD:
            la, lb = lv[s.inputs[0]], lv[s.inputs[1]]
            s.level_in = max(la, lb)
            s.level_out = min(la, lb) if la != lb else la - 1
        elif s.op in PRODUCT_PAIR_OPS:            # both operands at the lower level, then one product
            s.level_in = min(lv[s.inputs[0]], lv[s.inputs[1]])
            s.level_out = s.level_in - 1
        else:
            s.level_in = lv[s.inputs[0]]
            s.level_out = s.level_in - (pcmm_levels if s.op == StepOp.PCMM and not unrescaled(s) else step_cost(s))
        lv[s.out] = s.level_out
    lint_pass(steps, "level planning")
    out = next(s for s in steps if s.op == StepOp.OUTPUT)
    return out.level_out


def unrescaled(step) -> bool:
    """A PCMM the planner runs without its rescale (final_rescale=False): it costs no level."""
    return step.op == StepOp.PCMM and step.info.rescale is False


def final_pcmm(steps):
    """The PCMM whose output is the program's output (through aliases), or None."""
    by_out = {s.out: s for s in steps}
    s = by_out[next(s for s in steps if s.op == StepOp.OUTPUT).inputs[0]]
    while s.op == StepOp.ALIAS:
        s = by_out[s.inputs[0]]
    return s if s.op == StepOp.PCMM else None


def unrescaled_weight_bits(step, max_abs_out: float, log_scale: float, q0_bits: int, weight_bits: int,
                           headroom_bits: int = 4) -> int:
    """Weight bits of a final PCMM run unrescaled at level 0: its output scale is the input's (~2^log_scale) times
    Delta_U = 2^floor(bits - log2 max|U|), which must keep |y| * scale under q_0 with `headroom_bits` to spare
    (the rule of output_reserve). The configured weight_bits when they fit, else fewer; LevelError below 6."""
    amax = float(np.max(np.abs(step.U))) if step.U is not None and step.U.size else 0.0
    if amax == 0.0:
        return weight_bits
    room = q0_bits - headroom_bits - math.log2(max(max_abs_out, 1e-30) * 2.0) - log_scale  # log2 Delta_U allowed
    bits = min(int(weight_bits), math.floor(room + math.log2(amax)))
    if bits < 6:
        raise LevelError(f"final_rescale=False: the output (|y| up to {max_abs_out:.3g}) at scale 2^{log_scale:g} "
                         f"leaves {room:.1f} bits under q_0 (2^{q0_bits}) for the last layer's weights, which would "
                         f"be quantised to {bits} < 6 bits; keep final_rescale=True")
    return bits


def depth_of(steps, pcmm_levels: int = 1) -> int:
    """Levels the program consumes from the input to the output (pcmm_levels: 3 for layout C's CCMMs)."""
    return 1000 - plan_levels(steps, 1000, pcmm_levels)


def candidates(allow_insecure: bool) -> list[dict]:
    from hemlp.fhe import Params

    ps = Params.presets()
    # *-flood presets (2^55 scales for noise-flooded decryption) and N14-pcmm (2^25 scales, small primes for fast
    # PCMMs) trade precision for something else: chosen by name only, never by depth
    secure = sorted((p for p in ps if p["security"] == "128-bit" and p["name"] not in BY_NAME_ONLY
                     and not p["name"].endswith("-flood")),
                    key=lambda p: (p["N"], p["depth"]))
    tests = [p for name in TEST_PRESETS for p in ps if p["name"] == name] if allow_insecure else []
    return tests + secure


def choose_preset(depth: int, allow_insecure: bool = False, preset: str | None = None,
                  reserve: int = 0) -> dict:
    """The preset to use for a program of the given depth (+ `reserve` levels kept at the output)."""
    from hemlp.fhe import Params

    need = depth + reserve
    if preset is not None:
        info = next((p for p in Params.presets() if p["name"] == preset), None)
        if info is None:
            raise ParameterError(f"unknown preset {preset!r}; choose one of {[p['name'] for p in Params.presets()]}")
        if info["security"] != "128-bit" and not allow_insecure:
            raise ParameterError(f"preset {preset!r} is not 128-bit secure; pass allow_insecure=True (tests only)")
        if info["depth"] < need:
            raise LevelError(f"the model needs {need} levels ({depth} for its layers"
                             + (f" + {reserve} kept for the output's magnitude" if reserve else "")
                             + f") but preset {preset!r} has {info['depth']}: {need - info['depth']} level(s) "
                             "missing; use a deeper preset, lower activation degrees, or square activations")
        return info
    cands = candidates(allow_insecure)
    for p in cands:
        if p["depth"] >= need:
            return p
    best = max(cands, key=lambda p: p["depth"])
    raise LevelError(f"the model needs {need} levels ({depth} for its layers"
                     + (f" + {reserve} kept for the output's magnitude" if reserve else "")
                     + f") but the deepest available preset {best['name']!r} has {best['depth']}: "
                     f"{need - best['depth']} level(s) missing. Lower the activation degrees (degree d costs "
                     "ceil(log2(d+1)) levels), use x^2 activations, or remove layers; bootstrapping is not "
                     "available yet")


def output_reserve(max_abs_out: float, log_scale: float, q0_bits: int, headroom_bits: int = 4) -> int:
    """Levels to keep at the output so |y| * scale fits under q_0 with some headroom."""
    need_bits = math.log2(max(max_abs_out, 1e-30) * 2.0) + log_scale + headroom_bits
    return 0 if need_bits < q0_bits else 1
