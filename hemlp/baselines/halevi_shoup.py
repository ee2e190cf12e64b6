"""Plaintext matrix × encrypted vectors by Halevi–Shoup diagonals with BSGS (the PCMM baseline,
docs/design/pcmm-and-planning.md §5.1).

Layout (block-diagonal, docs/design/pcmm-and-planning.md §5.1 first option): U (d_out × d_in) is zero-padded to
d × d with d = max(d_out, d_in); the input vectors x_0, x_1, ... (d_in entries each, zero-padded to d) sit in
consecutive d-slot blocks, slots [c·d, c·d + d) hold x_c, so one ciphertext carries
n // d vectors (n = its slot count). The product applies I ⊗ U, whose generalised diagonals
are the 2d − 1 offsets -d < k < d:

    diag_k[c·d + r] = U[r, r + k]   if 0 <= r + k < d,   else 0,

so the cost is BSGS over 2d − 1 offsets, ≈ 2·sqrt(2d) rotations and 2d − 1 plaintext
multiplications per ciphertext, one level. A rectangular U has only the offsets
-d_out < k < d_in (the padding is zero), d_out + d_in − 1 diagonals. The output uses the same block layout
(d_out entries per block), so layers compose without re-packing. We prefer this over the
replicate-x-with-period-d variant (d diagonals, but a replication of every input with
log2(n/d) extra rotations and a layout that differs between input and output).
"""
from __future__ import annotations

import numpy as np

from hemlp.he.lintrans import LinearTransform
from hemlp.errors import ShapeError

__all__ = ["block_size", "block_diagonals", "transform", "rotation_steps", "pack", "unpack", "matvec", "matmul"]


def block_size(shape) -> int:
    """d = max(d_out, d_in): U is padded to d × d."""
    d_out, d_in = shape
    return max(int(d_out), int(d_in))


def block_diagonals(U, n: int) -> dict[int, np.ndarray]:
    """Nonzero generalised diagonals of I_{n//d} ⊗ U_pad on n slots (offsets -d < k < d)."""
    U = np.asarray(U, dtype=np.complex128 if np.iscomplexobj(U) else np.float64)
    if U.ndim != 2:
        raise ShapeError(f"U must be a matrix, got shape {U.shape}")
    d = block_size(U.shape)
    if d > n:
        raise ShapeError(f"a {U.shape[0]}×{U.shape[1]} matrix needs blocks of {d} slots; the ciphertext has {n}")
    Up = np.zeros((d, d), dtype=U.dtype)
    Up[:U.shape[0], :U.shape[1]] = U
    r = np.arange(d)
    out = {}
    for k in range(1 - d, d):
        ok = (r + k >= 0) & (r + k < d)
        block = np.zeros(d, dtype=U.dtype)
        block[ok] = Up[r[ok], r[ok] + k]
        if np.any(block != 0):
            v = np.zeros(n, dtype=U.dtype)
            v[:(n // d) * d] = np.tile(block, n // d)  # a partial last block stays empty
            out[k] = v
    return out


def transform(U, n: int, bsgs: bool = True, n1: int | None = None) -> LinearTransform:
    """The prepared I ⊗ U transform on n slots (encode once, apply to many ciphertexts)."""
    return LinearTransform(block_diagonals(U, n), n, bsgs, n1)


def rotation_steps(U, n: int, bsgs: bool = True, n1: int | None = None) -> list[int]:
    """Rotation keys matvec/matmul need. U: the matrix, or its shape (then all 2d − 1 diagonals)."""
    if isinstance(U, tuple):
        U = np.ones(U)
    return transform(U, n, bsgs, n1).steps


def pack(ctx, X, key, d: int, slots: int | None = None, level: int | None = None) -> list:
    """Encrypt the columns of X (d_in × d3) as d-slot blocks, n // d columns per ciphertext."""
    X = np.asarray(X)
    n = ctx.slots if slots is None else int(slots)
    if X.ndim != 2 or X.shape[0] > d:
        raise ShapeError(f"X must be a (d_in <= {d}) × d3 matrix, got shape {X.shape}")
    per = n // d
    cts = []
    for c0 in range(0, X.shape[1], per):
        cols = X[:, c0:c0 + per]
        v = np.zeros(n, dtype=X.dtype)
        blocks = np.zeros((d, cols.shape[1]), dtype=X.dtype)
        blocks[:X.shape[0]] = cols
        v[:blocks.size] = blocks.T.reshape(-1)  # column c in slots [c·d, c·d + d)
        cts.append(ctx.encrypt(v, key, level=level, slots=n))
    return cts


def unpack(ctx, cts, sk, d_out: int, d3: int, d: int) -> np.ndarray:
    """Decrypt column-packs into the d_out × d3 result."""
    cols = []
    for ct in cts:
        v = ctx.decrypt(ct, sk)
        per = ct.slots // d
        cols.append(v[:per * d].reshape(per, d)[:, :d_out].T)
    return np.concatenate(cols, axis=1)[:, :d3]


def matvec(ctx, U, ct, keys, bsgs: bool = True, n1: int | None = None):
    """U applied to every vector packed in ct (block layout above): one level, scale unchanged."""
    return transform(U, ct.slots, bsgs, n1).apply(ctx, ct, keys)


def matmul(ctx, U, cts, keys, bsgs: bool = True, n1: int | None = None) -> list:
    """U · [m_1 … m_d3] for column-packs cts; the diagonals are encoded once per level and shared."""
    cts = list(cts)
    if not cts:
        return []
    lt = transform(U, cts[0].slots, bsgs, n1)
    return [lt.apply(ctx, ct, keys) for ct in cts]
