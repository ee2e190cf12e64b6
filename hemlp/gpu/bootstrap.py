"""Bootstrapping on the GPU: the CPU Bootstrapper's pipeline (hemlp/bootstrap/bootstrapper.py, CtS-first, full or
sparse slots, one ciphertext or a pair of real ones) with every step on the device, so the refreshed ciphertext holds
the same words the CPU computes.

    from hemlp.bootstrap import Bootstrapper, BootstrapKeys
    from hemlp.gpu.bootstrap import DeviceBootstrapper
    boot = Bootstrapper(ctx, BootstrapKeys.generate(ctx, sk))      # plans, parameters and keys (CPU, once)
    dboot = DeviceBootstrapper(gpu.CudaEvaluator(ctx), boot)          # keys and diagonals uploaded once
    fresh = dboot.bootstrap(dct)                                      # a DeviceCiphertext in, one out

ScaleDown, the encapsulation switch and ModRaise, the subring trace (n < N/2 slots), CoeffToSlot (one double-hoisted
BSGS transform per plan level), the real / imaginary split, EvalMod (the polynomial, then the double-angle
squarings), the join and SlotToCoeff, in the CPU pipeline's order and with its scales. Importing this module loads
the CPU core (the plans and keys come from it); hemlp.gpu itself does not.
"""
from __future__ import annotations

import time

from hemlp.bootstrap.bootstrapper import Bootstrapper
from hemlp.bootstrap.evalmod import scale_chain
from hemlp.bootstrap.modraise import checked_scale_down_factor
from hemlp.errors import EncodingError, LevelError, ScaleMismatchError, ShapeError
from hemlp.gpu.boot_steps import DeviceEncapsulationKeys, dense_to_sparse, mod_raise
from hemlp.gpu.device import CudaEvaluator, DeviceCiphertext
from hemlp.gpu.lintrans import DeviceLinearTransform
from hemlp.gpu.polyeval import evaluate_polynomial
from hemlp.he.subring import subring_trace_steps

SLOT, COEFF = 0, 1  # the core's encodings


