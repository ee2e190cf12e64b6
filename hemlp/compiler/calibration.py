"""Calibration data -> activation ranges and approximations chosen for an agreement target.

``choose_activations`` (called by hemlp.compile) implements docs/design/activations.md §3:
1. run the exact float64 model on the calibration set, in chunks, and record every activation input's range
   (ReferenceSummary);
2. range per activation: [min, max] plus a small core margin, and a guard band (``activation_guard`` x the
   width on each side) fitted at low weight, so inputs slightly beyond the calibrated range stay sane;
3. candidates per activation (its ``ladder``): degrees 2^k - 1 up to 127 (depth-optimal with hemlp's BSGS
   evaluation), each fitted by weighted minimax and by Chebyshev interpolation, the smaller core error kept; for
   ReLU then composite sign approximations (hemlp.compiler.composite_sign), which reach errors of 10^-4 x the
   range that a single polynomial reaches only beyond degree 1000;
4. the smallest uniform degree whose plan (simulated in float64) agrees with the exact model's top-1 on the
   calibration samples, with ``agreement_safety`` times the plan's error to spare (``disagreements``; 1 by default:
   plain agreement; the search's choice among many plans on the same samples overstates its agreement on new ones,
   SAFETY = 4 holds the ReLU ResNet-20's target on its test images), with a one-sided 90 %
   Clopper-Pearson lower bound >= ``target_agreement`` (with 1 000 samples: at most 5 disagreements for 99 %, 1 for
   99.5 %; below MIN_CERTIFY samples, the point estimate), then a descent
   (``_descend``): each round ranks the one-notch lowerings by their harm on the samples nearest a decision
   boundary and keeps, by bisection, the longest prefix of that ranking that still meets the target. Samples are
   ordered by their margin and run in chunks (SEARCH_CHUNK), each resumed at the first activation the trial
   changes (hemlp.compiler.resume_cache); a trial, uniform rungs included, stops at the chunk that rules it out
   (and is not run again); polynomials are evaluated through PolyTable lookups (error <= 10^-3 x the fit's);
5. with ``agreement_holdout`` = h > 0 (and >= MIN_CERTIFY samples), the search selects on a (1 - h) part of the
   calibration set and the chosen plan is checked on the other part, which no selection saw (``holdout_split``:
   seeded, stratified by margin). The held-out part is held to the same rule for its size (the Clopper-Pearson
   bound from MIN_CERTIFY samples, else the point estimate). A plan that fails it tightens the search split's rule
   (one disagreement fewer allowed than the failed plan had; at none, the next factor of HOLDOUT_SAFETIES) and the
   descent starts again from the last of its accepted states that meets the stricter rule, until the held-out part
   passes or the factors run out (then an AgreementWarning and the report's ``held_out.passed`` False);
6. nothing fits the available depth: TargetUnreachableError when the target was asked for, else the best
   reachable choice with an AgreementWarning.

At equal depth a single minimax polynomial is more accurate than a composite (docs/design/activations.md §1.4), so
composites sit above degree 127 on the ladder: the search reaches them only when no single polynomial meets the
target (deep ReLU networks, bootstrapped plans).

``check_inputs`` is the client-side guard: it runs the plan in plaintext on the inputs and reports, per
activation, the inputs outside the calibrated core and beyond the polynomial's domain (garbage).
"""
from __future__ import annotations

import math
import time
import warnings

import numpy as np

from hemlp.compiler.activations import (COMPOSITE_KINDS, ActPoly, approximate, approximate_composite, calibrate_range,
                                       exact_poly)
from hemlp.compiler.composite_sign import SCHEDULES
from hemlp.compiler.ir import clip_bounds
from hemlp.compiler.poly_table import TableActivations
from hemlp.compiler.resume_cache import ResumeCache
from hemlp.errors import CalibrationError, TargetUnreachableError, warn_always
from hemlp.he.polynomial import depth as poly_depth

__all__ = ["DEGREES", "HOLDOUT", "HOLDOUT_SAFETIES", "MIN_CERTIFY", "SAFETY", "AgreementWarning", "CalibrationWarning",
           "agreement_holdout", "agreement_safety", "allowed_disagreements", "holdout_split", "as_calibration",
           "as_rung", "choose_activations", "disagreements", "ReferenceSummary", "is_ranged", "ladder", "margins",
           "needs_ranges", "per_node_option", "step_depth", "top1", "RANGED_KINDS"]

DEGREES = (3, 7, 15, 31, 63, 127)


def step_depth(rung) -> int:
    """Levels of the deepest single step of a rung (a composite's stages run as separate steps, so a bootstrap can
    sit between them)."""
    if isinstance(rung, tuple):
        return max(max(poly_depth(d) for d in rung), 1)
    return poly_depth(rung)


def ladder(n, max_step_depth: int | None = None) -> tuple:
    """The approximations the search tries for activation n, least precise first: single polynomials of DEGREES,
    then for ReLU the composite sign schedules (hemlp.compiler.composite_sign.SCHEDULES), which reach errors a single
    polynomial of degree <= 127 cannot. With bootstraps, only rungs whose every step fits in the levels a bootstrap
    leaves (``max_step_depth``); the lowest rung always stays."""
    rungs = DEGREES + (SCHEDULES if n.attrs["kind"] in COMPOSITE_KINDS else ())
    if max_step_depth is None:
        return rungs
    return rungs[:1] + tuple(r for r in rungs[1:] if step_depth(r) <= max_step_depth)


