"""CKKS bootstrapping, CtS-first order (docs/design/bootstrap.md §0, §1.3):

    ScaleDown → dense→sparse at q0·p0 → ModRaise + sparse→dense → (subring trace if n < N/2)
    → CoeffToSlot → re/im split → EvalMod ×2 → join + retag → SlotToCoeff

    bp = BootParams.for_context(ctx)
    keys = BootstrapKeys.generate(ctx, sk, bp)          # client side
    boot = Bootstrapper(ctx, keys)                      # server side (public keys only)
    fresh = boot.bootstrap(ct)                          # level boot.output_level, scale 2^log_scale exactly
    a2, b2 = boot.bootstrap_pair(a, b)                  # two real ciphertexts in one bootstrap

Scales (all exact doubles): ScaleDown leaves Δ0' = Δ_in·c/q1 ≈ q0/2^R (tracked, not nominal). After
ModRaise the ciphertext is re-tagged K·q0, so its coefficients read u/K with u = I + ε, ε = m/q0.
CoeffToSlot's matrix is multiplied by c_cts (< 1, DFTPlan's scaling, spread over its levels) and the tag by c_cts, so
the slots keep their values but the integers shrink: after the split (tag ×2) EvalMod's input has
scale q_(L − cts), the prime its first squaring divides by (a scale above the primes would grow with
every squaring). EvalMod returns sin(2πu)/(2π) ≈ ε at S_out = Δ·q0/(Δ0'·c_stc) with c_stc = 2^-stc_log_scaling;
re-tagging the joined result with Δ/c_stc turns ε into m/Δ0' = x. SlotToCoeff's matrices are multiplied by
c_stc (spread over its levels) and the result re-tagged Δ: the output is at Δ bit for bit. Landing EvalMod
at Δ·q0/Δ0' directly (c_stc = 1) leaves its last rescale's noise (≈ 2^12.5 at N = 2^12, relative to S_out)
multiplied by q0/Δ0' = 2^R and by √n in SlotToCoeff: 4 bits lost at N = 2^14 (measured 18.0 vs 21.9).

Input range: ‖m/Δ0'‖∞ <= 1 in the coefficient domain keeps |ε| <= 2^-R. Random slots in [−1, 1] give
coefficients of about 2^-7.5 (full precision); structured data (constants) reach 1 (≈ 13 bits at
R = 8); coefficients above 1 lose precision as (2π²/3)ε³ and wrap at |ε| = 1/2. The encrypted path
cannot see values: check plaintexts with Bootstrapper.check_input_range(x) (or max_coefficient).
"""
from __future__ import annotations

import functools
import math

import numpy as np

from hemlp.he import dft
from hemlp.he import special_fft as sf
from hemlp.bootstrap.keys import BootstrapKeys
from hemlp.bootstrap.modraise import dense_to_sparse, mod_raise, scale_down
from hemlp.bootstrap.params import BootParams
from hemlp.he.reinterpret import retag
from hemlp.he.subring import subring_trace
from hemlp.fhe import Ciphertext, Context
from hemlp.errors import EncodingError, LevelError, MissingKeyError, ParameterError, ScaleMismatchError, ShapeError

from hemlp.bootstrap.evalmod import EvalModParams, eval_mod

__all__ = ["Bootstrapper", "slot_coefficients", "max_coefficient"]


@functools.lru_cache(maxsize=8)
def _inverse_stages_reversed(n: int) -> tuple:
    """The butterfly stages of U⁻¹ in application order, as read-only (offset, diagonal) pairs: building them costs
    a Python loop per entry, and range checks call slot_coefficients once per ciphertext."""
    stages = []
    for D in reversed(sf.inverse_stages(n)):
        pairs = []
        for k, d in D.items():
            d = np.array(d)
            d.setflags(write=False)
            pairs.append((k, d))
        stages.append(tuple(pairs))
    return tuple(stages)


def slot_coefficients(z) -> np.ndarray:
    """The real coefficient vector (N = 2n values, x_k and x_(N/2+k) on the subring's positions, in the
    w-indexing of hemlp.he.dft) whose decoding gives the slots z: w = U⁻¹·z by the butterfly
    stages, O(n log n)."""
    z = np.asarray(z, dtype=np.complex128).reshape(-1)
    n = z.size
    v = z
    for D in _inverse_stages_reversed(n):      # U⁻¹ = R·B̃_1⋯B̃_L: B̃_L first
        v = sum(d * np.roll(v, -k) for k, d in D)
    w = v[sf.bit_reverse(n)]
    return np.concatenate([w.real, w.imag])


