"""Block-layout planning across a chain of encrypted matmuls (docs/design/pcmm-and-planning.md §4.6 [R]).

[S0] §VII-B2 says the OBLs of consecutive MMs interact, that the problem "resembles matrix
chain multiplication" and that they solve it "in a greedy way" (Appendix C, not public).
This module is the reconstruction of docs/design/pcmm-and-planning.md §4.6:

* the chain is ``Y_i = W_i · f_i(Y_{i-1})``: MM i multiplies A = W_i (m_i × k_i) by
  B = Y_{i-1} (k_i × n); every MM shares the batch dimension n, and k_{i+1} = m_i;
* a plan fixes one column blocking c (shared by all MMs, since every Y has n columns)
  and, per MM, the row blocking r_i = b_m of its output and the k blocking b_k of its
  input.  MM i's input is the previous output, so b_k^{(i)} = r_{i-1} unless a
  re-blocking step (cost ``reblock_cost_fn``, ``reblock_depth`` levels) is inserted;
* the cost is eq. (3) per MM plus the element-wise activation f_i on the r_i·c
  ciphertexts of Y_i plus re-blocking;
* depth: each CGEMM costs ``cgemm_depth`` = 3 CKKS levels (docs/design/pcmm-and-planning.md §4.7), each activation
  its own depth, each re-blocking ``reblock_depth`` (a masking PMULT and its rescale).

``plan_chain`` is the exact DP over (MM index, r_i, levels used) for each c;
``plan_chain_exhaustive`` enumerates every assignment (the test oracle);
``plan_chain_greedy`` is the greedy of docs/design/pcmm-and-planning.md §4.6 (heaviest MM first, fixed to its OBL).

``mcm_order`` is the classic matrix-chain-order DP for purely linear chains, optionally
with a depth budget (tree height × 3 levels); ``mcm_bruteforce`` enumerates every
parenthesisation.

All dimensions are padded to powers of two, as in ``obl``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Iterator, Mapping, Optional, Sequence

from hemlp.errors import LevelError, ParameterError, ShapeError
from hemlp.planner.obl import (
    CostFn,
    CostSpec,
    Layout,
    check_weights,
    as_cost_fn,
    check_dims,
    check_slots,
    layout_cost,
    next_power_of_two,
    obl,
    power_of_two_divisors,
    slots_required,
)

#: (m, n, k) of one MM: A (m×k) · B (k×n), as everywhere in the planner.
Shape = tuple[int, int, int]
#: Re-blocking cost: (rows of the activation, n, c, row blocks before, row blocks after) -> cost.
ReblockCostFn = Callable[[int, int, int, int, int], float]

CGEMM_DEPTH = 3  # CKKS levels of one CGEMM (σ/τ, ε/ω masks, ct×ct MULT; docs/design/pcmm-and-planning.md §4.7, §5.3)


@dataclass(frozen=True)
class Activation:
    """An element-wise layer after an MM: multiplicative depth and cost per ciphertext."""

    depth: int = 1
    cost_per_ciphertext: float = 1.0
    name: str = "x^2"


def default_reblock_cost(rows: int, n: int, c: int, r_from: int, r_to: int,
                         weights: Optional[Mapping[str, float]] = None) -> float:
    """Re-blocking r_from → r_to row blocks [R, docs/design/pcmm-and-planning.md §4.6]: each of max(r_from, r_to)·c
    ciphertexts needs |log2(r_to/r_from)| rounds of mask (PMULT), rotate (ROT) and ADD."""
    w = check_weights(weights)
    steps = abs(math.log2(r_to / r_from))
    return max(r_from, r_to) * c * steps * (w["ROT"] + w["PMULT"] + w["ADD"])


# ---------------------------------------------------------------------------------------
# Plans
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ChainStep:
    """MM i of a plan: its layout, and what it costs (re-blocking its input included)."""

    layout: Layout
    mm_cost: float
    activation: Optional[Activation]
    activation_cost: float
    reblock_from: Optional[int]     # row blocks of the incoming activation, if re-blocked
    reblock_cost: float
    levels_after: int               # levels consumed once this MM (and its activation) is done

    @property
    def cost(self) -> float:
        return self.mm_cost + self.activation_cost + self.reblock_cost


@dataclass(frozen=True)
class ChainPlan:
    """A block layout for every MM of a chain (one shared column blocking c)."""

    steps: tuple[ChainStep, ...]
    c: int
    total_cost: float
    depth: int
    depth_budget: Optional[int]
    method: str

    @property
    def layouts(self) -> tuple[Layout, ...]:
        return tuple(s.layout for s in self.steps)

    @property
    def blocks(self) -> tuple[tuple[int, int, int], ...]:
        return tuple(s.layout.blocks for s in self.steps)

    @property
    def reblocks(self) -> int:
        return sum(s.reblock_from is not None for s in self.steps)

    def __repr__(self) -> str:
        budget = "" if self.depth_budget is None else f" of {self.depth_budget}"
        lines = [f"ChainPlan({self.method}: {len(self.steps)} MMs, column blocks c={self.c}, "
                 f"cost {self.total_cost:.6g}, depth {self.depth}{budget} levels)"]
        for i, s in enumerate(self.steps, 1):
            lay = s.layout
            if s.reblock_from is not None:
                lines.append(f"  reblock Y{i - 1}: {s.reblock_from} → {lay.b_k} row blocks, cost {s.reblock_cost:.6g}")
            lines.append(f"  MM{i}: A {lay.m_pad}×{lay.k_pad} · B {lay.k_pad}×{lay.n_pad}  "
                         f"[b_m,b_n,b_k]=[{lay.b_m}, {lay.b_n}, {lay.b_k}]  blocks "
                         f"{lay.block_m}×{lay.block_k}·{lay.block_k}×{lay.block_n} (S_r={lay.S_r})  "
                         f"cost {s.mm_cost:.6g}")
            if s.activation is not None:
                lines.append(f"       {s.activation.name} (depth {s.activation.depth}) on "
                             f"{lay.b_m * lay.b_n} ciphertext(s), cost {s.activation_cost:.6g}")
            lines.append(f"       levels used: {s.levels_after}")
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# The planning problem (validated, padded), shared by the three planners
# ---------------------------------------------------------------------------------------

class _Chain:
    """A validated chain: padded dims, cost components and depth accounting."""

    def __init__(self, shapes: Sequence[Shape], S_o: int, depth_budget: Optional[int],
                 cost_fn: CostSpec, reblock_cost_fn: Optional[ReblockCostFn],
                 activations: Optional[Sequence[Optional[Activation]]], cgemm_depth: int, reblock_depth: int):
        shapes = [tuple(s) for s in shapes]
        if not shapes:
            raise ShapeError("the chain has no matmuls; pass a list of (m, n, k) shapes")
        for i, s in enumerate(shapes, 1):
            if len(s) != 3:
                raise ShapeError(f"shape {i} is {s!r}; each MM is given as (m, n, k)")
            check_dims(**{f"m{i}": s[0], f"n{i}": s[1], f"k{i}": s[2]})
        for i in range(1, len(shapes)):
            (m_prev, n_prev, _), (_, n, k) = shapes[i - 1], shapes[i]
            if k != m_prev:
                raise ShapeError(f"MM{i + 1} has k={k} but MM{i} outputs m={m_prev} rows; "
                                 f"a chain needs k_(i+1) = m_i")
            if n != n_prev:
                raise ShapeError(f"MM{i + 1} has n={n} but MM{i} has n={n_prev}; the batch dim must be shared")
        check_slots(S_o, square=False)
        for name, value in (("cgemm_depth", cgemm_depth), ("reblock_depth", reblock_depth)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ParameterError(f"{name}={value!r} must be an int >= 0")
        if depth_budget is not None and (isinstance(depth_budget, bool) or not isinstance(depth_budget, int)
                                         or depth_budget < 0):
            raise ParameterError(f"depth_budget={depth_budget!r} must be None or an int >= 0")
        L = len(shapes)
        acts = list(activations or [])
        if len(acts) not in (0, L - 1, L):
            raise ShapeError(f"{len(acts)} activations for {L} MMs: give one after each MM but the last "
                             f"({L - 1}) or one after every MM ({L})")
        acts += [None] * (L - len(acts))
        self.shapes = shapes
        self.L = L
        self.S_o = S_o
        self.budget = depth_budget
        self.cost = as_cost_fn(cost_fn)
        self.reblock_fn = reblock_cost_fn
        self.acts: list[Optional[Activation]] = acts
        self.cgemm_depth = cgemm_depth
        self.reblock_depth = reblock_depth
        self.m = [next_power_of_two(s[0]) for s in shapes]
        self.k = [next_power_of_two(s[2]) for s in shapes]
        self.n = next_power_of_two(shapes[0][1])
        self._mm_costs: dict[tuple[int, int, int, int], float] = {}
        self._reblock_costs: dict[tuple[int, int, int, int], float] = {}
        self.base_depth = L * cgemm_depth + sum(a.depth for a in acts if a is not None)
        if depth_budget is not None and self.base_depth > depth_budget:
            act_depth = self.base_depth - L * cgemm_depth
            raise LevelError(
                f"the chain needs at least {self.base_depth} levels ({L} CGEMMs × {cgemm_depth} + "
                f"{act_depth} for activations) but the budget is {depth_budget}: "
                f"{self.base_depth - depth_budget} level(s) missing; bootstrap, or use a larger modulus chain")

    def column_blockings(self) -> list[int]:
        return power_of_two_divisors(self.n)

    def options(self, i: int, c: int) -> list[tuple[int, int]]:
        """Feasible (r_i, b_k) of MM i for column blocking c: S_r(block) <= S_o (eq. 4)."""
        nb = self.n // c
        return [(r, bk) for r in power_of_two_divisors(self.m[i]) for bk in power_of_two_divisors(self.k[i])
                if slots_required(self.m[i] // r, nb, self.k[i] // bk) <= self.S_o]

    def mm_cost(self, i: int, r: int, c: int, bk: int) -> float:
        """Eq. (3) for MM i with layout [r, c, bk] (memoised: the planners ask many times)."""
        key = (i, r, c, bk)
        if key not in self._mm_costs:
            self._mm_costs[key] = r * c * bk * self.cost(self.m[i] // r, self.n // c, self.k[i] // bk)
        return self._mm_costs[key]

    def act_cost(self, i: int, r: int, c: int) -> float:
        act = self.acts[i]
        return 0.0 if act is None else r * c * act.cost_per_ciphertext

    def act_depth(self, i: int) -> int:
        act = self.acts[i]
        return 0 if act is None else act.depth

    def reblock(self, i: int, r_prev: int, bk: int, c: int) -> Optional[float]:
        """Cost of feeding r_prev row blocks into MM i that wants bk; None if not allowed."""
        if r_prev == bk:
            return 0.0
        if self.reblock_fn is None:
            return None
        key = (i, r_prev, bk, c)
        if key not in self._reblock_costs:
            self._reblock_costs[key] = float(self.reblock_fn(self.k[i], self.n, c, r_prev, bk))
        return self._reblock_costs[key]

    def evaluate(self, c: int, assignment: Sequence[tuple[int, int]]) -> Optional[tuple[float, int]]:
        """(total cost, depth) of a full assignment [(r_i, bk_i)], or None if it is not allowed."""
        total, depth = 0.0, 0
        for i, (r, bk) in enumerate(assignment):
            if i > 0:
                rb = self.reblock(i, assignment[i - 1][0], bk, c)
                if rb is None:
                    return None
                total += rb
                depth += self.reblock_depth if assignment[i - 1][0] != bk else 0
            total += self.mm_cost(i, r, c, bk) + self.act_cost(i, r, c)
            depth += self.cgemm_depth + self.act_depth(i)
        if self.budget is not None and depth > self.budget:
            return None
        return total, depth

    def build(self, c: int, assignment: Sequence[tuple[int, int]], method: str) -> ChainPlan:
        steps, levels, total = [], 0, 0.0
        for i, (r, bk) in enumerate(assignment):
            rb_from, rb_cost = None, 0.0
            if i > 0 and assignment[i - 1][0] != bk:
                rb_from = assignment[i - 1][0]
                rb_cost = self.reblock(i, rb_from, bk, c)
                levels += self.reblock_depth
            levels += self.cgemm_depth + self.act_depth(i)
            m, n, k = self.shapes[i]
            layout = Layout(m, n, k, self.m[i], self.n, self.k[i], r, c, bk, S_o=self.S_o, case="chain")
            step = ChainStep(layout, self.mm_cost(i, r, c, bk), self.acts[i], self.act_cost(i, r, c),
                             rb_from, rb_cost, levels)
            steps.append(step)
            total += step.cost
        return ChainPlan(tuple(steps), c, total, levels, self.budget, method)


def _no_plan(chain: _Chain) -> LevelError:
    # Only reachable when re-blocking is needed but the budget leaves no room for it.
    return LevelError(f"no layout assignment fits {chain.budget} levels; the chain needs "
                      f"{chain.base_depth} plus {chain.reblock_depth} per re-blocking step")


# ---------------------------------------------------------------------------------------
# Exact DP
# ---------------------------------------------------------------------------------------

def plan_chain(shapes: Sequence[Shape], S_o: int, depth_budget: Optional[int] = None,
               cost_fn: CostSpec = None, reblock_cost_fn: Optional[ReblockCostFn] = None, *,
               activations: Optional[Sequence[Optional[Activation]]] = None,
               cgemm_depth: int = CGEMM_DEPTH, reblock_depth: int = 1) -> ChainPlan:
    """Optimal layouts for a chain of MMs by DP (docs/design/pcmm-and-planning.md §4.6):

        F[i][r_i, ℓ] = min over (r_{i-1}, ℓ') and b_k of
                       F[i-1][r_{i-1}, ℓ'] + Reblock(r_{i-1} → b_k) + eq.(3)(MM i, [r_i, c, b_k]) + f_i cost

    for every shared column blocking c, where ℓ counts the levels used; states over
    ``depth_budget`` are dropped.  ``cost_fn`` prices one CGEMM (default Table II);
    ``reblock_cost_fn`` None forbids re-blocking (b_k^{(i)} must equal r_{i-1}), see
    ``default_reblock_cost``.  ``activations[i]`` follows MM i.

    Raises LevelError (naming the missing levels) if the chain cannot fit the budget.
    """
    chain = _Chain(shapes, S_o, depth_budget, cost_fn, reblock_cost_fn, activations, cgemm_depth, reblock_depth)
    best = None  # (cost, depth, c, assignment)
    for c in chain.column_blockings():
        # state (r_i, levels) -> (cost, assignment so far)
        states: dict[tuple[int, int], tuple[float, tuple[tuple[int, int], ...]]] = {}
        for r, bk in chain.options(0, c):
            lv = chain.cgemm_depth + chain.act_depth(0)
            if chain.budget is not None and lv > chain.budget:
                continue
            cost = chain.mm_cost(0, r, c, bk) + chain.act_cost(0, r, c)
            _relax(states, (r, lv), cost, ((r, bk),))
        for i in range(1, chain.L):
            nxt: dict[tuple[int, int], tuple[float, tuple[tuple[int, int], ...]]] = {}
            options = chain.options(i, c)
            for (r_prev, lv_prev), (cost_prev, path) in states.items():
                for r, bk in options:
                    rb = chain.reblock(i, r_prev, bk, c)
                    if rb is None:
                        continue
                    lv = (lv_prev + (chain.reblock_depth if bk != r_prev else 0)
                          + chain.cgemm_depth + chain.act_depth(i))
                    if chain.budget is not None and lv > chain.budget:
                        continue
                    cost = cost_prev + rb + chain.mm_cost(i, r, c, bk) + chain.act_cost(i, r, c)
                    _relax(nxt, (r, lv), cost, path + ((r, bk),))
            states = nxt
        for (_, lv), (cost, path) in states.items():
            key = (cost, lv, c, path)
            if best is None or key < best:
                best = key
    if best is None:
        raise _no_plan(chain)
    return chain.build(best[2], best[3], "dp")


def _relax(states: dict, key: tuple[int, int], cost: float, path: tuple) -> None:
    old = states.get(key)
    if old is None or (cost, path) < old:
        states[key] = (cost, path)


# ---------------------------------------------------------------------------------------
# Exhaustive search (the oracle) and the greedy heuristic
# ---------------------------------------------------------------------------------------

def plan_chain_exhaustive(shapes: Sequence[Shape], S_o: int, depth_budget: Optional[int] = None,
                          cost_fn: CostSpec = None, reblock_cost_fn: Optional[ReblockCostFn] = None, *,
                          activations: Optional[Sequence[Optional[Activation]]] = None,
                          cgemm_depth: int = CGEMM_DEPTH, reblock_depth: int = 1) -> ChainPlan:
    """Enumerate every c and every per-MM (r_i, b_k) with S_r <= S_o; keep the cheapest that fits."""
    chain = _Chain(shapes, S_o, depth_budget, cost_fn, reblock_cost_fn, activations, cgemm_depth, reblock_depth)
    best = None
    for c in chain.column_blockings():
        for assignment in itertools.product(*(chain.options(i, c) for i in range(chain.L))):
            result = chain.evaluate(c, assignment)
            if result is None:
                continue
            key = (result[0], result[1], c, assignment)
            if best is None or key < best:
                best = key
    if best is None:
        raise _no_plan(chain)
    return chain.build(best[2], best[3], "exhaustive")


def plan_chain_greedy(shapes: Sequence[Shape], S_o: int, depth_budget: Optional[int] = None,
                      cost_fn: CostSpec = None, reblock_cost_fn: Optional[ReblockCostFn] = None, *,
                      activations: Optional[Sequence[Optional[Activation]]] = None,
                      cgemm_depth: int = CGEMM_DEPTH, reblock_depth: int = 1) -> ChainPlan:
    """The greedy of docs/design/pcmm-and-planning.md §4.6 (the style [S0] §VII-B2 names; its Appendix C is not public).

    1. Sort the MMs by the eq. (3) cost of their standalone OBL, heaviest first.
    2. Fix the heaviest MM to its OBL; its b_n becomes the shared column blocking c.
    3. For each next MM in that order pick the cheapest feasible (r_i, b_k), counting the
       re-blocking needed against already fixed neighbours (hard equality if re-blocking is
       forbidden or the depth budget has no room left for it).

    Needs a square S_o (it runs Algorithm 2).  Raises ShapeError if a neighbour's fixed
    layout leaves an MM without a feasible layout, LevelError if only the depth budget does
    (the DP never gets stuck this way).
    """
    chain = _Chain(shapes, S_o, depth_budget, cost_fn, reblock_cost_fn, activations, cgemm_depth, reblock_depth)
    standalone = [obl(*s, S_o) for s in chain.shapes]
    order = sorted(range(chain.L), key=lambda i: (-layout_cost(standalone[i], chain.cost), i))
    heaviest = standalone[order[0]]
    c = heaviest.b_n
    fixed: dict[int, tuple[int, int]] = {order[0]: (heaviest.b_m, heaviest.b_k)}
    spare = math.inf if chain.budget is None else chain.budget - chain.base_depth
    for i in order[1:]:
        best, blocked_by_depth = None, False
        for r, bk in chain.options(i, c):
            cost = chain.mm_cost(i, r, c, bk) + chain.act_cost(i, r, c)
            links = []
            if i - 1 in fixed:
                links.append((i, fixed[i - 1][0], bk))      # previous output → my input
            if i + 1 in fixed:
                links.append((i + 1, r, fixed[i + 1][1]))  # my output → next input
            reblock_costs = [chain.reblock(mm, r_from, r_to, c) for mm, r_from, r_to in links]
            if None in reblock_costs:
                continue  # would need a forbidden re-blocking
            cost += sum(reblock_costs)
            levels = sum(chain.reblock_depth for _, r_from, r_to in links if r_from != r_to)
            if levels > spare:
                blocked_by_depth = True
                continue
            key = (cost, r * bk, r, bk, levels)
            if best is None or key < best:
                best = key
        if best is None and blocked_by_depth:
            raise LevelError(f"greedy planner: MM{i + 1} needs a re-blocking step ({chain.reblock_depth} "
                             f"level(s)) but only {spare} of the budget {chain.budget} remain; "
                             f"use plan_chain (the DP) or raise the budget")
        if best is None:
            raise ShapeError(f"greedy planner: MM{i + 1} has no feasible layout next to its neighbours' "
                             f"fixed layouts (c={c}); use plan_chain (the DP) instead")
        fixed[i] = (best[2], best[3])
        spare -= best[4]
    assignment = tuple(fixed[i] for i in range(chain.L))
    if chain.evaluate(c, assignment) is None:  # cannot happen: links and spare were checked
        raise AssertionError("greedy produced an invalid assignment")
    return chain.build(c, assignment, "greedy")


# ---------------------------------------------------------------------------------------
# Classic matrix-chain order (purely linear chains)
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MCMPlan:
    """A parenthesisation of A_1·…·A_n with its cost and multiplicative depth."""

    order: str          # e.g. "((A1·A2)·A3)"
    cost: float
    height: int         # product-tree height: MMs on the critical path
    depth: int          # height × cgemm_depth levels

    def __repr__(self) -> str:
        return f"MCMPlan({self.order}, cost {self.cost:.6g}, height {self.height}, depth {self.depth} levels)"


def _check_mcm(dims: Sequence[int], depth_budget: Optional[int], cgemm_depth: int) -> int:
    """Validate; return the maximal tree height allowed."""
    if len(dims) < 2:
        raise ShapeError(f"dims={list(dims)} describes no matrix; A_i is dims[i-1] × dims[i]")
    check_dims(**{f"dims[{i}]": d for i, d in enumerate(dims)})
    if isinstance(cgemm_depth, bool) or not isinstance(cgemm_depth, int) or cgemm_depth < 1:
        raise ParameterError(f"cgemm_depth={cgemm_depth!r} must be an int >= 1")
    count = len(dims) - 1
    if depth_budget is None:
        return count - 1
    need = cgemm_depth * math.ceil(math.log2(count)) if count > 1 else 0
    if depth_budget < need:
        raise LevelError(f"multiplying {count} matrices needs a product tree of height >= "
                         f"{math.ceil(math.log2(count))}, i.e. {need} levels, but the budget is "
                         f"{depth_budget}: {need - depth_budget} level(s) missing")
    return min(count - 1, depth_budget // cgemm_depth)


def mcm_order(dims: Sequence[int], cost: CostFn, depth_budget: Optional[int] = None,
              cgemm_depth: int = CGEMM_DEPTH) -> MCMPlan:
    """Matrix-chain order DP: M[i,j,h] = min_s M[i,s,h-1] + M[s+1,j,h-1] + cost(d_i, d_{j+1}, d_{s+1}).

    A_i is dims[i-1] × dims[i].  ``cost(m, n, k)`` prices A (m×k)·B (k×n), e.g. ``obl_cost_fn``
    (eq. 3 at the OBL).  With ``depth_budget`` the product tree's height h is capped at
    depth_budget // cgemm_depth (each level of the tree is one CGEMM deep).
    """
    max_height = _check_mcm(dims, depth_budget, cgemm_depth)

    @lru_cache(maxsize=None)
    def best(i: int, j: int, h: int) -> tuple[float, int, str]:
        if i == j:
            return 0.0, 0, f"A{i + 1}"
        if h == 0:
            return math.inf, 0, ""
        result = (math.inf, 0, "")
        for s in range(i, j):
            left, right = best(i, s, h - 1), best(s + 1, j, h - 1)
            total = left[0] + right[0] + cost(dims[i], dims[j + 1], dims[s + 1])
            candidate = (total, 1 + max(left[1], right[1]), f"({left[2]}·{right[2]})")
            if candidate[:2] < result[:2]:
                result = candidate
        return result

    total, height, order = best(0, len(dims) - 2, max_height)
    return MCMPlan(order, total, height, height * cgemm_depth)


def _trees(dims: Sequence[int], i: int, j: int, cost: CostFn) -> Iterator[tuple[float, int, str]]:
    if i == j:
        yield 0.0, 0, f"A{i + 1}"
        return
    for s in range(i, j):
        for left in _trees(dims, i, s, cost):
            for right in _trees(dims, s + 1, j, cost):
                yield (left[0] + right[0] + cost(dims[i], dims[j + 1], dims[s + 1]),
                       1 + max(left[1], right[1]), f"({left[2]}·{right[2]})")


def mcm_bruteforce(dims: Sequence[int], cost: CostFn, depth_budget: Optional[int] = None,
                   cgemm_depth: int = CGEMM_DEPTH) -> MCMPlan:
    """Every parenthesisation (Catalan many) of A_1·…·A_n; the cheapest within the budget."""
    max_height = _check_mcm(dims, depth_budget, cgemm_depth)
    total, height, order = min((t for t in _trees(dims, 0, len(dims) - 2, cost) if t[1] <= max_height),
                               key=lambda t: t[:2])
    return MCMPlan(order, total, height, height * cgemm_depth)


def obl_cost_fn(S_o: int, cost: CostSpec = None) -> CostFn:
    """cost(m, n, k) = eq. (3) at OBL(m, n, k): what one encrypted MM costs when blocked optimally."""
    check_slots(S_o, square=True)
    cgemm = as_cost_fn(cost)
    return lambda m, n, k: layout_cost(obl(m, n, k, S_o), cgemm)
