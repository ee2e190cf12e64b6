"""RNS-CKKS on an NVIDIA GPU, bit for bit the CPU core's arithmetic.

    from hemlp import fhe, gpu
    ctx = fhe.Context("N16-boot")
    sk, pk = ctx.keygen(); rlk = ctx.relin_key(sk); gk = ctx.rotation_keys(sk, [1])
    dev = gpu.CudaEvaluator(ctx)                   # the context's tables on the GPU (DeviceError without one)
    a, b = dev.to_device(ctx.encrypt(x, pk)), dev.to_device(ctx.encrypt(y, pk))
    r = dev.rotate(dev.mul(a, b, dev.upload_relin_key(rlk), rescale=True), 1, dev.upload_galois_keys(gk))
    z = ctx.decrypt(dev.to_host(r), sk)            # the same words the CPU core computes for these inputs

Ciphertexts stay on the device between operations (DeviceCiphertext); keys are uploaded once (their seeded
a-halves expanded on the host first). Every operation checks levels, scales, encodings and key pairs as the CPU
evaluator does and raises the same typed errors. What runs where: docs/gpu.md.
"""
from __future__ import annotations

import ctypes
import math
from fractions import Fraction
from dataclasses import dataclass, field

import numpy as np

from hemlp.errors import (ContextMismatchError, EncodingError, KeyMismatchError, LevelError, MissingKeyError,
                          ParameterError, ScaleMismatchError, ShapeError)
from hemlp.gpu.library import c_i64p, c_u64p, check, library, release, vp


@dataclass(frozen=True)
class DeviceSpec:
    """What the device needs of a parameter set: ring degree, primes, digit size and each prime's 2N-th root psi
    as the CPU core's NTT uses it (NTT(a)_j = a(psi^(2 brv(j) + 1)))."""

    log_n: int
    q: tuple
    p: tuple
    alpha: int
    psi: tuple  # one per modulus, q then p
    param_hash: str = ""
    name: str = ""

    @property
    def n(self) -> int:
        return 1 << self.log_n

    @property
    def max_level(self) -> int:
        return len(self.q) - 1

    def modulus(self, idx: int) -> int:
        return self.q[idx] if idx < len(self.q) else self.p[idx - len(self.q)]

    def qp_index(self, level: int, k: int) -> int:
        return k if k <= level else len(self.q) + k - level - 1

    def num_digits(self, level: int) -> int:
        return (level + self.alpha) // self.alpha

    @classmethod
    def from_context(cls, ctx) -> "DeviceSpec":
        """The spec of a hemlp.fhe.Context: psi read off the CPU core's NTT of X (its first output is psi)."""
        prm = ctx.params
        x = np.zeros(prm.N, dtype=np.uint64)
        x[1] = 1
        count = len(prm.native.q) + len(prm.native.p)
        psi = tuple(int(ctx.native.ntt_limb(x, m, False)[0]) for m in range(count))
        return cls(prm.log_n, tuple(int(v) for v in prm.native.q), tuple(int(v) for v in prm.native.p),
                   int(prm.native.alpha), psi, ctx.hash, prm.name)

    def to_dict(self) -> dict:
        return dict(log_n=self.log_n, q=[str(v) for v in self.q], p=[str(v) for v in self.p], alpha=self.alpha,
                    psi=[str(v) for v in self.psi], param_hash=self.param_hash, name=self.name)

    @classmethod
    def from_dict(cls, d: dict) -> "DeviceSpec":
        ints = lambda xs: tuple(int(v) for v in xs)  # noqa: E731
        return cls(int(d["log_n"]), ints(d["q"]), ints(d["p"]), int(d["alpha"]), ints(d["psi"]),
                   d.get("param_hash", ""), d.get("name", ""))


class DeviceBuffer:
    """A block of device memory (64-bit words) from the context's pool; freed when collected."""

    __slots__ = ("handle", "words", "_ctx", "__weakref__")

    def __init__(self, dev: "CudaEvaluator", words: int):
        h = vp()
        check(library().hg_buffer_alloc(dev.handle, ctypes.c_size_t(words), ctypes.byref(h)), "device allocation")
        self.handle, self.words, self._ctx = h, int(words), dev

    def __del__(self):
        release(self, "hg_buffer_free")


@dataclass
class DeviceCiphertext:
    """A ciphertext resident on the GPU: its polynomials (level + 1 limbs each, NTT form) and the CPU
    ciphertext's metadata."""

    polys: list
    level: int
    scale: float
    slots: int
    encoding: int  # 0 slot, 1 coefficient (as the core)
    is_complex: bool
    key_id: int
    param_hash: str

    @property
    def size(self) -> int:
        return len(self.polys)


@dataclass
class DevicePlaintext:
    """A plaintext resident on the GPU (level + 1 limbs, NTT form) and the CPU plaintext's metadata: what a repeated
    plaintext product (a layer's diagonals) uploads once."""

    buf: DeviceBuffer
    level: int
    scale: float
    slots: int
    encoding: int  # 0 slot, 1 coefficient (as the core)
    is_complex: bool
    param_hash: str


