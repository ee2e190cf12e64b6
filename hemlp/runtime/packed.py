"""Encrypted execution of a layout (P) program (hemlp.compiler.packed): in-process, multi-threaded
inside the native ops.

The plaintext diagonals are encoded once per (program, context) at the level where they are used,
with scale q_level, so each product's rescale restores the input's scale exactly; they are cached
(``PackedRunner.prepare``), which is what a server does once after loading a model.
"""
from __future__ import annotations

import time

import numpy as np

from hemlp.errors import LevelError, MissingKeyError

__all__ = ["PackedRunner"]


class PackedRunner:
    def __init__(self, ctx, prog):
        self.ctx, self.prog = ctx, prog
        self._pts: dict = {}
        self._pe = {}

    # ---- plaintexts
    def _pt(self, step, key, vec, level: int):
        k = (step.out, key, level)
        pt = self._pts.get(k)
        if pt is None:
            ctx = self.ctx
            pt = ctx.encode(self.prog.spread(vec), level=level, scale=float(ctx.modulus(level)))
            self._pts[k] = pt
        return pt

    def prepare(self) -> float:
        """Encode every diagonal now (seconds spent); run() would otherwise do it on first use."""
        t0 = time.perf_counter()
        for s in self.prog.steps:
            if s.op == "matvec":
                for key, d in s.diags.items():
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
            for k, d in s.diags.items():
                t = ctx.mul(x[k], self._pt(s, k, d, lv))
                z = t if z is None else ctx.add(z, t)
            z = ctx.rescale(z)
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
                    inner = t if inner is None else ctx.add(inner, t)
                inner = ctx.rescale(inner)
                if h:
                    inner = ctx.rotate(inner, s.g1 * h * b, gk)
                z = inner if z is None else ctx.add(z, inner)
        for r in s.reduce:
            z = ctx.add(z, ctx.rotate(z, r * b, gk))
        if s.bias is not None:
            z = ctx.add(z, self.prog.spread(s.bias))
        return [z]

    def _elementwise(self, s, x: list, relin_key):
        from hemlp.runtime.local import ElementwiseOp, cached_elementwise

        ctx = self.ctx
        if s.op == "affine":
            out = []
            for ct, a, bt in zip(x, s.alpha, s.beta):
                y = ctx.rescale(ctx.mul(ct, self.prog.spread(a)))
                out.append(ctx.add(y, self.prog.spread(bt)) if np.any(bt) else y)
            return out
        fn = cached_elementwise(self._pe, ctx, ElementwiseOp.from_step(s.src), relin_key)
        return [fn(0, ct) for ct in x]

    def run(self, cts: list, relin_key, galois_keys, timings: dict | None = None) -> list:
        """Input ciphertexts (the input layout's K) -> output ciphertext list."""
        from hemlp.linalg import CtMatrix
        from hemlp.runtime.local import _add

        ctx = self.ctx
        if self.prog.rotations() and galois_keys is None:
            raise MissingKeyError("layout (P) needs the rotation keys of this model: use keygen()'s eval_keys")
        vals = {}
        for s in self.prog.steps:
            if s.op == "input":
                lv = s.src.level_out
                if cts[0].level < lv:
                    raise LevelError(f"the input is at level {cts[0].level} but the plan starts at level {lv}")
                vals[s.out] = [ctx.drop_level(c, lv) if c.level != lv else c for c in cts]
                continue
            x = vals[s.inputs[0]]
            t0 = time.perf_counter()
            if s.op == "matvec":
                y = self._matvec(s, x, galois_keys)
            elif s.op in ("square", "poly", "affine"):
                y = self._elementwise(s, x, relin_key)
            elif s.op == "add":
                A = CtMatrix(ctx, x, (len(x), ctx.slots), 1)
                B = CtMatrix(ctx, vals[s.inputs[1]], (len(x), ctx.slots), 1)
                y = _add(ctx, A, B, s.src.level_out).cts
            elif s.op == "mul":
                if relin_key is None:
                    raise MissingKeyError(f"step {s.out} multiplies two ciphertexts: it needs the relinearisation key")
                B = vals[s.inputs[1]]
                lv = min(x[0].level, B[0].level)
                y = [ctx.mul(ctx.drop_level(a, lv) if a.level != lv else a, ctx.drop_level(c, lv) if c.level != lv
                             else c, relin_key=relin_key, rescale=True) for a, c in zip(x, B)]
            else:
                y = x
            if s.op not in ("alias", "output", "add") and y[0].level != s.src.level_out:
                raise AssertionError(f"step {s.out}: level {y[0].level}, planned {s.src.level_out}")
            if timings is not None and s.op not in ("alias", "output"):
                timings[s.out] = time.perf_counter() - t0
            vals[s.out] = y
        return vals[self.prog.output.out]
