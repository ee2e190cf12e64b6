"""Composite minimax approximations of sign(x), and ReLU(x) = x (1 + sign x) / 2 built on them.

A single polynomial approximates ReLU poorly near 0 (its kink); the field's answer for high precision is a
composition p_k o ... o p_1 of odd minimax polynomials approximating sign on [-1, -eps] U [eps, 1] (Lee, Lee, Kim,
No et al.: "Minimax approximation of sign function by composite polynomial for homomorphic comparison", 2021;
"High-precision bootstrapping / ReLU", 2022). Each stage is fitted where the previous stage leaves its inputs:

    stage 1: the odd minimax polynomial of degree d_1 closest to 1 on [eps, 1];
    stage i: the same on [a_i, 1], where [a_i, 1] is the image of [a_{i-1}, 1] under stage i-1, normalised by the
             largest value stage i-1 takes on [0, 1] (so every stage reads inputs in [-1, 1]).

eps is chosen per schedule to minimise the ReLU error max |u h(u) - max(u, 0)| on [-1, 1]. A composite has no
low-weight guard band (its first stage's error is large by design, so a down-weighted band would let it cross 0):
the caller scales u = x / D with D covering the calibrated range *and* its guard band, at full precision.

Fitting takes seconds per schedule, so the coefficients of SCHEDULES are computed once by
``python -m hemlp.compiler.composite_sign`` into composite_sign.json next to this file (shipped with the package);
``composite_sign`` reads them from there and fits any other schedule on first use.

The last stage returns B (1 + p_k) / 2, so ReLU(x) = u * h(u) with u = x / B: one ct x ct product after the stages
(docs/design/activations.md §1.4 compares the cost with single minimax polynomials: composites reach errors that a
single polynomial reaches only beyond degree 127, at far fewer products).

Fits use Lawson's iteratively reweighted least squares on a dense grid (clustered at both ends and geometric near
eps) in the odd Chebyshev basis; they are deterministic and cached in-process.
"""
from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import numpy as np

from hemlp.errors import ParameterError
from hemlp.he.polynomial import depth as poly_depth

__all__ = ["CompositeSign", "composite_sign", "fit_composite", "SCHEDULES", "relu_error", "write_table"]

#: odd stage degrees of the composites offered to the degree search, by increasing precision (depth: the stages'
#: depths plus the final product): errors on [-B, B] in units of B from relu_error, measured by the tests
SCHEDULES = ((31, 31), (15, 15, 15), (15, 15, 31), (15, 31, 31), (31, 31, 31))
LAWSON_ITERATIONS = 150
TABLE = Path(__file__).with_name("composite_sign.json")


def _grid(a: float, b: float) -> np.ndarray:
    t = (np.cos(np.linspace(0.0, np.pi, 1201)) + 1.0) / 2.0
    return np.unique(np.concatenate([a + (b - a) * t, np.geomspace(a, b, 801)]))


def _odd_minimax(a: float, degree: int) -> np.ndarray:
    """Chebyshev coefficients (odd) of the degree-`degree` odd polynomial closest to 1 on [a, 1] in the max norm."""
    x = _grid(a, 1.0)
    V = np.polynomial.chebyshev.chebvander(x, degree)[:, 1::2]
    y = np.ones_like(x)
    lam = np.full(len(x), 1.0 / len(x))
    c = None
    for _ in range(LAWSON_ITERATIONS):
        s = np.sqrt(lam)
        # least squares by SVD: on the narrow intervals of later stages the odd basis is nearly collinear, and
        # normal equations would square its condition number
        c = np.linalg.lstsq(V * s[:, None], y * s, rcond=None)[0]
        e = np.abs(V @ c - y) + 1e-300
        lam = lam * e
        lam = np.maximum(lam / lam.sum(), 1e-14)    # a floor: weights that underflow to 0 would drop grid points
    full = np.zeros(degree + 1)
    full[1::2] = c
    return full


class CompositeSign:
    """The stages of a composite sign approximation, ready for evaluation on u = x / D in [-1, 1].

    stages[:-1] map [-1, 1] into [-1, 1]; stages[-1] returns (1 + sign) / 2 (approximate_composite scales it by D);
    ``sign_err`` is the largest |p_k o ... o p_1 (u) - sign(u)| for eps <= |u| <= 1."""

    def __init__(self, degrees, eps: float, stages, sign_err: float):
        self.degrees, self.eps = tuple(degrees), float(eps)
        self.stages = [np.asarray(c, dtype=np.float64) for c in stages]
        self.sign_err = float(sign_err)

    @property
    def depth(self) -> int:
        """Levels of the stages (each ceil(log2(d + 1))) and of the final product with u."""
        return sum(poly_depth(d) for d in self.degrees) + 1

    def step(self, u) -> np.ndarray:
        """(1 + sign(u)) / 2, approximately: the stages in float64."""
        v = np.asarray(u, dtype=np.float64)
        for c in self.stages:
            v = np.polynomial.chebyshev.chebval(v, c)
        return v

    def relu(self, u) -> np.ndarray:
        """max(u, 0), approximately: u times the step."""
        u = np.asarray(u, dtype=np.float64)
        return u * self.step(u)


