"""Homomorphic polynomial evaluation on CKKS ciphertexts with exact scales and optimal depth.

    from hemlp.he import polynomial
    ev = polynomial.PolyEvaluator(ctx, relin_key)
    y = ev.evaluate(ct, coeffs, basis="chebyshev")     # p(x) = sum_i c_i T_i(x), x in [-1, 1]
    polynomial.depth(len(coeffs) - 1)                    # = ceil(log2(deg + 1)) levels
    y = polynomial.evaluate_native(ctx, ct, coeffs, relin_key)   # the same algorithm in C++ (csrc/boot/polyeval)

Algorithm (baby-step / giant-step, Lattigo-style targets, docs/design/pcmm-and-planning.md §6.3):

* powers T_n (Chebyshev) or x^n (power basis) are computed on demand with depth ceil(log2 n):
  T_{a+b} = 2 T_a T_b - T_{a-b} with a the largest power of two below n; the correction term
  T_{a-b} is brought to the product's scale *inside* the same rescale (a plaintext 1 encoded at
  scale s_a s_b / s_{a-b}), so no extra level is spent;
* p is split recursively as p = L + T_m H (m a power of two): H is evaluated one level higher at
  target scale S q_(l+1) / s_m so that the product lands at (level l, scale S) exactly; L is
  evaluated at (l, S) directly. A node with a spare level and degree below the baby-step bound is
  evaluated directly as sum_i c_i T_i with every constant taken at scale S q_(l+1) / s_i, so the
  one rescale gives scale S exactly;
* the result is at level  ct.level - ceil(log2(deg + 1))  and at the requested scale (default:
  the input's scale), with no scale drift and no set_scale.

Zero coefficients are skipped (odd/even polynomials cost fewer multiplications). Constants are
multiplied and added with the context's constant fast paths (an exact integer per limb, no encoding).

evaluate_native runs the C++ port (fused mul_relin_rescale where no Chebyshev correction joins the
product, linear combinations accumulated in place with exact integer constants); it also lifts
inputs whose scale is far below the top prime by an exact integer and keeps the power scales near
the primes, and it raises ScaleMismatchError when the input scale is so far above the primes that
the derived target scales collapse.
"""
from __future__ import annotations

import math

import numpy as np

from hemlp import _core
from hemlp.fhe import Ciphertext, RelinKey
from hemlp.errors import EncodingError, LevelError, MissingKeyError

__all__ = ["PolyEvaluator", "depth", "evaluate", "evaluate_native", "cheb_to_power", "power_to_cheb"]

_ZERO_TOL = 0.0


def depth(degree: int) -> int:
    """Levels a degree-d polynomial consumes: ceil(log2(d + 1)) (0 for a constant)."""
    degree = int(degree)
    return 0 if degree <= 0 else math.ceil(math.log2(degree + 1))


def _trim(c) -> np.ndarray:
    c = np.asarray(c, dtype=np.float64).reshape(-1)
    if c.size == 0:
        return np.zeros(1)
    nz = np.nonzero(np.abs(c) > _ZERO_TOL)[0]
    return c[: nz[-1] + 1] if nz.size else c[:1] * 0


def cheb_to_power(c) -> np.ndarray:
    return np.polynomial.chebyshev.cheb2poly(np.asarray(c, dtype=np.float64))


def power_to_cheb(c) -> np.ndarray:
    return np.polynomial.chebyshev.poly2cheb(np.asarray(c, dtype=np.float64))


def _split(c: np.ndarray, m: int, basis: str):
    """p = L + B_m * H with deg L < m (power) / < m (Chebyshev), deg H = deg p - m."""
    if basis == "power":
        return c[:m].copy(), c[m:].copy()
    low = c[:m].copy()
    high = np.zeros(len(c) - m)
    high[0] = c[m]
    for i in range(m + 1, len(c)):
        high[i - m] += 2.0 * c[i]          # T_i = 2 T_m T_{i-m} - T_{2m-i}
        low[2 * m - i] -= c[i]
    return low, high