def max_coefficient(z) -> float:
    """max |x_k| of the slots' coefficient vector (units of the scale): the quantity ScaleDown's message
    ratio bounds."""
    return float(np.max(np.abs(slot_coefficients(z))))


def check_input(ctx: Context, ct: Ciphertext, slots: int, q0: int, log_message_ratio: int, what: str,
                who: str) -> None:
    """What every bootstrapping pipeline (single, batched, MaMBo) asks of an input ciphertext: this context's,
    slot-encoded with `slots` slots, two polynomials, and at level 0 a scale that leaves q0 / 2^log_message_ratio of
    room for the message."""
    ctx.unwrap(ct, Ciphertext, what)
    if ct.encoding != "slot" or ct.slots != slots:
        raise ShapeError(f"{who} refreshes slot-encoded ciphertexts with {slots} slots; the {what} "
                         f"has {ct.encoding} encoding with {ct.slots} slots")
    if ct.size != 2:
        raise ShapeError(f"the {what} has {ct.size} polynomials: relinearise it first")
    R = log_message_ratio
    if ct.level == 0 and ct.scale * 2.0 ** R > q0:
        raise ScaleMismatchError(f"the {what} is at level 0 with scale 2^{math.log2(ct.scale):.1f} > q0/2^{R}: "
                                 "bootstrap it from level >= 1 (or at a smaller scale)")