@dataclass
class DeviceKey:
    """A switching key on the GPU (b and the expanded a digits)."""

    handle: object
    level: int
    galois: int  # 0: relinearisation
    key_id: int
    param_hash: str
    nbytes: int
    owner: object = field(default=None, repr=False)  # the CudaEvaluator: keeps its context alive

    def __del__(self):
        release(self, "hg_key_free")


def _u64(arr) -> np.ndarray:
    return np.ascontiguousarray(arr, dtype=np.uint64)


def _ptr(arr: np.ndarray):
    return arr.ctypes.data_as(c_u64p)


def const_residues(c: float, scale: float, moduli) -> list:
    """round(c * scale) mod each q, the exact product rounded half away from zero (Evaluator::const_residues)."""
    if not math.isfinite(c):
        raise EncodingError("cannot use NaN or infinity as a constant")
    if not (math.isfinite(scale) and scale > 0):
        raise EncodingError(f"constant scale must be positive and finite, got {scale}")
    v = Fraction(c) * Fraction(scale)
    mag = math.floor(abs(v) + Fraction(1, 2))
    r = -mag if v < 0 else mag
    return [r % int(q) for q in moduli]


def rotation_galois_element(n: int, step: int) -> int:
    """5^step mod 2N: the Galois element of a left rotation of the N/2 slots by `step` (ring/galois.h)."""
    return pow(5, int(step) % (n // 2), 2 * n)


def scales_match(a: float, b: float) -> bool:
    """The CPU evaluator's rule: equal within 2^-32 relative."""
    return abs(a - b) <= math.ldexp(max(a, b), -32)


class CudaEvaluator:
    """A parameter set's tables on one GPU, and the homomorphic operations on device ciphertexts.

    `ctx` is a hemlp.fhe.Context (the usual case: ciphertexts and keys move between it and the device) or a
    DeviceSpec (raw polynomials only: the bit-exactness check on a machine without the CPU core)."""

    def __init__(self, ctx, device: int = 0):
        self.lib = library()
        if isinstance(ctx, DeviceSpec):
            self.ctx, self.spec = None, ctx
        else:
            self.ctx, self.spec = ctx, DeviceSpec.from_context(ctx)
        s = self.spec
        moduli = _u64(list(s.q) + list(s.p))
        psi = _u64(s.psi)
        h = vp()
        check(self.lib.hg_context_create(s.log_n, len(s.q), len(s.p), s.alpha, _ptr(moduli), _ptr(psi), int(device),
                                         ctypes.byref(h)), "CUDA context")
        self.handle = h

    def __del__(self):
        release(self, "hg_context_destroy")

    n = property(lambda self: self.spec.n)

    def synchronize(self) -> None:
        check(self.lib.hg_sync(self.handle), "synchronize")

    # ---- raw polynomials
    def upload_poly(self, arr) -> DeviceBuffer:
        """A (limbs, N) uint64 array (residues already checked by its producer) to a new device buffer."""
        a = _u64(arr)
        if a.ndim != 2 or a.shape[1] != self.n:
            raise ShapeError(f"a polynomial is a (limbs, N={self.n}) array, got shape {a.shape}")
        return self.upload(a)

    def download_poly(self, buf: DeviceBuffer, limbs: int) -> np.ndarray:
        return self.download(buf, (limbs, self.n))

    def upload(self, arr) -> DeviceBuffer:
        """Any uint64 array to a new device buffer (its words in C order)."""
        a = _u64(arr)
        buf = DeviceBuffer(self, a.size)
        check(self.lib.hg_upload(self.handle, buf.handle, 0, _ptr(a), a.size), "upload")
        return buf

    def download(self, buf: DeviceBuffer, shape) -> np.ndarray:
        """The first prod(shape) words of a device buffer as a uint64 array of that shape."""
        out = np.empty(shape, dtype=np.uint64)
        check(self.lib.hg_download(self.handle, buf.handle, 0, _ptr(out), out.size), "download")
        return out

    def empty(self, limbs: int) -> DeviceBuffer:
        return DeviceBuffer(self, limbs * self.n)

    def ntt(self, buf: DeviceBuffer, level: int, ext: bool = False, inverse: bool = False) -> None:
        """In-place (inverse) NTT of a polynomial over Q_level (or Q_level ∪ P with ext)."""
        check(self.lib.hg_ntt(self.handle, buf.handle, int(level), int(ext), int(inverse)), "NTT")

    # ---- ciphertexts and keys between host and device
    def _check_ctx(self, what: str):
        if self.ctx is None:
            raise ParameterError(f"{what} needs a CudaEvaluator made from a hemlp.fhe.Context")

    def to_device(self, ct) -> DeviceCiphertext:
        """Upload a hemlp.fhe.Ciphertext (a seeded c1 is expanded on the host first)."""
        self._check_ctx("to_device")
        from hemlp.fhe import Ciphertext

        o = self.ctx.unwrap(ct, Ciphertext, "ciphertext")
        polys = [self.upload_poly(o.poly(j)) for j in range(o.size)]
        return DeviceCiphertext(polys, o.level, o.scale, o.slots, o.encoding, o.is_complex, o.key_id, ct.param_hash)

    def to_host(self, d: DeviceCiphertext):
        """Download into a hemlp.fhe.Ciphertext of the evaluator's context (imported with the core's checks)."""
        self._check_ctx("to_host")
        from hemlp.fhe import Ciphertext

        polys = [self.download_poly(p, d.level + 1) for p in d.polys]
        native = self.ctx.native.import_ciphertext(polys, d.level, d.scale, d.slots, d.encoding, d.is_complex,
                                                   d.key_id, None)
        return self.ctx.wrap(Ciphertext, native)

    def upload_switch_key(self, native_key) -> DeviceKey:
        """A hemlp._core.SwitchKey (relinearisation or one Galois element) to the device."""
        bs, as_ = self.ctx.native.export_switch_key_expanded(native_key) if self.ctx is not None else native_key
        return self.upload_key_arrays(bs, as_, int(native_key.level), int(native_key.galois), int(native_key.key_id))

    def upload_key_arrays(self, bs, as_, level: int, galois: int, key_id: int) -> DeviceKey:
        """A switching key from its digits: bs, as_ lists of (level + 1 + K, N) arrays (a expanded)."""
        beta = self.spec.num_digits(level)
        if len(bs) != beta or len(as_) != beta:
            raise ShapeError(f"a key for level {level} has {beta} digits, got {len(bs)} and {len(as_)}")
        b, a = _u64(np.stack(bs)), _u64(np.stack(as_))
        limbs = level + 1 + len(self.spec.p)
        if b.shape != (beta, limbs, self.n) or a.shape != b.shape:
            raise ShapeError(f"key digits must be ({limbs}, {self.n}) arrays")
        h = vp()
        check(self.lib.hg_key_upload(self.handle, int(level), beta, int(galois), _ptr(b), _ptr(a), ctypes.byref(h)),
              "key upload")
        return DeviceKey(h, int(level), int(galois), int(key_id), self.spec.param_hash, 2 * b.nbytes, self)

    def upload_relin_key(self, rlk) -> DeviceKey:
        self._check_ctx("upload_relin_key")
        from hemlp.fhe import RelinKey

        return self.upload_switch_key(self.ctx.unwrap(rlk, RelinKey, "relinearisation key"))

    def upload_galois_keys(self, gk) -> dict:
        """{Galois element: DeviceKey} for every key of a hemlp.fhe.GaloisKeys."""
        self._check_ctx("upload_galois_keys")
        from hemlp.fhe import GaloisKeys

        native = self.ctx.unwrap(gk, GaloisKeys, "Galois keys")
        return {int(g): self.upload_switch_key(native.get(int(g))) for g in gk.elements}

    # ---- checks (the CPU evaluator's rules and messages)
    def _same(self, a: DeviceCiphertext, b: DeviceCiphertext, op: str) -> None:
        if a.param_hash != self.spec.param_hash or b.param_hash != self.spec.param_hash:
            raise ContextMismatchError(f"{op}: a ciphertext comes from another parameter set")
        if a.key_id and b.key_id and a.key_id != b.key_id:
            raise KeyMismatchError(f"{op}: the ciphertexts are encrypted under different key pairs")
        if a.level != b.level:
            raise LevelError(f"{op}: operands are at levels {a.level} and {b.level}; bring them to the same level")
        if a.slots != b.slots or a.encoding != b.encoding:
            raise EncodingError(f"{op}: operands have different slot counts or encodings")

    def check_key(self, key: DeviceKey, ct: DeviceCiphertext, galois: int, op: str) -> None:
        """The CPU evaluator's key checks: parameter set, Galois element, key pair, level (typed errors)."""
        if not isinstance(key, DeviceKey):
            raise MissingKeyError(f"{op} needs a device key (CudaEvaluator.upload_relin_key / upload_galois_keys)")
        if key.param_hash != self.spec.param_hash:
            raise ContextMismatchError(f"{op}: the key belongs to another parameter set")
        if key.galois != galois:
            raise KeyMismatchError(f"{op}: the key is for Galois element {key.galois}, not {galois}")
        if ct.key_id and key.key_id != ct.key_id:
            raise KeyMismatchError(f"{op}: the key was generated from another secret key than this ciphertext's")
        if ct.level > key.level:
            raise LevelError(f"{op}: the ciphertext is at level {ct.level} but the key was generated for levels "
                             f"<= {key.level}")

    def _like(self, a: DeviceCiphertext, polys, **changes) -> DeviceCiphertext:
        fields = dict(level=a.level, scale=a.scale, slots=a.slots, encoding=a.encoding, is_complex=a.is_complex,
                      key_id=a.key_id, param_hash=a.param_hash)
        fields.update(changes)
        return DeviceCiphertext(polys, **fields)

    # ---- operations
    def add(self, a: DeviceCiphertext, b: DeviceCiphertext) -> DeviceCiphertext:
        return self._add_sub(a, b, "add")

    def sub(self, a: DeviceCiphertext, b: DeviceCiphertext) -> DeviceCiphertext:
        return self._add_sub(a, b, "sub")

    def _add_sub(self, a, b, op):
        self._same(a, b, op)
        if not scales_match(a.scale, b.scale):
            raise ScaleMismatchError(f"{op}: scales differ (2^{math.log2(a.scale):.4f} vs 2^{math.log2(b.scale):.4f})")
        fn = self.lib.hg_add if op == "add" else self.lib.hg_sub
        big = a if a.size >= b.size else b
        out = []
        for j in range(big.size):
            if j < min(a.size, b.size):
                r = self.empty(a.level + 1)
                check(fn(self.handle, a.polys[j].handle, b.polys[j].handle, r.handle, a.level), op)
            elif op == "add" or big is a:
                r = self._copy(big.polys[j], a.level)
            else:  # a - b where only b has c2: -b2
                r = self.empty(a.level + 1)
                check(self.lib.hg_negate(self.handle, b.polys[j].handle, r.handle, a.level), op)
            out.append(r)
        return self._like(big, out, key_id=a.key_id or b.key_id, is_complex=a.is_complex or b.is_complex)

    def _each(self, polys, limbs: int, call, what: str) -> list:
        """One new buffer of `limbs` limbs per polynomial, written by call(polynomial, output) (a status code)."""
        out = []
        for p in polys:
            r = self.empty(limbs)
            check(call(p, r), what)
            out.append(r)
        return out

    def _copy(self, buf: DeviceBuffer, level: int) -> DeviceBuffer:
        r = self.empty(level + 1)
        check(self.lib.hg_copy(self.handle, buf.handle, r.handle, (level + 1) * self.n), "copy")
        return r

    def negate(self, a: DeviceCiphertext) -> DeviceCiphertext:
        return self._like(a, self._each(a.polys, a.level + 1, lambda p, r: self.lib.hg_negate(
            self.handle, p.handle, r.handle, a.level), "negate"))

    def upload_plaintext(self, pt) -> DevicePlaintext:
        """A hemlp.fhe.Plaintext to the device (once, for repeated products)."""
        if not hasattr(pt, "native"):
            raise TypeError("upload_plaintext takes a hemlp.fhe.Plaintext")
        if pt.param_hash != self.spec.param_hash:
            raise ContextMismatchError("the plaintext belongs to another parameter set")
        o = pt.native
        return DevicePlaintext(self.upload_poly(o.poly()), o.level, o.scale, o.slots, o.encoding, o.is_complex,
                               pt.param_hash)

    def _plain(self, a: DeviceCiphertext, pt, op: str, scale_must_match: bool) -> DevicePlaintext:
        """pt (a hemlp.fhe.Plaintext, uploaded for this call, or a DevicePlaintext) after the CPU core's checks."""
        d = pt if isinstance(pt, DevicePlaintext) else self.upload_plaintext(pt)
        if d.param_hash != self.spec.param_hash or a.param_hash != self.spec.param_hash:
            raise ContextMismatchError(f"{op}: operand from another parameter set")
        if d.level != a.level:
            raise LevelError(f"{op}: ciphertext at level {a.level} but plaintext encoded at level {d.level}; encode "
                             "the plaintext at the ciphertext's level")
        if d.slots != a.slots or d.encoding != a.encoding:
            raise EncodingError(f"{op}: ciphertext and plaintext have different slot counts or encodings")
        if scale_must_match and not scales_match(a.scale, d.scale):
            raise ScaleMismatchError(f"{op}: ciphertext scale {a.scale:g} != plaintext scale {d.scale:g}; encode the "
                                     "plaintext at the ciphertext's scale")
        return d

    def mul_plain(self, a: DeviceCiphertext, pt) -> DeviceCiphertext:
        """a times a plaintext: a hemlp.fhe.Plaintext (uploaded for this call) or a DevicePlaintext."""
        d = self._plain(a, pt, "mul_plain", False)
        out = self._each(a.polys, a.level + 1, lambda p, r: self.lib.hg_mul(
            self.handle, p.handle, d.buf.handle, r.handle, a.level), "mul_plain")
        return self._like(a, out, scale=a.scale * d.scale, is_complex=a.is_complex or d.is_complex)

    def add_plain(self, a: DeviceCiphertext, pt) -> DeviceCiphertext:
        """a + pt (the plaintext at a's level and scale) on c0, as the CPU core's add_plain."""
        return self._plain_sum(a, pt, "hg_add", "add_plain")

    def sub_plain(self, a: DeviceCiphertext, pt) -> DeviceCiphertext:
        return self._plain_sum(a, pt, "hg_sub", "sub_plain")

    def _plain_sum(self, a: DeviceCiphertext, pt, fn: str, op: str) -> DeviceCiphertext:
        d = self._plain(a, pt, op, True)
        c0 = self.empty(a.level + 1)
        check(getattr(self.lib, fn)(self.handle, a.polys[0].handle, d.buf.handle, c0.handle, a.level), op)
        # c1 shared, not copied: no operation writes a ciphertext's buffers in place
        return self._like(a, [c0] + list(a.polys[1:]), is_complex=a.is_complex or d.is_complex)

    def _scalar(self, a: DeviceCiphertext, residues, mul: bool, parts) -> list:
        """Each polynomial j in `parts` times (mul) or plus the per-limb constants; the others copied."""
        op = self.scalar_multiply if mul else self.scalar_add
        return [op(p, a.level, residues) if j in parts else self._copy(p, a.level) for j, p in enumerate(a.polys)]

    def mul_monomial(self, a: DeviceCiphertext, k: int, **changes) -> DeviceCiphertext:
        """a · X^k (k any integer, taken mod 2N) on every polynomial; `changes` retag (scale, is_complex, ...)."""
        k = int(k) % (2 * self.n)
        return self._like(a, self._each(a.polys, a.level + 1, lambda p, r: self.lib.hg_mul_monomial(
            self.handle, p.handle, a.level, k, r.handle), "monomial product"), **changes)

    def drop_level(self, a: DeviceCiphertext, level: int) -> DeviceCiphertext:
        """a at a lower level (its first level + 1 limbs), as the CPU core's drop_to_level."""
        if not 0 <= level <= a.level:
            raise LevelError(f"drop_level: target level {level} must be in [0, {a.level}] (levels can only go down)")
        if level == a.level:
            return a
        return self._like(a, [self._copy(p, level) for p in a.polys], level=level)

    def with_scale(self, a: DeviceCiphertext, scale: float) -> DeviceCiphertext:
        """The same polynomials tagged with another scale (no work; the caller vouches for the value)."""
        return self._like(a, list(a.polys), scale=float(scale))

    def scalar_multiply_add(self, acc: DeviceBuffer, term: DeviceBuffer, level: int, residues) -> None:
        """acc += term * w (per limb: w[k] < q_k), limbs 0..level; term may hold more limbs (its first are read)."""
        w = _u64(residues)
        check(self.lib.hg_add_mul_scalar(self.handle, acc.handle, term.handle, int(level), _ptr(w)), "constant")

    def scalar_multiply(self, buf: DeviceBuffer, level: int, residues) -> DeviceBuffer:
        """A new buffer buf * w (per limb), limbs 0..level."""
        w, r = _u64(residues), self.empty(level + 1)
        check(self.lib.hg_mul_scalar(self.handle, buf.handle, r.handle, int(level), _ptr(w)), "constant")
        return r

    def scalar_add(self, buf: DeviceBuffer, level: int, residues) -> DeviceBuffer:
        """A new buffer buf + w (per limb), limbs 0..level."""
        w, r = _u64(residues), self.empty(level + 1)
        check(self.lib.hg_add_scalar(self.handle, buf.handle, r.handle, int(level), _ptr(w)), "constant")
        return r

    def mul_integer(self, a: DeviceCiphertext, k: int) -> DeviceCiphertext:
        """a * k for an integer k (scale unchanged)."""
        res = [int(k) % q for q in self.spec.q[:a.level + 1]]
        return self._like(a, self._scalar(a, res, True, range(a.size)))

    def mul_const(self, a: DeviceCiphertext, c: float, const_scale: float) -> DeviceCiphertext:
        """a * round(c * const_scale), every polynomial; scale a.scale * const_scale (the CPU core's mul_const)."""
        res = const_residues(c, const_scale, self.spec.q[:a.level + 1])
        return self._like(a, self._scalar(a, res, True, range(a.size)), scale=a.scale * const_scale)

    def add_const_exact(self, a: DeviceCiphertext, c: float) -> DeviceCiphertext:
        """a + c in every slot, round(c * a.scale) exact at any scale (the CPU core's add_const_exact)."""
        if a.encoding != 0:
            raise EncodingError("add_const: a constant in every slot needs slot encoding")
        res = const_residues(c, a.scale, self.spec.q[:a.level + 1])
        return self._like(a, self._scalar(a, res, False, (0,)))

    def rescale(self, a: DeviceCiphertext) -> DeviceCiphertext:
        if a.level == 0:
            raise LevelError("rescale: the ciphertext is at level 0, no modulus left to divide by")
        out = self._each(a.polys, a.level, lambda p, r: self.lib.hg_rescale(self.handle, p.handle, a.level, r.handle),
                         "rescale")
        return self._like(a, out, level=a.level - 1, scale=a.scale / self.spec.q[a.level])

    def _check_mul(self, a, b):
        self._same(a, b, "mul")
        if a.size != 2 or b.size != 2:
            raise ParameterError("mul needs relinearised ciphertexts (2 polynomials)")
        if a.encoding != 0:
            raise EncodingError("mul: ciphertext x ciphertext products need slot encoding")

    def mul(self, a: DeviceCiphertext, b: DeviceCiphertext, relin_key: DeviceKey | None = None,
            rescale: bool = False) -> DeviceCiphertext:
        """a * b; relinearised with relin_key, and rescaled with rescale=True (one fused ModDown and rescale, as
        the CPU core's mul_relin_rescale)."""
        self._check_mul(a, b)
        meta = dict(key_id=a.key_id or b.key_id, scale=a.scale * b.scale, is_complex=a.is_complex or b.is_complex)
        lv = a.level
        if relin_key is not None and rescale:
            if lv == 0:
                raise LevelError("mul: the ciphertexts are at level 0, no modulus left for the rescale")
            self.check_key(relin_key, a, 0, "mul (relinearisation)")
            o0, o1 = self.empty(lv), self.empty(lv)
            check(self.lib.hg_mul_relin_rescale(self.handle, a.polys[0].handle, a.polys[1].handle, b.polys[0].handle,
                                                b.polys[1].handle, lv, relin_key.handle, o0.handle, o1.handle), "mul")
            meta["scale"] /= self.spec.q[lv]
            return self._like(a, [o0, o1], level=lv - 1, **meta)
        d = [self.empty(lv + 1) for _ in range(3)]
        check(self.lib.hg_tensor(self.handle, a.polys[0].handle, a.polys[1].handle, b.polys[0].handle,
                                 b.polys[1].handle, d[0].handle, d[1].handle, d[2].handle, lv), "mul")
        r = self._like(a, d, **meta)
        if relin_key is not None:
            r = self.relinearize(r, relin_key)
        return self.rescale(r) if rescale else r

    def relinearize(self, a: DeviceCiphertext, relin_key: DeviceKey) -> DeviceCiphertext:
        if a.size == 2:
            return a
        if a.size != 3:
            raise ParameterError("relinearize: ciphertext must have 2 or 3 polynomials")
        self.check_key(relin_key, a, 0, "relinearize")
        o0, o1 = self.empty(a.level + 1), self.empty(a.level + 1)
        check(self.lib.hg_relinearize(self.handle, a.polys[0].handle, a.polys[1].handle, a.polys[2].handle, a.level,
                                      relin_key.handle, o0.handle, o1.handle), "relinearize")
        return self._like(a, [o0, o1])

    def galois_element(self, step: int) -> int:
        """The Galois element of a left rotation by `step` (generator 5), as the CPU core computes it."""
        return rotation_galois_element(self.n, step)

    def apply_galois(self, a: DeviceCiphertext, g: int, keys: dict) -> DeviceCiphertext:
        if a.size != 2:
            raise ParameterError("rotate needs a relinearised ciphertext (2 polynomials)")
        if a.encoding != 0:
            raise EncodingError("rotations act on slot-encoded ciphertexts only")
        if g == 1:
            return self._like(a, [self._copy(p, a.level) for p in a.polys])
        key = keys.get(g) if isinstance(keys, dict) else None
        if key is None:
            raise MissingKeyError(f"no device key for Galois element {g}; upload the rotation keys "
                                  "(CudaEvaluator.upload_galois_keys)")
        self.check_key(key, a, g, "rotate")
        o0, o1 = self.empty(a.level + 1), self.empty(a.level + 1)
        check(self.lib.hg_apply_galois(self.handle, a.polys[0].handle, a.polys[1].handle, a.level, key.handle,
                                       o0.handle, o1.handle), "rotate")
        return self._like(a, [o0, o1])

    def rotate(self, a: DeviceCiphertext, step: int, keys: dict) -> DeviceCiphertext:
        """Left rotation of the slots by `step` (negative: right); keys from upload_galois_keys."""
        return self.apply_galois(a, self.galois_element(step), keys)

    def rotate_hoisted(self, a: DeviceCiphertext, steps, keys: dict) -> list:
        """Several rotations sharing one ModUp (hoisting), as the CPU core's apply_galois_hoisted."""
        if a.size != 2:
            raise ParameterError("rotate needs a relinearised ciphertext (2 polynomials)")
        gs = [self.galois_element(s) for s in steps]
        todo = [g for g in gs if g != 1]
        for g in todo:
            if not isinstance(keys, dict) or keys.get(g) is None:
                raise MissingKeyError(f"no device key for Galois element {g}")
            self.check_key(keys[g], a, g, "rotate")
        outs0 = [self.empty(a.level + 1) for _ in todo]
        outs1 = [self.empty(a.level + 1) for _ in todo]
        arr = lambda xs: (vp * max(1, len(xs)))(*[x.handle for x in xs])  # noqa: E731
        check(self.lib.hg_apply_galois_hoisted(self.handle, a.polys[0].handle, a.polys[1].handle, a.level, len(todo),
                                               arr([keys[g] for g in todo]), arr(outs0), arr(outs1)), "rotate")
        it = iter(zip(outs0, outs1))
        return [self._like(a, [self._copy(p, a.level) for p in a.polys]) if g == 1 else self._like(a, list(next(it)))
                for g in gs]

    # ---- plaintext x ciphertext matrix products (RLWE format: Bae-Cheon-Hanrot-Park-Stehle)
    def pcmm_rlwe(self, plan: "GemmPlan", inputs: list, chunks: int, K: int, out_scale_factor: float,
                  rescale: bool = False) -> list:
        """The CPU core's pcmm_rlwe on the device: inputs are d2 x chunks DeviceCiphertexts (row-major, one level,
        scale and key), out[r][j] = K sum_i U[r][i] in[i][j] on every polynomial and limb (NTT form), scale
        in.scale * out_scale_factor, then rescaled when asked. One exact modular GEMM per limb and part over
        rows gathered limb-major; the same words as the CPU core."""
        d2, c = plan.cols, int(chunks)
        if c < 1 or len(inputs) != d2 * c:
            raise ShapeError(f"pcmm: {len(inputs)} input ciphertexts for a {plan.rows}x{d2} matrix and {c} chunks "
                             f"(need {d2 * c})")
        first = self._pcmm_inputs(inputs, "pcmm")
        parts = [self.gemm_polys(plan, [x.polys[part] for x in inputs], c, first.level, K) for part in range(2)]
        outs = [list(p) for p in zip(*parts)]
        res = [self._like(first, polys, scale=first.scale * out_scale_factor,
                          key_id=next((x.key_id for x in inputs if x.key_id), 0),
                          is_complex=any(x.is_complex for x in inputs)) for polys in outs]
        return [self.rescale(r) for r in res] if rescale else res

    def _pcmm_inputs(self, inputs: list, op: str) -> DeviceCiphertext:
        """The first input, after checking that all are relinearised ciphertexts of one level, scale, key and
        encoding."""
        first = inputs[0]
        for x in inputs:
            self._same(first, x, op)
            if x.size != 2 or not scales_match(x.scale, first.scale):
                raise ParameterError(f"{op}: every input must be a relinearised ciphertext at one scale")
        return first

    def gemm_polys(self, plan: "GemmPlan", polys: list, chunks: int, level: int, K: int) -> list:
        """out[r][j] = K sum_i U[r][i] polys[i][j] on every limb 0..level: polys are d2 x chunks DeviceBuffers
        (row-major; None: a zero row), the result d1 x chunks new ones. One exact modular GEMM per limb over the
        rows gathered limb-major (K folded into its multiplier); the CPU core's words."""
        d1, d2, c, n, limbs = plan.rows, plan.cols, int(chunks), self.n, int(level) + 1
        if len(polys) != d2 * c:
            raise ShapeError(f"gemm_polys: {len(polys)} polynomials for {d2} rows of {c} chunks")
        zero = self.upload_poly(np.zeros((limbs, n), dtype=np.uint64)) if any(p is None for p in polys) else None
        X = DeviceBuffer(self, limbs * d2 * c * n)
        for idx, p in enumerate(polys):  # row i, chunk j -> words ((k d2 + i) c + j) n of limb k
            check(self.lib.hg_copy_strided(self.handle, (zero if p is None else p).handle, 0, n, X.handle, idx * n,
                                           d2 * c * n, n, limbs), "pcmm gather")
        C = DeviceBuffer(self, limbs * d1 * c * n)
        for k in range(limbs):
            q = self.spec.q[k]
            plan.apply(X, c * n, q, C, int(K) % q, x_offset=k * d2 * c * n, c_offset=k * d1 * c * n)
        outs = [self.empty(limbs) for _ in range(d1 * c)]
        for idx, o in enumerate(outs):
            check(self.lib.hg_copy_strided(self.handle, C.handle, idx * n, d1 * c * n, o.handle, 0, n, n, limbs),
                  "pcmm scatter")
        return outs

    def pcmm_mlwe(self, plan: "GemmPlan", inputs: list, k: int, K: int, out_scale_factor: float, keys: list,
                  rescale: bool = False) -> list:
        """The CPU core's pcmm_mlwe on the device: inputs are coefficient-encoded DeviceCiphertexts holding k rows
        each (row k i + u, column t at coefficient t k + u), U = plan's d1 x (k len(inputs)) matrix, keys the k
        uploaded ModPack keys (CudaEvaluator.upload_switch_key of each of ModPackKeys.native). Returns d1 / k
        ciphertexts of K U X at scale in.scale * out_scale_factor (rescaled when asked); the same words as the CPU
        core."""
        k = int(k)
        if k < 2 or self.n % k:
            raise ParameterError(f"MLWE pcmm: k = {k} must divide N = {self.n} and be >= 2")
        if not inputs or plan.cols != k * len(inputs) or plan.rows % k:
            raise ShapeError(f"MLWE pcmm: U is {plan.rows}x{plan.cols}; it must be (multiple of k) x (k * number of "
                             f"ciphertexts) = (multiple of {k}) x {k * len(inputs)}")
        if len(keys) != k:
            raise MissingKeyError(f"MLWE pcmm needs k = {k} ModPack keys on the device, got {len(keys)}")
        first = self._pcmm_inputs(inputs, "MLWE pcmm")
        if first.encoding != 1:
            raise EncodingError("MLWE (k > 1) needs coefficient-encoded rows: slot encoding does not commute with the "
                                "decimation; encrypt with encoding='coeff'")
        for key in keys:
            self.check_key(key, first, 0, "MLWE pcmm")
        lv, groups = first.level, plan.rows // k
        outs = [[self.empty(lv + 1) for _ in range(2)] for _ in range(groups)]
        arr = lambda xs: (vp * len(xs))(*xs)  # noqa: E731
        check(self.lib.hg_pcmm_mlwe(self.handle, plan.handle, len(inputs), arr([x.polys[0].handle for x in inputs]),
                                    arr([x.polys[1].handle for x in inputs]), lv, k, int(K),
                                    arr([key.handle for key in keys]), groups, arr([o[0].handle for o in outs]),
                                    arr([o[1].handle for o in outs])), "MLWE pcmm")
        res = [self._like(first, polys, scale=first.scale * out_scale_factor, encoding=1) for polys in outs]
        return [self.rescale(r) for r in res] if rescale else res

    # ---- exact modular GEMM (the PCMM core)
    def modgemm(self, U, X, q: int, bU: int | None = None, mult: int = 1, engine: str = "fp64") -> np.ndarray:
        """C = mult * U @ X mod q exactly on the device (host arrays in and out; see GemmPlan for a reused U)."""
        plan = GemmPlan(self, U, bU, engine)
        x = _u64(X)
        if x.ndim != 2 or x.shape[0] != plan.cols:
            raise ShapeError(f"X must have {plan.cols} rows (U's columns), got shape {x.shape}")
        if x.size and int(x.max()) >= int(q):
            raise ParameterError("modgemm: X holds a residue >= q")
        xb = self.upload(x)
        cb = DeviceBuffer(self, plan.rows * x.shape[1])
        plan.apply(xb, x.shape[1], q, cb, mult)
        return self.download(cb, (plan.rows, x.shape[1]))


#: the exact modular GEMM's engines: fp64 DGEMMs of U by digits of X (one per ~52 - bU - log2(d2) bits of q), or
#: int8 tensor-core GEMMs of balanced base-256 digits of both (hemlp.gpu.int8_gemm is its numpy model); the index of
#: each is its engine number in the C interface (hg_gemm_plan_create)
GEMM_ENGINES = ("fp64", "int8")


class GemmPlan:
    """A plaintext integer matrix U (d1 x d2, |U| <= 2^bU) prepared on the device for exact modular GEMMs on one of
    GEMM_ENGINES (the same words from both)."""

    def __init__(self, dev: CudaEvaluator, U, bU: int | None = None, engine: str = "fp64"):
        if engine not in GEMM_ENGINES:
            raise ParameterError(f"unknown GEMM engine {engine!r}: use one of {', '.join(GEMM_ENGINES)}")
        u = np.ascontiguousarray(U, dtype=np.int64)
        if u.ndim != 2 or u.size == 0:
            raise ShapeError(f"U must be a non-empty 2-D integer matrix, got shape {u.shape}")
        if bU is None:
            m = int(np.abs(u).max())
            bU = max(0, (m - 1).bit_length()) if m > 1 else 0
        self.dev, self.rows, self.cols, self.bU, self.engine = dev, u.shape[0], u.shape[1], int(bU), engine
        h = vp()
        check(dev.lib.hg_gemm_plan_create(dev.handle, u.ctypes.data_as(c_i64p), u.shape[0], u.shape[1], self.bU,
                                          GEMM_ENGINES.index(engine), ctypes.byref(h)), "modgemm plan")
        self.handle = h

    def __del__(self):
        release(self, "hg_gemm_plan_free")

    def apply(self, X: DeviceBuffer, ncols: int, q: int, C: DeviceBuffer, mult: int = 1,
              x_offset: int = 0, c_offset: int = 0) -> None:
        """C[c_offset:] (rows x ncols) = mult * U X mod q, X (cols x ncols) at X[x_offset:] (device buffers)."""
        check(self.dev.lib.hg_gemm_apply(self.dev.handle, self.handle, X.handle, x_offset, ncols, int(q),
                                         int(mult) % int(q), C.handle, c_offset), "modgemm")
