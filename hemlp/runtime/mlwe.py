"""Encrypted execution of a layout (A′) program (hemlp.compiler.mlwe): in-process; the MLWE PCMM's GEMMs and
key switches, the DFT rotations and the ct x ct products are multi-threaded inside the native core.

Scale bookkeeping (exact, no level spent): an MLWE PCMM outputs in.scale · Δ_U · K / q_l for the integer K it
multiplies by. K is chosen so the output lands at q_a / 2 when an activation follows (q_a: the prime of the
activation's level; the split after CoeffToSlot doubles the scale tag, so the activation sees scale q_a and
x² rescales back to q_a), and at the context's default scale for the last layer.
"""
from __future__ import annotations

import time

import numpy as np

from hemlp.errors import LevelError, MissingKeyError, ScaleMismatchError

__all__ = ["MlweRunner", "input_scale"]


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
        from hemlp import _core
        from hemlp.linalg import quantize

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
        from hemlp import _core
        from hemlp.ckks import Ciphertext

        ctx, prog = self.ctx, self.prog
        if mp_keys is None:
            raise MissingKeyError("layout (A') linear layers need the ModPack keys of this model; use keygen()'s "
                                  "eval_keys")
        plan, delta = self._gemm_plan(m, len(x))
        lv, s_in = x[0].level, x[0].scale
        q = float(ctx.modulus(lv))
        target = float(ctx.modulus(m.act_level)) / 2.0 if m.feeds_act else float(ctx.default_scale)
        K = max(1, round(target * q / (s_in * delta)))
        raw = _core.pcmm_mlwe(ctx._e, plan, [c._obj for c in x], prog.k, int(K), float(delta * K), mp_keys._keys)
        out = [ctx.rescale(ctx._w(Ciphertext, o)) for o in raw]
        bias = m.bias()
        if bias is not None:
            out = [ctx.add(c, prog.coeff_vector(bias, g, prog.batch)) for g, c in enumerate(out)]
        return out

    # ---- activations
    def _cts(self, x: list, gk) -> list:
        from hemlp.bootstrap.dft import coeff_to_slot, split_real_imag

        parts = []
        for ct in x:
            re, im = split_real_imag(self.ctx, coeff_to_slot(self.ctx, ct, gk, self.prog.cts_plan), gk)
            parts.append((re, im))
        return parts

    def _stc(self, parts: list, gk) -> list:
        from hemlp.bootstrap.dft import join_real_imag, slot_to_coeff

        return [slot_to_coeff(self.ctx, join_real_imag(self.ctx, re, im), gk, self.prog.stc_plan) for re, im in parts]

    def _act(self, m, parts: list, relin_key) -> list:
        from hemlp.runtime.local import ElementwiseOp, cached_elementwise

        ctx, prog, s = self.ctx, self.prog, m.src
        flat = [c for pair in parts for c in pair]
        if s.op == "affine":
            out = []
            for i, ct in enumerate(flat):
                g = i // 2
                y = ctx.rescale(ctx.mul(ct, prog.slot_vector(s.alpha, g)))
                beta = prog.slot_vector(s.beta, g)
                out.append(ctx.add(y, beta) if np.any(beta) else y)
        else:
            if relin_key is None:
                raise MissingKeyError(f"step {s.out} multiplies ciphertexts: it needs the relinearisation key")
            op = ElementwiseOp.from_step(s)
            if op.kind == "square":   # all parts in parallel (native threads), then the sign / constant
                out = ctx.mul_rescale_many(flat, flat, relin_key)
                if op.sign < 0:
                    out = [ctx.negate(y) for y in out]
                if op.const:
                    out = [ctx.add(y, op.const) for y in out]
            else:
                fn = cached_elementwise(self._pe, ctx, op, relin_key)
                out = [fn(0, ct) for ct in flat]
        return [(out[2 * i], out[2 * i + 1]) for i in range(len(parts))]

    # ---- the program
    def run(self, cts: list, relin_key, galois_keys, modpack_keys, timings: dict | None = None) -> list:
        """Input ciphertexts (the MLWE input matrix) -> the output's coefficient-encoded ciphertexts."""
        ctx, prog = self.ctx, self.prog
        if prog.has_acts and galois_keys is None:
            raise MissingKeyError("layout (A') activations need the CoeffToSlot / SlotToCoeff rotation keys and the "
                                  "conjugation key of this model; use keygen()'s eval_keys")
        if len(cts) != prog.input.cts:
            from hemlp.errors import ShapeError

            raise ShapeError(f"layout (A') input needs {prog.input.cts} ciphertexts, got {len(cts)}")
        val = None
        for m in prog.steps:
            t0 = time.perf_counter()
            if m.kind == "input":
                if cts[0].level < m.level_out:
                    raise LevelError(f"the input is at level {cts[0].level} but the plan starts at level {m.level_out}")
                want = input_scale(ctx, prog)
                if abs(cts[0].scale / want - 1.0) > 2.0 ** -30:
                    raise ScaleMismatchError(f"the input is at scale 2^{np.log2(cts[0].scale):.2f}, the plan expects "
                                             f"2^{np.log2(want):.2f}; encrypt with compiled.encrypt")
                val = [ctx.drop_level(c, m.level_out) if c.level != m.level_out else c for c in cts]
                continue
            if m.kind == "pcmm":
                val = self._pcmm(m, val, modpack_keys)
            elif m.kind == "cts":
                val = self._cts(val, galois_keys)
            elif m.kind == "act":
                val = self._act(m, val, relin_key)
            elif m.kind == "stc":
                val = self._stc(val, galois_keys)
            elif m.kind == "output":
                continue
            lv = (val[0][0] if isinstance(val[0], tuple) else val[0]).level
            if lv != m.level_out:
                raise AssertionError(f"step {m.out}: level {lv}, planned {m.level_out}")
            if timings is not None:
                timings[m.out] = time.perf_counter() - t0
        return val
