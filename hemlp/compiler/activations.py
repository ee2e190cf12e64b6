"""Polynomial activations: exact (square, user polynomials) and approximations of ReLU, SiLU, GELU,
Sigmoid and Tanh on a range calibrated from the example input (plus a margin).

An activation becomes an ``ActPoly``: u = alpha * x + beta maps the range [lo, hi] onto [-1, 1];
the polynomial is evaluated on u (Chebyshev basis for approximations, power basis for user
polynomials). alpha/beta are folded into the producing PCMM by the lowering (0 levels), so a
degree-d activation costs ceil(log2(d + 1)) levels; a degree-2 polynomial is rewritten as
sign * u^2 + const (completing the square) and costs 1 level, like x^2.

Methods (hemlp.compiler.fit): "minimax" (weighted minimax, the default), "chebyshev" (interpolation at
Chebyshev nodes), "lsq" (least squares on a dense grid). With a guard band the polynomial's domain
[dom_lo, dom_hi] extends beyond the calibrated core [lo, hi], fitted at low weight: u maps the domain
onto [-1, 1], and inputs are garbage only beyond the domain. hemlp.compiler.calibration chooses the
degree of every activation for an agreement target.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hemlp import _core
from hemlp.compiler.composite_sign import composite_sign
from hemlp.compiler.fit import METHODS, fit
from hemlp.errors import ParameterError
from hemlp.he.polynomial import depth as poly_depth

__all__ = ["ActPoly", "RangeWarning", "approximate", "calibrate", "calibrate_range", "exact_poly", "METHODS",
           "DEFAULT_DEGREE",
           "COMPOSITE_KINDS", "approximate_composite", "composite_unit"]

DEFAULT_DEGREE = 7
DEFAULT_MARGIN = 0.05


class RangeWarning(UserWarning):
    """Simulation saw activation inputs outside the calibrated approximation range."""


@dataclass
class ActPoly:
    """p(u), u = alpha * x + beta; form: 'square' (sign * u^2 + const), 'cheb' or 'power' (coeffs on u)."""

    kind: str                 # the activation it implements: relu, gelu, square, poly, ...
    form: str                 # square | cheb | power | affine
    alpha: float
    beta: float
    coeffs: np.ndarray        # cheb/power: coefficients on u; square: [const, sign]; affine: []
    lo: float | None = None   # approximation range in x (None: exact polynomial, no range)
    hi: float | None = None
    degree: int = 0
    method: str = "exact"
    max_err: float = 0.0      # max |p - f| on [lo, hi]
    dom_lo: float | None = None   # the polynomial's domain (core + guard band); None: [lo, hi]
    dom_hi: float | None = None
    max_err_domain: float | None = None   # max |p - f| on the whole domain
    agreement: float | None = None        # top-1 agreement on the calibration set with only this one approximated
    stages: list | None = None            # composite: each stage's Chebyshev coefficients on [-1, 1]; p = u * h(u)

    @property
    def schedule(self) -> tuple | None:
        """A composite's stage degrees (None for a single polynomial)."""
        return None if self.stages is None else tuple(len(c) - 1 for c in self.stages)

    @property
    def domain(self) -> tuple[float, float] | None:
        """Where the polynomial is valid (beyond it: garbage); None for exact polynomials."""
        if self.lo is None:
            return None
        return (self.lo if self.dom_lo is None else self.dom_lo, self.hi if self.dom_hi is None else self.dom_hi)

    @property
    def depth(self) -> int:
        if self.form == "square":
            return 1
        if self.form == "affine":
            return 0
        if self.form == "composite":      # the stages, then the product with u
            return sum(poly_depth(len(c) - 1) for c in self.stages) + 1
        return poly_depth(len(self.coeffs) - 1)

    def eval_u(self, u):
        if self.form == "square":
            return self.coeffs[1] * u * u + self.coeffs[0]
        if self.form == "affine":
            return u
        if self.form == "cheb":
            return chebval_clenshaw(u, self.coeffs)
        if self.form == "composite":
            u = np.asarray(u, dtype=np.float64)
            v = u
            for c in self.stages:
                v = chebval_clenshaw(v, c)
            return u * v
        return np.polynomial.polynomial.polyval(u, self.coeffs)

    def apply(self, x):
        return self.eval_u(self.alpha * np.asarray(x, dtype=np.float64) + self.beta)

    def expr(self, arg: str) -> str:
        if self.form == "square" and self.kind == "square" and self.alpha == 1 and self.beta == 0:
            return f"square({arg})"
        if self.lo is not None:
            guard = "" if self.dom_lo is None else f", guard=[{self.dom_lo:.4g}, {self.dom_hi:.4g}]"
            agree = "" if self.agreement is None else f", agreement alone={self.agreement:.2%}"
            name = (f"{self.kind}_composite{self.schedule}" if self.form == "composite" else
                    f"{self.kind}_{self.method}{self.degree}")
            return (f"{name}({arg}, range=[{self.lo:.4g}, {self.hi:.4g}]{guard}, "
                    f"max_err={self.max_err:.2g}{agree})")
        if self.form == "square":
            return f"{self.kind}_as_square({arg})"
        return f"{self.kind}({arg}, {np.round(self.coeffs, 6).tolist()})"

    def to_json(self) -> dict:
        return dict(kind=self.kind, form=self.form, alpha=self.alpha, beta=self.beta,
                    coeffs=[float(c) for c in self.coeffs], lo=self.lo, hi=self.hi, degree=self.degree,
                    method=self.method, max_err=self.max_err, dom_lo=self.dom_lo, dom_hi=self.dom_hi,
                    max_err_domain=self.max_err_domain, agreement=self.agreement,
                    stages=None if self.stages is None else [[float(v) for v in c] for c in self.stages])

    @classmethod
    def from_json(cls, d: dict) -> "ActPoly":
        d = dict(d)
        d["coeffs"] = np.asarray(d["coeffs"], dtype=np.float64)
        if d.get("stages") is not None:
            d["stages"] = [np.asarray(c, dtype=np.float64) for c in d["stages"]]
        return cls(**d)


