"""Layout (A) with bootstraps (compile(..., bootstrap=True); issue #18, item 1).

Planning: the lowered steps become a level DAG (hemlp.planner.bootstrap_placement: one node per step, its
depth, the ciphertexts of its output, its time per limb from hemlp.planner.layouts' unit costs), the planner
places the bootstraps, and the placement is written back into the program as two more step kinds:

    bootstrap  out = Bootstrapper.bootstrap(in / c) * c      level_in -> the bootstrap's output level
               (c = info["scale_factor"], a power of two >= 1 above the calibrated range of `in`: the division
               is a re-tag of the scale, the multiplication an exact mul_integer; real ciphertexts two by two
               with bootstrap_pair)
    drop       out = in at a lower level                  (a reader that is cheaper lower; free)

    mambo      out = pcmm_bootstrap(U, in; c) * c + bias  a dense PCMM and the refresh of its output fused (MaMBo,
               hemlp.bootstrap.mambo): level_in -> the S2C-first bootstrap's output level

Which pipeline runs the bootstraps (hemlp.planner.bootstrap_lowering, compile options ``mambo`` and
``batch_bootstrap``): single CtS-first bootstraps (paired), or the S2C-first family with a batch size k (batched
bootstraps and MaMBo layers); a bootstrap step's info names its kind, k, order, its estimate and the alternatives'.
The S2C-first family's levels are planned in a frame stc_depth levels up and shifted back here.

Every step keeps exact level_in / level_out, so the program runs with the usual level checks, saves and
loads like any other layout (A) program, and ``simulate`` models each bootstrap (hemlp.runtime.bootstrap_sim).
Presets: the bootstrapping chains of hemlp.bootstrap.params.PRESET_DEPTHS; the input is encrypted at most at
the level a bootstrap lands at (the primes above belong to the bootstrap).
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, replace
from types import SimpleNamespace

import numpy as np

from hemlp.bootstrap.batch_keys import estimate_bytes
from hemlp.bootstrap.keys import BootstrapKeys, rotation_levels
from hemlp.bootstrap.params import PRESET_DEPTHS, BootParams, preset_levels_consumed
from hemlp.fhe import Params
from hemlp.compiler.lower import Step
from hemlp.compiler.params import depth_of, output_reserve, step_cost
from hemlp.errors import EncodingError, MissingKeyError, ParameterError
from hemlp.layouts.base import Planned
from hemlp.pcmm import quantize
from hemlp.planner.bootstrap_lowering import Lowering, PipelineCosts, choose_pipelines
from hemlp.planner.bootstrap_placement import BootstrapCost, LevelNode, Placement
from hemlp.planner.layouts import estimate_batch
from hemlp.runtime.local import simulate as simulate_rows
from hemlp.step_ops import REFRESH_OPS, RefreshInfo, StepOp

__all__ = ["BOOT_PRESETS", "boot_preset", "level_dag", "plan_bootstrapped", "apply_placement", "bootstrap_steps",
           "summary", "summary_text", "simulate_padded", "mambo_candidates", "lower_mambo", "S2C_LOG_MESSAGE_RATIO",
           "boot_order", "boot_batch_size", "scale_factor", "scale_down_limit", "CTS_LOG_MESSAGE_RATIO",
           "DEFAULT_NOISE_BITS", "value_peaks", "calibration_peaks", "peak_of", "BootPlanning",
           "check_single_boot_keys", "sparse_summary_text", "single_key_bytes", "family_key_bytes",
           "sparse_summary"]

#: the preset compile(bootstrap=True) takes without a preset option: 128-bit, or the insecure test chain
BOOT_PRESETS = dict(secure="N16-boot", insecure="test-N12-boot")
#: bootstrap error when no measurement of the preset exists (docs/design/bootstrap.md §0: >= 20 bits)
DEFAULT_NOISE_BITS = 20.0
#: the S2C-first order's message ratio (hemlp.bootstrap.mambo.S2C_LOG_MESSAGE_RATIO; repeated here so the
#: planner side does not import the native core): the EvalMod inputs are the slot values, |x| <= 1
S2C_LOG_MESSAGE_RATIO = 14
#: the CtS-first order's message ratio (BootParams' default)
CTS_LOG_MESSAGE_RATIO = BootParams().log_message_ratio


def scale_down_limit(params, log_message_ratio: int) -> float:
    """The largest divisor c a bootstrap's input may be divided by at the preset's default scale Δ: ScaleDown needs
    c·Δ·2^R <= q0 (R: the pipeline's log message ratio)."""
    return params.q[0] / 2.0 ** (log_message_ratio + params.log_scale)


def boot_preset(preset, allow_insecure: bool) -> dict:
    """The Params.presets() entry of the bootstrapping preset to use."""
    name = preset or BOOT_PRESETS["insecure" if allow_insecure else "secure"]
    info = next((p for p in Params.presets() if p["name"] == name), None)
    if info is None or name not in PRESET_DEPTHS:
        raise ParameterError(f"bootstrap=True needs a bootstrapping preset ({sorted(PRESET_DEPTHS)}), got {name!r}")
    if info["security"] != "128-bit" and not allow_insecure:
        raise ParameterError(f"preset {name!r} is not 128-bit secure; pass allow_insecure=True (tests only)")
    return info


#: the step ops that are their own kind of level-DAG node (hemlp.planner.bootstrap_placement.OPS); every other step
#: is an "op" node of its step_cost's depth
OWN_NODE_OPS = (StepOp.INPUT, StepOp.OUTPUT, StepOp.ADD)


def level_dag(steps, params, batch: int) -> list[LevelNode]:
    """One LevelNode per step: depth (hemlp.compiler.params.step_cost), output ciphertexts (rows x chunks), seconds
    per limb (hemlp.planner.layouts.estimate_batch of the step at level 0, i.e. one limb) and, the key switches not
    being linear in the limbs, the step's estimate at every level of the chain (LevelNode.level_costs)."""
    chunks = -(-int(batch) // (params.N // 2))
    nodes = []
    for s in steps:
        at = tuple(estimate_batch([replace(s, level_in=lv)], params, batch) for lv in range(params.max_level + 1))
        own = s.op in OWN_NODE_OPS
        nodes.append(LevelNode(s.out, str(s.op) if own else "op", tuple(s.inputs), 0 if own else step_cost(s),
                               s.rows * chunks, at[0], level_costs=at))
    return nodes


def simulate_padded(steps, G: np.ndarray, capacity: int, weight_bits: int) -> np.ndarray:
    """G (n <= capacity samples, features) -> outputs (n, ...), simulated as one encrypted batch: the slots past n
    hold zeros (encrypt pads with them), i.e. samples of a zero input, and enter the bootstraps' range checks."""
    X = np.zeros((G.shape[1], capacity))
    X[:, : G.shape[0]] = G.T
    return simulate_rows(steps, X, weight_bits).T[: G.shape[0]]


def value_peaks(steps, x: np.ndarray, names, weight_bits: int, products=(), known: dict | None = None) -> dict:
    """{name: max |value|} of the named values on the example input, and {(name, "product"): max |U_q input|} of the
    named PCMMs' products before their bias (what MaMBo refreshes), in one pass of the program. known: the values'
    per-row peaks on other samples from a pass already made; the result covers both (x then holds only the samples
    that pass did not see)."""
    names, products = set(names), set(products)
    by_name = {s.out: s for s in steps}
    peaks: dict = {}

    def see(step, v):
        if step.out in names:
            peaks[step.out] = float(np.max(np.abs(v))) if v.size else 0.0
        for p in products:                   # the product reads this value: U_q v
            if by_name[p].inputs[0] == step.out:
                Uq, delta = quantize(by_name[p].U, weight_bits)
                uv = (Uq / delta) @ v
                peaks[(p, "product")] = float(np.max(np.abs(uv))) if uv.size else 0.0

    if x.shape[1]:                           # known peaks and no sample left: no pass
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            simulate_rows(steps, x, weight_bits, on_value=see)
    for name in names if known is not None else ():
        peaks[name] = max(peaks.get(name, 0.0), peak_of(known[name]))
    return peaks


def peak_of(row_peaks) -> float:
    """The largest of a value's per-row peaks (0 for a value without rows)."""
    return float(np.max(row_peaks)) if np.size(row_peaks) else 0.0


def calibration_peaks(steps, X: np.ndarray, names, weight_bits: int, products=(), known: dict | None = None,
                      zero_sample: bool = True) -> dict:
    """value_peaks on the calibration rows X, plus (zero_sample) the zero sample of the padding slots. With `known`
    (X's per-row peaks from compile's pass) X does not run again, unless MaMBo products need the whole pass."""
    zero = np.zeros((X.shape[0], 1 if zero_sample else 0))
    if known is not None and not products and all(n in known for n in names):
        return value_peaks(steps, zero, names, weight_bits, known=known)
    return value_peaks(steps, np.concatenate([X, zero], axis=1), names, weight_bits, products)


def mambo_candidates(steps, chunks: int) -> dict:
    """{value: SlotToCoeffs of its inputs} of the values MaMBo may produce: a dense PCMM's output (no im2col gather,
    which pcmm_bootstrap does not run) read by exactly one step, so that its refreshed version is the only one
    needed. Two chunks of a row share one SlotToCoeff (runtime.local.mambo_rows), an odd last chunk has its own."""
    readers: dict = {}
    for s in steps:
        for v in s.inputs:
            readers[v] = readers.get(v, 0) + 1
    rows = {s.out: s.rows for s in steps}
    return {s.out: rows[s.inputs[0]] * (chunks // 2 + chunks % 2) for s in steps
            if s.op == StepOp.PCMM and s.index is None and readers.get(s.out, 0) == 1}


def apply_placement(steps, placement: Placement, scale_factors: dict, noise_bits: float, slots: int,
                    lowering: Lowering | None = None) -> list[Step]:
    """The program with the placement's bootstrap and drop steps, every step at its planned levels (the lowering's
    frame shifted to the ciphertexts' levels; its choices written into each bootstrap step's info)."""
    by_name = {s.out: s for s in steps}
    decisions = dict(zip((n.name for n in placement.nodes), placement.decisions))
    outs = {n.name: n.level_out for n in placement.nodes}
    boots = {(b.before, b.value): b for b in placement.bootstraps}
    off = 0 if lowering is None else lowering.level_offset
    current: dict = {}      # value -> name of its current version (after bootstraps)
    stored: dict = {}       # current version -> level
    drops: dict = {}
    out: list[Step] = []
    for k, s in enumerate(steps):
        d = decisions[s.out]
        for v in d.boot:
            b = boots[(s.out, v)]
            name = f"{v}#boot{len(out)}"
            info = RefreshInfo(scale_factor=scale_factors[v], noise_bits=float(noise_bits), seed=len(out),
                               slots=slots, value=v, before=s.out, ciphertexts=b.ciphertexts,
                               bootstraps=b.bootstraps, seconds=b.seconds, cost_source=placement.cost_source)
            if lowering is not None:
                ch = lowering.choices[(s.out, v)]
                # set one by one, in this order (the saved plan's): an estimate set to None is saved as null
                info.order, info.family, info.kind, info.k = lowering.order, lowering.label, ch.kind, ch.k
                info.seconds = ch.seconds           # the chosen pipeline's estimate (MaMBo: the fused layer's)
                info.single_seconds, info.batched_seconds = ch.single_seconds, ch.batched_seconds
                info.mambo_seconds, info.reason = ch.mambo_seconds, ch.reason
            out.append(Step(StepOp.BOOTSTRAP, name, [current[v]], by_name[v].rows, "",
                            level_in=stored[current[v]] + off, level_out=placement.levels_after + off, info=info))
            current[v] = name
            stored[name] = placement.levels_after
        inputs = []
        for v, r in zip(s.inputs, d.reads if s.op != StepOp.INPUT else ()):
            src = current[v]
            if r < stored[src]:
                key = (src, r)
                if key not in drops:
                    drops[key] = f"{src}#L{r + off}"
                    out.append(Step(StepOp.DROP, drops[key], [src], by_name[v].rows, "", level_in=stored[src] + off,
                                    level_out=r + off))
                    stored[drops[key]] = r
                src = drops[key]
            inputs.append(src)
        t = replace(s, inputs=inputs if s.op != StepOp.INPUT else list(s.inputs), info=s.info.copy())
        t.level_in = (d.reads[0] if s.op == StepOp.INPUT else max(d.reads)) + off
        t.level_out = outs[s.out] + off
        out.append(t)
        current[s.out] = t.out
        stored[t.out] = outs[s.out]
    return out


def lower_mambo(steps: list, factors: dict) -> list[Step]:
    """Every bootstrap step of kind "mambo" and the PCMM it refreshes -> one "mambo" step (at the bootstrap's
    place, reading the PCMM's input; factors: value -> the power of two c with |U·X| <= c on the calibration data)."""
    producers = {s.out: s for s in steps}
    fused = {s.inputs[0] for s in steps if s.op == StepOp.BOOTSTRAP and s.info.kind == "mambo"}
    out = []
    for s in steps:
        if s.out in fused:
            continue
        if s.op == StepOp.BOOTSTRAP and s.info.kind == "mambo":
            p = producers[s.inputs[0]]
            if p.op != StepOp.PCMM or p.index is not None:
                raise AssertionError(f"MaMBo lowering of {s.out}: its input {p.out} is a {p.op}, not a dense PCMM")
            info = s.info.copy()
            info.scale_factor, info.pcmm, info.pcmm_level = factors[p.out], p.out, p.level_in
            out.append(Step(StepOp.MAMBO, s.out, list(p.inputs), p.rows, p.node, U=p.U, bias=p.bias,
                            level_in=p.level_in, level_out=s.level_out, info=info))
            continue
        out.append(s)
    return out


def boot_order(steps) -> str | None:
    """"cts_first" / "s2c_first": the bootstrapping order of a program's bootstrap steps (None: no bootstrap)."""
    b = bootstrap_steps(steps)
    return None if not b else b[0].info.order or "cts_first"


def boot_batch_size(steps) -> int:
    """k of the S2C-first family's keys (1 for CtS-first single bootstraps)."""
    b = bootstrap_steps(steps)
    return int(b[0].info.k or 1) if b else 1


def scale_factor(peak: float, margin: float, limit: float, what: str, params) -> int:
    """The power of two c >= peak * margin (1 when the values are within 1) a bootstrap divides its input by."""
    f = 1 if peak * margin <= 1.0 else 2 ** math.ceil(math.log2(peak * margin))
    if f > limit:
        # the limit is q0 / 2^(R + log Δ), rarely a whole number: print it exactly enough that f > limit shows
        raise EncodingError(f"{what} reaches {peak:.4g} on the example input: a bootstrap would divide it by {f:g} "
                            f"(the power of two at or above {peak:.4g} x the range margin {margin:g}), more than the "
                            f"{limit:.6g} a bootstrap at scale 2^{params.log_scale:g} can divide by (ScaleDown needs "
                            f"c·Δ·2^R <= q0); normalise the layer's weights or inputs")
    return f


@dataclass
class BootPlanning:
    """What every layout's bootstrap planning starts from: the preset, its bootstrap's cost, the calibration rows
    matrix (features x samples), the output's peak on it and the levels the output keeps in reserve."""
    info: dict
    params: Params
    boot: BootstrapCost
    X: np.ndarray
    max_out: float
    reserve: int

    @classmethod
    def of(cls, steps, x: np.ndarray, opts: dict, known: dict | None = None) -> "BootPlanning":
        """known: the values' per-row peaks on x from a pass already made (the output's peak is read there)."""
        info = boot_preset(opts.get("preset"), bool(opts["allow_insecure"]))
        params = Params.preset(info["name"])
        boot = BootstrapCost.from_params(params, preset_levels_consumed(info["name"]))
        X = x.reshape(x.shape[0], -1).T
        out = next(s.out for s in steps if s.op == StepOp.OUTPUT)
        if known is not None and out in known:
            max_out = peak_of(known[out])
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                y = simulate_rows(steps, X, int(opts["weight_bits"]))
            max_out = float(np.max(np.abs(y))) if y.size else 0.0
        return cls(info, params, boot, X, max_out, output_reserve(max_out, params.log_scale,
                                                                  int(math.log2(params.q[0]))))


def single_key_bytes(params, slots: int) -> int:
    """BootstrapKeys.generate(ctx, sk, params for `slots` slots)'s memory_bytes, from the parameters alone: every
    rotation key at the highest level it is used at (its a-half a seed up to seed_max_level's "auto" level, held
    expanded above), the conjugation key (seeded) and the relinearisation key (expanded) at EvalMod's level, and
    the encapsulation keys (a 1-digit key over Q_L and P, and the {q0, p0} key)."""
    cts_d, stc_d = PRESET_DEPTHS[params.name]
    bp = BootParams(cts_depth=cts_d, stc_depth=stc_d, slots=int(slots))
    L = int(params.max_level)
    chain = SimpleNamespace(N=int(params.N), max_level=L, slots=int(params.N) // 2)
    swk = params.switch_key_bytes
    seeded_up_to, em = L - cts_d + 1, L - cts_d
    rot = sum(swk(int(lv)) * (1 if lv <= seeded_up_to else 2) for lv in rotation_levels(chain, bp).values())
    encapsulation = (2 * (L + 1 + len(params.p)) + 4) * int(params.N) * 8
    return rot + swk(em) + 2 * swk(em) + encapsulation


def family_key_bytes(params, order: str, k: int = 1, slots: int | None = None) -> int:
    """The bootstrapping keys keygen() makes for a pipeline family, in memory, from the parameters alone: the
    S2C-first keys of batch size k (seeded), or single CtS-first keys for `slots` slots (default: all N/2)."""
    if order == "s2c_first":
        cts_d, stc_d = PRESET_DEPTHS[params.name]
        s2c = BootParams(order="s2c_first", log_message_ratio=S2C_LOG_MESSAGE_RATIO, cts_depth=cts_d, stc_depth=stc_d)
        return int(estimate_bytes(params, int(k), s2c))
    return single_key_bytes(params, slots or params.N // 2)


def check_single_boot_keys(eval_keys, slots: int, what: str) -> None:
    """The eval keys of a plan with single CtS-first bootstraps of `slots` slots hold such keys (MissingKeyError)."""
    bk = getattr(eval_keys, "bootstrap_keys", None)
    if not isinstance(bk, BootstrapKeys):
        raise MissingKeyError("this plan bootstraps: its eval keys need the bootstrapping keys "
                              f"(BootstrapKeys for {slots} slots); use keygen()'s eval_keys")
    if bk.params.slots != slots:
        raise MissingKeyError(f"this plan bootstraps {what} of {slots} slots; the bootstrapping keys are for "
                              f"{bk.params.slots or 'all'} slots: use this plan's keygen()")


def plan_bootstrapped(steps, x: np.ndarray, opts: dict, batch_size, peaks: dict | None = None) -> Planned:
    """The layout (A) program with bootstraps for a lowered model (compile(..., bootstrap=True)). peaks: the values'
    per-row peaks on x from compile's pass (None: measured here). opts["key_budget"] (bytes; absent: none): the
    bootstrapping keys the pipeline the planner chooses may hold (hemlp.planner.bootstrap_lowering.choose_pipelines;
    hemlp.layouts.boot_choice.fit_batch_pipeline sets it from a memory budget)."""
    bp = BootPlanning.of(steps, x, opts, peaks)
    info, params, boot, X, max_out, reserve = bp.info, bp.params, bp.boot, bp.X, bp.max_out, bp.reserve
    wb = int(opts["weight_bits"])
    bs = int(batch_size) if batch_size is not None else params.N // 2
    chunks = -(-bs // (params.N // 2))
    costs = PipelineCosts.for_preset(params, boot, PRESET_DEPTHS[info["name"]][1])
    # the S2C-first family's keys in memory, as keygen will make them (seeded, at the order's levels): computed
    # for every batch size measured, instead of a benchmark's keys made another way
    # (k = 1 and the CtS-first keys too: a key budget holds every family to them)
    costs.key_bytes = {k: family_key_bytes(params, "s2c_first", k) for k in (1, *costs.rho)}
    costs.cts_key_bytes = family_key_bytes(params, "cts_first")
    costs.key_source = "estimated for seeded keys"
    low = choose_pipelines(level_dag(steps, params, bs), costs, min_output_level=reserve,
                           pcmm_inputs=mambo_candidates(steps, chunks), mambo=opts.get("mambo", "auto"),
                           batch_bootstrap=opts.get("batch_bootstrap", "auto"), key_budget=opts.get("key_budget"))
    placement = low.placement
    margin = 1.0 + float(opts["activation_margin"])
    limit = scale_down_limit(params, CTS_LOG_MESSAGE_RATIO if low.order == "cts_first" else S2C_LOG_MESSAGE_RATIO)
    factors, mfactors = {}, {}
    # the calibration rows and the padding slots' zero-input sample
    peaks = calibration_peaks(steps, X, {b.value for b in placement.bootstraps}, wb,
                              {b.value for b in placement.bootstraps if b.value in low.mambo_values}, peaks)
    for b in placement.bootstraps:
        if b.value in factors:
            continue
        factors[b.value] = scale_factor(peaks[b.value], margin, limit, f"value {b.value!r}", params)
        if b.value in low.mambo_values:         # MaMBo refreshes U·X before the bias is added
            mfactors[b.value] = scale_factor(peaks[(b.value, "product")], margin, 2.0 ** 62,
                                              f"the product of layer {b.value!r}", params)
    if low.order == "cts_first":
        bits = boot.precision_bits or DEFAULT_NOISE_BITS
    else:
        bits = costs.s2c_bits(low.k) or DEFAULT_NOISE_BITS
    new = apply_placement(steps, placement, factors, bits, params.N // 2, low)
    if low.mambo_values:
        mb_bits = costs.mambo_bits(low.k) or DEFAULT_NOISE_BITS
        for s in new:
            if s.op == StepOp.BOOTSTRAP and s.info.kind == "mambo":
                s.info.noise_bits = float(mb_bits)
        new = lower_mambo(new, mfactors)
    for s in new:
        if s.op in REFRESH_OPS:
            s.info.lowering = low.reason
            s.info.family_totals = dict(low.totals)
    top = next(s.level_out for s in new if s.op == StepOp.INPUT)
    preset = dict(info, depth=info["depth"])
    return Planned(new, params, preset, depth_of(steps), reserve, top, bs, opts, max_out)


# ---------------------------------------------------------------------------------------
# What the plan prints
# ---------------------------------------------------------------------------------------

def bootstrap_steps(steps) -> list:
    """The steps that refresh ciphertexts: placed bootstraps and MaMBo layers."""
    return [s for s in steps if s.op in REFRESH_OPS]


def sparse_summary(b: dict | None, params, slots: int) -> dict | None:
    """A summary() of a layout whose single bootstraps run with `slots` slots, with that count and the keys'
    memory (single_key_bytes) added; None stays None."""
    if b is not None:
        b.update(boot_slots=int(slots), key_bytes=single_key_bytes(params, slots))
    return b


def sparse_summary_text(info: dict, how: str) -> str:
    """The printed plan's bootstrapping lines for a layout that bootstraps with info["bootstrap"]["boot_slots"]
    slots ("" without bootstraps); how: a line on what is refreshed, with {slots} for the slot count."""
    b = info.get("bootstrap")
    if not b:
        return ""
    keys = (f"\n#   bootstrapping keys {b['key_bytes'] / 2 ** 30:.2f} GiB in memory (single, {b['boot_slots']} slots; "
            "estimated from the parameters)") if "key_bytes" in b else ""
    return "\n" + summary_text(b) + "\n#   " + how.format(slots=b["boot_slots"]) + keys


#: a bootstrap's estimates of the pipelines not chosen and why (RefreshInfo fields), copied to summary()'s rows
CHOICE_FIELDS = ("single_seconds", "batched_seconds", "mambo_seconds", "reason")


def summary(steps, params, batch: int, layer_seconds: float | None = None) -> dict | None:
    """The placement as saved in the plan's info (None: no bootstrap in the program). layer_seconds: the layers'
    estimate (default: layout (A)'s, hemlp.planner.layouts.estimate_batch)."""
    boots = bootstrap_steps(steps)
    if not boots:
        return None
    layers = estimate_batch(steps, params, batch) if layer_seconds is None else float(layer_seconds)
    first = boots[0].info
    rows = []
    for s in boots:
        i = s.info
        r = dict(value=i.value, before=i.before, level_before=s.level_in, level_after=s.level_out,
                 ciphertexts=i.ciphertexts, bootstraps=i.bootstraps, seconds=i.seconds, scale_factor=i.scale_factor,
                 kind=i.kind or "single", k=i.k or 1)
        # the alternatives' estimates the lowering set (a None one too: no such alternative), none when it did not
        r.update((key, i[key]) for key in CHOICE_FIELDS if key in i)
        if i.paired_with is not None:
            r["paired_with"] = i.paired_with
        rows.append(r)
    boot_s = sum(r["seconds"] for r in rows)
    out = dict(placements=rows, levels_after=boots[0].level_out, boot_seconds=boot_s, layer_seconds=layers,
               total_seconds=boot_s + layers, cost_source=first.cost_source or "", noise_bits=first.noise_bits)
    if first.lowering is not None:
        out.update(lowering=first.lowering, order=first.order or "cts_first", k=first.k or 1,
                   family=first.family or "single (CtS-first)", family_totals=first.family_totals or {})
    return out


def _choice_text(r: dict) -> str:
    kind, k = r.get("kind", "single"), r.get("k", 1)
    if kind == "mambo":
        what = f"MaMBo k={k} (the PCMM fused)"
    elif kind == "batched":
        what = f"batched k={k}"
    else:
        what = "single" + (" (S2C-first)" if k == 1 and r.get("batched_seconds") == r["seconds"] else "")
    est = [f"~{r['seconds']:.3g} s"]
    if "single_seconds" in r and kind != "single":
        est.append(f"single ~{r['single_seconds']:.3g} s")
    if r.get("batched_seconds") is not None and kind in ("single", "mambo") and r["batched_seconds"] != r["seconds"]:
        est.append(("PCMM + batched" if kind == "mambo" or r.get("mambo_seconds") is not None else "batched")
                   + f" ~{r['batched_seconds']:.3g} s")
    if r.get("mambo_seconds") is not None and kind != "mambo":
        est.append(f"MaMBo ~{r['mambo_seconds']:.3g} s")
    return f"{what}: " + ", ".join(est) + (f" — {r['reason']}" if r.get("reason") else "")


def _pair_text(r: dict) -> str:
    """A refresh's pipeline, or the bootstrap_pair that refreshes it with another block of its value (layout (P))."""
    if not r.get("paired_with"):
        return _choice_text(r)
    if r["bootstraps"]:
        return f"one bootstrap_pair with {r['paired_with']} ~{r['seconds']:.3g} s"
    return f"refreshed with {r['paired_with']} by its bootstrap_pair"


def summary_text(b: dict) -> str:
    calls = sum(r["bootstraps"] for r in b["placements"])
    lines = [f"# bootstrapping: {len(b['placements'])} point(s), {calls} bootstrap call(s), each lands at level "
             f"{b['levels_after']}; estimated {b['boot_seconds']:.3g} s bootstrapping + {b['layer_seconds']:.3g} s "
             f"layers = {b['total_seconds']:.3g} s per batch (1 thread)",
             f"#   bootstrap time: {b['cost_source']}; simulated error 2^-{b['noise_bits']:.1f} x c per bootstrap"]
    if b.get("lowering"):
        lines.append(f"#   pipeline: {b['lowering']}")
    for r in b["placements"]:
        lines.append(f"#   bootstrap {r['value']} before {r['before']}: level {r['level_before']} -> "
                     f"{r['level_after']}, {r['ciphertexts']} ciphertext(s) in {r['bootstraps']} call(s), "
                     f"input divided by c = {r['scale_factor']:g}; " + _pair_text(r))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# Encrypted execution
# ---------------------------------------------------------------------------------------
