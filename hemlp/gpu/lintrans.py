"""A BSGS linear transform (bootstrapping's CoeffToSlot / SlotToCoeff levels) resident on the GPU.

Built from a CPU transform (hemlp._core.LinearTransform, which encodes the diagonals) or from its layout, and
applied with double hoisting: the same schedule and words as the CPU core's ``apply(..., hoisting=2)``.
"""
from __future__ import annotations

import ctypes
import math

import numpy as np

from hemlp.errors import EncodingError, LevelError, MissingKeyError, ParameterError, ShapeError
from hemlp.gpu.device import CudaEvaluator, DeviceCiphertext, DeviceKey
from hemlp.gpu.library import release, check, vp


class DeviceLinearTransform:
    """y = T·x with T's diagonals on the device. `diagonals`: (level + 1 + K, N) arrays in group order (NTT form);
    giant[g] and baby[g][t] the rotation steps of group g and of its t-th diagonal (0: unrotated)."""

    def __init__(self, dev: CudaEvaluator, level: int, scale: float, slots: int, giant, baby, diagonals,
                 is_complex: bool = False):
        self.dev, self.level, self.scale, self.slots, self.is_complex = dev, int(level), float(scale), int(slots), \
            bool(is_complex)
        giant = [int(g) for g in giant]
        baby = [[int(b) for b in grp] for grp in baby]
        if len(giant) != len(baby) or not giant:
            raise ParameterError("linear transform: one list of baby steps per giant step, at least one group")
        limbs = self.level + 1 + len(dev.spec.p)
        d = np.ascontiguousarray(np.stack([np.asarray(a, dtype=np.uint64) for a in diagonals]))
        if d.shape != (sum(len(b) for b in baby), limbs, dev.n):
            raise ShapeError(f"linear transform: {sum(len(b) for b in baby)} diagonals of ({limbs}, {dev.n}) "
                             f"needed, got {d.shape}")
        g = np.asarray(giant, dtype=np.int64)
        sizes = np.asarray([len(b) for b in baby], dtype=np.int32)
        flat = np.asarray([b for grp in baby for b in grp], dtype=np.int64)
        h = vp()
        check(dev.lib.hg_lintrans_create(dev.handle, self.level, d.ctypes.data_as(ctypes.POINTER(ctypes.c_uint64)),
                                         d.shape[0], len(giant), g.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)),
                                         sizes.ctypes.data_as(ctypes.POINTER(ctypes.c_int)),
                                         flat.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)), ctypes.byref(h)),
              "linear transform")
        self.handle, self.giant, self.nbytes = h, giant, int(d.nbytes)
        count = ctypes.c_int(0)
        check(dev.lib.hg_lintrans_steps(h, ctypes.byref(count), None), "linear transform")
        steps = (ctypes.c_int64 * max(1, count.value))()
        check(dev.lib.hg_lintrans_steps(h, ctypes.byref(count), steps), "linear transform")
        self.baby_steps = [int(steps[i]) for i in range(count.value)]

    @classmethod
    def from_native(cls, dev: CudaEvaluator, native) -> "DeviceLinearTransform":
        """From a hemlp._core.LinearTransform encoded over Q_l ∪ P (qp=True, as double hoisting needs)."""
        if not native.qp:
            raise ParameterError("the GPU runs double hoisting, which needs the diagonals encoded over Q_l and P "
                                 "(LinearTransform(..., qp=True))")
        giant, baby, diags, is_complex = native.layout()
        return cls(dev, native.level, native.scale, native.slots, giant, baby, diags, is_complex)

    def __del__(self):
        release(self, "hg_lintrans_free")

    @property
    def steps(self) -> list:
        """Every rotation step the transform needs a key for."""
        return sorted(set(self.baby_steps) | {g for g in self.giant if g})

    def apply(self, ct: DeviceCiphertext, keys: dict, rescale: bool = True) -> DeviceCiphertext:
        """T·ct (rescaled by q_level when asked); keys: {Galois element: DeviceKey} with every step's key."""
        dev = self.dev
        if ct.size != 2:
            raise ParameterError("linear transform needs a relinearised ciphertext (2 polynomials)")
        if ct.encoding != 0:
            raise EncodingError("linear transform: the ciphertext must be slot-encoded")
        if ct.slots != self.slots:
            raise ShapeError(f"linear transform: the transform acts on {self.slots} slots but the ciphertext has "
                             f"{ct.slots}")
        if ct.level != self.level:
            raise LevelError(f"linear transform: the diagonals are encoded at level {self.level} but the ciphertext "
                             f"is at level {ct.level}")
        if rescale and self.level == 0:
            raise LevelError("linear transform: the ciphertext is at level 0, no modulus left for the rescale")

        def key(step: int) -> DeviceKey:
            g = dev.galois_element(step)
            k = keys.get(g) if isinstance(keys, dict) else None
            if k is None:
                raise MissingKeyError(f"linear transform: no device key for rotation step {step} (Galois element {g})")
            dev.check_key(k, ct, g, "linear transform")
            return k

        bk = [key(s) for s in self.baby_steps]
        gk = [key(g) if g else None for g in self.giant]
        arr = lambda ks: (vp * max(1, len(ks)))(*[k.handle if k else None for k in ks])  # noqa: E731
        lv = self.level - 1 if rescale else self.level
        o0, o1 = dev.empty(lv + 1), dev.empty(lv + 1)
        check(dev.lib.hg_lintrans_apply(dev.handle, self.handle, ct.polys[0].handle, ct.polys[1].handle, arr(bk),
                                        arr(gk), int(bool(rescale)), o0.handle, o1.handle), "linear transform")
        scale = ct.scale * self.scale / (dev.spec.q[self.level] if rescale else 1.0)
        return DeviceCiphertext([o0, o1], lv, scale, ct.slots, ct.encoding, ct.is_complex or self.is_complex,
                                ct.key_id, ct.param_hash)

    def __repr__(self):
        return (f"DeviceLinearTransform(level={self.level}, groups={len(self.giant)}, "
                f"baby_steps={len(self.baby_steps)}, scale=2^{math.log2(self.scale):.1f})")
