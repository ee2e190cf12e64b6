"""Batched bootstrapping on shared-a MSRLWE ciphertexts (docs/design/bootstrap.md §3.1–3.3, CtS-first):

    ScaleDown each → RLWE(s)^k → MSRLWE(s'_1..s'_k) at q0·p0, fused with the sparse encapsulation (k² keys of
    2 limbs) → ModRaise + s'_j → s_j (1-digit shared-A key) → batched CoeffToSlot (one ModUp of the shared a
    per hoisted rotation, k+1 inner products) → MSRLWE(s_j) → RLWE(s) at EvalMod's level (k keys)
    → per ciphertext: re/im split, EvalMod ×2, join, SlotToCoeff

    msk = pcmm.multi_secret_key(ctx, k)                          # client side; s_1..s_k, never sent
    keys = BatchBootstrapKeys.generate(ctx, sk, k)               # (msk drawn inside when not given)
    bb = BatchBootstrapper(ctx, keys)
    outs = bb.bootstrap_batch([ct_1, ..., ct_k])                 # as k Bootstrapper.bootstrap calls

Every ciphertext-independent cost of CoeffToSlot (ModUps, the giant steps' ModDown of a) is paid once per k
ciphertexts; inner products, ModDowns, plaintext products and rescales run on k+1 polynomials instead of 2k.
EvalMod cannot run in MSRLWE (no ciphertext-ciphertext product), and SlotToCoeff in the CtS-first order
runs per ciphertext (batching it needs a second k² conversion at its level; docs/design/bootstrap.md §3.3 skips it).

Scales follow Bootstrapper exactly (the same plans, factors and re-tags), so bootstrap_batch returns what
k single bootstraps return up to noise. Keys and their memory: hemlp.bootstrap.batch_keys (the CtS rotation keys
hold k b-parts per digit and the seed of the shared a-part; estimate_bytes / choose_k before generating).
"""
from __future__ import annotations

import copy
import math

import numpy as np

from hemlp import _core
from hemlp.he.lintrans import LinearTransform
from hemlp.he import dft
from hemlp.bootstrap.batch_keys import BatchBootstrapKeys, batched_cts_levels
from hemlp.bootstrap.bootstrapper import check_input
from hemlp.bootstrap.evalmod import EvalModParams, eval_mod
from hemlp.bootstrap.keys import dft_plans
from hemlp.bootstrap.modraise import scale_down
from hemlp.he.reinterpret import retag
from hemlp.fhe import Ciphertext, Context
from hemlp.errors import (ContextMismatchError, KeyMismatchError, LevelError, MissingKeyError, ParameterError,
                          ScaleMismatchError, ShapeError)

__all__ = ["BatchBootstrapKeys", "BatchBootstrapper", "MsBatch", "batched_cts_levels"]


class MsBatch:
    """One shared-a MSRLWE ciphertext (a; b_1..b_k) of the batched pipeline (hemlp._core.MsCiphertext)."""

    __slots__ = ("native", "_phash")

    def __init__(self, obj, ctx: Context):
        self.native, self._phash = obj, ctx.hash

    k = property(lambda self: self.native.k)
    level = property(lambda self: self.native.level)
    scale = property(lambda self: self.native.scale)
    slots = property(lambda self: self.native.slots)
    key_id = property(lambda self: self.native.key_id)

    def __repr__(self):
        return f"MsBatch(k={self.k}, level={self.level}, scale=2^{math.log2(self.scale):.2f})"