def as_rung(v):
    """An activation_degree value as a ladder rung: an int degree, or a tuple of composite stage degrees."""
    return tuple(int(d) for d in v) if isinstance(v, (tuple, list)) else int(v)


#: calibration samples needed to certify 99 % agreement (the 90 % Clopper-Pearson bound of CONFIDENCE)
MIN_CERTIFY = 1000
#: below this many samples the search starts at degree 7 and uses the point estimate (a handful of samples
#: agree at any degree, and no bound reaches 99 %)
MIN_SEARCH = 200
#: one-sided confidence of the Clopper-Pearson bound the search requires to reach the target
CONFIDENCE = 0.9
#: the agreement_safety that holds target_agreement on held-out images for the ReLU ResNet-20: a calibration sample
#: counts as agreeing only if its top-1 survives this many times the plan's error on its logits (``disagreements``).
#: The search chooses among many plans on the same samples and keeps the cheapest that passes, so a plain count of
#: flips on them underestimates the flips on new samples (docs/design/activations.md §3, step 6). Measured on the
#: ReLU ResNet-20 (1 000 calibration training images, three plans the search chose): the calibration samples that 4x
#: the plan's error flips were 37 / 14 / 10 where the 1 017 exact test images had 14 / 4 / 6 flips (2x: 15 / 5 / 1,
#: too few for the third; 3x: 25 / 8 / 7, no margin). Not the default (compile's agreement_safety is 1: plain
#: agreement): it costs that model ~1.8x the run time and ~3x the compile time
SAFETY = 4.0
#: the agreement_holdout fraction suggested for calibration sets of ~1 000 samples: 200 held out leave 800 to select
#: on, which keep the 1 000-sample rule's allowance at 99.5 % (one disagreement)
HOLDOUT = 0.2
#: the seed of holdout_split's start offset (the split is a function of the margins and this seed only)
HOLDOUT_SEED = 0
#: the safety factors a failed held-out check steps through, once no disagreement is left to take off the count
HOLDOUT_SAFETIES = (1.0, 2.0, SAFETY)
RANGED_KINDS = ("relu", "silu", "gelu", "sigmoid", "tanh")
LINEAR_COST_OPS = ("linear", "conv2d", "avgpool2d", "affine", "mul", "matmul", "batchnorm")


class CalibrationWarning(UserWarning):
    """The calibration set is too small to certify the agreement target."""


class AgreementWarning(UserWarning):
    """The default agreement target is not reachable within the available depth."""


def per_node_option(opt, node, default=None):
    """A compile option given globally or as a dict by node name, source module name or activation kind."""
    if isinstance(opt, dict):
        for key in (node.name, node.source.split(":")[0], node.attrs.get("kind")):
            if key in opt:
                return opt[key]
        return default
    return default if opt is None else opt


def is_ranged(kind: str) -> bool:
    """The activation is approximated on a calibrated range (not x^2 or a user polynomial)."""
    return kind in RANGED_KINDS or clip_bounds(kind) is not None


def needs_ranges(g) -> list:
    """Activation nodes approximated on a calibrated range (everything except x^2 and user polynomials)."""
    return [n for n in g.nodes if n.op == "act" and is_ranged(n.attrs["kind"])]


def as_calibration(data, input_shape, what: str = "calibration") -> np.ndarray:
    """The calibration set as float64 (n, *input_shape), or CalibrationError naming the fix."""
    try:
        import torch

        if isinstance(data, torch.Tensor):
            data = data.detach().cpu().numpy()
    except ImportError:
        pass
    x = np.asarray(data)
    if x.dtype == object or not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)
                                 or x.dtype == bool):
        raise CalibrationError(f"{what} data must be a numeric array (n, {', '.join(map(str, input_shape))}), "
                               f"got dtype {x.dtype}")
    shape = tuple(int(s) for s in input_shape)
    if x.ndim == len(shape) and tuple(x.shape) == shape:
        raise CalibrationError(f"{what} data of shape {x.shape} is a single sample without its batch dimension: "
                               f"pass a batch (n, {', '.join(map(str, shape))}), at least {MIN_CERTIFY} "
                               "representative inputs")
    if x.ndim != len(shape) + 1 or tuple(x.shape[1:]) != shape:
        raise CalibrationError(f"{what} data has shape {tuple(x.shape)} but the model takes inputs of shape "
                               f"(n, {', '.join(map(str, shape))}): pass samples preprocessed exactly like the "
                               "inputs you will encrypt")
    if x.shape[0] < 1:
        raise CalibrationError(f"{what} data is empty: pass at least {MIN_CERTIFY} representative inputs")
    x = x.astype(np.float64)
    bad = ~np.isfinite(x)
    if bad.any():
        rows = np.unique(np.nonzero(bad.reshape(len(x), -1))[0])
        raise CalibrationError(f"{what} data contains NaN or infinity in {len(rows)} of {len(x)} samples (first: "
                               f"sample {int(rows[0])}); drop or repair those samples")
    return x


