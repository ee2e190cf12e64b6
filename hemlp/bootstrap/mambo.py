"""S2C-first batched bootstrapping and MaMBo (BOOTSTRAP.md §1.4, §3.4): the plaintext-ciphertext matrix
product fused into batched bootstrapping at the bottom of the chain.

S2C-first order (per batch of k ciphertexts, slot-encoded at level >= stc_depth):

    drop to level stc_depth → SlotToCoeff (bit-reversed, on stc_depth+1 limbs) → ScaleDown (R = 14: the
    coefficients are the slot values themselves, O(1)) → RLWE^k → MSRLWE + encapsulation at q0·p0 → ModRaise
    → batched CoeffToSlot (bit-reversed: the two reversals cancel) → MSRLWE → RLWE → split, EvalMod ×2, join

The output is slot-encoded at level L − cts_depth − evalmod_depth with scale Δ exactly: EvalMod lands at
S_out = Δ·q0/Δ0' and the joined result is re-tagged Δ (no SlotToCoeff follows, so no factor to spread).

MaMBo, pcmm_bootstrap(U, [ct_1..ct_d2]) = Bootstrap(U·X) with X's rows the ciphertexts:

    each input: drop to level stc_depth + 1, SlotToCoeff (levels stc_depth+1 → 1)
    PCMM at level 1 (2 limbs, hemlp.pcmm.pcmm on the coefficient-encoded rows, exact weights at weight_bits,
    one rescale → level 0; U is divided by c = 2^ceil(log2(‖U‖_∞→∞·x_bound)) so |U·X/c| <= 1)
    then the S2C-first batched pipeline above, k outputs at a time; the outputs are re-tagged Δ/c (exact:
    c is a power of two, so the values are U·X) and the bias added at the output level (exact constant add).

Why it is correct: the PCMM is a left multiplication across ciphertexts and SlotToCoeff acts inside each
ciphertext, so U·StC(X) = StC(U·X); it runs before ModRaise (afterwards U would mix the q0·I terms).
Where it saves: the PCMM's GEMMs run on 2 limbs instead of an application level's 10-15, no application
level is spent on it, SlotToCoeff runs on stc_depth+1 limbs instead of 14-17, and CoeffToSlot is batched.
"""
from __future__ import annotations

import math

import numpy as np

from hemlp.he import dft
from hemlp.bootstrap.batch import BatchBootstrapKeys, BatchBootstrapper
from hemlp.bootstrap.evalmod import eval_mod
from hemlp.bootstrap.modraise import scale_down
from hemlp.he.reinterpret import retag
from hemlp.fhe import Ciphertext, Context
from hemlp.errors import LevelError, ParameterError, ScaleMismatchError, ShapeError
from hemlp import pcmm

__all__ = ["MamboBootstrapper", "S2C_LOG_MESSAGE_RATIO"]

#: the message ratio of the S2C-first order: EvalMod's input coefficients are the slot values (O(1)), so the sine's
#: cubic error (2π²/3)·x³·2^-2R needs R = 14 (2^-25.3 at |x| = 1)
S2C_LOG_MESSAGE_RATIO = 14


