"""hemlp.fhe.Context's evaluation API on the GPU, so the code written against a Context — a compiled model's layout
(P) program, the polynomial evaluator, the residual adds and bootstrap steps of the runtime — runs on the device
unchanged and computes the CPU's words.

    dctx = DeviceContext(gpu.CudaEvaluator(ctx))
    x = dctx.to_device(ct)                               # a GpuCiphertext: a DeviceCiphertext seen as a Ciphertext
    y = dctx.rescale(dctx.mul(x, w))                     # w encoded by the CPU at scale q_level, as Context.mul does
    ct_out = dctx.to_host(y)

Plaintexts are encoded by the CPU context (the same encoder, so the same words) and uploaded (`encode` returns a
GpuPlaintext that stays on the device). In-place operations (add_inplace, rescale_inplace, rotate_inplace) replace
the GpuCiphertext's device ciphertext, so every reference to it sees the result, as on the CPU; device buffers are
never written in place, so results may share them.
"""
from __future__ import annotations

import numpy as np

from hemlp.errors import EncodingError, MissingKeyError, ParameterError
from hemlp.gpu.device import CudaEvaluator, DeviceCiphertext, DevicePlaintext

__all__ = ["DeviceContext", "GpuCiphertext", "GpuPlaintext"]

_ENC = {"slot": 0, "coeff": 1}


class GpuCiphertext:
    """A DeviceCiphertext with hemlp.fhe.Ciphertext's metadata names (encoding as "slot" / "coeff")."""

    __slots__ = ("d",)

    def __init__(self, d: DeviceCiphertext):
        self.d = d

    level = property(lambda self: self.d.level)
    scale = property(lambda self: self.d.scale)
    slots = property(lambda self: self.d.slots)
    is_complex = property(lambda self: self.d.is_complex)
    key_id = property(lambda self: self.d.key_id)
    param_hash = property(lambda self: self.d.param_hash)
    size = property(lambda self: self.d.size)
    encoding = property(lambda self: "coeff" if self.d.encoding == 1 else "slot")

    def __repr__(self):
        return (f"GpuCiphertext(level={self.level}, scale=2^{np.log2(self.scale):.2f}, slots={self.slots}, "
                f"{self.encoding})")


class GpuPlaintext:
    """A DevicePlaintext with hemlp.fhe.Plaintext's metadata names."""

    __slots__ = ("p",)

    def __init__(self, p: DevicePlaintext):
        self.p = p

    level = property(lambda self: self.p.level)
    scale = property(lambda self: self.p.scale)
    slots = property(lambda self: self.p.slots)
    encoding = property(lambda self: "coeff" if self.p.encoding == 1 else "slot")


def _d(x, what: str = "ciphertext") -> DeviceCiphertext:
    if not isinstance(x, GpuCiphertext):
        raise TypeError(f"the {what} must be a hemlp.gpu.GpuCiphertext (DeviceContext.to_device), got "
                        f"{type(x).__name__}")
    return x.d