def _degenerate(x: np.ndarray) -> bool:
    flat = x.reshape(len(x), -1)
    if len(x) > 1:
        return bool(np.all(np.ptp(flat, axis=0) == 0))
    return bool(np.ptp(flat) == 0)


def agreement_bound(agree: int, n: int, confidence: float = CONFIDENCE) -> float:
    """One-sided Clopper-Pearson lower bound on the agreement rate after `agree` agreements in `n` samples.

    The binomial tail P(X >= agree | p) is summed in log space with numpy (exact up to float rounding for any n;
    mpmath's incomplete beta failed to converge at n ~ 8 000)."""
    agree, n = int(agree), int(n)
    if agree <= 0:
        return 0.0
    k = np.arange(agree, n + 1, dtype=np.float64)
    log_comb = math.lgamma(n + 1) - np.array([math.lgamma(x + 1) + math.lgamma(n - x + 1) for x in k])

    def tail(p: float) -> float:                   # P(X >= agree | p), X ~ Binomial(n, p)
        t = log_comb + k * math.log(p) + (n - k) * math.log1p(-p)
        m = float(t.max())
        return math.exp(m) * float(np.exp(t - m).sum())

    lo, hi = 0.0, 1.0
    for _ in range(50):                            # bisection on P(X >= agree | p) = 1 - confidence
        mid = (lo + hi) / 2
        if tail(mid) > 1 - confidence:
            hi = mid
        else:
            lo = mid
    return lo


def top1(logits: np.ndarray) -> np.ndarray:
    """Predicted class per sample (one output: its sign)."""
    y = np.asarray(logits).reshape(len(logits), -1)
    return (y[:, 0] > 0).astype(np.int64) if y.shape[1] == 1 else y.argmax(1)


def agreement_safety(opts: dict) -> float:
    """compile's agreement_safety (>= 1; 1: plain top-1 agreement)."""
    v = opts.get("agreement_safety", 1.0)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 1:
        raise CalibrationError(f"agreement_safety={v!r} must be a number >= 1 (1: plain top-1 agreement; "
                               f"{SAFETY:g}: what holds the ReLU ResNet-20's target on held-out images)")
    return float(v)


def agreement_holdout(opts: dict) -> float:
    """compile's agreement_holdout: the fraction of the calibration set held out of the search (0: none)."""
    v = opts.get("agreement_holdout", 0.0)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 0.5:
        raise CalibrationError(f"agreement_holdout={v!r} must be a number in [0, 0.5] (0: the search selects on every "
                               f"calibration sample; {HOLDOUT:g}: {HOLDOUT:.0%} of them check the chosen plan)")
    return float(v)


def allowed_disagreements(n: int, target: float, certify: bool) -> int:
    """The most disagreements in n samples that still meet `target`: with `certify`, the 90 % Clopper-Pearson lower
    bound must reach it, else the point estimate; -1 when none does."""
    def meets(k):
        return agreement_bound(n - k, n) >= target if certify else (n - k) / n >= target

    k = -1
    while k < n and meets(k + 1):                  # meets is monotone in k
        k += 1
    return k


def holdout_split(margin: np.ndarray, fraction: float, seed: int = HOLDOUT_SEED) -> tuple[np.ndarray, np.ndarray]:
    """(search indices, held-out indices), sorted and disjoint, of samples with these margins: every 1/fraction-th
    sample in margin order from a seeded offset, so both parts have as many samples near a decision boundary (where
    the flips are) as chance allows a systematic sample."""
    n = len(margin)
    k = int(round(fraction * n))
    if k <= 0:
        return np.arange(n), np.zeros(0, dtype=np.intp)
    order = np.argsort(np.asarray(margin), kind="stable")
    u = np.random.default_rng(seed).random()
    held = np.sort(order[np.floor((np.arange(k) + u) * (n / k)).astype(np.intp)])
    mask = np.ones(n, dtype=bool)
    mask[held] = False
    return np.nonzero(mask)[0], held


def disagreements(out: np.ndarray, ref: np.ndarray, safety: float | None = None) -> np.ndarray:
    """Per sample, whether the plan's outputs `out` fail to agree with the model's `ref` with `safety` to spare: the
    top-1 of ref + safety * (out - ref) differs from ref's. safety=1 is plain top-1 disagreement; with safety s >= 1 a
    sample also counts when its top-1 is kept but s times the plan's error would change it (the error takes more
    than 1/s of the sample's margin), so a plain disagreement always counts (the top-1 of ref + e is that of a
    convex combination of ref and ref + s e). safety None: SAFETY."""
    safety = SAFETY if safety is None else float(safety)
    ref = np.asarray(ref, dtype=np.float64).reshape(len(ref), -1)
    out = np.asarray(out, dtype=np.float64).reshape(len(ref), -1)
    if safety == 1.0:           # the plain count, without the rounding of ref + (out - ref)
        return top1(out) != top1(ref)
    return top1(ref + safety * (out - ref)) != top1(ref)


def _critical_depth(g, choice: dict) -> int:
    """Levels on the longest input -> output path (linear layers 1, activations their polynomial depth)."""
    d = {}
    for n in g.nodes:
        base = max((d[i] for i in n.inputs), default=0)
        if n.op in LINEAR_COST_OPS and n.op != "batchnorm":
            base += 1
        elif n.op == "act":
            base += choice[n.name].depth
        d[n.name] = base
    return d[g.output.name]


