"""Encryption parameters: Params (ring degree, modulus chain, special primes, digit size, scale), the named
presets (128-bit ones and insecure test sets), FloodSpec and the default decryption noise.

    from hemlp import fhe
    p = fhe.Params.preset("N14-d6")      # fhe.Params.presets() lists them with their security
    p.is_128_bit_secure, p.log_qp         # the HE-standard 128-bit policy (enforced natively by the engine)
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

from hemlp import _core
from hemlp.errors import ParameterError, SerializationError, UnsafeDecryptionWarning
from hemlp.fhe import serialize as ser

__all__ = ["Params", "FloodSpec", "DECRYPT_NOISE_MODES", "NOISE_CODES", "set_default_decrypt_noise",
           "default_decrypt_noise"]

#: decryption noise modes (docs/security.md): "standard" (default) adds an exact integer Gaussian of
#: sigma = a trusted bound t on the ciphertext's error (heuristic, OpenFHE-like budget of (sigma/3.2)^2 related
#: decryptions); "flood" adds sigma = sqrt(12 tau) 2^(s/2) t (Li–Micciancio–Schultz–Sorrell, provable when t is a
#: true bound); "none" decrypts exactly (tests only).
DECRYPT_NOISE_MODES = ("standard", "flood", "none")
#: the native decrypt's mode for each (hemlp._core.DecryptMode; the integers 0 / 1 / 2 it stands for are accepted too)
NOISE_CODES = {"none": _core.DecryptMode.none, "standard": _core.DecryptMode.standard, "flood": _core.DecryptMode.flood}
_default_decrypt_noise = "standard"


def default_decrypt_noise() -> str:
    """The decryption noise of contexts created without an explicit `decrypt_noise` (set_default_decrypt_noise)."""
    return _default_decrypt_noise


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
                      "leveled, depth 6: plaintext-model nets with PCMM layers "
                      "(docs/design/pcmm-and-planning.md §1.10, L14)"),
    "N15-d10": _Preset(15, (60,) + (45,) * 10, (61, 61, 61), 3, 45,
                       "leveled, depth 10: deeper nets and ciphertext x ciphertext matmul "
                       "(docs/design/pcmm-and-planning.md §1.10, set L)"),
    # docs/design/bootstrap.md §2: set B with one 40-bit application level dropped and 61-bit EvalMod primes (their
    # rescales' noise, relative to the scale, is halved: +0.5 bit at N = 2^14): log QP 1735 <= 1747 (Lattigo's
    # N16QP1767 is over)
    "N16-boot": _Preset(16, (60,) + (40,) * 12 + (39,) * 3 + (61,) * 8 + (56,) * 4, (61,) * 6, 6, 40,
                        "N=2^16 bootstrapping chain (docs/design/bootstrap.md §2 set B, log QP 1735): 12 application "
                        "levels at 2^40 after a bootstrap (StC 3x39, EvalMod 8x61, CtS 4x56)"),
    # docs/design/decryption.md §3: flooding with s = 30, tau = 1 costs ~27 bits of sigma over a 2^10 bound, so 55-bit
    # scales keep ~20 bits per slot (log2 Δ >= p + ½log2(12τ) + s/2 + log2 t + ½log2 n); 4 levels fit 438 bits at
    # N = 2^14
    "N14-flood": _Preset(14, (60,) + (55,) * 4, (60, 60), 2, 55,
                         "leveled, depth 4 at 2^55 scales: noise-flooded decryption (LMSS, s = 30) keeps ~20 bits"),
    # #20: every prime <= 33 bits, so an exact PCMM GEMM takes one digit per limb and part (12-bit weights, 256-row
    # blocks: 2^8 * 2^12 * 2^32 < 2^53) where N14-d6's 60- and 41-bit primes take two: half the GEMM passes. The
    # price is the 2^25 scale (q_0 ~ 2^32 keeps 7 bits above it): every error relative to the scale, the decryption
    # noise first, is 2^15 larger than at 2^40 (bench/pcmm_small_primes_N14.json: a compiled 256x256 PCMM keeps
    # ~4.6 bits against N14-d6's ~9.2). Chosen by name only (hemlp.compiler.params.BY_NAME_ONLY).
    "N14-pcmm": _Preset(14, (32,) + (25,) * 10, (60, 60), 2, 25,
                        "leveled, depth 10 at 2^25 scales, every prime <= 33 bits: half the GEMM passes of N14-d6 in "
                        "a PCMM, ~15 bits less precision per value (fast, coarse PCMM networks)"),
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
    def from_bytes(cls, data: bytes, checksum: bool = True) -> "Params":
        _, phash, h, _ = ser.unpack(data, None, "params", checksum=checksum)
        try:
            p = cls(ser.field(h, "log_n", int), ser.int_list(h, "q_bits"), ser.int_list(h, "p_bits"),
                    ser.field(h, "alpha", int),
                    ser.field(h, "log_scale", float), name=str(h.get("name", "custom")),
                    secret_hw=ser.field(h, "secret_hw", int))
        except (TypeError, ValueError, OverflowError) as exc:
            if isinstance(exc, SerializationError):
                raise
            raise SerializationError(f"invalid parameters in the data: {exc}") from None
        if p.hash != phash:
            raise SerializationError("parameter hash does not match the parameters: the data is corrupted")
        return p
