"""RNS-CKKS: parameters, context, keys, encryption and homomorphic operations.

    from hemlp.fhe import ckks
    ctx = ckks.Context(ckks.Params.preset("N14-d6"))
    sk, pk = ctx.keygen()
    ct = ctx.encrypt(x, pk)              # x: up to ctx.slots real or complex values
    y = ctx.decrypt(ctx.mul(ct, ct, relin_key=ctx.relin_key(sk), rescale=True), sk)

Ciphertexts carry their parameter hash, key-pair id, level, scale, slot count and
encoding; every operation checks them and raises a typed error from hemlp.errors.
"""
from __future__ import annotations

import contextlib
import math
import os

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hemlp import _core
from hemlp.fhe import serialize as ser
from hemlp.fhe.files import write_atomic
from hemlp.errors import (
    EncodingError,
    InsecureParametersError,
    KeyMismatchError,
    MissingKeyError,
    ParameterError,
    SerializationError,
    ShapeError,
)

__all__ = [
    "Params", "Context", "Plaintext", "Ciphertext", "SecretKey", "PublicKey", "RelinKey", "GaloisKeys",
    "from_bytes", "load", "InsecureParametersWarning", "UnsafeDecryptionWarning", "FloodSpec",
    "DECRYPT_NOISE_MODES", "set_default_decrypt_noise",
]


class InsecureParametersWarning(UserWarning):
    """Emitted whenever a context below 128-bit security is built (tests only)."""


warnings.filterwarnings("always", category=InsecureParametersWarning)  # loud: never deduplicated


class UnsafeDecryptionWarning(UserWarning):
    """Emitted when decryption adds no noise (noise="none"): the output then reveals the secret key to anyone who
    also holds the ciphertext (Li–Micciancio). For tests and precision measurements only."""


#: decryption noise modes (docs/security.md): "standard" (default) adds an exact integer Gaussian of
#: sigma = a trusted bound t on the ciphertext's error (heuristic, OpenFHE-like budget of (sigma/3.2)^2 related
#: decryptions); "flood" adds sigma = sqrt(12 tau) 2^(s/2) t (Li–Micciancio–Schultz–Sorrell, provable when t is a
#: true bound); "none" decrypts exactly (tests only).
DECRYPT_NOISE_MODES = ("standard", "flood", "none")
_NOISE_CODE = {"none": 0, "standard": 1, "flood": 2}
_default_decrypt_noise = "standard"


def set_default_decrypt_noise(mode: str) -> None:
    """The decryption noise of contexts created without an explicit `decrypt_noise` (default "standard").

    Test suites that measure the precision of homomorphic operations set "none" (and say so); production code
    never should: exact decryptions leak the secret key to whoever holds the ciphertexts."""
    global _default_decrypt_noise
    if mode not in DECRYPT_NOISE_MODES:
        raise ParameterError(f"decryption noise must be one of {DECRYPT_NOISE_MODES}, got {mode!r}")
    if mode == "none":
        warnings.warn("contexts now decrypt without noise by default: for tests and precision measurements only",
                      UnsafeDecryptionWarning, stacklevel=2)
    _default_decrypt_noise = mode


@dataclass(frozen=True)
class FloodSpec:
    """Noise flooding (Li–Micciancio–Schultz–Sorrell, CRYPTO'22): sigma = sqrt(12·queries)·2^(stat_security/2)·t.

    bound_log2: log2 of a *trusted worst-case* bound t on ||e||_inf (coefficient units) of the ciphertexts
    decrypted, derived by the client from its own copy of the circuit — never from the decrypted values or a
    header the server sent. queries: decryptions of related ciphertexts released per key. conservative: the
    extra sqrt(2N) factor of LMSS Cor. 2. min_precision_bits: refuse (ParameterError) when the flooded output
    would keep fewer bits than this."""

    bound_log2: float
    stat_security: int = 30
    queries: int = 1
    conservative: bool = False
    min_precision_bits: float | None = None

    def log2_sigma(self, n: int) -> float:
        if self.queries < 1 or self.stat_security < 1:
            raise ParameterError("FloodSpec: queries and stat_security must be >= 1")
        extra = 0.5 * math.log2(2 * n) if self.conservative else 0.0
        return 0.5 * math.log2(12 * self.queries) + self.stat_security / 2 + float(self.bound_log2) + extra


@dataclass(frozen=True)
class _Preset:
    log_n: int
    q_bits: tuple
    p_bits: tuple
    alpha: int
    log_scale: float
    note: str


