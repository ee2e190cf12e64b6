"""What a single CtS-first Bootstrapper holds beside its keys, from the parameters alone (the server memory estimate,
hemlp.planner.resources): CoeffToSlot's and SlotToCoeff's diagonals, encoded once over Q_l ∪ P at the level each DFT
level runs at and kept for every later bootstrap (hemlp.he.lintrans.LinearTransform.encode_native, double
hoisting), their complex vectors, and one bootstrap's own temporaries. At N16-boot with 16 384 slots the encoded
diagonals alone are 2.8 GB.
"""
from __future__ import annotations

from hemlp.bootstrap.keys import dft_plans
from hemlp.bootstrap.params import PRESET_DEPTHS, BootParams

__all__ = ["BOOT_WORKING_CIPHERTEXTS", "dft_plaintext_bytes", "single_boot_bytes"]

#: one bootstrap's temporaries, in ciphertexts over Q_L ∪ P: the hoisted baby-step rotations and digit
#: decompositions of CoeffToSlot at the top level, EvalMod's powers, and the heap they leave fragmented (measured
#: 21-30 at test-N12-boot and test-N15-boot)
BOOT_WORKING_CIPHERTEXTS = 32


def dft_plaintext_bytes(params, slots: int) -> int:
    """Bytes of the encoded CoeffToSlot and SlotToCoeff diagonals of a `slots`-slot bootstrapper (each level's
    diagonals over Q_l ∪ P at the level it runs at: CtS from the top level down, StC below EvalMod)."""
    cts_d, stc_d = PRESET_DEPTHS[params.name]
    bp = BootParams(cts_depth=cts_d, stc_depth=stc_d, slots=int(slots))
    cts, stc = dft_plans(int(slots), cts_d, stc_d)
    L, P, N = int(params.max_level), len(params.p), int(params.N)
    top_stc = L - cts_d - bp.evalmod_depth
    levels = [(lt, L - i) for i, lt in enumerate(cts.levels)] + [(lt, top_stc - j) for j, lt in enumerate(stc.levels)]
    return sum(lt.pmults * N * (lv + 1 + P) * 8 for lt, lv in levels)


def single_boot_bytes(params, slots: int) -> int:
    """A Bootstrapper's memory beside its keys: the encoded DFT diagonals, their complex vectors (the Bootstrapper's
    own plans) and BOOT_WORKING_CIPHERTEXTS."""
    cts_d, stc_d = PRESET_DEPTHS[params.name]
    cts, stc = dft_plans(int(slots), cts_d, stc_d)
    vectors = sum(lt.pmults for plan in (cts, stc) for lt in plan.levels) * int(slots) * 16
    top = 2 * int(params.N) * (int(params.max_level) + 1 + len(params.p)) * 8
    return dft_plaintext_bytes(params, slots) + vectors + BOOT_WORKING_CIPHERTEXTS * top