def _build(degrees, eps: float) -> CompositeSign:
    a = eps
    stages = []
    for i, d in enumerate(degrees):
        c = _odd_minimax(a, d)
        core = _grid(a, 1.0)
        pc = np.polynomial.chebyshev.chebval(core, c)
        if i < len(degrees) - 1:
            top = float(np.max(np.abs(np.polynomial.chebyshev.chebval(np.linspace(0.0, 1.0, 20001), c))))
            top = max(top, float(pc.max()))
            c = c / top
            a = float(pc.min()) / top
            if not a > 0:
                raise ParameterError(f"composite sign stage {i + 1} (degree {d}) maps [eps, 1] across 0: raise eps "
                                     f"above {eps:g} or the degree")
        else:
            sign_err = float(np.max(np.abs(pc - 1.0)))
            c = c / 2.0
            c[0] += 0.5                      # (1 + p) / 2
        stages.append(c)
    return CompositeSign(degrees, eps, stages, sign_err)


def relu_error(cs: CompositeSign, lim: float = 1.0, points: int = 400001) -> float:
    """max |u h(u) - max(u, 0)| for |u| <= lim (in units of B), on a grid dense near 0 and at the ends."""
    near = np.geomspace(1e-9, lim, points // 10)
    u = np.concatenate([np.linspace(-lim, lim, points), near, -near])
    return float(np.max(np.abs(cs.relu(u) - np.maximum(u, 0.0))))


def fit_composite(degrees) -> tuple[CompositeSign, float]:
    """Fit the composite with stage degrees `degrees` (odd, >= 3), eps chosen to minimise the ReLU error on [-1, 1];
    returns it and that error (units of B)."""
    degrees = tuple(int(d) for d in degrees)
    if not degrees or any(d < 3 or d % 2 == 0 for d in degrees):
        raise ParameterError(f"composite sign degrees must be odd and >= 3, got {degrees}")

    def err(le: float) -> float:
        try:
            return relu_error(_build(degrees, 2.0 ** le), points=40001)
        except ParameterError:
            return math.inf

    # the ReLU error is max(~eps, ~sign error(eps) / 2): unimodal in log2 eps; a coarse scan, then golden section
    coarse = np.arange(-16.0, -1.0, 1.0)
    errs = [err(le) for le in coarse]
    i = int(np.argmin(errs))
    if not math.isfinite(errs[i]):
        raise ParameterError(f"no eps in [2^-16, 2^-2] gives a usable composite for degrees {degrees}")
    lo, hi = coarse[max(i - 1, 0)], coarse[min(i + 1, len(coarse) - 1)]
    r = (math.sqrt(5) - 1) / 2
    c, d = hi - r * (hi - lo), lo + r * (hi - lo)
    fc, fd = err(c), err(d)
    for _ in range(12):
        if fc < fd:
            hi, d, fd = d, c, fc
            c = hi - r * (hi - lo)
            fc = err(c)
        else:
            lo, c, fc = c, d, fd
            d = lo + r * (hi - lo)
            fd = err(d)
    cs = _build(degrees, 2.0 ** (c if fc < fd else d))
    return cs, relu_error(cs)


@functools.lru_cache(maxsize=1)
def _table() -> dict:
    if not TABLE.is_file():
        return {}
    return {tuple(e["degrees"]): (CompositeSign(e["degrees"], e["eps"], e["stages"], e["sign_err"]), e["relu_err"])
            for e in json.loads(TABLE.read_text())["composites"]}


@functools.lru_cache(maxsize=64)
def composite_sign(degrees: tuple) -> tuple[CompositeSign, float]:
    """The composite for stage degrees `degrees` and its ReLU error on [-1, 1] (units of B): from the shipped table,
    else fitted now (fit_composite)."""
    degrees = tuple(int(d) for d in degrees)
    return _table().get(degrees) or fit_composite(degrees)


def write_table(path=TABLE) -> list:
    """Fit every schedule of SCHEDULES and write the table (``python -m hemlp.compiler.composite_sign``)."""
    rows = []
    for degrees in SCHEDULES:
        cs, err = fit_composite(degrees)
        rows.append(dict(degrees=list(degrees), eps=cs.eps, sign_err=cs.sign_err, relu_err=err, depth=cs.depth,
                         stages=[[float(v) for v in c] for c in cs.stages]))
        print(f"{degrees}: depth {cs.depth}, ReLU error {err:.3e} x B, eps 2^{math.log2(cs.eps):.2f}", flush=True)
    Path(path).write_text(json.dumps(dict(schema="hemlp-composite-sign/1", method="odd minimax stages (Lawson, "
                                          f"{LAWSON_ITERATIONS} iterations), eps by golden section on the ReLU error",
                                          composites=rows), indent=1))
    return rows


if __name__ == "__main__":
    write_table()
