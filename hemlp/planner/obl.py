"""Optimal Block Layout (OBL) for encrypted block matrix multiplication.

Implements FHE4DMM [S0 = Chen et al., IEEE TPDS 2025] §IV-A:

* ``slots_required``   eq. (1): slots needed by one CGEMM of [17];
* ``cgemm_ops`` / ``cgemm_cost``  Table II: homomorphic op counts of one CGEMM;
* ``obl``              Algorithm 2 with the corrections of docs/design/pcmm-and-planning.md §4.2 (see below);
* ``obl_bruteforce``   exhaustive minimisation of eq. (3) subject to eq. (4);
* ``layout_cost``      the eq. (3) objective of a given layout.

Conventions
-----------
The product is ``A (m×k) · B (k×n)``.  A block layout ``[b_m, b_n, b_k]`` counts blocks
per dimension (it is *not* a processor grid).  Every dimension is first padded to the
next power of two (zero rows/columns), because Algorithm 2 divides dimensions by each
other and by √S_o and needs those ratios to be integers.

Corrections to Algorithm 2 as printed (each one checked against the paper's own
worked examples and by ``tests/planner/test_obl.py``):

* line 6 (sub-case 1.2): the block counts go to (argmax(m,n), argmin(m,n), k), not to the
  sorted (x, y, z): ``b_{argmax} = mn/S_o, b_{argmin} = 1, b_k = k/min(m,n)``.  The
  literal reading gives [1, 4, 1] for Fig. 4's ``OBL(256,64,256) = [1, 1, 4]``.
* line 18 (sub-case 2.2): only b_y (the smaller of m, n) is capped by min{P1, P2};
  b_x = P1/b_y.  The literal cap on b_x makes Table V LargeM [1024, 4, 1] infeasible.
  Among the admissible b_y we take the one minimising b_m + b_n ([S0] §V-B2):
  ``b_y = min(P2, floor_pow2(sqrt(P1)))``.
* line 8 (sub-case 1.3) — a third correction, found while proving Theorem 1: x must
  be max(m, n), and the test must be ``max(m, n) >= sqrt(S_o)`` rather than ``x·k >= S_o``.
  Read literally (x = max(m, n, k)), sub-case 1.4 is unreachable (k >= sqrt(S_o) and
  x >= k imply x·k >= S_o) and e.g. OBL(64, 64, 4096) with S_o = 128² returns [1, 1, 1024],
  whose S_r = 64² != S_o, breaking Theorem 1.  With the corrected test the result is the
  sub-case 1.4 layout [1, 1, 32] with S_r = 128² = S_o.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Callable, Literal, Mapping, Optional, Union

from hemlp.errors import ParameterError, ShapeError

#: Default per-operation costs (ROT and MULT need key switching; PMULT and ADD do not).
DEFAULT_OP_WEIGHTS: Mapping[str, float] = {"ROT": 1.0, "MULT": 1.0, "PMULT": 0.1, "ADD": 0.01}

#: A cost model of one CGEMM(m, n, k): A is m×k, B is k×n.
CostFn = Callable[[int, int, int], float]
#: Anything accepted where a cost model is expected: None (defaults), op weights, or a function.
CostSpec = Union[None, Mapping[str, float], CostFn]


# ---------------------------------------------------------------------------------------
# Small integer helpers
# ---------------------------------------------------------------------------------------

def is_power_of_two(x: int) -> bool:
    return isinstance(x, int) and x > 0 and (x & (x - 1)) == 0


def next_power_of_two(x: int) -> int:
    """Smallest power of two >= x (x >= 1)."""
    return 1 << (x - 1).bit_length()


def floor_power_of_two(x: float) -> int:
    """Largest power of two <= x (x >= 1)."""
    return 1 << (int(math.floor(x)).bit_length() - 1)


def power_of_two_divisors(x: int) -> list[int]:
    """1, 2, 4, ..., x for a power of two x."""
    return [1 << e for e in range(x.bit_length())]


def check_dims(**dims: int) -> None:
    """Raise ShapeError unless every given dimension is a positive int."""
    for name, value in dims.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ShapeError(
                f"matrix dimension {name}={value!r} must be a positive int; "
                f"pass the true row/column count of the matrix")


def check_slots(S_o: int, *, square: bool) -> None:
    """Raise ParameterError unless S_o is a power of two (and a perfect square if required)."""
    if isinstance(S_o, bool) or not isinstance(S_o, int) or not is_power_of_two(S_o):
        raise ParameterError(
            f"S_o={S_o!r} must be a power of two (the CKKS slot count N/2 of the chosen ring)")
    if square and math.isqrt(S_o) ** 2 != S_o:
        raise ParameterError(
            f"Algorithm 2 (OBL) needs sqrt(S_o) to be an integer, but S_o={S_o} = 2^{S_o.bit_length() - 1} "
            f"has an odd exponent; use S_o={S_o // 2} (square) or obl_bruteforce, which accepts any power of two")


# ---------------------------------------------------------------------------------------
# Eq. (1) and Table II
# ---------------------------------------------------------------------------------------

def slots_required(m: int, n: int, k: int) -> int:
    """Eq. (1): slots one CGEMM of [17] needs for A (m×k)·B (k×n): max{m,k}·max{k,n}."""
    return max(m, k) * max(k, n)


@dataclass(frozen=True)
class OpCounts:
    """Numbers of homomorphic operations (ADD, PMULT = plaintext×ct, ROT, MULT = ct×ct)."""

    add: float = 0
    pmult: float = 0
    rot: float = 0
    mult: float = 0

    def __add__(self, other: "OpCounts") -> "OpCounts":
        return OpCounts(self.add + other.add, self.pmult + other.pmult,
                        self.rot + other.rot, self.mult + other.mult)

    def __mul__(self, factor: float) -> "OpCounts":
        return OpCounts(self.add * factor, self.pmult * factor, self.rot * factor, self.mult * factor)

    __rmul__ = __mul__

    def weighted(self, weights: Optional[Mapping[str, float]] = None) -> float:
        """Sum of counts weighted by per-op costs (keys ADD, PMULT, ROT, MULT)."""
        w = check_weights(weights)
        return self.add * w["ADD"] + self.pmult * w["PMULT"] + self.rot * w["ROT"] + self.mult * w["MULT"]

    def __repr__(self) -> str:
        return f"OpCounts(ROT={self.rot:g}, MULT={self.mult:g}, PMULT={self.pmult:g}, ADD={self.add:g})"


def check_weights(weights: Optional[Mapping[str, float]]) -> Mapping[str, float]:
    if weights is None:
        return DEFAULT_OP_WEIGHTS
    unknown = set(weights) - set(DEFAULT_OP_WEIGHTS)
    if unknown:
        raise ParameterError(f"unknown op weight(s) {sorted(unknown)}; valid keys are ADD, PMULT, ROT, MULT")
    return {**DEFAULT_OP_WEIGHTS, **weights}


def cgemm_log_term(m: int, n: int, k: int) -> float:
    """The logarithmic term of Table II (replication/folding for rectangular CGEMM)."""
    d1, d2, d3 = sorted((m, n, k), reverse=True)
    if k == d1:
        return math.log2(k ** 3 / (d2 * d3 * d3))
    return math.log2(d1 * d2 / (d3 * d3))


def cgemm_ops(m: int, n: int, k: int) -> OpCounts:
    """Table II: op counts of CGEMM(m, n, k) in [17]; C_ADD = 2k + d3, C_ROT = 2k + 2d3."""
    check_dims(m=m, n=n, k=k)
    d3 = min(m, n, k)
    log_term = cgemm_log_term(m, n, k)
    return OpCounts(add=2 * k + d3 + log_term, pmult=2 * k, rot=2 * k + 2 * d3 + log_term, mult=d3)


def cgemm_cost(m: int, n: int, k: int, weights: Optional[Mapping[str, float]] = None) -> float:
    """Weighted Table II cost of one CGEMM(m, n, k) (defaults ROT=1, MULT=1, PMULT=0.1, ADD=0.01)."""
    return cgemm_ops(m, n, k).weighted(weights)


def as_cost_fn(cost: CostSpec) -> CostFn:
    """Normalise a cost spec (None, a weights dict, or a function) to a function (m, n, k) -> float."""
    if cost is None:
        return cgemm_cost
    if callable(cost):
        return cost
    weights = check_weights(cost)
    return lambda m, n, k: cgemm_cost(m, n, k, weights)


# ---------------------------------------------------------------------------------------
# Layout
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Layout:
    """A block layout [b_m, b_n, b_k] of A (m×k)·B (k×n) padded to (m_pad, n_pad, k_pad).

    Every block of A is block_m×block_k and every block of B is block_k×block_n; each
    block is one ciphertext of S_o slots, of which S_r (eq. 1) are used.
    """

    m: int
    n: int
    k: int
    m_pad: int
    n_pad: int
    k_pad: int
    b_m: int
    b_n: int
    b_k: int
    S_o: int
    case: str

    def __post_init__(self) -> None:
        for dim, pad, b in (("m", self.m_pad, self.b_m), ("n", self.n_pad, self.b_n), ("k", self.k_pad, self.b_k)):
            if b < 1 or pad % b:
                raise ShapeError(f"{b} blocks do not divide the padded {dim}={pad}")
            if pad < getattr(self, dim):
                raise ShapeError(f"padded {dim}={pad} is smaller than {dim}={getattr(self, dim)}")
        if self.S_r > self.S_o:
            raise ShapeError(f"blocks {self.block_dims} need S_r={self.S_r} slots > S_o={self.S_o} (eq. 4)")

    @property
    def blocks(self) -> tuple[int, int, int]:
        return (self.b_m, self.b_n, self.b_k)

    @property
    def num_blocks(self) -> int:
        """b_m·b_n·b_k, the number of block CGEMMs (the sub-target of eq. 3)."""
        return self.b_m * self.b_n * self.b_k

    @property
    def block_m(self) -> int:
        return self.m_pad // self.b_m

    @property
    def block_n(self) -> int:
        return self.n_pad // self.b_n

    @property
    def block_k(self) -> int:
        return self.k_pad // self.b_k

    @property
    def block_dims(self) -> tuple[int, int, int]:
        """(m, n, k) of one block CGEMM."""
        return (self.block_m, self.block_n, self.block_k)

    @property
    def R(self) -> int:
        """Rounds of ShiftByStep per block CGEMM: min of the block dims (Algorithm 4, line 3)."""
        return min(self.block_dims)

    @property
    def S_r(self) -> int:
        """Slots one block CGEMM needs (eq. 1)."""
        return slots_required(*self.block_dims)

    def __repr__(self) -> str:
        pad = ""
        if (self.m, self.n, self.k) != (self.m_pad, self.n_pad, self.k_pad):
            pad = f", padded from (m,n,k)=({self.m},{self.n},{self.k})"
        slots = "= S_o" if self.S_r == self.S_o else f"of S_o={self.S_o}"
        return (f"Layout([b_m,b_n,b_k]=[{self.b_m}, {self.b_n}, {self.b_k}], case {self.case}: "
                f"A {self.m_pad}×{self.k_pad} · B {self.k_pad}×{self.n_pad}{pad}; "
                f"blocks A {self.block_m}×{self.block_k}, B {self.block_k}×{self.block_n}; "
                f"S_r={self.S_r} {slots})")


def layout_cost(layout: Layout, cost: CostSpec = None) -> float:
    """Eq. (3): b_m·b_n·b_k · CGEMM(m/b_m, n/b_n, k/b_k)."""
    return layout.num_blocks * as_cost_fn(cost)(*layout.block_dims)


# ---------------------------------------------------------------------------------------
# Algorithm 2
# ---------------------------------------------------------------------------------------

def _algorithm2(m: int, n: int, k: int, S_o: int) -> tuple[tuple[int, int, int], str]:
    """Algorithm 2 on power-of-two dims with S_r(m,n,k) > S_o; returns ([b_m,b_n,b_k], case)."""
    s = math.isqrt(S_o)
    big, small = max(m, n), min(m, n)
    m_is_big = m >= n  # on ties (m == n) the larger count goes to b_m
    if k >= s:  # Case (1)
        if m >= s and n >= s:  # (1.1)
            return (m // s, n // s, k // s), "1.1"
        if m * n >= S_o:  # (1.2), corrected line 6
            b_big, b_k = m * n // S_o, k // small
            return ((b_big, 1, b_k) if m_is_big else (1, b_big, b_k)), "1.2"
        if big >= s:  # (1.3), corrected line 8
            return (1, 1, big * k // S_o), "1.3"
        return (1, 1, k // s), "1.4"  # (1.4)
    # Case (2): k < sqrt(S_o).  S_r > S_o forces k < big, so x = max(m, n).
    if k >= small:  # (2.1): y = k, z = min(m, n)
        P1, P2 = big * k // S_o, k // small
        b_k = min(P1, P2)
        b_big, b_small = P1 // b_k, 1
        case = "2.1"
    else:  # (2.2): y = min(m, n), z = k; corrected line 18 + min(b_m + b_n) refinement
        P1, P2 = big * small // S_o, small // k
        b_small = min(P2, floor_power_of_two(math.sqrt(P1)))
        b_big, b_k = P1 // b_small, 1
        case = "2.2"
    b_m, b_n = (b_big, b_small) if m_is_big else (b_small, b_big)
    return (b_m, b_n, b_k), case


def _padded(m: int, n: int, k: int) -> tuple[int, int, int]:
    return next_power_of_two(m), next_power_of_two(n), next_power_of_two(k)


def obl(m: int, n: int, k: int, S_o: int, pad: Literal["pow2", "block"] = "pow2") -> Layout:
    """Optimal Block Layout of A (m×k)·B (k×n) for S_o slots: Algorithm 2 of [S0] (corrected).

    Dimensions are padded to powers of two before Algorithm 2 runs.  If a single CGEMM
    fits (S_r(m, n, k) <= S_o) the layout is [1, 1, 1] (case "single"), as [S0] §IV-A
    prescribes; otherwise Theorem 1 holds and S_r of a block equals S_o exactly.

    ``pad="block"`` keeps the block shape found on the power-of-two dims but pads each
    dimension only to a multiple of its block size (trailing all-zero blocks dropped).
    This is how [S0] §VII-B gets 50 = 6400/128 row blocks for CIFAR-10.
    """
    check_dims(m=m, n=n, k=k)
    check_slots(S_o, square=True)
    if pad not in ("pow2", "block"):
        raise ParameterError(f"pad={pad!r}: use 'pow2' (pad to powers of two) or 'block' (to a block multiple)")
    mp, np_, kp = _padded(m, n, k)
    if slots_required(mp, np_, kp) <= S_o:
        blocks, case = (1, 1, 1), "single"
    else:
        blocks, case = _algorithm2(mp, np_, kp, S_o)
    layout = Layout(m, n, k, mp, np_, kp, *blocks, S_o=S_o, case=case)
    if case != "single" and layout.S_r != S_o:  # Theorem 1; an internal error, never user input
        raise AssertionError(f"Theorem 1 violated: {layout!r}")
    if pad == "block":
        bm, bn, bk = (-(-d // blk) for d, blk in zip((m, n, k), layout.block_dims))
        layout = Layout(m, n, k, bm * layout.block_m, bn * layout.block_n, bk * layout.block_k,
                        bm, bn, bk, S_o=S_o, case=case)
    return layout


def obl_bruteforce(m: int, n: int, k: int, S_o: int, cost: CostSpec = None) -> Layout:
    """Exact minimiser of eq. (3) subject to eq. (4) over power-of-two block counts.

    Enumerates every [b_m, b_n, b_k] of powers of two dividing the padded dims, keeps those
    with S_r(block) <= S_o, and minimises b_m b_n b_k·cost(block), then the sub-target
    b_m b_n b_k, then the number of encrypted input blocks (b_m + b_n)·b_k ([S0] §IV-A
    Remark, §V-B2), then lexicographically.  ``cost`` is None (Table II with default weights),
    a dict of op weights, or a function (m, n, k) -> float.  S_o may be any power of two.
    """
    check_dims(m=m, n=n, k=k)
    check_slots(S_o, square=False)
    cost_fn = as_cost_fn(cost)
    mp, np_, kp = _padded(m, n, k)
    if slots_required(mp, np_, kp) <= S_o:
        return Layout(m, n, k, mp, np_, kp, 1, 1, 1, S_o=S_o, case="single")
    best: Optional[tuple[float, int, int, tuple[int, int, int]]] = None
    for b in itertools.product(power_of_two_divisors(mp), power_of_two_divisors(np_), power_of_two_divisors(kp)):
        dims = (mp // b[0], np_ // b[1], kp // b[2])
        if slots_required(*dims) > S_o:
            continue
        count = b[0] * b[1] * b[2]
        key = (count * cost_fn(*dims), count, (b[0] + b[1]) * b[2], b)
        if best is None or key < best:
            best = key
    if best is None:  # cannot happen: 1×1×1 blocks (S_r = 1) are always feasible
        raise AssertionError("no feasible layout")
    return Layout(m, n, k, mp, np_, kp, *best[-1], S_o=S_o, case="bruteforce")