#: calibration samples evaluated together: a trial that fails the target stops after the chunk that fails it
SEARCH_CHUNK = 125
#: calibration samples the per-activation "agreement alone" of the report is measured on
ALONE_SAMPLES = 250
#: the type the search evaluates candidate plans in: float32 rounding (2^-24) is below CKKS's own precision
#: (~2^-20 at the presets' scales), and torch's float32 convolutions are ~14x faster than its float64 ones on a CPU;
#: the reference outputs, ranges and the reported agreement_simulate stay float64
SEARCH_DTYPE = np.float32


class ReferenceSummary:
    """One exact float64 pass over a data set, in chunks, each value freed after its last use: the [min, max] of
    every activation's input and the graph's output (memory: a chunk's live values, not every node's values for
    every sample)."""

    def __init__(self, g, X, chunk: int = SEARCH_CHUNK):
        from hemlp.compiler.ir import eval_node, last_uses

        nodes = list(g.nodes)
        last = last_uses(nodes)
        acts = {n.inputs[0] for n in nodes if n.op == "act"}
        self.ranges: dict = {}
        outs = []
        for c0 in range(0, len(X), chunk):
            Xc = X[c0:c0 + chunk]
            vals = {}
            for i, n in enumerate(nodes):
                vals[n.name] = v = eval_node(n, [vals[j] for j in n.inputs], Xc, exact=True)
                if n.name in acts and v.size:
                    lo, hi = self.ranges.get(n.name, (np.inf, -np.inf))
                    self.ranges[n.name] = (min(lo, float(v.min())), max(hi, float(v.max())))
                for j in set(n.inputs):
                    if last[j] == i:
                        del vals[j]
            outs.append(vals[nodes[-1].name])
        self.output = np.concatenate(outs) if outs else np.zeros((0,) + tuple(g.output.shape))


def margins(logits: np.ndarray) -> np.ndarray:
    """Per sample, how far its top-1 is from changing: the gap between the two largest logits (one output: |y|)."""
    y = np.asarray(logits, dtype=np.float64).reshape(len(logits), -1)
    if y.shape[1] == 1:
        return np.abs(y[:, 0])
    top2 = np.partition(y, -2, axis=1)[:, -2:]
    return top2[:, 1] - top2[:, 0]