# 128-bit presets (HE standard, uniform ternary secret, log QP including P) and insecure test sets.
_PRESETS = {
    "N14-d6": _Preset(14, (60,) + (40,) * 6, (60, 60), 2, 40,
                      "leveled, depth 6: plaintext-model nets with PCMM layers (BRIEF L14)"),
    "N15-d10": _Preset(15, (60,) + (45,) * 10, (61, 61, 61), 3, 45,
                       "leveled, depth 10: deeper nets and ciphertext x ciphertext matmul (BRIEF set L)"),
    # BOOTSTRAP.md set B with one 40-bit application level dropped and 61-bit EvalMod primes (their rescales'
    # noise, relative to the scale, is halved: +0.5 bit at N = 2^14): log QP 1735 <= 1747 (Lattigo's N16QP1767 is over)
    "N16-boot": _Preset(16, (60,) + (40,) * 12 + (39,) * 3 + (61,) * 8 + (56,) * 4, (61,) * 6, 6, 40,
                        "N=2^16 bootstrapping chain (BOOTSTRAP.md set B, log QP 1735): 12 application levels at 2^40 "
                        "after a bootstrap (StC 3x39, EvalMod 8x61, CtS 4x56)"),
    # DECRYPTION.md §3: flooding with s = 30, tau = 1 costs ~27 bits of sigma over a 2^10 bound, so 55-bit scales keep
    # ~20 bits per slot (log2 Δ >= p + ½log2(12τ) + s/2 + log2 t + ½log2 n); 4 levels fit 438 bits at N = 2^14
    "N14-flood": _Preset(14, (60,) + (55,) * 4, (60, 60), 2, 55,
                         "leveled, depth 4 at 2^55 scales: noise-flooded decryption (LMSS, s = 30) keeps ~20 bits"),
    "test-N12": _Preset(12, (50, 40, 40, 40), (51, 51), 2, 40, "INSECURE test set T: fast tests, beta = 2 digits"),
    "test-N12-d6": _Preset(12, (60,) + (40,) * 6, (60, 60), 2, 40, "INSECURE N14-d6 chain at N=2^12: fast model tests"),
    "test-N12-d18": _Preset(12, (60,) + (40,) * 18, (60, 60), 2, 40,
                            "INSECURE deep chain at N=2^12: layout (A') tests (CoeffToSlot / SlotToCoeff levels)"),
    "test-N10": _Preset(10, (50, 40, 40, 40), (51, 51), 2, 40, "INSECURE tiny ring for brute-force oracle tests"),
    "test-N12-boot": _Preset(12, (60,) + (40,) * 3 + (39,) * 2 + (61,) * 8 + (56,) * 3, (61,) * 3, 3, 40,
                             "INSECURE bootstrapping test chain at N=2^12 (3 application levels, StC 2x39, "
                             "EvalMod 8x61, CtS 3x56): CI only, never for real data"),
    "test-N15-boot": _Preset(15, (60,) + (40,) * 12 + (39,) * 3 + (61,) * 8 + (56,) * 4, (61,) * 6, 6, 40,
                             "INSECURE N16-boot chain at N=2^15 (no 128-bit bootstrapping chain fits N=2^15: q0, "
                             "CtS, EvalMod and StC alone take 889 > 881 bits): make test-slow only"),
    "test-N10-boot": _Preset(10, (60,) + (40,) * 3 + (39,) * 2 + (61,) * 8 + (56,) * 3, (61,) * 3, 3, 40,
                             "INSECURE test-N12-boot chain at N=2^10 for big-integer oracle tests: never for real data"),
}


class Params:
    """Encryption parameters: ring degree, modulus chain, special primes, digit size, scale."""

    def __init__(self, log_n: int, q_bits, p_bits, alpha: int = 1, log_scale: float = 40, name: str = "custom",
                 secret_hw: int = 0):
        spec = _core.ParamsSpec()
        spec.name, spec.log_n, spec.q_bits, spec.p_bits = name, int(log_n), list(q_bits), list(p_bits)
        spec.alpha, spec.log_scale, spec.secret_hw = int(alpha), float(log_scale), int(secret_hw)
        self._p = _core.Params(spec)
        self.name = name

    @classmethod
    def preset(cls, name: str) -> "Params":
        if name not in _PRESETS:
            raise ParameterError(f"unknown preset {name!r}; choose one of {sorted(_PRESETS)} (see Params.presets())")
        s = _PRESETS[name]
        return cls(s.log_n, s.q_bits, s.p_bits, s.alpha, s.log_scale, name=name)

    @staticmethod
    def presets() -> list[dict]:
        out = []
        for name in _PRESETS:
            p = Params.preset(name)
            out.append(dict(name=name, N=p.N, depth=p.max_level, log_qp=round(p.log_qp, 1),
                            max_log_qp_128=p.max_log_qp_128, slots=p.N // 2,
                            security="128-bit" if p.is_128_bit_secure else "INSECURE", note=_PRESETS[name].note))
        return out

    #: the ``hemlp._core.Params`` behind this object (what ``hemlp._core.Engine`` takes)
    native = property(lambda self: self._p)
    N = property(lambda self: self._p.n)
    log_n = property(lambda self: self._p.log_n)
    max_level = property(lambda self: self._p.max_level)
    q = property(lambda self: list(self._p.q))
    p = property(lambda self: list(self._p.p))
    alpha = property(lambda self: self._p.alpha)
    log_q = property(lambda self: self._p.log_q)
    log_qp = property(lambda self: self._p.log_qp)
    max_log_qp_128 = property(lambda self: self._p.max_log_qp_128)
    is_128_bit_secure = property(lambda self: self._p.is_128_bit_secure)
    hash = property(lambda self: self._p.hash_hex)
    log_scale = property(lambda self: self._p.spec.log_scale)

    def switch_key_bytes(self, level: int) -> int:
        """Bytes of one key-switching key generated for `level` (a relinearisation, rotation or ModPack key):
        num_digits(level) digits of (level + 1 + |P|) limbs of N words; the a-halves travel as seeds."""
        return self._p.num_digits(level) * (level + 1 + len(self.p)) * self.N * 8

    def __repr__(self):
        sec = "128-bit" if self.is_128_bit_secure else "INSECURE"
        return (f"Params({self.name}: N=2^{self.log_n}, depth={self.max_level}, log QP={self.log_qp:.1f} "
                f"(max {self.max_log_qp_128} for 128-bit), {sec})")

    def to_bytes(self) -> bytes:
        s = self._p.spec
        header = dict(name=self.name, log_n=s.log_n, q_bits=list(s.q_bits), p_bits=list(s.p_bits), alpha=s.alpha,
                      log_scale=s.log_scale, secret_hw=s.secret_hw)
        return ser.pack("params", self.hash, header, [])

    @classmethod
    def from_bytes(cls, data: bytes) -> "Params":
        _, phash, h, _ = ser.unpack(data, None, "params")
        try:
            p = cls(ser.field(h, "log_n", int), [int(b) for b in ser.field(h, "q_bits", list)],
                    [int(b) for b in ser.field(h, "p_bits", list)], ser.field(h, "alpha", int),
                    ser.field(h, "log_scale", float), name=str(h.get("name", "custom")),
                    secret_hw=ser.field(h, "secret_hw", int))
        except (TypeError, ValueError) as exc:
            if isinstance(exc, SerializationError):
                raise
            raise SerializationError(f"invalid parameters in the data: {exc}") from None
        if p.hash != phash:
            raise SerializationError("parameter hash does not match the parameters: the data is corrupted")
        return p


