"""Projection onto the sparse-packing subring Z[X^gap], gap = N/(2n), by a trace (sum of automorphisms).

Sparse CoeffToSlot (n < N/2 slots) reads only the coefficients at multiples of gap; in
bootstrapping, ModRaise leaves q0·I(X) on every coefficient, so those must be cleared first.
The automorphisms σ_g: X ↦ X^g with g ≡ 1 mod 4n are exactly σ_(5^(n·t)), t < gap (5 has order
n mod 4n), and

    Σ_(t<gap) σ_(5^(n·t))(X^e) = gap·X^e if gap | e, else 0

(σ_g fixes X^(gap·e') since gap·g ≡ gap mod 2N; on the other exponents the sum is a sum of
the 2^s-th roots of unity for some s >= 1). Rotate-and-add with steps n, 2n, ..., (gap/2)·n
computes that sum with log2(gap) rotations; the factor gap is carried exactly in the scale.
"""
from __future__ import annotations

from hemlp.he.reinterpret import retag
from hemlp.he.special_fft import log2_exact
from hemlp.fhe import Ciphertext, Context, GaloisKeys
from hemlp.errors import MissingKeyError, ShapeError

__all__ = ["subring_trace_steps", "subring_trace"]


def subring_trace_steps(N: int, slots: int) -> list[int]:
    """Rotation steps subring_trace needs: n·2^t for 2^t < gap (empty for full packing)."""
    n, half = int(slots), int(N) // 2
    log2_exact(n)
    if n > half:
        raise ShapeError(f"{n} slots exceed N/2 = {half}")
    steps, s = [], n
    while s < half:
        steps.append(s)
        s *= 2
    return steps


def subring_trace(ctx: Context, ct: Ciphertext, keys: GaloisKeys, slots: int) -> Ciphertext:
    """ct with every coefficient off the multiples of gap = N/(2·slots) cleared (no level used).

    Returns ct's metadata (encoding, slots) unchanged and the scale multiplied by gap, so the
    decrypted values at multiples of gap are those of ct."""
    steps = subring_trace_steps(ctx.N, slots)
    if not steps:
        return ct
    if keys is None:
        raise MissingKeyError(f"subring_trace needs rotation keys: ctx.rotation_keys(sk, {steps})")
    acc = retag(ctx, ct, slots=ctx.slots, encoding="slot")  # full-slot view: step s is X -> X^(5^s)
    for s in steps:
        acc = ctx.add(acc, ctx.rotate(acc, s, keys))
    gap = ctx.N // (2 * int(slots))
    return retag(ctx, acc, slots=ct.slots, encoding=ct.encoding, scale=ct.scale * gap, is_complex=ct.is_complex)
