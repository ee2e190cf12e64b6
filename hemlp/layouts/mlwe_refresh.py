"""Layout (A′)'s refresh: the bootstrapping parameters, the level it lands at and its keys' size.

A layout (A′) value is coefficient-encoded, and an activation segment starts with a CoeffToSlot. A refresh is that
CoeffToSlot run inside a bootstrap: ScaleDown → MSRLWE + encapsulation → ModRaise → CoeffToSlot → EvalMod, the
S2C-first pipeline (hemlp.bootstrap.mambo) without its bottom SlotToCoeff (MamboBootstrapper.refresh_coefficients).
Its EvalMod inputs are the coefficients themselves (O(1)): the S2C-first message ratio R = 14 applies.
"""
from __future__ import annotations

from hemlp.bootstrap.batch_keys import estimate_bytes
from hemlp.bootstrap.params import PRESET_DEPTHS, BootParams
from hemlp.errors import ParameterError

__all__ = ["REFRESH_LOG_MESSAGE_RATIO", "refresh_boot_params", "refresh_params", "refresh_level", "refresh_key_bytes"]

#: EvalMod's input coefficients are the values (as in the S2C-first order): R = 14 keeps the sine's error small
REFRESH_LOG_MESSAGE_RATIO = 14


def refresh_boot_params(name: str) -> BootParams:
    """The BootParams of a refresh on the bootstrapping preset `name` (S2C-first, the preset's DFT depths)."""
    if name not in PRESET_DEPTHS:
        raise ParameterError(f"{name!r} is not a bootstrapping preset: use one of {sorted(PRESET_DEPTHS)}")
    cts, stc = PRESET_DEPTHS[name]
    return BootParams(order="s2c_first", log_message_ratio=REFRESH_LOG_MESSAGE_RATIO, cts_depth=cts, stc_depth=stc)


def refresh_params(ctx) -> BootParams:
    """refresh_boot_params of the context's preset."""
    return refresh_boot_params(ctx.params.name)


def refresh_level(params) -> int:
    """The level a refresh lands at on the preset chain: L − CtS depth − EvalMod depth (no SlotToCoeff)."""
    bp = refresh_boot_params(params.name)
    return int(params.max_level) - bp.cts_depth - bp.evalmod_depth


def refresh_key_bytes(params, k: int = 1) -> int:
    """The refresh keys in memory (S2C-first BatchBootstrapKeys for batches of k), from the parameters alone."""
    return int(estimate_bytes(params, int(k), refresh_boot_params(params.name)))