class DeviceBootstrapper:
    """A CPU Bootstrapper's pipeline on a CudaEvaluator of the same context."""

    def __init__(self, dev: CudaEvaluator, boot: Bootstrapper):
        if not isinstance(boot, Bootstrapper):
            raise TypeError(f"DeviceBootstrapper takes a hemlp.bootstrap.Bootstrapper, got {type(boot).__name__}")
        ctx = boot.ctx
        if dev.spec.param_hash != ctx.hash:
            raise ShapeError("the device context and the bootstrapper belong to different parameter sets")
        self.dev, self.boot, self.ctx = dev, boot, ctx
        keys = boot.keys
        self.galois = dev.upload_galois_keys(keys.galois)
        self.relin = dev.upload_relin_key(keys.relin)
        self.encapsulation = DeviceEncapsulationKeys.from_keys(dev, keys.encapsulation)
        self.conjugation = 2 * ctx.N - 1
        self._transforms: dict = {}

    def _transform(self, lt, level: int):
        """The device copy of one plan level's transform encoded at `level` (encoded by the CPU once, uploaded)."""
        key = (id(lt), level)
        if key not in self._transforms:
            self._transforms[key] = DeviceLinearTransform.from_native(self.dev, lt.encode_native(self.ctx, level,
                                                                                                  qp=True))
        return self._transforms[key]

    def _plan(self, ct: DeviceCiphertext, plan) -> DeviceCiphertext:
        for lt in plan.levels:
            ct = self._transform(lt, ct.level).apply(ct, self.galois, rescale=True)
        return ct

    def _retag(self, ct: DeviceCiphertext, *, slots: int | None = None, encoding: int | None = None,
               scale: float | None = None, is_complex: bool | None = None) -> DeviceCiphertext:
        """ct's polynomials with new metadata (hemlp.he.reinterpret.retag's rules: a coefficient encoding has N
        slots unless given)."""
        enc = ct.encoding if encoding is None else encoding
        if slots is None:
            slots = self.ctx.N if enc == COEFF else ct.slots
        return DeviceCiphertext(list(ct.polys), ct.level, float(ct.scale if scale is None else scale), int(slots),
                                int(enc), bool(ct.is_complex if is_complex is None else is_complex), ct.key_id,
                                ct.param_hash)

    def _scale_down(self, ct: DeviceCiphertext) -> DeviceCiphertext:
        c = checked_scale_down_factor(self.ctx, ct, self.boot.params.log_message_ratio)  # the CPU's checks
        if ct.level > 1:
            ct = self.dev.drop_level(ct, 1)
        scaled = self.dev.with_scale(self.dev.mul_integer(ct, c), ct.scale * c)
        return self.dev.rescale(scaled) if ct.level >= 1 else scaled

    def _eval_mod(self, ct: DeviceCiphertext, out_scale: float) -> DeviceCiphertext:
        params, dev = self.boot.evalmod, self.dev
        chain = scale_chain(self.ctx, ct.level, params, out_scale)
        y = evaluate_polynomial(dev, ct, list(params.coefficients()), "chebyshev", self.relin, chain[0],
                                ct.level - params.poly_depth)
        for i in range(params.double_angles):
            sq = dev.mul(dev.mul_integer(y, 2), y, self.relin, rescale=True)
            target = chain[i + 1]
            if abs(sq.scale / target - 1) > 1e-9:
                raise AssertionError(f"eval_mod: scale drift {sq.scale} vs {target}")
            y = dev.add_const_exact(dev.with_scale(sq, target), -params.double_angle_constant(i))
        return y

    def _subring_trace(self, ct: DeviceCiphertext) -> DeviceCiphertext:
        """hemlp.he.subring.subring_trace: the coefficients off the multiples of gap = N / (2n) cleared by log2(gap)
        rotations and adds in the full-slot view; the scale multiplied by gap."""
        acc = self._retag(ct, slots=self.ctx.slots, encoding=SLOT)
        for s in subring_trace_steps(self.ctx.N, self.boot.n):
            acc = self.dev.add(acc, self.dev.rotate(acc, s, self.galois))
        gap = self.ctx.N // (2 * self.boot.n)
        return self._retag(acc, slots=ct.slots, encoding=ct.encoding, scale=ct.scale * gap,
                           is_complex=ct.is_complex)

    def _split(self, z: DeviceCiphertext) -> tuple:
        """hemlp.he.dft.split_real_imag: (Re z, Im z) as real slot ciphertexts at twice z's scale."""
        dev = self.dev
        c = dev.apply_galois(z, self.conjugation, self.galois)
        scale = 2.0 * z.scale
        re = self._retag(dev.add(z, c), scale=scale, is_complex=False)
        im = dev.mul_monomial(dev.sub(z, c), 3 * self.ctx.N // 2, scale=scale, is_complex=False)  # · (−i)
        return re, im

    def _join(self, re: DeviceCiphertext, im: DeviceCiphertext) -> DeviceCiphertext:
        """hemlp.he.dft.join_real_imag: re + i·im (i = X^(N/2), exact)."""
        if re.level != im.level:
            raise LevelError(f"join: the parts are at levels {re.level} and {im.level}")
        return self.dev.add(re, self.dev.mul_monomial(im, self.ctx.N // 2, is_complex=True))

    def _refresh(self, ct: DeviceCiphertext, out_scale: float, is_complex: bool, mark) -> DeviceCiphertext:
        boot, dev = self.boot, self.dev
        low = self._scale_down(ct)
        delta0 = low.scale
        up = mod_raise(dev, dense_to_sparse(dev, low, self.encapsulation), self.encapsulation)
        up = self._retag(up, scale=float(boot.params.K) * float(boot.q0))
        if boot.n < self.ctx.slots:
            up = self._subring_trace(up)
        mark("scale_down_mod_raise")
        z = self._plan(self._retag(up, slots=boot.n, encoding=SLOT, is_complex=True), boot.cts_plan)
        mark("coeff_to_slot")
        z = self._retag(z, scale=z.scale * boot.cts_factor)
        re, im = self._split(z)
        s_out = out_scale * float(boot.q0) / (delta0 * boot.stc_factor)
        re, im = self._eval_mod(re, s_out), self._eval_mod(im, s_out)
        mark("eval_mod")
        y = self._join(re, im)
        y = self._retag(y, scale=out_scale / boot.stc_factor)
        out = self._retag(self._plan(y, boot.stc_plan), encoding=COEFF, is_complex=False)
        out = self._retag(out, encoding=SLOT, slots=boot.n, is_complex=is_complex, scale=out_scale)
        mark("slot_to_coeff")
        if out.level != boot.output_level:
            raise AssertionError(f"bootstrap ended at level {out.level}, planned {boot.output_level}")
        return out

    def _check(self, ct: DeviceCiphertext) -> None:
        boot = self.boot
        if ct.param_hash != self.dev.spec.param_hash:
            raise ShapeError("the ciphertext belongs to another parameter set")
        if ct.encoding != SLOT or ct.slots != boot.n:
            raise EncodingError(f"this bootstrapper refreshes slot-encoded ciphertexts with {boot.n} slots")
        if ct.size != 2:
            raise ShapeError(f"the ciphertext has {ct.size} polynomials: relinearise it first")
        if ct.level == 0 and ct.scale * 2.0 ** boot.params.log_message_ratio > boot.q0:
            raise ScaleMismatchError("the ciphertext is at level 0 with a scale above q0 / 2^R: bootstrap it from "
                                     "level >= 1")

    def bootstrap_pair(self, a: DeviceCiphertext, b: DeviceCiphertext) -> tuple:
        """Bootstrapper.bootstrap_pair on the device: two real ciphertexts refreshed in one bootstrap (a + i·b at
        half the default scale, split with one conjugation into (a, b) at the default scale)."""
        self._check(a)
        self._check(b)
        if a.is_complex or b.is_complex:
            raise EncodingError("bootstrap_pair packs two real ciphertexts; bootstrap complex ones one by one")
        if a.level != b.level or a.scale != b.scale:
            raise LevelError(f"bootstrap_pair needs both ciphertexts at one level and scale; got levels {a.level} / "
                             f"{b.level}")
        out = self._refresh(self._join(a, b), self.ctx.default_scale / 2, True, lambda name: None)
        return self._split(out)

    def bootstrap(self, ct: DeviceCiphertext, stages: dict | None = None) -> DeviceCiphertext:
        """A fresh encryption of ct's slots at the bootstrapper's output level and the context's default scale.

        stages: a dict that receives each stage's seconds (scale_down_mod_raise — the subring trace included —,
        coeff_to_slot, eval_mod — the conjugate split and join included — and slot_to_coeff), the device
        synchronised at every stage boundary."""
        self._check(ct)
        if stages is None:
            return self._refresh(ct, self.ctx.default_scale, ct.is_complex, lambda name: None)
        self.dev.synchronize()
        last = [time.perf_counter()]

        def mark(name: str) -> None:
            self.dev.synchronize()
            now = time.perf_counter()
            stages[name] = now - last[0]
            last[0] = now
        return self._refresh(ct, self.ctx.default_scale, ct.is_complex, mark)
