"""Polynomial activations: exact (square, user polynomials) and approximations of ReLU, SiLU, GELU,
Sigmoid and Tanh on a range calibrated from the example input (plus a margin).

An activation becomes an ``ActPoly``: u = alpha * x + beta maps the range [lo, hi] onto [-1, 1];
the polynomial is evaluated on u (Chebyshev basis for approximations, power basis for user
polynomials). alpha/beta are folded into the producing PCMM by the lowering (0 levels), so a
degree-d activation costs ceil(log2(d + 1)) levels; a degree-2 polynomial is rewritten as
sign * u^2 + const (completing the square) and costs 1 level, like x^2.

Methods: "chebyshev" (interpolation at Chebyshev nodes), "lsq" (least squares on a dense grid),
"minimax" (Lawson's iteratively reweighted least squares, converging to the minimax polynomial).
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from hemlp.compiler.ir import exact_activation
from hemlp.errors import ParameterError
from hemlp.he.polynomial import depth as poly_depth

__all__ = ["ActPoly", "RangeWarning", "approximate", "exact_poly", "METHODS", "DEFAULT_DEGREE"]

METHODS = ("chebyshev", "lsq", "minimax")
DEFAULT_DEGREE = 7
DEFAULT_MARGIN = 0.2


class RangeWarning(UserWarning):
    """Simulation saw activation inputs outside the calibrated approximation range."""


warnings.filterwarnings("always", category=RangeWarning)


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

    @property
    def depth(self) -> int:
        if self.form == "square":
            return 1
        if self.form == "affine":
            return 0
        return poly_depth(len(self.coeffs) - 1)

    def eval_u(self, u):
        if self.form == "square":
            return self.coeffs[1] * u * u + self.coeffs[0]
        if self.form == "affine":
            return u
        if self.form == "cheb":
            return np.polynomial.chebyshev.chebval(u, self.coeffs)
        return np.polynomial.polynomial.polyval(u, self.coeffs)

    def apply(self, x):
        return self.eval_u(self.alpha * np.asarray(x, dtype=np.float64) + self.beta)

    def expr(self, arg: str) -> str:
        if self.form == "square" and self.kind == "square" and self.alpha == 1 and self.beta == 0:
            return f"square({arg})"
        if self.lo is not None:
            return (f"{self.kind}_{self.form}{self.degree}({arg}, range=[{self.lo:.4g}, {self.hi:.4g}], "
                    f"{self.method}, max_err={self.max_err:.2g})")
        if self.form == "square":
            return f"{self.kind}_as_square({arg})"
        return f"{self.kind}({arg}, {np.round(self.coeffs, 6).tolist()})"

    def to_json(self) -> dict:
        return dict(kind=self.kind, form=self.form, alpha=self.alpha, beta=self.beta,
                    coeffs=[float(c) for c in self.coeffs], lo=self.lo, hi=self.hi, degree=self.degree,
                    method=self.method, max_err=self.max_err)

    @classmethod
    def from_json(cls, d: dict) -> "ActPoly":
        d = dict(d)
        d["coeffs"] = np.asarray(d["coeffs"], dtype=np.float64)
        return cls(**d)


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
    lo, hi = float(np.min(values)), float(np.max(values))
    w = hi - lo
    if w <= 1e-12:
        w = max(abs(lo), 1.0)
    return lo - margin * w, hi + margin * w


def _fit(f, deg: int, method: str) -> np.ndarray:
    """Chebyshev coefficients on [-1, 1] of a degree-deg approximation of f (f takes u in [-1, 1])."""
    if method == "chebyshev":
        return np.polynomial.chebyshev.Chebyshev.interpolate(f, deg).coef
    grid = np.cos(np.linspace(0, np.pi, 4097))   # dense, clustered at the ends
    grid = np.concatenate([grid, np.linspace(-1, 1, 2049)])
    y = f(grid)
    V = np.polynomial.chebyshev.chebvander(grid, deg)
    if method == "lsq":
        return np.linalg.lstsq(V, y, rcond=None)[0]
    # Lawson: weights w <- w * |err|, normalised; converges to the minimax solution
    w = np.ones_like(grid) / grid.size
    c = np.linalg.lstsq(V, y, rcond=None)[0]
    for _ in range(60):
        sw = np.sqrt(w)
        c = np.linalg.lstsq(V * sw[:, None], y * sw, rcond=None)[0]
        err = np.abs(V @ c - y)
        w = w * (err + 1e-300)
        w /= w.sum()
    return c


def approximate(kind: str, lo: float, hi: float, degree: int = DEFAULT_DEGREE, method: str = "chebyshev") -> ActPoly:
    """Polynomial approximation of a named activation on [lo, hi]."""
    if method not in METHODS:
        raise ParameterError(f"activation method {method!r}: choose one of {METHODS}")
    degree = int(degree)
    if degree < 1:
        raise ParameterError(f"activation degree must be >= 1, got {degree}")
    if not (math.isfinite(lo) and math.isfinite(hi) and hi > lo):
        raise ParameterError(f"activation range [{lo}, {hi}] must be finite with lo < hi")
    alpha, beta = 2.0 / (hi - lo), -(hi + lo) / (hi - lo)
    f = lambda u: exact_activation(kind, (np.asarray(u) - beta) / alpha)  # noqa: E731
    c = _fit(f, degree, method)
    grid = np.linspace(-1, 1, 8193)
    max_err = float(np.max(np.abs(np.polynomial.chebyshev.chebval(grid, c) - f(grid))))
    kw = dict(lo=float(lo), hi=float(hi), degree=degree, method=method, max_err=max_err)
    if degree <= 2:
        # back to x: p(u(x)) as a power series in x, then complete the square
        pu = np.polynomial.chebyshev.cheb2poly(c)
        px = np.polynomial.polynomial.Polynomial(pu)(np.polynomial.polynomial.Polynomial([beta, alpha])).coef
        return _as_square(kind, px, **kw)
    return ActPoly(kind, "cheb", alpha, beta, c, **kw)
