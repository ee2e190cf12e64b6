"""Polynomial fits of an activation on a calibrated range, with an optional low-weight guard band.

A fit maps the *domain* [dom_lo, dom_hi] onto u in [-1, 1] and returns Chebyshev coefficients on u.
The domain is the calibrated core [lo, hi] widened by ``guard`` x its width on each side; the error is
weighted 1 on the core and ``GUARD_WEIGHT`` on the guard band. The band costs the core little accuracy
but keeps the polynomial bounded just outside the calibrated range, where an unguarded high-degree fit
explodes (|T_n(1 + d)| ~ e^(n sqrt(2 d)) / 2; docs/design/activations.md §1.5).

Methods:
    "minimax"   weighted minimax on a dense grid (Lawson's iteratively reweighted least squares, which
                converges to the best weighted uniform approximation on the grid)
    "chebyshev" interpolation at the Chebyshev nodes of the domain (no weights)
    "lsq"       weighted least squares on the grid

Fits are deterministic and cached in-process (the search of hemlp.compiler.calibration revisits them).
"""
from __future__ import annotations

import functools
import math

import numpy as np

try:  # optional (the dev extra): without it the fits run on numpy's default BLAS threads
    from threadpoolctl import threadpool_limits
except ImportError:  # pragma: no cover
    import contextlib

    def threadpool_limits(limits=None, user_api=None):
        return contextlib.nullcontext()

from hemlp.compiler.ir import exact_activation
from hemlp.errors import ParameterError

__all__ = ["FitResult", "fit", "METHODS", "GUARD_WEIGHT"]

METHODS = ("chebyshev", "lsq", "minimax")
GUARD_WEIGHT = 0.05
LAWSON_ITERATIONS = 80


class FitResult:
    """Chebyshev coefficients on u plus the domain map and the measured errors."""

    __slots__ = ("coeffs", "dom_lo", "dom_hi", "alpha", "beta", "max_err", "max_err_domain")

    def __init__(self, coeffs, dom_lo, dom_hi, max_err, max_err_domain):
        self.coeffs = coeffs
        self.dom_lo, self.dom_hi = dom_lo, dom_hi
        self.alpha = 2.0 / (dom_hi - dom_lo)
        self.beta = -(dom_hi + dom_lo) / (dom_hi - dom_lo)
        self.max_err, self.max_err_domain = max_err, max_err_domain


def _grid() -> np.ndarray:
    # dense and clustered at the ends, where polynomial errors peak
    return np.unique(np.concatenate([np.cos(np.linspace(0, np.pi, 4097)), np.linspace(-1, 1, 2049)]))


_GRID = _grid()


def _weighted_lsq(V, y, s) -> np.ndarray:
    """argmin ||s (V c - y)|| by the normal equations: the Chebyshev basis on this grid is well conditioned, and a
    (d+1) x (d+1) solve is ~50x cheaper than an SVD least squares on thousands of rows."""
    Vs = V * s[:, None]
    return np.linalg.solve(Vs.T @ Vs, Vs.T @ (y * s))


def _weighted_minimax(V, y, w) -> np.ndarray:
    """Coefficients c minimising max_i w_i |V c - y|_i (Lawson: lam_i <- lam_i * w_i |e_i|)."""
    lam = np.full(len(y), 1.0 / len(y))
    c = None
    for _ in range(LAWSON_ITERATIONS):
        c = _weighted_lsq(V, y, np.sqrt(lam) * w)
        e = w * np.abs(V @ c - y) + 1e-300
        lam = lam * e
        lam /= lam.sum()
    return c


@functools.lru_cache(maxsize=16)
def _vander(degree: int) -> np.ndarray:
    """The Chebyshev basis on the fit grid (the same for every activation fitted at this degree)."""
    V = np.polynomial.chebyshev.chebvander(_GRID, degree)
    V.flags.writeable = False
    return V


@functools.lru_cache(maxsize=512)
def _fit_cached(kind: str, lo: float, hi: float, guard: float, degree: int, method: str) -> FitResult:
    width = hi - lo
    dom_lo, dom_hi = lo - guard * width, hi + guard * width
    alpha, beta = 2.0 / (dom_hi - dom_lo), -(dom_hi + dom_lo) / (dom_hi - dom_lo)
    f = lambda u: exact_activation(kind, (np.asarray(u, dtype=np.float64) - beta) / alpha)  # noqa: E731
    u = _GRID
    x = (u - beta) / alpha
    core = (x >= lo) & (x <= hi)
    w = np.where(core, 1.0, GUARD_WEIGHT)
    if method == "chebyshev":
        c = np.polynomial.chebyshev.Chebyshev.interpolate(f, degree).coef
    else:
        V = _vander(degree)
        y = f(u)
        # one BLAS thread: small products, and a loaded machine makes threaded BLAS crawl
        with threadpool_limits(limits=1, user_api="blas"):
            c = _weighted_lsq(V, y, w) if method == "lsq" else _weighted_minimax(V, y, w)
    # errors measured on a finer grid than the fit's, core and whole domain apart
    uc = np.linspace(-1, 1, 16385)
    xc = (uc - beta) / alpha
    err = np.abs(np.polynomial.chebyshev.chebval(uc, c) - f(uc))
    in_core = (xc >= lo) & (xc <= hi)
    return FitResult(np.asarray(c, dtype=np.float64), float(dom_lo), float(dom_hi), float(err[in_core].max()),
                     float(err.max()))


def _key(v: float) -> float:
    return float(f"{v:.12g}")


def fit(kind: str, lo: float, hi: float, degree: int, method: str = "minimax", guard: float = 0.0) -> FitResult:
    """Fit activation `kind` on the core [lo, hi] (weight 1) and the guard band of `guard` x width on each
    side (weight GUARD_WEIGHT; guard=0: the core only)."""
    if method not in METHODS:
        raise ParameterError(f"activation method {method!r}: choose one of {METHODS}")
    degree = int(degree)
    if degree < 1:
        raise ParameterError(f"activation degree must be >= 1, got {degree}")
    if not (math.isfinite(lo) and math.isfinite(hi) and hi > lo):
        raise ParameterError(f"activation range [{lo}, {hi}] must be finite with lo < hi")
    if not (math.isfinite(guard) and guard >= 0):
        raise ParameterError(f"activation guard band {guard} must be a finite number >= 0")
    return _fit_cached(kind, _key(lo), _key(hi), _key(guard), degree, method)
