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

__all__ = ["PolyTable", "TOLERANCE", "MAX_POINTS", "Workspace", "TableActivations"]

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
        self.table = None
        self.interp_err = None
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

    def __call__(self, x, dtype=np.float64, work: Workspace | None = None) -> np.ndarray:
        """p(x) as `dtype` (the float64 values rounded once). ``work``: scratch buffers reused from call to call
        (fresh arrays of 10^7 values cost a page fault every 4 KiB, every call)."""
        x = np.asarray(x)
        if self.table is None:
            return self.ap.apply(x).astype(dtype, copy=False)
        work = work or Workspace()
        n = x.size
        f, i, idx = work.get("f", n, np.float64), work.get("i", n, np.float64), work.get("idx", n, np.intp)
        np.subtract(x.reshape(-1), self.lo, out=f, dtype=np.float64)
        f *= self.scale
        np.floor(f, out=i)
        np.clip(i, 0, self.points - 1, out=i)
        f -= i
        with np.errstate(invalid="ignore"):                  # NaN inputs: replaced below
            np.copyto(idx, i, casting="unsafe")
        y = np.take(self.table, idx, out=work.get("y", n, np.float64), mode="clip")
        idx += 1
        d = np.take(self.table, idx, out=i, mode="clip")
        d -= y                                               # table[idx + 1] - table[idx], as np.diff forms it
        d *= f
        flat = np.empty(n, dtype=dtype)
        np.add(y, d, out=flat)
        if n and not (self.lo <= float(x.min()) and float(x.max()) <= self.hi):
            x64 = x.reshape(-1).astype(np.float64)
            beyond = ~((x64 >= self.lo) & (x64 <= self.hi))     # beyond the domain (or NaN): the polynomial itself
            flat[beyond] = self.ap.apply(x64[beyond])
        return flat.reshape(x.shape)


class Workspace:
    """Scratch arrays for PolyTable lookups, grown to the largest call and reused."""

    def __init__(self):
        self.buffers: dict = {}

    def get(self, name: str, n: int, dtype) -> np.ndarray:
        """A scratch array of n values of `dtype` (its contents are whatever the last call left)."""
        b = self.buffers.get(name)
        if b is None or b.size < n or b.dtype != dtype:
            b = self.buffers[name] = np.empty(n, dtype=dtype)
        return b[:n]


class TableActivations:
    """``act_eval`` for hemlp.compiler.resume_cache.ResumeCache: an approximation with a domain through its table
    (made on first use, one per ActPoly), values returned as `dtype`; one Workspace for every lookup."""

    def __init__(self, dtype):
        self.dtype, self.work = dtype, Workspace()
        self.tables: dict = {}

    def __call__(self, node, ap, x) -> np.ndarray:
        entry = self.tables.get(id(ap))
        if entry is None:                          # the ActPoly is kept with its table: its id stays its own
            entry = self.tables[id(ap)] = (ap, PolyTable(ap) if ap.domain is not None else None)
        t = entry[1]
        return ap.apply(x) if t is None else t(x, self.dtype, self.work)

    def forget(self, ap) -> None:
        """Drop ap's table (its memory), if made."""
        self.tables.pop(id(ap), None)