class _Search:
    def __init__(self, g, X, ref_out, cores, guard, methods, target, safety: float = 1.0,
                 certify: bool | None = None):
        # samples closest to a decision boundary first: a choice that fails the target fails there, in the first chunk
        m = margins(ref_out)
        order = np.argsort(m, kind="stable")
        self.g, self.ref_top = g, top1(ref_out)[order]
        self.ref_out = np.asarray(ref_out, dtype=np.float64).reshape(len(ref_out), -1)[order]
        self.margin = np.maximum(m[order], 1e-12)
        self.cores, self.guard, self.methods, self.safety = cores, guard, methods, float(safety)
        self._polys: dict = {}
        self._agree: dict = {}                     # choices evaluated on every sample: agreement with the safety factor
        self._plain: dict = {}                     # ... and their plain top-1 agreement
        self._ruled_out: dict = {}                 # choices stopped early: their agreement's upper bound
        self.trials = self.stopped_early = 0       # choices evaluated, and those ruled out before the last chunk
        self.target, self.n = target, len(X)
        # certify: the Clopper-Pearson bound (None: from MIN_CERTIFY samples; a search split of a certified set too)
        self.certify = self.n >= MIN_CERTIFY if certify is None else bool(certify)
        # the most disagreements the target tolerates; a failed held-out check lowers it (``tighten``)
        self.allowed = allowed_disagreements(self.n, target, self.certify)
        self.history: list = []                    # the descent's accepted states, most lowered last
        self.ladders: dict = {}

        self.act_eval = TableActivations(SEARCH_DTYPE)    # no reference back to the search: freed with it
        self.cache = ResumeCache(g, X[order], chunk=SEARCH_CHUNK, act_eval=self.act_eval, dtype=SEARCH_DTYPE)
        # the report's per-activation agreement alone: an evenly spaced subset in the caller's order
        sub = np.linspace(0, len(X) - 1, min(len(X), ALONE_SAMPLES)).astype(np.intp) if len(X) else np.zeros(0, int)
        self.alone_X, self.alone_top = X[sub], top1(ref_out)[sub]
        self.alone_cache = None                    # made when the search is done (its memory then the search's)

    def meets(self, agreement: float) -> bool:
        """The target holds: at most ``allowed`` disagreements (the Clopper-Pearson bound when certifying, else the
        point estimate, until a held-out check tightens it)."""
        return self.n - int(round(agreement * self.n)) <= self.allowed

    def tighten(self, failed: int) -> bool:
        """A stricter rule after a plan with `failed` disagreements (with the current safety factor) on the search
        samples failed the held-out check: one fewer allowed than it had, or, at none, the next factor of
        HOLDOUT_SAFETIES with the target's allowance. False when there is none left."""
        if min(self.allowed, failed) > 0:
            self.allowed = min(self.allowed, failed) - 1
            return True
        higher = [f for f in HOLDOUT_SAFETIES if f > self.safety]
        if not higher:
            return False
        self.safety = higher[0]
        self.allowed = allowed_disagreements(self.n, self.target, self.certify)
        # the counts measured with the old factor say nothing of the new one
        self._agree.clear(), self._plain.clear(), self._ruled_out.clear()
        return True

    def disagreements_of(self, degrees: dict) -> int:
        """Disagreements with the current safety factor of a choice evaluated on every sample."""
        return self.n - int(round(self.agreement(degrees) * self.n))

    def poly(self, n, degree) -> ActPoly:
        """The approximation of activation n at a rung of its ladder: a degree, or a composite's stage degrees."""
        key = (n.name, degree)
        if key not in self._polys:
            lo, hi = self.cores[n.name]
            if isinstance(degree, tuple):
                self._polys[key] = approximate_composite(n.attrs["kind"], lo, hi, degree, self.guard)
            else:
                fits = [approximate(n.attrs["kind"], lo, hi, degree, m, self.guard) for m in self.methods]
                self._polys[key] = min(fits, key=lambda a: a.max_err)
        return self._polys[key]

    def _disagreements(self, chunks, stop: int | None = None) -> tuple[int, int, int]:
        """(disagreements with the safety factor, samples seen, plain top-1 disagreements) over `chunks`; with `stop`, ends after
        the chunk whose disagreements with the safety factor exceed it."""
        dis = seen = plain = 0
        for k in chunks:
            sl = self.cache.chunks[k]
            out = self.cache.chunk_output(k)
            dis += int(np.count_nonzero(disagreements(out, self.ref_out[sl], self.safety)))
            plain += int(np.count_nonzero(top1(out) != self.ref_top[sl]))
            seen += sl.stop - sl.start
            if stop is not None and dis > stop:
                break
        return dis, seen, plain

    def alone(self, n, degree, ranged) -> float:
        """Agreement with only activation n approximated (the others exact), on ALONE_SAMPLES evenly spaced
        samples: its own cost in agreement."""
        if self.alone_cache is None:
            self.cache.clear()
            self.alone_cache = ResumeCache(self.g, self.alone_X, act_eval=self.act_eval, dtype=SEARCH_DTYPE)
        saved = {m.name: m.attrs.pop("approx") for m in ranged if "approx" in m.attrs}
        try:
            self.alone_cache.pin()                 # every other one exact: each evaluation resumes from its values
            n.attrs["approx"] = self.poly(n, degree)
            return float(np.mean(top1(self.alone_cache.output()) == self.alone_top)) if len(self.alone_top) else 1.0
        finally:
            for name, ap in saved.items():
                self.g.node(name).attrs["approx"] = ap

    def attach(self, degrees: dict) -> None:
        """Attach the approximations of a choice (node name -> rung) to the graph's activations."""
        for name, d in degrees.items():
            n = self.g.node(name)
            n.attrs["approx"] = self.poly(n, d)

    def harm(self, degrees: dict, base: np.ndarray) -> float:
        """How much a choice moves the outputs of the first chunk (the samples nearest a decision boundary) from
        `base` (that chunk's outputs under the current choice), relative to each sample's margin: the mean of
        max |delta logit| / margin. It ranks the lowerings of one round (cheap: one chunk, resumed at the
        activation)."""
        self.attach(degrees)
        y = self.cache.chunk_output(0).reshape(len(base), -1)
        sl = self.cache.chunks[0]
        return float(np.mean(np.max(np.abs(y - base), axis=1) / self.margin[sl]))

    def forget(self, rungs: dict) -> None:
        """Drop the lookup tables of these rungs (activation name -> rungs) of the activations, not evaluated soon (a
        later evaluation makes its table again)."""
        for name, rs in rungs.items():
            for r in rs:
                ap = self._polys.get((name, r))
                if ap is not None:
                    self.act_eval.forget(ap)

    def keep(self, degrees: dict) -> None:
        """The cache keeps this choice's values first: the next trials change it, or it may become that choice."""
        self.attach(degrees)
        self.cache.pin()

    def base_chunk(self, degrees: dict) -> np.ndarray:
        """The first chunk's outputs under a choice, the one the next trials change (only its values kept first)."""
        self.cache.unpin()
        self.keep(degrees)
        out = self.cache.chunk_output(0)
        return out.reshape(len(out), -1)

    def agreement(self, degrees: dict, early: bool = False) -> float:
        """Top-1 agreement with the safety factor (``disagreements``) on the calibration set with these degrees: what the target
        is held to. early=True: a choice that cannot meet the target stops at the chunk that rules it out, and the
        value returned is then an upper bound (below the target)."""
        key = tuple(sorted(degrees.items()))
        if key in self._agree:
            return self._agree[key]
        if early and key in self._ruled_out:
            return self._ruled_out[key]
        self.attach(degrees)
        dis, seen, plain = self._disagreements(range(len(self.cache.chunks)), self.allowed if early else None)
        if key not in self._ruled_out:
            self.trials += 1
        if seen < self.n:
            self.stopped_early += 1
            self._ruled_out[key] = 1.0 - dis / self.n
            return self._ruled_out[key]
        self._agree[key] = 1.0 - dis / self.n
        self._plain[key] = 1.0 - plain / self.n
        return self._agree[key]

    def plain_agreement(self, degrees: dict) -> float:
        """Plain top-1 agreement on the calibration set with these degrees (evaluated on every sample)."""
        key = tuple(sorted(degrees.items()))
        if key not in self._plain:
            self.agreement(degrees)
        return self._plain[key]


