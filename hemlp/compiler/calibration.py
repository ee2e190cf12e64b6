"""Calibration data -> activation ranges and approximations chosen for an agreement target.

``choose_activations`` (called by hemlp.compile) implements docs/design/activations.md §3:
1. run the exact float64 model on the calibration set and record every activation's input;
2. range per activation: [min, max] plus a small core margin, and a guard band (``activation_guard`` x the
   width on each side) fitted at low weight, so inputs slightly beyond the calibrated range stay sane;
3. candidates per activation: degrees 2^k - 1 (depth-optimal with hemlp's BSGS evaluation), each fitted
   by weighted minimax and by Chebyshev interpolation, the smaller core error kept;
4. the smallest uniform degree whose plan (simulated in float64) agrees with the exact model's top-1 on the
   calibration samples with a one-sided 90 % Clopper-Pearson lower bound >= ``target_agreement`` (with 1 000
   samples: at most 5 disagreements for 99 %; below MIN_CERTIFY samples, the point estimate), then a greedy
   descent: each round tries every activation one notch lower, keeps the best (critical-path depth first, then
   agreement) and then each other one that still holds together with those kept;
5. nothing fits the available depth: TargetUnreachableError when the target was asked for, else the best
   reachable choice with an AgreementWarning.

The composite sign-based ReLU (Lee et al.) is not a candidate: at the depths a leveled plan has (<= 10
levels per activation) a single minimax polynomial is 6-14x more accurate at equal depth
(docs/design/activations.md §1.4); it pays off only beyond degree ~1000.

``check_inputs`` is the client-side guard: it runs the plan in plaintext on the inputs and reports, per
activation, the inputs outside the calibrated core and beyond the polynomial's domain (garbage).
"""
from __future__ import annotations

import math

import numpy as np

from hemlp.compiler.activations import ActPoly, approximate, calibrate, exact_poly
from hemlp.compiler.ir import clip_bounds
from hemlp.errors import CalibrationError, TargetUnreachableError, warn_always

__all__ = ["DEGREES", "MIN_CERTIFY", "AgreementWarning", "CalibrationWarning", "as_calibration",
           "choose_activations", "is_ranged", "needs_ranges", "per_node_option", "top1", "RANGED_KINDS"]

DEGREES = (3, 7, 15, 31, 63, 127)
#: calibration samples needed to certify 99 % agreement (the 90 % Clopper-Pearson bound of CONFIDENCE)
MIN_CERTIFY = 1000
#: below this many samples the search starts at degree 7 and uses the point estimate (a handful of samples
#: agree at any degree, and no bound reaches 99 %)
MIN_SEARCH = 200
#: one-sided confidence of the Clopper-Pearson bound the search requires to reach the target
CONFIDENCE = 0.9
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


#: bytes of calibration-set values the search keeps at cut nodes (CutCache)
CUT_CACHE_BYTES = 1 << 30


class CutCache:
    """Graph outputs under a choice of activation approximations, re-evaluated from the last cut node whose value
    is cached for the same choice upstream.

    A node is a cut when no edge jumps over it in topological order: everything after it depends on the input only
    through its value, and its value depends only on the approximations at or before it. The degree search changes
    one activation at a time, so most evaluations restart at the cut just before that activation (in a ResNet, the
    previous block's output) instead of at the input. Values are kept, least recently used first out, within
    ``max_bytes``."""

    def __init__(self, g, X, max_bytes: int = CUT_CACHE_BYTES):
        from collections import OrderedDict

        from hemlp.compiler.ir import eval_node

        self.g, self.X, self.max_bytes, self.eval_node = g, X, max_bytes, eval_node
        self.nodes = list(g.nodes)
        pos = {n.name: i for i, n in enumerate(self.nodes)}
        reach = -1                                 # the furthest position an earlier node's value is used at
        self.cut = []
        for i, n in enumerate(self.nodes):
            for j in n.inputs:
                reach = max(reach, i) if pos[j] < i else reach
            self.cut.append(reach <= i)
            for u in g.users(n.name):
                reach = max(reach, pos[u.name])
        self.cut[-1] = False
        self.values: OrderedDict = OrderedDict()
        self.bytes = 0

    def _keys(self):
        """The cache key of every position: the approximations chosen at or before it."""
        keys, acc = [], []
        for n in self.nodes:
            if n.op == "act":
                ap = n.attrs.get("approx")
                acc.append((n.name, None if ap is None else id(ap)))
            keys.append(tuple(acc))
        return keys

    def output(self) -> np.ndarray:
        """The graph output with the approximations currently attached (attrs['approx']; none: exact)."""
        keys = self._keys()
        start, vals = 0, {}
        for i in range(len(self.nodes) - 1, -1, -1):
            if self.cut[i] and (i, keys[i]) in self.values:
                self.values.move_to_end((i, keys[i]))
                vals[self.nodes[i].name] = self.values[(i, keys[i])]
                start = i + 1
                break
        for i in range(start, len(self.nodes)):
            n = self.nodes[i]
            vals[n.name] = self.eval_node(n, [vals[j] for j in n.inputs], self.X, exact=False)
            if self.cut[i]:
                self._keep((i, keys[i]), vals[n.name])
                for j in list(vals):          # nothing before a cut is read after it
                    if j != n.name:
                        del vals[j]
        return vals[self.nodes[-1].name]

    def _keep(self, key, v) -> None:
        if key in self.values or v.nbytes > self.max_bytes:
            return
        self.values[key] = v
        self.bytes += v.nbytes
        while self.bytes > self.max_bytes:
            _, old = self.values.popitem(last=False)
            self.bytes -= old.nbytes