class MamboBootstrapper:
    """S2C-first batched bootstrapping and MaMBo on BatchBootstrapKeys made with order='s2c_first':

        params = BootParams.for_context(ctx, order="s2c_first", log_message_ratio=14)
        keys = BatchBootstrapKeys.generate(ctx, sk, k, params)
        mb = MamboBootstrapper(ctx, keys)
        outs = mb.bootstrap_batch([ct_1..ct_k])          # S2C-first, k at once (k = 1: a single bootstrap)
        ys = mb.pcmm_bootstrap(U, [ct_1..ct_d2])          # Enc(U·X (+ bias)) refreshed, d1 = U.shape[0] outputs
    """

    def __init__(self, ctx: Context, keys: BatchBootstrapKeys):
        self.batch = BatchBootstrapper(ctx, keys)       # MissingKeyError / ContextMismatchError for bad keys
        p = keys.params
        if p.order != "s2c_first":
            raise ParameterError("MamboBootstrapper runs the S2C-first order: make its keys with "
                                 "BootParams.for_context(ctx, order='s2c_first', log_message_ratio=14)")
        self.ctx, self.keys, self.params, self.k, self.n = ctx, keys, p, keys.k, self.batch.n
        L = ctx.max_level
        self.output_level = L - p.cts_depth - p.evalmod_depth
        # SlotToCoeff at the bottom: unscaled (no EvalMod noise follows it to be carried down)
        self.stc_plan = dft.plan_slot_to_coeff(self.n, p.stc_depth)
        self.q0 = ctx.modulus(0)

    # ---- checks
    def _check_inputs(self, cts, min_level: int, what: str) -> None:
        if not isinstance(cts, (list, tuple)) or not cts:
            raise ShapeError(f"{what} takes a non-empty list of ciphertexts")
        ref = cts[0]
        for i, ct in enumerate(cts):
            self.ctx.unwrap(ct, Ciphertext, f"ciphertext {i}")
            if ct.encoding != "slot" or ct.slots != self.n:
                raise ShapeError(f"{what} refreshes slot-encoded ciphertexts with {self.n} slots; ciphertext {i} has "
                                 f"{ct.encoding} encoding with {ct.slots} slots")
            if ct.size != 2:
                raise ShapeError(f"ciphertext {i} has {ct.size} polynomials: relinearise it first")
            if ct.level < min_level:
                raise LevelError(f"{what} runs SlotToCoeff at the bottom and needs inputs at level >= {min_level}; "
                                 f"ciphertext {i} is at level {ct.level}")
            if ct.scale != ref.scale:
                raise ScaleMismatchError(f"{what} needs one input scale: 2^{math.log2(ref.scale):.3f} vs "
                                         f"2^{math.log2(ct.scale):.3f} (ciphertext {i})")
            if ct.is_complex != ref.is_complex:
                raise ShapeError(f"{what}: mix of real and complex ciphertexts (ciphertext {i})")
        R = self.params.log_message_ratio
        if ref.scale * 2.0 ** R > self.q0:
            raise ScaleMismatchError(f"{what}: the input scale 2^{math.log2(ref.scale):.1f} is above q0/2^{R}; "
                                     "rescale or set_scale first")

    # ---- pieces
    def slot_to_coeff_bottom(self, ct: Ciphertext, level: int) -> Ciphertext:
        """ct dropped to `level` then SlotToCoeff'd (stc_depth levels): coefficient-encoded at level − stc_depth."""
        if ct.level > level:
            ct = self.ctx.drop_level(ct, level)
        return dft.slot_to_coeff(self.ctx, ct, self.keys.galois, self.stc_plan)

    def _refresh_lows(self, lows: list, out_scale: float, is_complex: bool) -> list:
        """k ScaleDown'd coefficient-encoded level-0 ciphertexts → k refreshed slot-encoded ones."""
        bb, ctx, keys = self.batch, self.ctx, self.keys
        ms, delta0 = bb.raise_batch(lows)
        z = bb.coeff_to_slot_batch(ms)
        s_out = out_scale * float(self.q0) / delta0
        outs = []
        for c in bb.to_rlwe(z):
            c = retag(ctx, c, scale=c.scale * bb.cts_factor, slots=self.n, encoding="slot", is_complex=True)
            re, im = dft.split_real_imag(ctx, c, keys.galois)
            re = eval_mod(ctx, re, keys.relin, bb.evalmod, s_out)
            im = eval_mod(ctx, im, keys.relin, bb.evalmod, s_out)
            y = dft.join_real_imag(ctx, re, im)
            y = retag(ctx, y, scale=out_scale, is_complex=is_complex)     # slots: ε·q0/Δ0' = x
            if y.level != self.output_level:
                raise AssertionError(f"bootstrap ended at level {y.level}, planned {self.output_level}")
            outs.append(y)
        return outs

    def _in_batches(self, lows: list, out_scale: float, is_complex: bool) -> list:
        """Refresh any number of level-0 ciphertexts k at a time (the last batch padded with copies)."""
        out = []
        for i in range(0, len(lows), self.k):
            chunk = list(lows[i:i + self.k])
            real = len(chunk)
            chunk += [chunk[-1]] * (self.k - real)
            out += self._refresh_lows(chunk, out_scale, is_complex)[:real]
        return out

    # ---- entry points
    def bootstrap_batch(self, cts: list) -> list:
        """S2C-first bootstrap of len(cts) ciphertexts (k at a time): fresh slot-encoded ciphertexts at
        output_level with scale 2^log_scale exactly."""
        d = self.params.stc_depth
        self._check_inputs(cts, d, "bootstrap_batch")
        R = self.params.log_message_ratio
        lows = [scale_down(self.ctx, self.slot_to_coeff_bottom(ct, d), R) for ct in cts]
        return self._in_batches(lows, self.ctx.default_scale, cts[0].is_complex)

    def pcmm_bootstrap(self, U, cts: list, bias=None, weight_bits: int = 20, x_bound: float = 1.0) -> list:
        """Enc(U·X + bias) refreshed, X's rows the ciphertexts cts (d2 = len(cts) = U's columns): U.shape[0]
        ciphertexts at output_level with scale Δ/c, c = 2^ceil(log2(max(1, ‖U‖_∞→∞·x_bound))) (exact; the values
        are U·X + bias). x_bound: a bound on |X| over every slot (real and imaginary parts), which keeps U·X/c
        inside EvalMod's range. The PCMM runs at level 1 on the coefficient-encoded rows (hemlp.pcmm.pcmm,
        weights quantised to weight_bits)."""
        U = np.asarray(U, dtype=np.float64)
        if U.ndim != 2 or U.shape[1] != len(cts):
            raise ShapeError(f"pcmm_bootstrap: U must be d1 x d2 with d2 = {len(cts)} (the ciphertexts); got "
                             f"shape {U.shape}")
        if not x_bound > 0:
            raise ParameterError("pcmm_bootstrap: x_bound must be > 0")
        d = self.params.stc_depth
        self._check_inputs(cts, d + 1, "pcmm_bootstrap")
        bnd = float(np.max(np.sum(np.abs(U), axis=1))) * float(x_bound)
        c = 2.0 ** max(0, math.ceil(math.log2(bnd))) if bnd > 0 else 1.0
        rows = [self.slot_to_coeff_bottom(ct, d + 1) for ct in cts]          # level 1, coefficient-encoded
        X = pcmm.CtMatrix(self.ctx, rows, (len(rows), self.ctx.N), 1, "rlwe")
        Y = pcmm.pcmm(U / c, X, weight_bits=weight_bits, rescale=True)      # level 0, scale tracked exactly
        R = self.params.log_message_ratio
        lows = [scale_down(self.ctx, y, R) for y in Y.cts]
        outs = self._in_batches(lows, self.ctx.default_scale, cts[0].is_complex)
        outs = [retag(self.ctx, o, scale=o.scale / c) for o in outs]
        if bias is not None:
            b = np.asarray(bias, dtype=np.float64).reshape(-1)
            if b.shape[0] != U.shape[0]:
                raise ShapeError(f"pcmm_bootstrap: bias has {b.shape[0]} entries for {U.shape[0]} output rows")
            outs = [self.ctx.add(o, float(v)) if v != 0 else o for o, v in zip(outs, b)]
        return outs
