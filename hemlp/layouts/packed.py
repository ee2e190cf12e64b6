"""Layout (P): a few samples packed into the slots of ONE ciphertext — the small-batch / single-image layout.

Layout (A) puts one feature per ciphertext and the batch along the slots, so a single image wastes
all but one slot of every ciphertext (784 ciphertexts for one MNIST digit). Layout (P) packs the
features of a sample into the slots instead, and turns every linear layer into slot-wise plaintext
products plus rotations (Halevi–Shoup diagonals with baby-step/giant-step, docs/design/pcmm-and-planning.md §5.1):

* per-sample slots: b samples (b = batch rounded up to a power of two) are *interleaved*, slot
  s = i*b + t holds position i of sample t; a rotation by r positions is a slot rotation by r*b, so
  each sample sees a cyclic vector of S' = slots/b positions and the samples never mix.
* ``per(p)`` — a tensor of F <= p features (p a power of two) is stored periodically:
  position i holds x[i mod p] (0 at the pad positions F..p-1), one ciphertext.
* ``rep(K, c, m')`` — the client input when a linear layer consumes it directly: K ciphertexts,
  ciphertext k holds x[k*c + (i div m') mod c] at position i. The first layer is then K plaintext
  products and log2(c) rotate-and-sum steps (no baby/giant rotations): the client pays in upload size
  (K ciphertexts) what the server would pay in rotations.
* linear layer on ``per(n')`` to m outputs (m' = pow2(m)): D = min(m', n') generalised diagonals
  d_j[i] = W'[i mod m'][(i + j) mod n'];  z = sum_j d_j * rot(v, j)  (BSGS: j = g1*h + g, the g-rotations
  hoisted, the plaintexts pre-rotated by -g1*h); then, if m' < n', rotate-and-sum by m', 2m', .. n'/2.
  The result is ``per(m')`` again: clean (no garbage slots), so activations need no masks.
  One level (the products' rescale); the bias is added after the reduction.
* elementwise steps (x^2, polynomials, per-feature affine maps) act on the slots as they are.

The program is derived deterministically from the lowered steps (hemlp.compiler.lower) and the
(slots, batch) pair, so a saved model only stores the steps. ``PackedProgram.simulate`` runs the
same slot program on numpy vectors (np.roll for rotations): it is the oracle of the encrypted run.

Execution (``PackedRunner``): in process, multi-threaded inside the native ops. The plaintext diagonals are
encoded once per (program, context) at the level where they are used, with scale q_level, so each product's
rescale restores the input's scale exactly; they are cached (``prepare``), which is what a server does once
after loading a model.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Optional

import numpy as np

from hemlp.bootstrap import BootParams, BootstrapKeys
from hemlp.compiler.ir import last_uses
from hemlp.compiler.lower import dense_matrix
from hemlp.he.reinterpret import retag
from hemlp.layouts import batch_bootstrap
from hemlp.layouts.packed_diagonals import (SparseDiag, bsgs_split, conv_entry_chunks, dense_entries,
                                           diagonals_from_entries, grid_period, grid_positions, pow2)
from hemlp.layouts.packed_split import block_index, bootstrap_pairs, split_wide_steps, value_of
from hemlp.errors import KeyMismatchError, LevelError, MissingKeyError, ShapeError, UnsupportedError
from hemlp.layouts.base import Layout
from hemlp.layouts.boot_memory import single_boot_bytes
from hemlp.pcmm import CtMatrix
from hemlp.planner.layouts import encode_seconds, estimate_packed, packed_step_seconds
from hemlp.planner.resources import server_memory
from hemlp.runtime.bootstrap_sim import simulate_packed_bootstrap
from hemlp.runtime.local import (ElementwiseOp, add_aligned, bootstrap_restore, bootstrap_units, cached_elementwise,
                                 range_check)
from hemlp.step_ops import SHARED_VALUE_OPS, UNCHECKED_LEVEL_OPS, UNTIMED_OPS, StepOp, Unsupported, handler

__all__ = ["Packed", "PackedLayout", "PackedStep", "PackedProgram", "PackedRunner", "plan_packed", "pow2",
           "diag_vector", "cached_diagonals", "program_bytes", "paired_outputs", "peak_value_bytes",
           "MAX_CACHED_DIAGONAL_BYTES", "CACHE_OPTION", "REFUSED"]

_SIMD = "use layout='batch' (the batch rides in the slots, every product is SIMD)"
#: the step ops layout (P) cannot run: one refusal each, the entry of its planning, plaintext and encrypted tables
REFUSED = {
    StepOp.MATMUL: Unsupported("(P)", "layout='batch'", "layout (P) has no ciphertext x ciphertext matrix product "
                                                        "({out}); " + _SIMD),
    StepOp.PERM: Unsupported("(P)", "layout='batch'", "layout (P) has no row permutation (transpose) ({out}); "
                                                      + _SIMD),
    StepOp.MAMBO: Unsupported("(P)", "layout='batch'", "layout (P) refreshes packed ciphertexts with single CtS-first "
                                                       "bootstraps and has no MaMBo step ({out}); use layout='batch'"),
}


@dataclass(frozen=True)
class PackedLayout:
    kind: str          # "per" | "rep"
    features: int
    period: int        # per: p; rep: the class modulus m' of the consuming layer
    K: int = 1         # rep: number of ciphertexts
    c: int = 1         # rep: positions per class and ciphertext
    grid: Optional[tuple] = None   # per: (C, H, W, H0, W0) multiplexed image placement (None: position = feature)

    def positions(self) -> np.ndarray:
        """per: the position of every feature within the period."""
        if self.grid is None:
            return np.arange(self.features)
        return grid_positions(self.grid)

    def index(self, S1: int) -> np.ndarray:
        """(K, S1) feature index held at every per-sample position (-1 = zero padding)."""
        i = np.arange(S1)
        if self.kind == "per":
            if self.grid is not None:
                one = np.full(self.period, -1)
                one[self.positions()] = np.arange(self.features)
                return one[i % self.period][None, :]
            j = i % self.period
            return np.where(j < self.features, j, -1)[None, :]
        rows = []
        for k in range(self.K):
            j = k * self.c + (i // self.period) % self.c
            rows.append(np.where(j < self.features, j, -1))
        return np.stack(rows)

    def describe(self) -> str:
        if self.kind == "per":
            if self.grid is not None:
                C, H, W, H0, W0 = self.grid
                return f"per({self.period}, {C}x{H}x{W} multiplexed on {H0}x{W0}, gap {H0 // H})"
            return f"per({self.period})"
        return f"rep(K={self.K}, c={self.c}, m'={self.period})"


@dataclass
class PackedStep:
    op: str                      # input | matvec | poly | square | affine | add | alias | output
    out: str
    inputs: list
    layout: PackedLayout
    src: object = None           # the lowered Step it implements
    # matvec
    method: str = ""             # "rep" (client-replicated input) | "bsgs" (periodic input)
    g1: int = 1                  # BSGS baby steps
    diags: dict = field(default_factory=dict)   # rep: {k: vec}; bsgs: {(h, g): vec}  (per-sample vectors)
    reduce: list = field(default_factory=list)  # rotate-and-sum amounts (positions)
    bias: Optional[np.ndarray] = None
    alpha: Optional[np.ndarray] = None           # affine, per position (K, S1)
    beta: Optional[np.ndarray] = None

    @property
    def baby(self) -> list:
        return sorted({g for (_, g) in self.diags}) if self.method == "bsgs" else []

    @property
    def giant(self) -> list:
        return sorted({h for (h, _) in self.diags}) if self.method == "bsgs" else []

    def rotations(self) -> list:
        """Rotation amounts (positions) this step needs."""
        r = [g for g in self.baby if g] + [self.g1 * h for h in self.giant if h] + list(self.reduce)
        return sorted(set(r))

    def rotation_level(self):
        """The highest ciphertext level this step rotates at (None: no rotation). The baby steps rotate
        the input (level_in); giant steps and the rotate-and-sum follow the products' rescale."""
        if self.op != "matvec" or not self.rotations():
            return None
        lv = self.src.level_in
        return lv if any(g for g in self.baby) else lv - 1

    def count(self) -> dict:
        """Operation counts of this step (for the cost model and the plan printout)."""
        if self.op != "matvec":
            return {}
        baby = [g for g in self.baby if g]
        giant = [h for h in self.giant if h]
        return dict(pt_mul=len(self.diags), rot_hoisted=len(baby), rot=len(giant) + len(self.reduce))