def chebval_clenshaw(u, coeffs) -> np.ndarray:
    """sum_k coeffs[k] T_k(u) by Clenshaw's recurrence in float64 (the native core's, csrc/plain: each element's
    products and sums rounded one by one in the recurrence's order, b_k = (2u b_{k+1} - b_{k+2}) + c_k, so every
    SIMD path gives the same bits; numpy's chebval allocates three arrays per coefficient, which on calibration
    batches of 10^8 values dominated the degree search)."""
    u = np.asarray(u, dtype=np.float64)
    c = np.asarray(coeffs, dtype=np.float64)
    if len(c) <= 2:
        return np.polynomial.chebyshev.chebval(u, c)
    return _core.chebval_clenshaw(np.require(u, requirements="C"), np.require(c, requirements="C"))


def _as_square(kind, c_power_x, alpha0=1.0, beta0=0.0, **kw) -> ActPoly:
    """A degree <= 2 polynomial in x (power basis) as sign*(a x + b)^2 + const, or an affine map."""
    c = np.zeros(3)
    c[: len(c_power_x)] = c_power_x[:3]
    c0, c1, c2 = c
    kw.setdefault("degree", 2 if c2 != 0 else 1)
    if c2 == 0:
        return ActPoly(kind, "affine", float(c1), float(c0), np.zeros(0), **kw)
    a = math.sqrt(abs(c2))
    b = a * c1 / (2 * c2)
    return ActPoly(kind, "square", a, b, np.array([c0 - c1 * c1 / (4 * c2), math.copysign(1.0, c2)]), **kw)


