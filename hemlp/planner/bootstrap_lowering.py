"""Which bootstrapping pipeline runs each placed bootstrap of a layout (A) chain (issues #17 item 3, #18 item 1):

* **single**: Bootstrapper (CtS-first), two real ciphertexts per complex bootstrap (bootstrap_pair);
* **batched k**: MamboBootstrapper.bootstrap_batch (S2C-first, docs/design/bootstrap.md §1.4, §3.3), k complex
  bootstraps per call on shared-a MSRLWE ciphertexts, two real ciphertexts joined per complex one;
* **MaMBo k**: MamboBootstrapper.pcmm_bootstrap (§3.4) for a linear layer whose output is refreshed: the layer's
  PCMM runs at level 1 between SlotToCoeff (on its d2 input rows) and the batched refresh of its d1 output rows
  (joined two by two after the PCMM).

The S2C-first order needs its inputs at level >= stc_depth and lands stc_depth levels higher than the CtS-first
order: in a frame shifted up by stc_depth levels (``LevelNode.limb_offset``) it has the same level rules as the
CtS-first bootstrap, so the placement DP (hemlp.planner.bootstrap_placement) runs once per family (single; S2C-first
with each k) and MaMBo enters it as the cost of refreshing the output of a PCMM (``PipelineCosts.mambo_seconds``:
fusing never changes a level). The plan takes the cheapest family; within it MaMBo per linear layer where it is
cheaper than the PCMM plus the refresh.

Costs (one thread, seconds): the single bootstrap's time is hemlp.planner.bootstrap_placement.BootstrapCost
(the cost profile's measurement of the preset, or scaled). Batched and MaMBo costs are that time multiplied by
ratios measured side by side in one run of ``python -m hemlp.bench mambo`` (the cost profile's batch runs:
`hemlp calibrate`'s, or the packaged table's from bench/mambo_*.json; CPU times, which the shared machine's load
inflates less than wall times): rho(k) = S2C-first batch of k / (k single bootstraps). The StC of one ciphertext
at the bottom of the chain is STC_BOTTOM_FRACTION of a single bootstrap (measured at test-N12-boot). Presets without
their own run use the ratios of the nearest ring size (dimensionless; the source line says so).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Optional

from hemlp.errors import LevelError, ParameterError, UnsupportedError
from hemlp.planner.bootstrap_placement import BootstrapCost, evaluate_placement, place_bootstraps
from hemlp.planner.cost_model import CostProfile, active_profile

__all__ = ["PipelineCosts", "STC_BOTTOM_FRACTION", "MAX_BATCH_KEY_BYTES", "batch_ratios"]

#: SlotToCoeff of one ciphertext at the bottom of the chain (stc_depth + 1 limbs) over one bootstrap: measured
#: 0.059 at test-N12-boot (1 thread, CPU time: 7.5 ms StC vs 127 ms per ciphertext of an S2C-first batch of 2, loaded
#: machine); at N = 2^16 the bottom limbs are a smaller share of the chain, so this overestimates MaMBo's StC there
STC_BOTTOM_FRACTION = 0.06
#: batch sizes whose keys are estimated above this (in memory) are not planned: with the working set (~2.6 GiB at
#: N16-boot, k = 4) and the rest of the process they must fit this 24 GiB machine; seeded S2C-first keys
#: (hemlp.bootstrap.batch_keys.estimate_bytes) take 5.9 / 11.4 / 22.5 GiB for k = 2 / 4 / 8 at N16-boot
MAX_BATCH_KEY_BYTES = 12 * 2 ** 30


def batch_ratios(preset: str, N: int, profile: Optional[CostProfile] = None) -> tuple[dict, dict, dict, str]:
    """({k: rho(k)}, {k: key bytes, "single": the single bootstrap's key bytes}, {k: (bits of the S2C batch, of
    pcmm_bootstrap) minus the bits of the single bootstrap measured in the same run}, source) from the cost
    profile's batch runs (default: hemlp.planner.cost_model.active_profile()) of `preset`, else of the nearest ring
    size; empty dicts when there is none. Every run of the best match (preset, ring size, thread count) contributes
    its batch sizes (e.g. bench/mambo_N16.json k = 2 and bench/mambo_N16_k4.json k = 4; a k in two runs: the newer
    run's), each ratio against the single bootstrap of its own run. Key bytes: the S2C-first keys' memory where the
    run records it (s2c_key_memory_bytes: what the planned pipelines hold), else the keys it made. The bits are
    relative because the runs measure them in different ways (bench/mambo_N16.json with the decryption noise,
    bench/boot_*.json without)."""
    profile = profile or active_profile()
    found = []
    for r in profile.batch_runs:
        if r.rho:
            found.append(((r.preset == preset, -abs(math.log2(r.N) - math.log2(N)), r.threads == 1), r.date,
                          r.name, r.preset, r.rho, {"single": r.single_key_bytes, **r.key_bytes}, r.bits, r.derived))
    if not found:
        return {}, {}, {}, f"no batched-bootstrapping run in the cost profile ({profile.source})"
    best = max(f[0] for f in found)
    group = sorted((f for f in found if f[0] == best), key=lambda f: (f[1], f[2]))   # oldest first: newer runs win
    own = best[0]
    rho, keys, bits = {}, {}, {}
    for _, _, _, _, r, kb, bt, _ in group:
        rho.update(r)
        bits.update(bt)
        keys.update(kb)          # "single": the newest run's
    names = ", ".join(f[2] for f in group)
    carried = "; " + group[-1][7] if group[-1][7] else ""
    src = (f"{names} ({group[-1][3]}, CPU-time ratios{'' if own else ', nearest ring size: key bytes not for ' + preset}"
           f"{carried})")
    return rho, (keys if own else {}), bits, src


@dataclass
class PipelineCosts:
    """Per-bootstrap costs of the three pipelines at one preset (see the module doc)."""

    single: BootstrapCost               # CtS-first, paired
    stc_depth: int
    rho: dict = field(default_factory=dict)         # k -> S2C-first batch of k / k single bootstraps
    key_bytes: dict = field(default_factory=dict)   # k -> bytes of the batch keys (measured at this preset)
    bits: dict = field(default_factory=dict)        # k -> (S2C batch, pcmm_bootstrap) bits - single bits, measured
    source: str = ""
    stc_fraction: float = STC_BOTTOM_FRACTION
    single_key_bytes: Optional[int] = None          # the single bootstrap's keys, measured in the same run
    key_source: str = "measured"                    # where key_bytes come from ("measured" in self.source, or an
                                                    # estimate the caller states)
    cts_key_bytes: Optional[int] = None             # the CtS-first keys as keygen makes them (None: single_key_bytes)

    def family_key_bytes(self, order: str, k: int) -> Optional[int]:
        """The bootstrapping keys of a family in memory (None: not known here)."""
        if order == "cts_first":
            return self.single_key_bytes if self.cts_key_bytes is None else self.cts_key_bytes
        return self.key_bytes.get(k)

    def key_note(self, order: str, k: int) -> str:
        """The key bytes of the chosen family beside the single one's ('' when not known here)."""
        gib = 2.0 ** -30
        single = "" if self.single_key_bytes is None else f"single {self.single_key_bytes * gib:.2f} GiB"
        if order == "cts_first":
            return f"bootstrapping keys {single} (measured, {self.source})" if single else ""
        if k < 2 or k not in self.key_bytes:       # S2C-first single: its keys are only held to a key budget
            return ""
        if self.key_source == "measured":
            return (f"bootstrapping keys k={k} {self.key_bytes[k] * gib:.2f} GiB" + (f" vs {single}" if single else "")
                    + f" (measured, {self.source})")
        return (f"bootstrapping keys k={k} {self.key_bytes[k] * gib:.2f} GiB in memory ({self.key_source})"
                + (f" vs {single} (measured, {self.source})" if single else ""))

    @classmethod
    def for_preset(cls, params, single: BootstrapCost, stc_depth: int,
                   profile: Optional[CostProfile] = None) -> "PipelineCosts":
        """The costs at `params`' preset from the cost profile (default: the active one; single: its
        BootstrapCost.from_params)."""
        rho, keys, bits, src = batch_ratios(getattr(params, "name", ""), params.N, profile)
        single_keys = keys.pop("single", None)
        return cls(single, int(stc_depth), rho, keys, bits, src, single_key_bytes=single_keys)

    # ---- the candidates
    def batch_sizes(self, max_key_bytes: int = MAX_BATCH_KEY_BYTES) -> list[int]:
        """Measured batch sizes k >= 2 whose keys fit max_key_bytes (unknown key bytes: assumed to fit)."""
        return sorted(k for k in self.rho if k >= 2 and self.key_bytes.get(k, 0) <= max_key_bytes)

    def ratio(self, k: int) -> float:
        """rho(k); k = 1 (S2C-first single, not measured) is priced as a CtS-first single bootstrap; an unmeasured
        k as the nearest measured one."""
        if k == 1 or not self.rho:
            return 1.0
        return self.rho[min(self.rho, key=lambda m: (abs(math.log2(m) - math.log2(k)), m))]

    def pair_factor(self) -> float:
        s = self.single
        return 1.0 if s.pair_seconds is None or s.seconds <= 0 else s.pair_seconds / s.seconds

    def batch_call_seconds(self, k: int) -> float:
        """One call of k complex S2C-first bootstraps (each carrying two real ciphertexts), SlotToCoeff included."""
        return k * self.single.seconds * self.ratio(k) * self.pair_factor()

    def s2c_boot(self, k: int) -> BootstrapCost:
        """The BootstrapCost of the S2C-first family with batch size k (levels in the shifted frame)."""
        s = self.single
        src = f"{s.source} x S2C-first batch / single {self.ratio(k):.3f} (k={k}, {self.source})"
        return BootstrapCost(s.levels_after, s.seconds * self.ratio(k), s.seconds * self.ratio(k) * self.pair_factor(),
                             src, self.s2c_bits(k), batch=int(k), batch_seconds=self.batch_call_seconds(k))

    def _bits(self, k: int, i: int) -> Optional[float]:
        """The single bootstrap's precision (BootstrapCost.precision_bits) plus the measured difference of the
        pipeline (None: either is not measured)."""
        b = self.bits.get(k) or (self.bits[min(self.bits)] if self.bits else None)
        if b is None or self.single.precision_bits is None:
            return None
        return self.single.precision_bits + b[i]

    def s2c_bits(self, k: int) -> Optional[float]:
        return self._bits(k, 0)

    def mambo_bits(self, k: int) -> Optional[float]:
        return self._bits(k, 1)

    def stc_seconds(self) -> float:
        return self.stc_fraction * self.single.seconds

    def mambo_seconds(self, k: int, inputs: int, outputs: int, pcmm_per_limb: float) -> float:
        """MaMBo for a PCMM whose input rows need `inputs` SlotToCoeffs (rows x chunks, two chunks of a row joined:
        a PCMM mixes rows, so rows cannot be joined) and that produces `outputs` real ciphertexts: the SlotToCoeffs,
        the PCMM at level 1 (2 limbs), the batched refresh of the outputs joined two by two without its
        SlotToCoeff."""
        calls = self.s2c_boot(k).bootstraps_for(outputs)
        refresh = calls * (self.batch_call_seconds(k) - k * self.stc_seconds())
        return inputs * self.stc_seconds() + 2 * pcmm_per_limb + refresh

    def separate_seconds(self, k: int, outputs: int, pcmm_per_limb: float, pcmm_level: int) -> float:
        """The PCMM at its (actual) level then the S2C-first batched refresh of its outputs."""
        return pcmm_per_limb * (pcmm_level + 1) + self.s2c_boot(k).seconds_for(outputs)

    def describe(self) -> str:
        ks = ", ".join(f"k={k}: {r:.3f}" for k, r in sorted(self.rho.items())) or "none"
        return (f"single {self.single.seconds:.3g} s per bootstrap ({self.single.source}); S2C-first batch / single "
                f"per ciphertext {ks} ({self.source}); StC at the bottom {self.stc_fraction:g} of a bootstrap")


# ---------------------------------------------------------------------------------------
# The choice: one placement per pipeline family, the cheapest family, MaMBo per linear layer
# ---------------------------------------------------------------------------------------

#: an S2C-first family must be this much cheaper than the single (CtS-first) one to be chosen by 'auto': the
#: simpler pipeline with the smaller keys wins near-ties (the ratios carry the shared machine's noise)
AUTO_MARGIN = 0.02
MODES = ("auto", True, False)
#: mambo=True: seconds added to every bootstrap that is not a MaMBo layer while placing, so that the placement with
#: the fewest non-MaMBo bootstraps wins (then the cheapest); the totals printed are without it
FORCED_PENALTY = 1e6


@dataclass
class BootChoice:
    """How one placed bootstrap runs: kind "single" | "batched" | "mambo", k, its estimate and the alternatives'."""

    value: str
    before: str
    kind: str
    k: int
    seconds: float                  # the chosen pipeline (MaMBo: the fused layer, its PCMM included)
    single_seconds: float           # the same ciphertexts by paired CtS-first single bootstraps
    batched_seconds: Optional[float] = None    # S2C-first batched refresh (MaMBo: the PCMM at its level + this)
    mambo_seconds: Optional[float] = None      # MaMBo for the whole layer (None: not a linear layer's output)
    reason: str = ""

    def to_json(self) -> dict:
        return dict(kind=self.kind, k=self.k, seconds=self.seconds, single_seconds=self.single_seconds,
                    batched_seconds=self.batched_seconds, mambo_seconds=self.mambo_seconds, reason=self.reason)


@dataclass
class Lowering:
    """The chosen family (order "cts_first" or "s2c_first", batch size k), its placement (levels in the frame of
    that order: add `level_offset` for the ciphertexts' levels), the per-bootstrap choices and every family's total."""

    order: str
    k: int
    placement: object
    choices: dict                   # (before, value) -> BootChoice
    totals: dict                    # family label -> estimated seconds (or why it was not planned)
    level_offset: int
    reason: str
    costs: PipelineCosts

    @property
    def label(self) -> str:
        return family_label(self.order, self.k)

    @property
    def mambo_values(self) -> set:
        return {c.value for c in self.choices.values() if c.kind == "mambo"}


def family_label(order: str, k: int) -> str:
    if order == "cts_first":
        return "single (CtS-first)"
    return f"S2C-first k={k}" if k == 1 else f"batched k={k} (S2C-first)"


def check_modes(mambo, batch_bootstrap) -> None:
    """Typed errors for option values that are not modes."""
    if not any(mambo is m for m in MODES) and mambo != "auto":
        raise ParameterError(f"mambo={mambo!r}: use 'auto' (the planner decides), True (every linear layer whose "
                             "output is refreshed runs as MaMBo) or False")
    ok = batch_bootstrap == "auto" or isinstance(batch_bootstrap, bool) or (
        isinstance(batch_bootstrap, int) and batch_bootstrap >= 2)
    if not ok:
        raise ParameterError(f"batch_bootstrap={batch_bootstrap!r}: use 'auto', True (batched, the planner picks k), "
                             "False (one bootstrap per call) or an int k >= 2 (complex bootstraps per call, two real "
                             "ciphertexts each)")


def choose_pipelines(nodes, costs: PipelineCosts, *, min_output_level: int, pcmm_inputs: dict,
                     mambo="auto", batch_bootstrap="auto", max_key_bytes: int = MAX_BATCH_KEY_BYTES,
                     key_budget: Optional[int] = None) -> Lowering:
    """nodes: the level DAG (hemlp.planner.bootstrap_placement.LevelNode, CtS-first frame); pcmm_inputs: {value:
    SlotToCoeffs of its input rows} of the values MaMBo may produce (a dense PCMM's output read by one node only).
    mambo / batch_bootstrap: 'auto' (by the estimates), True / False (forced), batch_bootstrap an int k (forced).
    max_key_bytes: batch sizes with larger keys are never planned (this machine's limit). key_budget: the
    bootstrapping keys the plan may hold (a memory budget's room for them); the families the planner chooses among
    (batch_bootstrap 'auto' / True) whose keys (PipelineCosts.family_key_bytes; unknown: assumed to fit) exceed it
    are not planned, and the reason names them; when none fits, the one with the smallest keys. A forced k or
    single family is kept whatever its keys (the memory check refuses it)."""
    check_modes(mambo, batch_bootstrap)
    single = costs.single
    stc = costs.stc_depth
    La = single.levels_after
    by_name = {n.name: n for n in nodes}
    totals: dict = {}
    plans = []          # (total, order, k, placement, boot_fn-chooser)

    def plan_single():
        p = place_bootstraps(nodes, single, min_output_level=min_output_level)
        totals[family_label("cts_first", 1)] = p.total
        plans.append((p.total, "cts_first", 1, p))

    cts = mambo is not True and batch_bootstrap in ("auto", False)
    if cts and key_budget is not None and batch_bootstrap == "auto":
        cts = not _over_budget(costs, key_budget, "cts_first", 1)
    if cts:
        plan_single()
    if batch_bootstrap is True:
        ks = costs.batch_sizes(max_key_bytes)
        if not ks:
            raise UnsupportedError(f"batch_bootstrap=True: no batch size fits — measured k "
                                   f"{sorted(costs.rho) or 'none'} "
                                   f"({costs.source}); keys above {max_key_bytes / 2 ** 30:.0f} GiB are not planned. "
                                   "Use batch_bootstrap='auto' or False")
    elif isinstance(batch_bootstrap, int) and not isinstance(batch_bootstrap, bool):
        kb = costs.key_bytes.get(batch_bootstrap)
        if kb is not None and kb > max_key_bytes:
            raise ParameterError(f"batch_bootstrap={batch_bootstrap}: its keys take {kb / 2 ** 30:.1f} GiB, above the "
                                 f"{max_key_bytes / 2 ** 30:.0f} GiB planned for keys; use a smaller k")
        ks = [batch_bootstrap]
    elif batch_bootstrap is False:
        ks = [1] if mambo is not False else []
    else:
        ks = ([1] if mambo is not False else []) + costs.batch_sizes(max_key_bytes)
    # the families (order, k) whose keys exceed the key budget; the smallest keys planned when none fits
    over_budget = []
    if key_budget is not None and batch_bootstrap in ("auto", True):
        if batch_bootstrap == "auto" and mambo is not True and not cts:
            over_budget.append(("cts_first", 1))
        over_budget += [("s2c_first", k) for k in ks if _over_budget(costs, key_budget, "s2c_first", k)]
        ks = [k for k in ks if ("s2c_first", k) not in over_budget]
        if not cts and not ks and over_budget:
            order, k = min(over_budget, key=lambda f: costs.family_key_bytes(*f))
            ks = [k] if order == "s2c_first" else []
            if order == "cts_first":
                plan_single()
    shifted = [replace(n, limb_offset=stc) for n in nodes]
    shifted_by = {n.name: n for n in shifted}
    min_out = max(0, min_output_level - stc)

    def chooser(k):
        boot = costs.s2c_boot(k)

        def split(v, lvl):
            """(chosen seconds of refreshing v, BootChoice fields) at stored level lvl (S2C frame)."""
            n_out = by_name[v].ciphertexts
            batched = boot.seconds_for(n_out)
            if v not in pcmm_inputs or mambo is False or lvl >= La:
                return batched, None
            p = shifted_by[v]
            sep = costs.separate_seconds(k, n_out, p.cost_per_limb, lvl + 1 + stc)
            mam = costs.mambo_seconds(k, pcmm_inputs[v], n_out, p.cost_per_limb)
            use = mambo is True or mam < sep
            return (mam - p.cost(lvl + 1) if use else batched), (use, mam, sep)

        return boot, split

    for k in ks:
        boot, split = chooser(k)

        def priced(v, lv, split=split):
            secs, m = split(v, lv)
            # mambo=True: the placement that refreshes the most values by MaMBo first, then the cheapest
            return secs + (FORCED_PENALTY if mambo is True and m is None else 0.0)

        try:
            p = place_bootstraps(shifted, boot, min_output_level=min_out, boot_seconds=priced)
        except LevelError as exc:
            totals[family_label("s2c_first", k)] = f"no placement ({exc})"
            continue
        if mambo is True:       # the placement's total without the penalty
            p = evaluate_placement(shifted, boot, p.decisions, min_output_level=min_out,
                                   boot_seconds=lambda v, lv, split=split: split(v, lv)[0])
            p = replace(p, method="dp")
        totals[family_label("s2c_first", k)] = p.total
        plans.append((p.total * (1.0 + (AUTO_MARGIN if batch_bootstrap == "auto" and mambo is not True else 0.0)),
                      "s2c_first", k, p))
    if not plans:
        raise LevelError("no bootstrap placement for the forced pipeline: " + "; ".join(
            f"{k}: {v}" for k, v in totals.items()))
    _, order, k, placement = min(plans, key=lambda t: (t[0], t[1] != "cts_first", t[2]))
    choices = {}
    for b in placement.bootstraps:
        n = b.ciphertexts
        s1 = single.seconds_for(n)
        if order == "cts_first":
            bs = min((costs.s2c_boot(kk).seconds_for(n) for kk in ks), default=None)
            why = ("the single CtS-first family is the cheapest plan" if mambo == "auto" or batch_bootstrap == "auto"
                   else "batched bootstrapping and MaMBo are off (forced)")
            choices[(b.before, b.value)] = BootChoice(b.value, b.before, "single", 1, b.seconds, s1, bs, None, why)
            continue
        _, split = chooser(k)
        _, m = split(b.value, b.level_before)
        batched = costs.s2c_boot(k).seconds_for(n)
        kind = "batched" if k > 1 else "single"
        if m is None:
            why = (f"{'batched' if k > 1 else 'S2C-first single'}: the plan's family; "
                   + ("not the output of a dense layer read once" if b.value not in pcmm_inputs else
                      "MaMBo off" if mambo is False else "already refreshed"))
            choices[(b.before, b.value)] = BootChoice(b.value, b.before, kind, k, batched, s1, batched, None, why)
            continue
        use, mam, sep = m
        if use:
            why = ("forced (mambo=True)" if mambo is True else
                   f"MaMBo pays: {mam:.3g} s < {sep:.3g} s for the PCMM at level {b.level_before + 1 + stc} then the "
                   f"refresh ({pcmm_inputs[b.value]} input SlotToCoeffs, the PCMM at level 1)")
            choices[(b.before, b.value)] = BootChoice(b.value, b.before, "mambo", k, mam, s1, sep, mam, why)
        else:
            why = (f"MaMBo does not pay: {mam:.3g} s >= {sep:.3g} s for the PCMM then the refresh (its "
                   f"{pcmm_inputs[b.value]} input rows each need a SlotToCoeff; the refresh pairs the outputs)")
            choices[(b.before, b.value)] = BootChoice(b.value, b.before, kind, k, batched, s1, sep, mam, why)
    label = family_label(order, k)
    forced = [f"{o}={v!r}" for o, v in (("mambo", mambo), ("batch_bootstrap", batch_bootstrap)) if v != "auto"]
    reason = (f"{label}: " + _budget_note(costs, key_budget, over_budget, (order, k)) + "the cheapest estimate of "
              + ", ".join(
        f"{f} {t:.3g} s" if isinstance(t, float) else f"{f} ({t})" for f, t in totals.items())
        + (f" (forced: {', '.join(forced)})" if forced else ""))
    note = costs.key_note(order, k)
    if note:
        reason += "; " + note
    low = Lowering(order, k, placement, choices, totals, stc if order == "s2c_first" else 0, reason, costs)
    if mambo is True and not low.mambo_values:
        raise UnsupportedError("mambo=True, but no bootstrap of the placement refreshes the output of a dense linear "
                               "layer read only by it (MaMBo fuses exactly that pair; the bootstraps here sit after "
                               + ", ".join(sorted({b.value for b in placement.bootstraps})) + "). Use mambo='auto'")
    return low


def _over_budget(costs: PipelineCosts, key_budget: int, order: str, k: int) -> bool:
    kb = costs.family_key_bytes(order, k)
    return kb is not None and kb > key_budget


def _budget_note(costs: PipelineCosts, key_budget, over_budget: list, chosen: tuple) -> str:
    """Why the plan's family is not the cheapest one: the families whose keys exceed the key budget ('' if none)."""
    if not over_budget:
        return ""
    gib = 2.0 ** -30
    keys = " and ".join(f"{family_label(*f)}'s keys ({costs.family_key_bytes(*f) * gib:.3g} GiB)"
                        for f in over_budget if f != chosen)
    budget = (f"the key budget ({key_budget * gib:.3g} GiB: the largest family's keys with which the plan fits the "
              "memory budget)")
    if chosen in over_budget:
        return (f"no family's keys fit {budget}: the smallest keys ({costs.family_key_bytes(*chosen) * gib:.3g} GiB"
                + (f"; {keys} exceed it too" if keys else "") + "); ")
    return f"{keys} exceed {budget}; "
