"""S2C-first batched bootstrapping and MaMBo (docs/design/bootstrap.md §1.4, §3.4): the plaintext-ciphertext matrix
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
from hemlp.errors import EncodingError, LevelError, ParameterError, ScaleMismatchError, ShapeError
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

    def refresh_coefficients(self, cts: list, out_scale: float) -> list:
        """Coefficient-encoded ciphertexts (any level, every coefficient within [-1, 1] in units of the scale) ->
        slot-encoded complex ones at output_level with scale out_scale exactly, slot j holding coefficient rev(j) +
        i·coefficient N/2 + rev(j): what a bit-reversed CoeffToSlot of the input gives, refreshed. The S2C-first
        pipeline without its SlotToCoeff (the inputs are coefficient-encoded already): layout (A′) runs its
        activation segments' CoeffToSlot inside it (hemlp.layouts.mlwe)."""
        if not isinstance(cts, (list, tuple)) or not cts:
            raise ShapeError("refresh_coefficients takes a non-empty list of ciphertexts")
        for i, ct in enumerate(cts):
            self.ctx.unwrap(ct, Ciphertext, f"ciphertext {i}")
            if ct.encoding != "coeff":
                raise ShapeError(f"refresh_coefficients refreshes coefficient-encoded ciphertexts; ciphertext {i} is "
                                 f"{ct.encoding}-encoded (slot-encoded ones: bootstrap_batch)")
            if ct.size != 2:
                raise ShapeError(f"ciphertext {i} has {ct.size} polynomials: relinearise it first")
        if not out_scale > 0:
            raise ParameterError(f"refresh_coefficients: out_scale must be > 0, got {out_scale}")
        R = self.params.log_message_ratio
        return self._in_batches([scale_down(self.ctx, ct, R) for ct in cts], float(out_scale), True)

    # ---- pairing (two real ciphertexts in one complex bootstrap, as Bootstrapper.bootstrap_pair)
    def _join_pairs(self, cts: list) -> list:
        """Real ciphertexts (one level, scale and encoding) -> ceil(len/2) complex ones a + i·b (exact: a + X^(N/2)·b,
        no level). Coefficient-encoded rows (after SlotToCoeff) join the same way: a real slot vector's coefficient
        vector fills only the first half of the coefficients, and X^(N/2) moves b's into the second half."""
        out = []
        for i in range(0, len(cts), 2):
            a = cts[i]
            if i + 1 == len(cts):
                out.append(retag(self.ctx, a, is_complex=True))
                continue
            enc = a.encoding
            sa, sb = (retag(self.ctx, c, encoding="slot", slots=self.n) if enc == "coeff" else c
                      for c in (a, cts[i + 1]))
            j = dft.join_real_imag(self.ctx, sa, sb)
            out.append(retag(self.ctx, j, encoding="coeff") if enc == "coeff" else j)
        return out

    def _split_pairs(self, outs: list, count: int) -> list:
        """Refreshed a + i·b (scale Δ/2) -> a, b at scale Δ exactly (one conjugation each); count real outputs."""
        res = []
        for o in outs:
            re, im = dft.split_real_imag(self.ctx, o, self.keys.galois)
            res += [re, im]
        return res[:count]

    # ---- entry points
    def bootstrap_batch(self, cts: list, pair: bool = False) -> list:
        """S2C-first bootstrap of len(cts) ciphertexts (k at a time): fresh slot-encoded ciphertexts at
        output_level with scale 2^log_scale exactly. pair=True (real inputs only): two real ciphertexts share one
        complex bootstrap (joined before SlotToCoeff, split with a conjugation after), so k complex bootstraps
        refresh 2k real ciphertexts."""
        d = self.params.stc_depth
        self._check_inputs(cts, d, "bootstrap_batch")
        R = self.params.log_message_ratio
        if pair:
            if cts[0].is_complex:
                raise EncodingError("bootstrap_batch(pair=True) packs real ciphertexts two by two; complex ones are "
                                    "refreshed with pair=False")
            lows = [scale_down(self.ctx, self.slot_to_coeff_bottom(j, d), R)
                    for j in self._join_pairs([self.ctx.drop_level(c, d) if c.level > d else c for c in cts])]
            return self._split_pairs(self._in_batches(lows, self.ctx.default_scale / 2, True), len(cts))
        lows = [scale_down(self.ctx, self.slot_to_coeff_bottom(ct, d), R) for ct in cts]
        return self._in_batches(lows, self.ctx.default_scale, cts[0].is_complex)

    @staticmethod
    def scale_divisor(U, x_bound: float) -> float:
        """c = 2^ceil(log2(max(1, ‖U‖_∞→∞·x_bound))): U·X/c stays within EvalMod's range |x| <= 1."""
        bnd = float(np.max(np.sum(np.abs(np.asarray(U, dtype=np.float64)), axis=1))) * float(x_bound)
        return 2.0 ** max(0, math.ceil(math.log2(bnd))) if bnd > 0 else 1.0

    def pcmm_bootstrap(self, U, cts: list, bias=None, weight_bits: int = 20, x_bound: float = 1.0,
                       c: float | None = None, pair: bool = False) -> list:
        """Enc(U·X + bias) refreshed, X's rows the ciphertexts cts (d2 = len(cts) = U's columns): U.shape[0]
        ciphertexts at output_level with scale Δ/c, c = 2^ceil(log2(max(1, ‖U‖_∞→∞·x_bound))) (exact; the values
        are U·X + bias). x_bound: a bound on |X| over every slot (real and imaginary parts), which keeps U·X/c
        inside EvalMod's range. c: a power of two given directly instead (e.g. from calibrated data: the caller
        vouches that |U·X| <= c). The PCMM runs at level 1 on the coefficient-encoded rows (hemlp.pcmm.pcmm,
        weights quantised to weight_bits). pair=True (real inputs): the output rows are joined two by two after
        the PCMM (a + i·b in the coefficients, exact) and share one complex refresh, split after."""
        U = np.asarray(U, dtype=np.float64)
        if U.ndim != 2 or U.shape[1] != len(cts):
            raise ShapeError(f"pcmm_bootstrap: U must be d1 x d2 with d2 = {len(cts)} (the ciphertexts); got "
                             f"shape {U.shape}")
        if not x_bound > 0:
            raise ParameterError("pcmm_bootstrap: x_bound must be > 0")
        if c is None:
            c = self.scale_divisor(U, x_bound)
        elif not (c >= 1 and math.log2(c).is_integer()):
            raise ParameterError(f"pcmm_bootstrap: c must be a power of two >= 1, got {c}")
        d = self.params.stc_depth
        self._check_inputs(cts, d + 1, "pcmm_bootstrap")
        if pair and cts[0].is_complex:
            raise EncodingError("pcmm_bootstrap(pair=True) packs real rows two by two; use pair=False for complex ones")
        rows = [self.slot_to_coeff_bottom(ct, d + 1) for ct in cts]          # level 1, coefficient-encoded
        X = pcmm.CtMatrix(self.ctx, rows, (len(rows), self.ctx.N), 1, "rlwe")
        Y = pcmm.pcmm(U / c, X, weight_bits=weight_bits, rescale=True)      # level 0, scale tracked exactly
        R = self.params.log_message_ratio
        if pair:
            lows = [scale_down(self.ctx, y, R) for y in self._join_pairs(list(Y.cts))]
            outs = self._split_pairs(self._in_batches(lows, self.ctx.default_scale / 2, True), len(Y.cts))
        else:
            lows = [scale_down(self.ctx, y, R) for y in Y.cts]
            outs = self._in_batches(lows, self.ctx.default_scale, cts[0].is_complex)
        return self._finish(outs, c, bias, U.shape[0])

    def _finish(self, outs: list, c: float, bias, d1: int) -> list:
        """Refreshed U·X/c at Δ -> U·X (+ bias) at Δ/c (a re-tag, exact)."""
        outs = [retag(self.ctx, o, scale=o.scale / c) for o in outs]
        if bias is not None:
            b = np.asarray(bias, dtype=np.float64).reshape(-1)
            if b.shape[0] != d1:
                raise ShapeError(f"pcmm_bootstrap: bias has {b.shape[0]} entries for {d1} output rows")
            outs = [self.ctx.add(o, float(v)) if v != 0 else o for o, v in zip(outs, b)]
        return outs

    def pcmm_bootstrap_pairs(self, U, cts_a: list, cts_b: list, bias=None, weight_bits: int = 20,
                             x_bound: float = 1.0, c: float | None = None) -> tuple:
        """pcmm_bootstrap of two real row sets of one shape (e.g. two chunks of a layout (A) batch) in one pass:
        a_r + i·b_r joined before SlotToCoeff (exact), so every SlotToCoeff, the PCMM and every refresh carry both
        (U is real: U·(A + iB) = U·A + i·U·B), split after. Returns (outputs of A, outputs of B), as
        pcmm_bootstrap's."""
        U = np.asarray(U, dtype=np.float64)
        if len(cts_a) != len(cts_b):
            raise ShapeError(f"pcmm_bootstrap_pairs: {len(cts_a)} and {len(cts_b)} rows; the two sets must match")
        if U.ndim != 2 or U.shape[1] != len(cts_a):
            raise ShapeError(f"pcmm_bootstrap: U must be d1 x d2 with d2 = {len(cts_a)} (the ciphertexts); got "
                             f"shape {U.shape}")
        if c is None:
            c = self.scale_divisor(U, x_bound)
        elif not (c >= 1 and math.log2(c).is_integer()):
            raise ParameterError(f"pcmm_bootstrap: c must be a power of two >= 1, got {c}")
        d = self.params.stc_depth
        self._check_inputs(list(cts_a) + list(cts_b), d + 1, "pcmm_bootstrap_pairs")
        if cts_a[0].is_complex:
            raise EncodingError("pcmm_bootstrap_pairs joins real rows; complex ones run in pcmm_bootstrap")
        lv = min(ct.level for ct in list(cts_a) + list(cts_b))
        drop = lambda ct: self.ctx.drop_level(ct, lv) if ct.level > lv else ct  # noqa: E731
        joined = [dft.join_real_imag(self.ctx, drop(a), drop(b)) for a, b in zip(cts_a, cts_b)]
        rows = [self.slot_to_coeff_bottom(ct, d + 1) for ct in joined]
        X = pcmm.CtMatrix(self.ctx, rows, (len(rows), self.ctx.N), 1, "rlwe")
        Y = pcmm.pcmm(U / c, X, weight_bits=weight_bits, rescale=True)
        R = self.params.log_message_ratio
        lows = [scale_down(self.ctx, y, R) for y in Y.cts]
        outs = self._in_batches(lows, self.ctx.default_scale / 2, True)
        ya, yb = [], []
        for o in outs:
            re, im = dft.split_real_imag(self.ctx, o, self.keys.galois)
            ya.append(re)
            yb.append(im)
        return self._finish(ya, c, bias, U.shape[0]), self._finish(yb, c, bias, U.shape[0])
