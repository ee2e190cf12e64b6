"""The lowered program's step ops, in one place for every layer that reads steps.

``hemlp.compiler.lower`` turns the IR into steps; the planner prices them, the layouts plan and run them, the runtimes
execute them. Each of those passes is a table with one handler per ``StepOp`` (the torch.fx ``Interpreter`` pattern),
looked up by ``handler``: an op the pass cannot run is an explicit ``Unsupported`` entry (a typed
``UnsupportedOpError`` naming the op, the layout and the nearest alternative), and an op without an entry fails there
too, in this one function. ``lint_steps`` checks a lowered program's invariants; the compile passes call it through
``lint_pass`` when ``HEMLP_LINT_STEPS=1`` (the test suite sets it), so a broken pass is named where it happens.

A foundation module (it imports only hemlp.errors), so the planner, the compiler, the layouts and the runtimes all
name ops from here. Each op's metadata is a typed dataclass (INFO: PcmmInfo, MatmulInfo, AffineInfo, RefreshInfo).
docs/extending.md adds an op end to end.
"""
from __future__ import annotations

import os
from collections.abc import MutableMapping
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Optional

import numpy as np

from hemlp.errors import LevelError, ShapeError, UnsupportedOpError

__all__ = ["StepOp", "CT_PRODUCT_OPS", "ACT_OPS", "ELEMENTWISE_OPS", "REFRESH_OPS", "PRODUCT_PAIR_OPS",
           "UNTIMED_OPS", "UNCHECKED_LEVEL_OPS", "SHARED_VALUE_OPS", "MATRIX_OPS", "OP_NAMES", "ARITY", "Unsupported",
           "handler", "check_table", "lint_steps", "lint_pass", "LINT_ENV", "StepInfo", "PcmmInfo", "MatmulInfo",
           "AffineInfo", "RefreshInfo", "INFO", "step_info"]


class StepOp(StrEnum):
    """The lowered program's step ops (equal to their strings). The planner adds BOOTSTRAP, MAMBO and DROP."""
    INPUT = "input"
    OUTPUT = "output"
    PCMM = "pcmm"
    POLY = "poly"
    SQUARE = "square"
    AFFINE = "affine"
    ADD = "add"
    MUL = "mul"
    MATMUL = "matmul"
    ALIAS = "alias"
    PERM = "perm"
    BOOTSTRAP = "bootstrap"
    MAMBO = "mambo"
    DROP = "drop"


#: steps that multiply two ciphertexts (and so relinearise)
CT_PRODUCT_OPS = (StepOp.SQUARE, StepOp.POLY, StepOp.MUL, StepOp.MATMUL)
#: polynomial activations (the step carries an ActPoly)
ACT_OPS = (StepOp.SQUARE, StepOp.POLY)
#: one ciphertext in, one out, feature by feature (hemlp.runtime.local.ElementwiseOp)
ELEMENTWISE_OPS = (StepOp.SQUARE, StepOp.POLY, StepOp.AFFINE)
#: refreshes placed by the bootstrap planner: the only steps whose output level is above their input's
REFRESH_OPS = (StepOp.BOOTSTRAP, StepOp.MAMBO)
#: ciphertext x ciphertext products of two values (both operands at the lower level first)
PRODUCT_PAIR_OPS = (StepOp.MUL, StepOp.MATMUL)
#: no work of their own: no timing entry, no tick of a run's progress
UNTIMED_OPS = (StepOp.INPUT, StepOp.ALIAS, StepOp.OUTPUT)
#: their ciphertexts may sit above the planned output level (a relabelling, or a residual add that keeps the lower
#: operand's level), so the runners do not compare the two
UNCHECKED_LEVEL_OPS = (StepOp.ALIAS, StepOp.OUTPUT, StepOp.ADD, StepOp.PERM)
#: their value is their input's ciphertexts, relabelled or reordered (no ciphertext of their own)
SHARED_VALUE_OPS = (StepOp.ALIAS, StepOp.OUTPUT, StepOp.PERM)
#: steps that multiply by a plaintext weight matrix U (every output row reads every input row)
MATRIX_OPS = (StepOp.PCMM, StepOp.MAMBO)
#: every op's string (a step's op is a StepOp or, from a file or a test, its string)
OP_NAMES = frozenset(str(o) for o in StepOp)
#: the values each op reads (every other op reads one)
ARITY = {StepOp.INPUT: 0, StepOp.ADD: 2, StepOp.MUL: 2, StepOp.MATMUL: 2}


