"""Weight quantisation for PCMM: U~ = round(Delta_U U) with a power-of-two Delta_U, so the products are exact
integers and the output scale is tracked exactly (hemlp.pcmm)."""
from __future__ import annotations

import math

import numpy as np

from hemlp.errors import EncodingError

__all__ = ["quantize"]


def quantize(U: np.ndarray, weight_bits: int):
    """U~ = round(Delta_U U) with max |U~| <= 2^weight_bits; returns (U~, Delta_U)."""
    amax = float(np.max(np.abs(U)))
    if not math.isfinite(amax):
        raise EncodingError("the weight matrix contains NaN or infinity")
    if amax == 0:
        return np.zeros(U.shape, dtype=np.int64), 1.0
    delta = 2.0 ** math.floor(weight_bits - math.log2(amax))  # power of two: exact products
    Uq = np.rint(U * delta).astype(np.int64)
    return Uq, delta
