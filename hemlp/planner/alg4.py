"""Op-count accounting of Algorithm 1 (standard FHE-BMM) and Algorithm 4 (4D loop interchange).

[S0] §III-C (Algorithm 1), §V-A (Algorithm 4), §V-C (per-processor reduction factors).

Attribution of Table II to operands [R]
---------------------------------------
One CGEMM(m', n', k') of [17] is RotateAlign on A and on B, then R = min(m', n', k')
rounds of ShiftByStep (one rotation of A and one of B) each followed by a MULT and an
ADD.  We split Table II's counts accordingly (``cgemm_breakdown``; the parts sum to
Table II exactly):

* RotateAlign(A) = RotateAlign(B) = k' ROT + k' PMULT + k' ADD   (Table II: 2k each)
* ShiftByStep per round = 1 ROT of A + 1 ROT of B                 (Table II: 2·d3 ROT)
* per round: 1 MULT + 1 ADD (accumulation)                         (Table II: d3, d3)
* the log term (ROT + ADD) of rectangular CGEMMs is charged per block CGEMM in both
  algorithms: Algorithm 4 is stated for square sub-MMs where it is 0, and sharing it would
  need a choice the paper does not make.

"A-block movement units" (``a_units``) count how many times RotateAlign plus all R
ShiftByStep rotations of one A block are done; [S0] §V-C calls this the factor multiplying
"the number of those [operations] within a single CGEMM".

Per-processor variants for a grid p_m × p_n × p_k (local blocks [l_m, l_n, l_k] = [b_m/p_m, ...]):

* ``alg1_counts``                        E3D: Algorithm 1 on the local blocks, a_units = l_m l_n l_k
  (= b_m b_n b_k / p).
* ``alg4_counts(share_in_group=False)``  4D-S: Algorithm 4 on the local blocks, a_units = l_m l_k
  (= b_m b_k/(p_m p_k), §V-C); "L" redundancy removed.
* ``alg4_counts(share_in_group=True)``   FHE4DMM: the group P_{i:t} (p_n processors holding the same
  A blocks) splits that work (Step 2.1/2.2), a_units = l_m l_k / p_n; "G" redundancy removed too.
  Work is counted as an exact average (it may be fractional when p_n does not divide l_m l_k).

Reduction/broadcast/all-gather traffic is communication, not homomorphic work, and is not
counted here (see grid.py, eqs. 5–7).

``run_alg1`` / ``run_alg4`` execute the two loop nests literally on plaintext square blocks with
the JKLS/[17] data movements σ, τ, ε^r, ω^r, and count every operation they perform; the tests
check both the product and the counts against the closed forms.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import numpy as np

from hemlp.errors import ShapeError
from hemlp.planner.grid import Grid
from hemlp.planner.obl import Layout, OpCounts, cgemm_log_term, check_dims

GridSpec = Union[None, Grid, tuple[int, int, int]]

_ONE_ROT = OpCounts(rot=1)
_ONE_ADD = OpCounts(add=1)


@dataclass(frozen=True)
class CgemmBreakdown:
    """Table II of one CGEMM(m', n', k') split into A-movement, B-movement and compute [R]."""

    align_a: OpCounts      # RotateAlign(A*, ←)
    align_b: OpCounts      # RotateAlign(B*, ↑)
    shift_a: OpCounts      # ShiftByStep rotation of A per round
    shift_b: OpCounts      # ShiftByStep rotation of B per round
    product: OpCounts      # MULT + accumulation ADD per round
    extra: OpCounts        # Table II log term (rectangular pre/post processing)
    rounds: int            # R = min(m', n', k')

    @property
    def a_movement(self) -> OpCounts:
        """All work on one A block inside one CGEMM: RotateAlign + R ShiftByStep rotations."""
        return self.align_a + self.shift_a * self.rounds

    @property
    def b_movement(self) -> OpCounts:
        return self.align_b + self.shift_b * self.rounds

    @property
    def compute(self) -> OpCounts:
        return self.product * self.rounds + self.extra

    def total(self) -> OpCounts:
        return self.a_movement + self.b_movement + self.compute


def cgemm_breakdown(m: int, n: int, k: int) -> CgemmBreakdown:
    """Split Table II's counts of CGEMM(m, n, k) by operand (see the module docstring)."""
    check_dims(m=m, n=n, k=k)
    align = OpCounts(rot=k, pmult=k, add=k)
    log_term = cgemm_log_term(m, n, k)
    return CgemmBreakdown(align, align, _ONE_ROT, _ONE_ROT, OpCounts(mult=1, add=1),
                          OpCounts(rot=log_term, add=log_term), rounds=min(m, n, k))


@dataclass(frozen=True)
class BmmCounts:
    """Homomorphic op counts of one processor running a block matrix multiplication."""

    algorithm: str
    a_movement: OpCounts   # RotateAlign + ShiftByStep work on A blocks
    b_movement: OpCounts   # ... on B blocks
    compute: OpCounts      # MULTs, accumulation ADDs, Table II log terms, block ADDs
    a_units: float         # A-block movement units (the §V-C factor for A)
    b_units: float         # B-block movement units (the §V-C factor for B)

    @property
    def total(self) -> OpCounts:
        return self.a_movement + self.b_movement + self.compute

    def __repr__(self) -> str:
        return (f"BmmCounts({self.algorithm}: {self.total!r}; A-rotations={self.a_movement.rot:g} "
                f"({self.a_units:g} block units), B-rotations={self.b_movement.rot:g} "
                f"({self.b_units:g} block units))")


def _local(layout: Layout, grid: GridSpec) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    dims = (1, 1, 1) if grid is None else (grid.dims if isinstance(grid, Grid) else tuple(grid))
    if len(dims) != 3 or any(b % p for b, p in zip(layout.blocks, dims)):
        raise ShapeError(f"grid {dims} must divide the block layout {list(layout.blocks)}")
    return dims, tuple(b // p for b, p in zip(layout.blocks, dims))


def alg1_counts(layout: Layout, grid: GridSpec = None) -> BmmCounts:
    """Per-processor counts of Algorithm 1 (standard FHE-BMM) on the processor's local blocks."""
    _, (lm, ln, lk) = _local(layout, grid)
    br = cgemm_breakdown(*layout.block_dims)
    cgemms = lm * ln * lk
    compute = br.compute * cgemms + _ONE_ADD * (lm * ln * (lk - 1))  # line 5 block ADDs
    return BmmCounts("Algorithm 1", br.a_movement * cgemms, br.b_movement * cgemms, compute,
                     a_units=cgemms, b_units=cgemms)


def alg4_counts(layout: Layout, grid: GridSpec = None, share_in_group: bool = True) -> BmmCounts:
    """Per-processor counts of Algorithm 4 (loop interchange; rotations reused across i / j).

    ``share_in_group=True`` is FHE4DMM (the groups P_{i:t} / P_{:jt} split the A / B work,
    [S0] §V-A Step 2.1–2.2); False is 4D-S (each processor runs Algorithm 4 alone).
    """
    (pm, pn, _), (lm, ln, lk) = _local(layout, grid)
    br = cgemm_breakdown(*layout.block_dims)
    a_units = lm * lk / (pn if share_in_group else 1)   # lines 1 and 6: once per (i, t)
    b_units = lk * ln / (pm if share_in_group else 1)   # lines 2 and 8: once per (t, j)
    compute = br.compute * (lm * ln * lk)               # line 11 for every (r, t, i, j)
    name = "Algorithm 4 (FHE4DMM)" if share_in_group else "Algorithm 4 (4D-S)"
    return BmmCounts(name, br.a_movement * a_units, br.b_movement * b_units, compute, a_units, b_units)


# ---------------------------------------------------------------------------------------
# Literal execution on plaintext square blocks, counting every operation
# ---------------------------------------------------------------------------------------

class _Counter:
    """Mutable tally of operations by category while a loop nest runs."""

    def __init__(self) -> None:
        self.a = OpCounts()
        self.b = OpCounts()
        self.compute = OpCounts()
        self.a_aligns = 0
        self.b_aligns = 0


def _sigma(x: np.ndarray) -> np.ndarray:
    """RotateAlign(A, ←): σ(A)_{i,j} = A_{i,(i+j) mod d}."""
    i, j = np.indices(x.shape)
    return x[i, (i + j) % x.shape[0]]


def _tau(x: np.ndarray) -> np.ndarray:
    """RotateAlign(B, ↑): τ(B)_{i,j} = B_{(i+j) mod d, j}."""
    i, j = np.indices(x.shape)
    return x[(i + j) % x.shape[0], j]


def _shift_left(x: np.ndarray, r: int) -> np.ndarray:
    """ROT(A', ←, r) = ε^r: column shift by r."""
    return np.roll(x, -r, axis=1)


def _shift_up(x: np.ndarray, r: int) -> np.ndarray:
    """ROT(B', ↑, r) = ω^r: row shift by r."""
    return np.roll(x, -r, axis=0)


def _check_blocks(a_blocks: np.ndarray, b_blocks: np.ndarray) -> int:
    if a_blocks.ndim != 4 or b_blocks.ndim != 4:
        raise ShapeError("blocks must be arrays of shape (b_m, b_k, d, d) and (b_k, b_n, d, d)")
    d = a_blocks.shape[2]
    if a_blocks.shape[2:] != (d, d) or b_blocks.shape[2:] != (d, d) or a_blocks.shape[1] != b_blocks.shape[0]:
        raise ShapeError(f"need square d×d blocks with matching b_k; got A {a_blocks.shape}, B {b_blocks.shape}")
    return d


def _align_a(x: np.ndarray, br: CgemmBreakdown, c: _Counter) -> np.ndarray:
    c.a += br.align_a
    c.a_aligns += 1
    return _sigma(x)


def _align_b(x: np.ndarray, br: CgemmBreakdown, c: _Counter) -> np.ndarray:
    c.b += br.align_b
    c.b_aligns += 1
    return _tau(x)


def _cgemm(a: np.ndarray, b: np.ndarray, br: CgemmBreakdown, c: _Counter) -> np.ndarray:
    """One CGEMM(d, d, d): A·B = Σ_r ε^r(σ(A)) ⊙ ω^r(τ(B)) ([17], JKLS)."""
    a1, b1 = _align_a(a, br, c), _align_b(b, br, c)
    out = np.zeros_like(a)
    for r in range(br.rounds):
        c.a += br.shift_a
        c.b += br.shift_b
        out = out + _shift_left(a1, r) * _shift_up(b1, r)
        c.compute += br.product
    c.compute += br.extra
    return out


def _result(name: str, c: _Counter) -> BmmCounts:
    return BmmCounts(name, c.a, c.b, c.compute, c.a_aligns, c.b_aligns)


def run_alg1(a_blocks: np.ndarray, b_blocks: np.ndarray) -> tuple[np.ndarray, BmmCounts]:
    """Algorithm 1 verbatim on plaintext blocks A*[i,t], B*[t,j] (d×d each); returns (C*, counts)."""
    d = _check_blocks(a_blocks, b_blocks)
    br = cgemm_breakdown(d, d, d)
    b_m, b_k, b_n = a_blocks.shape[0], a_blocks.shape[1], b_blocks.shape[1]
    c = _Counter()
    out = np.zeros((b_m, b_n, d, d), dtype=np.result_type(a_blocks, b_blocks))
    for i in range(b_m):
        for j in range(b_n):
            out[i, j] = _cgemm(a_blocks[i, 0], b_blocks[0, j], br, c)
            for t in range(1, b_k):
                out[i, j] = out[i, j] + _cgemm(a_blocks[i, t], b_blocks[t, j], br, c)
                c.compute += _ONE_ADD
    return out, _result("Algorithm 1", c)


def run_alg4(a_blocks: np.ndarray, b_blocks: np.ndarray) -> tuple[np.ndarray, BmmCounts]:
    """Algorithm 4 verbatim on plaintext blocks (single processor); returns (C*, counts)."""
    d = _check_blocks(a_blocks, b_blocks)
    br = cgemm_breakdown(d, d, d)
    b_m, b_k, b_n = a_blocks.shape[0], a_blocks.shape[1], b_blocks.shape[1]
    c = _Counter()
    a_al = [[_align_a(a_blocks[i, t], br, c) for t in range(b_k)] for i in range(b_m)]  # line 1
    b_al = [[_align_b(b_blocks[t, j], br, c) for j in range(b_n)] for t in range(b_k)]  # line 2
    out = np.zeros((b_m, b_n, d, d), dtype=np.result_type(a_blocks, b_blocks))
    for r in range(br.rounds):                                  # line 3, R = d
        for t in range(b_k):                                    # line 4
            a_r = []
            for i in range(b_m):                                # lines 5–6, kept in memory
                a_r.append(_shift_left(a_al[i][t], r))
                c.a += br.shift_a
            b_r = []
            for j in range(b_n):                                # lines 7–8, kept in memory
                b_r.append(_shift_up(b_al[t][j], r))
                c.b += br.shift_b
            for i in range(b_m):                                # lines 9–11
                for j in range(b_n):
                    out[i, j] = out[i, j] + a_r[i] * b_r[j]
                    c.compute += br.product
    c.compute += br.extra * (b_m * b_n * b_k)
    return out, _result("Algorithm 4", c)


def assemble(blocks: np.ndarray) -> np.ndarray:
    """Blocks (rows, cols, d, d) → one (rows·d) × (cols·d) matrix."""
    rows, cols, d1, d2 = blocks.shape
    return blocks.transpose(0, 2, 1, 3).reshape(rows * d1, cols * d2)


def split(matrix: np.ndarray, d: int) -> np.ndarray:
    """One matrix → blocks (rows, cols, d, d); the inverse of ``assemble``."""
    r, c = matrix.shape
    if r % d or c % d:
        raise ShapeError(f"{r}×{c} matrix is not a whole number of {d}×{d} blocks")
    return matrix.reshape(r // d, d, c // d, d).transpose(0, 2, 1, 3)