# ---------------------------------------------------------------------------------------
# typed step metadata
# ---------------------------------------------------------------------------------------

_FIELD_NAMES: dict = {}     # StepInfo class -> its field names (every attribute write checks them)


@dataclass(eq=False, repr=False)
class StepInfo(MutableMapping):
    """A step's metadata: one dataclass per op family (INFO), its fields typed and documented, None when not set.

    The fields are also a mapping of the set ones, in the order they were set (the constructor's keywords in the
    order given; ``"k" in info``, ``dict(info)``, ``to_json()``: what Step.meta() saves, so that order is the saved
    plan's), and by name (``info["k"]``, ``info.get("k", 1)``) for generic code; a name the op's family does not
    declare is a KeyError (an AttributeError as an attribute) instead of a new free-form entry. The base class, for
    ops that carry none, has no field."""

    def __new__(cls, *args, **kwargs):
        self = super().__new__(cls)
        if args or kwargs:      # (none when pickle or copy rebuild one: they restore _set itself)
            # the dataclass __init__ assigns in declaration order: keep the caller's, which the saved plan follows
            object.__setattr__(self, "_given", [f.name for f in fields(cls)[:len(args)]] + list(kwargs))
        return self

    def __post_init__(self):
        given = self.__dict__.pop("_given", None)
        if given is None:       # nothing given: every field is None, none is set
            given = [f.name for f in fields(self)]
        object.__setattr__(self, "_set", {n: None for n in given if getattr(self, n) is not None})

    @classmethod
    def names(cls) -> frozenset:
        """The family's field names."""
        names = _FIELD_NAMES.get(cls)
        if names is None:
            names = _FIELD_NAMES[cls] = frozenset(f.name for f in fields(cls))
        return names

    @classmethod
    def of(cls, data) -> "StepInfo":
        """From a mapping (a dict of saved metadata, another StepInfo): exactly its keys set, in its order."""
        unknown = [k for k in data if k not in cls.names()]
        if unknown:
            raise KeyError(f"{cls.__name__} has no field {unknown[0]!r} (fields: {sorted(cls.names())})")
        info = cls(**dict(data))
        object.__setattr__(info, "_set", dict.fromkeys(data))
        return info

    def __setattr__(self, name, value):
        if name not in self.names():
            raise AttributeError(f"{type(self).__name__} has no field {name!r} (fields: {sorted(self.names())})")
        object.__setattr__(self, name, value)
        set_ = self.__dict__.get("_set")
        if set_ is not None:            # None while the dataclass __init__ runs: __post_init__ counts those
            set_[name] = None

    def __getitem__(self, key):
        if key not in self._set:
            raise KeyError(key)
        return getattr(self, key)

    def __setitem__(self, key, value):
        if key not in self.names():
            raise KeyError(f"{type(self).__name__} has no field {key!r} (fields: {sorted(self.names())})")
        setattr(self, key, value)

    def __delitem__(self, key):
        if key not in self._set:
            raise KeyError(key)
        del self._set[key]
        object.__setattr__(self, key, None)

    def __iter__(self):
        return iter(list(self._set))

    def __len__(self) -> int:
        return len(self._set)

    def copy(self) -> "StepInfo":
        """The same set fields in the same order (a step's replacement gets its own metadata)."""
        return type(self).of(self)

    def to_json(self) -> dict:
        """The set fields as a dict (what plan.json holds)."""
        return {k: getattr(self, k) for k in self._set}

    def __repr__(self):
        return f"{type(self).__name__}({self.to_json()})"