class _Search:
    def __init__(self, g, X, ref_top, cores, guard, methods, target):
        self.g, self.X, self.ref_top = g, X, ref_top
        self.cores, self.guard, self.methods = cores, guard, methods
        self._polys: dict = {}
        self._agree: dict = {}
        self.target, self.n = target, len(X)
        self.cache = CutCache(g, X)

    def meets(self, agreement: float) -> bool:
        """The target holds: the point estimate below MIN_CERTIFY samples, else the Clopper-Pearson bound."""
        if self.n < MIN_CERTIFY:
            return agreement >= self.target
        return agreement_bound(int(round(agreement * self.n)), self.n) >= self.target

    def poly(self, n, degree: int) -> ActPoly:
        key = (n.name, degree)
        if key not in self._polys:
            lo, hi = self.cores[n.name]
            fits = [approximate(n.attrs["kind"], lo, hi, degree, m, self.guard) for m in self.methods]
            self._polys[key] = min(fits, key=lambda a: a.max_err)
        return self._polys[key]

    def alone(self, n, degree: int, ranged) -> float:
        """Agreement with only activation n approximated (the others exact): its own cost in agreement."""
        saved = {m.name: m.attrs.pop("approx") for m in ranged if m.name != n.name and "approx" in m.attrs}
        try:
            n.attrs["approx"] = self.poly(n, degree)
            return float(np.mean(top1(self.cache.output()) == self.ref_top))
        finally:
            for name, ap in saved.items():
                self.g.node(name).attrs["approx"] = ap

    def agreement(self, degrees: dict) -> float:
        key = tuple(sorted(degrees.items()))
        if key not in self._agree:
            for name, d in degrees.items():
                n = self.g.node(name)
                n.attrs["approx"] = self.poly(n, d)
            self._agree[key] = float(np.mean(top1(self.cache.output()) == self.ref_top))
        return self._agree[key]


#: the depth cap compile passes when bootstraps are placed (no preset bounds the chain's depth then)
UNCAPPED_DEPTH = 10 ** 6


