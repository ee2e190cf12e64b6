"""The plan's own noise analysis: a bound t on the coefficients of the output ciphertexts' error, computed from the
lowered steps and the parameters alone (no key, no ciphertext), for the client's decryption noise (sigma = t,
docs/design/decryption.md §3).

The error is tracked as a variance per row (feature) in slot units (message units, the scale divided out), one
handler per step op like ``hemlp.runtime.local.simulate``:

* a fresh encryption: e0 + v·e + e1·s (public-key form, the larger one) plus the encoding's rounding;
* a rescale adds rounding (1 + h)/12 per coefficient (h: the secret's Hamming weight, 2N/3 for uniform ternary);
  a ct x ct product adds a rescale and its relinearisation's key switch divided by the dropped prime;
* a key switch at the ciphertext's scale (a rotation of layout (P)) adds dnum·N·sigma²·(Q_j/P)²/12 + (1 + h)/12;
* linear maps carry variances through the squared weights (the noises of distinct features are independent);
  a polynomial through the square of its largest slope where its inputs lie (first order: the calibrated range
  and the calibration set's values, so the bound is for inputs like those; the client's range check refuses
  inputs beyond the polynomial's domain), its internal products
  through the sum of its coefficients' magnitudes; products through the magnitudes of their factors, taken from
  a plaintext run of the plan on the calibration set;
* a bootstrap resets the error to its measured output error (the step's noise_bits).

A slot's error variance v relates to the coefficients' as v = N·V/scale² (the canonical embedding of a polynomial
with independent coefficients), so an output row's coefficients have standard deviation scale·sqrt(v / N) — except
where a step sums automorphic images of one noise (layout (P)'s rotate-and-sum, a sparse bootstrap's subring):
those add coherently on the coefficients the automorphisms fix, so a second variance, the peak coefficient's, is
carried beside the slots'. t is six standard deviations of the worst row's peak (the convention of the
fresh-encryption bound) times 2^margin_bits.
A heuristic like every CKKS average-case analysis: ``tests/security/test_plan_noise.py`` checks it lies above the
error measured over 20 fresh encryptions of held-out inputs and within a few bits of it.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass

import numpy as np

from hemlp.compiler.ir import gather_apply, matmul_index
from hemlp.compiler.params import unrescaled
from hemlp.errors import UnsupportedError
from hemlp.pcmm import quantize
from hemlp.planner.layouts import act_muls, poly_muls
from hemlp.runtime.local import simulate_columns
from hemlp.step_ops import REFRESH_OPS, StepOp, handler

__all__ = ["NoiseBound", "NoiseModel", "analyse_noise", "plan_noise_bound", "magnitudes_read", "recorder",
           "row_magnitudes", "MARGIN_BITS", "STD_FACTOR", "MAGNITUDE_SAMPLES", "MAGNITUDE_OPS"]

#: the bound's distance above the analysis's worst standard deviation times STD_FACTOR
MARGIN_BITS = 1.0
#: standard deviations in the bound (as in the fresh-encryption bound of the native core)
STD_FACTOR = 6.0
#: calibration samples of the plaintext run that measures the magnitudes of the products' factors
MAGNITUDE_SAMPLES = 512
#: grid points on a polynomial's domain for its largest slope (a composite sign's transition is ~2^-7 wide)
SLOPE_GRID = 1 << 15


@dataclass(frozen=True)
class NoiseBound:
    """log2_t: the bound on |e| of every output coefficient (coefficient units, margin included); log2_std: the
    analysis's standard deviation of the worst output row's peak coefficient; worst_row: that row."""

    log2_t: float
    log2_std: float
    margin_bits: float
    worst_row: int
    source: str = "analysis"

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class NoiseModel:
    """The per-operation variances of one parameter set, in coefficient units."""

    N: int
    log_scale: float
    fresh: float          # public-key encryption + encoding rounding
    rescale: float        # rounding of a division by a prime
    keyswitch: float      # a key switch at the ciphertext's scale

    @classmethod
    def from_params(cls, params) -> "NoiseModel":
        N = int(params.N)
        spec = params.native.spec
        sigma, hw = float(spec.sigma), int(spec.secret_hw)
        h = hw if hw > 0 else 2.0 * N / 3.0
        rounding = (1.0 + h) / 12.0
        # hybrid key switching: the digits (products of alpha primes) over the special primes' product P
        log_p = sum(math.log2(p) for p in params.p)
        q_bits = [math.log2(q) for q in params.q]
        a = max(1, int(params.alpha))
        digits = [sum(q_bits[i:i + a]) for i in range(0, len(q_bits), a)]
        ratio2 = max(2.0 ** (2 * (d - log_p)) for d in digits)
        return cls(N, float(params.log_scale), fresh=sigma ** 2 * (1.0 + 2.0 * N / 3.0 + h) + 1.0 / 12.0,
                   rescale=rounding, keyswitch=len(digits) * N * sigma ** 2 * ratio2 / 12.0 + rounding)

    def slot(self, coeff_variance: float, log_scale: float | None = None) -> float:
        """A coefficient variance in slot units at a scale (default the parameters')."""
        ls = self.log_scale if log_scale is None else log_scale
        return self.N * coeff_variance / 2.0 ** (2 * ls)

    @property
    def product(self) -> float:
        """What one ct x ct product adds in slot units: its rescale, its relinearisation divided by the prime."""
        return self.slot(self.rescale + self.keyswitch / 2.0 ** (2 * self.log_scale))


def _slope(fn, radius: float) -> tuple[np.ndarray, np.ndarray]:
    """(grid, |d fn / du|) on [-radius, radius] by finite differences."""
    u = np.linspace(-radius, radius, SLOPE_GRID + 1)
    d = np.abs(np.diff(fn(u))) / (u[1] - u[0])
    return u, np.concatenate([d, d[-1:]])


def _poly_variance(s, v, mag, nm: NoiseModel) -> np.ndarray:
    """A polynomial activation: first order through its largest slope, internal products through its coefficients."""
    act = s.act
    if act.form == "square":
        return (2.0 * abs(float(act.coeffs[1])) * mag) ** 2 * v + nm.product
    # the slope where the inputs are: the calibrated range and the calibration set's values (a minimax fit's slope
    # near the ends of its guard band, T_k'(1) = k^2, would be orders of magnitude larger than anywhere used)
    radius = max(float(np.max(mag)), 1e-300)
    if act.lo is not None:
        radius = max(radius, abs(act.alpha * act.lo + act.beta), abs(act.alpha * act.hi + act.beta))
    if act.form in ("cheb", "composite"):            # a Chebyshev form lives on u in [-1, 1]
        radius = min(radius, 1.0)
    u, slope = _slope(act.eval_u, radius)
    first = float(np.max(slope)) ** 2 * v
    if act.form == "composite":
        internal = 0.0
        stages = [np.asarray(c, dtype=np.float64) for c in act.stages]
        vals = [u]
        for c in stages:
            vals.append(np.polynomial.chebyshev.chebval(vals[-1], c))
        for i, c in enumerate(stages):       # sensitivity of u * h(u) to stage i's output
            sens = np.abs(u)
            for j in range(i + 1, len(stages)):
                dc = np.polynomial.chebyshev.chebder(stages[j])
                sens = sens * np.abs(np.polynomial.chebyshev.chebval(vals[j], dc))
            amplification = (1.0 + float(np.sum(np.abs(c)))) * float(np.max(sens))
            internal += poly_muls(len(c) - 1) * nm.product * amplification ** 2
        return first + internal + nm.product       # the final product u * h(u)
    return first + act_muls(s) * nm.product * (1.0 + float(np.sum(np.abs(act.coeffs)))) ** 2


def _pcmm(s, v, mag, vals, mags, nm, weight_bits, ks):
    Uq, delta = quantize(s.U, s.info.weight_bits or weight_bits)
    U2 = (Uq / delta) ** 2
    hoisted, giant, reduce = ks
    vin = v + hoisted * nm.slot(nm.keyswitch)
    out = gather_apply(U2, s.index, vin[:, None])[:, 0] if s.index is not None else U2 @ vin
    # the rescale, the giant steps' and the rotate-and-sum's key switches, each summed by the later reductions
    added = 0.0 if unrescaled(s) else nm.slot(nm.rescale)
    added += (giant + (1 if reduce else 0)) * nm.slot(nm.keyswitch)
    return out + 2.0 ** reduce * added


def _matmul(s, v, mag, vals, mags, nm, weight_bits, ks):
    ia, ib = matmul_index(s.info.a_shape, s.info.b_shape)
    vb, mb = vals[s.inputs[1]], mags[s.inputs[1]]
    return np.sum(mb[ib] ** 2 * v[ia] + mag[ia] ** 2 * vb[ib], axis=1) + ia.shape[1] * nm.product


def _bootstrap(s, v, mag, vals, mags, nm, weight_bits, ks):
    c = float(s.info.scale_factor)
    return np.full(s.rows, (c * 2.0 ** -float(s.info.noise_bits)) ** 2)


#: the noise semantics of every step op: (step, first input's variances, its magnitudes, variances by value,
#: magnitudes by value, NoiseModel, weight_bits, Layout.keyswitches' triple) -> the step's variances per row
NOISE = {
    StepOp.PCMM: _pcmm,
    StepOp.POLY: lambda s, v, mag, vals, mags, nm, *_: _poly_variance(s, v, mag, nm),
    StepOp.SQUARE: lambda s, v, mag, vals, mags, nm, *_: _poly_variance(s, v, mag, nm),
    StepOp.AFFINE: lambda s, v, mag, vals, mags, nm, *_: np.asarray(s.alpha) ** 2 * v + nm.slot(nm.rescale),
    StepOp.ADD: lambda s, v, mag, vals, mags, nm, *_: v + vals[s.inputs[1]] + nm.slot(nm.rescale),
    StepOp.MUL: lambda s, v, mag, vals, mags, nm, *_: (mags[s.inputs[1]] ** 2 * v + mag ** 2 * vals[s.inputs[1]]
                                                       + nm.product),
    StepOp.PERM: lambda s, v, *_: v[s.index],
    StepOp.MATMUL: _matmul,
    StepOp.ALIAS: lambda s, v, *_: v,
    StepOp.OUTPUT: lambda s, v, *_: v,
    StepOp.DROP: lambda s, v, *_: v,
    StepOp.BOOTSTRAP: _bootstrap,
    StepOp.MAMBO: _bootstrap,          # the fused PCMM's output is the refresh's: its error is the bootstrap's
}


def _peak_factor(s, params, ks) -> float:
    """How much the peak coefficient's variance of a step's fresh output exceeds a white polynomial's of the
    same slot variance: a rotate-and-sum of 2^r automorphic images of one noise adds them coherently on the
    coefficients the automorphisms fix (the constant one first), 2^r times the white estimate; a sparse
    bootstrap's output was summed over the N / (2 slots) conjugates of its subring the same way."""
    if s.op == StepOp.PCMM:
        return 2.0 ** ks[2]
    if s.op in REFRESH_OPS:
        return max(1.0, params.N / 2.0 / float(s.info.slots or params.N // 2))
    return 1.0


def analyse_noise(steps, params, magnitudes: dict, weight_bits: int, keyswitches: dict | None = None,
                  margin_bits: float = MARGIN_BITS) -> NoiseBound:
    """The plan's bound on its output ciphertexts' error (see the module doc). magnitudes: value name -> the
    largest |value| per row over the calibration set (a plaintext run of `steps`); keyswitches: step name ->
    Layout.keyswitches' triple for layouts that rotate.

    Two variances per row are carried: the slots' (what decides the next step's error) and the peak
    coefficient's (what t must cover), the latter through the same handlers, times _peak_factor where a step
    sums automorphic images of one noise."""
    nm = NoiseModel.from_params(params)
    ks = keyswitches or {}
    var: dict = {}
    peak: dict = {}
    out = None
    for s in steps:
        if s.op == StepOp.INPUT:
            var[s.out] = peak[s.out] = np.full(s.rows, nm.slot(nm.fresh))
            continue
        fn = handler(NOISE, s, "the noise analysis")
        x, k = s.inputs[0], ks.get(s.out, (0, 0, 0))
        mag = magnitudes.get(x)          # None for a value no MAGNITUDE_OPS step reads (magnitudes_read)
        var[s.out] = np.asarray(fn(s, var[x], mag, var, magnitudes, nm, weight_bits, k),
                                dtype=np.float64).reshape(-1)
        peak[s.out] = _peak_factor(s, params, k) * np.asarray(
            fn(s, peak[x], mag, peak, magnitudes, nm, weight_bits, k), dtype=np.float64).reshape(-1)
        if s.op == StepOp.OUTPUT:
            out = s
    if out is None:
        raise UnsupportedError("the plan has no output step")
    v = peak[out.out]
    src = next(s for s in steps if s.out == out.inputs[0])
    log_scale = nm.log_scale + (float(src.info.weight_bits or weight_bits) if unrescaled(src) else 0.0)
    row = int(np.argmax(v))
    std = 2.0 ** log_scale * math.sqrt(float(v[row]) / nm.N)     # the coefficients' standard deviation
    log2_std = math.log2(max(std, 1.0))
    return NoiseBound(log2_t=log2_std + math.log2(STD_FACTOR) + float(margin_bits), log2_std=log2_std,
                      margin_bits=float(margin_bits), worst_row=row)


def row_magnitudes(value) -> np.ndarray:
    """The largest |value| of each row of a rows matrix (features x samples)."""
    value = np.asarray(value)
    return np.max(np.abs(value), axis=1) if value.shape[1] else np.zeros(value.shape[0])


def recorder(magnitudes: dict):
    """A simulate on_value callback that keeps each value's row_magnitudes in `magnitudes`, the largest per row over
    the chunks of samples it sees (hemlp.runtime.local.simulate_columns)."""
    def see(step, value):
        m = row_magnitudes(value)
        magnitudes[step.out] = m if step.out not in magnitudes else np.maximum(magnitudes[step.out], m)
    return see


#: steps whose value is their first input's (for the magnitudes)
SAME_VALUE = (StepOp.BOOTSTRAP, StepOp.DROP, StepOp.ALIAS, StepOp.OUTPUT)


#: the step ops whose noise depends on their inputs' magnitudes (the others' handlers do not read them)
MAGNITUDE_OPS = (StepOp.POLY, StepOp.SQUARE, StepOp.MUL, StepOp.MATMUL)


def magnitudes_read(steps) -> set:
    """The values whose magnitudes the analysis reads: the inputs of MAGNITUDE_OPS steps."""
    return {v for s in steps if s.op in MAGNITUDE_OPS for v in s.inputs}


def plan_noise_bound(layout, calibration: np.ndarray, magnitudes: dict | None = None,
                     margin_bits: float = MARGIN_BITS) -> NoiseBound | None:
    """The bound of a planned layout (None when the layout's error is not analysed, Layout.keyswitches).
    magnitudes: row_magnitudes of the values of a plaintext run on the calibration set (compile's own run of the
    lowered steps; the values the planner added since, bootstraps and drops, are their inputs'); without them, or
    when a value is missing (a fused MaMBo step), a run of the layout's steps on up to MAGNITUDE_SAMPLES samples."""
    ks = layout.keyswitches()
    if ks is None:
        return None
    mags = layout.value_magnitudes(dict(magnitudes or {}))
    for s in layout.steps:
        if s.out not in mags and s.op in SAME_VALUE and s.inputs and s.inputs[0] in mags:
            mags[s.out] = mags[s.inputs[0]]
    if any(v not in mags for v in magnitudes_read(layout.steps)):
        x = np.asarray(calibration, dtype=np.float64)[:MAGNITUDE_SAMPLES]
        mags = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")      # the compile reported ranges already
            simulate_columns(layout.steps, x.reshape(x.shape[0], -1).T, layout.weight_bits,
                             on_value=recorder(mags))
    return analyse_noise(layout.steps, layout.params, mags, layout.weight_bits, ks, margin_bits)