@dataclass(eq=False, repr=False)
class PcmmInfo(StepInfo):
    """A PCMM's metadata (hemlp.compiler.lower; compile)."""
    in_shape: Optional[list] = None       # a conv / average pool: its input's per-sample shape (C, H, W)
    out_shape: Optional[list] = None      # ... and its output's (layout (P) builds its diagonals from the structure)
    folded_affine: Optional[str] = None   # the activation whose input map alpha x + beta is folded into the weights
    rescale: Optional[bool] = None        # False: the last PCMM runs without its rescale (final_rescale=False)
    weight_bits: Optional[int] = None     # that PCMM's weight bits (they keep its output under q_0)


@dataclass(eq=False, repr=False)
class MatmulInfo(StepInfo):
    """A ciphertext x ciphertext matrix product's operand shapes (per sample, (..., m, k) @ (..., k, n))."""
    a_shape: Optional[list] = None
    b_shape: Optional[list] = None


@dataclass(eq=False, repr=False)
class AffineInfo(StepInfo):
    """An affine step's metadata."""
    note: Optional[str] = None            # why it is a step of its own (printed in the plan)


@dataclass(eq=False, repr=False)
class RefreshInfo(StepInfo):
    """A bootstrap's or a MaMBo step's metadata: its placement (hemlp.planner.bootstrap_placement, written by
    hemlp.layouts.batch_bootstrap.apply_placement or a layout's own placement), its pipeline (the bootstrap lowering)
    and the MaMBo fusion."""
    # the placement
    value: Optional[str] = None           # the value refreshed
    before: Optional[str] = None          # the step it is refreshed for
    scale_factor: Optional[float] = None  # c: the values are divided by c before the refresh and multiplied back after
    noise_bits: Optional[float] = None    # the refreshed values' precision (the plaintext simulation's error)
    seed: Optional[int] = None            # the plaintext simulation's error seed
    slots: Optional[int] = None           # the slots the bootstrapper refreshes (sparse when below N/2)
    ciphertexts: Optional[int] = None     # ciphertexts refreshed
    bootstraps: Optional[int] = None      # bootstrapping calls
    paired_with: Optional[str] = None     # layout (P): the block refreshed with this one in one bootstrap_pair
    seconds: Optional[float] = None       # the estimate of those calls
    cost_source: Optional[str] = None     # where that estimate comes from
    level_after: Optional[int] = None     # layout (A'): the level its refresh lands at
    # the pipeline
    order: Optional[str] = None           # "cts_first" (single bootstraps) or "s2c_first" (batched, MaMBo)
    kind: Optional[str] = None            # "single", "batched" or "mambo"
    k: Optional[int] = None               # ciphertexts per batched call
    family: Optional[str] = None          # the pipeline family's label
    reason: Optional[str] = None          # why this refresh runs so
    single_seconds: Optional[float] = None    # the estimates of the alternatives
    batched_seconds: Optional[float] = None
    mambo_seconds: Optional[float] = None
    lowering: Optional[str] = None        # why the plan runs this family
    family_totals: Optional[dict] = None  # every family's total estimate (or why it was not planned)
    # MaMBo: the PCMM fused into the refresh
    pcmm: Optional[str] = None
    pcmm_level: Optional[int] = None


#: every step op's metadata class (StepInfo: none)
INFO = {op: StepInfo for op in StepOp} | {StepOp.PCMM: PcmmInfo, StepOp.MATMUL: MatmulInfo,
                                         StepOp.AFFINE: AffineInfo, StepOp.BOOTSTRAP: RefreshInfo,
                                         StepOp.MAMBO: RefreshInfo}


def step_info(op, info):
    """info (a mapping, a StepInfo or None) as op's metadata class; a step of an unknown op keeps what it was given
    (lint_steps and every handler refuse the op itself)."""
    cls = INFO.get(op)
    if cls is None:
        return {} if info is None else info
    if type(info) is cls:
        return info
    return cls.of({} if info is None else info)


