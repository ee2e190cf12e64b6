"""EvalMod: the homomorphic reduction modulo 1 of CKKS bootstrapping (docs/design/bootstrap.md §1.3, steps 5-6).

    from hemlp.bootstrap.evalmod import EvalModParams, eval_mod, hanki_coefficients
    params = EvalModParams()                 # K = 16, degree 30, 3 double angles, message ratio 2^8
    params.depth                             # 8 levels
    y = eval_mod(ctx, ct, relin_key, params, out_scale)

The input's real slots hold t = u / K with u = I + eps (I integer, |I| < K, |eps| <= 2^-R); the output's
slots hold sin(2 pi u) / (2 pi) = eps + O(eps^3) at level ct.level - params.depth and scale out_scale.

Method (Han-Ki, CT-RSA'20; Lattigo's CosDiscrete):
* p(t) interpolates f(x) = a0 cos(2 pi (x - 1/4) / 2^r), a0 = (2 pi)^(-1/2^r), x = K t, at the 2K - 1 nodes
  {0} ∪ {±(i + 2^-R): 1 <= i <= K - 1}, which sit where u lands: a degree-(2K - 2) Chebyshev series on [-K, K].
  The interpolation system is solved in mpmath at 256 bits (float64 least squares loses 20+ bits) and the
  coefficients are rounded to float64 once per (K, degree, R, r) and cached;
* r double angles y <- 2 y^2 - a0^(2^(i+1)) turn a0 cos(theta / 2^r) into (2 pi)^-1 cos(theta)
  (if y = a cos(phi) then 2 y^2 - a^2 = a^2 cos(2 phi)); cos(2 pi (u - 1/4)) = sin(2 pi u);
* scales (docs/design/bootstrap.md §1.3, F5): the double angle at level l divides by q_l, so S_i = sqrt(S_(i+1) q_l)
  backwards from S_r = out_scale; the polynomial lands on S_0 exactly (hemlp.he.polynomial.evaluate_native) and
  every square lands on S_(i+1) to within a few ulps, which is then re-tagged exactly.

Input scale: the power scales of the polynomial grow as s^n / q^(n-1), so the input must sit at a scale of at
most about the top prime q_(ct.level) (max_input_scale); a lower scale is lifted by an exact integer for free.
A CoeffToSlot that retags to K q0 (2 K q0 after the real/imaginary split, about 2^65 at q0 = 2^60) must land
below that, e.g. by encoding its last level's diagonals at scale q_l * max_input_scale / (2 K q0).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from hemlp import _core
from hemlp.fhe import Ciphertext, Context, RelinKey
from hemlp.errors import EncodingError, LevelError, MissingKeyError, ParameterError, ScaleMismatchError
from hemlp.he.polynomial import depth as poly_depth
from hemlp.he.polynomial import PolyEvaluator, evaluate_native

__all__ = ["EvalModParams", "eval_mod", "hanki_coefficients", "scale_chain", "max_input_scale", "reference"]

#: precision of the interpolation solve (bits); the Vandermonde-like Chebyshev system at the Han-Ki nodes is
#: ill-conditioned, so the solve needs far more than float64
_SOLVE_BITS = 256


@dataclass(frozen=True)
class EvalModParams:
    """Han-Ki cosine + double angle. degree must be 2K - 2 (one node per reachable integer, plus 0).

    K: bound on |I| (the sparse secret's h = 32 gives P(|I| >= 16) = 2^-121.7 per coefficient);
    double_angles: r; log_message_ratio: R, with |eps| <= 2^-R (8 in the CtS-first order, 14 in S2C-first)."""

    K: int = 16
    degree: int = 30
    double_angles: int = 3
    log_message_ratio: int = 8

    def __post_init__(self):
        for name in ("K", "degree", "double_angles", "log_message_ratio"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise ParameterError(f"EvalModParams.{name} must be an integer, got {v!r}")
        if self.K < 2:
            raise ParameterError(f"EvalModParams.K = {self.K}: needs K >= 2 (K bounds |I|; 16 for h = 32)")
        if self.degree != 2 * self.K - 2:
            raise ParameterError(f"EvalModParams.degree = {self.degree}: the Han-Ki interpolation has 2K - 1 = "
                                 f"{2 * self.K - 1} nodes, so the degree must be 2K - 2 = {2 * self.K - 2}")
        if not 0 <= self.double_angles <= 8:
            raise ParameterError(f"EvalModParams.double_angles = {self.double_angles}: use 0..8 (3 is the default)")
        if not 1 <= self.log_message_ratio <= 40:
            raise ParameterError(f"EvalModParams.log_message_ratio = {self.log_message_ratio}: use R in 1..40 "
                                 "(|eps| <= 2^-R; 8 for CtS-first, 14 for S2C-first)")

    @property
    def poly_depth(self) -> int:
        """Levels of the polynomial: ceil(log2(degree + 1))."""
        return poly_depth(self.degree)

    @property
    def depth(self) -> int:
        """Levels eval_mod consumes: ceil(log2(degree + 1)) + double_angles (8 by default)."""
        return self.poly_depth + self.double_angles

    @property
    def a0(self) -> float:
        """Amplitude of the interpolated cosine: (2 pi)^(-1/2^r)."""
        return (2 * math.pi) ** (-1.0 / 2 ** self.double_angles)

    def double_angle_constant(self, i: int) -> float:
        """a0^(2^(i+1)) = (2 pi)^(-2^(i+1-r)), subtracted by the i-th double angle (one rounding)."""
        return (2 * math.pi) ** -(2.0 ** (i + 1 - self.double_angles))

    def coefficients(self) -> np.ndarray:
        """Chebyshev coefficients of p on [-K, K] (t = x / K), float64."""
        return hanki_coefficients(self.K, self.degree, self.log_message_ratio, self.double_angles)


@lru_cache(maxsize=16)
def _hanki_cached(K: int, degree: int, R: int, r: int) -> np.ndarray:
    import mpmath as mp

    ctx = mp.MPContext()
    ctx.prec = _SOLVE_BITS
    a0 = (1 / (2 * ctx.pi)) ** (ctx.mpf(1) / 2 ** r)
    dev = ctx.mpf(2) ** -R
    nodes = [ctx.mpf(0)] + [s * (i + dev) for i in range(1, K) for s in (1, -1)]
    n = len(nodes)
    T = ctx.matrix(n, degree + 1)
    for a, x in enumerate(nodes):
        t = x / K
        prev, cur = ctx.mpf(1), t                       # T_0, T_1 by the recurrence T_(k+1) = 2 t T_k - T_(k-1)
        T[a, 0] = prev
        if degree >= 1:
            T[a, 1] = cur
        for k in range(2, degree + 1):
            prev, cur = cur, 2 * t * cur - prev
            T[a, k] = cur
    y = ctx.matrix([a0 * ctx.cos(2 * ctx.pi * (x - ctx.mpf(1) / 4) / 2 ** r) for x in nodes])
    c = ctx.lu_solve(T, y)
    out = np.array([float(v) for v in c], dtype=np.float64)
    out.setflags(write=False)
    return out


def hanki_coefficients(K: int = 16, degree: int = 30, R: int = 8, r: int = 3) -> np.ndarray:
    """Chebyshev coefficients (on [-K, K], variable t = x / K) of the degree-(2K-2) interpolant of
    f(x) = a0 cos(2 pi (x - 1/4) / 2^r), a0 = (2 pi)^(-1/2^r), at the nodes {0} ∪ {±(i + 2^-R): 1 <= i < K}.
    Solved in mpmath at 256 bits, rounded to float64 once and cached; returns a fresh writable copy."""
    p = EvalModParams(K=int(K), degree=int(degree), double_angles=int(r), log_message_ratio=int(R))
    return _hanki_cached(p.K, p.degree, p.log_message_ratio, p.double_angles).copy()


def reference(u, params: EvalModParams = EvalModParams()) -> np.ndarray:
    """Cleartext model of eval_mod in float64: the cached coefficients at t = u / K, then the double angles.
    ≈ sin(2 pi u) / (2 pi) (the oracle of the homomorphic version)."""
    y = np.polynomial.chebyshev.chebval(np.asarray(u, dtype=np.float64) / params.K, params.coefficients())
    for i in range(params.double_angles):
        y = 2 * y * y - params.double_angle_constant(i)
    return y


def scale_chain(ctx: Context, level: int, params: EvalModParams, out_scale: float) -> list[float]:
    """[S_0, ..., S_r] for an input at `level`: S_r = out_scale and S_i = sqrt(S_(i+1) q_l) where l is the level
    of the i-th double angle (the polynomial output level minus i); S_0 is the polynomial's target scale."""
    lp = level - params.poly_depth
    s = [float(out_scale)]
    for i in reversed(range(params.double_angles)):
        s.append(math.sqrt(s[-1] * float(ctx.modulus(lp - i))))
    return s[::-1]


def max_input_scale(ctx: Context, level: int) -> float:
    """Largest input scale eval_mod accepts at `level`: q_level (power scales grow as s^n / q^(n-1))."""
    return float(ctx.modulus(int(level)))


def _log_q(ctx: Context, level: int) -> float:
    return sum(math.log2(ctx.modulus(i)) for i in range(level + 1))


def _check(ctx: Context, ct, relin_key, params: EvalModParams, out_scale: float) -> None:
    if not isinstance(params, EvalModParams):
        raise ParameterError(f"params must be an EvalModParams, got {type(params).__name__}")
    ctx.unwrap(ct, Ciphertext, "ciphertext")
    if relin_key is None:
        raise MissingKeyError("eval_mod needs a relinearisation key: ctx.relin_key(sk, level=ct.level)")
    rlk = ctx.unwrap(relin_key, RelinKey, "relinearisation key")
    if ct.encoding != "slot" or ct.size != 2:
        raise EncodingError("eval_mod needs a relinearised, slot-encoded ciphertext (CoeffToSlot output)")
    if ct.is_complex:
        raise EncodingError("eval_mod reduces real slots: split the real and imaginary parts first "
                            "(hemlp.he.dft.split_real_imag)")
    if ct.level < params.depth:
        raise LevelError(f"eval_mod needs {params.depth} levels (polynomial {params.poly_depth} + "
                         f"{params.double_angles} double angles) but the ciphertext is at level {ct.level}: "
                         f"{params.depth - ct.level} level(s) missing")
    if rlk.level < ct.level:
        raise LevelError(f"eval_mod: the relinearisation key was generated for levels <= {rlk.level} but the first "
                         f"product is at level {ct.level}; generate it with ctx.relin_key(sk, level={ct.level})")
    if not (isinstance(out_scale, (int, float, np.floating)) and math.isfinite(out_scale) and out_scale > 0):
        raise ScaleMismatchError(f"eval_mod: out_scale must be a positive finite number, got {out_scale!r}")
    room = _log_q(ctx, ct.level - params.depth) - 1
    if math.log2(out_scale) > room - 1:   # |y| <= 1/(2 pi) < 1/2, plus one bit of headroom
        raise ScaleMismatchError(f"eval_mod: out_scale 2^{math.log2(out_scale):.1f} does not fit the modulus "
                                 f"2^{room + 1:.1f} left at the output level {ct.level - params.depth}; "
                                 "choose a smaller output scale")
    top = max_input_scale(ctx, ct.level)
    if ct.scale > top * (1 + 2.0 ** -20):
        raise ScaleMismatchError(
            f"eval_mod: the input scale 2^{math.log2(ct.scale):.2f} is above the prime q_{ct.level} = "
            f"2^{math.log2(top):.2f}. The polynomial's power scales grow as s^n / q^(n-1), which at degree "
            f"{params.degree} leaves no room for the target scale. Land the CoeffToSlot output at a scale "
            f"<= q_{ct.level} (e.g. encode its last diagonals at scale q_l * q_{ct.level} / ct.scale); lower "
            "scales are lifted for free")
    s0 = scale_chain(ctx, ct.level, params, out_scale)[0]
    if not s0 >= 2.0 ** 20:
        raise ScaleMismatchError(f"eval_mod: the polynomial's target scale S_0 = 2^{math.log2(s0):.1f} is too small; "
                                 "choose a larger out_scale")


def eval_mod(ctx: Context, ct: Ciphertext, relin_key: RelinKey, params: EvalModParams = EvalModParams(),
             out_scale: float | None = None, stats: dict | None = None, backend: str = "native") -> Ciphertext:
    """sin(2 pi u) / (2 pi) in every real slot, for slots t = u / K. Level ct.level - params.depth, scale
    out_scale (default ct.scale) exactly. stats (a dict) receives the polynomial's operation counts.
    backend: "native" (C++ polynomial evaluation) or "python" (hemlp.he.polynomial.PolyEvaluator, for comparison;
    it does not lift low input scales)."""
    out_scale = float(ct.scale if out_scale is None else out_scale)
    _check(ctx, ct, relin_key, params, out_scale)
    chain = scale_chain(ctx, ct.level, params, out_scale)
    e = ctx.native
    level = ct.level - params.poly_depth
    if backend == "native":
        y = evaluate_native(ctx, ct, params.coefficients(), relin_key, basis="chebyshev", scale=chain[0],
                            level=level, stats=stats)
    elif backend == "python":
        ev = PolyEvaluator(ctx, relin_key)
        y = ev.evaluate(ct, params.coefficients(), basis="chebyshev", scale=chain[0], level=level)
        if stats is not None:
            stats.update(ev.stats)
    else:
        raise ParameterError(f"eval_mod: backend must be 'native' or 'python', got {backend!r}")
    rlk = relin_key.native
    yn = y.native
    for i in range(params.double_angles):
        # 2 y^2 - a^(2^(i+1)): the 2 is an exact integer on one factor, the square one fused product, the
        # constant added exactly at the new scale S_(i+1)
        sq = e.mul_relin_rescale(e.mul_integer(yn, 2), yn, rlk)
        target = chain[i + 1]
        if abs(sq.scale / target - 1) > 1e-9:
            raise AssertionError(f"eval_mod: scale drift {sq.scale} vs {target}")
        yn = _core.add_const_exact(e, e.with_scale(sq, target), -params.double_angle_constant(i))
    return ctx.wrap(Ciphertext, yn)
