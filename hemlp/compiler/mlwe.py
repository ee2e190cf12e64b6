"""Layout (A′): MLWE PCMMs on coefficient-encoded ciphertexts, activations through CoeffToSlot / SlotToCoeff.

Layout (A) puts the batch along the N/2 slots, so a batch B < N/2 leaves slots empty in every one of the
features' ciphertexts. Layout (A′) puts the batch along the *coefficients* instead, B' = B rounded up to a
power of two (at least the smallest power of two >= √N) columns, and k = N/B' feature rows interleaved
per ciphertext (row k·g + u, column t -> coefficient t·k + u of ciphertext g; hemlp.linalg's MLWE format):
a tensor of F features takes ceil(F/k) ciphertexts instead of F.

* Linear layer: one MLWE PCMM (hemlp.linalg / csrc/pcmm/mlwe.cpp): ModDecomp (free), two exact modular
  GEMMs per limb (a-parts N columns, b-parts B' columns), ModPack (k key switches per output ciphertext,
  one ModDown), one rescale: **1 level**. The output is coefficient-encoded in the same interleaving.
* Activations need slots. A maximal run of elementwise steps (x², the compiled polynomial, affine maps)
  is evaluated as
      CoeffToSlot (bit-reversed, `dft_depth` levels) -> split_real_imag -> the steps on both real-slot
      ciphertexts -> join_real_imag -> SlotToCoeff (bit-reversed, `dft_depth` levels)
  (hemlp.bootstrap.dft). CtS puts coefficient j + i·coefficient N/2 + j into slot rev(j), StC reads slot
  rev(j) back into coefficients j and N/2 + j, and an elementwise map commutes with the permutation, so
  every coefficient comes back in place (tests/compiler/test_mlwe_layout.py checks it on ciphertexts).
  Levels: 2·dft_depth + the activations' own levels.
* Scales: split_real_imag doubles the scale tag; the PCMM before it absorbs that factor in its integer
  multiplier K (scale after the split = q of the activation's level, the best scale for x² there), so no
  level is spent on scale management. The last PCMM targets the context's default scale.

The program is derived deterministically from the lowered steps and (N, batch, dft_depth); a saved model
stores only the steps and the options. Plaintext oracle: the arithmetic is that of layout (A) (the same
quantised weights, polynomials and affine maps per feature), so ``CompiledModel.simulate`` reuses
hemlp.runtime.local.simulate. Supported: chains of Linear layers, convolutions and average pooling (as their
dense matrices: MLWE rows are interleaved inside ciphertexts, so the im2col row gather of layout (A) is not free;
the dense matrix has the same entries, so the same quantisation) with square / polynomial / affine
activations; residual adds, ciphertext products and transposes raise UnsupportedError naming the layouts that
run them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Optional

import numpy as np

from hemlp.errors import ShapeError, UnsupportedError

__all__ = ["MlweProgram", "MStep", "mlwe_columns", "dft_depth_candidates", "pow2"]

_ELEMENTWISE = ("square", "poly", "affine")


def pow2(n: int) -> int:
    return 1 << max(0, int(n - 1).bit_length())


def mlwe_columns(N: int, batch: int) -> int:
    """B': the batch rounded up to a power of two, and at least the smallest power of two >= √N
    (MLWE(k) needs k = N/B' <= B'). UnsupportedError when the batch fills N/2 slots or more."""
    N, batch = int(N), max(1, int(batch))
    lo = pow2(math.isqrt(N - 1) + 1)
    d3 = max(pow2(batch), lo)
    if d3 >= N:
        raise UnsupportedError(f"layout (A') keeps the batch along the N = {N} coefficients with at least 2 rows per "
                               f"ciphertext: a batch of {batch} (padded {pow2(batch)}) needs B' < N; use "
                               "layout='batch' (layout A), which fills the slots at this batch size")
    return d3


def dft_depth_candidates(N: int) -> list[int]:
    """Levels per CoeffToSlot / SlotToCoeff to try, preferred first: log2(N/2) butterfly stages merged
    into groups of at most 4 stages (<= 31 diagonals per level), down to groups of 6 (<= 127)."""
    L = int(N // 2).bit_length() - 1
    hi, lo = -(-L // 4), max(1, -(-L // 6))
    return list(range(hi, lo - 1, -1))


@dataclass
class MStep:
    kind: str                    # input | pcmm | cts | act | stc | output
    out: str
    src: object = None           # the lowered Step (input / pcmm / act / output)
    rows: int = 0                # features of the tensor this step produces
    cts: int = 0                 # ciphertexts of that tensor (per real/imag part for slot-domain steps)
    level_in: Optional[int] = None
    level_out: Optional[int] = None
    feeds_act: bool = False      # pcmm / input: the next op is a CoeffToSlot (scale target q_act / 2)
    act_level: Optional[int] = None
    rows_in: int = 0             # pcmm: features of its input

    def matrix(self) -> np.ndarray:
        """pcmm: the (rows, rows_in) weight matrix; a convolution / pooling (im2col gather) as its dense matrix,
        since MLWE rows are interleaved inside ciphertexts and cannot be gathered for free."""
        from hemlp.compiler.packed import dense_matrix

        return dense_matrix(self.src, self.rows_in)

    def bias(self):
        """pcmm: the per-row bias (a convolution's per-channel bias repeated over its output positions)."""
        b = self.src.bias
        if b is None:
            return None
        b = np.asarray(b, dtype=np.float64)
        return b if self.src.index is None else np.repeat(b, self.src.index.shape[1])


class MlweProgram:
    """The lowered steps planned in layout (A′) for ring degree N and a batch of up to B' samples."""

    def __init__(self, steps, N: int, batch: int, dft_depth: int, top: int | None = None):
        self.N, self.n = int(N), int(N) // 2
        self.batch = max(1, int(batch))
        self.d3 = mlwe_columns(self.N, self.batch)
        self.k = self.N // self.d3
        L = self.n.bit_length() - 1
        if not 1 <= int(dft_depth) <= L:
            raise UnsupportedError(f"dft_depth must be in [1, log2(N/2) = {L}], got {dft_depth}")
        self.dft_depth = int(dft_depth)
        self.steps: list[MStep] = []
        self.aliases: dict = {}      # flatten / reshape steps: row relabellings, nothing to do on ciphertexts
        self._plan(steps)
        self.depth = self._levels(1000)
        self.top = None
        if top is not None:
            self.set_top(top)

    # ------------------------------------------------------------------ planning
    def _plan(self, steps):
        prev, domain = None, "coeff"
        for s in steps:
            if s.op == "input":
                if prev is not None:
                    raise UnsupportedError("layout (A') runs single-input chains; use layout='batch'")
                self.steps.append(MStep("input", s.out, s, s.rows, self._cts(s.rows)))
                prev = s.out
                continue
            if s.op in ("add", "mul", "matmul", "perm"):
                what = dict(add="residual add", mul="ciphertext product", matmul="ciphertext x ciphertext matmul",
                            perm="row permutation (transpose)")[s.op]
                raise UnsupportedError(f"layout (A') runs chains of Linear layers and activations; step {s.out} is a "
                                       f"{what}: use layout='batch' (or 'packed' for a few samples)")
            if list(s.inputs) != [prev]:
                raise UnsupportedError(f"layout (A') runs a chain of layers; step {s.out} does not take the previous "
                                       "step's output: use layout='batch'")
            if s.op == "alias":
                prev = s.out
                self.aliases[s.out] = s
                continue
            if s.op == "pcmm":
                if domain == "slot":
                    self.steps.append(MStep("stc", s.out + ".stc", None, self.steps[-1].rows, self.steps[-1].cts))
                    domain = "coeff"
                rows_in = self.steps[-1].rows
                cols = s.U.shape[1] if s.index is None else rows_in
                if s.index is not None and (s.index.max() >= rows_in or s.U.shape[0] * s.index.shape[1] != s.rows):
                    raise ShapeError(f"layer {s.out}: its im2col index does not fit an input of {rows_in} features")
                if cols != rows_in:
                    raise ShapeError(f"layer {s.out}: the weight takes {cols} features, its input has {rows_in}")
                self.steps.append(MStep("pcmm", s.out, s, s.rows, self._cts(s.rows), rows_in=rows_in))
            elif s.op in _ELEMENTWISE:
                if domain == "coeff":
                    self.steps.append(MStep("cts", s.out + ".cts", None, self.steps[-1].rows, self.steps[-1].cts))
                    domain = "slot"
                self.steps.append(MStep("act", s.out, s, s.rows, self.steps[-1].cts))
            elif s.op == "output":
                if domain == "slot":
                    self.steps.append(MStep("stc", s.out + ".stc", None, self.steps[-1].rows, self.steps[-1].cts))
                self.steps.append(MStep("output", s.out, s, s.rows, self.steps[-1].cts))
            else:
                raise UnsupportedError(f"layout (A') cannot run step {s.op!r} ({s.out}); use layout='batch'")
            prev = s.out
        if not self.steps or self.steps[-1].kind != "output":
            raise UnsupportedError("layout (A'): the program has no output step")
        for i, m in enumerate(self.steps):
            if m.kind in ("input", "pcmm") and i + 1 < len(self.steps) and self.steps[i + 1].kind == "cts":
                m.feeds_act = True
        self.input, self.output = self.steps[0], self.steps[-1]

    def _cts(self, rows: int) -> int:
        return -(-int(rows) // self.k)

    def _levels(self, top: int) -> int:
        lv = top
        for m in self.steps:
            m.level_in = lv
            if m.kind == "pcmm":
                lv -= 1
            elif m.kind in ("cts", "stc"):
                lv -= self.dft_depth
            elif m.kind == "act":
                lv -= _act_levels(m.src)
            m.level_out = lv
        for i, m in enumerate(self.steps):
            if m.feeds_act:
                m.act_level = self.steps[i + 2].level_in
        return top - lv

    def set_top(self, top: int) -> None:
        """Levels for an input encrypted at `top`."""
        self.top = int(top)
        self._levels(self.top)

    def apply_levels(self) -> None:
        """Write this program's levels into the lowered steps (the compiled model stores and hashes them)."""
        lv_of = {}
        for m in self.steps:       # cts / stc have no lowered step: their levels sit between the neighbours'
            if m.src is not None:
                m.src.level_in, m.src.level_out = m.level_in, m.level_out
                lv_of[m.src.out] = m.level_out
        for s in self.aliases.values():   # lowered order: an alias's input is planned before it
            s.level_in = s.level_out = lv_of.get(s.inputs[0])

    # ------------------------------------------------------------------ DFT plans and keys
    @property
    def has_acts(self) -> bool:
        return any(m.kind == "cts" for m in self.steps)

    @cached_property
    def cts_plan(self):
        from hemlp.bootstrap.dft import plan_coeff_to_slot

        return plan_coeff_to_slot(self.n, self.dft_depth, bit_reversed=True)

    @cached_property
    def stc_plan(self):
        from hemlp.bootstrap.dft import plan_slot_to_coeff

        return plan_slot_to_coeff(self.n, self.dft_depth, bit_reversed=True)

    def rotations(self) -> list:
        """Slot rotation steps of the CoeffToSlot and SlotToCoeff plans (empty without activations)."""
        if not self.has_acts:
            return []
        from hemlp.bootstrap.dft import dft_rotation_steps

        return dft_rotation_steps(self.cts_plan, self.stc_plan)

    def rotation_level(self):
        """Highest level a DFT rotation happens at (each CtS / StC rotates at its input level first)."""
        lv = [m.level_in for m in self.steps if m.kind in ("cts", "stc")]
        return max(lv) if lv else None

    def conjugation_level(self):
        """The split after CoeffToSlot conjugates at the CtS output level."""
        lv = [m.level_out for m in self.steps if m.kind == "cts"]
        return max(lv) if lv else None

    def modpack_level(self):
        lv = [m.level_in for m in self.steps if m.kind == "pcmm"]
        return max(lv) if lv else None

    def has_pcmm(self) -> bool:
        return any(m.kind == "pcmm" for m in self.steps)

    # ------------------------------------------------------------------ facts
    def dft_counts(self, plan) -> dict:
        """Per ciphertext: plaintext products, hoisted baby-step and giant-step rotations of one DFT direction."""
        out = dict(pt_mul=0, rot_hoisted=0, rot=0)
        for lt in plan.levels:
            p = lt.plan
            out["pt_mul"] += lt.pmults
            out["rot_hoisted"] += len([b for b in p.baby if b])
            out["rot"] += len([g for g in p.giant if g])
        return out

    def counts(self) -> dict:
        """Whole-program operation counts (the cost model and the plan printout)."""
        tot = dict(input_ciphertexts=self.input.cts, gemm_macs=0, modpack_keyswitch=0, dft_pt_mul=0,
                   dft_rotations=0, conjugations=0, act_ct_mul=0)
        prev = self.input
        for m in self.steps:
            if m.kind == "pcmm":
                rows_in, rows_out = prev.cts * self.k, m.cts * self.k
                tot["gemm_macs"] += rows_out * rows_in * (self.N + self.d3)
                tot["modpack_keyswitch"] += m.cts * self.k
            elif m.kind in ("cts", "stc"):
                c = self.dft_counts(self.cts_plan if m.kind == "cts" else self.stc_plan)
                tot["dft_pt_mul"] += m.cts * c["pt_mul"]
                tot["dft_rotations"] += m.cts * (c["rot_hoisted"] + c["rot"])
                tot["conjugations"] += m.cts if m.kind == "cts" else 0
            elif m.kind == "act" and m.src.op in ("square", "poly"):
                tot["act_ct_mul"] += 2 * m.cts * _act_muls(m.src)
            if m.kind != "output":
                prev = m
        return tot

    def describe(self) -> list[str]:
        lines = [f"layout (A'): batch along the coefficients, B' = {self.d3} columns, k = {self.k} rows per ciphertext "
                 f"(input {self.input.rows} features -> {self.input.cts} ciphertext(s)); CoeffToSlot / SlotToCoeff "
                 f"{self.dft_depth} level(s) each, {len(self.rotations())} rotation keys + conjugation, "
                 f"{self.k} ModPack keys"]
        for m in self.steps:
            if m.kind == "pcmm":
                lines.append(f"  {m.out}: MLWE PCMM -> {m.cts} ciphertext(s), {m.cts * self.k} ModPack key switches, "
                             f"L{m.level_in}->L{m.level_out}")
            elif m.kind in ("cts", "stc"):
                name = "CoeffToSlot + split" if m.kind == "cts" else "join + SlotToCoeff"
                lines.append(f"  {name} on {m.cts} ciphertext(s): L{m.level_in}->L{m.level_out}")
            elif m.kind == "act":
                lines.append(f"  {m.out}: {m.src.op} on {2 * m.cts} real-slot ciphertext(s), L{m.level_in}->"
                             f"L{m.level_out}")
        return lines

    # ------------------------------------------------------------------ client-side packing
    def pack(self, X: np.ndarray) -> np.ndarray:
        """Samples (B, F) -> the rows matrix (F, B') with zero padding columns (hemlp.linalg MLWE input)."""
        X = np.asarray(X, dtype=np.float64).reshape(X.shape[0], -1)
        if X.shape[0] > self.d3:
            raise ShapeError(f"layout (A') was planned for up to {self.d3} samples (B'), got {X.shape[0]}; "
                             "recompile with a larger batch_size or split the batch")
        M = np.zeros((X.shape[1], self.d3))
        M[:, : X.shape[0]] = X.T
        return M

    def coeff_vector(self, per_row: np.ndarray, g: int, columns: int | None = None) -> np.ndarray:
        """Coefficient vector of ciphertext g holding per_row[k·g + u] at every coefficient t·k + u with t < columns
        (0 elsewhere): biases, only on the real samples' columns so the padding columns stay small."""
        k, d3 = self.k, self.d3
        v = np.zeros((d3, k))
        r = np.asarray(per_row, dtype=np.float64)[g * k: (g + 1) * k]
        v[: (d3 if columns is None else columns), : r.shape[0]] = r
        return v.reshape(-1)

    def slot_vector(self, per_row: np.ndarray, g: int) -> np.ndarray:
        """Slot vector, after the bit-reversed CoeffToSlot and the split, of a per-feature value for ciphertext g:
        slot j holds coefficient rev(j) (real part) or N/2 + rev(j) (imaginary part), whose row is rev(j) mod k
        in both (k divides N/2)."""
        from hemlp.bootstrap.special_fft import bit_reverse

        k = self.k
        r = np.zeros(k)
        vals = np.asarray(per_row, dtype=np.float64)[g * k: (g + 1) * k]
        r[: vals.shape[0]] = vals
        return r[bit_reverse(self.n) % k]


def _act_levels(step) -> int:
    from hemlp.compiler.params import step_cost

    return step_cost(step)


def _act_muls(step) -> int:
    from hemlp.planner.layouts import _act_muls as f

    return f(step)