class Bootstrapper:
    """Refreshes ciphertexts of one context with one key set (see the module doc)."""

    def __init__(self, ctx: Context, keys: BootstrapKeys, params: BootParams | None = None):
        if not isinstance(keys, BootstrapKeys):
            raise MissingKeyError("Bootstrapper needs BootstrapKeys: BootstrapKeys.generate(ctx, sk, params)")
        self.ctx, self.keys = ctx, keys
        self.params = keys.params if params is None else params
        p = self.params
        p.validate(ctx)
        if p.order != "cts_first":
            raise ParameterError(f"Bootstrapper runs the CtS-first order; order {p.order!r} runs in "
                                 "hemlp.bootstrap.mambo.MamboBootstrapper")
        if p != keys.params and (p.slot_count(ctx), p.cts_depth, p.stc_depth, p.h) != (
                keys.params.slot_count(ctx), keys.params.cts_depth, keys.params.stc_depth, keys.params.h):
            raise MissingKeyError("the keys were made for other bootstrapping parameters (slots / depths / h): "
                                  "generate them with these params")
        keys.check(ctx)
        self.n = p.slot_count(ctx)
        self.evalmod = EvalModParams(K=p.K, degree=p.degree, double_angles=p.double_angles,
                                     log_message_ratio=p.log_message_ratio)
        if self.evalmod.depth != p.evalmod_depth:
            raise AssertionError(f"EvalMod depth {self.evalmod.depth} != {p.evalmod_depth}")
        L = ctx.max_level
        self.evalmod_level = L - p.cts_depth
        self.output_level = L - p.levels_consumed
        self.q0 = ctx.modulus(0)
        gap = ctx.N // (2 * self.n)
        # EvalMod's input scale: the prime its first squaring rescales by
        self.evalmod_in_scale = float(ctx.modulus(self.evalmod_level))
        raise_scale = float(p.K) * float(self.q0) * gap          # after ModRaise retag and trace
        self.cts_factor = self.evalmod_in_scale / (2.0 * raise_scale)
        self.cts_plan = dft.plan_coeff_to_slot(self.n, p.cts_depth, scaling=self.cts_factor)
        # EvalMod lands 2^stc_log_scaling above Δ·q0/Δ0' (its last rescale's noise is relative to its output
        # scale, then multiplied by q0/Δ0' = 2^R and by √n through SlotToCoeff); StC's matrices carry the
        # 2^-stc_log_scaling back down (DFTPlan spreads a scaling over its levels)
        self.stc_factor = 2.0 ** -p.stc_log_scaling
        self.stc_plan = dft.plan_slot_to_coeff(self.n, p.stc_depth, scaling=self.stc_factor)

    # ---- plaintext pre-check
    def check_input_range(self, x) -> float:
        """Raise EncodingError if the slot values x would leave EvalMod's range (coefficients above 1 in
        units of the scale); return the largest coefficient. The encrypted path cannot check this."""
        z = np.asarray(x, dtype=np.complex128).reshape(-1)
        if z.size != self.n:
            raise ShapeError(f"{z.size} values for a {self.n}-slot bootstrapper")
        m = max_coefficient(z)
        if m > 1.0:
            raise EncodingError(f"the input's largest coefficient is {m:.3g} > 1 (units of the scale): bootstrapping "
                                f"would lose precision or wrap around (|m/q0| must stay <= 2^-{self.params.log_message_ratio}"
                                "). Divide the data by its bound before bootstrapping and multiply back after")
        return m

    # ---- the pipeline
    def _check(self, ct: Ciphertext, what: str = "ciphertext") -> None:
        check_input(self.ctx, ct, self.n, self.q0, self.params.log_message_ratio, what, "this bootstrapper")

    def _refresh(self, ct: Ciphertext, out_scale: float, is_complex: bool) -> Ciphertext:
        ctx, p, keys = self.ctx, self.params, self.keys
        low = scale_down(ctx, ct, p.log_message_ratio)
        delta0 = low.scale
        up = mod_raise(ctx, dense_to_sparse(ctx, low, keys.encapsulation), keys.encapsulation)
        up = retag(ctx, up, scale=float(p.K) * float(self.q0))
        if self.n < ctx.slots:
            up = subring_trace(ctx, up, keys.galois, self.n)
        z = dft.coeff_to_slot(ctx, up, keys.galois, self.cts_plan)
        z = retag(ctx, z, scale=z.scale * self.cts_factor)
        re, im = dft.split_real_imag(ctx, z, keys.galois)
        s_out = out_scale * float(self.q0) / (delta0 * self.stc_factor)
        re = eval_mod(ctx, re, keys.relin, self.evalmod, s_out)
        im = eval_mod(ctx, im, keys.relin, self.evalmod, s_out)
        y = dft.join_real_imag(ctx, re, im)
        y = retag(ctx, y, scale=out_scale / self.stc_factor)      # slots: x = ε·q0/Δ0'
        out = dft.slot_to_coeff(ctx, y, keys.galois, self.stc_plan)  # integers × stc_factor
        out = retag(ctx, out, encoding="slot", slots=self.n, is_complex=is_complex, scale=out_scale)
        if out.level != self.output_level:
            raise AssertionError(f"bootstrap ended at level {out.level}, planned {self.output_level}")
        return out

    def bootstrap(self, ct: Ciphertext) -> Ciphertext:
        """A fresh encryption of ct's slots at level output_level, scale 2^log_scale (the context default)."""
        self._check(ct)
        return self._refresh(ct, self.ctx.default_scale, ct.is_complex)

    def bootstrap_pair(self, ct_a: Ciphertext, ct_b: Ciphertext) -> tuple:
        """Two real ciphertexts in one bootstrap: ct_a + X^(N/2)·ct_b (= a + i·b slot-wise, exact) is
        refreshed at scale Δ/2, then split with one conjugation into (a, b) at scale Δ exactly."""
        self._check(ct_a, "first ciphertext")
        self._check(ct_b, "second ciphertext")
        if ct_a.is_complex or ct_b.is_complex:
            raise EncodingError("bootstrap_pair packs two real ciphertexts; bootstrap complex ones one by one")
        if ct_a.level != ct_b.level or ct_a.scale != ct_b.scale:
            raise LevelError(f"bootstrap_pair needs both ciphertexts at one level and scale; got level {ct_a.level} "
                             f"/ {ct_b.level}, scale 2^{math.log2(ct_a.scale):.3f} / 2^{math.log2(ct_b.scale):.3f}")
        packed = dft.join_real_imag(self.ctx, ct_a, ct_b)
        out = self._refresh(packed, self.ctx.default_scale / 2, True)
        a, b = dft.split_real_imag(self.ctx, out, self.keys.galois)
        return a, b

