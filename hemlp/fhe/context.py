"""Context: parameters plus precomputations; creates keys, encrypts, decrypts (with IND-CPA-D noise) and runs the
homomorphic operations.

    from hemlp import fhe
    ctx = fhe.Context("N14-d6")           # or fhe.Context(fhe.Params.preset("N14-d6"))
    sk, pk = ctx.keygen()
    ct = ctx.encrypt(x, pk)              # x: up to ctx.slots real or complex values
    y = ctx.decrypt(ctx.mul(ct, ct, relin_key=ctx.relin_key(sk), rescale=True), sk)

Ciphertexts carry their parameter hash, key-pair id, level, scale, slot count and
encoding; every operation checks them and raises a typed error from hemlp.errors.
"""
from __future__ import annotations

import contextlib
import math
import warnings

import numpy as np

from hemlp import _core
from hemlp.errors import (ContextMismatchError, EncodingError, InsecureParametersError, InsecureParametersWarning,
                          LevelError, MissingKeyError, ParameterError, ShapeError, UnsafeDecryptionWarning,
                          warn_always)
from hemlp.fhe.objects import Ciphertext, GaloisKeys, Plaintext, PublicKey, RelinKey, SecretKey, from_bytes
from hemlp.fhe.params import DECRYPT_NOISE_MODES, NOISE_CODES, FloodSpec, Params, default_decrypt_noise

__all__ = ["Context"]


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
            warn_always(msg, InsecureParametersWarning, stacklevel=2)  # loud: never deduplicated
        mode = default_decrypt_noise() if decrypt_noise is None else decrypt_noise
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
            raise TypeError(f"{what} must be a hemlp.fhe.{cls.__name__}, got {type(x).__name__}")
        if x.param_hash != self._hash:
            raise ContextMismatchError(f"the {what} belongs to another parameter set than this context; "
                                       "use the context it was made with")
        return x.native

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
        return NOISE_CODES[mode], sigma, info

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

    def add_inplace(self, a: Ciphertext, b: Ciphertext) -> Ciphertext:
        """a += b in a's own memory (no new ciphertext; every other reference to a sees the sum); returns a. The
        checks of add come first: a is unchanged when they raise."""
        self._e.add_inplace(self._ct(a), self._unwrap(b, Ciphertext, "second ciphertext"))
        return a

    def sub_inplace(self, a: Ciphertext, b: Ciphertext) -> Ciphertext:
        """a -= b in a's own memory; returns a (see add_inplace)."""
        self._e.sub_inplace(self._ct(a), self._unwrap(b, Ciphertext, "second ciphertext"))
        return a

    def negate_inplace(self, a: Ciphertext) -> Ciphertext:
        """a = -a in a's own memory; returns a."""
        self._e.negate_inplace(self._ct(a))
        return a

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
        if rescale:
            self._e.rescale_inplace(out)   # the product is this call's own: no second copy
        return self._w(Ciphertext, out)

    def mul_plain_inplace(self, a: Ciphertext, b, rescale: bool = False) -> Ciphertext:
        """a *= b in a's own memory for b a Plaintext, array or scalar (encoded as mul encodes it); returns a. The
        checks of mul come first: a is unchanged when they raise. rescale=True then rescales a in place."""
        if isinstance(b, Ciphertext):
            raise TypeError("mul_plain_inplace multiplies by a plaintext, array or scalar; use mul for ciphertexts")
        if rescale and a.level == 0:   # checked before the product, which would already have changed a
            raise LevelError("mul_plain_inplace: rescale=True at level 0, no modulus left to divide by; choose a "
                             "parameter set with more levels (a deeper preset) or bootstrap")
        pt = self._as_plain(a, b, float(self.modulus(a.level)))
        self._e.mul_plain_inplace(self._ct(a), self._unwrap(pt, Plaintext, "plaintext"))
        if rescale:
            self._e.rescale_inplace(self._ct(a))
        return a

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

    def rescale_inplace(self, a: Ciphertext) -> Ciphertext:
        """rescale into a's own memory (level - 1, scale / q_level); returns a, unchanged when it raises."""
        self._e.rescale_inplace(self._ct(a))
        return a

    def drop_level(self, a: Ciphertext, level: int) -> Ciphertext:
        """Discard primes down to `level` (no scale change)."""
        return self._w(Ciphertext, self._e.drop_to_level(self._ct(a), int(level)))

    def with_scale(self, a: Ciphertext, scale: float) -> Ciphertext:
        """a's polynomials tagged with another scale (no arithmetic: for a scale equal up to floating-point rounding,
        e.g. after a rescale by an exact prime)."""
        return self._w(Ciphertext, self._e.with_scale(self._ct(a), float(scale)))

    def set_scale(self, a: Ciphertext, scale: float) -> Ciphertext:
        """Bring a to the given scale by multiplying with round(scale*q/a.scale) and rescaling (one level)."""
        q = self.modulus(a.level)
        k = round(scale * q / a.scale)
        if not 1 <= k < (1 << 62):
            raise EncodingError("set_scale: the scale ratio is out of range for one multiply-and-rescale step")
        c = self._e.mul_integer(self._ct(a), k)
        self._e.rescale_inplace(c)
        return self._w(Ciphertext, self._e.with_scale(c, float(scale)))

    def rotate(self, a: Ciphertext, step: int, keys: GaloisKeys) -> Ciphertext:
        """Left rotation of the slots by `step` (negative: right)."""
        if keys is None:
            raise MissingKeyError(f"rotate needs rotation keys: ctx.rotation_keys(sk, [{step}])")
        g = self._e.galois_element(int(step))
        return self._w(Ciphertext, self._e.apply_galois(self._ct(a), g, self._unwrap(keys, GaloisKeys, "Galois keys")))

    def rotate_inplace(self, a: Ciphertext, step: int, keys: GaloisKeys) -> Ciphertext:
        """rotate into a's own memory (its temporaries come from the context's scratch pool); returns a, unchanged
        when it raises."""
        if keys is None:
            raise MissingKeyError(f"rotate needs rotation keys: ctx.rotation_keys(sk, [{step}])")
        g = self._e.galois_element(int(step))
        self._e.apply_galois_inplace(self._ct(a), g, self._unwrap(keys, GaloisKeys, "Galois keys"))
        return a

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