class _Wrapped:
    """A native object plus the context's parameter hash; serialisable."""

    __slots__ = ("_obj", "_phash", "_engine")
    _type = ""

    def __init__(self, obj, engine, phash: str):
        self._obj, self._engine, self._phash = obj, engine, phash

    #: the ``hemlp._core`` object behind this wrapper (for native building blocks such as PCMM and
    #: bootstrapping; its methods do no Python-side checks, so callers validate first)
    native = property(lambda self: self._obj)
    #: SHA-256 (hex) of the parameter set the object was made under
    param_hash = property(lambda self: self._phash)

    def save(self, path) -> None:
        write_atomic(Path(path), self.to_bytes())


class Plaintext(_Wrapped):
    level = property(lambda self: self._obj.level)
    scale = property(lambda self: self._obj.scale)
    slots = property(lambda self: self._obj.slots)

    def __repr__(self):
        return f"Plaintext(level={self.level}, scale=2^{math.log2(self.scale):.2f}, slots={self.slots})"


class Ciphertext(_Wrapped):
    _type = "ciphertext"
    level = property(lambda self: self._obj.level)
    scale = property(lambda self: self._obj.scale)
    slots = property(lambda self: self._obj.slots)
    size = property(lambda self: self._obj.size)
    encoding = property(lambda self: "slot" if self._obj.encoding == 0 else "coeff")
    is_complex = property(lambda self: self._obj.is_complex)

    def __repr__(self):
        return (f"Ciphertext(level={self.level}, scale=2^{math.log2(self.scale):.2f}, slots={self.slots}, "
                f"encoding={self.encoding}, size={self.size})")

    def to_bytes(self) -> bytes:
        return b"".join(self.to_parts())

    def to_parts(self) -> list:
        """to_bytes() as a list of buffers (see serialize.pack_parts): containers join them once."""
        o = self._obj
        seeded = o.seeded and o.size == 2
        # read-only views of the native polynomials (they keep the ciphertext alive): no copy until the join
        polys = [o.poly_view(0)] if seeded else [o.poly_view(j) for j in range(o.size)]
        header = dict(level=o.level, scale=o.scale.hex(), slots=o.slots, encoding=o.encoding,
                      is_complex=o.is_complex, key_id=f"{o.key_id:016x}", seed=o.seed.hex() if seeded else None)
        return ser.pack_parts("ciphertext", self._phash, header, polys)


class SecretKey(_Wrapped):
    _type = "secret_key"
    key_id = property(lambda self: self._obj.key_id)

    def __repr__(self):
        return f"SecretKey(id={self.key_id:016x})"

    def save(self, path) -> None:
        """Write the secret key readable by its owner only (0600, set when the file is created)."""
        write_atomic(Path(path), self.to_bytes(), mode=0o600)

    def to_bytes(self) -> bytes:
        return ser.pack("secret_key", self._phash, dict(key_id=f"{self._obj.key_id:016x}"), [self._obj.coeffs])


class PublicKey(_Wrapped):
    _type = "public_key"
    key_id = property(lambda self: self._obj.key_id)

    def __repr__(self):
        return f"PublicKey(id={self.key_id:016x})"

    def to_bytes(self) -> bytes:
        b, a = self._engine.export_pk(self._obj)
        return ser.pack("public_key", self._phash, dict(key_id=f"{self._obj.key_id:016x}"), [b, a])


class RelinKey(_Wrapped):
    _type = "relin_key"
    key_id = property(lambda self: self._obj.key_id)
    #: the highest ciphertext level this key can relinearise
    level = property(lambda self: self._obj.level)
    #: bytes of key material: num_digits(level) * (level + 1 + |P|) * N * 8 (the a-halves are seeds)
    nbytes = property(lambda self: self._obj.nbytes)
    #: bytes held in memory: the b-halves plus the a-halves expanded from their seeds (2 * nbytes)
    memory_bytes = property(lambda self: self._obj.memory_bytes)

    def __repr__(self):
        return f"RelinKey(id={self.key_id:016x}, level={self.level}, digits={self._obj.num_digits})"

    def to_bytes(self) -> bytes:
        return _switch_keys_bytes(self._engine, "relin_key", self._phash, self._obj.key_id, [self._obj])


