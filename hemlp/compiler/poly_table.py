"""A fitted activation polynomial as a lookup table with linear interpolation, for the degree search.

The search evaluates each candidate polynomial on every calibration value of its activation (10^8 values for a
ResNet-20 on 1 000 images, many times over); Clenshaw's recurrence costs a product and two sums per coefficient and
value, a table lookup one interpolation. The table samples p on a uniform grid of its domain; its interpolation error is
measured at every midpoint between grid nodes (where linear interpolation errs most, to within the grid's
curvature) and must stay below ``TOLERANCE`` x the fit's own error on the core, else the grid grows 4x (up to
MAX_POINTS; past that, p is evaluated exactly). Values beyond the domain (where p diverges) are evaluated exactly.
The lookup itself is the native core's (csrc/plain): one pass over the values, where numpy's took a dozen.
A composite ReLU (hemlp.compiler.activations.approximate_composite) is p(x) = D g(x / D) with g the same for every
activation of its stage degrees: one table of g serves them all, each at its own D (``PolyTable.rescaled``;
docs/design/activations.md §3, step 4).
The plan's own simulation (hemlp.runtime.local) always evaluates p exactly.
"""
from __future__ import annotations

import numpy as np

from hemlp import _core
from hemlp.compiler.activations import composite_unit

__all__ = ["PolyTable", "TOLERANCE", "MAX_POINTS", "TableActivations"]

#: the interpolation error allowed, as a fraction of the polynomial's own approximation error
TOLERANCE = 1e-3
MIN_POINTS, MAX_POINTS = 1 << 16, 1 << 22


#: cells on each side of the last grid's worst cell checked first on the next grid
PEAK_CELLS = 1024


def _midpoint_error(v) -> tuple[float, int]:
    """The largest |p(midpoint) - linear interpolation| over the cells of values v (nodes at even indices), and its
    cell."""
    e = np.abs(v[1::2] - (v[0:-1:2] + v[2::2]) / 2)
    k = int(np.argmax(e))
    return float(e[k]), k


class PolyTable:
    """p(x) for an ActPoly `ap` with a domain: a table where its error is within TOLERANCE of ap.max_err."""

    def __init__(self, ap):
        self.ap = ap
        self.lo, self.hi = ap.domain
        self.table = self.points = self.scale = None
        self.interp_err = None
        self.gain = 1.0                                       # table values are p's own (rescaled: D x g's)
        tol = TOLERANCE * max(ap.max_err, 1e-300)
        m, peak = MIN_POINTS, None
        while m <= MAX_POINTS:
            grid = np.linspace(self.lo, self.hi, 2 * m + 1)      # nodes at even indices, midpoints at odd ones
            if peak is not None:
                # the cells around the last grid's worst one first: an error above tol there rules this grid out
                # without evaluating p on all of it (p is evaluated point by point: the same values either way)
                c = int((peak - self.lo) / (self.hi - self.lo) * m)
                c0, c1 = max(0, c - PEAK_CELLS), min(m, c + PEAK_CELLS)
                err, k = _midpoint_error(ap.apply(grid[2 * c0:2 * c1 + 1]))
                if err > tol:
                    peak = grid[2 * (c0 + k) + 1]
                    m *= 4
                    continue
            v = ap.apply(grid)
            err, k = _midpoint_error(v)
            if err <= tol:
                # the nodes alone: a cell's difference is formed at each lookup (a kept np.diff would double the
                # search's table memory, ~1.6 GiB at its peak on a ResNet-20, for the same values)
                self.table, self.interp_err, self.points = v[0::2].copy(), err, m
                self.scale = m / (self.hi - self.lo)
                break
            peak = grid[2 * k + 1]
            m *= 4

    @classmethod
    def rescaled(cls, unit: "PolyTable", ap) -> "PolyTable":
        """ap's table from `unit`, the table of g on [-1, 1] where ap's polynomial is p(x) = D g(x / D) on its domain
        [-D, D] (a composite ReLU): unit's nodes shared, read at x / D and multiplied by D. Its interpolation error
        is D x unit's, within TOLERANCE of ap.max_err = D x g's error as unit's is of g's."""
        lo, hi = ap.domain
        if unit.lo != -1.0 or unit.hi != 1.0 or lo != -hi:
            raise ValueError(f"PolyTable.rescaled: a table on [-1, 1] read on a symmetric domain, got "
                             f"[{unit.lo}, {unit.hi}] and [{lo}, {hi}]")
        t = cls.__new__(cls)
        t.ap, t.lo, t.hi, t.gain = ap, lo, hi, hi
        t.table, t.points = unit.table, unit.points
        t.interp_err = None if unit.interp_err is None else unit.interp_err * hi
        t.scale = None if t.table is None else t.points / (hi - lo)
        return t

    def __call__(self, x, dtype=np.float64) -> np.ndarray:
        """p(x) as `dtype` (float32 or float64; the float64 values rounded once)."""
        x = np.asarray(x)
        if self.table is None:
            return self.ap.apply(x).astype(dtype, copy=False)
        flat_x = x.reshape(-1)
        if flat_x.dtype not in (np.float32, np.float64) or not flat_x.flags.c_contiguous:
            flat_x = np.ascontiguousarray(flat_x, dtype=np.float64)
        flat = np.empty(flat_x.size, dtype=dtype)
        if _core.table_lookup(self.table, self.points, self.lo, self.scale, self.gain, self.lo, self.hi, flat_x,
                              flat):
            x64 = flat_x.astype(np.float64)
            beyond = ~((x64 >= self.lo) & (x64 <= self.hi))     # beyond the domain (or NaN): the polynomial itself
            flat[beyond] = self.ap.apply(x64[beyond])
        return flat.reshape(x.shape)


class TableActivations:
    """``act_eval`` for hemlp.compiler.resume_cache.ResumeCache: an approximation with a domain through its table
    (made on first use, one per ActPoly; a composite's from the one table of its stage degrees), values returned as
    `dtype`."""

    def __init__(self, dtype):
        self.dtype = dtype
        self.tables: dict = {}
        self.units: dict = {}                      # (kind, stage degrees) -> the composite's table on [-1, 1]

    def __call__(self, node, ap, x) -> np.ndarray:
        entry = self.tables.get(id(ap))
        if entry is None:                          # the ActPoly is kept with its table: its id stays its own
            entry = self.tables[id(ap)] = (ap, self._table(ap))
        t = entry[1]
        return ap.apply(x) if t is None else t(x, self.dtype)

    def _table(self, ap) -> PolyTable | None:
        if ap.domain is None:
            return None
        if ap.form != "composite":
            return PolyTable(ap)
        key = (ap.kind, ap.schedule)
        unit = self.units.get(key)
        if unit is None:
            unit = self.units[key] = PolyTable(composite_unit(ap.kind, ap.schedule))
        return PolyTable.rescaled(unit, ap)

    def forget(self, ap) -> None:
        """Drop ap's table (its memory; a composite's shared table stays), if made."""
        self.tables.pop(id(ap), None)