class Unsupported:
    """A handler table's entry for a step op a layout cannot run. ``handler`` raises its UnsupportedOpError: the
    message (formatted with the step's ``out`` and ``op``) names the layout and the alternative; the error carries
    them as attributes."""

    __slots__ = ("layout", "alternative", "message")

    def __init__(self, layout: str, alternative: str, message: str):
        self.layout, self.alternative, self.message = layout, alternative, message

    def error(self, step) -> UnsupportedOpError:
        return UnsupportedOpError(self.message.format(out=step.out, op=str(step.op)), op=str(step.op),
                                  layout=self.layout, alternative=self.alternative)

    def __repr__(self):
        return f"Unsupported({self.layout}, use {self.alternative})"


def handler(table: dict, step, where: str):
    """table's handler of step.op: the one lookup of every step interpreter. UnsupportedOpError for an Unsupported
    entry, for an op that is no StepOp (a malformed or newer program) and for an op without an entry."""
    h = table.get(step.op)
    if isinstance(h, Unsupported):
        raise h.error(step)
    if h is None:
        op = str(step.op)
        if op not in OP_NAMES:
            raise UnsupportedOpError(f"step {step.out!r}: unknown step op {op!r} (step ops: "
                                     f"{[str(o) for o in StepOp]}); the program comes from another hemlp version or "
                                     "a broken pass", op=op, layout=where, alternative=None)
        raise UnsupportedOpError(f"step {step.out!r}: {where} has no handler for step op {op!r}", op=op, layout=where,
                                 alternative=None)
    return h


def check_table(table: dict) -> None:
    """AssertionError unless table holds one entry (a callable or an Unsupported) for every StepOp: what the op
    coverage test asserts of every layout's tables."""
    missing = [str(o) for o in StepOp if o not in table]
    extra = [str(o) for o in table if o not in OP_NAMES]
    bad = [str(o) for o, h in table.items() if not (callable(h) or isinstance(h, Unsupported))]
    if missing or extra or bad:
        raise AssertionError(f"handler table: missing {missing}, unknown {extra}, not handlers {bad}")


# ---------------------------------------------------------------------------------------
# lint
# ---------------------------------------------------------------------------------------

def _shape_checks(s, rows_of) -> str | None:
    """Why step s's shapes do not fit its inputs' features (None: they do, or the step carries no shape)."""
    ins = [rows_of[i] for i in s.inputs]
    U, index = getattr(s, "U", None), getattr(s, "index", None)
    info = getattr(s, "info", None) or {}
    if s.op in (StepOp.PCMM, StepOp.MAMBO) and U is not None:
        U = np.asarray(U)
        if index is None:
            if U.shape != (s.rows, ins[0]):
                return f"its weight is {U.shape[0]}x{U.shape[1]}, the step maps {ins[0]} features to {s.rows}"
        else:
            index = np.asarray(index)
            if index.ndim != 2 or index.shape[0] != U.shape[1] or U.shape[0] * index.shape[1] != s.rows:
                return (f"its im2col index {index.shape} and weight {U.shape} do not make {s.rows} output features")
            if index.size and (index.min() < -1 or index.max() >= ins[0]):
                return f"its im2col index reads rows outside the input's {ins[0]} features"
        bias = getattr(s, "bias", None)
        if bias is not None and np.asarray(bias).shape != (U.shape[0],):
            return f"its bias has shape {np.asarray(bias).shape}, the weight {U.shape[0]} rows"
    elif s.op == StepOp.PERM and index is not None:
        index = np.asarray(index)
        if index.shape != (s.rows,) or (index.size and (index.min() < 0 or index.max() >= ins[0])):
            return f"its permutation {index.shape} does not map the input's {ins[0]} features to {s.rows}"
    elif s.op == StepOp.MATMUL and "a_shape" in info:
        a, b = tuple(info["a_shape"]), tuple(info["b_shape"])
        if int(np.prod(a)) != ins[0] or int(np.prod(b)) != ins[1] or int(np.prod(a[:-1])) * b[-1] != s.rows:
            return f"its operand shapes {a} @ {b} do not fit inputs of {ins} features and {s.rows} outputs"
    elif s.op == StepOp.INPUT:
        if s.rows < 1:
            return "the input has no features"
    elif ins and any(r != s.rows for r in ins):
        return f"it keeps its inputs' features ({ins}) but has {s.rows}"
    if s.op == StepOp.AFFINE:
        for k in ("alpha", "beta"):
            v = getattr(s, k, None)
            if v is not None and np.asarray(v).shape != (s.rows,):
                return f"its {k} has shape {np.asarray(v).shape}, the step {s.rows} features"
    if "in_shape" in info and ins and int(np.prod(info["in_shape"])) != ins[0]:
        return f"its in_shape {tuple(info['in_shape'])} does not hold the input's {ins[0]} features"
    if "out_shape" in info and int(np.prod(info["out_shape"])) != s.rows:
        return f"its out_shape {tuple(info['out_shape'])} does not hold its {s.rows} features"
    return None


