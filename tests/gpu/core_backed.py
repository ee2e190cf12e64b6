"""A stand-in for CudaEvaluator whose every operation is the CPU core's (or exact Python-integer arithmetic for the
per-limb constant products), holding DeviceCiphertexts whose polynomials are host arrays: the device modules'
schedules (polynomial evaluation, the bootstrapping pipeline) run on it exactly as on a GPU, so a test on any machine
can compare the words they produce with the CPU core's own pipeline.
"""
from dataclasses import dataclass

import numpy as np

from hemlp import _core
from hemlp.gpu.device import DeviceCiphertext, DevicePlaintext, rotation_galois_element


@dataclass
class Buf:
    arr: np.ndarray
    plaintext: object = None  # a plaintext's buffer: the native Plaintext it holds


class CoreBackedEvaluator:
    """The CudaEvaluator operations polyeval uses, each done by the CPU core on imported ciphertexts."""

    def __init__(self, ctx, spec):
        self.ctx, self.e, self.spec = ctx, ctx.native, spec

    def synchronize(self) -> None:  # the CPU core's operations have returned: nothing is in flight
        pass

    def native(self, d):
        return self.e.import_ciphertext([p.arr[:d.level + 1] for p in d.polys], d.level, d.scale, d.slots,
                                        d.encoding, d.is_complex, d.key_id, None)

    def wrap(self, o, like):
        return DeviceCiphertext([Buf(o.poly(j)) for j in range(o.size)], o.level, o.scale, o.slots, o.encoding,
                                o.is_complex, o.key_id, like.param_hash)

    # ---- what hemlp.gpu.context.DeviceContext adds (a compiled model's program)
    def to_device(self, ct):
        return self.wrap(ct.native, DeviceCiphertext([], 0, 0.0, 0, 0, False, 0, ct.param_hash))

    def to_host(self, d):
        from hemlp.fhe import Ciphertext

        return self.ctx.wrap(Ciphertext, self.native(d))

    def upload_plaintext(self, pt):
        o = pt.native
        return DevicePlaintext(Buf(o.poly(), o), o.level, o.scale, o.slots, o.encoding, o.is_complex, pt.param_hash)

    def mul_plain(self, a, pt):
        return self.wrap(self.e.mul_plain(self.native(a), pt.buf.plaintext), a)

    def add_plain(self, a, pt):
        return self.wrap(self.e.add_plain(self.native(a), pt.buf.plaintext), a)

    def sub_plain(self, a, pt):
        return self.wrap(self.e.sub_plain(self.native(a), pt.buf.plaintext), a)

    def negate(self, a):
        return self.wrap(self.e.negate(self.native(a)), a)

    def relinearize(self, a, rlk):
        return self.wrap(self.e.relinearize(self.native(a), rlk), a)

    def rotate_hoisted(self, a, steps, keys):
        gs = [self.galois_element(s) for s in steps]
        return [self.wrap(o, a) for o in self.e.apply_galois_hoisted(self.native(a), gs, keys)]

    def mul(self, a, b, rlk=None, rescale=False):
        if rlk is not None and rescale:
            return self.wrap(self.e.mul_relin_rescale(self.native(a), self.native(b), rlk), a)
        r = self.wrap(self.e.mul(self.native(a), self.native(b), rlk), a)
        return self.rescale(r) if rescale else r

    def rescale(self, a):
        return self.wrap(self.e.rescale(self.native(a)), a)

    def add(self, a, b):
        return self.wrap(self.e.add(self.native(a), self.native(b)), a)

    def sub(self, a, b):
        return self.wrap(self.e.sub(self.native(a), self.native(b)), a)

    def mul_const(self, a, c, s):
        return self.wrap(_core.mul_const(self.e, self.native(a), c, s), a)

    def add_const_exact(self, a, c):
        return self.wrap(_core.add_const_exact(self.e, self.native(a), c), a)

    def mul_integer(self, a, k):
        return self.wrap(self.e.mul_integer(self.native(a), k), a)

    def drop_level(self, a, level):
        return self.wrap(self.e.drop_to_level(self.native(a), level), a)

    def with_scale(self, a, scale):
        return DeviceCiphertext(list(a.polys), a.level, float(scale), a.slots, a.encoding, a.is_complex, a.key_id,
                                a.param_hash)

    def _q(self, level):
        return np.array([self.spec.q[k] for k in range(level + 1)], dtype=object)[:, None]

    def scalar_multiply(self, buf, level, w):
        x = buf.arr[:level + 1].astype(object)
        return Buf(((x * np.array(w, dtype=object)[:, None]) % self._q(level)).astype(np.uint64))

    def scalar_multiply_add(self, acc, term, level, w):
        t = term.arr[:level + 1].astype(object) * np.array(w, dtype=object)[:, None]
        acc.arr = ((acc.arr.astype(object) + t) % self._q(level)).astype(np.uint64)

    def scalar_add(self, buf, level, w):
        x = buf.arr[:level + 1].astype(object) + np.array(w, dtype=object)[:, None]
        return Buf((x % self._q(level)).astype(np.uint64))

    def check_key(self, *args):
        pass

    # ---- what the bootstrapping pipeline uses besides
    def upload_galois_keys(self, gk):
        return gk.native

    def upload_relin_key(self, rlk):
        return rlk.native

    def apply_galois(self, a, g, keys):
        return self.wrap(self.e.apply_galois(self.native(a), int(g), keys), a)

    def galois_element(self, step):
        return rotation_galois_element(self.spec.n, step)

    def rotate(self, a, step, keys):
        return self.apply_galois(a, self.galois_element(step), keys)

    def mul_monomial(self, a, k, **changes):
        from hemlp.fhe import Ciphertext
        from hemlp.he.reinterpret import mul_monomial

        ct = self.ctx.wrap(Ciphertext, self.native(a))
        out = self.wrap(mul_monomial(self.ctx, ct, k).native, a)
        fields = dict(level=out.level, scale=out.scale, slots=out.slots, encoding=out.encoding,
                      is_complex=out.is_complex, key_id=out.key_id, param_hash=out.param_hash)
        fields.update(changes)
        return DeviceCiphertext(out.polys, **fields)




def patch_bootstrap(monkeypatch) -> None:
    """hemlp.gpu.bootstrap's device-only pieces (the BSGS transforms, the encapsulation keys, the switch and
    ModRaise) replaced by the core's own calls: with a CoreBackedEvaluator the device pipeline then runs on the CPU."""
    from hemlp.gpu import bootstrap as gboot

    monkeypatch.setattr(gboot, "DeviceLinearTransform", CoreTransform)
    monkeypatch.setattr(gboot.DeviceEncapsulationKeys, "from_keys", staticmethod(lambda dev, keys: keys.native))
    monkeypatch.setattr(gboot, "dense_to_sparse",
                        lambda dev, ct, keys: dev.wrap(_core.dense_to_sparse(dev.e, dev.native(ct), keys), ct))
    monkeypatch.setattr(gboot, "mod_raise",
                        lambda dev, ct, keys: dev.wrap(_core.mod_raise(dev.e, dev.native(ct), keys, keys.level), ct))


class CoreTransform:
    """DeviceLinearTransform's interface over the core's transform (double hoisting, as the device runs it)."""

    def __init__(self, dev, native):
        self.dev, self.native = dev, native

    @classmethod
    def from_native(cls, dev, native):
        return cls(dev, native)

    def apply(self, ct, keys, rescale=True):
        out, _ = self.native.apply(self.dev.e, self.dev.native(ct), keys, 2, rescale)
        return self.dev.wrap(out, ct)