class GaloisKeys(_Wrapped):
    """Rotation and conjugation keys, by Galois element."""

    _type = "galois_keys"
    key_id = property(lambda self: self._obj.key_id)
    elements = property(lambda self: list(self._obj.elements))
    #: the highest ciphertext level every key of the set can switch (None for an empty set)
    level = property(lambda self: self._obj.level)
    #: ciphertext level limit of each key, by Galois element
    levels = property(lambda self: dict(self._obj.levels))
    #: bytes of key material (the b-halves; the a-halves are seeds), as serialised
    nbytes = property(lambda self: self._obj.nbytes)
    #: bytes held in memory: nbytes plus the a-halves the set holds expanded (none for seeded keys)
    memory_bytes = property(lambda self: self._obj.memory_bytes)

    def __repr__(self):
        return f"GaloisKeys(id={self.key_id:016x}, level={self.level}, elements={self.elements})"

    def merge(self, other: "GaloisKeys") -> "GaloisKeys":
        if other._phash != self._phash:
            raise KeyMismatchError("cannot merge Galois keys of different parameter sets")
        g = _core.GaloisKeys()
        g.merge(self._obj)
        g.merge(other._obj)
        return GaloisKeys(g, self._engine, self._phash)

    def to_bytes(self) -> bytes:
        keys = [self._obj.get(g) for g in self._obj.elements]
        return _switch_keys_bytes(self._engine, "galois_keys", self._phash, self._obj.key_id, keys)


