"""How much work a key switch is at a level: the planner's unit for rotations and ciphertext products.

The native core switches keys the hybrid way: at level l (l1 = l + 1 limbs of Q), with K special primes and digits
of alpha primes (beta = ceil(l1 / alpha) digits), ModUp brings the input's l1 limbs out of NTT form and raises each
digit to the E = l1 + K limbs of Q_l and P (NTTs of beta * E - l1 limbs), the inner product with the key touches
beta * E limbs per key half, and ModDown takes each of the two result polynomials back to Q_l (an INTT of its K
special limbs, an NTT of l1 limbs). Counted in limb NTTs, each log2(N) / 16 of an N = 2^16 one per coefficient:

    keyswitch_units(l) = (log2 N / 16) * (beta * E + 2 K + 2 l1)               per ring coefficient

A rotation, a relinearisation (inside a ciphertext product) and a conjugation are one key switch each. Hoisted
rotations of one input share its ModUp, so one of `group` of them costs

    hoisted_units(l, group) = (log2 N / 16) * (2 K + 2 l1 + beta * E / group).

The planner's unit costs ``rotate``, ``ct_mul`` and ``rotate_hoisted`` are seconds per N x these units
(hemlp.apps.calibrate divides the core benchmark's times at N14-d6's fresh level by them). A count of limbs alone
misses the special primes, which do not shrink with the level: at N16-boot (K = 6) a level-0 rotation is 21 units
on one limb, where N14-d6's fresh level has 47.25 on seven. docs/cost-model.md compares both counts with measured
key switches (``python -m hemlp.bench keyswitch``); a larger ring's memory traffic, which neither count holds, is
what ``hemlp calibrate --boot`` measures as that ring's factors (hemlp.planner.cost_model.RingFactors).
"""
from __future__ import annotations

import math

__all__ = ["keyswitch_units", "hoisted_units", "keyswitch_per_limb", "op_units", "KEY_SWITCH_UNIT_OPS"]

#: the unit costs priced per key-switch unit (keyswitch_units; a hoisted rotation per hoisted_units); every other
#: op (plaintext products, rescales, encryptions) is priced per limb
KEY_SWITCH_UNIT_OPS = ("rotate", "ct_mul", "rotate_hoisted")


def _shape(params, level: int) -> tuple[int, int, int, float]:
    """(l1, E, beta, NTT weight) of a key switch at `level` under `params` (a hemlp.fhe.Params or alike: N, p,
    alpha)."""
    l1 = max(int(level), 0) + 1
    K = len(params.p)
    beta = -(-l1 // max(int(params.alpha), 1))
    return l1, l1 + K, beta, math.log2(int(params.N)) / 16


def keyswitch_units(params, level: int) -> float:
    """Limb NTTs (in N = 2^16 ones) per ring coefficient of one key switch at `level`: see the module doc."""
    l1, E, beta, w = _shape(params, level)
    K = E - l1
    return w * (beta * E + 2 * K + 2 * l1)


def hoisted_units(params, level: int, group: int) -> float:
    """The same for one of `group` rotations hoisted from one input at `level` (their ModUp shared)."""
    l1, E, beta, w = _shape(params, level)
    K = E - l1
    return w * (2 * K + 2 * l1 + beta * E / max(int(group), 1))


def keyswitch_per_limb(params, level: int) -> float:
    """keyswitch_units per limb at `level`: the factor that turns a key-switching op's unit cost into seconds per
    N x limbs, for costs kept per limb and multiplied by the limbs of the level they land at (layout (C)'s chain
    planner and bootstrap placement price at the top level with it)."""
    return keyswitch_units(params, level) / (max(int(level), 0) + 1)


def op_units(params, level: int, op: str, group: int = 1) -> float:
    """The planner's units of one `op` at `level` per ring coefficient (its seconds are N x units x the op's unit
    cost): a key switch's keyswitch_units for rotate and ct_mul, hoisted_units for one of `group` hoisted rotations,
    the level's limbs for the others."""
    if op == "rotate_hoisted":
        return hoisted_units(params, level, group)
    if op in KEY_SWITCH_UNIT_OPS:
        return keyswitch_units(params, level)
    return max(int(level), 0) + 1
