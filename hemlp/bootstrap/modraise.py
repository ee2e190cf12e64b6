"""Bootstrapping's bottom-of-the-chain steps (docs/design/bootstrap.md §1.3, steps 0–2).

- scale_down: bring a ciphertext to level 0 with scale Δ0' ≈ q0 / 2^R (tracked exactly, never rounded
  to the nominal value);
- EncapsulationKeys: the two public keys of the sparse-secret encapsulation, made on the client from the
  secret key; the ephemeral sparse secret s' (Hamming weight h, fresh CSPRNG draw) exists only inside
  them and is wiped by the core when they are made;
- dense_to_sparse: key switch s → s' at level 0 over {q0, p0} (the only key under s' has <= 121 bits);
- mod_raise: the centred lift of both polynomials from q0 to Q_target, fused with the 1-digit switch
  s' → s; decrypts to t = m + e + q0·I with |I| <= (h+1)/2.
"""
from __future__ import annotations

import math

from hemlp import _core
from hemlp.fhe import Ciphertext, Context, SecretKey
from hemlp.errors import ContextMismatchError, LevelError, MissingKeyError, ScaleMismatchError

__all__ = ["EncapsulationKeys", "scale_down", "scale_down_factor", "dense_to_sparse", "mod_raise"]


class EncapsulationKeys:
    """The dense→sparse key over {q0, p0} and the 1-digit sparse→dense key over Q_level ∪ P (public
    evaluation keys; the sparse secret itself is not kept anywhere)."""

    def __init__(self, ctx: Context, sk: SecretKey, h: int = 32, level: int | None = None, *, native=None):
        if native is None:
            lv = ctx.max_level if level is None else int(level)
            native = _core.encapsulation_keys(ctx.native, ctx.unwrap(sk, SecretKey, "secret key"), int(h), lv)
        self._obj = native
        self.param_hash = ctx.hash

    def export(self, ctx: Context) -> tuple:
        """(header dict, [small_b, small_a, big_b, big_a]) for a container (BootstrapKeys.to_bytes)."""
        o = self._obj
        header = dict(key_id=f"{o.key_id:016x}", sparse_id=f"{o.sparse_id:016x}", h=o.hamming_weight, level=o.level)
        return header, list(_core.export_encapsulation_keys(ctx.native, o))

    @classmethod
    def restore(cls, ctx: Context, header: dict, arrays: list) -> "EncapsulationKeys":
        """The inverse of export (residues validated by the core; SerializationError on any defect)."""
        from hemlp.fhe import serialize as ser
        from hemlp.errors import SerializationError

        if len(arrays) != 4:
            raise SerializationError("encapsulation keys: expected 4 arrays; the data is corrupted")
        try:
            ids = int(ser.field(header, "key_id", str), 16), int(ser.field(header, "sparse_id", str), 16)
        except ValueError:
            raise SerializationError("encapsulation keys: malformed key id; the data is corrupted") from None
        native = _core.import_encapsulation_keys(ctx.native, *arrays, ids[0], ids[1], ser.field(header, "h", int),
                                                 ser.field(header, "level", int))
        return cls(ctx, None, native=native)

    native = property(lambda self: self._obj)
    level = property(lambda self: self._obj.level)
    key_id = property(lambda self: self._obj.key_id)
    hamming_weight = property(lambda self: self._obj.hamming_weight)
    nbytes = property(lambda self: self._obj.nbytes)

    def __repr__(self):
        return (f"EncapsulationKeys(id={self.key_id:016x}, h={self.hamming_weight}, level={self.level}, "
                f"{self.nbytes / 2**20:.1f} MiB)")


def _keys(ctx: Context, keys) -> object:
    if not isinstance(keys, EncapsulationKeys):
        raise MissingKeyError("this step needs the bootstrapping encapsulation keys: "
                              "hemlp.bootstrap.EncapsulationKeys(ctx, sk) (or BootstrapKeys.generate)")
    if keys.param_hash != ctx.hash:
        raise ContextMismatchError("the encapsulation keys belong to another parameter set than this context")
    return keys.native


def scale_down_factor(ctx: Context, ct: Ciphertext, log_message_ratio: int) -> int:
    """The integer c of ScaleDown: round(Δ0·q1/Δ_in) from level >= 1, floor(q0/(2^R·Δ_in)) at level 0."""
    q0 = ctx.modulus(0)
    if ct.level >= 1:
        return round(q0 / 2.0 ** log_message_ratio * ctx.modulus(1) / ct.scale)
    return math.floor(q0 / (2.0 ** log_message_ratio * ct.scale))


def checked_scale_down_factor(ctx: Context, ct, log_message_ratio: int) -> int:
    """scale_down_factor, or ScaleMismatchError when no single integer step reaches q0 / 2^R (ct: anything with a
    level and a scale, a device ciphertext too)."""
    c = scale_down_factor(ctx, ct, log_message_ratio)
    if c < 1:
        raise ScaleMismatchError(f"ScaleDown: the scale 2^{math.log2(ct.scale):.1f} at level {ct.level} is above "
                                 f"q0/2^R = 2^{math.log2(ctx.modulus(0)) - log_message_ratio:.1f}; bootstrap from a "
                                 "level >= 1 or at a smaller scale")
    if c >= 1 << 62:
        raise ScaleMismatchError(f"ScaleDown: the scale 2^{math.log2(ct.scale):.1f} is too small to reach "
                                 f"q0/2^R in one step; rescale or set_scale first")
    return c


def scale_down(ctx: Context, ct: Ciphertext, log_message_ratio: int) -> Ciphertext:
    """ct at level 0 with scale Δ0' = Δ_in·c/q1 (level >= 1; one rescale) or Δ_in·c (level 0; exact,
    no level), c = scale_down_factor(...), so that Δ0' ≈ q0 / 2^R. The plaintext is unchanged."""
    c = checked_scale_down_factor(ctx, ct, log_message_ratio)
    if ct.level > 1:
        ct = ctx.drop_level(ct, 1)
    # mul_integer multiplies the plaintext, not the tag: the tag follows (scale·c, exact in a double)
    scaled = ctx.native.with_scale(ctx.unwrap(ctx.mul_integer(ct, c), Ciphertext, "ciphertext"), ct.scale * c)
    scaled = ctx.wrap(Ciphertext, scaled)
    return ctx.rescale(scaled) if ct.level >= 1 else scaled


def dense_to_sparse(ctx: Context, ct: Ciphertext, keys: EncapsulationKeys) -> Ciphertext:
    """ct (level 0, under s) re-encrypted under the sparse secret s' (tagged so that decrypting it with s
    raises KeyMismatchError); error <= q0·σ·√N/p0 + rounding (T1: < 2^12)."""
    k = _keys(ctx, keys)
    if ct.level != 0:
        raise LevelError(f"dense_to_sparse runs at level 0 (ScaleDown first); the ciphertext is at level {ct.level}")
    return ctx.wrap(Ciphertext, _core.dense_to_sparse(ctx.native, ctx.unwrap(ct, Ciphertext, "ciphertext"), k))


def mod_raise(ctx: Context, ct: Ciphertext, keys: EncapsulationKeys, level: int | None = None) -> Ciphertext:
    """ct (the output of dense_to_sparse) lifted to `level` (default: the keys' level) under s again.

    Same scale and metadata; decrypts over Q_level to t = m + e + q0·I, t ≡ m + e (mod q0)."""
    k = _keys(ctx, keys)
    lv = keys.level if level is None else int(level)
    return ctx.wrap(Ciphertext, _core.mod_raise(ctx.native, ctx.unwrap(ct, Ciphertext, "ciphertext"), k, lv))
