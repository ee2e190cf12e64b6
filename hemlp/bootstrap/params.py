"""Bootstrapping parameters (docs/design/bootstrap.md §0, §2): the pipeline order, EvalMod's shape and the DFT depths.

    BootParams.for_context(ctx)      # the defaults of the context's preset (N16-boot, test-N12-boot, ...)
    bp.levels_consumed               # CtS + EvalMod + StC levels
    bp.levels_left(ctx)              # levels of the output at the default scale

Level budget, CtS-first (the only order implemented): ModRaise to the top level L, CoeffToSlot uses
cts_depth levels, EvalMod ceil(log2(degree + 1)) + double_angles, SlotToCoeff stc_depth; the output is
at level L - levels_consumed with the context's default scale, exactly.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from hemlp.errors import LevelError, ParameterError

__all__ = ["BootParams", "PRESET_DEPTHS", "preset_levels_consumed"]

#: pipeline orders: CtS-first (Bootstrapper, BatchBootstrapper) and S2C-first (hemlp.bootstrap.mambo)
ORDERS = ("cts_first", "s2c_first")

#: (CtS depth, StC depth) per preset chain (the chains are laid out for exactly these depths)
PRESET_DEPTHS = {"N16-boot": (4, 3), "test-N15-boot": (4, 3), "test-N12-boot": (3, 2), "test-N10-boot": (3, 2)}


@dataclass(frozen=True)
class BootParams:
    """order: "cts_first" (ScaleDown, encapsulation, ModRaise, CoeffToSlot, EvalMod, SlotToCoeff) or "s2c_first"
    (SlotToCoeff at the bottom, ScaleDown, ..., EvalMod; hemlp.bootstrap.mambo, with log_message_ratio 14).
    log_message_ratio R: q0 / Δ0 = 2^R (the coefficient-domain headroom; |m/q0| <= 2^-R).
    K: EvalMod's integer range, |I| < K (h = 32 gives P(|I| >= 16) = 2^-121.7 per coefficient).
    degree, double_angles: the Han–Ki cosine interpolant and its angle doublings.
    cts_depth, stc_depth: levels of CoeffToSlot / SlotToCoeff. h: Hamming weight of the ephemeral sparse
    secret. slots: n (None: N/2, full packing). stc_log_scaling: EvalMod's output scale sits 2^stc_log_scaling
    above Δ·q0/Δ0' and SlotToCoeff's matrices bring it back (0: EvalMod lands at Δ·q0/Δ0' directly, which
    leaves its last rescale noise ×2^R·√n in the output; 8 gains about 4 bits)."""

    order: str = "cts_first"
    log_message_ratio: int = 8
    K: int = 16
    degree: int = 30
    double_angles: int = 3
    cts_depth: int = 4
    stc_depth: int = 3
    h: int = 32
    slots: int | None = None
    stc_log_scaling: int = 8

    def __post_init__(self):
        if self.order not in ORDERS:
            raise ParameterError(f"bootstrapping order {self.order!r} is unknown; use one of {ORDERS} ('s2c_first' "
                                 "runs in hemlp.bootstrap.mambo, docs/design/bootstrap.md §1.4)")
        for name in ("log_message_ratio", "K", "degree", "cts_depth", "stc_depth", "h"):
            if int(getattr(self, name)) < 1:
                raise ParameterError(f"BootParams.{name} must be >= 1, got {getattr(self, name)}")
        if self.double_angles < 0:
            raise ParameterError("BootParams.double_angles must be >= 0")
        if 2 * self.K < self.h // 2 + 1:
            raise ParameterError(f"K = {self.K} is below the ModRaise integer bound (h+1)/2 = {(self.h + 1) // 2}")

    @classmethod
    def for_context(cls, ctx, **overrides) -> "BootParams":
        """The defaults for the context's preset (CtS / StC depths from PRESET_DEPTHS), with overrides."""
        name = ctx.params.name
        if name not in PRESET_DEPTHS and not {"cts_depth", "stc_depth"} <= set(overrides):
            raise ParameterError(f"no bootstrapping defaults for parameter set {name!r}: use one of "
                                 f"{sorted(PRESET_DEPTHS)} or pass cts_depth and stc_depth")
        cts, stc = PRESET_DEPTHS.get(name, (None, None))
        base = cls(cts_depth=overrides.pop("cts_depth", cts), stc_depth=overrides.pop("stc_depth", stc))
        return replace(base, **overrides)

    @property
    def evalmod_depth(self) -> int:
        return math.ceil(math.log2(self.degree + 1)) + self.double_angles

    @property
    def levels_consumed(self) -> int:
        return self.cts_depth + self.evalmod_depth + self.stc_depth

    def slot_count(self, ctx) -> int:
        return ctx.slots if self.slots is None else int(self.slots)

    def levels_left(self, ctx) -> int:
        return ctx.max_level - self.levels_consumed

    def validate(self, ctx) -> None:
        """Typed errors for a chain that cannot run this bootstrap."""
        if self.levels_left(ctx) < 0:
            raise LevelError(f"bootstrapping needs {self.levels_consumed} levels (CtS {self.cts_depth}, EvalMod "
                             f"{self.evalmod_depth}, StC {self.stc_depth}) but {ctx.params.name} has "
                             f"{ctx.max_level}: use a bootstrapping preset such as 'N16-boot'")
        n = self.slot_count(ctx)
        if n < 2 or n > ctx.slots or n & (n - 1):
            raise ParameterError(f"slots must be a power of two in [2, N/2 = {ctx.slots}], got {n}")
        if ctx.modulus(0) < (1 << (self.log_message_ratio + 20)):
            raise ParameterError(f"q0 = 2^{math.log2(ctx.modulus(0)):.1f} leaves too little room for a message "
                                 f"ratio of 2^{self.log_message_ratio}")


def preset_levels_consumed(name: str) -> int:
    """Levels one bootstrap consumes on the preset chain `name` with its default depths."""
    if name not in PRESET_DEPTHS:
        raise ParameterError(f"{name!r} is not a bootstrapping preset: use one of {sorted(PRESET_DEPTHS)}")
    cts, stc = PRESET_DEPTHS[name]
    return BootParams(cts_depth=cts, stc_depth=stc).levels_consumed