class PolyEvaluator:
    """Evaluates polynomials on ciphertexts of one context (server side: needs the relin key)."""

    def __init__(self, ctx, relin_key, baby_bound: int | None = None):
        self.ctx, self.rlk = ctx, relin_key
        self.baby_bound = baby_bound
        self.stats = {"ct_mul": 0, "pt_mul": 0}

    # ---- helpers
    def _drop(self, ct, level):
        return ct if ct.level == level else self.ctx.drop_level(ct, level)

    def _mul_ct(self, a, b):
        if self.rlk is None:
            raise MissingKeyError("polynomial evaluation needs a relinearisation key")
        lvl = min(a.level, b.level)
        self.stats["ct_mul"] += 1
        return self.ctx.relinearize(self.ctx.mul(self._drop(a, lvl), self._drop(b, lvl)), self.rlk)

    def _mul_const(self, ct, value, scale):
        """ct * value with the constant at `scale` (exact integer round(value * scale) per limb, no encoding)."""
        if not (scale > 1.0):
            raise EncodingError(f"polyeval: constant scale {scale:g} too small; the input scale is out of range")
        return self.ctx.mul_const(ct, float(value), scale)

    # ---- powers
    def _power(self, n: int):
        if n in self._pw:
            return self._pw[n]
        a = 1 << (n.bit_length() - 1)
        if a == n:  # power of two: square of the half
            h = self._power(n // 2)
            p = self._mul_ct(h, h)
            if self.basis == "chebyshev":
                p = self.ctx.add(p, p)
                p = self.ctx.add_const(p, -1.0)       # at p's level and scale
        else:
            ta, tb = self._power(a), self._power(n - a)
            p = self._mul_ct(ta, tb)
            if self.basis == "chebyshev":
                p = self.ctx.add(p, p)
                c = a - (n - a)
                if c == 0:
                    p = self.ctx.add_const(p, -1.0)
                else:
                    tc = self._drop(self._power(c), p.level)
                    corr = self._fix_scale(self._mul_const(tc, 1.0, p.scale / tc.scale), p.scale)
                    p = self.ctx.sub(p, corr)
        p = self.ctx.rescale(p)
        self._pw[n] = p
        return p

    def _level_of(self, n: int) -> int:
        return self._top - depth(n) if n > 1 else self._top

    # ---- recursion
    def _eval(self, c: np.ndarray, level: int, scale: float):
        """Ciphertext of p at exactly (level, scale); None when p is a constant (returned separately)."""
        c = _trim(c)
        deg = len(c) - 1
        if deg == 0:
            return None, float(c[0])
        nz = [i for i in range(1, deg + 1) if c[i] != 0]
        direct = all(self._level_of(i) >= level + 1 and (i <= self._baby or (i & (i - 1)) == 0 or i in self._pw)
                     for i in nz)
        if direct:
            acc = None
            lv = level + 1
            q = float(self.ctx.modulus(lv))
            for i in nz:
                t = self._drop(self._power(i), lv)
                term = self._fix_scale(self._mul_const(t, c[i], scale * q / t.scale), scale * q)
                self.stats["pt_mul"] += 1
                acc = term if acc is None else self.ctx.add(acc, term)
            out = self.ctx.rescale(acc)
            out = self._fix_scale(out, scale)
            if c[0] != 0:
                out = self.ctx.add_const(out, float(c[0]))
            return out, 0.0
        m = 1 << ((deg).bit_length() - 1)   # largest power of two <= deg
        low, high = _split(c, m, self.basis)
        tm = self._power(m)
        if tm.level < level + 1:
            raise LevelError(f"polyeval: T_{m} is at level {tm.level}, below the target {level + 1}: "
                             "not enough levels for this degree")
        lv = level + 1
        tm_d = self._drop(tm, lv)
        h_scale = scale * float(self.ctx.modulus(lv)) / tm_d.scale
        h_ct, h_const = self._eval(high, lv, h_scale)
        if h_ct is None:   # H constant: direct term c * T_m
            prod = self._mul_const(tm_d, h_const, h_scale)
            self.stats["pt_mul"] += 1
        else:
            if h_const:
                raise AssertionError("unreachable: constants are folded into the ciphertext")
            prod = self._mul_ct(h_ct, tm_d)
        prod = self._fix_scale(self.ctx.rescale(prod), scale)
        l_ct, l_const = self._eval(low, level, scale)
        out = prod if l_ct is None else self.ctx.add(prod, l_ct)
        if l_const:
            out = self.ctx.add_const(out, l_const)
        return out, 0.0

    def _fix_scale(self, ct, scale):
        """Rescaling divides by the prime exactly; floating-point rounding of the scale is re-tagged
        only when it is a few ulps away (never a real scale change)."""
        if ct.scale != scale:
            rel = abs(ct.scale / scale - 1.0)
            if rel > 1e-12:
                raise AssertionError(f"polyeval: scale drift {rel:g}")
            ct = self.ctx.with_scale(ct, float(scale))
        return ct

    def evaluate(self, ct, coeffs, basis: str = "chebyshev", scale: float | None = None, level: int | None = None):
        """p(ct) for coefficients in the 'chebyshev' (T_i on [-1, 1]) or 'power' basis.

        The result is at level ct.level - depth(deg) (or the given lower level) and at `scale`
        (default ct.scale), exactly."""
        if basis not in ("chebyshev", "power"):
            raise EncodingError(f"basis must be 'chebyshev' or 'power', got {basis!r}")
        c = _trim(coeffs)
        deg = len(c) - 1
        need = depth(deg)
        target = ct.level - need if level is None else int(level)
        if target < 0 or target > ct.level - need:
            raise LevelError(f"a degree-{deg} polynomial needs {need} levels but the ciphertext is at level "
                             f"{ct.level}" + ("" if target < 0 else f" and the target level is {target}")
                             + f": {max(need - ct.level, 0) or 'adjust the target'} level(s) missing")
        self.basis, self._top, self._slots = basis, ct.level, ct.slots
        self._pw = {1: ct}
        t = max(need, 1)
        self._baby = self.baby_bound or (1 << ((t + 1) // 2))
        scale = ct.scale if scale is None else float(scale)
        if deg == 0:
            raise EncodingError("a constant polynomial has no ciphertext to evaluate; add the constant instead")
        out, const = self._eval(c, target, scale)
        self._pw = {}
        return out


def evaluate(ctx, ct, coeffs, relin_key, basis: str = "chebyshev", scale=None, level=None):
    return PolyEvaluator(ctx, relin_key).evaluate(ct, coeffs, basis=basis, scale=scale, level=level)


def evaluate_native(ctx, ct, coeffs, relin_key, basis: str = "chebyshev", scale=None, level=None,
                    stats: dict | None = None):
    """PolyEvaluator.evaluate in C++ (csrc/boot/polyeval): same result level and exact scale.

    stats, when a dict, receives the operation counts (ct_mul, const_mul, rescale)."""
    if basis not in ("chebyshev", "power"):
        raise EncodingError(f"basis must be 'chebyshev' or 'power', got {basis!r}")
    c = np.asarray(coeffs, dtype=np.float64).reshape(-1)
    x = ctx.unwrap(ct, Ciphertext, "ciphertext")
    rlk = None if relin_key is None else ctx.unwrap(relin_key, RelinKey, "relinearisation key")
    out, st = _core.poly_evaluate(ctx.native, x, c.tolist(), 0 if basis == "chebyshev" else 1, rlk,
                                  float(ct.scale if scale is None else scale), -1 if level is None else int(level))
    if stats is not None:
        stats.update(st)
    return ctx.wrap(Ciphertext, out)