class DeviceContext:
    """The evaluation half of a hemlp.fhe.Context on a CudaEvaluator made from that context."""

    def __init__(self, dev: CudaEvaluator):
        if dev.ctx is None:
            raise ParameterError("DeviceContext needs a CudaEvaluator made from a hemlp.fhe.Context")
        self.dev, self.cpu = dev, dev.ctx
        self.N, self.slots, self.default_scale = self.cpu.N, self.cpu.slots, self.cpu.default_scale
        self.hash, self.params = self.cpu.hash, self.cpu.params

    def modulus(self, level: int) -> int:
        return self.cpu.modulus(level)

    # ---- transfers
    def to_device(self, ct) -> GpuCiphertext:
        return GpuCiphertext(self.dev.to_device(ct))

    def to_host(self, ct: GpuCiphertext):
        return self.dev.to_host(_d(ct))

    # ---- plaintexts: the CPU encoder's words, uploaded
    def encode(self, x, level: int | None = None, scale: float | None = None, slots: int | None = None,
               encoding: str = "slot") -> GpuPlaintext:
        return GpuPlaintext(self.dev.upload_plaintext(self.cpu.encode(x, level, scale, slots, encoding)))

    def _as_plain(self, a: GpuCiphertext, b, scale: float) -> DevicePlaintext:
        """Context._as_plain: arrays and scalars encoded at a's level, with a's slots and encoding."""
        if isinstance(b, GpuPlaintext):
            return b.p
        arr = np.asarray(b)
        if arr.ndim == 0:
            arr = np.full(a.slots if a.encoding == "slot" else self.N, arr.item())
        return self.encode(arr, level=a.level, scale=scale, slots=a.slots if a.encoding == "slot" else None,
                           encoding=a.encoding).p

    # ---- arithmetic (Context's semantics, operation for operation)
    def add(self, a: GpuCiphertext, b) -> GpuCiphertext:
        if isinstance(b, GpuCiphertext):
            return GpuCiphertext(self.dev.add(_d(a), b.d))
        return GpuCiphertext(self.dev.add_plain(_d(a), self._as_plain(a, b, a.scale)))

    def sub(self, a: GpuCiphertext, b) -> GpuCiphertext:
        if isinstance(b, GpuCiphertext):
            return GpuCiphertext(self.dev.sub(_d(a), b.d))
        return GpuCiphertext(self.dev.sub_plain(_d(a), self._as_plain(a, b, a.scale)))

    def negate(self, a: GpuCiphertext) -> GpuCiphertext:
        return GpuCiphertext(self.dev.negate(_d(a)))

    def add_inplace(self, a: GpuCiphertext, b: GpuCiphertext) -> GpuCiphertext:
        a.d = self.dev.add(_d(a), _d(b, "second ciphertext"))
        return a

    def sub_inplace(self, a: GpuCiphertext, b: GpuCiphertext) -> GpuCiphertext:
        a.d = self.dev.sub(_d(a), _d(b, "second ciphertext"))
        return a

    def mul(self, a: GpuCiphertext, b, relin_key=None, rescale: bool = False) -> GpuCiphertext:
        """Context.mul: ct x ct (relinearised with relin_key; with rescale, the fused ModDown and rescale), or ct x
        plaintext / array / scalar (encoded at scale q_level)."""
        if isinstance(b, GpuCiphertext):
            return GpuCiphertext(self.dev.mul(_d(a), b.d, relin_key, rescale=rescale))
        out = self.dev.mul_plain(_d(a), self._as_plain(a, b, float(self.modulus(a.level))))
        return GpuCiphertext(self.dev.rescale(out) if rescale else out)

    def mul_plain_inplace(self, a: GpuCiphertext, b, rescale: bool = False) -> GpuCiphertext:
        if isinstance(b, GpuCiphertext):
            raise TypeError("mul_plain_inplace multiplies by a plaintext, array or scalar; use mul for ciphertexts")
        a.d = self.mul(a, b, rescale=rescale).d
        return a

    def mul_integer(self, a: GpuCiphertext, k: int) -> GpuCiphertext:
        return GpuCiphertext(self.dev.mul_integer(_d(a), int(k)))

    def mul_const(self, a: GpuCiphertext, c: float, const_scale: float) -> GpuCiphertext:
        return GpuCiphertext(self.dev.mul_const(_d(a), float(c), float(const_scale)))

    def add_const(self, a: GpuCiphertext, c: float) -> GpuCiphertext:
        return GpuCiphertext(self.dev.add_const_exact(_d(a), float(c)))

    def square(self, a: GpuCiphertext, relin_key=None) -> GpuCiphertext:
        return self.mul(a, a, relin_key)

    def relinearize(self, a: GpuCiphertext, relin_key) -> GpuCiphertext:
        if relin_key is None:
            raise MissingKeyError("relinearize needs a relinearisation key (CudaEvaluator.upload_relin_key)")
        return GpuCiphertext(self.dev.relinearize(_d(a), relin_key))

    def rescale(self, a: GpuCiphertext) -> GpuCiphertext:
        return GpuCiphertext(self.dev.rescale(_d(a)))

    def rescale_inplace(self, a: GpuCiphertext) -> GpuCiphertext:
        a.d = self.dev.rescale(_d(a))
        return a

    def drop_level(self, a: GpuCiphertext, level: int) -> GpuCiphertext:
        return GpuCiphertext(self.dev.drop_level(_d(a), int(level)))

    def with_scale(self, a: GpuCiphertext, scale: float) -> GpuCiphertext:
        return GpuCiphertext(self.dev.with_scale(_d(a), float(scale)))

    def set_scale(self, a: GpuCiphertext, scale: float) -> GpuCiphertext:
        """Context.set_scale: times round(scale q / a.scale), rescaled, tagged with `scale` (one level)."""
        q = self.modulus(a.level)
        k = round(scale * q / a.scale)
        if not 1 <= k < (1 << 62):
            raise EncodingError("set_scale: the scale ratio is out of range for one multiply-and-rescale step")
        return GpuCiphertext(self.dev.with_scale(self.dev.rescale(self.dev.mul_integer(_d(a), k)), float(scale)))

    def retag(self, ct: GpuCiphertext, *, slots: int | None = None, encoding: str | None = None,
              scale: float | None = None, is_complex: bool | None = None) -> GpuCiphertext:
        """hemlp.he.reinterpret.retag: the same polynomials with new metadata (a coefficient encoding has N slots
        unless given)."""
        enc = ct.encoding if encoding is None else encoding
        if slots is None:
            slots = self.N if enc == "coeff" else ct.slots
        d = _d(ct)
        return GpuCiphertext(DeviceCiphertext(list(d.polys), d.level, float(ct.scale if scale is None else scale),
                                              int(slots), _ENC[enc], bool(d.is_complex if is_complex is None
                                                                          else is_complex), d.key_id, d.param_hash))

    # ---- rotations (keys: CudaEvaluator.upload_galois_keys's dict)
    def rotate(self, a: GpuCiphertext, step: int, keys) -> GpuCiphertext:
        if keys is None:
            raise MissingKeyError(f"rotate needs rotation keys on the device (upload_galois_keys); step {step}")
        return GpuCiphertext(self.dev.rotate(_d(a), int(step), keys))

    def rotate_inplace(self, a: GpuCiphertext, step: int, keys) -> GpuCiphertext:
        a.d = self.rotate(a, step, keys).d
        return a

    def rotate_hoisted(self, a: GpuCiphertext, steps, keys) -> list:
        if keys is None:
            raise MissingKeyError("rotate_hoisted needs rotation keys on the device (upload_galois_keys)")
        return [GpuCiphertext(d) for d in self.dev.rotate_hoisted(_d(a), [int(s) for s in steps], keys)]

    def conjugate(self, a: GpuCiphertext, keys) -> GpuCiphertext:
        if keys is None:
            raise MissingKeyError("conjugate needs the conjugation key on the device (upload_galois_keys)")
        return GpuCiphertext(self.dev.apply_galois(_d(a), 2 * self.N - 1, keys))