def lint_steps(steps, where: str = "") -> list:
    """Raises the first broken invariant of a lowered program (ShapeError; LevelError for levels): every op a StepOp,
    exactly one input and one output step, every value defined once and before it is read, each op's number of
    inputs, the features of every step against its inputs' (and the weight, index, bias and affine shapes it
    carries), and, where levels are planned, no step reading above its inputs' levels and none raising a level
    except the refreshes (bootstrap, MaMBo). ``where`` names the pass in the message. Returns the steps."""
    at = f" (after {where})" if where else ""
    rows_of: dict = {}
    level_of: dict = {}
    counts = {StepOp.INPUT: 0, StepOp.OUTPUT: 0}
    for s in steps:
        if s.op not in OP_NAMES:
            raise ShapeError(f"step {s.out!r}{at}: unknown op {s.op!r} (step ops: {[str(o) for o in StepOp]})")
        if s.out in rows_of:
            raise ShapeError(f"step {s.out!r}{at} ({s.op}): value {s.out!r} is defined twice")
        missing = [i for i in s.inputs if i not in rows_of]
        if missing:
            raise ShapeError(f"step {s.out!r}{at} ({s.op}) reads {missing} before they are defined")
        arity = ARITY.get(s.op, 1)
        if len(s.inputs) != arity:
            raise ShapeError(f"step {s.out!r}{at} ({s.op}) reads {len(s.inputs)} values, its op takes {arity}")
        why = _shape_checks(s, rows_of)
        if why:
            raise ShapeError(f"step {s.out!r}{at} ({s.op}): {why}")
        counts[s.op] = counts.get(s.op, 0) + 1
        lin, lout = s.level_in, s.level_out
        if lin is not None and lout is not None and lout > lin and s.op not in REFRESH_OPS:
            raise LevelError(f"step {s.out!r}{at} ({s.op}) raises the level from {lin} to {lout}; only a refresh "
                             "(bootstrap, MaMBo) does")
        given = [level_of[i] for i in s.inputs if level_of.get(i) is not None]
        if lin is not None and given and lin > max(given):
            raise LevelError(f"step {s.out!r}{at} ({s.op}) is planned at level {lin}, above its inputs' {given}")
        rows_of[s.out], level_of[s.out] = s.rows, lout
    for op in (StepOp.INPUT, StepOp.OUTPUT):
        if counts[op] != 1:
            raise ShapeError(f"the program{at} has {counts[op]} {op} steps, it needs exactly one")
    return steps


#: the environment variable that makes lint_pass lint (the test suite sets it: tests/conftest.py)
LINT_ENV = "HEMLP_LINT_STEPS"


def lint_pass(steps, where: str):
    """lint_steps(steps, where) when HEMLP_LINT_STEPS=1 (every compile pass calls it on its result); the steps."""
    if os.environ.get(LINT_ENV) == "1":
        lint_steps(steps, where)
    return steps
