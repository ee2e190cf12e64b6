"""Layout (A′): MLWE PCMMs on coefficient-encoded ciphertexts, activations through CoeffToSlot / SlotToCoeff.

Layout (A) puts the batch along the N/2 slots, so a batch B < N/2 leaves slots empty in every one of the
features' ciphertexts. Layout (A′) puts the batch along the *coefficients* instead, B' = B rounded up to a
power of two (at least the smallest power of two >= √N) columns, and k = N/B' feature rows interleaved
per ciphertext (row k·g + u, column t -> coefficient t·k + u of ciphertext g; hemlp.pcmm's MLWE format):
a tensor of F features takes ceil(F/k) ciphertexts instead of F.

* Linear layer: one MLWE PCMM (hemlp.pcmm / csrc/pcmm/mlwe.cpp): ModDecomp (free), two exact modular
  GEMMs per limb (a-parts N columns, b-parts B' columns), ModPack (k key switches per output ciphertext,
  one ModDown), one rescale: **1 level**. The output is coefficient-encoded in the same interleaving.
* Activations need slots. A maximal run of elementwise steps (x², the compiled polynomial, affine maps)
  is evaluated as
      CoeffToSlot (bit-reversed, `dft_depth` levels) -> split_real_imag -> the steps on both real-slot
      ciphertexts -> join_real_imag -> SlotToCoeff (bit-reversed, `dft_depth` levels)
  (hemlp.he.dft). CtS puts coefficient j + i·coefficient N/2 + j into slot rev(j), StC reads slot
  rev(j) back into coefficients j and N/2 + j, and an elementwise map commutes with the permutation, so
  every coefficient comes back in place (tests/layouts/test_mlwe.py checks it on ciphertexts).
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
import time
from dataclasses import dataclass
from types import SimpleNamespace
from functools import cached_property
from typing import Optional

import numpy as np

from hemlp import _core, pcmm
from hemlp.bootstrap import BatchBootstrapKeys
from hemlp.he.dft import (coeff_to_slot, dft_rotation_steps, join_real_imag, plan_coeff_to_slot,
                          plan_slot_to_coeff, slot_to_coeff, split_real_imag)
from hemlp.he.reinterpret import retag
from hemlp.he.special_fft import bit_reverse
from hemlp.fhe import Ciphertext, Params
from hemlp.compiler.lower import dense_matrix
from hemlp.compiler.params import candidates, choose_preset, output_reserve, step_cost
from hemlp.errors import (KeyMismatchError, LevelError, MissingKeyError, ScaleMismatchError, ShapeError,
                          UnsupportedError)
from hemlp.layouts.base import Layout, Planned
from hemlp.layouts.batch_bootstrap import boot_batch_size, summary, summary_text
from hemlp.layouts.mlwe_refresh import refresh_key_bytes, refresh_params
from hemlp.pcmm import CtMatrix, quantize
from hemlp.planner.layouts import act_muls, encode_seconds, estimate_mlwe
from hemlp.runtime.local import ElementwiseOp, cached_elementwise
from hemlp.runtime.local import SIMULATE
from hemlp.runtime.local import simulate as simulate_rows
from hemlp.step_ops import ACT_OPS, CT_PRODUCT_OPS, StepOp, Unsupported, handler, lint_pass

__all__ = ["Mlwe", "MlweProgram", "MlweRunner", "MStep", "mlwe_columns", "dft_depth_candidates", "input_scale",
           "pow2", "MLWE_AUTO_MAX_KEY_BYTES", "REFUSED", "MSTEP_KINDS"]


def _not_a_chain(what: str) -> Unsupported:
    return Unsupported("(A')", "layout='batch'", "layout (A') runs chains of Linear layers and activations; step {out} "
                                                 f"is a {what}: use layout='batch' (or 'packed' for a few samples)")


_PLACED_ELSEWHERE = Unsupported("(A')", "layout='batch'", "layout (A') cannot run step {op!r} ({out}); use "
                                                          "layout='batch'")
#: the step ops layout (A') cannot run: its planning table's refusals
REFUSED = {
    StepOp.ADD: _not_a_chain("residual add"),
    StepOp.MUL: _not_a_chain("ciphertext product"),
    StepOp.MATMUL: _not_a_chain("ciphertext x ciphertext matmul"),
    StepOp.PERM: _not_a_chain("row permutation (transpose)"),
    # refreshes land at their own levels (no drops), and a PCMM before a refresh already runs at level 1 (MaMBo's
    # arrangement): the planner places neither here
    StepOp.DROP: _PLACED_ELSEWHERE,
    StepOp.MAMBO: _PLACED_ELSEWHERE,
}
#: the program's step kinds (MStep.kind): one MlweRunner handler each
MSTEP_KINDS = ("input", "pcmm", "cts", "boot", "act", "stc", "output")
#: kinds without work of their own: no timing entry, no progress tick
_UNTIMED_KINDS = ("input", "output")


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
    kind: str                    # input | pcmm | cts | boot | act | stc | output (boot: a refresh in place of a cts)
    out: str
    src: object = None           # the lowered Step (input / pcmm / act / output)
    rows: int = 0                # features of the tensor this step produces
    cts: int = 0                 # ciphertexts of that tensor (per real/imag part for slot-domain steps)
    level_in: Optional[int] = None
    level_out: Optional[int] = None
    feeds_act: bool = False      # pcmm / input: the next op is a CoeffToSlot (scale target q_act / 2)
    feeds_refresh: bool = False  # pcmm: the next op is a refresh (it runs at level 1, MaMBo's bottom of the chain)
    act_level: Optional[int] = None
    rows_in: int = 0             # pcmm: features of its input

    def matrix(self) -> np.ndarray:
        """pcmm: the (rows, rows_in) weight matrix; a convolution / pooling (im2col gather) as its dense matrix,
        since MLWE rows are interleaved inside ciphertexts and cannot be gathered for free."""
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
        st = SimpleNamespace(prev=None, domain="coeff")      # the chain's last value and its encoding
        for s in steps:
            f = handler(self.PLAN, s, "layout (A')")
            if s.inputs and list(s.inputs) != [st.prev]:
                raise UnsupportedError(f"layout (A') runs a chain of layers; step {s.out} does not take the previous "
                                       "step's output: use layout='batch'")
            f(self, s, st)
            st.prev = s.out
        if not self.steps or self.steps[-1].kind != "output":
            raise UnsupportedError("layout (A'): the program has no output step")
        for i, m in enumerate(self.steps):
            if m.kind in ("input", "pcmm") and i + 1 < len(self.steps) and self.steps[i + 1].kind == "cts":
                m.feeds_act = True
            if m.kind == "pcmm" and i + 1 < len(self.steps) and self.steps[i + 1].kind == "boot":
                m.feeds_refresh = True
        self.input, self.output = self.steps[0], self.steps[-1]

    def _plan_input(self, s, st) -> None:
        if st.prev is not None:
            raise UnsupportedError("layout (A') runs single-input chains; use layout='batch'")
        self.steps.append(MStep("input", s.out, s, s.rows, self._cts(s.rows)))

    def _plan_alias(self, s, st) -> None:
        self.aliases[s.out] = s

    def _plan_bootstrap(self, s, st) -> None:
        """Placed by hemlp.layouts.mlwe_bootstrap: the refresh is the CoeffToSlot."""
        if st.domain != "coeff":
            raise UnsupportedError(f"layout (A'): bootstrap {s.out} must refresh a coefficient-encoded value "
                                   "(a linear layer's output or the input) before an activation")
        self.steps.append(MStep("boot", s.out, s, self.steps[-1].rows, self.steps[-1].cts))
        st.domain = "slot"

    def _plan_pcmm(self, s, st) -> None:
        if st.domain == "slot":
            self.steps.append(MStep("stc", s.out + ".stc", None, self.steps[-1].rows, self.steps[-1].cts))
            st.domain = "coeff"
        rows_in = self.steps[-1].rows
        cols = s.U.shape[1] if s.index is None else rows_in
        if s.index is not None and (s.index.max() >= rows_in or s.U.shape[0] * s.index.shape[1] != s.rows):
            raise ShapeError(f"layer {s.out}: its im2col index does not fit an input of {rows_in} features")
        if cols != rows_in:
            raise ShapeError(f"layer {s.out}: the weight takes {cols} features, its input has {rows_in}")
        self.steps.append(MStep("pcmm", s.out, s, s.rows, self._cts(s.rows), rows_in=rows_in))

    def _plan_act(self, s, st) -> None:
        if st.domain == "coeff":
            self.steps.append(MStep("cts", s.out + ".cts", None, self.steps[-1].rows, self.steps[-1].cts))
            st.domain = "slot"
        self.steps.append(MStep("act", s.out, s, s.rows, self.steps[-1].cts))

    def _plan_output(self, s, st) -> None:
        if st.domain == "slot":
            self.steps.append(MStep("stc", s.out + ".stc", None, self.steps[-1].rows, self.steps[-1].cts))
        self.steps.append(MStep("output", s.out, s, s.rows, self.steps[-1].cts))

    #: one planning handler per step op: (program, lowered step, the chain's state) -> appends its MSteps
    PLAN = {
        **REFUSED,
        StepOp.INPUT: _plan_input,
        StepOp.ALIAS: _plan_alias,
        StepOp.BOOTSTRAP: _plan_bootstrap,
        StepOp.PCMM: _plan_pcmm,
        StepOp.SQUARE: _plan_act,
        StepOp.POLY: _plan_act,
        StepOp.AFFINE: _plan_act,
        StepOp.OUTPUT: _plan_output,
    }

    def _cts(self, rows: int) -> int:
        return -(-int(rows) // self.k)

    def _levels(self, top: int) -> int:
        """Every step's levels for an input at `top`; returns the levels used before the first refresh (or in all)."""
        lv, used = top, None
        for m in self.steps:
            m.level_in = lv
            if m.kind == "pcmm":
                if m.feeds_refresh and lv > 1:   # its inputs dropped to level 1: the GEMMs and ModPack on 2 limbs
                    m.level_in = 1
                lv = m.level_in - 1
            elif m.kind in ("cts", "stc"):
                lv -= self.dft_depth
            elif m.kind == "act":
                lv -= step_cost(m.src)
            elif m.kind == "boot":      # lands where the planner said (the preset's S2C-first output level)
                used = top - lv if used is None else used
                lv = int(m.src.info.level_after)
            m.level_out = lv
        for i, m in enumerate(self.steps):
            if m.feeds_act:
                m.act_level = self.steps[i + 2].level_in
        return top - lv if used is None else used

    def consumes(self, m) -> int:
        """Levels step m uses (a refresh: none of the caller's; it lands at its own level)."""
        if m.kind == "pcmm":
            return 1
        if m.kind in ("cts", "stc"):
            return self.dft_depth
        if m.kind == "act":
            return step_cost(m.src)
        return 0

    @property
    def refreshes(self) -> list:
        """The refresh steps (compile(..., layout="mlwe", bootstrap=True))."""
        return [m for m in self.steps if m.kind == "boot"]

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
        return any(m.kind in ("cts", "boot") for m in self.steps)

    @cached_property
    def cts_plan(self):
        return plan_coeff_to_slot(self.n, self.dft_depth, bit_reversed=True)

    @cached_property
    def stc_plan(self):
        return plan_slot_to_coeff(self.n, self.dft_depth, bit_reversed=True)

    def rotations(self) -> list:
        """Slot rotation steps of the CoeffToSlot and SlotToCoeff plans (empty without activations)."""
        if not self.has_acts:
            return []
        return dft_rotation_steps(self.cts_plan, self.stc_plan)

    def rotation_level(self):
        """Highest level a DFT rotation happens at (each CtS / StC rotates at its input level first)."""
        lv = [m.level_in for m in self.steps if m.kind in ("cts", "stc")]
        return max(lv) if lv else None

    def conjugation_level(self):
        """The split after CoeffToSlot (or a refresh) conjugates at its output level."""
        lv = [m.level_out for m in self.steps if m.kind in ("cts", "boot")]
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
            elif m.kind == "act" and m.src.op in ACT_OPS:
                tot["act_ct_mul"] += 2 * m.cts * act_muls(m.src)
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
            elif m.kind == "boot":
                lines.append(f"  refresh (ModRaise, CoeffToSlot, EvalMod) + split on {m.cts} ciphertext(s): "
                             f"L{m.level_in}->L{m.level_out}")
            elif m.kind == "act":
                lines.append(f"  {m.out}: {m.src.op} on {2 * m.cts} real-slot ciphertext(s), L{m.level_in}->"
                             f"L{m.level_out}")
        return lines

    # ------------------------------------------------------------------ client-side packing
    def pack(self, X: np.ndarray) -> np.ndarray:
        """Samples (B, F) -> the rows matrix (F, B') with zero padding columns (hemlp.pcmm MLWE input)."""
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
        k = self.k
        r = np.zeros(k)
        vals = np.asarray(per_row, dtype=np.float64)[g * k: (g + 1) * k]
        r[: vals.shape[0]] = vals
        return r[bit_reverse(self.n) % k]


