"""Exact, level-free ciphertext operations the homomorphic DFT needs on top of hemlp.fhe.

- retag: the same polynomials under other metadata (slot count, encoding, scale, complex flag).
  CoeffToSlot reads a coefficient-encoded ciphertext as a slot-encoded one (the bits do not
  change, only how decryption interprets them); SlotToCoeff does the converse.
- mul_monomial: multiplication by X^k in Z[X]/(X^N + 1), exact (a signed cyclic shift of the
  coefficients of every polynomial, no noise, no level). X^(N/2) evaluates to i at every
  primitive 2N-th root ζ^(5^j) (5^j ≡ 1 mod 4), so it multiplies every slot by i, for full and
  sparse packing alike (X^(N/2) lies in every subring Z[X^gap]).

Both go through the core's validated ciphertext import (the residues are copied once).
"""
from __future__ import annotations

import numpy as np

from hemlp import _core
from hemlp.errors import UnsupportedError
from hemlp.fhe import Ciphertext, Context

__all__ = ["retag", "mul_monomial"]

_ENC = {"slot": _core.Encoding.slot, "coeff": _core.Encoding.coeff}


def retag(ctx: Context, ct: Ciphertext, *, slots: int | None = None, encoding: str | None = None,
          scale: float | None = None, is_complex: bool | None = None, polys=None) -> Ciphertext:
    """ct's polynomials (or `polys`, arrays (level+1, N) in the NTT domain) with new metadata. A context of
    another kind (hemlp.gpu.context.DeviceContext) re-tags its own ciphertexts (its retag; no `polys`)."""
    if not isinstance(ctx, Context) and hasattr(ctx, "retag"):
        if polys is not None:
            raise UnsupportedError("retag(polys=...) replaces the polynomials of a hemlp.fhe.Context's ciphertext; "
                                   f"a {type(ctx).__name__} re-tags its own ciphertexts' metadata only")
        return ctx.retag(ct, slots=slots, encoding=encoding, scale=scale, is_complex=is_complex)
    o = ctx.unwrap(ct, Ciphertext, "ciphertext")
    encoding = ct.encoding if encoding is None else encoding
    if slots is None:
        slots = ctx.N if encoding == "coeff" else ct.slots
    polys = [o.poly(j) for j in range(o.size)] if polys is None else list(polys)
    obj = ctx.native.import_ciphertext(polys, o.level, float(ct.scale if scale is None else scale), int(slots),
                                   _ENC[encoding], bool(o.is_complex if is_complex is None else is_complex),
                                   o.key_id, None)
    return ctx.wrap(Ciphertext, obj)


def mul_monomial(ctx: Context, ct: Ciphertext, k: int, **meta) -> Ciphertext:
    """ct · X^k (k any integer, taken mod 2N); `meta` is passed to retag (e.g. scale, is_complex)."""
    N = ctx.N
    k %= 2 * N
    o = ctx.unwrap(ct, Ciphertext, "ciphertext")
    dst = (np.arange(N) + k) % (2 * N)
    neg = dst >= N           # X^(i+k) = -X^(i+k-N)
    dst %= N
    polys = []
    for j in range(o.size):
        P = o.poly(j)
        out = np.empty_like(P)
        for limb in range(P.shape[0]):
            q = np.uint64(ctx.modulus(limb))
            c = ctx.intt(P[limb], limb)
            c = np.where(neg & (c != 0), q - c, c)
            s = np.empty_like(c)
            s[dst] = c
            out[limb] = ctx.ntt(s, limb)
        polys.append(out)
    return retag(ctx, ct, polys=polys, **meta)
