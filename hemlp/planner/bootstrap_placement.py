"""Bootstrap placement over a level DAG (issue #18, item 1): where to refresh which ciphertexts so that
every layer has the levels it consumes, at the least estimated time.

The program is a DAG of ``LevelNode``s in topological order; every node produces one value (a group of
``ciphertexts`` ciphertexts at one level):

    input    no inputs; the client encrypts it at a level of the planner's choice, <= ``top_level``
    op       reads its inputs at one common level l (>= depth) and produces level l - depth
             (a PCMM: 1, a square: 1, a polynomial of degree d: ceil(log2(d + 1)), a ct x ct product: 1)
    add      a residual join: reads a at la, b at lb and produces min(la, lb), one less when la == lb
             (equal levels need one set_scale to make the scales equal: hemlp.runtime.local.add_aligned)
    output   reads its input at a level >= ``min_output_level``

A value is stored at one level. Before a node reads a value it may be **bootstrapped** (its stored level
becomes ``BootstrapCost.levels_after``; every later reader sees the refreshed version) and it may be read
at any level below the stored one (``drop_level`` is free; operations at lower levels are cheaper). The
time of a node read at level l is ``cost_per_limb * (l + 1)`` (linear in the limb count at a fixed ring), or its
``level_costs[l]`` where the layout priced it per level (key switches are not linear: hemlp.planner.keyswitch_cost);
a bootstrap of n ciphertexts costs ``BootstrapCost.seconds_for(n)``.

``place_bootstraps`` is an exact dynamic programme (a shortest path) over the states "stored level of every
live value" after each node: a chain has one live value (states = levels), a residual block two (the skip
value and the branch), so the state space stays (levels + 1)^width. ``place_bootstraps_exhaustive``
enumerates every decision sequence (the test oracle), ``evaluate_placement`` prices one sequence.

``BootstrapCost.from_params`` takes the levels after a bootstrap from the bootstrapping parameters
(hemlp.bootstrap.params.preset_levels_consumed, passed in by the caller) and the time from the cost profile's
measurement of the preset (hemlp.planner.cost_model: `hemlp calibrate`'s, or the packaged table's from
``bench/boot_*.json``), or scales the nearest measurement by N·log2(N)·(L + 1)^2 (key switches dominate: their
cost grows with the ring and with the limbs times the digits, both linear in L). Its source names the profile.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from hemlp.errors import LevelError, ParameterError, ShapeError
from hemlp.planner.cost_model import BootMeasurement, CostProfile, active_profile

__all__ = ["LevelNode", "BootstrapCost", "Decision", "PlacedBootstrap", "NodeLevels", "Placement",
           "place_bootstraps", "place_bootstraps_exhaustive", "evaluate_placement"]

OPS = ("input", "op", "add", "output")
#: an earlier bench/boot_N16.json (N16-boot, AMD EPYC AVX-512, quiet machine, 1 thread): the scale reference for a
#: cost profile that measured no bootstrap at `threads`
REFERENCE = BootMeasurement("N16-boot", 65536, 28, 1, 9.276, 9.119, None,
                            "bench/boot_N16.json (N16-boot, 1 thread, built-in copy)")


@dataclass(frozen=True)
class LevelNode:
    """One layer of the level DAG (see the module doc): its inputs by name, the levels it consumes, the
    ciphertexts of its output (what a bootstrap of it costs) and its time per limb (seconds)."""

    name: str
    op: str = "op"
    inputs: tuple = ()
    depth: int = 0
    ciphertexts: int = 1
    cost_per_limb: float = 0.0
    limb_offset: int = 0        # levels below the planner's level 0 (a frame shifted up: the S2C-first order)
    #: seconds at each level (index: level + limb_offset) where the time is not linear in the limbs (a key switch:
    #: hemlp.planner.keyswitch_cost); empty: cost_per_limb x limbs
    level_costs: tuple = ()

    def cost(self, level: int) -> float:
        i = level + self.limb_offset
        if self.level_costs and 0 <= i < len(self.level_costs):
            return self.level_costs[i]
        return self.cost_per_limb * (i + 1)


@dataclass(frozen=True)
class BootstrapCost:
    """What one bootstrap gives and costs: the level it lands at, and seconds per ciphertext (single, and per
    pair of real ciphertexts refreshed together by Bootstrapper.bootstrap_pair; None: no pairing);
    precision_bits: the measured worst-case precision of its output (None: not measured)."""

    levels_after: int
    seconds: float
    pair_seconds: Optional[float] = None
    source: str = "given"
    precision_bits: Optional[float] = None
    batch: int = 1                          # complex bootstraps per call (batched bootstrapping)
    batch_seconds: Optional[float] = None   # seconds of one call of `batch` (paired) bootstraps; None: not batched

    def __post_init__(self):
        if isinstance(self.levels_after, bool) or not isinstance(self.levels_after, int) or self.levels_after < 0:
            raise ParameterError(f"levels_after={self.levels_after!r} must be an int >= 0")
        if not self.seconds >= 0 or (self.pair_seconds is not None and not self.pair_seconds >= 0):
            raise ParameterError("bootstrap seconds must be >= 0")

    def seconds_for(self, ciphertexts: int) -> float:
        """Time to refresh `ciphertexts` real ciphertexts (in pairs when pair_seconds is known)."""
        n = int(ciphertexts)
        if self.batch_seconds is not None:
            return self.bootstraps_for(n) * self.batch_seconds
        if self.pair_seconds is None:
            return n * self.seconds
        return (n // 2) * self.pair_seconds + (n % 2) * self.seconds

    def bootstraps_for(self, ciphertexts: int) -> int:
        """Bootstrap calls for `ciphertexts` real ciphertexts (batched: calls of `batch` complex bootstraps, the
        last one padded)."""
        n = int(ciphertexts)
        m = n if self.pair_seconds is None else n // 2 + n % 2
        return -(-m // self.batch) if self.batch_seconds is not None else m

    @classmethod
    def from_params(cls, params, levels_consumed: int, threads: int = 1,
                    profile: Optional[CostProfile] = None) -> "BootstrapCost":
        """For a bootstrapping preset (hemlp.fhe.Params) whose bootstrap consumes `levels_consumed` levels
        (hemlp.bootstrap.params.preset_levels_consumed; passed in so the planner stays free of the native core):
        levels after = L - levels_consumed; seconds from the cost profile's measurement of that preset at `threads`
        (default profile: hemlp.planner.cost_model.active_profile()), else scaled from the nearest measured preset
        by N·log2(N)·(L + 1)^2."""
        profile = profile or active_profile()
        name = getattr(params, "name", None)
        levels_after = params.max_level - int(levels_consumed)
        if levels_after < 1:
            raise LevelError(f"bootstrapping at {name} leaves {levels_after} levels: no layer fits after it")
        measured = [m for m in profile.bootstrap if m.threads == threads]
        own = next((m for m in measured if m.preset == name), None)
        if own is not None:
            return cls(levels_after, own.seconds, own.pair_seconds, f"{own.source} [cost profile: {profile.source}]",
                       own.precision_bits)
        ref = min(measured or [REFERENCE], key=lambda m: abs(math.log2(m.N) - math.log2(params.N)))
        f = (params.N * math.log2(params.N) * (params.max_level + 1) ** 2) / (
            ref.N * math.log2(ref.N) * (ref.max_level + 1) ** 2)
        pair = None if ref.pair_seconds is None else ref.pair_seconds * f
        return cls(levels_after, ref.seconds * f, pair,
                   f"estimate: {ref.source} scaled by N·log2 N·(L+1)^2 (x{f:.3g}) [cost profile: {profile.source}]")

    def describe(self) -> str:
        pair = "" if self.pair_seconds is None else f", {self.pair_seconds:.3g} s per pair of real ciphertexts"
        return f"{self.seconds:.3g} s per bootstrap{pair}, {self.levels_after} levels after ({self.source})"


# ---------------------------------------------------------------------------------------
# Decisions and their evaluation
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Decision:
    """What happens at one node: which of its (distinct) inputs are bootstrapped first, and the level each
    input is read at (for an input node: the level it is encrypted at)."""

    boot: tuple = ()        # names of the inputs refreshed before this node
    reads: tuple = ()       # one level per entry of node.inputs; (level,) for an input node


@dataclass(frozen=True)
class PlacedBootstrap:
    value: str              # the value refreshed
    before: str             # the node that reads it next
    level_before: int
    level_after: int
    ciphertexts: int
    bootstraps: int         # bootstrap calls (pairs of real ciphertexts count once)
    seconds: float


@dataclass(frozen=True)
class NodeLevels:
    name: str
    op: str
    reads: tuple
    level_out: int
    seconds: float


@dataclass(frozen=True)
class Placement:
    """The placed bootstraps, the level every node reads and produces, and the estimated seconds."""

    nodes: tuple
    bootstraps: tuple
    decisions: tuple
    op_seconds: float
    boot_seconds: float
    total: float
    levels_after: int
    method: str
    cost_source: str = ""

    def level_of(self, name: str) -> int:
        return next(n.level_out for n in self.nodes if n.name == name)

    def describe(self) -> str:
        calls = sum(b.bootstraps for b in self.bootstraps)
        head = (f"bootstrap placement ({self.method}): {len(self.bootstraps)} refresh point(s), {calls} bootstrap(s), "
                f"{self.levels_after} levels after each; estimated {self.boot_seconds:.3g} s bootstrapping + "
                f"{self.op_seconds:.3g} s layers = {self.total:.3g} s")
        lines = [head]
        if self.cost_source:
            lines.append(f"  bootstrap time: {self.cost_source}")
        for b in self.bootstraps:
            lines.append(f"  bootstrap {b.value} before {b.before}: level {b.level_before} -> {b.level_after}, "
                         f"{b.ciphertexts} ciphertext(s) in {b.bootstraps} bootstrap(s), ~{b.seconds:.3g} s")
        return "\n".join(lines)

    __str__ = describe


class _Problem:
    """The validated DAG: node order, last readers, budgets."""

    def __init__(self, nodes: Sequence[LevelNode], boot: BootstrapCost, top_level: Optional[int],
                 min_output_level: int, boot_seconds=None):
        self.boot_fn = boot_seconds
        if not isinstance(boot, BootstrapCost):
            raise ParameterError("boot must be a BootstrapCost (BootstrapCost.from_params(params))")
        self.nodes = list(nodes)
        self.boot = boot
        self.L = boot.levels_after
        self.top = self.L if top_level is None else int(top_level)
        self.min_out = int(min_output_level)
        if not self.nodes:
            raise ShapeError("the level DAG has no nodes")
        if not 0 <= self.top <= self.L:
            raise ParameterError(f"top_level={top_level} must be in [0, {self.L}] (the input is encrypted at most "
                                 "at the level a bootstrap lands at)")
        if not 0 <= self.min_out <= self.L:
            raise ParameterError(f"min_output_level={min_output_level} must be in [0, {self.L}]")
        seen: dict[str, LevelNode] = {}
        for i, n in enumerate(self.nodes):
            if n.op not in OPS:
                raise ParameterError(f"node {n.name!r}: op {n.op!r} is not one of {OPS}")
            if n.name in seen:
                raise ShapeError(f"two nodes are named {n.name!r}")
            for v in n.inputs:
                if v not in seen:
                    raise ShapeError(f"node {n.name!r} reads {v!r}, which is not produced before it (give the "
                                     "nodes in topological order)")
                if seen[v].op == "output":
                    raise ShapeError(f"node {n.name!r} reads the output {v!r}")
            arity = {"input": (0, 0), "output": (1, 1), "add": (2, 2), "op": (1, 64)}[n.op]
            if not arity[0] <= len(n.inputs) <= arity[1]:
                want = str(arity[0]) if arity[0] == arity[1] else f"{arity[0]} to {arity[1]}"
                raise ShapeError(f"node {n.name!r} ({n.op}) has {len(n.inputs)} inputs; {n.op} takes {want}")
            if isinstance(n.depth, bool) or not isinstance(n.depth, int) or n.depth < 0:
                raise ParameterError(f"node {n.name!r}: depth={n.depth!r} must be an int >= 0")
            if n.op == "op" and n.depth > self.L:
                raise LevelError(
                    f"layer {n.name!r} consumes {n.depth} levels but a bootstrap leaves only {self.L}: no placement "
                    f"of bootstraps can run it. Lower its degree (a polynomial of degree d costs ceil(log2(d+1)) "
                    f"levels: degree <= {2 ** self.L - 1} fits), or split the activation into a composition of "
                    f"polynomials of depth <= {self.L} each so that a bootstrap can sit between them")
            if n.ciphertexts < 0 or not n.cost_per_limb >= 0:
                raise ParameterError(f"node {n.name!r}: ciphertexts and cost_per_limb must be >= 0")
            seen[n.name] = n
        if not any(n.op == "output" for n in self.nodes):
            raise ShapeError("the level DAG has no output node")
        self.last: dict[str, int] = {}
        for i, n in enumerate(self.nodes):
            for v in n.inputs:
                self.last[v] = i
        # live[i]: values stored after node i (read by a later node), in production order
        self.live: list[tuple[str, ...]] = []
        produced: list[str] = []
        for i, n in enumerate(self.nodes):
            produced.append(n.name)
            self.live.append(tuple(v for v in produced if self.last.get(v, -1) > i))
        self.by_name = {n.name: n for n in self.nodes}

    def boot_cost(self, value: str, stored_level: int) -> float:
        """Seconds to refresh `value` stored at `stored_level`: the caller's boot_seconds(value, level) when
        given (e.g. MaMBo, whose cost depends on the producing PCMM's level), else BootstrapCost.seconds_for."""
        if self.boot_fn is not None:
            return float(self.boot_fn(value, stored_level))
        return self.boot.seconds_for(self.by_name[value].ciphertexts)

    def distinct_inputs(self, n: LevelNode) -> tuple:
        return tuple(dict.fromkeys(n.inputs))

    def outcome(self, n: LevelNode, reads: tuple) -> Optional[tuple[int, float]]:
        """(level out, seconds) of node n reading its inputs at `reads`, or None if not allowed. The one
        definition of the level rules, shared by the DP and the evaluator."""
        if n.op == "input":
            (lv,) = reads
            return (lv, n.cost(lv)) if 0 <= lv <= self.top else None
        if n.op == "output":
            (lv,) = reads
            return (lv, n.cost(lv)) if lv >= self.min_out else None
        if n.op == "add":
            la, lb = reads
            out = min(la, lb) - (1 if la == lb else 0)
            return (out, n.cost(max(la, lb))) if out >= 0 else None
        lv = reads[0]
        if any(r != lv for r in reads) or lv < n.depth:
            return None
        return lv - n.depth, n.cost(lv)


# ---------------------------------------------------------------------------------------
# Evaluation of one decision sequence (forward, no search)
# ---------------------------------------------------------------------------------------

def _step(pb: _Problem, i: int, d: Decision, stored: dict) -> Optional[tuple[float, float, list, NodeLevels]]:
    """Apply decision d at node i to `stored` (value -> level; updated in place). Returns (op seconds,
    bootstrap seconds, placed bootstraps, node levels) or None if d is not allowed."""
    n = pb.nodes[i]
    boot_s, placed = 0.0, []
    if len(set(d.boot)) != len(d.boot) or any(v not in n.inputs for v in d.boot):
        return None
    for v in d.boot:
        src = pb.by_name[v]
        placed.append(PlacedBootstrap(v, n.name, stored[v], pb.L, src.ciphertexts,
                                      pb.boot.bootstraps_for(src.ciphertexts), pb.boot_cost(v, stored[v])))
        boot_s += placed[-1].seconds
        stored[v] = pb.L
    want = 1 if n.op == "input" else len(n.inputs)
    if len(d.reads) != want:
        return None
    if n.op != "input" and any(r < 0 or r > stored[v] for r, v in zip(d.reads, n.inputs)):
        return None
    res = pb.outcome(n, tuple(d.reads))
    if res is None:
        return None
    out, secs = res
    for v in pb.distinct_inputs(n):
        if pb.last[v] == i:
            del stored[v]
    if pb.last.get(n.name, -1) > i:
        stored[n.name] = out
    return secs, boot_s, placed, NodeLevels(n.name, n.op, tuple(d.reads), out, secs)


def _build(pb: _Problem, decisions: Sequence[Decision], method: str) -> Optional[Placement]:
    stored: dict = {}
    op_s = boot_s = 0.0
    placed, levels = [], []
    for i, d in enumerate(decisions):
        r = _step(pb, i, d, stored)
        if r is None:
            return None
        op_s += r[0]
        boot_s += r[1]
        placed += r[2]
        levels.append(r[3])
    return Placement(tuple(levels), tuple(placed), tuple(decisions), op_s, boot_s, op_s + boot_s, pb.L, method,
                     pb.boot.source)


def evaluate_placement(nodes: Sequence[LevelNode], boot: BootstrapCost, decisions: Sequence[Decision], *,
                       top_level: Optional[int] = None, min_output_level: int = 0,
                       boot_seconds=None) -> Optional[Placement]:
    """The placement a decision sequence (one Decision per node) describes, or None if it breaks a level rule."""
    pb = _Problem(nodes, boot, top_level, min_output_level, boot_seconds)
    if len(decisions) != len(pb.nodes):
        raise ShapeError(f"{len(decisions)} decisions for {len(pb.nodes)} nodes")
    return _build(pb, decisions, "given")


# ---------------------------------------------------------------------------------------
# Exact DP (shortest path over live-level states)
# ---------------------------------------------------------------------------------------

def _choices(pb: _Problem, i: int, levels: Mapping[str, int]):
    """Every (Decision, stored levels after the boots) allowed at node i from the stored levels."""
    n = pb.nodes[i]
    if n.op == "input":
        for lv in range(pb.top + 1):
            yield Decision((), (lv,)), levels
        return
    uniq = pb.distinct_inputs(n)
    for mask in itertools.product((False, True), repeat=len(uniq)):
        boot = tuple(v for v, b in zip(uniq, mask) if b)
        st = dict(levels)
        for v in boot:
            st[v] = pb.L
        if n.op == "op":           # one common read level for every input
            for lv in range(n.depth, min(st[v] for v in uniq) + 1):
                yield Decision(boot, (lv,) * len(n.inputs)), st
        else:
            for reads in itertools.product(*(range(st[v] + 1) for v in n.inputs)):
                yield Decision(boot, reads), st


def place_bootstraps(nodes: Sequence[LevelNode], boot: BootstrapCost, *, top_level: Optional[int] = None,
                     min_output_level: int = 0, boot_seconds=None) -> Placement:
    """The cheapest placement (bootstraps + layer times), by DP over the stored levels of the live values
    after each node. Raises LevelError when no placement exists (a layer deeper than a bootstrap's levels
    is named before any search). boot_seconds(value, stored level): the seconds of refreshing a value when
    they depend on more than its ciphertext count (default BootstrapCost.seconds_for)."""
    pb = _Problem(nodes, boot, top_level, min_output_level, boot_seconds)
    # state: levels of pb.live[i-1] (a tuple) -> (cost, previous state, decision)
    frontier: dict[tuple, tuple[float, Optional[tuple], Optional[Decision]]] = {(): (0.0, None, None)}
    history: list[dict] = []
    live_before: tuple = ()
    memo: dict = {}                # (value, stored level) -> refresh seconds: a pure function, asked millions of times

    def boot_cost(v, lv):
        c = memo.get((v, lv))
        if c is None:
            c = memo[(v, lv)] = pb.boot_cost(v, lv)
        return c

    for i, n in enumerate(pb.nodes):
        nxt: dict[tuple, tuple[float, tuple, Decision]] = {}
        for state, (cost, _, _) in frontier.items():
            levels = dict(zip(live_before, state))
            refresh: dict = {}         # a bootstrap subset's seconds, the same for every read level that follows it
            for d, st in _choices(pb, i, levels):
                reads = d.reads
                res = pb.outcome(n, reads)
                if res is None:
                    continue
                out, secs = res
                boots = refresh.get(d.boot)
                if boots is None:
                    boots = refresh[d.boot] = sum(boot_cost(v, levels[v]) for v in d.boot)
                total = cost + secs + boots
                after = dict(st)
                after[n.name] = out
                key = tuple(after[v] for v in pb.live[i])
                old = nxt.get(key)
                if old is None or total < old[0]:
                    nxt[key] = (total, state, d)
        if not nxt:
            raise LevelError(_no_placement(pb, n))
        history.append(nxt)
        frontier = nxt
        live_before = pb.live[i]
    # the last frontier has one state (nothing is live after the last node)
    state = min(frontier, key=lambda k: frontier[k][0])
    decisions = []
    for table in reversed(history):
        _, prev, d = table[state]
        decisions.append(d)
        state = prev
    placement = _build(pb, decisions[::-1], "dp")
    if placement is None:          # cannot happen: every transition was checked by pb.outcome
        raise AssertionError("the DP built a placement the evaluator rejects")
    return placement


def _no_placement(pb: _Problem, n: LevelNode) -> str:
    return (f"no bootstrap placement reaches node {n.name!r} ({n.op}) within the levels: a bootstrap leaves "
            f"{pb.L}, the input starts at <= {pb.top}, the output needs >= {pb.min_out}; lower the depth of the "
            "layers around it (activation degrees) or use a preset with more levels after bootstrapping")


# ---------------------------------------------------------------------------------------
# Exhaustive search (the oracle)
# ---------------------------------------------------------------------------------------

def place_bootstraps_exhaustive(nodes: Sequence[LevelNode], boot: BootstrapCost, *,
                                top_level: Optional[int] = None, min_output_level: int = 0,
                                boot_seconds=None) -> Placement:
    """Every decision sequence (bootstrap subsets of each node's inputs x read levels in [0, levels after]),
    each priced from scratch by the evaluator; the cheapest. Exponential: small DAGs only."""
    pb = _Problem(nodes, boot, top_level, min_output_level, boot_seconds)
    per_node = []
    for n in pb.nodes:
        if n.op == "input":
            per_node.append([Decision((), (lv,)) for lv in range(pb.L + 1)])
            continue
        uniq = pb.distinct_inputs(n)
        boots = [tuple(v for v, b in zip(uniq, m) if b) for m in itertools.product((False, True), repeat=len(uniq))]
        reads = list(itertools.product(range(pb.L + 1), repeat=len(n.inputs)))
        per_node.append([Decision(b, r) for b in boots for r in reads])
    best_total, best_decisions = math.inf, None

    def walk(i: int, stored: dict, total: float, prefix: list) -> None:
        nonlocal best_total, best_decisions
        if i == len(pb.nodes):
            if total < best_total:
                best_total, best_decisions = total, list(prefix)
            return
        for d in per_node[i]:
            st = dict(stored)
            r = _step(pb, i, d, st)
            if r is None:
                continue
            prefix.append(d)
            walk(i + 1, st, total + r[0] + r[1], prefix)
            prefix.pop()

    walk(0, {}, 0.0, [])
    if best_decisions is None:
        raise LevelError(f"no bootstrap placement exists (exhaustive search; {pb.L} levels after a bootstrap)")
    return _build(pb, best_decisions, "exhaustive")
