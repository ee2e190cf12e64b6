"""Layouts: the ways a batch is placed in ciphertexts, one module each (the protocol: hemlp.layouts.base).

    batch    (A)   one feature per ciphertext, the batch along the slots (large batches; Ray)
    packed   (P)   the features of a few samples in the slots of one ciphertext (one or a few samples)
    mlwe     (A')  the batch along the coefficients, MLWE PCMMs, activations between CoeffToSlot / SlotToCoeff
    blocked  (C)   weights encrypted too: every linear layer a block CCMM (encrypted_weights=True)

``candidates`` turns the compile options into the layouts to plan (``unrescaled_candidates`` with
final_rescale=False), ``choose`` plans them and takes the cheapest by the planner's estimates. Adding a layout = a
module here plus its entry in LAYOUTS.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

from hemlp.errors import LevelError, ParameterError, ResourceError, ShapeError, UnsupportedError
from hemlp.layouts.base import Layout, Planned
from hemlp.layouts.batch import Batch
from hemlp.layouts.blocked import Blocked
from hemlp.layouts.mlwe import Mlwe
from hemlp.layouts.packed import Packed
from hemlp.planner.resources import estimate_nodes, estimate_resources, fewest_nodes, server_memory

__all__ = ["Layout", "Planned", "LAYOUTS", "get", "candidates", "unrescaled_candidates", "choose", "check_memory",
           "memory_budget", "machine_memory_bytes", "usable_memory_bytes", "MemoryLimit", "as_limit"]

#: every layout by name; the order is the order of the planner's estimates in the plan ("auto" compares all
#: those of the same encrypted_weights kind; the first one is the default when no batch size is given)
LAYOUTS: dict[str, type[Layout]] = {c.name: c for c in (Batch, Packed, Mlwe, Blocked)}


def get(name: str) -> type[Layout]:
    try:
        return LAYOUTS[name]
    except KeyError:
        raise ParameterError(f"unknown layout {name!r}; layouts: {sorted(LAYOUTS)}") from None


def candidates(layout: str, encrypted_weights: bool, batch_given: bool) -> list[type[Layout]]:
    """The layouts compile() plans for the `layout` and `encrypted_weights` options."""
    kind = [c for c in LAYOUTS.values() if c.encrypted_weights == bool(encrypted_weights)]
    if encrypted_weights:
        if layout not in ("auto",) + tuple(c.name for c in kind):
            raise ParameterError("encrypted_weights=True uses layout (C); drop the layout option")
    elif layout not in ("auto",) + tuple(c.name for c in kind):
        raise ParameterError(f"layout must be one of {('auto',) + tuple(c.name for c in kind)}, got {layout!r}")
    if layout != "auto":
        return [get(layout)]
    return kind if batch_given else kind[:1]


def unrescaled_candidates(layout: str, encrypted_weights: bool) -> list[type[Layout]]:
    """The layouts compile() plans with final_rescale=False: those of the `layout` and `encrypted_weights` options
    that run the last linear layer at level 0 unrescaled (Layout.unrescaled_final); UnsupportedError otherwise."""
    able = [c for c in LAYOUTS.values() if c.unrescaled_final]
    kind = [c for c in able if c.encrypted_weights == bool(encrypted_weights)]
    if layout not in ("auto",) + tuple(c.name for c in kind) or not kind:
        raise UnsupportedError("final_rescale=False plans " + ", ".join(f"layout {c.label}" for c in able)
                               + " only (" + " or ".join(f"layout={c.name!r}" for c in able) + ")")
    return kind if layout == "auto" else [get(layout)]


#: layouts whose time estimates are this close to the fastest count as a tie, broken by server memory
TIME_TIE = 0.10


def machine_memory_bytes() -> int | None:
    """This machine's physical memory (the default server memory budget), or None when it cannot be read."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):    # pragma: no cover - not POSIX
        return None


#: what the "auto" budget leaves the operating system and the processes beside the server: a tenth of the
#: machine's memory, at least MIN_MEMORY_RESERVE (a plan sized to all of it is one the OOM killer ends)
MEMORY_RESERVE_FRACTION = 0.1
MIN_MEMORY_RESERVE = 2 ** 30


def usable_memory_bytes() -> int | None:
    """The "auto" server memory budget: this machine's physical memory less the reserve, or None when unreadable."""
    total = machine_memory_bytes()
    if total is None:
        return None
    return total - max(MIN_MEMORY_RESERVE, int(total * MEMORY_RESERVE_FRACTION))


def memory_budget(option) -> int | None:
    """server_memory: "auto" (this machine's memory less a reserve: usable_memory_bytes), a number of bytes, or None
    (no limit)."""
    if option is None:
        return None
    if option == "auto":
        return usable_memory_bytes()
    if isinstance(option, bool) or not isinstance(option, (int, float)) or not option > 0:
        raise ParameterError(f"server_memory must be 'auto', a positive number of bytes or None, got {option!r}")
    return int(option)


def check_memory(name: str, need: int, budget: int | None, others: str = "", detail: str = "") -> None:
    """ResourceError naming the fixes when a plan's estimated server memory exceeds the budget; detail: what the
    need is made of (hemlp.planner.resources.ServerMemory.describe)."""
    if budget is None or need <= budget:
        return
    raise ResourceError(
        f"the plan needs ~{need / 2**30:.3g} GiB of server memory (estimated before any key or ciphertext exists"
        f"{': ' + detail if detail else ''}) with layout {name}, above the budget of {budget / 2**30:.3g} GiB"
        f"{others}. Compile with a smaller "
        "batch_size (memory grows with the batch), another layout, nodes=<count> to split the batch over several "
        "nodes (each node's peak is then checked: node_memory=), server_memory=<bytes> when the server has "
        "more memory than this machine (server_memory=None: no limit), or import_keys=False when the server process "
        "makes its own keys (their import, counted otherwise, is then no peak)")


