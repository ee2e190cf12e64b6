"""Jiang–Kim–Lauter–Song square ciphertext × ciphertext matmul (CCS'18; docs/design/pcmm-and-planning.md §5.2,
seed 002 §4 eqs. 3–14).

A d×d matrix is packed row-major, ι(A)_{d·i+j} = A_{i,j}, into a ciphertext of n slots:
n = d² when d² is a power of two (sparse packing, the JKLS setting: slots cycle with period d²),
otherwise the next power of two (zero-padded). Then

    A·B = Σ_{k<d} (φ^k∘σ(A)) ⊙ (ψ^k∘τ(B))                         (seed 002 eq. 4)

1. σ(A) = U^σ ι(A) (eq. 5, 2d−1 diagonals) and τ(B) = U^τ ι(B) (eq. 6: d diagonals d·k when
   n = d², 2d−1 when zero-padded), both by the BSGS/hoisted linear transform — level 1;
2. φ^k (k = 1..d−1): Rot(A0, k) ⊙ v_k + Rot(A0, k−d) ⊙ v_{k−d}   (eqs. 7, 13–14) — level 2;
   ψ^k: one rotation Rot(B0, d·k) (eq. 8) when n = d². Zero-padded, the rotation would read
   past ι(B), so ψ^k takes two masked rotations Rot(B0, d·k) ⊙ w_k + Rot(B0, d·k − d²) ⊙ w'_k;
3. Σ_k A^(k) ⊙ B^(k): d ct×ct products, one relinearisation and one rescale — level 3.

All rotations of A0 (φ) and of B0 (ψ) are hoisted (one decomposition each).
"""
from __future__ import annotations

import math

import numpy as np

from hemlp.he.lintrans import LinearTransform, diagonals
from hemlp.errors import ShapeError

__all__ = ["layout_slots", "sigma_matrix", "tau_matrix", "phi_masks", "psi_masks", "transforms",
           "required_rotations", "operation_counts", "pack", "unpack", "matmul", "DEPTH"]

DEPTH = 3


def layout_slots(d: int) -> int:
    """Slots of the packing: the smallest power of two >= d² (= d² exactly when d is a power of two)."""
    return 1 << max(0, math.ceil(math.log2(d * d)))


def _cyclic(d: int, n: int) -> bool:
    if d < 2 or d * d > n:
        raise ShapeError(f"JKLS needs 2 <= d and d² <= slots; got d = {d}, slots = {n}")
    return n == d * d


def sigma_matrix(d: int) -> np.ndarray:
    """U^σ (seed 002 eq. 5): U_{d·i+j, ℓ} = 1 iff ℓ = d·i + [i+j]_d."""
    i, j = np.divmod(np.arange(d * d), d)
    U = np.zeros((d * d, d * d))
    U[d * i + j, d * i + (i + j) % d] = 1
    return U


def tau_matrix(d: int) -> np.ndarray:
    """U^τ (seed 002 eq. 6): U_{d·i+j, ℓ} = 1 iff ℓ = d·[i+j]_d + j."""
    i, j = np.divmod(np.arange(d * d), d)
    U = np.zeros((d * d, d * d))
    U[d * i + j, d * ((i + j) % d) + j] = 1
    return U


