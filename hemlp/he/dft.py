"""The homomorphic DFT of CKKS bootstrapping: CoeffToSlot (CtS) and SlotToCoeff (StC).

Conventions (N ring degree, n slots, gap = N/(2n); n = N/2 is full packing)
----------------------------------------------------------------------------
A ciphertext's plaintext polynomial m(X) (integer coefficients) with scale Δ stands for the
real coefficient vector x = m/Δ ∈ R^N (coefficient encoding, `ctx.decrypt` of a
coefficient-encoded ciphertext). For n < N/2 (sparse packing) m must lie in the subring
Z[X^gap]: only x_(k·gap) and x_(N/2 + k·gap), k < n, may be nonzero (as the core's sparse
encoder produces; other coefficients would pass through CtS as garbage the n-slot decoder does
not see: clear them first with hemlp.he.subring.subring_trace, e.g. after ModRaise). Define the complex vector

    w_k = x_(k·gap) + i·x_(N/2 + k·gap),   k < n.

Decoding the same polynomial as n slots gives z = U·w with U[j, k] = ζ^(5^j·k), ζ = exp(2πi/(4n))
(z_j = m(ζ_(2N)^(5^j))/Δ; see hemlp.he.special_fft for the factorisation of U).

- coeff_to_slot: slots ← w, i.e. slot j holds x_(j·gap) + i·x_(N/2 + j·gap) — in bit-reversed
  order with a bit_reversed plan (the default): slot j holds w_rev(j). The ciphertext is re-read
  as slot-encoded (no cost: the bits are the same, z = U·w) and the homomorphic linear map
  U⁻¹ (R·U⁻¹ when bit-reversed) is applied.
- slot_to_coeff: the inverse. Input slots v (bit-reversed plan: slot j holds v_rev(j)); output a
  coefficient-encoded ciphertext with x_(k·gap) = Re v_k, x_(N/2 + k·gap) = Im v_k, all other
  coefficients 0. It applies U (U·R when bit-reversed) and re-reads the result as coefficients.

Factorisation (hemlp.he.special_fft; checked against the dense U, np.fft and the core)
--------------------------------------------------------------------------------------------
With L = log2 n, R the bit-reversal permutation and B_s the radix-2 butterfly of half-length
h = 2^(s-1) (diagonals at offsets 0, ±h; twiddles ω_t = exp(2πi·(5^t mod 8h)/(8h)), t < h):

    U = B_L ⋯ B_1 · R,        U⁻¹ = R · B̃_1 ⋯ B̃_L,   B̃_s = B_s⁻¹ (1/2 folded into each stage).

CtS applies B̃_L first (h = n/2) and B̃_1 last; StC applies B_1 first and B_L last. Dropping R
(bit_reversed=True) makes CtS produce R·w and StC consume R·v; R commutes with any slot-wise map.

Levels and scale
----------------
The log2(n) butterfly stages are grouped into `depth` levels (special_fft.group_sizes). Each
level is one lintrans.LinearTransform (generalised diagonals, BSGS with hoisted baby
steps) whose diagonals are encoded at scale q_ℓ (the prime the following rescale divides by),
so each level consumes exactly one level and returns the scale unchanged: output level =
input level − depth, output scale = input scale, exactly. A merged group of r stages has at most
2^(r+1) − 1 diagonals; the stage entries have modulus 1 (StC) or 1/2 (CtS, the 1/n of U⁻¹
spread over the stages), so no level is spent on constants.

Real and imaginary parts
------------------------
split_real_imag(ct) = (ct + conj(ct), −i·(ct − conj(ct))), each tagged with scale 2·ct.scale:
the 1/2 is carried exactly in the scale (no level), and −i is the monomial X^(3N/2) (exact,
no level). join_real_imag(re, im) = re + X^(N/2)·im. So CtS → split → f on each part → join →
StC applies a real slot-wise f to the coefficients.

Evaluation: each level runs natively in one call (LinearTransform.apply with a Context), double
hoisted by default: faster than single hoisting at every CtS / StC level of bootstrapping set B
(N = 2^15: 1.07x-1.5x in CPU time) and 3 bits more precise in StC; diagonals encoded over Q_ℓ ∪ P,
cached per (context, level): DFTPlan.nbytes. hoisting="auto" picks per level by
lintrans.choose_hoisting (single wins at low levels with many diagonals); native=False runs
the Python reference path (and an OpCounter in place of the context counts it).

Keys: dft_rotation_steps(plan, ...) lists exactly the rotation steps a plan's evaluation uses
(the union of each level's baby and giant steps); split needs ctx.conjugation_key only.
"""
from __future__ import annotations

