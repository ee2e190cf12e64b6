"""EvalMod on PolyEvaluator (Python level): the Han–Ki cosine interpolant plus double angles
(BOOTSTRAP.md §1.3 steps 5–6, Lattigo CosDiscrete). The bootstrapper uses hemlp.bootstrap.evalmod
(native constant paths) when it is present and this module otherwise; the maths is the same.

Input: real slots t = u/K, u = I + ε (I integer, |I| < K, |ε| <= 2^-R), at any scale.
Output: ct.level − depth levels, scale == out_scale, slots ≈ sin(2πu)/(2π).

- p(t) = a0·cos(2π(Kt − 1/4)/2^r), a0 = (2π)^(-1/2^r), interpolated at the 2K − 1 nodes {0} ∪
  {±(i + 2^-R)}, degree 2K − 2 (30), in the Chebyshev basis on [−1, 1]; solved with mpmath at 256 bits
  (float64 least squares loses ~20 bits);
- double angle r times: y ← 2y² − a0^(2^(i+1)), so y = a0^(2^r)·cos(2π(u − 1/4)) = sin(2πu)/(2π);
- scales: S_r = out_scale, S_i = sqrt(S_(i+1)·q_(ℓ_i)) where ℓ_i is the level the i-th squaring
  rescales at; the polynomial is evaluated at S_0 exactly, so the squarings land on out_scale.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from hemlp.ckks import Ciphertext, Context
from hemlp.errors import LevelError, MissingKeyError
from hemlp.polyeval import PolyEvaluator
from hemlp.polyeval import depth as poly_depth

__all__ = ["EvalModParams", "eval_mod", "hanki_coefficients", "eval_mod_cleartext"]


class EvalModParams:
    def __init__(self, K: int = 16, degree: int = 30, double_angles: int = 3, log_message_ratio: int = 8):
        self.K, self.degree, self.double_angles = int(K), int(degree), int(double_angles)
        self.log_message_ratio = int(log_message_ratio)

    depth = property(lambda self: poly_depth(self.degree) + self.double_angles)


@functools.lru_cache(maxsize=8)
def hanki_coefficients(K: int, degree: int, double_angles: int, log_message_ratio: int) -> tuple:
    import mpmath as mp

    with mp.workprec(256):
        r = double_angles
        a0 = (1 / (2 * mp.pi)) ** (mp.mpf(1) / 2 ** r)
        off = mp.mpf(2) ** -log_message_ratio
        nodes = [mp.mpf(0)] + [s * (i + off) for i in range(1, K) for s in (1, -1)]
        if len(nodes) != degree + 1:
            raise ValueError(f"the Han–Ki nodes give degree {len(nodes) - 1}, not {degree}: use degree = 2K − 2")
        T = mp.matrix(degree + 1, degree + 1)
        for a, x in enumerate(nodes):
            for k in range(degree + 1):
                T[a, k] = mp.chebyt(k, x / K)
        y = mp.matrix([a0 * mp.cos(2 * mp.pi * (x - mp.mpf(1) / 4) / 2 ** r) for x in nodes])
        c = mp.lu_solve(T, y)
        return tuple(float(v) for v in c), float(a0)


def eval_mod_cleartext(u, params: EvalModParams) -> np.ndarray:
    """The same computation in float64 (oracle for the homomorphic one)."""
    c, a0 = hanki_coefficients(params.K, params.degree, params.double_angles, params.log_message_ratio)
    y = np.polynomial.chebyshev.chebval(np.asarray(u) / params.K, c)
    for i in range(params.double_angles):
        y = 2 * y * y - a0 ** (2 ** (i + 1))
    return y


def eval_mod(ctx: Context, ct: Ciphertext, relin_key, params: EvalModParams, out_scale: float) -> Ciphertext:
    if relin_key is None:
        raise MissingKeyError("eval_mod needs a relinearisation key at the EvalMod level: ctx.relin_key(sk, level)")
    if ct.level < params.depth:
        raise LevelError(f"EvalMod uses {params.depth} levels; the ciphertext is at level {ct.level}")
    c, a0 = hanki_coefficients(params.K, params.degree, params.double_angles, params.log_message_ratio)
    lp = ct.level - poly_depth(params.degree)        # level of the polynomial's output
    r = params.double_angles
    scales = [float(out_scale)]
    for i in reversed(range(r)):                      # squaring i rescales at level lp − i
        scales.insert(0, math.sqrt(scales[0] * ctx.modulus(lp - i)))
    y = PolyEvaluator(ctx, relin_key).evaluate(ct, np.array(c), basis="chebyshev", scale=scales[0])
    for i in range(r):
        y = ctx.mul(y, y, relin_key, rescale=True)
        y = ctx.mul_integer(y, 2)
        y = ctx.add(y, -(a0 ** (2 ** (i + 1))))
    rel = abs(y.scale / out_scale - 1)
    if rel > 2.0 ** -32:
        raise AssertionError(f"eval_mod: scale drift {rel:g}")
    return ctx.wrap(Ciphertext, ctx.native.with_scale(ctx.unwrap(y, Ciphertext, "ciphertext"), float(out_scale)))