def choose_activations(g, X, opts: dict, max_depth: int, explicit_target: bool, explicit_calibration: bool) -> dict:
    """Attach an approximation (``attrs['approx']``) to every activation of `g`; returns the fit report."""
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
    from_data = opts["activation_degree"] is None or any(per_node_option(opts["activation_range"], n) is None
                                                         for n in ranged)
    if n_samples < MIN_CERTIFY and from_data:
        warn_always(f"activation ranges and degrees calibrated on {n_samples} sample(s): at least {MIN_CERTIFY} "
                    f"are needed to certify {target:.0%} agreement; pass calibration=X with more representative "
                    "inputs", CalibrationWarning, stacklevel=4)
    ref = g.reference(X)
    ref_top = top1(ref[g.output.name])
    margin, guard = float(opts["activation_margin"]), float(opts["activation_guard"])
    cores = {}
    for n in ranged:
        rng = per_node_option(opts["activation_range"], n)
        cores[n.name] = tuple(map(float, rng)) if rng is not None else calibrate(ref[n.inputs[0]], margin)
    method = opts["activation_method"]
    methods = ("minimax", "chebyshev") if method == "auto" else (method,)
    s = _Search(g, X, ref_top, cores, guard, methods, target)
    fixed = opts["activation_degree"]
    report = dict(target=target, samples=n_samples, searched=fixed is None, max_depth=max_depth)
    if fixed is not None:
        degrees = {n.name: int(per_node_option(fixed, n, 7)) for n in ranged}
        agree = s.agreement(degrees)
        if not s.meets(agree) and (explicit_target or explicit_calibration):
            bound = (f" (90 % lower bound {agreement_bound(int(round(agree * n_samples)), n_samples):.2%})"
                     if n_samples >= MIN_CERTIFY else "")
            warn_always(f"with the given activation_degree the plan agrees with the model on {agree:.2%} of "
                        f"{n_samples} calibration samples{bound}, below the target {target:.2%}; drop "
                        "activation_degree to let hemlp choose", AgreementWarning, stacklevel=4)
    else:
        degrees, agree = _search(s, ranged, target, max_depth, explicit_target, n_samples)
    for n in ranged:
        n.attrs["approx"] = s.poly(n, degrees[n.name])
    for n in ranged:
        n.attrs["approx"].agreement = s.alone(n, degrees[n.name], ranged)
    report.update(agreement=agree, confidence=CONFIDENCE if n_samples >= MIN_CERTIFY else None,
                  agreement_bound=agreement_bound(int(round(agree * n_samples)), n_samples)
                  if n_samples >= MIN_CERTIFY else None, depth=_critical_depth(g, {n.name: n.attrs["approx"] for n in g.nodes
                                                            if n.op == "act"}),
                  activations=[dict(node=n.name, kind=n.attrs["kind"], method=n.attrs["approx"].method,
                                    degree=n.attrs["approx"].degree, depth=n.attrs["approx"].depth,
                                    range=list(cores[n.name]), domain=list(n.attrs["approx"].domain),
                                    max_err=n.attrs["approx"].max_err, agreement_alone=n.attrs["approx"].agreement)
                               for n in ranged])
    return report


def _search(s: _Search, ranged, target: float, max_depth: int, explicit_target: bool, n_samples: int):
    g = s.g
    exact = {n.name: n.attrs["approx"] for n in g.nodes if n.op == "act" and "approx" in n.attrs}

    def depth(degrees):
        return _critical_depth(g, dict(exact, **{k: s.poly(g.node(k), d) for k, d in degrees.items()}))

    start = DEGREES if n_samples >= MIN_SEARCH else DEGREES[1:]
    best = None
    found = None
    for k in start:
        degrees = {n.name: k for n in ranged}
        if depth(degrees) > max_depth:
            break
        a = s.agreement(degrees)
        if best is None or a > best[1]:
            best = (degrees, a)
        if s.meets(a):
            found = (degrees, a)
            break
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
        k = max(best[0].values())
        msg = (f"no activation degree within {max_depth} levels reaches {target:.2%} agreement with the model on "
               f"{n_samples} calibration samples" + (" (90 % lower bound)" if n_samples >= MIN_CERTIFY else "")
               + f": the best is {best[1]:.2%} (degree {k}, depth {depth(best[0])}). "
               "Lower target_agreement, retrain with polynomial activations (x^2, hemlp.compiler.Polynomial) or "
               "BatchNorm before the activations (narrower ranges), or use a deeper preset" + boot_fix)
        if explicit_target:
            raise TargetUnreachableError(msg)
        warn_always(msg, AgreementWarning, stacklevel=5)
        return best
    degrees, agree = found
    # greedy descent: lower one activation a notch while the target holds (depth first, then agreement)
    while True:
        options = []
        d0 = depth(degrees)
        for n in ranged:
            i = DEGREES.index(degrees[n.name])
            if i == 0:
                continue
            trial = dict(degrees, **{n.name: DEGREES[i - 1]})
            a = s.agreement(trial)
            if s.meets(a):
                options.append((depth(trial) - d0, -a, n.name, trial, a))
        if not options:
            return degrees, agree
        options.sort(key=lambda o: (o[0], o[1], o[2]))
        degrees, agree = options[0][3], options[0][4]
        # the other lowerings that held alone, in the same order, each kept if the target still holds with all the
        # kept ones: one round lowers many activations (O(A) evaluations per notch instead of O(A^2))
        for _, _, name, _, _ in options[1:]:
            trial = dict(degrees, **{name: DEGREES[DEGREES.index(degrees[name]) - 1]})
            a = s.agreement(trial)
            if s.meets(a):
                degrees, agree = trial, a