import math

from hemlp.he.lintrans import LinearTransform
from hemlp.he import special_fft as sf
from hemlp.he.reinterpret import mul_monomial, retag
from hemlp.fhe import Ciphertext, Context, GaloisKeys
from hemlp.errors import EncodingError, LevelError, MissingKeyError, ParameterError, ShapeError

__all__ = ["DFTPlan", "plan_coeff_to_slot", "plan_slot_to_coeff", "dft_rotation_steps", "coeff_to_slot",
           "slot_to_coeff", "split_real_imag", "join_real_imag"]


class DFTPlan:
    """One direction of the homomorphic DFT on n slots, merged into `depth` levels.

    direction: "coeff_to_slot" or "slot_to_coeff"; depth: an int (levels) or the stage count of
    each level in application order (summing to log2 n); bit_reversed: see the module doc.
    scaling: the whole transform is multiplied by this positive constant, spread evenly over the levels
    (scaling^(1/depth) each, so every level's diagonals keep as many bits of their encoding at scale q_l as
    possible). The ciphertext's scale is unchanged, so its integers are multiplied by `scaling`:
    bootstrapping uses it to bring CoeffToSlot's output below EvalMod's largest input scale and to carry
    EvalMod's extra output scale back down in SlotToCoeff, without a level.
    """

    def __init__(self, slots: int, depth, direction: str, bit_reversed: bool = True, scaling: float = 1.0):
        if direction not in ("coeff_to_slot", "slot_to_coeff"):
            raise ParameterError(f"direction must be 'coeff_to_slot' or 'slot_to_coeff', got {direction!r}")
        scaling = float(scaling)
        if not (math.isfinite(scaling) and scaling > 0):
            raise ParameterError(f"DFTPlan scaling must be a positive finite number, got {scaling!r}")
        self.n = int(slots)
        L = sf.log2_exact(self.n)
        self.stages = sf.group_sizes(L, depth)
        self.direction = direction
        self.bit_reversed = bool(bit_reversed)
        self.scaling = scaling
        mats = sf.level_matrices(self.n, self.stages, direction == "coeff_to_slot", self.bit_reversed)
        f = scaling ** (1.0 / len(mats))
        if f != 1.0:
            mats = [{k: v * f for k, v in D.items()} for D in mats]
        self.levels = [LinearTransform(D, self.n) for D in mats]

    depth = property(lambda self: len(self.levels))

    @property
    def nbytes(self) -> int:
        """Bytes of the diagonals encoded so far (every level, every (context, level) it ran at)."""
        return sum(lt.nbytes for lt in self.levels)

    @property
    def steps(self) -> list[int]:
        """Rotation steps the evaluation uses (every level's baby and giant steps)."""
        return sorted(set().union(*(lt.steps for lt in self.levels)))

    def __repr__(self):
        diags = [lt.pmults for lt in self.levels]
        return (f"DFTPlan({self.direction}, slots={self.n}, depth={self.depth}, stages={self.stages}, "
                f"diagonals={diags}, rotations={sum(lt.rotations for lt in self.levels)}, "
                f"bit_reversed={self.bit_reversed}" + ("" if self.scaling == 1.0 else f", scaling={self.scaling:.6g}")
                + ")")


def _slots(ctx_or_slots) -> int:
    return ctx_or_slots.slots if isinstance(ctx_or_slots, Context) else int(ctx_or_slots)


def plan_coeff_to_slot(slots, depth, bit_reversed: bool = True, scaling: float = 1.0) -> DFTPlan:
    """CoeffToSlot plan; slots: n or a Context (full packing n = N/2); scaling: see DFTPlan."""
    return DFTPlan(_slots(slots), depth, "coeff_to_slot", bit_reversed, scaling)


def plan_slot_to_coeff(slots, depth, bit_reversed: bool = True, scaling: float = 1.0) -> DFTPlan:
    """SlotToCoeff plan; slots: n or a Context (full packing n = N/2); scaling: see DFTPlan."""
    return DFTPlan(_slots(slots), depth, "slot_to_coeff", bit_reversed, scaling)


def dft_rotation_steps(*plans: DFTPlan) -> list[int]:
    """The rotation steps (ctx.rotation_keys(sk, steps)) the given plans need, exactly."""
    return sorted(set().union(*(p.steps for p in plans)))


