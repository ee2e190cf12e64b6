"""Bootstrapping's bottom-of-the-chain steps on the device: the encapsulation key switch s -> s' at level 0
(dense_to_sparse) and ModRaise fused with the switch back (mod_raise), as boot/modraise.cpp computes them, from the
CPU's EncapsulationKeys uploaded once.
"""
from __future__ import annotations

import ctypes

import numpy as np

from hemlp.errors import ContextMismatchError, KeyMismatchError, LevelError, ShapeError
from hemlp.gpu.device import CudaEvaluator, DeviceCiphertext
from hemlp.gpu.library import release, c_u64p, check, vp


class DeviceEncapsulationKeys:
    """small (b, a): (2, N) over q0, p0; big (B, A): (level + 1 + K, N) over Q_level ∪ P; NTT form."""

    def __init__(self, dev: CudaEvaluator, level: int, small_b, small_a, big_b, big_a, key_id: int, sparse_id: int):
        arrays = [np.ascontiguousarray(a, dtype=np.uint64) for a in (small_b, small_a, big_b, big_a)]
        big = (level + 1 + len(dev.spec.p), dev.n)
        if arrays[0].shape != (2, dev.n) or arrays[1].shape != (2, dev.n) or arrays[2].shape != big or \
                arrays[3].shape != big:
            raise ShapeError(f"encapsulation keys: small parts (2, {dev.n}), big parts {big}")
        h = vp()
        check(dev.lib.hg_encaps_upload(dev.handle, int(level), *[a.ctypes.data_as(c_u64p) for a in arrays],
                                       ctypes.byref(h)), "encapsulation keys")
        self.dev, self.handle, self.level = dev, h, int(level)
        self.key_id, self.sparse_id = int(key_id), int(sparse_id)
        self.nbytes = sum(a.nbytes for a in arrays)

    @classmethod
    def from_keys(cls, dev: CudaEvaluator, keys) -> "DeviceEncapsulationKeys":
        """From hemlp.bootstrap.EncapsulationKeys of the evaluator's context."""
        from hemlp import _core

        if keys.param_hash != dev.spec.param_hash:
            raise ContextMismatchError("the encapsulation keys belong to another parameter set")
        parts = _core.export_encapsulation_keys(dev.ctx.native, keys.native)
        return cls(dev, keys.level, *parts, keys.native.key_id, keys.native.sparse_id)

    def __del__(self):
        release(self, "hg_encaps_free")


def _level0(ct: DeviceCiphertext, op: str) -> None:
    if ct.level != 0:
        raise LevelError(f"{op} needs a ciphertext at level 0 (ScaleDown first); got level {ct.level}")
    if ct.size != 2:
        raise ShapeError(f"{op} needs a relinearised (2-polynomial) ciphertext")


def dense_to_sparse(dev: CudaEvaluator, ct: DeviceCiphertext, keys: DeviceEncapsulationKeys) -> DeviceCiphertext:
    """ct (level 0, under s) under the sparse secret s' (tagged with the keys' sparse id)."""
    _level0(ct, "dense_to_sparse")
    if ct.key_id != keys.key_id:
        raise KeyMismatchError("dense_to_sparse: the ciphertext was not made under the key pair of these "
                               "encapsulation keys")
    o0, o1 = dev.empty(1), dev.empty(1)
    check(dev.lib.hg_dense_to_sparse(dev.handle, keys.handle, ct.polys[0].handle, ct.polys[1].handle, o0.handle,
                                     o1.handle), "dense_to_sparse")
    return DeviceCiphertext([o0, o1], 0, ct.scale, ct.slots, ct.encoding, ct.is_complex, keys.sparse_id,
                            ct.param_hash)


def mod_raise(dev: CudaEvaluator, ct: DeviceCiphertext, keys: DeviceEncapsulationKeys,
              target: int | None = None) -> DeviceCiphertext:
    """ct (the output of dense_to_sparse) lifted to `target` (default: the keys' level) under s again."""
    _level0(ct, "mod_raise")
    if ct.key_id != keys.sparse_id:
        raise KeyMismatchError("mod_raise takes the output of dense_to_sparse made with the same encapsulation keys")
    lv = keys.level if target is None else int(target)
    if not 0 <= lv <= keys.level:
        raise LevelError(f"mod_raise: target level {lv} outside [0, {keys.level}] (the keys' level)")
    o0, o1 = dev.empty(lv + 1), dev.empty(lv + 1)
    check(dev.lib.hg_mod_raise(dev.handle, keys.handle, ct.polys[0].handle, ct.polys[1].handle, lv, o0.handle,
                               o1.handle), "mod_raise")
    return DeviceCiphertext([o0, o1], lv, ct.scale, ct.slots, ct.encoding, ct.is_complex, keys.key_id, ct.param_hash)