class _HeldOut:
    """The held-out part of the calibration set: the plain top-1 disagreements of a chosen plan on samples no
    selection saw, held to the target's rule for their number."""

    def __init__(self, g, X, ref_out, act_eval, target: float, fraction: float):
        # evaluated once per plan the search settles on: nothing kept to resume from (max_bytes 0)
        self.cache = ResumeCache(g, X, max_bytes=0, chunk=SEARCH_CHUNK, act_eval=act_eval, dtype=SEARCH_DTYPE)
        self.ref_top, self.n, self.fraction = top1(ref_out), len(X), fraction
        self.allowed = allowed_disagreements(self.n, target, self.n >= MIN_CERTIFY)
        self.looks: list = []                      # per plan checked: its disagreements here

    def check(self, s: _Search, degrees: dict) -> bool:
        s.attach(degrees)
        dis = int(np.count_nonzero(top1(self.cache.output()) != self.ref_top))
        depth = _critical_depth(s.g, {n.name: n.attrs["approx"] for n in s.g.nodes if n.op == "act"})
        self.looks.append(dict(disagreements=dis, search_disagreements=s.disagreements_of(degrees),
                               search_allowed=s.allowed, safety=s.safety, depth=depth))
        return dis <= self.allowed

    def report(self, passed: bool) -> dict:
        dis = self.looks[-1]["disagreements"]
        return dict(fraction=self.fraction, samples=self.n, seed=HOLDOUT_SEED, disagreements=dis,
                    agreement=1.0 - dis / self.n, allowed=self.allowed, passed=passed, looks=self.looks)


#: the depth cap compile passes when bootstraps are placed (no preset bounds the chain's depth then)
UNCAPPED_DEPTH = 10 ** 6


def choose_activations(g, X, opts: dict, max_depth: int, explicit_target: bool, explicit_calibration: bool,
                       reference: ReferenceSummary | None = None, max_step_depth: int | None = None) -> dict:
    """Attach an approximation (``attrs['approx']``) to every activation of `g`; returns the fit report.
    ``reference``: the exact pass over X when the caller has it; ``max_step_depth``: with bootstraps, the levels
    one bootstrap leaves (no single step may be deeper)."""
    for n in g.nodes:
        if n.op == "act" and n.attrs["kind"] in ("square", "poly"):
            n.attrs["approx"] = exact_poly(n.attrs["kind"], n.attrs.get("coeffs"))
    ranged = needs_ranges(g)
    if not ranged:
        return {}
    target = float(opts["target_agreement"])
    if not 0.0 < target <= 1.0:
        raise CalibrationError(f"target_agreement={target} must lie in (0, 1], e.g. 0.99")
    if _degenerate(X) and all(per_node_option(opts["activation_range"], n) is None for n in ranged):
        raise CalibrationError(
            f"the {'calibration' if explicit_calibration else 'example'} input is {len(X)} identical sample(s) "
            f"(e.g. zeros from a shape-only compile), but the activations {[n.name for n in ranged]} need ranges "
            f"calibrated on real inputs: pass calibration=X (CLI: --calibration FILE.npy) with >= {MIN_CERTIFY} "
            "representative samples, preprocessed like the inputs you will encrypt")
    n_samples = len(X)
    t_start = time.perf_counter()
    from_data = opts["activation_degree"] is None or any(per_node_option(opts["activation_range"], n) is None
                                                         for n in ranged)
    if n_samples < MIN_CERTIFY and from_data:
        warn_always(f"activation ranges and degrees calibrated on {n_samples} sample(s): at least {MIN_CERTIFY} "
                    f"are needed to certify {target:.0%} agreement; pass calibration=X with more representative "
                    "inputs", CalibrationWarning, stacklevel=4)
    if reference is None:
        reference = ReferenceSummary(g, X)
    margin, guard = float(opts["activation_margin"]), float(opts["activation_guard"])
    cores = {}
    for n in ranged:
        rng = per_node_option(opts["activation_range"], n)
        cores[n.name] = (tuple(map(float, rng)) if rng is not None else
                         calibrate_range(*reference.ranges[n.inputs[0]], margin))
    method = opts["activation_method"]
    methods = ("minimax", "chebyshev") if method == "auto" else (method,)
    fixed = opts["activation_degree"]
    holdout = agreement_holdout(opts)
    # a fixed choice is not selected on the samples: nothing to hold out; below MIN_CERTIFY too few to spare
    held = None
    if holdout > 0 and fixed is None and n_samples >= MIN_CERTIFY:
        search_rows, held_rows = holdout_split(margins(reference.output), holdout)
        s = _Search(g, X[search_rows], reference.output[search_rows], cores, guard, methods, target,
                    agreement_safety(opts), certify=True)
        held = _HeldOut(g, X[held_rows], reference.output[held_rows], s.act_eval, target, holdout)
    else:
        s = _Search(g, X, reference.output, cores, guard, methods, target, agreement_safety(opts))
    report = dict(target=target, samples=n_samples, search_samples=s.n, searched=fixed is None, max_depth=max_depth)
    if fixed is not None:
        degrees = {n.name: as_rung(per_node_option(fixed, n, 7)) for n in ranged}
        agree = s.agreement(degrees)
        if not s.meets(agree) and (explicit_target or explicit_calibration):
            bound = (f", 90 % lower bound {agreement_bound(int(round(agree * n_samples)), n_samples):.2%}"
                     if n_samples >= MIN_CERTIFY else "")
            warn_always(f"with the given activation_degree the plan agrees with the model on "
                        f"{s.plain_agreement(degrees):.2%} of {n_samples} calibration samples ({agree:.2%} with "
                        f"{s.safety:g}x its error to spare{bound}), below the target {target:.2%}; drop "
                        "activation_degree to let hemlp choose", AgreementWarning, stacklevel=4)
    else:
        degrees, agree = _search(s, ranged, target, max_depth, explicit_target, n_samples, max_step_depth)
        if held is not None:
            degrees, agree, report["held_out"] = _check_held_out(s, held, ranged, degrees, agree, target, max_depth,
                                                                 explicit_target, n_samples, max_step_depth)
    plain = s.plain_agreement(degrees)
    for n in ranged:
        n.attrs["approx"] = s.poly(n, degrees[n.name])
    for n in ranged:
        n.attrs["approx"].agreement = s.alone(n, degrees[n.name], ranged)
    report.update(alone_samples=len(s.alone_top), trials=s.trials, trials_stopped_early=s.stopped_early,
                  search_seconds=time.perf_counter() - t_start,
                  agreement=plain, safety=s.safety, agreement_safety=agree,
                  confidence=CONFIDENCE if s.certify else None,
                  agreement_bound=agreement_bound(int(round(agree * s.n)), s.n) if s.certify else None,
                  depth=_critical_depth(g, {n.name: n.attrs["approx"] for n in g.nodes if n.op == "act"}),
                  activations=[dict(node=n.name, kind=n.attrs["kind"], method=n.attrs["approx"].method,
                                    degree=n.attrs["approx"].degree, schedule=n.attrs["approx"].schedule,
                                    depth=n.attrs["approx"].depth,
                                    range=list(cores[n.name]), domain=list(n.attrs["approx"].domain),
                                    max_err=n.attrs["approx"].max_err, agreement_alone=n.attrs["approx"].agreement)
                               for n in ranged])
    return report