def _check(ctx: Context, ct: Ciphertext, keys, plan: DFTPlan, what: str) -> None:
    if not isinstance(plan, DFTPlan) or plan.direction != what:
        raise ParameterError(f"{what} needs a DFTPlan made by plan_{what}")
    if plan.n > ctx.slots:
        raise ShapeError(f"the plan acts on {plan.n} slots but this context has at most N/2 = {ctx.slots}")
    if ct.level < plan.depth:
        raise LevelError(f"{what} consumes {plan.depth} levels (one per merged FFT level, stages {plan.stages}) "
                         f"but the ciphertext is at level {ct.level}: it needs level >= {plan.depth}. Encrypt "
                         "higher, or plan fewer levels (a smaller depth)")
    if not isinstance(keys, GaloisKeys):
        raise MissingKeyError(f"{what} needs rotation keys: ctx.rotation_keys(sk, dft_rotation_steps(plan))")
    have = set(keys.elements)
    missing = [s for s in plan.steps if ctx.native.galois_element(int(s)) not in have]
    if missing:
        raise MissingKeyError(f"{what}: no rotation keys for steps {missing}; generate "
                              "ctx.rotation_keys(sk, dft_rotation_steps(plan))")


def _apply(ctx, ct, keys, plan, native, hoisting):
    for lt in plan.levels:
        ct = lt.apply(ctx, ct, keys, native=native, hoisting=hoisting)
    return ct


def coeff_to_slot(ctx: Context, ct: Ciphertext, keys: GaloisKeys, plan: DFTPlan, *, native: bool | None = None,
                  hoisting: str = "double") -> Ciphertext:
    """Slots ← w (see the module doc) from ct's coefficients; consumes plan.depth levels, keeps the scale.

    ct: coefficient-encoded, or slot-encoded with plan.n slots (e.g. after ModRaise: its
    coefficients are read either way). native / hoisting: see LinearTransform.apply (native=None:
    native with a Context; hoisting "double", "single" or "auto")."""
    if not (ct.encoding == "coeff" or ct.slots == plan.n):
        raise EncodingError(f"coeff_to_slot reads a coefficient-encoded ciphertext (or one tagged with the plan's "
                            f"{plan.n} slots); got {ct.encoding} encoding with {ct.slots} slots")
    _check(ctx, ct, keys, plan, "coeff_to_slot")
    ct = retag(ctx, ct, slots=plan.n, encoding="slot", is_complex=True)
    return _apply(ctx, ct, keys, plan, native, hoisting)


def slot_to_coeff(ctx: Context, ct: Ciphertext, keys: GaloisKeys, plan: DFTPlan, *, native: bool | None = None,
                  hoisting: str = "double") -> Ciphertext:
    """Coefficients ← slots (see the module doc); returns a coefficient-encoded ciphertext,
    plan.depth levels lower, same scale. native / hoisting: see coeff_to_slot."""
    if ct.encoding != "slot" or ct.slots != plan.n:
        raise EncodingError(f"slot_to_coeff needs a slot-encoded ciphertext with the plan's {plan.n} slots; got "
                            f"{ct.encoding} encoding with {ct.slots} slots")
    _check(ctx, ct, keys, plan, "slot_to_coeff")
    out = _apply(ctx, ct, keys, plan, native, hoisting)
    return retag(ctx, out, encoding="coeff", is_complex=False)


def split_real_imag(ctx: Context, ct: Ciphertext, conj_key: GaloisKeys) -> tuple:
    """(ct_re, ct_im): slot-encoded, real slots Re z and Im z, scale 2·ct.scale, same level (no level used)."""
    if ct.encoding != "slot":
        raise EncodingError("split_real_imag needs a slot-encoded ciphertext (e.g. the output of coeff_to_slot)")
    c = ctx.conjugate(ct, conj_key)
    scale = 2.0 * ct.scale
    re = retag(ctx, ctx.add(ct, c), scale=scale, is_complex=False)
    im = mul_monomial(ctx, ctx.sub(ct, c), 3 * ctx.N // 2, scale=scale, is_complex=False)  # · (−i)
    return re, im


def join_real_imag(ctx: Context, ct_re: Ciphertext, ct_im: Ciphertext) -> Ciphertext:
    """ct_re + i·ct_im (i = X^(N/2), exact, no level); both at the same level and scale."""
    if ct_re.encoding != "slot" or ct_im.encoding != "slot":
        raise EncodingError("join_real_imag needs slot-encoded ciphertexts")
    if ct_re.level != ct_im.level:
        raise LevelError(f"join_real_imag: the parts are at levels {ct_re.level} and {ct_im.level}; "
                         "drop the higher one first (ctx.drop_level)")
    return ctx.add(ct_re, mul_monomial(ctx, ct_im, ctx.N // 2, is_complex=True))  # the core checks the scales