def diag_vector(d) -> np.ndarray:
    """A diagonal as its dense per-sample vector (sparse ones are kept as SparseDiag until used)."""
    return d.dense() if isinstance(d, SparseDiag) else d


def _rot(v: np.ndarray, r: int) -> np.ndarray:
    """Left rotation by r positions (ctx.rotate semantics)."""
    return np.roll(v, -int(r), axis=-1)


def check_widest(widest: int, slots: int) -> None:
    """Layout (P) encrypts a sample's input and decrypts its output as one ciphertext each (values in between wider
    than the slots are held as channel blocks: hemlp.layouts.packed_split): UnsupportedError when the widest of
    them (padded to a power of two) exceeds the slots."""
    if pow2(widest) > slots:
        raise UnsupportedError(
            f"layout (P) encrypts a sample's input and decrypts its output as one ciphertext each: the model's has "
            f"{pow2(widest)} (padded) features but a ciphertext holds {slots} slots; use layout='batch' (layout A)")


#: groups of b samples the plaintext oracle evaluates at once (numpy arrays of groups x slots values per value)
SIMULATE_GROUPS = 32

#: the client-replicated input layout is used up to this many input ciphertexts (upload size and
#: encryption time grow with it); above, the input is one periodic ciphertext and the server rotates
MAX_INPUT_CIPHERTEXTS = 32


