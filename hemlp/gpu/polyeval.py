"""Polynomial evaluation on device ciphertexts (Chebyshev or power basis), depth-optimal and landing on an exact
scale: the schedule of the CPU core's evaluate_polynomial (csrc/boot/polyeval.cpp), step for step, over the
CudaEvaluator's operations, each of which equals the CPU's bit for bit, so the result does too.

Powers B_n = B_a B_b (a the largest power of two below n; Chebyshev T_n = 2 T_a T_b - T_(a-b), the correction joined
before the product's rescale); an operand is first multiplied by an exact integer when the product's scale would
fall below half the next prime; p = L + B_m H split recursively, a node whose powers are all available one level up
evaluated as one linear combination of exact integer constants, then rescaled.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from hemlp.errors import EncodingError, LevelError, MissingKeyError, ParameterError, ScaleMismatchError
from hemlp.gpu.device import CudaEvaluator, DeviceCiphertext, DeviceKey, const_residues

MIN_TARGET_SCALE = 65536.0  # 2^16
BASES = ("chebyshev", "power")


def poly_depth(degree: int) -> int:
    """Levels a degree-d polynomial consumes: ceil(log2(d + 1)) (0 for a constant)."""
    return max(int(degree), 0).bit_length()


def _ceil_log2(n: int) -> int:
    return (int(n) - 1).bit_length()


def _trimmed(c: list) -> list:
    n = len(c)
    while n > 1 and c[n - 1] == 0:
        n -= 1
    return list(c[:max(n, 1)])


@dataclass
class PolyEvalStats:
    ct_mul: int = 0     # ciphertext products (relinearised and rescaled)
    const_mul: int = 0  # constant multiplications (linear-combination terms and corrections)
    rescale: int = 0    # standalone rescales


@dataclass
class _Runner:
    dev: CudaEvaluator
    rlk: DeviceKey | None
    chebyshev: bool
    top: int
    baby: int
    pw: dict = field(default_factory=dict)
    stats: PolyEvalStats = field(default_factory=PolyEvalStats)

    def q(self, level: int) -> float:
        return float(self.dev.spec.q[level])

    def at_level(self, c: DeviceCiphertext, level: int) -> DeviceCiphertext:
        return c if c.level == level else self.dev.drop_level(c, level)

    def level_of(self, n: int) -> int:
        return self.top - _ceil_log2(n)

    def check_target(self, scale: float, level: int) -> None:
        if not (scale >= MIN_TARGET_SCALE) or not math.isfinite(scale):
            raise ScaleMismatchError(
                f"polynomial evaluation: a derived target scale at level {level} is 2^{math.log2(scale):.2f}, too "
                f"small to hold the result above the noise; bring the input to a scale <= q_{self.top}, or ask for "
                "a larger target scale")

    def retag(self, c: DeviceCiphertext, scale: float) -> DeviceCiphertext:
        if abs(c.scale / scale - 1.0) > 1e-9:
            raise ScaleMismatchError(f"polynomial evaluation: internal scale drift {c.scale} vs {scale}")
        return self.dev.with_scale(c, scale)

    def split(self, c: list, m: int) -> tuple:
        deg = len(c) - 1
        low, high = list(c[:m]), [0.0] * (deg - m + 1)
        if not self.chebyshev:
            for i in range(m, deg + 1):
                high[i - m] = c[i]
            return low, high
        high[0] = c[m]
        for i in range(m + 1, deg + 1):  # T_i = 2 T_m T_(i-m) - T_(2m-i)
            high[i - m] += 2.0 * c[i]
            low[2 * m - i] -= c[i]
        return low, high

    def power(self, n: int) -> DeviceCiphertext:
        if n in self.pw:
            return self.pw[n]
        a = 1
        while 2 * a < n:
            a *= 2
        b = n - a
        ta, tb = self.power(a), self.power(b)
        lv = min(ta.level, tb.level)
        if lv < 1:
            raise LevelError(f"polynomial evaluation: power {n} needs a level below 0: not enough levels for this "
                             "degree")
        A, B = self.at_level(ta, lv), self.at_level(tb, lv)
        ql, qn = self.q(lv), self.q(lv - 1)
        natural = A.scale * B.scale / ql
        k = 1.0
        if natural < qn / 2:
            k = min(math.floor(qn / natural), 1152921504606846976.0)  # 2^60: 2k fits an int64
        factor = int(k) * (2 if self.chebyshev else 1)
        dev = self.dev
        if factor != 1:
            A = dev.with_scale(dev.mul_integer(A, factor), A.scale * k)  # the 2 of 2 T_a T_b is part of the value
        c = a - b if self.chebyshev else 0
        if c == 0:
            p = dev.mul(A, B, self.rlk, rescale=True)
            if self.chebyshev:
                p = dev.add_const_exact(p, -1.0)
        else:  # 2 T_a T_b - T_c: T_c joins the product before its rescale (one rounding)
            p = dev.mul(A, B, self.rlk)
            tcd = self.at_level(self.power(c), lv)
            corr = self.retag(dev.mul_const(tcd, 1.0, p.scale / tcd.scale), p.scale)
            self.stats.const_mul += 1
            p = dev.rescale(dev.sub(p, corr))
        self.stats.ct_mul += 1
        self.pw[n] = p
        return p

    def linear_combination(self, c: list, level: int, scale: float) -> DeviceCiphertext:
        dev, lv = self.dev, level + 1
        big = scale * self.q(lv)
        moduli = [dev.spec.q[k] for k in range(lv + 1)]
        terms = []
        for i in range(1, len(c)):
            if c[i] == 0:
                continue
            t = self.power(i)
            terms.append((t, const_residues(c[i], big / t.scale, moduli)))
            self.stats.const_mul += 1
        w0 = const_residues(c[0], big, moduli)
        x = self.pw[1]
        polys = []
        for j in range(2):
            acc = dev.scalar_multiply(terms[0][0].polys[j], lv, terms[0][1])
            for t, w in terms[1:]:
                dev.scalar_multiply_add(acc, t.polys[j], lv, w)
            polys.append(dev.scalar_add(acc, lv, w0) if j == 0 else acc)
        acc = DeviceCiphertext(polys, lv, big, x.slots, x.encoding, x.is_complex, x.key_id, x.param_hash)
        out = dev.rescale(acc)
        self.stats.rescale += 1
        return self.retag(out, scale)

    def eval(self, coeffs: list, level: int, scale: float) -> tuple:
        """(ciphertext or None, constant): None when the polynomial is the constant."""
        c = _trimmed(coeffs)
        deg = len(c) - 1
        if deg == 0:
            return None, c[0]
        self.check_target(scale, level)
        direct = True
        for i in range(1, deg + 1):
            if not direct:
                break
            if c[i] != 0:
                direct = self.level_of(i) >= level + 1 and (i <= self.baby or (i & (i - 1)) == 0 or i in self.pw)
        if direct:
            return self.linear_combination(c, level, scale), 0.0
        m = 1
        while 2 * m <= deg:
            m *= 2
        low, high = self.split(c, m)
        tm = self.power(m)
        lv = level + 1
        if tm.level < lv:
            raise LevelError(f"polynomial evaluation: T_{m} is at level {tm.level}, below the level {lv} it is "
                             "needed at: not enough levels for this degree")
        tm_d = self.at_level(tm, lv)
        h_scale = scale * self.q(lv) / tm_d.scale
        h, h_const = self.eval(high, lv, h_scale)
        dev = self.dev
        if h is not None:
            prod = dev.mul(h, tm_d, self.rlk, rescale=True)
            self.stats.ct_mul += 1
        else:  # H is a constant: c T_m
            self.check_target(h_scale, lv)
            prod = dev.rescale(dev.mul_const(tm_d, h_const, h_scale))
            self.stats.const_mul += 1
            self.stats.rescale += 1
        prod = self.retag(prod, scale)
        lo, l_const = self.eval(low, level, scale)
        out = dev.add(prod, lo) if lo is not None else prod
        if l_const != 0:
            out = dev.add_const_exact(out, l_const)
        return out, 0.0


def evaluate_polynomial(dev: CudaEvaluator, x: DeviceCiphertext, coeffs, basis: str, rlk: DeviceKey | None,
                        target_scale: float, target_level: int = -1, stats: PolyEvalStats | None = None
                        ) -> DeviceCiphertext:
    """p(x) at `target_level` (-1: x.level - poly_depth(degree)) and exactly `target_scale`, as the CPU core's
    evaluate_polynomial (same operations, same words)."""
    if basis not in BASES:
        raise ParameterError(f"polynomial evaluation: basis must be one of {BASES}, got {basis!r}")
    if x.size != 2:
        raise ParameterError("polynomial evaluation needs a relinearised ciphertext (2 polynomials)")
    if x.encoding != 0:
        raise EncodingError("polynomial evaluation acts on slot-encoded ciphertexts only")
    c = [float(v) for v in coeffs] or [0.0]
    if not all(math.isfinite(v) for v in c):
        raise EncodingError("polynomial evaluation: a coefficient is NaN or infinite")
    c = _trimmed(c)
    deg = len(c) - 1
    if deg == 0:
        raise EncodingError("a constant polynomial has no ciphertext to evaluate; add the constant instead")
    need, top = poly_depth(deg), x.level
    if target_level < 0:
        target_level = top - need
    if target_level < 0 or target_level > top - need:
        raise LevelError(f"a degree-{deg} polynomial needs {need} levels but the ciphertext is at level {top}")
    if not (math.isfinite(target_scale) and target_scale > 0):
        raise ScaleMismatchError("polynomial evaluation: the target scale must be positive and finite")
    if deg >= 2:
        if rlk is None:
            raise MissingKeyError("polynomial evaluation needs a device relinearisation key (upload_relin_key)")
        dev.check_key(rlk, x, 0, "polynomial evaluation (relinearisation)")
    q_top = float(dev.spec.q[top])
    x0 = x
    if x.scale < q_top / 2:
        k = min(math.floor(q_top / x.scale), 4611686018427387904.0)  # 2^62
        x0 = dev.with_scale(dev.mul_integer(x, int(k)), x.scale * k)
    t = max(need, 1)
    run = _Runner(dev, rlk, basis == "chebyshev", top, 1 << ((t + 1) // 2), {1: x0})
    out, _ = run.eval(c, target_level, float(target_scale))
    if stats is not None:
        stats.ct_mul, stats.const_mul, stats.rescale = run.stats.ct_mul, run.stats.const_mul, run.stats.rescale
    return out