def _check_held_out(s: _Search, held: _HeldOut, ranged, degrees: dict, agree: float, target: float, max_depth: int,
                    explicit_target: bool, n_samples: int, max_step_depth: int | None):
    """Check the search's choice on the held-out samples; while it fails, tighten the search's rule and descend
    again from the last accepted state that meets it (none: the whole search again). Returns (degrees, agreement
    with the safety factor on the search samples, the report's held_out)."""
    passed = held.check(s, degrees)
    while not passed and s.meets(agree):           # a choice that missed the target on the search samples has warned
        if not s.tighten(s.disagreements_of(degrees)):
            break
        start = None
        for i in reversed(range(len(s.history))):  # most lowered first: the cheapest restart that holds
            a = s.agreement(s.history[i], early=True)
            if s.meets(a):
                start = (s.history[i], a)
                del s.history[i:]                  # _descend records it again, then what it lowers
                break
        if start is None:                          # not even the uniform rung the descent started from: all again
            with warnings.catch_warnings():        # a stricter rule nothing meets keeps the last choice (below)
                warnings.simplefilter("ignore", AgreementWarning)
                found = _search(s, ranged, target, max_depth, False, n_samples, max_step_depth)
            if not s.meets(found[1]):
                break
            degrees, agree = found
        else:
            degrees, agree = _descend(s, ranged, s.ladders, *start)
        passed = held.check(s, degrees)
    if not passed:
        look = held.looks[-1]
        warn_always(f"the chosen activations disagree with the model on {look['disagreements']} of the {held.n} "
                    f"held-out calibration samples (at most {held.allowed} meet {target:.2%}), after "
                    f"{len(held.looks) - 1} tightening(s) of the search: its agreement on new inputs is likely below "
                    "the target; raise target_agreement or agreement_safety, or calibrate on more samples",
                    AgreementWarning, stacklevel=5)
    # with the factor the last tightening left (a choice kept from before it was measured with a smaller one)
    return degrees, s.agreement(degrees), held.report(passed)