def input_scale(ctx, prog) -> float:
    """The scale the client encrypts at: q_a / 2 when the input goes straight into an activation."""
    if prog.input.feeds_act:
        return float(ctx.modulus(prog.input.act_level)) / 2.0
    return float(ctx.default_scale)


class MlweRunner:
    def __init__(self, ctx, prog, weight_bits: int = 20):
        self.ctx, self.prog, self.weight_bits = ctx, prog, int(weight_bits)
        self._plans: dict = {}
        self._pe: dict = {}

    # ---- linear layers
    def _gemm_plan(self, m, cts_in: int):
        p = self._plans.get(m.out)
        if p is None:
            U = m.matrix()
            k = self.prog.k
            Up = np.zeros((m.cts * k, cts_in * k))   # zero rows / columns pad to whole ciphertexts
            Up[: U.shape[0], : U.shape[1]] = U
            Uq, delta = quantize(Up, self.weight_bits)   # the same quantisation as simulate (same max |U|)
            p = (_core.ModGemmPlan(Uq, self.weight_bits), delta)
            self._plans[m.out] = p
        return p

    def prepare(self) -> float:
        """Quantise and prepare every layer's weights and encode every CoeffToSlot / SlotToCoeff diagonal at
        the levels the plan uses it (seconds spent); run() does it on first use otherwise."""
        t0 = time.perf_counter()
        prev = self.prog.input
        for m in self.prog.steps:
            if m.kind == "pcmm":
                self._gemm_plan(m, prev.cts)
            elif m.kind in ("cts", "stc"):   # DFT level i runs at level_in - i (cached per level)
                plan = self.prog.cts_plan if m.kind == "cts" else self.prog.stc_plan
                for i, lt in enumerate(plan.levels):
                    lt.encode(self.ctx, m.level_in - i)
            if m.kind != "output":
                prev = m
        return time.perf_counter() - t0

    def _pcmm(self, m, x: list, mp_keys) -> list:
        ctx, prog = self.ctx, self.prog
        if mp_keys is None:
            raise MissingKeyError("layout (A') linear layers need the ModPack keys of this model; use keygen()'s "
                                  "eval_keys")
        plan, delta = self._gemm_plan(m, len(x))
        lv, s_in = x[0].level, x[0].scale
        q = float(ctx.modulus(lv))
        target = float(ctx.modulus(m.act_level)) / 2.0 if m.feeds_act else float(ctx.default_scale)
        K = max(1, round(target * q / (s_in * delta)))
        raw = _core.pcmm_mlwe(ctx.native, plan, [c.native for c in x], prog.k, int(K), float(delta * K),
                              mp_keys.native)
        out = [ctx.rescale_inplace(ctx.wrap(Ciphertext, o)) for o in raw]
        bias = m.bias()
        if bias is not None:
            out = [ctx.add(c, prog.coeff_vector(bias, g, prog.batch)) for g, c in enumerate(out)]
        return out

    # ---- activations
    def _boot(self, m, x: list, gk, boot) -> list:
        """A refresh in place of the segment's CoeffToSlot: x/c (a re-tag, c the step's power of two) refreshed by
        the S2C-first pipeline without its SlotToCoeff (the slots come out as a bit-reversed CoeffToSlot puts them),
        at c·q/2 so that the values, re-tagged back by c, sit at q/2 and the split leaves them at q (q: the prime of
        the landing level), as after this layout's own CoeffToSlot."""
        if boot is None:
            raise MissingKeyError(f"step {m.out} bootstraps: run the plan with its bootstrapping keys (keygen()'s "
                                  "eval_keys)")
        ctx = self.ctx
        c = float(m.src.info.scale_factor)
        q = float(ctx.modulus(m.level_out))
        outs = boot.refresh_coefficients([retag(ctx, ct, scale=ct.scale * c) for ct in x], c * q / 2.0)
        return [split_real_imag(ctx, retag(ctx, o, scale=o.scale / c), gk) for o in outs]

    def _cts(self, x: list, gk) -> list:
        parts = []
        for ct in x:
            re, im = split_real_imag(self.ctx, coeff_to_slot(self.ctx, ct, gk, self.prog.cts_plan), gk)
            parts.append((re, im))
        return parts

    def _stc(self, parts: list, gk) -> list:
        return [slot_to_coeff(self.ctx, join_real_imag(self.ctx, re, im), gk, self.prog.stc_plan) for re, im in parts]

    def _act(self, m, parts: list, keys) -> list:
        """An activation on the real and imaginary parts of every ciphertext (ACT)."""
        flat = [c for pair in parts for c in pair]
        out = handler(self.ACT, m.src, "layout (A')'s activations")(self, m.src, flat, keys.relin)
        return [(out[2 * i], out[2 * i + 1]) for i in range(len(parts))]

    def _act_affine(self, s, flat: list, relin_key) -> list:
        ctx, prog, out = self.ctx, self.prog, []
        for i, ct in enumerate(flat):
            g = i // 2
            y = ctx.rescale_inplace(ctx.mul(ct, prog.slot_vector(s.alpha, g)))
            beta = prog.slot_vector(s.beta, g)
            out.append(ctx.add(y, beta) if np.any(beta) else y)
        return out

    def _act_square(self, s, flat: list, relin_key) -> list:
        """All parts in parallel (native threads), then the sign / constant."""
        ctx = self.ctx
        op = ElementwiseOp.from_step(s)
        out = ctx.mul_rescale_many(flat, flat, self._relin(s, relin_key))
        if op.sign < 0:
            out = [ctx.negate(y) for y in out]
        if op.const:
            out = [ctx.add(y, op.const) for y in out]
        return out

    def _act_poly(self, s, flat: list, relin_key) -> list:
        fn = cached_elementwise(self._pe, self.ctx, ElementwiseOp.from_step(s), self._relin(s, relin_key))
        return [fn(0, ct) for ct in flat]

    @staticmethod
    def _relin(s, relin_key):
        if relin_key is None:
            raise MissingKeyError(f"step {s.out} multiplies ciphertexts: it needs the relinearisation key")
        return relin_key

    #: the activations on slot-encoded parts, one handler per elementwise step op: (runner, lowered step, the real
    #: and imaginary parts of every ciphertext, relin key) -> the parts after the activation
    ACT = {StepOp.AFFINE: _act_affine, StepOp.SQUARE: _act_square, StepOp.POLY: _act_poly}

    # ---- the program
    def run(self, cts: list, relin_key, galois_keys, modpack_keys, timings: dict | None = None,
            segments=None, boot=None) -> list:
        """Input ciphertexts (the MLWE input matrix) -> the output's coefficient-encoded ciphertexts.
        segments (optional): fn(k, j, cts) -> cts running steps k..j (a CoeffToSlot or a refresh, its activations and
        the SlotToCoeff: each ciphertext on its own) elsewhere, e.g. one Ray task per ciphertext (run_segment).
        boot: the MamboBootstrapper of a plan with refreshes (hemlp.layouts.mlwe_bootstrap)."""
        prog = self.prog
        if prog.has_acts and galois_keys is None:
            raise MissingKeyError("layout (A') activations need the CoeffToSlot / SlotToCoeff rotation keys and the "
                                  "conjugation key of this model; use keygen()'s eval_keys")
        if len(cts) != prog.input.cts:
            raise ShapeError(f"layout (A') input needs {prog.input.cts} ciphertexts, got {len(cts)}")
        keys = SimpleNamespace(relin=relin_key, galois=galois_keys, modpack=modpack_keys, boot=boot)
        steps, val, k = prog.steps, cts, 0
        while k < len(steps):
            m = steps[k]
            if m.kind in ("cts", "boot") and segments is not None:
                j = next(i for i in range(k, len(steps)) if steps[i].kind == "stc")
                val = segments(k, j, val)
                if val[0].level != steps[j].level_out:
                    raise AssertionError(f"step {steps[j].out}: level {val[0].level}, planned {steps[j].level_out}")
                k = j + 1
                continue
            val = self._step(m, val, keys, timings)
            k += 1
        return val

    def run_segment(self, cts: list, k: int, j: int, relin_key, galois_keys, timings: dict | None = None,
                    boot=None) -> list:
        """Steps k..j (CoeffToSlot or a refresh, activations, SlotToCoeff) on some of a value's ciphertexts: their
        outputs. Each ciphertext of a plain segment is independent of the others, a refresh's batch of refresh_k
        shares one call, and the arithmetic is run()'s, so the same bits."""
        val = list(cts)
        keys = SimpleNamespace(relin=relin_key, galois=galois_keys, modpack=None, boot=boot)
        for m in self.prog.steps[k: j + 1]:
            if m.kind not in ("cts", "boot", "act", "stc"):
                raise AssertionError(f"step {m.out} ({m.kind}) is not a CoeffToSlot / activation / SlotToCoeff")
            val = self._step(m, val, keys, timings)
        return val

    def _input(self, m, val: list, keys) -> list:
        ctx = self.ctx
        if val[0].level < m.level_out:
            raise LevelError(f"the input is at level {val[0].level} but the plan starts at level {m.level_out}")
        want = input_scale(ctx, self.prog)
        if abs(val[0].scale / want - 1.0) > 2.0 ** -30:
            raise ScaleMismatchError(f"the input is at scale 2^{np.log2(val[0].scale):.2f}, the plan expects "
                                     f"2^{np.log2(want):.2f}; encrypt with compiled.encrypt")
        return [ctx.drop_level(c, m.level_out) if c.level != m.level_out else c for c in val]

    def _run_pcmm(self, m, val: list, keys) -> list:
        if val[0].level > m.level_in:      # feeds a refresh: run at the bottom of the chain
            val = [self.ctx.drop_level(c, m.level_in) for c in val]
        return self._pcmm(m, val, keys.modpack)

    #: one handler per program step kind (MSTEP_KINDS): (runner, MStep, its input ciphertexts (the slot domain: (re,
    #: im) pairs), the run's keys) -> its output
    RUN = {
        "input": _input,
        "pcmm": _run_pcmm,
        "cts": lambda self, m, val, keys: self._cts(val, keys.galois),
        "boot": lambda self, m, val, keys: self._boot(m, val, keys.galois, keys.boot),
        "act": _act,
        "stc": lambda self, m, val, keys: self._stc(val, keys.galois),
        "output": lambda self, m, val, keys: val,
    }

    def _step(self, m, val: list, keys, timings) -> list:
        t0 = time.perf_counter()
        val = self.RUN[m.kind](self, m, val, keys)
        if m.kind in _UNTIMED_KINDS:
            return val
        lv = (val[0][0] if isinstance(val[0], tuple) else val[0]).level
        if lv != m.level_out:
            raise AssertionError(f"step {m.out}: level {lv}, planned {m.level_out}")
        if timings is not None:
            timings[m.out] = timings.get(m.out, 0.0) + time.perf_counter() - t0
        return val


