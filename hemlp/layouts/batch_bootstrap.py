"""Layout (A) with bootstraps (compile(..., bootstrap=True); issue #18, item 1).

Planning: the lowered steps become a level DAG (hemlp.planner.bootstrap_placement: one node per step, its
depth, the ciphertexts of its output, its time per limb from hemlp.planner.layouts' unit costs), the planner
places the bootstraps, and the placement is written back into the program as two more step kinds:

    bootstrap  out = Bootstrapper.bootstrap(in / c) * c      level_in -> the bootstrap's output level
               (c = info["scale_factor"], a power of two >= 1 above the calibrated range of `in`: the division
               is a re-tag of the scale, the multiplication an exact mul_integer; real ciphertexts two by two
               with bootstrap_pair)
    drop       out = in at a lower level                  (a reader that is cheaper lower; free)

Every step keeps exact level_in / level_out, so the program runs with the usual level checks, saves and
loads like any other layout (A) program, and ``simulate`` models each bootstrap (hemlp.runtime.bootstrap_sim).
Presets: the bootstrapping chains of hemlp.bootstrap.params.PRESET_DEPTHS; the input is encrypted at most at
the level a bootstrap lands at (the primes above belong to the bootstrap).
"""
from __future__ import annotations

import math
import warnings
from dataclasses import replace

import numpy as np

from hemlp.bootstrap.params import PRESET_DEPTHS, preset_levels_consumed
from hemlp.fhe import Params
from hemlp.compiler.lower import Step
from hemlp.compiler.params import depth_of, output_reserve, step_cost
from hemlp.errors import EncodingError, ParameterError
from hemlp.layouts.base import Planned
from hemlp.planner.bootstrap_placement import BootstrapCost, LevelNode, Placement, place_bootstraps
from hemlp.planner.layouts import estimate_batch
from hemlp.runtime.local import simulate as simulate_rows

__all__ = ["BOOT_PRESETS", "boot_preset", "level_dag", "plan_bootstrapped", "apply_placement", "bootstrap_steps",
           "summary", "summary_text", "simulate_padded"]

#: the preset compile(bootstrap=True) takes without a preset option: 128-bit, or the insecure test chain
BOOT_PRESETS = dict(secure="N16-boot", insecure="test-N12-boot")
#: bootstrap error when no measurement of the preset exists (BOOTSTRAP.md §0: >= 20 bits)
DEFAULT_NOISE_BITS = 20.0


def boot_preset(preset, allow_insecure: bool) -> dict:
    """The Params.presets() entry of the bootstrapping preset to use."""
    name = preset or BOOT_PRESETS["insecure" if allow_insecure else "secure"]
    info = next((p for p in Params.presets() if p["name"] == name), None)
    if info is None or name not in PRESET_DEPTHS:
        raise ParameterError(f"bootstrap=True needs a bootstrapping preset ({sorted(PRESET_DEPTHS)}), got {name!r}")
    if info["security"] != "128-bit" and not allow_insecure:
        raise ParameterError(f"preset {name!r} is not 128-bit secure; pass allow_insecure=True (tests only)")
    return info


