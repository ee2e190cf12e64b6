"""Processor grids over a block layout: Algorithm 3, eqs. (5)–(7) of FHE4DMM [S0 §IV-B, §V-B/C].

The grid [p_m, p_n, p_k] partitions the *blocks* of the BIR (never raw matrix entries):
processor P_{ijt} computes the CGEMMs of A-blocks rows i·b_m/p_m ... and k-blocks
t·b_k/p_k ... (Algorithm 3, line 7).

Decisions (the paper leaves them open):

* Divisibility: p_m | b_m, p_n | b_n, p_k | b_k.  Algorithm 3 line 7 slices A* at
  i·b_m/p_m, which is an integer block index only then, and it keeps every processor's
  share of blocks (hence of CGEMMs) equal.  With power-of-two layouts the candidates are
  powers of two; ``pad="block"`` layouts (e.g. b_k = 50) admit all their divisors.
* Objective order: eqs. (5) and (6) grow in every p_*, so "minimise W, then maximise
  p_m p_n p_k" read literally always returns [1, 1, 1].  Computation dominates FHE latency
  ([S0] §II-C: "we prioritize reducing the total computation cost ... then ... communication
  under such fixed computations"), so we maximise p_m p_n p_k <= p first and minimise W among
  the grids that reach it.  Then Algorithm 3 lines 2–3 (p >= b_m b_n b_k → grid = OBL) are the
  special case where the only grid with the maximal product is the layout itself.
  Remaining ties go to the lexicographically smallest [p_m, p_n, p_k].
* Logarithms in eq. (7) are base 2 (butterfly collectives [32]); p in eq. (7) is p_m p_n p_k.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Mapping

from hemlp.errors import ParameterError, ShapeError
from hemlp.planner.obl import Layout

BlockIndex = tuple[int, int]
ProcIndex = tuple[int, int, int]


def divisors(x: int) -> list[int]:
    """All positive divisors of x, ascending."""
    small = [d for d in range(1, math.isqrt(x) + 1) if x % d == 0]
    return sorted(set(small + [x // d for d in small]))


def sigma(x: int) -> int:
    """σ(x) = min{x − 1, 1} of eq. (6): 0 for a single processor, 1 otherwise."""
    return min(x - 1, 1)


def w3d(layout: Layout, p_m: int, p_n: int, p_k: int, H: float = 1.0) -> float:
    """Eq. (5): W*_3D = (p_m b_k b_n + p_n b_m b_k + p_k b_m b_n)·H (total sub-cuboid surface)."""
    b_m, b_n, b_k = layout.blocks
    return (p_m * b_k * b_n + p_n * b_m * b_k + p_k * b_m * b_n) * H


def w4d(layout: Layout, p_m: int, p_n: int, p_k: int, H: float = 1.0) -> float:
    """Eq. (6): W*_3D plus the all-reduce/all-gather volume of the 4D optimisation."""
    b_m, b_n, b_k = layout.blocks
    extra = 0.5 * layout.R + 1
    return (p_n * b_m * b_k * (1 + extra * sigma(p_n))
            + p_m * b_k * b_n * (1 + extra * sigma(p_m))
            + p_k * b_m * b_n) * H


@dataclass(frozen=True)
class Grid:
    """A processor grid p_m × p_n × p_k chosen for a layout, with its objective value."""

    p_m: int
    p_n: int
    p_k: int
    p: int                      # processors available
    objective: str              # "W3D" (eq. 5) or "W4D" (eq. 6)
    W: float                    # objective value in units of H
    local_blocks: tuple[int, int, int] = field(default=(1, 1, 1))  # [b_m/p_m, b_n/p_n, b_k/p_k]
    # The Ray runtime's fourth axis (grid_store): the two polynomials of every RLWE ciphertext in different
    # processors (a PCMM is one GEMM per part; its epilogue acts on each polynomial alone).
    p_s: int = 1

    @property
    def dims(self) -> tuple[int, int, int]:
        return (self.p_m, self.p_n, self.p_k)

    @property
    def dims4(self) -> tuple[int, int, int, int]:
        return (self.p_m, self.p_n, self.p_k, self.p_s)

    @property
    def size(self) -> int:
        """p_m·p_n·p_k(·p_s), the processors the grid actually uses."""
        return self.p_m * self.p_n * self.p_k * self.p_s

    def __repr__(self) -> str:
        lm, ln, lk = self.local_blocks
        ps = f"×{self.p_s} parts" if self.p_s > 1 else ""
        return (f"Grid({self.p_m}×{self.p_n}×{self.p_k}{ps}, {self.size} of {self.p} processors, "
                f"{self.objective}={self.W:g}{' B' if self.objective == 'store bytes' else '·H'}, "
                f"blocks per processor [{lm}, {ln}, {lk}])")


def _check_p(p: int) -> None:
    if isinstance(p, bool) or not isinstance(p, int) or p < 1:
        raise ParameterError(f"processor count p={p!r} must be an int >= 1")


def candidate_grids(layout: Layout, p: int) -> list[tuple[int, int, int]]:
    """Every [p_m, p_n, p_k] with p_m | b_m, p_n | b_n, p_k | b_k and p_m p_n p_k <= p."""
    return [(pm, pn, pk)
            for pm in divisors(layout.b_m) if pm <= p
            for pn in divisors(layout.b_n) if pm * pn <= p
            for pk in divisors(layout.b_k) if pm * pn * pk <= p]


def _make_grid(layout: Layout, dims: tuple[int, int, int], p: int, name: str,
               objective: Callable[..., float]) -> Grid:
    pm, pn, pk = dims
    return Grid(pm, pn, pk, p, name, objective(layout, pm, pn, pk),
                (layout.b_m // pm, layout.b_n // pn, layout.b_k // pk))


def search_grid(layout: Layout, p: int, objective: Callable[..., float], name: str) -> Grid:
    """Enumerate all candidate grids: maximise p_m p_n p_k, then minimise the objective."""
    _check_p(p)
    best = min(candidate_grids(layout, p),
               key=lambda g: (-(g[0] * g[1] * g[2]), objective(layout, *g), g))
    return _make_grid(layout, best, p, name, objective)


def grid_3d(layout: Layout, p: int) -> Grid:
    """Algorithm 3 lines 2–5: the OBL itself if p >= b_m b_n b_k, else the eq. (5) optimum."""
    _check_p(p)
    if p >= layout.num_blocks:
        return _make_grid(layout, layout.blocks, p, "W3D", w3d)
    return search_grid(layout, p, w3d, "W3D")


def grid_4d(layout: Layout, p: int) -> Grid:
    """Algorithm 3 with eq. (6) replacing eq. (5) ([S0] §V-B2, "Task Scheduling")."""
    _check_p(p)
    if p >= layout.num_blocks:
        return _make_grid(layout, layout.blocks, p, "W4D", w4d)
    return search_grid(layout, p, w4d, "W4D")


def latency_4d(grid: Grid, layout: Layout, alpha: float, beta: float, H: float) -> float:
    """Eq. (7): L = α[2 log(p_m p_n) + (p_m − 1) + (p_n − 1) + 2 log p] + 2β·W*_4D/p, p = p_m p_n p_k."""
    pm, pn, pk = grid.dims
    p = grid.size
    latency_terms = 2 * math.log2(pm * pn) + (pm - 1) + (pn - 1) + 2 * math.log2(p)
    return alpha * latency_terms + 2 * beta * w4d(layout, pm, pn, pk, H) / p


@dataclass(frozen=True)
class ProcessorShare:
    """What P_{ijt} holds after step 1 (broadcast): the A-blocks 𝒜_{i,t} and B-blocks ℬ_{t,j}."""

    a_blocks: tuple[BlockIndex, ...]   # (row block, k block) indices into A*
    b_blocks: tuple[BlockIndex, ...]   # (k block, column block) indices into B*
    a_from_client: bool                # Algorithm 3 line 8: 𝒜_{i,t} goes to P_{i0t}
    b_from_client: bool                # ℬ_{t,j} goes to P_{0jt}


@dataclass(frozen=True)
class Partition:
    """Algorithm 3 lines 7–8 for every processor P_{ijt} of a grid."""

    layout: Layout
    grid: Grid
    shares: Mapping[ProcIndex, ProcessorShare]

    def __getitem__(self, proc: ProcIndex) -> ProcessorShare:
        return self.shares[proc]

    def __len__(self) -> int:
        return len(self.shares)

    def __repr__(self) -> str:
        lm, ln, lk = self.grid.local_blocks
        return (f"Partition({len(self.shares)} processors {self.grid.p_m}×{self.grid.p_n}×{self.grid.p_k} "
                f"over blocks [{self.layout.b_m}, {self.layout.b_n}, {self.layout.b_k}]: each holds "
                f"{lm}×{lk} A-blocks and {lk}×{ln} B-blocks)")


def partition(layout: Layout, grid: Grid) -> Partition:
    """Algorithm 3 line 7: 𝒜_{i,t} = A*[i b_m/p_m : (i+1) b_m/p_m; t b_k/p_k : (t+1) b_k/p_k], ℬ_{t,j} alike."""
    pm, pn, pk = grid.dims
    for name, b, q in (("m", layout.b_m, pm), ("n", layout.b_n, pn), ("k", layout.b_k, pk)):
        if b % q:
            raise ShapeError(f"p_{name}={q} does not divide b_{name}={b}; grids must divide the block layout")
    sm, sn, sk = layout.b_m // pm, layout.b_n // pn, layout.b_k // pk
    shares = {}
    for i in range(pm):
        for j in range(pn):
            for t in range(pk):
                a = tuple((r, c) for r in range(i * sm, (i + 1) * sm) for c in range(t * sk, (t + 1) * sk))
                b = tuple((r, c) for r in range(t * sk, (t + 1) * sk) for c in range(j * sn, (j + 1) * sn))
                shares[(i, j, t)] = ProcessorShare(a, b, a_from_client=(j == 0), b_from_client=(i == 0))
    return Partition(layout, grid, shares)


# ---------------------------------------------------------------------------------------------------------------
# Bytes through an object store (the Ray runtime, hemlp.runtime.ray)
# ---------------------------------------------------------------------------------------------------------------
#
# Eq. (5) counts every block in units of one ciphertext H.  In a PCMM the weight blocks are plaintext integers
# (U~ = round(Delta U), int64 entries of 8 bytes) while H is a whole ciphertext (2 (l+1) N 8 bytes, 1.8 MB at
# N = 2^14, l = 6): read literally, eq. (5)'s weight term p_n b_m b_k H overstates the traffic of a 128 x 784 layer
# by 2 (l+1) N = 229 376 x.  The runtime's model below sizes every term by what it carries:
#
#   reads  = p_m d_in c H_in          input blocks: each output-row block's tasks read their reduction rows
#                                     and column block (a gathered product reads all d_in rows: x p_k)
#          + p_n d1 d2 H_w            weight blocks U~[rows, reduction rows], H_w = 8 bytes an entry
#          + [p_k > 1] p_k d_out c H_in   partial sums read by the reduce tasks
#   writes = [p_k > 1] p_k d_out c H_in   partial sums (before the rescale: input level)
#          + d_out c H_out            the layer's output blocks (after the rescale, the bias and every fused
#                                     elementwise step: the plan's output level)
#          + d1 d2 H_w                the weight blocks, put once by the driver
#
# with d1 x d2 the weight matrix, d_in the encrypted rows read (d2 for a plain PCMM), d_out = d1 P the output rows
# (P gathered positions), c the ciphertext columns (chunks), H_in / H_out one input / output ciphertext's bytes.
# Eq. (5)'s three terms are the reads' (input, weight, partial-sum) terms with H_in and H_w in place of H.


def pcmm_store_bytes(dims, d1: int, d2: int, c: int, H_in: float, H_out: float,
                     H_w: float = 8.0, d_in: int | None = None, P: int = 1) -> dict:
    """Bytes a PCMM on grid dims = (p_m, p_n, p_k[, p_s]) reads from and writes to the object store, term by term.

    Blocks are stored one object per ciphertext part, so a task of a p_s = 2 grid reads only its part: the input
    term does not grow with p_s; each of its tasks reads its weight block (p_s copies). Partial sums (p_k > 1) are
    written by the partial tasks and read by the reduce tasks at the input's size."""
    pm, pn, pk = dims[:3]
    ps = dims[3] if len(dims) > 3 else 1
    d_in = d2 if d_in is None else d_in
    d_out = d1 * P
    gathered = P > 1 or d_in != d2
    inputs = pm * (pk if gathered else 1) * d_in * c * H_in
    partials = pk * d_out * c * H_in if pk > 1 else 0.0
    reads = dict(inputs=inputs, weights=pn * ps * d1 * d2 * H_w, partials=partials)
    writes = dict(partials=partials, outputs=d_out * c * H_out, weights=d1 * d2 * H_w)
    return dict(reads=reads, writes=writes, total=sum(reads.values()) + sum(writes.values()))