def exact_poly(kind: str, coeffs=None) -> ActPoly:
    """square or a user polynomial (power basis in x), evaluated exactly."""
    if kind == "square":
        return ActPoly("square", "square", 1.0, 0.0, np.array([0.0, 1.0]), degree=2)
    c = np.trim_zeros(np.asarray(coeffs, dtype=np.float64), "b")
    if c.size == 0:
        c = np.zeros(1)
    if len(c) <= 3:
        return _as_square("poly", c)
    return ActPoly("poly", "power", 1.0, 0.0, c, degree=len(c) - 1)


def calibrate(values: np.ndarray, margin: float) -> tuple[float, float]:
    """The range of `values` widened by `margin` x its width on each side."""
    return calibrate_range(float(np.min(values)), float(np.max(values)), margin)


def calibrate_range(lo: float, hi: float, margin: float) -> tuple[float, float]:
    """[lo, hi] widened by `margin` x its width on each side (a point: by margin x max(|lo|, 1))."""
    w = hi - lo
    if w <= 1e-12:
        w = max(abs(lo), 1.0)
    return lo - margin * w, hi + margin * w


def approximate(kind: str, lo: float, hi: float, degree: int = DEFAULT_DEGREE, method: str = "minimax",
                guard: float = 0.0) -> ActPoly:
    """Polynomial approximation of a named activation on [lo, hi] (plus a guard band of `guard` x the width
    on each side, fitted at low weight; hemlp.compiler.fit)."""
    r = fit(kind, float(lo), float(hi), int(degree), method, float(guard))
    degree = int(degree)
    kw = dict(lo=float(lo), hi=float(hi), degree=degree, method=method, max_err=r.max_err)
    if guard > 0:
        kw.update(dom_lo=r.dom_lo, dom_hi=r.dom_hi, max_err_domain=r.max_err_domain)
    if degree <= 2:
        # back to x: p(u(x)) as a power series in x, then complete the square
        pu = np.polynomial.chebyshev.cheb2poly(r.coeffs)
        px = np.polynomial.polynomial.Polynomial(pu)(np.polynomial.polynomial.Polynomial([r.beta, r.alpha])).coef
        return _as_square(kind, px, **kw)
    return ActPoly(kind, "cheb", r.alpha, r.beta, r.coeffs.copy(), **kw)


#: activation kinds with a composite (sign-based) approximation: ReLU(x) = x (1 + sign x) / 2
COMPOSITE_KINDS = ("relu",)


def approximate_composite(kind: str, lo: float, hi: float, schedule, guard: float = 0.0) -> ActPoly:
    """ReLU on the core [lo, hi] as u * h(u), u = x / D, h a composite sign approximation (hemlp.compiler.
    composite_sign) of (1 + sign u) / 2 times D; D covers the core and the guard band (`guard` x the width on each
    side) at full precision. The error bound is the composite's error on [-1, 1] times D."""
    if kind not in COMPOSITE_KINDS:
        raise ParameterError(f"no composite approximation of {kind!r}: composites exist for {COMPOSITE_KINDS}")
    lo, hi = float(lo), float(hi)
    w = hi - lo
    dom_lo, dom_hi = lo - guard * w, hi + guard * w
    D = max(abs(dom_lo), abs(dom_hi))
    cs, err = composite_sign(tuple(schedule))
    stages = [c.copy() for c in cs.stages]
    stages[-1] = stages[-1] * D
    return ActPoly(kind, "composite", 1.0 / D, 0.0, np.zeros(0), lo=lo, hi=hi,
                   degree=int(np.prod(cs.degrees)), method="composite", max_err=err * D, dom_lo=-D, dom_hi=D,
                   max_err_domain=err * D, stages=stages)


def composite_unit(kind: str, schedule) -> ActPoly:
    """The composite of `schedule` on [-1, 1] (D = 1): every approximate_composite of that schedule is
    p(x) = D g(x / D) with g this one's polynomial (hemlp.compiler.poly_table shares its table)."""
    return approximate_composite(kind, -1.0, 1.0, schedule)
