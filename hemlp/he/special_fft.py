"""The CKKS "special FFT" as sparse butterfly stages, and their merging into levels (cleartext math).

Everything here is numpy on cleartext vectors; hemlp.he.dft evaluates the result
homomorphically. Notation (the conventions of the core's encoder, csrc/ckks/encoder.cpp):

- n slots (a power of two, n <= N/2), ζ = exp(2πi/(4n)) (for n = N/2: the 2N-th root of X^N + 1);
- the embedding U (n×n): U[j, k] = ζ^(5^j · k), so slot j holds z_j = Σ_k U[j, k] w_k, where
  w_k = m_{k·gap} + i·m_{N/2 + k·gap} are the plaintext's (scaled) coefficients, gap = N/(2n);
- R: the bit-reversal permutation of n = 2^L entries (an involution);
- B_s (s = 1..L), the butterfly stage of half-length h = 2^(s-1): for p in a block of length 2h
  at offset p mod 2h = t,
      t < h:   (B_s v)[p] = v[p] + ω_t·v[p+h]
      t >= h:  (B_s v)[p] = v[p-h] - ω_(t-h)·v[p],    ω_t = exp(2πi·(5^t mod 8h)/(8h)).

Then (Cheon–Han–Kim–Kim–Song EC'19 §3; Chen–Chillotti–Song EC'19)

    U = B_L · B_(L-1) ⋯ B_1 · R            and       U⁻¹ = R · B̃_1 ⋯ B̃_L,

with B̃_s = B_s⁻¹: for t < h, (B̃_s v)[p] = (v[p] + v[p+h])/2 and (B̃_s v)[p+h] = ω̄_t·(v[p] − v[p+h])/2
(the 1/n of the inverse is spread as 1/2 per stage, so every stage, and every merged product,
has entries of modulus <= 1). Both identities are checked against the dense U and against the
core's own special FFT in tests/he/test_dft.py.

Each stage has 3 generalised diagonals (offsets 0, +h, −h mod n; see hemlp.he.lintrans for the
convention diag_k[i] = T[i, (i+k) mod n]). A product of r consecutive stages has at most
2^(r+1) − 1 diagonals (offsets Σ ε_s h_s, ε_s ∈ {−1, 0, 1}), fewer when an offset wraps mod n.

Grouping into levels (radix merging): the L stages, in application order, are cut into `depth`
consecutive groups of sizes as equal as possible (the larger groups applied last, i.e. at the
lower, cheaper levels), or sizes given explicitly. Each group is one matrix = one level.

Bit reversal: with bit_reversed=True (the default, as Lattigo) R is left out, so
CoeffToSlot evaluates R·U⁻¹ (output slots in bit-reversed order) and SlotToCoeff evaluates U·R
(it takes bit-reversed slots); the pair composes to the identity and slot-wise maps in between
commute with R. With bit_reversed=False, R is merged into the group next to it (the last
CoeffToSlot group, the first SlotToCoeff group), which gives that group up to ~n diagonals.
"""
from __future__ import annotations

import numpy as np

from hemlp.errors import ParameterError

__all__ = ["log2_exact", "bit_reverse", "embedding_matrix", "forward_stages", "inverse_stages", "compose",
           "permute", "group_sizes", "level_matrices", "dense"]


def log2_exact(n: int) -> int:
    n = int(n)
    if n < 2 or n & (n - 1):
        raise ParameterError(f"the slot count must be a power of two >= 2, got {n}")
    return n.bit_length() - 1


def bit_reverse(n: int) -> np.ndarray:
    """rev[i] = i with its log2(n) bits reversed."""
    L = log2_exact(n)
    i = np.arange(n)
    rev = np.zeros(n, dtype=np.int64)
    for b in range(L):
        rev |= ((i >> b) & 1) << (L - 1 - b)
    return rev


def embedding_matrix(n: int) -> np.ndarray:
    """Dense U[j, k] = ζ^(5^j·k), ζ = exp(2πi/(4n)) (exponents reduced mod 4n exactly)."""
    log2_exact(n)
    m = 4 * n
    g = np.array([pow(5, j, m) for j in range(n)], dtype=np.int64)
    e = (g[:, None] * np.arange(n)[None, :]) % m
    return np.exp(2j * np.pi * e / m)


def _omega(t: np.ndarray, h: int) -> np.ndarray:
    m = 8 * h
    return np.exp(2j * np.pi * np.array([pow(5, int(x), m) for x in t]) / m)


def forward_stages(n: int) -> list[dict]:
    """[B_1, ..., B_L] as {offset mod n: diagonal}."""
    L = log2_exact(n)
    p = np.arange(n)
    out = []
    for s in range(1, L + 1):
        h = 1 << (s - 1)
        t = p % (2 * h)
        lo = t < h
        w = _omega(np.where(lo, t, t - h), h)
        d = {0: np.where(lo, 1.0, -w).astype(complex)}
        up, down = np.where(lo, w, 0), np.where(lo, 0, 1.0).astype(complex)
        _acc(d, h % n, up, n)
        _acc(d, (-h) % n, down, n)
        out.append(d)
    return out