class BatchBootstrapper:
    """Refreshes k ciphertexts at once (see the module doc); keys from BatchBootstrapKeys.generate."""

    def __init__(self, ctx: Context, keys: BatchBootstrapKeys):
        if not isinstance(keys, BatchBootstrapKeys):
            raise MissingKeyError("BatchBootstrapper needs BatchBootstrapKeys: BatchBootstrapKeys.generate(ctx, sk, k)")
        if keys.param_hash != ctx.hash:
            raise ContextMismatchError("the batch bootstrapping keys belong to another parameter set than this context")
        self.ctx, self.keys, self.params, self.k = ctx, keys, keys.params, keys.k
        p = self.params
        self.n = p.slot_count(ctx)
        self.evalmod = EvalModParams(K=p.K, degree=p.degree, double_angles=p.double_angles,
                                     log_message_ratio=p.log_message_ratio)
        L = ctx.max_level
        self.evalmod_level = L - p.cts_depth
        self.output_level = L - p.levels_consumed
        self.q0 = ctx.modulus(0)
        # the same plans, factors and scales as Bootstrapper (full packing: gap = 1)
        self.evalmod_in_scale = float(ctx.modulus(self.evalmod_level))
        self.raise_scale = float(p.K) * float(self.q0)
        self.cts_factor = self.evalmod_in_scale / (2.0 * self.raise_scale)
        cts, stc = dft_plans(self.n, p.cts_depth, p.stc_depth)
        self.cts_plan = _scale_last_level(cts, self.cts_factor)
        self.stc_factor = 2.0 ** -p.stc_log_scaling
        self.stc_plan = _scale_all_levels(stc, self.stc_factor)
        self._batch_lts: dict = {}

    # ---- the batched CoeffToSlot
    def _batch_transform(self, i: int, level: int):
        t = self._batch_lts.get(i)
        if t is None:
            lt = self.cts_plan.levels[i]
            pl = lt.plan
            diags = np.array([np.roll(lt.diags[pl.offset(g, b)], g * pl.n1) for g, bs in pl.groups for b in bs],
                             dtype=np.complex128)
            t = self._batch_lts[i] = _core.BatchLinearTransform(
                self.ctx.native, self.n, int(level), float(self.ctx.modulus(level)), [g * pl.n1 for g, _ in pl.groups],
                [list(bs) for _, bs in pl.groups], diags)
        return t

    @property
    def nbytes(self) -> int:
        """Bytes of the batched CoeffToSlot diagonals encoded so far (over Q_l ∪ P)."""
        return sum(t.nbytes for t in self._batch_lts.values())

    def coeff_to_slot_batch(self, ms: MsBatch, counts: list | None = None) -> MsBatch:
        """The (scaled) CoeffToSlot plan applied to every chunk of ms (tagged as slots, at the top level);
        the last level's factor is not re-tagged (as in Bootstrapper). counts: per-level operation counts."""
        o = ms.native
        if o.level != self.ctx.max_level:
            raise LevelError(f"the batched CoeffToSlot runs from the top level {self.ctx.max_level}; got {o.level}")
        if o.key_id != self.keys.ms_galois.ms_key_id:
            raise KeyMismatchError("the MSRLWE ciphertext is not under the multi-secret key of these keys")
        o = _core.ms_retag(self.ctx.native, o, o.scale, self.n, 0)
        for i in range(self.cts_plan.depth):
            o, c = self._batch_transform(i, o.level).apply(self.ctx.native, o, self.keys.ms_galois, True)
            if counts is not None:
                counts.append(c)
        return MsBatch(o, self.ctx)

    # ---- conversions
    def to_msrlwe(self, cts: list) -> tuple:
        """(MsBatch at the top level under s_1..s_k with scale K·q0, Δ0'): ScaleDown, fused RLWE→MSRLWE +
        encapsulation at q0·p0, ModRaise with the 1-digit s'_j → s_j switch. The chunk j decrypts to
        t_j = m_j + e + q0·I_j (|I_j| <= (h+1)/2), exactly as a single ModRaise."""
        self._check_batch(cts)
        R = self.params.log_message_ratio
        return self.raise_batch([scale_down(self.ctx, ct, R) for ct in cts])

    def raise_batch(self, lows: list) -> tuple:
        """to_msrlwe after ScaleDown: k level-0 ciphertexts (one scale Δ0') → (MsBatch at the top, Δ0')."""
        if len(lows) != self.k:
            raise ShapeError(f"these batch keys take exactly k = {self.k} ciphertexts; got {len(lows)}")
        e = self.ctx.native
        ms = _core.rlwe_to_ms_sparse(e, [self.ctx.unwrap(c, Ciphertext, "ciphertext") for c in lows],
                                     self.keys.conversion)
        up = _core.ms_mod_raise(e, ms, self.keys.conversion, self.ctx.max_level)
        up = _core.ms_retag(e, up, self.raise_scale, self.n, 0)
        return MsBatch(up, self.ctx), lows[0].scale

    def to_rlwe(self, ms: MsBatch) -> list:
        """MSRLWE(s_j) → k RLWE ciphertexts under s (one ModUp of the shared a, k key switches)."""
        return [self.ctx.wrap(Ciphertext, o) for o in
                _core.ms_to_rlwe_back(self.ctx.native, ms.native, self.keys.conversion)]

    # ---- the pipeline
    def _check_batch(self, cts) -> None:
        if not isinstance(cts, (list, tuple)):
            raise ShapeError("bootstrap_batch takes a list of ciphertexts")
        if len(cts) != self.k:
            raise ShapeError(f"these batch keys refresh exactly k = {self.k} ciphertexts at once; got {len(cts)}. "
                             f"Pad the batch (e.g. with a copy of a ciphertext) or make keys for k = {len(cts)}")
        for i, ct in enumerate(cts):
            check_input(self.ctx, ct, self.n, self.q0, self.params.log_message_ratio, f"ciphertext {i}",
                        "batched bootstrapping")
        ref = cts[0]
        for i, ct in enumerate(cts[1:], 1):
            if ct.level != ref.level:
                raise LevelError(f"bootstrap_batch needs all ciphertexts at one level: ciphertext 0 is at level "
                                 f"{ref.level}, ciphertext {i} at {ct.level}; drop the higher ones (ctx.drop_level)")
            if ct.scale != ref.scale:
                raise ScaleMismatchError(f"bootstrap_batch needs one scale: 2^{math.log2(ref.scale):.3f} vs "
                                         f"2^{math.log2(ct.scale):.3f} (ciphertext {i})")

    def finish(self, z: Ciphertext, delta0: float, out_scale: float, is_complex: bool) -> Ciphertext:
        """The per-ciphertext half after CoeffToSlot (as Bootstrapper): split, EvalMod ×2, join, SlotToCoeff."""
        ctx, keys = self.ctx, self.keys
        z = retag(ctx, z, scale=z.scale * self.cts_factor, slots=self.n, encoding="slot", is_complex=True)
        re, im = dft.split_real_imag(ctx, z, keys.galois)
        s_out = out_scale * float(self.q0) / (delta0 * self.stc_factor)
        re = eval_mod(ctx, re, keys.relin, self.evalmod, s_out)
        im = eval_mod(ctx, im, keys.relin, self.evalmod, s_out)
        y = dft.join_real_imag(ctx, re, im)
        y = retag(ctx, y, scale=out_scale / self.stc_factor)
        out = dft.slot_to_coeff(ctx, y, keys.galois, self.stc_plan)
        out = retag(ctx, out, encoding="slot", slots=self.n, is_complex=is_complex, scale=out_scale)
        if out.level != self.output_level:
            raise AssertionError(f"bootstrap ended at level {out.level}, planned {self.output_level}")
        return out

    def bootstrap_batch(self, cts: list) -> list:
        """k fresh ciphertexts (level output_level, scale 2^log_scale): the same as k Bootstrapper.bootstrap
        calls up to noise, with CoeffToSlot batched."""
        if self.params.order != "cts_first":
            raise ParameterError(f"BatchBootstrapper.bootstrap_batch runs the CtS-first order; order "
                                 f"{self.params.order!r} runs in hemlp.bootstrap.mambo.MamboBootstrapper")
        ms, delta0 = self.to_msrlwe(cts)
        z = self.coeff_to_slot_batch(ms)
        return [self.finish(c, delta0, self.ctx.default_scale, ct.is_complex) for c, ct in zip(self.to_rlwe(z), cts)]


def _scale_all_levels(plan: dft.DFTPlan, factor: float) -> dft.DFTPlan:
    """plan with every level's matrix multiplied by factor^(1/depth) (as Bootstrapper's StC plan)."""
    out = copy.copy(plan)
    f = factor ** (1.0 / plan.depth)
    out.levels = [LinearTransform({k: v * f for k, v in lt.diags.items()}, plan.n) for lt in plan.levels]
    return out


def _scale_last_level(plan: dft.DFTPlan, factor: float) -> dft.DFTPlan:
    """plan with its last level's matrix multiplied by factor (as Bootstrapper's CtS plan)."""
    out = copy.copy(plan)
    lt = plan.levels[-1]
    out.levels = list(plan.levels[:-1]) + [LinearTransform({k: v * factor for k, v in lt.diags.items()}, plan.n)]
    return out
