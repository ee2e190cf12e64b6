"""The int8 engine of the GPU's exact modular GEMM (csrc/cuda/modgemm.cu, ``GemmPlan(..., engine="int8")``) as an
exact numpy model: the digit counts, K-blocks and recombination its kernels use, so that its exactness is shown on
the CPU, without a device.

C = mult * U X mod q with U small signed integers (|U| <= 2^bU) and X residues in [0, q): U and the centred residues
of X are split into balanced base-256 digits (each in [-128, 127]: int8), U into TU digits and X into TX; one int8
GEMM with int32 accumulation per K-block multiplies the TU stacked digit rows of U by the TX stacked digit columns of
X. A K-block of at most INT8_MAX_BLOCK rows keeps every sum within 2^30 in magnitude (|digit product| <= 2^14), so the
tensor cores' int32 sums are exact in any order. The partial products of one weight 256^j (s + t = j) are summed in
64-bit integers, reduced mod q and multiplied by mult * 256^j mod q: C is the canonical residue, the words of the CPU
core's product.

Beside the fp64 engine (one DGEMM per X digit of ~52 - bU - log2(K) bits) it multiplies TU * TX times as many int8
products, on tensor cores with ~30x the fp64 rate (H200: ~1 979 dense int8 TOPS against 67 fp64 TFLOP/s, the card's
figures): faster when TU * TX is small, and ``python -m hemlp.bench gpu`` measures both.
"""
from __future__ import annotations

import numpy as np

from hemlp.errors import ParameterError, ShapeError

__all__ = ["DIGIT_BITS", "INT8_MAX_BLOCK", "ALIGN", "balanced_digit_count", "balanced_digits", "int8_blocks", "centred",
           "modgemm_int8"]

DIGIT_BITS = 8
#: rows of a K-block: |sum| <= INT8_MAX_BLOCK * 128 * 128 = 2^30 < 2^31 (int32 accumulation, exact)
INT8_MAX_BLOCK = 1 << 16
#: the tensor-core GEMM's dimensions and strides are multiples of ALIGN (zero-padded)
ALIGN = 16


def balanced_digit_count(bound: int) -> int:
    """The fewest balanced base-256 digits (each in [-128, 127]) that hold every integer of magnitude <= bound: each
    digit taken off leaves (v - d) / 256, of magnitude <= (|v| + 128) / 256, until the rest fits one int8."""
    if bound < 0:
        raise ParameterError(f"a magnitude bound must be >= 0, got {bound}")
    t, b = 1, int(bound)
    while b > 127:
        b, t = (b + 128) >> DIGIT_BITS, t + 1
    return t


def balanced_digits(v: np.ndarray, T: int) -> np.ndarray:
    """(T, *v.shape) int8 digits d_t with v = sum_t d_t 256^t (v int64); raises if T digits cannot hold v."""
    rest = np.asarray(v, dtype=np.int64).copy()
    out = np.empty((T,) + rest.shape, dtype=np.int8)
    for t in range(T - 1):
        d = rest & 255
        d = np.where(d >= 128, d - 256, d)
        out[t] = d
        rest = (rest - d) >> DIGIT_BITS
    if rest.size and (rest.max() > 127 or rest.min() < -128):
        raise ParameterError(f"{T} balanced int8 digits cannot hold these values")
    out[T - 1] = rest
    return out


def int8_blocks(d2: int) -> list[tuple[int, int]]:
    """The K-blocks [k0, k1) of a product with d2 columns of U: of at most INT8_MAX_BLOCK rows, equal and a multiple
    of ALIGN rows but for the last (so that each block's digits start aligned for the tensor cores)."""
    nblk = -(-d2 // INT8_MAX_BLOCK)
    kb = -(-(-(-d2 // nblk)) // ALIGN) * ALIGN
    return [(k0, min(k0 + kb, d2)) for k0 in range(0, d2, kb)]


def centred(X: np.ndarray, q: int) -> np.ndarray:
    """Residues in [0, q) as integers in [-(q - 1) / 2, (q - 1) / 2] (q odd)."""
    x = np.asarray(X, dtype=np.uint64)
    half = np.uint64(q >> 1)
    return np.where(x > half, -(np.uint64(q) - x).astype(np.int64), x.astype(np.int64))


def modgemm_int8(U, X, q: int, mult: int = 1, bU: int | None = None) -> np.ndarray:
    """C = mult * U X mod q (uint64) computed as the int8 engine does: digit GEMMs with every partial sum checked to
    lie within int32, recombined per weight 256^j. U: d1 x d2 integers (|U| <= 2^bU), X: d2 x n residues < q."""
    U = np.asarray(U, dtype=np.int64)
    X = np.asarray(X, dtype=np.uint64)
    if U.ndim != 2 or X.ndim != 2 or U.shape[1] != X.shape[0]:
        raise ShapeError(f"U (d1 x d2) and X (d2 x n) do not chain: {U.shape} and {X.shape}")
    if q < 3 or q % 2 == 0 or q >= 1 << 61:
        raise ParameterError("q must be odd, 3 <= q < 2^61")
    if X.size and int(X.max()) >= q:
        raise ParameterError("X holds a residue >= q")
    if bU is None:
        bU = max(0, (int(np.abs(U).max()) - 1).bit_length()) if U.size else 0
    if U.size and int(np.abs(U).max()) > 1 << bU:
        raise ParameterError(f"an entry of U exceeds 2^{bU} in magnitude")
    TU, TX = balanced_digit_count(1 << bU), balanced_digit_count((q - 1) // 2)
    Ud, Xd = balanced_digits(U, TU), balanced_digits(centred(X, q), TX)
    d1, n = U.shape[0], X.shape[1]
    acc = np.zeros((d1, n), dtype=object)
    weights = [(int(mult) * pow(256, j, q)) % q for j in range(TU + TX - 1)]
    for k0, k1 in int8_blocks(U.shape[1]):
        # one GEMM of the stacked digits: (TU d1 x kb) (kb x TX n), int32 sums
        prod = Ud[:, :, k0:k1].reshape(TU * d1, k1 - k0).astype(np.int64) @ \
            np.concatenate(list(Xd[:, k0:k1, :]), axis=1).astype(np.int64)
        if prod.size and (prod.max() >= 1 << 31 or prod.min() < -(1 << 31)):
            raise AssertionError("an int8 GEMM sum left int32: the K-block bound does not hold")
        parts = prod.reshape(TU, d1, TX, n)
        for j in range(TU + TX - 1):
            g = sum(parts[s, :, j - s, :] for s in range(max(0, j - TX + 1), min(TU, j + 1)))
            acc = (acc + (g.astype(object) % q) * weights[j]) % q
    return acc.astype(np.uint64)