def phi_masks(d: int, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(v_k, v_{k−d}) of eqs. 13–14 on n slots: column j < d−k reads j+k, the rest wraps to j+k−d."""
    ell = np.arange(n)
    inside = ell < d * d
    return (inside & (ell % d < d - k)).astype(float), (inside & (ell % d >= d - k)).astype(float)


def psi_masks(d: int, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Zero-padded ψ^k: rows i < d−k read row i+k (Rot d·k), the rest wrap (Rot d·k − d²)."""
    ell = np.arange(n)
    return (ell < d * (d - k)).astype(float), ((ell >= d * (d - k)) & (ell < d * d)).astype(float)


def transforms(d: int, n: int | None = None, bsgs: bool = True) -> tuple[LinearTransform, LinearTransform]:
    """The σ and τ linear transforms on n slots (n defaults to layout_slots(d))."""
    n = layout_slots(d) if n is None else int(n)
    _cyclic(d, n)
    return (LinearTransform(diagonals(sigma_matrix(d), n), n, bsgs),
            LinearTransform(diagonals(tau_matrix(d), n), n, bsgs))


def _phi_steps(d):
    return [k for k in range(1, d)] + [k - d for k in range(1, d)]


def _psi_steps(d, cyclic):
    return [d * k for k in range(1, d)] + ([] if cyclic else [d * k - d * d for k in range(1, d)])


def required_rotations(d: int, n: int | None = None, bsgs: bool = True) -> list[int]:
    """Every rotation step matmul uses for d×d matrices in n slots."""
    n = layout_slots(d) if n is None else int(n)
    s, t = transforms(d, n, bsgs)
    return sorted(set(s.steps) | set(t.steps) | set(_phi_steps(d)) | set(_psi_steps(d, _cyclic(d, n))))


def operation_counts(d: int, n: int | None = None, bsgs: bool = True) -> dict:
    """Exact operation counts of matmul (rot includes the hoisted ones).

    JKLS (n = d²): rot = rot(σ) + rot(τ) + 3(d−1) ≈ 3d + 5√d; pmult = (2d−1) + d + 2(d−1);
    cmult = d; depth 3. Zero-padded, ψ^k adds (d−1) rotations, 2(d−1) pmults and d−1 rescales.
    """
    n = layout_slots(d) if n is None else int(n)
    cyc = _cyclic(d, n)
    s, t = transforms(d, n, bsgs)
    psi = 1 if cyc else 2
    return dict(
        rot=s.rotations + t.rotations + 2 * (d - 1) + psi * (d - 1),
        hoisted=len(s.plan.baby) + len(t.plan.baby) + 2 * (d - 1) + psi * (d - 1),
        pmult=s.pmults + t.pmults + 2 * (d - 1) + (0 if cyc else 2 * (d - 1)),
        cmult=d,
        add=s.adds + t.adds + (d - 1) + (0 if cyc else d - 1) + (d - 1),
        rescale=2 + (d - 1) + (0 if cyc else d - 1) + 1,
        relin=1,
        drop=2,
        depth=DEPTH,
    )


def pack(ctx, A, key, n: int | None = None, level: int | None = None):
    """Encrypt ι(A) (row-major) in n = layout_slots(d) slots."""
    A = np.asarray(A)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ShapeError(f"JKLS multiplies square matrices, got shape {A.shape}")
    d = A.shape[0]
    n = layout_slots(d) if n is None else int(n)
    _cyclic(d, n)
    v = np.zeros(n, dtype=A.dtype)
    v[:d * d] = A.reshape(-1)
    return ctx.encrypt(v, key, level=level, slots=n)


def unpack(ctx, ct, sk, d: int) -> np.ndarray:
    return ctx.decrypt(ct, sk)[:d * d].reshape(d, d)


def _masked(ctx, cts, masks):
    """Σ cts[i] ⊙ masks[i] (masks at scale q_level), rescaled: one level, scale unchanged."""
    acc = None
    for c, m in zip(cts, masks):
        t = ctx.mul(c, m)
        acc = t if acc is None else ctx.add(acc, t)
    return ctx.rescale(acc)


def matmul(ctx, ct_a, ct_b, d: int, keys, relin_key, bsgs: bool = True, lts=None):
    """Encrypted A·B for d×d A, B packed by pack(): three levels, scale Δ_A·Δ_B / q.

    lts: optional (σ, τ) from transforms(d, n, bsgs) to reuse their encoded diagonals.
    """
    n = ct_a.slots
    if ct_b.slots != n or ct_a.level != ct_b.level:
        raise ShapeError("A and B must be packed alike (same slots) and sit at the same level")
    cyc = _cyclic(d, n)
    sig, tau = lts if lts is not None else transforms(d, n, bsgs)

    a0 = sig.apply(ctx, ct_a, keys)  # σ(A), level L−1
    b0 = tau.apply(ctx, ct_b, keys)  # τ(B), level L−1
    lvl = a0.level - 1

    # φ^k: both rotations of every k from one hoisted decomposition of A0.
    ra = dict(zip(_phi_steps(d), ctx.rotate_hoisted(a0, _phi_steps(d), keys)))
    a_k = [ctx.drop_level(a0, lvl)] + [
        _masked(ctx, [ra[k], ra[k - d]], phi_masks(d, k, n)) for k in range(1, d)]

    if cyc:  # ψ^k is a pure rotation: drop first, so the rotations run on one limb fewer
        b_low = ctx.drop_level(b0, lvl)
        b_k = [b_low] + ctx.rotate_hoisted(b_low, _psi_steps(d, True), keys)
    else:
        rb = dict(zip(_psi_steps(d, False), ctx.rotate_hoisted(b0, _psi_steps(d, False), keys)))
        b_k = [ctx.drop_level(b0, lvl)] + [
            _masked(ctx, [rb[d * k], rb[d * k - d * d]], psi_masks(d, k, n)) for k in range(1, d)]

    acc = None
    for a, b in zip(a_k, b_k):
        p = ctx.mul(a, b)  # size 3: relinearise once after the sum
        acc = p if acc is None else ctx.add(acc, p)
    return ctx.rescale(ctx.relinearize(acc, relin_key))