def level_dag(steps, params, batch: int) -> list[LevelNode]:
    """One LevelNode per step: depth (hemlp.compiler.params.step_cost), output ciphertexts (rows x chunks) and
    seconds per limb (hemlp.planner.layouts.estimate_batch of the step at level 0, i.e. one limb)."""
    chunks = -(-int(batch) // (params.N // 2))
    nodes = []
    for s in steps:
        per_limb = estimate_batch([replace(s, level_in=0)], params, batch)
        if s.op in ("input", "output", "add"):
            nodes.append(LevelNode(s.out, s.op, tuple(s.inputs), 0, s.rows * chunks, per_limb))
        else:
            nodes.append(LevelNode(s.out, "op", tuple(s.inputs), step_cost(s), s.rows * chunks, per_limb))
    return nodes


def simulate_padded(steps, G: np.ndarray, capacity: int, weight_bits: int) -> np.ndarray:
    """G (n <= capacity samples, features) -> outputs (n, ...), simulated as one encrypted batch: the slots past n
    hold zeros (encrypt pads with them), i.e. samples of a zero input, and enter the bootstraps' range checks."""
    X = np.zeros((G.shape[1], capacity))
    X[:, : G.shape[0]] = G.T
    return simulate_rows(steps, X, weight_bits).T[: G.shape[0]]


def _value(steps, x: np.ndarray, name: str, weight_bits: int) -> np.ndarray:
    """The rows matrix of value `name` on the example input (the program up to its producer, plus an output)."""
    i = next(k for k, s in enumerate(steps) if s.out == name)
    probe = list(steps[: i + 1]) + [Step("output", name + "#probe", [name], steps[i].rows)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return simulate_rows(probe, x, weight_bits)


def apply_placement(steps, placement: Placement, scale_factors: dict, noise_bits: float, slots: int) -> list[Step]:
    """The program with the placement's bootstrap and drop steps, every step at its planned levels."""
    by_name = {s.out: s for s in steps}
    decisions = dict(zip((n.name for n in placement.nodes), placement.decisions))
    outs = {n.name: n.level_out for n in placement.nodes}
    boots = {(b.before, b.value): b for b in placement.bootstraps}
    current: dict = {}      # value -> name of its current version (after bootstraps)
    stored: dict = {}       # current version -> level
    drops: dict = {}
    out: list[Step] = []
    for k, s in enumerate(steps):
        d = decisions[s.out]
        for v in d.boot:
            b = boots[(s.out, v)]
            name = f"{v}#boot{len(out)}"
            out.append(Step("bootstrap", name, [current[v]], by_name[v].rows, "", level_in=stored[current[v]],
                            level_out=placement.levels_after,
                            info=dict(scale_factor=scale_factors[v], noise_bits=float(noise_bits), seed=len(out),
                                      slots=slots, value=v, before=s.out, ciphertexts=b.ciphertexts,
                                      bootstraps=b.bootstraps, seconds=b.seconds, cost_source=placement.cost_source)))
            current[v] = name
            stored[name] = placement.levels_after
        inputs = []
        for v, r in zip(s.inputs, d.reads if s.op != "input" else ()):
            src = current[v]
            if r < stored[src]:
                key = (src, r)
                if key not in drops:
                    drops[key] = f"{src}#L{r}"
                    out.append(Step("drop", drops[key], [src], by_name[v].rows, "", level_in=stored[src],
                                    level_out=r))
                    stored[drops[key]] = r
                src = drops[key]
            inputs.append(src)
        t = replace(s, inputs=inputs if s.op != "input" else list(s.inputs), info=dict(s.info))
        t.level_in = d.reads[0] if s.op == "input" else max(d.reads)
        t.level_out = outs[s.out]
        out.append(t)
        current[s.out] = t.out
        stored[t.out] = t.level_out
    return out


def plan_bootstrapped(steps, x: np.ndarray, opts: dict, batch_size) -> Planned:
    """The layout (A) program with bootstraps for a lowered model (compile(..., bootstrap=True))."""
    info = boot_preset(opts.get("preset"), bool(opts["allow_insecure"]))
    params = Params.preset(info["name"])
    boot = BootstrapCost.from_params(params, preset_levels_consumed(info["name"]))
    wb = int(opts["weight_bits"])
    X = x.reshape(x.shape[0], -1).T
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = simulate_rows(steps, X, wb)
    max_out = float(np.max(np.abs(y))) if y.size else 0.0
    reserve = output_reserve(max_out, params.log_scale, int(math.log2(params.q[0])))
    bs = int(batch_size) if batch_size is not None else params.N // 2
    placement = place_bootstraps(level_dag(steps, params, bs), boot, min_output_level=reserve)
    margin = 1.0 + float(opts["activation_margin"])
    X = np.concatenate([X, np.zeros((X.shape[0], 1))], axis=1)    # + the padding slots' zero-input sample
    factors = {}
    limit = params.q[0] / 2.0 ** (8 + params.log_scale)      # ScaleDown from level 0: c * Δ * 2^R <= q0
    for b in placement.bootstraps:
        if b.value in factors:
            continue
        peak = float(np.max(np.abs(_value(steps, X, b.value, wb)))) * margin
        factors[b.value] = 1 if peak <= 1.0 else 2 ** math.ceil(math.log2(peak))
        if factors[b.value] > limit:
            raise EncodingError(f"value {b.value!r} reaches {peak / margin:.4g} on the example input: too large to "
                                f"bootstrap at scale 2^{params.log_scale:g} (at most {limit:g}); normalise the "
                                "layer's weights or inputs")
    new = apply_placement(steps, placement, factors, boot.precision_bits or DEFAULT_NOISE_BITS, params.N // 2)
    top = next(s.level_out for s in new if s.op == "input")
    preset = dict(info, depth=info["depth"])
    return Planned(new, params, preset, depth_of(steps), reserve, top, bs, opts, max_out)


# ---------------------------------------------------------------------------------------
# What the plan prints
# ---------------------------------------------------------------------------------------

def bootstrap_steps(steps) -> list:
    return [s for s in steps if s.op == "bootstrap"]


def summary(steps, params, batch: int) -> dict | None:
    """The placement as saved in the plan's info (None: no bootstrap in the program)."""
    boots = bootstrap_steps(steps)
    if not boots:
        return None
    layers = estimate_batch(steps, params, batch)
    rows = [dict(value=s.info["value"], before=s.info["before"], level_before=s.level_in, level_after=s.level_out,
                 ciphertexts=s.info["ciphertexts"], bootstraps=s.info["bootstraps"], seconds=s.info["seconds"],
                 scale_factor=s.info["scale_factor"]) for s in boots]
    boot_s = sum(r["seconds"] for r in rows)
    return dict(placements=rows, levels_after=boots[0].level_out, boot_seconds=boot_s, layer_seconds=layers,
                total_seconds=boot_s + layers, cost_source=boots[0].info.get("cost_source", ""),
                noise_bits=boots[0].info["noise_bits"])


def summary_text(b: dict) -> str:
    calls = sum(r["bootstraps"] for r in b["placements"])
    lines = [f"# bootstrapping: {len(b['placements'])} point(s), {calls} bootstrap(s), each lands at level "
             f"{b['levels_after']}; estimated {b['boot_seconds']:.3g} s bootstrapping + {b['layer_seconds']:.3g} s "
             f"layers = {b['total_seconds']:.3g} s per batch (1 thread)",
             f"#   bootstrap time: {b['cost_source']}; simulated error 2^-{b['noise_bits']:.1f} x c per bootstrap"]
    for r in b["placements"]:
        lines.append(f"#   bootstrap {r['value']} before {r['before']}: level {r['level_before']} -> "
                     f"{r['level_after']}, {r['ciphertexts']} ciphertext(s) in {r['bootstraps']} bootstrap(s), "
                     f"~{r['seconds']:.3g} s, input divided by c = {r['scale_factor']:g}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# Encrypted execution
# ---------------------------------------------------------------------------------------
