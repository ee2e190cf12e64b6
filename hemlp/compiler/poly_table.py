"""A fitted activation polynomial as a lookup table with linear interpolation, for the degree search.

The search evaluates each candidate polynomial on every calibration value of its activation (10^8 values for a
ResNet-20 on 1 000 images, many times over); Clenshaw's recurrence costs a few memory passes per coefficient, a
table lookup a few passes in all. The table samples p on a uniform grid of its domain; its interpolation error is
measured at every midpoint between grid nodes (where linear interpolation errs most, to within the grid's
curvature) and must stay below ``TOLERANCE`` x the fit's own error on the core, else the grid doubles (up to
MAX_POINTS; past that, p is evaluated exactly). Values beyond the domain (where p diverges) are evaluated exactly.
The plan's own simulation (hemlp.runtime.local) always evaluates p exactly.
"""
from __future__ import annotations

import numpy as np

__all__ = ["PolyTable", "TOLERANCE", "MAX_POINTS"]

#: the interpolation error allowed, as a fraction of the polynomial's own approximation error
TOLERANCE = 1e-3
MIN_POINTS, MAX_POINTS = 1 << 16, 1 << 22


class PolyTable:
    """p(x) for an ActPoly `ap` with a domain: a table where its error is within TOLERANCE of ap.max_err."""

    def __init__(self, ap):
        self.ap = ap
        self.lo, self.hi = ap.domain
        self.table = None
        self.interp_err = None
        tol = TOLERANCE * max(ap.max_err, 1e-300)
        m = MIN_POINTS
        while m <= MAX_POINTS:
            grid = np.linspace(self.lo, self.hi, 2 * m + 1)      # nodes at even indices, midpoints at odd ones
            v = ap.apply(grid)
            err = float(np.max(np.abs(v[1::2] - (v[0:-1:2] + v[2::2]) / 2)))
            if err <= tol:
                self.table, self.interp_err, self.points = v[0::2].copy(), err, m
                self.scale = m / (self.hi - self.lo)
                break
            m *= 4

    def __call__(self, x) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        if self.table is None:
            return self.ap.apply(x)
        f = x - self.lo
        f *= self.scale
        i = np.floor(f)
        np.clip(i, 0, self.points - 1, out=i)
        f -= i
        idx = i.astype(np.intp)
        y = self.table[idx]
        d = self.table[idx + 1]
        d -= y
        d *= f
        y += d
        out = (x < self.lo) | (x > self.hi)
        if out.any():                                  # beyond the domain: the polynomial itself
            y[out] = self.ap.apply(x[out])
        return y.reshape(x.shape)