class PackedProgram:
    """The lowered steps planned in layout (P) for `slots` slots and a batch of up to `b` samples."""

    def __init__(self, steps, slots: int, batch: int, memo: dict | None = None):
        # memo: matrix-vector products planned by another program of the same weights (the bootstrap planner's,
        # before bootstraps are placed), reused by weights, input layout and slots; planned ones are added to it
        self.memo = {} if memo is None else memo
        self.slots = int(slots)
        batch = max(1, int(batch))
        widest = max([pow2(s.rows) for s in steps if s.op in (StepOp.INPUT, StepOp.PCMM)] + [1])
        check_widest(widest, self.slots)
        # b samples share one group of ciphertexts; larger batches run as `groups` such groups
        self.b = min(pow2(batch), self.slots // widest)
        self.groups = -(-batch // self.b)
        self.S1 = self.slots // self.b
        self.steps: list[PackedStep] = []
        self._plan(steps)

    # ------------------------------------------------------------------ planning
    def _check_fits(self, n: int, what: str):
        if pow2(n) > self.S1:
            raise UnsupportedError(
                f"layout (P) keeps a sample's tensor in one ciphertext: {what} has {n} features but a ciphertext "
                f"holds {self.S1} per sample at batch {self.b}; use layout='batch' (layout A) or a smaller batch")

    def _plan(self, steps):
        users = {}
        for s in steps:
            for i in s.inputs:
                users.setdefault(i, []).append(s)
        lay: dict[str, PackedLayout] = {}
        for s in steps:
            self.steps.append(handler(self.PLAN, s, "layout (P)")(self, s, lay, users))
            lay[s.out] = self.steps[-1].layout
        self.input = self.steps[0]
        self.output = self.steps[-1]
        periods = [self.slot_period(t.layout) for t in self.steps if t.op == StepOp.BOOTSTRAP]
        #: the bootstrapper's slot count: every refreshed value repeats with it (None: no bootstrap)
        self.boot_slots = max(2, max(periods)) if periods else None

    def _plan_input(self, s, lay, users) -> PackedStep:
        us = users.get(s.out, [])
        while len(us) == 1 and us[0].op == StepOp.ALIAS:     # flatten: a relabelling, look through it
            us = users.get(us[0].out, [])
        self._check_fits(s.rows, "the input")
        if len(us) == 1 and us[0].op == StepOp.PCMM:
            m = us[0].rows
            self._check_fits(m, f"layer {us[0].out}")
            mp = pow2(m)
            R = self.S1 // mp
            K = -(-s.rows // R)
            c = min(R, pow2(-(-s.rows // K)))
            L = PackedLayout("rep", s.rows, mp, K, c)
            if K > MAX_INPUT_CIPHERTEXTS:
                L = PackedLayout("per", s.rows, pow2(s.rows))
        else:
            L = PackedLayout("per", s.rows, pow2(s.rows))
        return PackedStep(StepOp.INPUT, s.out, [], L, s)

    def _plan_pcmm(self, s, lay, users) -> PackedStep:
        Lin = lay[s.inputs[0]]
        shapes = (tuple(s.info.in_shape or ()), tuple(s.info.out_shape or ()))
        key = (id(s.U), id(s.index), shapes, Lin, self.S1)
        hit = self.memo.get(key)          # its step keeps U and index alive: the ids in the key are theirs
        if hit is not None and (hit[0].bias is s.bias or np.array_equal(hit[0].bias, s.bias)):  # a split's is a copy
            return replace(hit[1], out=s.out, inputs=list(s.inputs), src=s)
        t = self._matvec(s, Lin)
        self.memo[key] = (s, t)
        return t

    def _plan_same(self, s, lay, users) -> PackedStep:
        """A step whose value keeps its input's layout (activations; alias, output; drop / bootstrap: placed by the
        planner)."""
        return PackedStep(s.op, s.out, list(s.inputs), lay[s.inputs[0]], s)

    def _plan_affine(self, s, lay, users) -> PackedStep:
        Lin = lay[s.inputs[0]]
        idx = Lin.index(self.S1)
        a = np.where(idx >= 0, np.asarray(s.alpha)[np.maximum(idx, 0)], 0.0)
        bt = np.where(idx >= 0, np.asarray(s.beta)[np.maximum(idx, 0)], 0.0)
        return PackedStep(StepOp.AFFINE, s.out, list(s.inputs), Lin, s, alpha=a, beta=bt)

    def _plan_slotwise(self, s, lay, users) -> PackedStep:
        """add / mul: slot-wise, both operands in one layout."""
        La, Lb = lay[s.inputs[0]], lay[s.inputs[1]]
        if La != Lb:
            what = "residual add" if s.op == StepOp.ADD else "product"
            raise UnsupportedError(f"layout (P): the {what} {s.out} joins tensors in different layouts "
                                   f"({La.describe()} and {Lb.describe()}); use layout='batch'")
        return PackedStep(s.op, s.out, list(s.inputs), La, s)

    #: one planning handler per step op: (program, lowered step, layouts so far, readers by value) -> its PackedStep
    PLAN = {
        **REFUSED,
        StepOp.INPUT: _plan_input,
        StepOp.PCMM: _plan_pcmm,
        StepOp.SQUARE: _plan_same,
        StepOp.POLY: _plan_same,
        StepOp.AFFINE: _plan_affine,
        StepOp.ADD: _plan_slotwise,
        StepOp.MUL: _plan_slotwise,
        StepOp.ALIAS: _plan_same,
        StepOp.OUTPUT: _plan_same,
        StepOp.DROP: _plan_same,
        StepOp.BOOTSTRAP: _plan_same,
    }

    def slot_period(self, L: PackedLayout) -> int:
        """The smallest power-of-two n such that the slots of a value in layout L repeat every n slots (b
        interleaved samples: a per-sample period p is p*b slots)."""
        idx = L.index(self.S1)
        p = 1
        while p < self.S1 and not np.array_equal(idx, idx[:, np.arange(self.S1) % p]):
            p *= 2
        return p * self.b

    def _out_layout(self, s, Lin: PackedLayout) -> PackedLayout:
        """A conv / avgpool's output on the input's image grid (multiplexed: packed_diagonals), a plain per(m')
        when the output is not a whole-gap subsampling of that grid."""
        m = s.rows
        Cin, H, W = s.info.in_shape
        Co, Ho, Wo = s.info.out_shape
        H0, W0 = (Lin.grid[3], Lin.grid[4]) if Lin.grid is not None else (H, W)
        g = H0 // Ho if Ho and H0 % Ho == 0 else 0
        if g > 1 and W0 % Wo == 0 and W0 // Wo == g:
            grid = (Co, Ho, Wo, H0, W0)
            return PackedLayout("per", m, grid_period(grid), grid=grid)
        return PackedLayout("per", m, pow2(m))

    def _matvec(self, s, Lin: PackedLayout) -> PackedStep:
        structured = s.index is not None and s.info.in_shape is not None and s.info.out_shape is not None
        if Lin.kind == "per" and (structured or Lin.grid is not None):
            return self._sparse_matvec(s, Lin, structured)
        W = dense_matrix(s, Lin.features)
        m, n = W.shape
        if n != Lin.features:
            raise ShapeError(f"layer {s.out}: the weight takes {n} features, its input has {Lin.features}")
        self._check_fits(m, f"layer {s.out}")
        mp = pow2(m)
        S1 = self.S1
        i = np.arange(S1)
        out = PackedLayout("per", m, mp)
        bias = None
        if s.bias is not None:
            bfull = np.asarray(s.bias, dtype=np.float64)
            if s.index is not None:                      # conv: one bias per output channel, P positions each
                bfull = np.repeat(bfull, s.index.shape[1])
            bias = np.where(i % mp < m, bfull[np.minimum(i % mp, m - 1)], 0.0)
        if Lin.kind == "rep":
            assert Lin.period == mp, "rep input planned for another consumer"
            diags = {}
            r = i % mp
            for k, col in enumerate(Lin.index(S1)):
                ok = (r < m) & (col >= 0)
                d = np.where(ok, W[np.minimum(r, m - 1), np.maximum(col, 0)], 0.0)
                if np.any(d):
                    diags[k] = d
            if not diags:         # an all-zero weight: one zero product keeps the output's level and scale
                diags[0] = np.zeros(S1)
            red = [mp << e for e in range(int(math.log2(Lin.c)))]
            return PackedStep("matvec", s.out, list(s.inputs), out, s, method="rep", diags=diags, reduce=red,
                              bias=bias)
        n_p = Lin.period
        Wp = np.zeros((mp, n_p))
        Wp[:m, :n] = W
        D = min(mp, n_p)
        g1 = 1 << ((int(math.log2(D)) + 1) // 2)
        diags = {}
        rr, cc = i % mp, i % n_p
        for j in range(D):
            d = Wp[rr, (cc + j) % n_p]
            if not np.any(d):
                continue
            h, g = divmod(j, g1)
            diags[(h, g)] = _rot(d, -g1 * h)
        if not diags:             # an all-zero weight: one zero product keeps the output's level and scale
            diags[(0, 0)] = np.zeros(S1)
        red = [mp << e for e in range(int(math.log2(n_p // mp)))] if mp < n_p else []
        return PackedStep("matvec", s.out, list(s.inputs), out, s, method="bsgs", g1=g1, diags=diags, reduce=red,
                          bias=bias)

    def _sparse_matvec(self, s, Lin: PackedLayout, structured: bool) -> PackedStep:
        """A linear layer on a per input from its nonzero entries (hemlp.layouts.packed_diagonals): convs and
        avgpools from their im2col structure onto the input's image grid, dense layers reading a multiplexed
        layout from their matrix; only the nonzero diagonals, BSGS split for their offsets."""
        m = s.rows
        if structured:
            Cin, H, W = s.info.in_shape
            if Cin * H * W != Lin.features:
                raise ShapeError(f"layer {s.out}: its input shape {Cin}x{H}x{W} does not match the {Lin.features} "
                                 "features of its input")
            out = self._out_layout(s, Lin)
            rows, cols, vals = conv_entry_chunks(s.U, s.index), None, None     # summed chunk by chunk
        else:
            Wd = dense_matrix(s, Lin.features)
            if Wd.shape[1] != Lin.features:
                raise ShapeError(f"layer {s.out}: the weight takes {Wd.shape[1]} features, its input has "
                                 f"{Lin.features}")
            out = PackedLayout("per", m, pow2(m))
            rows, cols, vals = dense_entries(Wd)
        self._check_fits(out.period, f"layer {s.out}")
        S1 = self.S1
        diags, red = diagonals_from_entries(rows, cols, vals, out.positions(), out.period, Lin.positions(),
                                            Lin.period, S1)
        g1 = bsgs_split(diags)
        bsgs = {}
        for j, d in diags.items():
            h, g = divmod(j, g1)
            bsgs[(h, g)] = d.rotated(-g1 * h)
        bias = None
        if s.bias is not None:
            bfull = np.asarray(s.bias, dtype=np.float64)
            if s.index is not None:                      # conv: one bias per output channel, P positions each
                bfull = np.repeat(bfull, s.index.shape[1])
            idx = out.index(S1)[0]
            bias = np.where(idx >= 0, bfull[np.maximum(idx, 0)], 0.0)
        return PackedStep("matvec", s.out, list(s.inputs), out, s, method="bsgs", g1=g1, diags=bsgs, reduce=red,
                          bias=bias)

    # ------------------------------------------------------------------ facts
    def rotations(self) -> list:
        """Slot rotation amounts of the whole program (rotation keys to generate)."""
        r = set()
        for s in self.steps:
            r.update(x * self.b for x in s.rotations())
        return sorted(r)

    def rotation_level(self):
        """The highest level any rotation of the program happens at (None: no rotations): one level for
        the whole rotation-key set (keys for lower levels would be smaller still, but one set is simpler)."""
        lv = [x for x in (s.rotation_level() for s in self.steps) if x is not None]
        return max(lv) if lv else None

    def counts(self) -> dict:
        tot = dict(pt_mul=0, rot_hoisted=0, rot=0)
        for s in self.steps:
            for k, v in s.count().items():
                tot[k] += v
        tot["input_ciphertexts"] = self.input.layout.K
        return tot

    def describe(self) -> list[str]:
        grp = f" x {self.groups} groups" if self.groups > 1 else ""
        lines = [f"layout (P): {self.b} sample(s) interleaved{grp}, {self.S1} slots per sample; input "
                 f"{self.input.layout.describe()} ({self.input.layout.K} ciphertext(s)), "
                 f"{len(self.rotations())} rotation keys"]
        for s in self.steps:
            if s.op == "matvec":
                c = s.count()
                lines.append(f"  {s.out}: {s.method} matvec -> {s.layout.describe()}: {c['pt_mul']} plaintext "
                             f"products, {c['rot_hoisted']} hoisted + {c['rot']} rotations")
        return lines

    # ------------------------------------------------------------------ client-side packing
    def pack(self, x: np.ndarray) -> np.ndarray:
        """Samples (B, F) -> slot vectors (K, slots) of the input layout."""
        x = np.asarray(x, dtype=np.float64).reshape(x.shape[0], -1)
        B = x.shape[0]
        if B > self.b:
            raise ShapeError(f"layout (P) was planned for {self.b} sample(s) per ciphertext, got {B}")
        idx = self.input.layout.index(self.S1)                    # (K, S1)
        xz = np.concatenate([x, np.zeros((B, 1))], axis=1)       # index -1 -> the zero column
        vals = xz[:, idx]                                         # (B, K, S1)
        out = np.zeros((idx.shape[0], self.S1, self.b))
        out[:, :, :B] = np.transpose(vals, (1, 2, 0))
        return out.reshape(idx.shape[0], self.slots)

    def unpack(self, slots: np.ndarray, batch: int) -> np.ndarray:
        """Output slot vector(s) (K, slots) -> samples (batch, F_out)."""
        L = self.output.layout
        v = np.asarray(slots).reshape(L.K, self.S1, self.b)
        F = L.features
        idx = L.index(self.S1)
        out = np.zeros((batch, F))
        for k in range(L.K):
            pos = np.nonzero(idx[k] >= 0)[0]
            feat = idx[k][pos]
            first = np.unique(feat, return_index=True)[1]
            out[:, feat[first]] = v[k, pos[first], :batch].T
        return out

    def spread(self, vec: np.ndarray) -> np.ndarray:
        """A per-sample vector (S1,) as the slot vector of all interleaved samples."""
        return np.repeat(np.asarray(vec, dtype=np.float64), self.b)

    # ------------------------------------------------------------------ plaintext oracle
    def simulate(self, X: np.ndarray) -> np.ndarray:
        """The same slot program on numpy slot vectors; X: (B, F_in) -> (B, F_out), any B (groups of b samples,
        evaluated together)."""
        out = {}
        self.run_plain(X, on_value=lambda name, v: out.__setitem__(name, v) if name == self.output.out else None)
        y = out[self.output.out]
        return np.concatenate([self.unpack(np.stack([v[g] for v in y]), min(self.b, len(X) - g * self.b))
                               for g in range(y[0].shape[0])]) if len(X) else np.zeros((0, self.output.layout.features))

    def run_plain(self, X: np.ndarray, on_value) -> None:
        """The slot program on all of X at once: every value is a list of the layout's K arrays (groups, slots), one
        row per group of b samples; ``on_value(name, value)`` sees each step's value, which is then freed after its
        last use."""
        X = np.asarray(X, dtype=np.float64).reshape(len(X), -1)
        starts = range(0, len(X), self.b)
        nbs = np.array([min(self.b, len(X) - i) for i in starts])
        packed = [self.pack(X[i: i + self.b]) for i in starts]                 # (K, slots) per group
        last = last_uses(self.steps)
        x_in = [np.stack([p[k] for p in packed]) for k in range(self.input.layout.K)]
        vals: dict = {}
        for i, st in enumerate(self.steps):
            f = handler(self.PLAIN, st.src, "layout (P)'s plaintext program")
            y = f(self, st, vals[st.inputs[0]] if st.inputs else x_in, vals, nbs)
            vals[st.out] = y
            on_value(st.out, y)
            for name in st.inputs:
                if last.get(name) == i:
                    vals.pop(name, None)

    def _plain_act(self, s: PackedStep, x: list, vals: dict, nbs: np.ndarray) -> list:
        idx = s.layout.index(self.S1)
        live = np.arange(self.b)[None, None, :] < nbs[:, None, None]        # (groups, 1, b): real samples
        for v, ix in zip(x, idx):
            used = live & (ix >= 0)[None, :, None]
            range_check(s.src, v.reshape(len(nbs), self.S1, self.b)[used])
        return [s.src.act.eval_u(v) for v in x]

    def _plain_bootstrap(self, s: PackedStep, x: list, vals: dict, nbs: np.ndarray) -> list:
        rows = [simulate_packed_bootstrap(s.src, [v[g] for v in x], self.boot_slots) for g in range(len(nbs))]
        return [np.stack([r[k] for r in rows]) for k in range(len(x))]

    def _plain_same(self, s: PackedStep, x: list, vals: dict, nbs: np.ndarray) -> list:
        return x

    #: the plaintext slot program, one handler per step op: (program, PackedStep, its first input's value (the input
    #: step: the packed input), values, real samples per group) -> the step's value (K arrays of groups x slots)
    PLAIN = {
        **REFUSED,
        StepOp.INPUT: _plain_same,
        StepOp.PCMM: lambda self, s, x, vals, nbs: [self._matvec_plain(s, x)],
        StepOp.SQUARE: _plain_act,
        StepOp.POLY: _plain_act,
        StepOp.AFFINE: lambda self, s, x, vals, nbs: [v * self.spread(a) + self.spread(bt)
                                                      for v, a, bt in zip(x, s.alpha, s.beta)],
        StepOp.ADD: lambda self, s, x, vals, nbs: [u + v for u, v in zip(x, vals[s.inputs[1]])],
        StepOp.MUL: lambda self, s, x, vals, nbs: [u * v for u, v in zip(x, vals[s.inputs[1]])],
        StepOp.BOOTSTRAP: _plain_bootstrap,
        StepOp.ALIAS: _plain_same,
        StepOp.OUTPUT: _plain_same,
        StepOp.DROP: _plain_same,
    }

    def _matvec_plain(self, s: PackedStep, x: list) -> np.ndarray:
        b = self.b
        if s.method == "rep":
            z = sum(x[k] * self.spread(d) for k, d in s.diags.items())
        else:
            v = x[0]
            z = 0.0
            baby = {g: _rot(v, g * b) for g in s.baby if any((h, g) in s.diags for h in s.giant)}   # hoisted
            for h in s.giant:
                terms = [(g, s.diags[(h, g)]) for g in s.baby if (h, g) in s.diags]
                if not terms:
                    continue
                inner = baby[terms[0][0]] * self.spread(diag_vector(terms[0][1]))
                for g, d in terms[1:]:
                    inner += baby[g] * self.spread(diag_vector(d))
                z = z + _rot(inner, s.g1 * h * b)
        for r in s.reduce:
            z = z + _rot(z, r * b)
        if s.bias is not None:
            z = z + self.spread(s.bias)
        return z


def plan_packed(steps, slots: int, batch: int) -> PackedProgram:
    return PackedProgram(steps, slots, batch)


#: the most bytes of encoded diagonals a runner keeps (in program order); the others are encoded when used and
#: dropped. Compiled with a memory budget, a plan keeps what the budget leaves (Packed.fit_memory), at most this.
#: The ResNet-20-like plan at N16-boot has 15.8 GB of them (scripts/plan_resnet20_packed.py)
MAX_CACHED_DIAGONAL_BYTES = 6 * 2 ** 30
#: the stored option holding a compiled plan's cache size in bytes (absent: MAX_CACHED_DIAGONAL_BYTES)
CACHE_OPTION = "diagonal_cache_bytes"


def cached_diagonals(prog, N: int, budget: int | None = None) -> set:
    """{(step, key)}: the diagonals PackedRunner keeps encoded, in program order while they fit `budget` bytes
    (None: MAX_CACHED_DIAGONAL_BYTES)."""
    budget = MAX_CACHED_DIAGONAL_BYTES if budget is None else int(budget)
    keep, used = set(), 0
    for s in prog.steps:
        if s.op == "matvec":
            size = N * 8 * (s.src.level_in + 1)
            for key in s.diags:
                if used + size > budget:
                    return keep
                keep.add((s.out, key))
                used += size
    return keep


class PackedRunner:
    def __init__(self, ctx, prog, cache_bytes: int | None = None):
        """cache_bytes: the encoded diagonals it keeps (cached_diagonals; None: MAX_CACHED_DIAGONAL_BYTES)."""
        self.ctx, self.prog = ctx, prog
        self._pts: dict = {}
        self._pe = {}
        self._keep = cached_diagonals(prog, ctx.N, cache_bytes)
        by_name = {s.out: s for s in prog.steps}
        self._partners = {a: by_name[b] for a, b in paired_outputs(prog.steps).items()}
        self._paired: dict = {}

    # ---- plaintexts
    def _pt(self, step, key, vec, level: int):
        k = (step.out, key, level)
        pt = self._pts.get(k)
        if pt is None:
            ctx = self.ctx
            pt = ctx.encode(self.prog.spread(diag_vector(vec)), level=level, scale=float(ctx.modulus(level)))
            if (step.out, key) in self._keep:
                self._pts[k] = pt
        return pt

    def prepare(self) -> float:
        """Encode the diagonals that are kept (cached_diagonals) now (seconds spent); run() would otherwise do it on
        first use."""
        t0 = time.perf_counter()
        for s in self.prog.steps:
            if s.op == "matvec":
                for key, d in s.diags.items():
                    if (s.out, key) in self._keep:
                        self._pt(s, key, d, s.src.level_in)
        return time.perf_counter() - t0

    @property
    def cached_bytes(self) -> int:
        return sum(self.ctx.N * 8 * (lv + 1) for (_, _, lv) in self._pts)

    # ---- steps
    def _matvec(self, s, x: list, gk):
        ctx, b = self.ctx, self.prog.b
        lv = s.src.level_in
        if x[0].level != lv:
            raise LevelError(f"step {s.out}: input at level {x[0].level}, planned {lv}")
        if s.method == "rep":
            z = None
            for k, d in s.diags.items():       # every product is a new ciphertext: accumulate into the first
                t = ctx.mul(x[k], self._pt(s, k, d, lv))
                z = t if z is None else ctx.add_inplace(z, t)
            ctx.rescale_inplace(z)
        else:
            v = x[0]
            baby = [g for g in s.baby if g]
            rots = {0: v}
            if baby:
                rots.update(zip(baby, ctx.rotate_hoisted(v, [g * b for g in baby], gk)))
            z = None
            for h in s.giant:
                inner = None
                for g in s.baby:
                    d = s.diags.get((h, g))
                    if d is None:
                        continue
                    t = ctx.mul(rots[g], self._pt(s, (h, g), d, lv))
                    inner = t if inner is None else ctx.add_inplace(inner, t)
                ctx.rescale_inplace(inner)
                if h:
                    ctx.rotate_inplace(inner, s.g1 * h * b, gk)
                z = inner if z is None else ctx.add_inplace(z, inner)
        for r in s.reduce:                     # z is this step's own ciphertext (a rescale's or a rotation's result)
            ctx.add_inplace(z, ctx.rotate(z, r * b, gk))
        if s.bias is not None:
            z = ctx.add(z, self.prog.spread(s.bias))
        return [z]

    def _affine(self, s, x: list, vals: dict, keys) -> list:
        """Per position (the packed layout's alpha / beta slot vectors), not per feature as ElementwiseOp."""
        ctx, out = self.ctx, []
        for ct, a, bt in zip(x, s.alpha, s.beta):
            y = ctx.rescale_inplace(ctx.mul(ct, self.prog.spread(a)))
            out.append(ctx.add(y, self.prog.spread(bt)) if np.any(bt) else y)
        return out

    def _act(self, s, x: list, vals: dict, keys) -> list:
        fn = cached_elementwise(self._pe, self.ctx, ElementwiseOp.from_step(s.src), keys.relin)
        return [fn(0, ct) for ct in x]

    def _bootstrap(self, s, x: list, vals: dict, boot) -> list:
        """The bootstrap step: every ciphertext divided by c (a re-tag of the scale) and read with the program's
        boot_slots slots (its slots repeat with that period), refreshed (two real ones per bootstrap_pair), multiplied
        back by c exactly, dropped to the planned level and read with all slots again. Two channel blocks of a wide
        value are refreshed together (packed_split.bootstrap_pairs): the first block's step refreshes both, the
        second's takes its result."""
        if boot is None:
            raise MissingKeyError(f"step {s.out} bootstraps: run the plan with its bootstrapping keys (keygen()'s "
                                  "eval_keys)")
        done = self._paired.pop(s.out, None)
        if done is not None:
            return done
        partner = self._partners.get(s.out)
        parts = [(s, x)] + ([(partner, vals[partner.inputs[0]])] if partner is not None else [])
        ctx, n = self.ctx, self.prog.boot_slots
        cts, owner = [], []
        for st, xs in parts:
            c = int(st.src.info.scale_factor)
            cts += [retag(ctx, ct, scale=ct.scale * c, slots=n) if (c != 1 or n != ct.slots) else ct for ct in xs]
            owner += [st] * len(xs)
        out = [None] * len(cts)
        for u in bootstrap_units(cts):
            res = boot.bootstrap_pair(*(cts[i] for i in u)) if len(u) == 2 else [boot.bootstrap(cts[u[0]])]
            for i, ct in zip(u, res):
                ct = bootstrap_restore(ctx, [ct], owner[i].src)[0]
                out[i] = retag(ctx, ct, slots=ctx.slots) if n != ctx.slots else ct
        if partner is not None:
            self._paired[partner.out] = out[len(x):]
        return out[:len(x)]

    def _input(self, s, x: list, vals: dict, keys) -> list:
        lv = s.src.level_out
        if x[0].level < lv:
            raise LevelError(f"the input is at level {x[0].level} but the plan starts at level {lv}")
        return [self.ctx.drop_level(c, lv) if c.level != lv else c for c in x]

    def _add(self, s, x: list, vals: dict, keys) -> list:
        ctx = self.ctx
        A = CtMatrix(ctx, x, (len(x), ctx.slots), 1)
        B = CtMatrix(ctx, vals[s.inputs[1]], (len(x), ctx.slots), 1)
        return add_aligned(ctx, A, B, s.src.level_out).cts

    def _mul(self, s, x: list, vals: dict, keys) -> list:
        ctx, relin_key = self.ctx, keys.relin
        if relin_key is None:
            raise MissingKeyError(f"step {s.out} multiplies two ciphertexts: it needs the relinearisation key")
        B = vals[s.inputs[1]]
        lv = min(x[0].level, B[0].level)
        return [ctx.mul(ctx.drop_level(a, lv) if a.level != lv else a, ctx.drop_level(c, lv) if c.level != lv
                        else c, relin_key=relin_key, rescale=True) for a, c in zip(x, B)]

    def _same(self, s, x: list, vals: dict, keys) -> list:
        return x

    #: the encrypted program, one handler per step op: (runner, PackedStep, its first input's ciphertexts (the input
    #: step: the encrypted input), values, the run's keys) -> the step's ciphertexts
    RUN = {
        **REFUSED,
        StepOp.INPUT: _input,
        StepOp.PCMM: lambda self, s, x, vals, keys: self._matvec(s, x, keys.galois),
        StepOp.SQUARE: _act,
        StepOp.POLY: _act,
        StepOp.AFFINE: _affine,
        StepOp.ADD: _add,
        StepOp.MUL: _mul,
        StepOp.DROP: lambda self, s, x, vals, keys: [self.ctx.drop_level(c, s.src.level_out) for c in x],
        StepOp.BOOTSTRAP: lambda self, s, x, vals, keys: self._bootstrap(s, x, vals, keys.boot),
        StepOp.ALIAS: _same,
        StepOp.OUTPUT: _same,
    }

    def run(self, cts: list, relin_key, galois_keys, timings: dict | None = None, boot=None) -> list:
        """Input ciphertexts (the input layout's K) -> output ciphertext list. boot: the Bootstrapper of a program
        with bootstrap steps."""
        if self.prog.rotations() and galois_keys is None:
            raise MissingKeyError("layout (P) needs the rotation keys of this model: use keygen()'s eval_keys")
        keys = SimpleNamespace(relin=relin_key, galois=galois_keys, boot=boot)
        vals = {}
        self._paired = {}       # a paired bootstrap's second block, refreshed by the first's step
        last = last_uses(self.prog.steps)
        for i, s in enumerate(self.prog.steps):
            x = vals[s.inputs[0]] if s.inputs else cts
            t0 = time.perf_counter()
            y = handler(self.RUN, s.src, "layout (P)'s run")(self, s, x, vals, keys)
            if s.src.op not in UNCHECKED_LEVEL_OPS and y[0].level != s.src.level_out:
                raise AssertionError(f"step {s.out}: level {y[0].level}, planned {s.src.level_out}")
            if timings is not None and s.src.op not in UNTIMED_OPS:
                timings[s.out] = time.perf_counter() - t0
            vals[s.out] = y
            for name in s.inputs:        # a value's ciphertexts go after its last reader (peak_value_bytes)
                if last.get(name) == i:
                    vals.pop(name, None)
        return vals[self.prog.output.out]


class Packed(Layout):
    """Layout (P): the features of b samples in the slots of one ciphertext (BSGS diagonal products)."""

    name, label = "packed", "(P)"

    @classmethod
    def plan(cls, p):
        """Layout (P) for the planned steps, values wider than a ciphertext held as channel blocks
        (hemlp.layouts.packed_split)."""
        return super().plan(replace(p, steps=split_wide_steps(p.steps, p.params.N // 2)))

    def build_program(self) -> PackedProgram:
        return PackedProgram(self.steps, self.params.N // 2, self.batch_size, self.reuse.get("packed_matvecs"))

    @classmethod
    def step_tables(cls) -> dict:
        return {"plan": PackedProgram.PLAN, "simulate": PackedProgram.PLAIN, "run": PackedRunner.RUN}

    def _boot_summary(self):
        return batch_bootstrap.summary(self.steps, self.params, self.batch_size,
                                       layer_seconds=estimate_packed(self.program, self.steps, self.params))

    def estimate(self) -> float:
        """The client's input encryption and every server step (step_estimates)."""
        prog, params = self.program, self.params
        client = sum(packed_step_seconds(prog, s, params, params.max_level if s.src.level_out is None
                                         else s.src.level_out) for s in prog.steps if s.src.op == StepOp.INPUT)
        return client * prog.groups + sum(self.step_estimates().values())

    def step_estimates(self) -> dict:
        """{step: estimated seconds per batch} under the names of compiled.run's layer_seconds: each matvec with the
        encoding of its diagonals beyond the cache, each bootstrap at the placement's price."""
        prog, params = self.program, self.params
        matvecs = [s.out for s in prog.steps if s.op == "matvec"]
        uncached = dict(zip(matvecs, self.diagonal_encodings(cached=False)))
        out = {}
        for s in prog.steps:
            if s.src.op in UNTIMED_OPS:
                continue
            if s.src.op == StepOp.BOOTSTRAP:          # the placement priced every group's ciphertexts
                out[s.out] = float(s.src.info.seconds)
                continue
            lv = params.max_level if s.src.level_in is None else s.src.level_in
            t = packed_step_seconds(prog, s, params, lv)
            if s.op == "matvec":
                t += encode_seconds([uncached[s.out]], params.N, 0)
            out[s.out] = t * prog.groups
        return out

    def keyswitches(self) -> dict:
        out = {}
        for t in self.program.steps:
            if t.op == "matvec":
                out[t.src.out] = (1 if any(g for g in t.baby) else 0, len([h for h in t.giant if h]), len(t.reduce))
        return out

    def value_magnitudes(self, magnitudes: dict) -> dict:
        """A channel block's rows are its whole value's, in block order (hemlp.layouts.packed_split): sliced from
        the whole value's magnitudes. A PCMM's partial products and sums have none (only adds read them)."""
        out, start = dict(magnitudes), {}
        for s in self.steps:
            j = block_index(s.out)
            whole = value_of(s.out) if j is not None else None
            if whole is None:
                continue
            lo = start.get(whole, 0)
            start[whole] = lo + s.rows
            if whole in magnitudes and s.out not in out:
                out[s.out] = np.asarray(magnitudes[whole])[lo:lo + s.rows]
        return out

    def plan_info(self) -> dict:
        prog = self.program
        info = dict(packed=prog.describe(), rotation_keys=len(prog.rotations()), counts=prog.counts())
        b = batch_bootstrap.sparse_summary(self._boot_summary(), self.params, prog.boot_slots)
        if b is not None:
            info["bootstrap"] = b
        return info

    @staticmethod
    def plan_header(info: dict) -> list[str]:
        return list(info["packed"]) + ["eval keys: " + ("relinearisation key + " if info["needs_relin"] else "")
                                       + f"{info['rotation_keys']} rotation keys"
                                       + (" + bootstrapping keys" if info.get("bootstrap") else "")]

    @staticmethod
    def finish_plan_text(text: str, info: dict) -> str:   # the same layers, executed as slot diagonal products
        text = text.replace(" = pcmm_gather(", " = matvec_conv(").replace(" = pcmm(", " = matvec(")
        return text + batch_bootstrap.sparse_summary_text(
            info, "layout (P): each bootstrap refreshes the packed ciphertext with {slots} slots (its slots repeat "
                  "with that period: a sparse bootstrap)")

    def key_levels(self) -> dict:
        return dict(relin=self.relin_level(), rotation=self.program.rotation_level())

    def boot_params(self, ctx) -> BootParams:
        """The bootstrapping parameters of the program: the preset's, with the program's slot count."""
        return BootParams.for_context(ctx, slots=self.program.boot_slots)

    def keygen(self, ctx, sk) -> tuple:
        rlk, _, _ = super().keygen(ctx, sk)
        rots = self.program.rotations()
        gk = ctx.rotation_keys(sk, rots, level=self.key_levels()["rotation"]) if rots else None
        if self.bootstrapped:
            return rlk, gk, None, BootstrapKeys.generate(ctx, sk, self.boot_params(ctx))
        return rlk, gk, None

    def check_run(self, ct, eval_keys, weights, runtime: str, model_id: str) -> None:
        if weights is not None:
            raise TypeError("weights= is only for models compiled with encrypted_weights=True")
        gk = eval_keys.galois_keys
        if gk is None and self.program.rotations():
            raise MissingKeyError("layout (P) needs this model's rotation keys; use keygen()'s eval_keys")
        if gk is not None and gk.key_id != ct.key_id:
            raise KeyMismatchError("the rotation keys and the ciphertext come from different key pairs")
        if self.bootstrapped:
            batch_bootstrap.check_single_boot_keys(eval_keys, self.program.boot_slots, "ciphertexts")

    @property
    def capacity(self) -> int:
        return self.program.b * self.program.groups

    def encrypt(self, ctx, x, key, level: int):
        prog = self.program
        b = prog.b                      # groups of b samples, K ciphertexts each
        cts = [ctx.encrypt(v, key, level=level) for i in range(0, x.shape[0], b) for v in prog.pack(x[i: i + b])]
        return CtMatrix(ctx, cts, (len(cts), ctx.slots), 1)

    def decrypt(self, ctx, ctm, sk, batch: int) -> np.ndarray:
        prog = self.program
        slots = np.stack([ctx.decrypt(c, sk) for c in ctm.cts])
        K = prog.output.layout.K
        ys = [prog.unpack(slots[g * K:(g + 1) * K], min(prog.b, batch - g * prog.b))
              for g in range(-(-batch // prog.b))]
        return np.concatenate(ys).reshape(batch, -1)

    def prepare(self, ctx) -> float:
        return self.runner(ctx, self._make_runner).prepare()

    def _make_runner(self, ctx) -> PackedRunner:
        return PackedRunner(ctx, self.program, self.cache_bytes)

    def groups(self, ct) -> list[list[int]]:
        """The groups of b samples (K ciphertexts each): independent, the same program on each."""
        prog = self.program
        K, groups = prog.input.layout.K, -(-ct.batch // prog.b)
        if len(ct.ctm.cts) != K * groups:
            raise ShapeError(f"layout (P) input of {ct.batch} samples needs {K * groups} ciphertexts "
                             f"({groups} group(s) of {K}), got {len(ct.ctm.cts)}")
        return [list(range(g * K, (g + 1) * K)) for g in range(groups)]

    def run_group(self, ctx, cts: list, eval_keys, weights, timings: dict, part=None) -> list:
        boot = self.bootstrapper(ctx, eval_keys.bootstrap_keys) if self.bootstrapped else None
        return self.runner(ctx, self._make_runner).run(cts, eval_keys.relin_key, eval_keys.galois_keys, timings,
                                                       boot=boot)

    def simulate(self, X: np.ndarray) -> np.ndarray:   # any number of samples, in groups of b evaluated together
        return self.in_groups(self.program.simulate, X, SIMULATE_GROUPS * self.program.b)

    # ---- resources
    def key_inventory(self) -> dict:
        inv, rots = super().key_inventory(), self.program.rotations()
        if rots:
            inv["rotation"] = (len(rots), self.key_levels()["rotation"])
        return inv

    def ciphertexts_in(self) -> int:
        return self.program.input.layout.K * self.program.groups

    def progress_total(self) -> int:
        return sum(1 for s in self.program.steps if s.op not in UNTIMED_OPS)

    def ciphertexts_out(self) -> tuple:
        return self.program.output.layout.K * self.program.groups, self.output_level()

    @property
    def cache_bytes(self) -> int:
        """The encoded diagonals the runner may keep: the plan's (fit_memory), else MAX_CACHED_DIAGONAL_BYTES."""
        size = self.options.get(CACHE_OPTION)
        return MAX_CACHED_DIAGONAL_BYTES if size is None else int(size)

    def fit_memory(self, budget: int | None, boot_key_bytes: int = 0) -> None:
        """The diagonal cache gets what the run leaves of `budget` with no cache (base, keys, input, working set)
        when that is below MAX_CACHED_DIAGONAL_BYTES (the default otherwise, and with no budget); the plan stores it
        and every run keeps that much. A budget the run exceeds even without a cache leaves it at 0 for the memory
        check to refuse."""
        self.options.pop(CACHE_OPTION, None)
        if budget is not None:
            self.options[CACHE_OPTION] = 0
            left = int(budget) - server_memory(self, boot_key_bytes).running
            if left >= MAX_CACHED_DIAGONAL_BYTES:
                self.options.pop(CACHE_OPTION)
            else:
                self.options[CACHE_OPTION] = max(0, left)
        self._runner = None

    def prepared_bytes(self) -> int:
        # the diagonals PackedRunner keeps, each encoded once at its step's input level (cached_diagonals)
        N = self.params.N
        keep = cached_diagonals(self.program, N, self.cache_bytes)
        return sum(N * 8 * (s.src.level_in + 1) for s in self.program.steps if s.op == "matvec"
                   for key in s.diags if (s.out, key) in keep)

    def diagonal_encodings(self, cached: bool) -> list:
        """(diagonals, limbs) per matvec step of the diagonals the runner keeps (cached: encoded once, by prepare)
        or encodes anew on every run (beyond its cache budget), each at its step's input level."""
        keep = cached_diagonals(self.program, self.params.N, self.cache_bytes)
        return [(sum(1 for key in s.diags if ((s.out, key) in keep) == cached), s.src.level_in + 1)
                for s in self.program.steps if s.op == "matvec"]

    def uncached_diagonals(self) -> int:
        """Diagonals encoded anew on every run (beyond the runner's cache budget)."""
        return sum(n for n, _ in self.diagonal_encodings(cached=False))

    def prepare_seconds_estimate(self) -> float:
        return encode_seconds(self.diagonal_encodings(cached=True), self.params.N, self.prepared_bytes())

    def working_bytes(self) -> int:
        return sum(self.memory_parts().values())

    def memory_parts(self) -> dict:
        """The run's memory beyond the keys, the input and the cache (bytes, working_bytes' terms): the program's
        diagonal vectors, the most values PackedRunner.run holds at once (peak_value_bytes), the bootstrapper
        (encoded DFT diagonals, its vectors and temporaries: hemlp.layouts.boot_memory) and the largest step's
        temporaries."""
        N, prog = self.params.N, self.program
        ct = lambda level: 2 * N * 8 * (int(level) + 1)     # noqa: E731
        values = peak_value_bytes(prog, ct)
        step = [(len([g for g in s.baby if g]) + MATVEC_WORKING_CIPHERTEXTS) * ct(s.src.level_in)
                for s in prog.steps if s.op == "matvec"]
        step += [ACTIVATION_WORKING_CIPHERTEXTS * s.layout.K * ct(s.src.level_in) for s in prog.steps
                 if s.src.op in (StepOp.POLY, StepOp.SQUARE, StepOp.MUL)]
        return dict(program=program_bytes(prog), values=values, step=max(step, default=0),
                    bootstrapper=single_boot_bytes(self.params, prog.boot_slots) if prog.boot_slots else 0)


#: a diagonal product's temporaries beyond its hoisted baby-step rotations, in ciphertexts at its input level (the
#: partial sums, the product and the key switch's digits: measured 5-11 at test-N15-boot and N16-boot)
MATVEC_WORKING_CIPHERTEXTS = 12
#: a polynomial activation's temporaries in ciphertexts at its input level (its powers: measured 8-11)
ACTIVATION_WORKING_CIPHERTEXTS = 12


def paired_outputs(steps) -> dict:
    """{first block's output: second's} of the program steps that one bootstrap_pair refreshes together."""
    return bootstrap_pairs([s.src for s in steps])


def peak_value_bytes(prog: PackedProgram, ct_bytes) -> int:
    """The most bytes of values PackedRunner.run holds at once: each step's ciphertexts (ct_bytes(level) each) from
    the step that makes them (a paired bootstrap's second block: its first block's step) until the last step that
    reads them or a value sharing them (an alias, the output). The caller's input is not counted."""
    steps = prog.steps
    last = last_uses(steps)
    owner, end = {}, {}
    for i, s in enumerate(steps):
        o = owner.get(s.inputs[0], s.inputs[0]) if s.src.op in SHARED_VALUE_OPS and s.inputs else s.out
        owner[s.out] = o
        end[o] = max(end.get(o, i), last.get(s.out, i))
    pairs = paired_outputs(steps)
    made_at = {pairs[s.out]: i for i, s in enumerate(steps) if s.out in pairs}
    alloc, free = [0] * len(steps), [0] * len(steps)
    for i, s in enumerate(steps):
        if s.src.op in UNTIMED_OPS or s.src.level_out is None:
            continue
        b = s.layout.K * ct_bytes(s.src.level_out)
        alloc[made_at.get(s.out, i)] += b
        free[end[s.out]] += b
    live = peak = 0
    for a, f in zip(alloc, free):
        live += a
        peak = max(peak, live)
        live -= f
    return peak


def program_bytes(prog: PackedProgram) -> int:
    """The program's numpy vectors: every diagonal (dense, or a SparseDiag's positions and values) and the per-position
    bias / affine vectors."""
    return sum(d.nbytes for s in prog.steps if s.op == "matvec" for d in s.diags.values()) + sum(
        np.asarray(v).nbytes for s in prog.steps for v in (s.bias, s.alpha, s.beta) if v is not None)