#: layout="auto" does not pick layout (A′) when its ModPack keys alone would exceed this (k = N/B' full
#: key-switching keys: a small batch in a large ring costs gigabytes of keys, which the time estimate ignores)
MLWE_AUTO_MAX_KEY_BYTES = 4e9


def modpack_key_bytes(params, prog) -> int:
    """Upper bound of layout (A′)'s ModPack key bytes: k keys at the program's top level (b-halves; the a-halves
    are seeds)."""
    if not prog.has_pcmm():
        return 0
    top = prog.top if prog.top is not None else params.max_level
    return prog.k * params.switch_key_bytes(top)


class Mlwe(Layout):
    """Layout (A′): the batch along the coefficients, MLWE PCMMs, activations between CoeffToSlot / SlotToCoeff.
    It plans its own preset and levels (the DFTs cost levels the other layouts do not spend)."""

    name, label = "mlwe", "(A')"
    fhe4dmm_grids = False

    def build_program(self) -> MlweProgram:
        return MlweProgram(self.steps, self.params.N, self.batch_size, int(self.options["dft_depth"]),
                           top=self.top_level)

    @classmethod
    def step_tables(cls) -> dict:
        # the runner runs the program's MStep kinds (MlweRunner.RUN, its activations MlweRunner.ACT); the plaintext
        # oracle is layout (A)'s arithmetic
        return {"plan": MlweProgram.PLAN, "simulate": SIMULATE}

    @classmethod
    def plan(cls, p: Planned) -> "Mlwe":
        """The smallest preset (compiler.params.candidates order, or the given preset) whose depth holds the
        program with its CoeffToSlot / SlotToCoeff levels; LevelError naming the missing levels when none does.
        Steps with refreshes placed (hemlp.layouts.mlwe_bootstrap) come with their preset, levels and DFT depth."""
        if any(s.op == StepOp.BOOTSTRAP for s in p.steps):
            return super().plan(p)
        opts = p.options
        allow = bool(opts["allow_insecure"])
        if opts["preset"] is not None:
            cands = [choose_preset(0, allow, opts["preset"])]      # validates the name and the security opt-in
        else:
            cands = candidates(allow)
        last, unsupported = None, None
        for c in cands:
            params = Params.preset(c["name"])
            ds = [int(opts["dft_depth"])] if opts["dft_depth"] is not None else dft_depth_candidates(params.N)
            reserve = output_reserve(p.max_out, params.log_scale, int(math.log2(params.q[0])))
            for d in ds:
                try:
                    prog = MlweProgram(p.steps, params.N, p.batch, d)
                except UnsupportedError as exc:     # e.g. the batch does not fit this ring: try a larger one
                    unsupported = exc
                    break
                if prog.depth + reserve <= c["depth"]:
                    prog.set_top(prog.depth + reserve)
                    lay = cls(p.steps, params, p.batch, prog.top, dict(opts, dft_depth=prog.dft_depth), program=prog)
                    lay.preset_info, lay.depth, lay.reserve = c, prog.depth, reserve
                    return lay
                if last is None or prog.depth + reserve - c["depth"] < last[0]:
                    last = (prog.depth + reserve - c["depth"], prog.depth, reserve, d, c)
        if last is None:
            raise unsupported
        miss, depth, reserve, d, c = last
        raise LevelError(f"layout (A') needs {depth + reserve} levels ({depth} for its layers, including 2 x {d} per "
                         "activation block for CoeffToSlot / SlotToCoeff" + (f", + {reserve} kept for the output's "
                         "magnitude" if reserve else "") + f") but preset {c['name']!r} has {c['depth']}: {miss} "
                         "level(s) missing. Use layout='batch' or 'packed' (no DFT levels), square activations or "
                         "lower activation degrees, fewer activation layers"
                         + (", or a deeper preset" if opts["preset"] else ""))

    def _boot_summary(self):
        return summary(self.steps, self.params, self.batch_size, layer_seconds=estimate_mlwe(self.program, self.params))

    def estimate(self):
        prog = self.program
        kb = modpack_key_bytes(self.params, prog)
        if kb > MLWE_AUTO_MAX_KEY_BYTES:   # a time estimate alone would ignore the keys
            return (f"not chosen: its {prog.k} ModPack keys alone take ~{kb / 1e9:.1f} GB (auto stays under "
                    f"{MLWE_AUTO_MAX_KEY_BYTES / 1e9:.0f} GB; layout='mlwe' forces it)")
        return self.seconds_estimate()

    def commit(self) -> None:
        self.program.apply_levels()
        lint_pass(self.steps, "layout (A')'s levels")

    def plan_info(self) -> dict:
        prog = self.program
        info = dict(mlwe=prog.describe(), rotation_keys=len(prog.rotations()), modpack_keys=prog.k,
                    counts=prog.counts(), dft_depth=prog.dft_depth)
        b = self._boot_summary()
        if b is not None:
            b["key_bytes"] = refresh_key_bytes(self.params, self.refresh_k)
            info["bootstrap"] = b
        return info

    @staticmethod
    def plan_header(info: dict) -> list[str]:
        return list(info["mlwe"]) + ["eval keys: " + ("relinearisation key + " if info["needs_relin"] else "")
                                     + f"{info['rotation_keys']} rotation keys + conjugation key + "
                                     f"{info['modpack_keys']} ModPack keys"
                                     + (" + bootstrapping keys" if info.get("bootstrap") else "")]

    @staticmethod
    def finish_plan_text(text: str, info: dict) -> str:
        text = text.replace(" = pcmm(", " = pcmm_mlwe(")
        b = info.get("bootstrap")
        if not b:
            return text
        return (text + "\n" + summary_text(b) + "\n#   layout (A'): each refresh is the activation segment's "
                "CoeffToSlot (ModRaise, CoeffToSlot, EvalMod on coefficient-encoded ciphertexts: no SlotToCoeff at "
                f"the bottom)\n#   bootstrapping keys {b['key_bytes'] / 2 ** 30:.2f} GiB in memory (S2C-first, "
                f"k = {b.get('k', 1)}; estimated from the parameters)")

    def relin_level(self):
        """From the program's levels, so the resource estimate works before commit() writes them into the steps."""
        lv = [m.level_in for m in self.program.steps if m.src is not None and m.src.op in CT_PRODUCT_OPS]
        return (max(lv) if lv else None) if self.needs_relin else None

    def key_levels(self) -> dict:
        prog = self.program
        return dict(relin=self.relin_level(), rotation=prog.rotation_level(), conjugation=prog.conjugation_level(),
                    modpack=prog.modpack_level())

    def keygen(self, ctx, sk) -> tuple:
        rlk, _, _ = super().keygen(ctx, sk)
        prog, lv, gk, mp = self.program, self.key_levels(), None, None
        if prog.has_acts:   # the DFT rotations, plus the conjugation of the real / imaginary split
            gk = ctx.rotation_keys(sk, prog.rotations(), level=lv["rotation"]).merge(
                ctx.conjugation_key(sk, level=lv["conjugation"]))
        if prog.has_pcmm():
            mp = pcmm.modpack_keys(ctx, sk, prog.k, level=lv["modpack"])
        if self.bootstrapped:
            return rlk, gk, mp, BatchBootstrapKeys.generate(ctx, sk, self.refresh_k, refresh_params(ctx))
        return rlk, gk, mp

    @property
    def refresh_k(self) -> int:
        """Ciphertexts per refresh call (the shared-a MSRLWE batch the refresh keys are made for)."""
        return boot_batch_size(self.steps)

    def level_checks(self, ctx, eval_keys) -> list:
        checks = super().level_checks(ctx, eval_keys)
        gk = eval_keys.galois_keys
        if gk is not None:   # rotations and the conjugation are used at different levels
            lv, conj, lvs = self.key_levels(), ctx.native.conjugation_element(), gk.levels
            rot = [v for g, v in lvs.items() if g != conj]
            checks[1] = ("rotation keys", self.key_level_view(min(rot) if rot else None), lv["rotation"],
                         "rotation_keys")
            checks.append(("conjugation key", self.key_level_view(lvs.get(conj)), lv["conjugation"],
                           "conjugation_key"))
        return checks

    def check_run(self, ct, eval_keys, weights, runtime: str, model_id: str) -> None:
        if weights is not None:
            raise TypeError("weights= is only for models compiled with encrypted_weights=True")
        for what, key in (("rotation keys", eval_keys.galois_keys), ("ModPack keys", eval_keys.modpack_keys)):
            if key is not None and key.key_id != ct.key_id:
                raise KeyMismatchError(f"the {what} and the ciphertext come from different key pairs")
        if self.bootstrapped:
            bk = getattr(eval_keys, "bootstrap_keys", None)
            k = self.refresh_k
            if not isinstance(bk, BatchBootstrapKeys) or bk.params.order != "s2c_first" or bk.k != k:
                what = f"k = {bk.k}" if isinstance(bk, BatchBootstrapKeys) else type(bk).__name__
                raise MissingKeyError("this plan refreshes its activation segments: its eval keys need S2C-first "
                                      f"bootstrapping keys with k = {k} (they hold {what}); use this plan's keygen()")

    @property
    def capacity(self) -> int:
        return self.program.d3

    def encrypt(self, ctx, x, key, level: int):   # rows (features) interleaved k per coefficient-encoded ciphertext
        prog = self.program
        return pcmm.encrypt_matrix(ctx, prog.pack(x), key, format="mlwe", encoding="coeff", level=level,
                                     scale=input_scale(ctx, prog))

    def decrypt(self, ctx, ctm, sk, batch: int) -> np.ndarray:
        rows = pcmm.decrypt_matrix(ctx, ctm, sk)       # (features, B') from the coefficients
        return rows[:, :batch].T

    def prepare(self, ctx) -> float:
        return self.runner(ctx, self._make_runner).prepare()

    def _make_runner(self, ctx) -> MlweRunner:
        return MlweRunner(ctx, self.program, self.weight_bits)

    def groups(self, ct) -> list[list[int]]:
        """One group: every output ciphertext of an MLWE PCMM reads every input ciphertext."""
        prog = self.program
        if ct.ctm.format != "mlwe" or ct.ctm.shape[1] != prog.d3:
            raise ShapeError(f"layout (A') input must be an MLWE matrix with {prog.d3} columns; encrypt it with "
                             "this model's encrypt()")
        return [list(range(len(ct.ctm.cts)))]

    def run_group(self, ctx, cts: list, eval_keys, weights, timings: dict, part=None) -> list:
        """The whole program (part None), or part = (k, j): the activation segment k..j on one ciphertext."""
        runner = self.runner(ctx, self._make_runner)
        boot = self.bootstrapper(ctx, eval_keys.bootstrap_keys) if self.bootstrapped else None
        if part is not None:
            return runner.run_segment(cts, *part, eval_keys.relin_key, eval_keys.galois_keys, timings, boot=boot)
        return runner.run(cts, eval_keys.relin_key, eval_keys.galois_keys, eval_keys.modpack_keys, timings,
                          boot=boot)

    def run(self, ctx, ct, eval_keys, weights, timings: dict, runtime: str, ray=None, model=None):
        """On Ray: the PCMMs in this process (one MLWE product mixes every ciphertext), every activation segment
        (CoeffToSlot, activations, SlotToCoeff) of every ciphertext a task (Layout.ray_tasks), a refreshed one of every
        refresh_k ciphertexts (one shared-a batch); the same bits."""
        if runtime != "ray":
            return super().run(ctx, ct, eval_keys, weights, timings, runtime, ray, model)
        self.groups(ct)                  # the shape check
        stats = ray.stats

        def segments(k, j, cts):
            st = {} if stats is not None else None
            n = self.refresh_k if self.program.steps[k].kind == "boot" else 1
            outs = self.ray_tasks(ctx, [cts[i: i + n] for i in range(0, len(cts), n)], eval_keys, weights, timings,
                                  ray.merged(stats=st), model, part=(k, j))
            if stats is not None:
                stats[self.program.steps[k].out] = st
            return [c for o in outs for c in o]

        out = self.runner(ctx, self._make_runner).run(ct.ctm.cts, eval_keys.relin_key, eval_keys.galois_keys,
                                                      eval_keys.modpack_keys, timings, segments=segments)
        return self.join_groups(ctx, ct, [out])

    def join_groups(self, ctx, ct, outs: list):
        return CtMatrix(ctx, outs[0], (self.program.output.rows, self.program.d3), 1, "mlwe")

    def simulate(self, X: np.ndarray) -> np.ndarray:
        # the arithmetic of layout (A): the same quantised weights, polynomials and affine maps per feature
        return simulate_rows(self.steps, X.T, self.weight_bits).T

    # ---- resources
    def key_inventory(self) -> dict:
        prog, lv, inv = self.program, self.key_levels(), super().key_inventory()
        if prog.has_acts:
            inv["rotation"] = (len(prog.rotations()), lv["rotation"])
            inv["conjugation"] = (1, lv["conjugation"])
        if prog.has_pcmm():
            inv["modpack"] = (prog.k, lv["modpack"])
        return inv

    def ciphertexts_in(self) -> int:
        return self.program.input.cts

    def progress_total(self) -> int:
        return sum(1 for m in self.program.steps if m.kind not in _UNTIMED_KINDS)

    def seconds_estimate(self) -> float:
        b = self._boot_summary()     # also when "auto" declines it for its key bytes
        return estimate_mlwe(self.program, self.params) + (0.0 if b is None else b["boot_seconds"])

    def ciphertexts_out(self) -> tuple:
        return self.program.output.cts, self.output_level()

    def _dft_encodings(self) -> list:
        """(plaintexts, limbs) of every CoeffToSlot / SlotToCoeff DFT level prepare() encodes, once per level."""
        prog, P = self.program, len(self.params.p)
        seen, out = set(), []
        for m in prog.steps:
            if m.kind in ("cts", "stc"):
                plan = prog.cts_plan if m.kind == "cts" else prog.stc_plan
                for i, lt in enumerate(plan.levels):
                    if (m.kind, i, m.level_in - i) not in seen:
                        seen.add((m.kind, i, m.level_in - i))
                        out.append((lt.pmults, m.level_in - i + 1 + P))
        return out

    def prepared_bytes(self) -> int:
        # every CoeffToSlot / SlotToCoeff diagonal encoded over Q_l and P at the levels it runs at, once per level
        N = self.params.N
        return sum(n * N * 8 * limbs for n, limbs in self._dft_encodings())

    def prepare_seconds_estimate(self) -> float:
        return encode_seconds(self._dft_encodings(), self.params.N, self.prepared_bytes())

    def working_bytes(self) -> int:
        # the largest step: its input and output ciphertexts (real and imaginary parts in the slot domain)
        prog, N = self.program, self.params.N
        ct = lambda m: 2 * m.cts * 2 * N * 8 * (m.level_in + 1) * (2 if m.kind in ("act", "stc") else 1)  # noqa: E731
        return max((ct(m) for m in prog.steps if m.level_in is not None), default=0)