@dataclass(frozen=True)
class MemoryLimit:
    """What a plan's memory is held to: with nodes=None the whole plan on one server (server_memory: its estimated
    server memory), else each node's estimated peak when the batch is split over `nodes` nodes (compile's nodes= /
    node_memory=: hemlp.planner.resources.estimate_nodes, layout (A) split by ciphertext ranges and row splits, the
    other layouts counted whole on each node). budget None: no limit."""
    budget: int | None = None
    nodes: int | None = None

    def need(self, lay: Layout, boot_key_bytes: int = 0) -> int:
        """The bytes held against the budget, once the layout has sized what it keeps to it (Layout.fit_memory);
        boot_key_bytes: the plan's bootstrapping keys in memory (counted once per node)."""
        lay.fit_memory(self.budget, boot_key_bytes)
        if self.nodes is None:
            return int(estimate_resources(lay, boot_key_bytes).server_memory_bytes)
        return int(estimate_nodes(lay, self.nodes, boot_key_bytes).peak_bytes)

    def detail(self, lay: Layout, boot_key_bytes: int = 0) -> str:
        """What the server's need is made of (check_memory's detail; '' split over nodes: check_nodes says it)."""
        return server_memory(lay, boot_key_bytes).describe() if self.nodes is None else ""

    def over(self, need: int) -> bool:
        return self.budget is not None and need > self.budget

    def closest(self, over: dict) -> str:
        """Of layouts over the budget ({name: (need, layout, bootstrapping key bytes)}), the one compile's
        refusal should name: split over nodes, the one that fits on the fewest nodes (a layout that splits can fit
        where one counted whole on every node never does), then the smallest peak; else the smallest need."""
        def rank(name):
            need, lay, boot = over[name]
            if self.nodes is None:
                return (0, need)
            fit = fewest_nodes(lay, boot, self.budget, start=self.nodes)
            return (fit.nodes if fit is not None else math.inf, need)
        return min(over, key=rank)

    @property
    def what(self) -> str:
        return "server memory" if self.nodes is None else f"memory on each of {self.nodes} node(s)"

    def text(self, need: int) -> str:
        """'~X GiB of <what>, above Y GiB' (a layout "auto" passes over)."""
        return f"~{need / 2**30:.3g} GiB of {self.what}, above {self.budget / 2**30:.3g} GiB"


def as_limit(max_memory) -> MemoryLimit:
    """A MemoryLimit from a MemoryLimit or a server budget in bytes (None: no limit)."""
    return max_memory if isinstance(max_memory, MemoryLimit) else MemoryLimit(max_memory)


def choose(cands: list[type[Layout]], planned: Planned,
           max_memory: int | MemoryLimit | None = None) -> tuple[Layout, dict, str]:
    """(the chosen layout, the planner's estimates by name, why): a single candidate is planned as asked (its
    errors propagate); several are planned, the ones that cannot run the model are listed with the reason, and the
    one with the lowest time estimate is taken -- unless another is within TIME_TIE of it and needs less memory:
    the estimates are good to ~2x, and at equal speed the memory decides how much a server can hold
    (the CIFAR CNN at batch 16 before layout (P) built convs from their nonzero diagonals: layout (A) 29.6 s and
    ~19 GB, (P) 29.9 s and ~6 GB; now (P) 1.8 s and ~0.9 GB). max_memory: a server budget in bytes or a
    MemoryLimit; split over nodes (MemoryLimit.nodes) the layouts compare by each node's peak, so a layout that fits
    only when split is taken over one that fits nowhere; when none fits a node, the one that fits on the fewest
    nodes (MemoryLimit.closest) is returned for compile's per-node check to refuse, naming that count."""
    limit = as_limit(max_memory)
    if len(cands) == 1:
        lay = cands[0].plan(planned)
        if limit.nodes is None:
            check_memory(lay.name, limit.need(lay), limit.budget, detail=limit.detail(lay))
        lay.commit()
        return lay, {}, ""
    est, built, memory, over = {}, {}, {}, {}
    for c in cands:
        try:
            lay = c.plan(planned)
        except (UnsupportedError, ShapeError, LevelError) as exc:
            est[c.name] = f"not possible: {exc}"
            continue
        memory[c.name] = limit.need(lay)
        if limit.over(memory[c.name]):
            est[c.name], over[c.name] = f"not possible: {limit.text(memory[c.name])}", (memory[c.name], lay, 0)
            continue
        built[c.name], est[c.name] = lay, lay.estimate()
    if not built and memory:            # every layout that can run the model is over the budget
        name = limit.closest(over)
        if limit.nodes is not None:     # compile's per-node check refuses it, naming the fixes (more nodes, ...)
            lay = over[name][1]
            lay.commit()
            return lay, est, f"no layout fits {limit.what}: {name} fits on the fewest nodes"
        check_memory(name, memory[name], limit.budget, "; " + "; ".join(f"{k}: {v}" for k, v in est.items()),
                     limit.detail(over[name][1]))
    fastest = min((k for k, v in est.items() if isinstance(v, float)), key=est.get)
    ties = [k for k, v in est.items() if isinstance(v, float) and v <= est[fastest] * (1 + TIME_TIE)]
    best = min(ties, key=lambda k: (memory[k], est[k]))
    why = "" if best == fastest else (
        f"{best} is within {TIME_TIE:.0%} of {fastest}'s time and needs less {limit.what} "
        f"(~{memory[best] / 1e9:.3g} GB against ~{memory[fastest] / 1e9:.3g} GB)")
    lay = built[best]
    lay.commit()
    return lay, est, why