class Context:
    """Parameters plus precomputations; creates keys, encrypts, evaluates.

    A context built from parameters below 128-bit security needs allow_insecure=True and
    warns every time; use such sets only for tests.
    """

    def __init__(self, params: Params | str, allow_insecure: bool = False, decrypt_noise: str | None = None,
                 flood: FloodSpec | None = None):
        if isinstance(params, str):
            params = Params.preset(params)
        if not params.is_128_bit_secure:
            why = (f"log QP = {params.log_qp:.1f} bits exceeds {params.max_log_qp_128} (HE standard, 128-bit, "
                   f"N=2^{params.log_n})" if params.max_log_qp_128 > 0 else
                   f"N=2^{params.log_n} is not covered by the 128-bit HE-standard table")
            if not allow_insecure:
                raise InsecureParametersError(
                    f"parameters {params.name!r} are not 128-bit secure: {why}. Use a preset such as 'N14-d6' or "
                    "'N15-d10', or pass allow_insecure=True for tests only")
            msg = f"INSECURE parameters {params.name!r} ({why}): for tests only, never for real data"
            warnings.warn(msg, InsecureParametersWarning, stacklevel=2)
        mode = _default_decrypt_noise if decrypt_noise is None else decrypt_noise
        if mode not in DECRYPT_NOISE_MODES:
            raise ParameterError(f"decrypt_noise must be one of {DECRYPT_NOISE_MODES}, got {mode!r}")
        if mode == "flood" and flood is None:
            raise ParameterError("decrypt_noise='flood' needs flood=FloodSpec(bound_log2=...): a bound the client "
                                 "derives from its own plan (see docs/security.md)")
        if decrypt_noise == "none":
            warnings.warn("this context decrypts without noise: its outputs reveal the secret key to whoever holds "
                          "the ciphertexts (tests only)", UnsafeDecryptionWarning, stacklevel=2)
        self.params = params
        #: default decryption noise of this context ("standard", "flood" or "none"); see DECRYPT_NOISE_MODES
        self.decrypt_noise = mode
        self.flood = flood
        #: log2 of the error bound t the client trusts for this context's ciphertexts (standard mode: sigma = t;
        #: None: the fresh-encryption bound). A compiled model sets it from its plan (CompiledModel.estimate_noise),
        #: never from anything a ciphertext carries.
        self.noise_bound_log2: float | None = None
        # the 128-bit policy is enforced again natively: no wrapper can build an engine below it by accident
        self._e = _core.Engine(params.native, min_security_bits=0 if allow_insecure else 128)
        self._hash = params.hash

    # ---- properties
    N = property(lambda self: self.params.N)
    slots = property(lambda self: self.params.N // 2)
    max_level = property(lambda self: self.params.max_level)
    default_scale = property(lambda self: 2.0 ** self.params.log_scale)
    hash = property(lambda self: self._hash)

    def modulus(self, level: int) -> int:
        """The prime q_level (the one a rescale at this level divides by)."""
        return self._e.modulus(level)

    def __repr__(self):
        return f"Context({self.params!r})"

    #: the ``hemlp._core.Engine`` of this context: the native entry points that building blocks outside this
    #: module (PCMM, bootstrapping, runtimes) call directly
    native = property(lambda self: self._e)

    # ---- wrapping helpers
    def wrap(self, cls, obj):
        """Wrap a native object (``hemlp._core``) made under this context as `cls` (Ciphertext, Plaintext, ...)."""
        return cls(obj, self._e, self._hash)

    def unwrap(self, x, cls, what: str):
        """The native object behind `x` after checking its type and parameter set (typed errors name `what`)."""
        return self._unwrap(x, cls, what)

    def _w(self, cls, obj):
        return cls(obj, self._e, self._hash)

    def _unwrap(self, x, cls, what):
        if not isinstance(x, cls):
            raise TypeError(f"{what} must be a hemlp.fhe.ckks.{cls.__name__}, got {type(x).__name__}")
        if x._phash != self._hash:
            from hemlp.errors import ContextMismatchError

            raise ContextMismatchError(f"the {what} belongs to another parameter set than this context; "
                                       "use the context it was made with")
        return x._obj

    # ---- keys
    def keygen(self):
        """A fresh (secret_key, public_key) pair."""
        sk = self._e.secret_key()
        return self._w(SecretKey, sk), self._w(PublicKey, self._e.public_key(sk))

    def key_level(self, level) -> int:
        """The level a key made for `level` serves: None -> the top level; else an int in [0, max_level] (the native default -1 means the top)."""
        if level is None:
            return self.max_level
        if isinstance(level, bool) or not isinstance(level, (int, np.integer)):
            raise ParameterError(f"key level must be an int or None, got {type(level).__name__}")
        if not 0 <= int(level) <= self.max_level:
            raise ParameterError(f"key level {level} is outside this context's modulus chain [0, {self.max_level}]; "
                                 "pass the highest level the key will be used at (None: the top level)")
        return int(level)

    def relin_key(self, sk: SecretKey, level: int | None = None) -> RelinKey:
        """Relinearisation key for ciphertexts at levels <= `level` (None: every level). A lower level
        gives a smaller key: it holds (level + 1 + |P|) limbs per digit instead of (L + 1 + |P|)."""
        return self._w(RelinKey, self._e.relin_key(self._unwrap(sk, SecretKey, "secret key"), self.key_level(level)))

    def rotation_keys(self, sk: SecretKey, steps, level: int | None = None) -> GaloisKeys:
        """Keys for left rotations by each step (negative = right), usable at levels <= `level`
        (None: every level)."""
        lv = self.key_level(level)
        els = sorted({self._e.galois_element(int(s)) for s in steps})
        return self._w(GaloisKeys, self._e.galois_keys(self._unwrap(sk, SecretKey, "secret key"), els, lv))

    def conjugation_key(self, sk: SecretKey, level: int | None = None) -> GaloisKeys:
        lv = self.key_level(level)
        return self._w(GaloisKeys, self._e.galois_keys(self._unwrap(sk, SecretKey, "secret key"),
                                                       [self._e.conjugation_element()], lv))

    # ---- encoding
    def encode(self, x, level: int | None = None, scale: float | None = None, slots: int | None = None,
               encoding: str = "slot") -> Plaintext:
        level = self.max_level if level is None else int(level)
        scale = self.default_scale if scale is None else float(scale)
        arr = np.asarray(x)
        if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
            raise EncodingError(f"cannot encode values of dtype {arr.dtype}; pass real or complex numbers")
        arr = arr.reshape(-1) if arr.ndim else arr.reshape(1)
        if encoding == "coeff":
            if np.iscomplexobj(arr):
                raise EncodingError("coefficient encoding takes real values only")
            return self._w(Plaintext, self._e.encode_coeff(arr.astype(np.float64).tolist(), scale, level))
        if encoding != "slot":
            raise EncodingError(f"encoding must be 'slot' or 'coeff', got {encoding!r}")
        if slots is None:
            slots = self.slots
        is_complex = bool(np.iscomplexobj(arr) and np.any(arr.imag != 0))
        return self._w(Plaintext, self._e.encode(arr.astype(np.complex128), int(slots), scale, level, is_complex))

    def decode(self, pt: Plaintext) -> np.ndarray:
        o = self._unwrap(pt, Plaintext, "plaintext")
        if o.encoding == 1:
            return self._e.decode_coeff(o)
        z = self._e.decode(o)
        return z if o.is_complex else z.real.copy()

    # ---- encryption
    def encrypt(self, x, key, level: int | None = None, scale: float | None = None, slots: int | None = None,
                encoding: str = "slot") -> Ciphertext:
        """Encrypt values (or a Plaintext) under a PublicKey or a SecretKey (seeded, half-size)."""
        pt = x if isinstance(x, Plaintext) else self.encode(x, level, scale, slots, encoding)
        p = self._unwrap(pt, Plaintext, "plaintext")
        if isinstance(key, PublicKey):
            return self._w(Ciphertext, self._e.encrypt_pk(p, self._unwrap(key, PublicKey, "public key")))
        if isinstance(key, SecretKey):
            return self._w(Ciphertext, self._e.encrypt_sk(p, self._unwrap(key, SecretKey, "secret key")))
        raise TypeError(f"key must be a PublicKey or SecretKey, got {type(key).__name__}")

    def decrypt_noise_args(self, scale: float, n_values: int, noise: str | None = None,
                           bound_log2: float | None = None, flood: FloodSpec | None = None) -> tuple:
        """(mode code, sigma, info) for a native decryption at this scale over n_values slots or coefficients.

        noise / flood default to the context's; bound_log2 (standard mode): log2 of the trusted error bound t
        (default: the context's noise_bound_log2, set from a compiled model's plan, else the fresh-encryption bound
        of these parameters). info: log2_sigma, bound_log2, est_bits (the
        precision the noise leaves per value, in bits), budget (related decryptions before sigma/sqrt(tau) < 3.2)."""
        mode = self.decrypt_noise if noise is None else noise
        if mode not in DECRYPT_NOISE_MODES:
            raise ParameterError(f"noise must be one of {DECRYPT_NOISE_MODES}, got {mode!r}")
        if mode == "none":
            if noise == "none":  # a context made with "none" warned once, when it was made
                warnings.warn("decrypting without noise: the output reveals the secret key to whoever holds the "
                              "ciphertext (tests only)", UnsafeDecryptionWarning, stacklevel=3)
            return 0, 0, dict(mode=mode, log2_sigma=None, bound_log2=None, est_bits=None, budget=None)
        spec, sigma = None, None
        if bound_log2 is None:
            bound_log2 = self.noise_bound_log2
        if mode == "standard" and bound_log2 is None:  # the parameter set's own bound: an integer already
            sigma = int(self._e.fresh_noise_bound)
            t_log2 = log2_sigma = math.log2(sigma)
        elif mode == "standard":
            t_log2 = log2_sigma = float(bound_log2)
        else:
            spec = flood if flood is not None else self.flood
            if spec is None:
                raise ParameterError("noise='flood' needs a FloodSpec (flood=FloodSpec(bound_log2=...)) from the "
                                     "client's own plan")
            t_log2, log2_sigma = float(spec.bound_log2), spec.log2_sigma(self.N)
        if not 0 <= log2_sigma <= 60:
            raise ParameterError(f"decryption noise sigma = 2^{log2_sigma:.1f} is outside [1, 2^60]: check the bound")
        if sigma is None:
            sigma = int(math.ceil(2.0 ** log2_sigma))
        est_bits = math.log2(scale) - math.log2(sigma) - 0.5 * math.log2(max(1, n_values))
        if spec is not None and spec.min_precision_bits is not None and est_bits < spec.min_precision_bits:
            raise ParameterError(
                f"flooded decryption would keep about {est_bits:.1f} bits per value (< min_precision_bits = "
                f"{spec.min_precision_bits}): raise the scale (e.g. 55-bit scaling primes or a *-flood preset), "
                "lower queries, or accept fewer bits")
        info = dict(mode=mode, log2_sigma=math.log2(sigma), bound_log2=t_log2, est_bits=est_bits,
                    budget=(sigma / 3.2) ** 2)
        return _NOISE_CODE[mode], sigma, info

    def decrypt(self, ct: Ciphertext, sk: SecretKey, noise: str | None = None, bound_log2: float | None = None,
                flood: FloodSpec | None = None, info: bool = False):
        """Decrypt and decode; IND-CPA-D noise is added inside the native decrypt (see decrypt_noise_args).

        Returns the values, or (values, info) with info=True."""
        o = self._unwrap(ct, Ciphertext, "ciphertext")
        n_values = o.slots if o.encoding == 0 else self.N
        code, sigma, meta = self.decrypt_noise_args(o.scale, n_values, noise, bound_log2, flood)
        pt = self._e.decrypt(o, self._unwrap(sk, SecretKey, "secret key"), code, sigma)
        out = self.decode(self._w(Plaintext, pt))
        return (out, meta) if info else out

    @contextlib.contextmanager
    def decrypt_settings(self, noise: str | None = None, bound_log2: float | None = None,
                         flood: FloodSpec | None = None):
        """Within the block, decryptions through this context use these settings (None: unchanged); restored
        after. For callers that decrypt through helpers which take no noise arguments (layouts, linalg)."""
        if noise is not None and noise not in DECRYPT_NOISE_MODES:
            raise ParameterError(f"noise must be one of {DECRYPT_NOISE_MODES}, got {noise!r}")
        if noise == "flood" and flood is None and self.flood is None:
            raise ParameterError("noise='flood' needs a FloodSpec (flood=FloodSpec(bound_log2=...))")
        old = self.decrypt_noise, self.noise_bound_log2, self.flood
        if noise is not None:
            self.decrypt_noise = noise
        if bound_log2 is not None:
            self.noise_bound_log2 = float(bound_log2)
        if flood is not None:
            self.flood = flood
        try:
            yield self
        finally:
            self.decrypt_noise, self.noise_bound_log2, self.flood = old

    # ---- arithmetic
    def _ct(self, a, what="ciphertext"):
        return self._unwrap(a, Ciphertext, what)

    def _as_plain(self, a: Ciphertext, b, scale: float) -> Plaintext:
        if isinstance(b, Plaintext):
            return b
        arr = np.asarray(b)
        if arr.ndim == 0:  # a scalar applies to every slot / every coefficient
            arr = np.full(a.slots if a.encoding == "slot" else self.N, arr.item())
        return self.encode(arr, level=a.level, scale=scale, slots=a.slots if a.encoding == "slot" else None,
                           encoding=a.encoding)

    def add(self, a: Ciphertext, b) -> Ciphertext:
        """a + b for b a Ciphertext, Plaintext, array or scalar (encoded at a's level and scale)."""
        if isinstance(b, Ciphertext):
            return self._w(Ciphertext, self._e.add(self._ct(a), self._ct(b)))
        pt = self._as_plain(a, b, a.scale)
        return self._w(Ciphertext, self._e.add_plain(self._ct(a), self._unwrap(pt, Plaintext, "plaintext")))

    def sub(self, a: Ciphertext, b) -> Ciphertext:
        if isinstance(b, Ciphertext):
            return self._w(Ciphertext, self._e.sub(self._ct(a), self._ct(b)))
        pt = self._as_plain(a, b, a.scale)
        return self._w(Ciphertext, self._e.sub_plain(self._ct(a), self._unwrap(pt, Plaintext, "plaintext")))

    def negate(self, a: Ciphertext) -> Ciphertext:
        return self._w(Ciphertext, self._e.negate(self._ct(a)))

    def mul(self, a: Ciphertext, b, relin_key: RelinKey | None = None, rescale: bool = False) -> Ciphertext:
        """a * b (slot-wise). b: Ciphertext (relinearised when relin_key is given), Plaintext, array or
        scalar. Arrays and scalars are encoded at scale q_level, so that a following rescale
        restores a's scale exactly. rescale=True rescales the product (for ct x ct with a relin key
        the key switch's ModDown and the rescale are fused into one division by P q_level)."""
        if isinstance(b, Ciphertext):
            rlk = None if relin_key is None else self._unwrap(relin_key, RelinKey, "relinearisation key")
            if rescale and rlk is not None:
                return self._w(Ciphertext, self._e.mul_relin_rescale(self._ct(a), self._ct(b), rlk))
            out = self._e.mul(self._ct(a), self._ct(b), rlk)
        else:
            pt = self._as_plain(a, b, float(self.modulus(a.level)))
            out = self._e.mul_plain(self._ct(a), self._unwrap(pt, Plaintext, "plaintext"))
        return self._w(Ciphertext, self._e.rescale(out) if rescale else out)

    def mul_integer(self, a: Ciphertext, k: int) -> Ciphertext:
        """a * k for an integer k: exact, no scale change, no level used."""
        return self._w(Ciphertext, self._e.mul_integer(self._ct(a), int(k)))

    def mul_rescale_many(self, a: list, b: list, relin_key: RelinKey) -> list:
        """[rescale(relinearize(a[i] * b[i]))] for ciphertext pairs, in parallel over the pairs (native threads):
        the same bits as mul(a[i], b[i], relin_key, rescale=True) one by one."""
        if relin_key is None:
            raise MissingKeyError("mul_rescale_many needs a relinearisation key: ctx.relin_key(sk)")
        rlk = self._unwrap(relin_key, RelinKey, "relinearisation key")
        if len(a) != len(b):
            raise ShapeError(f"mul_rescale_many: {len(a)} left and {len(b)} right operands")
        out = self._e.mul_relin_rescale_many([self._ct(x) for x in a], [self._ct(x) for x in b], rlk)
        return [self._w(Ciphertext, o) for o in out]

    def square(self, a: Ciphertext, relin_key: RelinKey | None = None) -> Ciphertext:
        return self.mul(a, a, relin_key)

    def relinearize(self, a: Ciphertext, relin_key: RelinKey) -> Ciphertext:
        if relin_key is None:
            raise MissingKeyError("relinearize needs a relinearisation key: ctx.relin_key(sk)")
        return self._w(Ciphertext, self._e.relinearize(self._ct(a), self._unwrap(relin_key, RelinKey, "relin key")))

    def rescale(self, a: Ciphertext) -> Ciphertext:
        """Divide by the top prime q_level: level - 1, scale / q_level."""
        return self._w(Ciphertext, self._e.rescale(self._ct(a)))

    def drop_level(self, a: Ciphertext, level: int) -> Ciphertext:
        """Discard primes down to `level` (no scale change)."""
        return self._w(Ciphertext, self._e.drop_to_level(self._ct(a), int(level)))

    def set_scale(self, a: Ciphertext, scale: float) -> Ciphertext:
        """Bring a to the given scale by multiplying with round(scale*q/a.scale) and rescaling (one level)."""
        q = self.modulus(a.level)
        k = round(scale * q / a.scale)
        if not 1 <= k < (1 << 62):
            raise EncodingError("set_scale: the scale ratio is out of range for one multiply-and-rescale step")
        c = self._e.rescale(self._e.mul_integer(self._ct(a), k))
        return self._w(Ciphertext, self._e.with_scale(c, float(scale)))

    def rotate(self, a: Ciphertext, step: int, keys: GaloisKeys) -> Ciphertext:
        """Left rotation of the slots by `step` (negative: right)."""
        if keys is None:
            raise MissingKeyError(f"rotate needs rotation keys: ctx.rotation_keys(sk, [{step}])")
        g = self._e.galois_element(int(step))
        return self._w(Ciphertext, self._e.apply_galois(self._ct(a), g, self._unwrap(keys, GaloisKeys, "Galois keys")))

    def rotate_hoisted(self, a: Ciphertext, steps, keys: GaloisKeys) -> list:
        """Several rotations of one ciphertext sharing one decomposition + ModUp (hoisting)."""
        if keys is None:
            raise MissingKeyError("rotate_hoisted needs rotation keys: ctx.rotation_keys(sk, steps)")
        gs = [self._e.galois_element(int(s)) for s in steps]
        outs = self._e.apply_galois_hoisted(self._ct(a), gs, self._unwrap(keys, GaloisKeys, "Galois keys"))
        return [self._w(Ciphertext, o) for o in outs]

    def conjugate(self, a: Ciphertext, key: GaloisKeys) -> Ciphertext:
        if key is None:
            raise MissingKeyError("conjugate needs a conjugation key: ctx.conjugation_key(sk)")
        g = self._e.conjugation_element()
        return self._w(Ciphertext, self._e.apply_galois(self._ct(a), g, self._unwrap(key, GaloisKeys, "Galois keys")))

    # ---- raw NTT of one limb (benchmarks, tests)
    def ntt(self, arr, limb: int = 0) -> np.ndarray:
        return self._e.ntt_limb(np.asarray(arr, dtype=np.uint64), int(limb), False)

    def intt(self, arr, limb: int = 0) -> np.ndarray:
        return self._e.ntt_limb(np.asarray(arr, dtype=np.uint64), int(limb), True)

    # ---- serialisation
    def from_bytes(self, data: bytes):
        return from_bytes(data, self)

    # ---- constant fast paths (no encoding: FFT + NTTs saved per constant)
    def mul_const(self, a: Ciphertext, c: float, const_scale: float) -> Ciphertext:
        """a * round(c * const_scale), the integer exact at any size; scale a.scale * const_scale (no level).
        Rescale afterwards to divide by q_level (pick const_scale = q_level to keep a's scale)."""
        return self._w(Ciphertext, _core.mul_const(self._e, self._ct(a), float(c), float(const_scale)))

    def add_const(self, a: Ciphertext, c: float) -> Ciphertext:
        """a + c in every slot (slot encoding), with round(c * a.scale) exact at any scale."""
        return self._w(Ciphertext, _core.add_const_exact(self._e, self._ct(a), float(c)))


def _key_id(h: dict) -> int:
    try:
        return int(ser.field(h, "key_id", str), 16)
    except ValueError:
        raise SerializationError("malformed key id: the data is corrupted") from None


def from_bytes(data: bytes, ctx: Context | None = None):
    """Load any serialised hemlp object; everything but Params needs the context to load into."""
    # one integrity check; the arrays are views into data (the native import copies them)
    obj_type, phash, h, arrays = ser.unpack(data, None, copy=False)
    if obj_type == "params":
        return Params.from_bytes(data)
    if ctx is None:
        raise ParameterError(f"loading a {obj_type} needs the Context it belongs to: from_bytes(data, ctx)")
    ser.check_context(obj_type, phash, ctx.hash)
    e = ctx._e
    try:
        if obj_type == "ciphertext":
            seed = h.get("seed")
            if seed is not None and not isinstance(seed, str):
                raise SerializationError("malformed seed")
            enc = ser.field(h, "encoding", int)
            try:
                scale = float.fromhex(ser.field(h, "scale", str))
            except ValueError:
                raise SerializationError("malformed scale: the data is corrupted") from None
            if not math.isfinite(scale):
                raise SerializationError("malformed scale: the data is corrupted")
            obj = e.import_ciphertext(list(arrays), ser.field(h, "level", int), scale, ser.field(h, "slots", int),
                                      enc, ser.field(h, "is_complex", bool), _key_id(h),
                                      None if seed is None else bytes.fromhex(seed))
            return ctx._w(Ciphertext, obj)
        if obj_type == "secret_key":
            if len(arrays) != 1:
                raise SerializationError("secret key: wrong number of arrays")
            return ctx._w(SecretKey, e.import_sk(arrays[0], _key_id(h)))
        if obj_type == "public_key":
            if len(arrays) != 2:
                raise SerializationError("public key: wrong number of arrays")
            return ctx._w(PublicKey, e.import_pk(arrays[0], arrays[1], _key_id(h)))
        if obj_type in ("relin_key", "galois_keys"):
            seeds = ser.field(h, "seeds", list)
            gals = ser.field(h, "galois", list)
            if ser.peek_version(data) < 2:     # version 1 keys predate key levels: all at the top level
                levels = [ctx.max_level] * len(gals)
            else:
                levels = ser.field(h, "levels", list)
            if len(levels) != len(gals):
                raise SerializationError(f"{obj_type}: {len(levels)} key levels for {len(gals)} keys; the data is "
                                         "corrupted")
            for lv in levels:
                if isinstance(lv, bool) or not isinstance(lv, int) or not 0 <= lv <= ctx.max_level:
                    raise SerializationError(f"{obj_type}: invalid key level {lv!r} (this context has levels 0.."
                                             f"{ctx.max_level}); the data is corrupted")
            digits = [ctx.params._p.num_digits(lv) for lv in levels]
            if sum(digits) != len(arrays) or len(seeds) != len(arrays):
                raise SerializationError(f"{obj_type}: array count does not match the header (key levels "
                                         f"{levels}); the data is corrupted")
            keys, off = [], 0
            for g, lv, dg in zip(gals, levels, digits):
                if not isinstance(g, int) or g < 0 or g >= 2 * ctx.N or (g % 2 == 0 and g != 0):
                    raise SerializationError(f"{obj_type}: invalid Galois element")
                sl = slice(off, off + dg)
                off += dg
                keys.append(e.import_switch_key(list(arrays[sl]), [bytes.fromhex(s) for s in seeds[sl]],
                                                _key_id(h), g, lv))
            if obj_type == "relin_key":
                if gals != [0]:
                    raise SerializationError("relinearisation key with a Galois element")
                return ctx._w(RelinKey, keys[0])
            return ctx._w(GaloisKeys, e.make_galois_keys(keys, _key_id(h)))
    except (ValueError, TypeError) as exc:
        if isinstance(exc, (SerializationError,)) or type(exc).__module__ == "hemlp.errors":
            raise
        raise SerializationError(f"invalid {obj_type} data: {exc}") from None
    raise SerializationError(f"cannot load a {obj_type} with hemlp.fhe.ckks.from_bytes (use its own module's loader)")


def _switch_keys_bytes(engine, obj_type: str, phash: str, key_id: int, keys) -> bytes:
    arrays, seeds, gals, levels = [], [], [], []
    for k in keys:
        bs, ss = engine.export_switch_key(k)
        arrays.extend(bs)
        seeds.extend(s.hex() for s in ss)
        gals.append(int(k.galois))
        levels.append(int(k.level))
    return ser.pack(obj_type, phash, dict(key_id=f"{key_id:016x}", seeds=seeds, galois=gals, levels=levels), arrays)


def load(path, ctx: Context | None = None):
    """Load an object saved with obj.save(path)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise SerializationError(f"cannot read {path}: {exc.strerror}") from None
    return from_bytes(data, ctx)