def grid_store(d1: int, c: int, d2: int, p: int, H_in: float, H_out: float, H_w: float = 8.0,
               d_in: int | None = None, P: int = 1, parts: int = 1, deferred_H: float | None = None) -> Grid:
    """The runtime's grid for one PCMM on p workers: eq. (5)'s search with pcmm_store_bytes as the objective.

    Candidates: p_m <= d1, p_n <= c, p_k <= d2 (blocks need not divide evenly), p_s <= parts (1 or 2: the
    ciphertext parts), p_m p_n p_k p_s <= p. As in search_grid the product is maximised first (computation
    dominates), then the total bytes read + written are minimised, ties to the lexicographically smallest grid.
    Every byte counts, also on one node where a task maps its arguments zero-copy: a write is a copy into the
    store, and a task processes every input byte it reads (the exact GEMM splits its input block into
    floating-point digits: with p_m row blocks the p_m tasks each split the whole input, the compute twin of eq.
    (5)'s broadcast term); across nodes a read is also a transfer. So a wide layer (d2 >> d1, e.g. 784 -> 128)
    splits the parts (each input row split once, no partial sums) rather than the reduction (partial sums d1 rows
    wide, twice), a square one splits the output rows or the parts, and several chunk columns split the columns.
    deferred_H: when elementwise steps follow (fused into the PCMM's tasks for p_s = 1), the bytes of one
    ciphertext after the PCMM's rescale; a p_s = 2, p_k = 1 grid runs those steps as a wave of their own, which
    writes and reads that intermediate once more (counted here, d1 P c (2 deferred_H))."""
    _check_p(p)
    if parts not in (1, 2):
        raise ParameterError(f"parts={parts!r}: a ciphertext has 1 or 2 splittable parts")
    cands = [(pm, pn, pk, ps) for pm in range(1, min(d1, p) + 1) for pn in range(1, min(c, p // pm) + 1)
             for pk in range(1, min(d2, p // (pm * pn)) + 1) for ps in range(1, min(parts, p // (pm * pn * pk)) + 1)]

    def total(g):
        if g[3] > 1 and g[2] == 1 and deferred_H is not None:  # p_k > 1: the reduce tasks hold both parts
            return (pcmm_store_bytes(g, d1, d2, c, H_in, deferred_H, H_w, d_in, P)["total"]
                    + d1 * P * c * (deferred_H + H_out))
        return pcmm_store_bytes(g, d1, d2, c, H_in, H_out, H_w, d_in, P)["total"]

    best = min(cands, key=lambda g: (-(g[0] * g[1] * g[2] * g[3]), total(g), g))
    return Grid(best[0], best[1], best[2], p, "store bytes", total(best),
                (-(-d1 // best[0]), -(-c // best[1]), -(-d2 // best[2])), best[3])