def _search(s: _Search, ranged, target: float, max_depth: int, explicit_target: bool, n_samples: int,
            max_step_depth: int | None = None):
    g = s.g
    exact = {n.name: n.attrs["approx"] for n in g.nodes if n.op == "act" and "approx" in n.attrs}

    def depth(degrees):
        return _critical_depth(g, dict(exact, **{k: s.poly(g.node(k), d) for k, d in degrees.items()}))

    first = 0 if n_samples >= MIN_SEARCH else 1
    start = DEGREES[first:]
    ladders = s.ladders = {n.name: ladder(n, max_step_depth) for n in ranged}
    s.history = []
    tried = []
    found = None
    for r in range(first, max(map(len, ladders.values()))):      # uniform rungs (each ladder capped at its top)
        degrees = {k: lad[min(r, len(lad) - 1)] for k, lad in ladders.items()}
        if depth(degrees) > max_depth:
            break
        tried.append(degrees)
        a = s.agreement(degrees, early=True)
        if s.meets(a):
            found = (degrees, a)
            break
        # the tables of the rung before this failed one: the descent from a higher rung reads this one first (made
        # again if it reads further down)
        if len(tried) > 1:
            s.forget({k: [d] for k, d in tried[-2].items() if degrees[k] != d})
    best = None
    if found is None:         # the best reachable rung: the trials above stopped where they failed, measure them all
        for degrees in tried:
            a = s.agreement(degrees)
            s.forget({k: [d] for k, d in degrees.items()})
            if best is None or a > best[1]:
                best = (degrees, a)
    # without bootstraps the depth is capped by the deepest preset; bootstrap=True lifts the cap (the planner refreshes
    # the levels between layers), which is the fix for a deep network
    boot_fix = "" if max_depth >= UNCAPPED_DEPTH else (
        "; or compile with bootstrap=True, which places bootstraps between layers (preset N16-boot) so the depth is "
        "no longer limited")
    if found is None:
        if best is None:
            degrees = {n.name: start[0] for n in ranged}
            raise TargetUnreachableError(
                f"even degree-{start[0]} activations need {depth(degrees)} levels, more than the {max_depth} the "
                "deepest available preset has: use x^2 or hemlp.compiler.Polynomial activations, fewer layers, or "
                "a deeper preset" + boot_fix)
        k = max(best[0].values(), key=lambda v: v if isinstance(v, int) else int(np.prod(v)))
        msg = (f"no activation degree within {max_depth} levels reaches {target:.2%} agreement with the model on "
               f"{n_samples} calibration samples" + (" (90 % lower bound)" if n_samples >= MIN_CERTIFY else "")
               + ("" if s.safety == 1 else f" with {s.safety:g}x the plan's error to spare")
               + f": the best is {best[1]:.2%} (degree {k}, depth "
               f"{depth(best[0])}; plain top-1 agreement {s.plain_agreement(best[0]):.2%}). "
               "Lower target_agreement, retrain with polynomial activations (x^2, hemlp.compiler.Polynomial) or "
               "BatchNorm before the activations (narrower ranges), or use a deeper preset" + boot_fix)
        if explicit_target:
            raise TargetUnreachableError(msg)
        warn_always(msg, AgreementWarning, stacklevel=5)
        return best
    degrees, agree = found
    return _descend(s, ranged, ladders, degrees, agree)


def _descend(s: _Search, ranged, ladders: dict, degrees: dict, agree: float):
    """Lower activations a notch at a time while the target holds. Each round ranks the possible lowerings by their
    harm (``_Search.harm``: one chunk each, resumed at the activation), then finds by bisection the
    longest prefix of that ranking whose lowerings together still meet the target (each test a full agreement
    evaluation that stops at the first chunk ruling it out); when not even the least harmful one holds with the
    others, each remaining one is tried alone. The result always meets the target: every accepted choice was
    evaluated on every calibration sample."""
    def lowered(base, names):
        out = dict(base)
        for name in names:
            lad = ladders[name]
            out[name] = lad[lad.index(base[name]) - 1]
        return out

    s.history.append(dict(degrees))
    while True:
        cand = [n.name for n in ranged if ladders[n.name].index(degrees[n.name]) > 0]
        if not cand:
            return degrees, agree
        # the descent only lowers: the tables of the rungs above an activation's current one are not read again, and
        # a round reads one rung below it; the rungs further down (the uniform rungs that failed) get their tables
        # again when the descent reaches them (the same values: a table is a function of its polynomial), so a deep
        # network does not hold ~40 activations x the rungs tried (up to 32 MB each)
        s.forget({name: lad[:max(0, lad.index(degrees[name]) - 1)] + lad[lad.index(degrees[name]) + 1:]
                  for name, lad in ladders.items()})
        base = s.base_chunk(degrees)
        order = sorted(cand, key=lambda name: (s.harm(lowered(degrees, [name]), base), name))

        def holds(k):
            trial = lowered(degrees, order[:k])
            a = s.agreement(trial, early=True)
            if not s.meets(a):
                return None
            s.keep(trial)                          # the next base, unless a longer prefix holds too
            return a

        best_k, best_a = 0, None
        a = holds(len(order))
        if a is not None:
            best_k, best_a = len(order), a
        else:
            lo, hi = 0, len(order)                 # prefix lo holds (0: trivially), prefix hi does not
            while hi - lo > 1:
                mid = (lo + hi) // 2
                a = holds(mid)
                if a is not None:
                    lo, best_a = mid, a
                else:
                    hi = mid
            best_k = lo
        if best_k > 0:
            degrees, agree = lowered(degrees, order[:best_k]), best_a
            s.history.append(dict(degrees))
            continue
        for name in order[1:]:                     # the least harmful one failed: any other alone
            trial = lowered(degrees, [name])
            a = s.agreement(trial, early=True)
            if s.meets(a):
                degrees, agree = trial, a
                s.history.append(dict(degrees))
                break
        else:
            return degrees, agree