def inverse_stages(n: int) -> list[dict]:
    """[B̃_1, ..., B̃_L] = [B_1⁻¹, ..., B_L⁻¹] as {offset mod n: diagonal} (1/2 folded into each)."""
    L = log2_exact(n)
    p = np.arange(n)
    out = []
    for s in range(1, L + 1):
        h = 1 << (s - 1)
        t = p % (2 * h)
        lo = t < h
        wbar = np.conj(_omega(np.where(lo, t, t - h), h))
        d = {0: np.where(lo, 0.5, -0.5 * wbar).astype(complex)}
        _acc(d, h % n, np.where(lo, 0.5, 0).astype(complex), n)
        _acc(d, (-h) % n, np.where(lo, 0, 0.5 * wbar), n)
        out.append(d)
    return out


def _acc(d: dict, k: int, v: np.ndarray, n: int) -> None:
    k %= n
    d[k] = d[k] + v if k in d else v


def compose(A: dict, B: dict, n: int) -> dict:
    """Diagonals of the product A·B: (A·B)[i, i+a+b] gets A[i, i+a]·B[i+a, i+a+b]."""
    out: dict = {}
    for a, da in A.items():
        for b, db in B.items():
            _acc(out, a + b, da * np.roll(db, -a), n)
    return {k: v for k, v in out.items() if np.any(v != 0)}


def permute(D: dict, perm: np.ndarray, n: int, side: str) -> dict:
    """Diagonals of P·D (side='left') or D·P (side='right') for the permutation matrix P with
    P[i, perm[i]] = 1 and perm an involution (as the bit reversal)."""
    rows, cols, vals = [], [], []
    i = np.arange(n)
    for k, v in D.items():
        nz = v != 0
        rows.append(i[nz])
        cols.append((i[nz] + k) % n)
        vals.append(v[nz])
    r, c, v = np.concatenate(rows), np.concatenate(cols), np.concatenate(vals)
    if side == "left":       # (P D)[i, j] = D[perm[i], j]: row r moves to row perm[r]
        r = perm[r]
    elif side == "right":    # (D P)[i, j] = D[i, perm[j]]: column c moves to column perm[c]
        c = perm[c]
    else:
        raise ValueError("side is 'left' or 'right'")
    out: dict = {}
    offs = (c - r) % n
    for k in np.unique(offs):
        sel = offs == k
        d = np.zeros(n, dtype=complex)
        d[r[sel]] = v[sel]
        out[int(k)] = d
    return out


def group_sizes(L: int, depth) -> tuple:
    """Stage counts per level, in application order: an int depth splits L as evenly as possible
    (larger groups last); a sequence is taken as given (it must sum to L)."""
    if isinstance(depth, (int, np.integer)) and not isinstance(depth, bool):
        d = int(depth)
        if not 1 <= d <= L:
            raise ParameterError(f"depth must be in [1, log2(slots) = {L}], got {d}")
        q, r = divmod(L, d)
        return tuple([q] * (d - r) + [q + 1] * r)
    try:
        sizes = tuple(int(x) for x in depth)
    except TypeError:
        raise ParameterError(f"depth must be an int or a sequence of stage counts, got {depth!r}") from None
    if isinstance(depth, bool) or not sizes or any(x < 1 for x in sizes) or sum(sizes) != L:
        raise ParameterError(f"stage counts {sizes} must be positive and sum to log2(slots) = {L}")
    return sizes


def level_matrices(n: int, depth, inverse: bool, bit_reversed: bool = True) -> list[dict]:
    """The merged per-level matrices as diagonals, in application order.

    inverse=True (CoeffToSlot): their product (last applied on the left) is R·U⁻¹, or U⁻¹ when
    bit_reversed=False. inverse=False (SlotToCoeff): U·R, or U.
    """
    L = log2_exact(n)
    sizes = group_sizes(L, depth)
    if inverse:   # applied first: B̃_L (h = n/2), last: B̃_1
        order = inverse_stages(n)[::-1]
    else:         # applied first: B_1 (h = 1), last: B_L
        order = forward_stages(n)
    mats, pos = [], 0
    for r in sizes:
        G = order[pos]
        for st in order[pos + 1:pos + r]:
            G = compose(st, G, n)  # a later stage multiplies on the left
        mats.append(G)
        pos += r
    if not bit_reversed:
        rev = bit_reverse(n)
        if inverse:
            mats[-1] = permute(mats[-1], rev, n, "left")
        else:
            mats[0] = permute(mats[0], rev, n, "right")
    return mats


def dense(D: dict, n: int) -> np.ndarray:
    """The n×n matrix of a diagonal dict (tests and small n only)."""
    T = np.zeros((n, n), dtype=complex)
    i = np.arange(n)
    for k, v in D.items():
        T[i, (i + k) % n] += v
    return T
