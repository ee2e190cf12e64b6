"""Rectangular ciphertext × ciphertext matmul by σ/τ/ε/ω (Huang et al. 2023, HEGMM; FAME eqs. 1–16, Alg. 2–3).

For A (m×l) and B (l×n), with [x]_l = x mod l (FAME eqs. 1–5):

    A·B = Σ_{k<l} (ε^k∘σ(A)) ⊙ (ω^k∘τ(B)),
    σ(A)_{i,j} = A_{i,[i+j]_l},  τ(B)_{i,j} = B_{[i+j]_l,j},
    ε^k(A)_{i,j} = A_{i,[j+k]_l} (m×n),  ω^k(B)_{i,j} = B_{[i+k]_l,j} (m×n).

Matrices are flattened column-major (vec(A)_{i + j·m} = A_{i,j}) and each operator is the 0/1
matrix of FAME eqs. 6–9. The diagonal sets are found numerically by scanning those matrices on
the ciphertext's n slots (cyclic), so slot wrap-around merges diagonals when n is small:
FAME eqs. 12–13 (d_σ = 2min(m,l)−1, d_τ = 2min(n,l)−1) hold when nothing wraps, while with
n = m·l, ε^k is a single rotation by k·m.

Default slots: the smallest power of two >= max(ml, ln, mn). FAME eq. 16 takes max(ml, ln)
only, which cannot hold the m×n output when l < min(m, n) (Type II); we add mn.

Alg. 2: A0 = HLT(A, U^σ), B0 = HLT(B, U^τ); then for k < l, AB += HLT(A0, U^{ε^k}) ⊙ HLT(B0, U^{ω^k}).
Each HLT is the BSGS transform of hemlp.he.lintrans (one rescale, FAME Alg. 3 hoisting); the l
ε-transforms all rotate A0 (and the ω-transforms B0), so they use one common n1 and their baby
steps share one hoisted decomposition. The d products are summed before one relinearisation and one rescale: depth 3.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hemlp.he.lintrans import LinearTransform, diagonals, shared_n1
from hemlp.errors import ShapeError

__all__ = ["sigma_matrix", "tau_matrix", "epsilon_matrix", "omega_matrix", "default_slots", "Transforms",
           "diagonal_counts", "fame_diagonal_counts", "required_rotations", "operation_counts", "pack", "unpack",
           "matmul", "DEPTH"]

DEPTH = 3


def sigma_matrix(m: int, l: int) -> np.ndarray:
    """U^σ (FAME eq. 6): U_{i+j·m, h} = 1 iff h = i + [i+j]_l·m   (i < m, j < l)."""
    i, j = np.meshgrid(np.arange(m), np.arange(l), indexing="ij")
    U = np.zeros((m * l, m * l))
    U[i + j * m, i + (i + j) % l * m] = 1
    return U


def tau_matrix(l: int, n: int) -> np.ndarray:
    """U^τ (FAME eq. 7): U_{i+j·l, h} = 1 iff h = [i+j]_l + j·l   (i < l, j < n)."""
    i, j = np.meshgrid(np.arange(l), np.arange(n), indexing="ij")
    U = np.zeros((l * n, l * n))
    U[i + j * l, (i + j) % l + j * l] = 1
    return U


def epsilon_matrix(m: int, l: int, n: int, k: int) -> np.ndarray:
    """U^{ε^k} (FAME eq. 8), mn × ml: U_{i,j} = 1 iff j = [k·m + i]_{ml}."""
    i = np.arange(m * n)
    U = np.zeros((m * n, m * l))
    U[i, (k * m + i) % (m * l)] = 1
    return U


def omega_matrix(m: int, l: int, n: int, k: int) -> np.ndarray:
    """U^{ω^k} (FAME eq. 9), mn × ln: U_{i,j} = 1 iff j = [k + [i]_m]_l + ⌊i/m⌋·l."""
    i = np.arange(m * n)
    U = np.zeros((m * n, l * n))
    U[i, (k + i % m) % l + (i // m) * l] = 1
    return U


def default_slots(m: int, l: int, n: int) -> int:
    """The smallest power of two holding A, B and A·B."""
    return 1 << max(0, math.ceil(math.log2(max(m * l, l * n, m * n))))


def _check(m, l, n, slots):
    if min(m, l, n) < 1:
        raise ShapeError(f"matrix dimensions must be positive, got m={m}, l={l}, n={n}")
    if max(m * l, l * n, m * n) > slots:
        raise ShapeError(f"A ({m}×{l}), B ({l}×{n}) and A·B ({m}×{n}) must each fit in {slots} slots")


@dataclass
class Transforms:
    """The σ, τ, ε^k, ω^k transforms (k < l) for one shape on n slots; reusable across products."""

    m: int
    l: int
    n: int
    slots: int
    bsgs: bool = True
    n1: int | None = None   # one baby-step size for every transform (fewer distinct rotation keys)

    def __post_init__(self):
        m, l, n, s = self.m, self.l, self.n, self.slots
        _check(m, l, n, s)
        self.sigma = LinearTransform(diagonals(sigma_matrix(m, l), s), s, self.bsgs, n1=self.n1)
        self.tau = LinearTransform(diagonals(tau_matrix(l, n), s), s, self.bsgs, n1=self.n1)
        self.epsilon = self._family([diagonals(epsilon_matrix(m, l, n, k), s) for k in range(l)])
        self.omega = self._family([diagonals(omega_matrix(m, l, n, k), s) for k in range(l)])

    def _family(self, diags: list) -> list:
        """Transforms of one ciphertext: a common n1 chosen for the shared hoisted baby steps."""
        n1 = (self.n1 or shared_n1(diags, self.slots)) if self.bsgs else 0
        return [LinearTransform(dg, self.slots, bsgs=n1 > 0, n1=n1 or None) for dg in diags]

    @property
    def eps_baby(self) -> list[int]:
        """Baby steps of all ε^k together: one hoisted decomposition of A0 serves them all."""
        return sorted(set().union(*(t.plan.baby for t in self.epsilon)))

    @property
    def omega_baby(self) -> list[int]:
        return sorted(set().union(*(t.plan.baby for t in self.omega)))

    @property
    def steps(self) -> list[int]:
        ts = [self.sigma, self.tau] + self.epsilon + self.omega
        return sorted(set().union(*(t.steps for t in ts)))


def diagonal_counts(m: int, l: int, n: int, slots: int | None = None) -> dict:
    """Numerically scanned nonzero-diagonal counts of U^σ, U^τ, U^{ε^k}, U^{ω^k} on `slots` slots."""
    s = default_slots(m, l, n) if slots is None else int(slots)
    _check(m, l, n, s)
    return dict(sigma=len(diagonals(sigma_matrix(m, l), s)), tau=len(diagonals(tau_matrix(l, n), s)),
                epsilon=[len(diagonals(epsilon_matrix(m, l, n, k), s)) for k in range(l)],
                omega=[len(diagonals(omega_matrix(m, l, n, k), s)) for k in range(l)])


def fame_diagonal_counts(m: int, l: int, n: int) -> dict:
    """FAME eqs. 12–15 as printed (eq. 15 only for m = l; the seed garbles the other case).

    They count non-wrapping diagonals; eq. 14 is the largest ε^k count (k = l−1) when l | n.
    """
    return dict(sigma=2 * min(m, l) - 1, tau=2 * min(n, l) - 1, epsilon=n // l + 1,
                omega=2 if m == l else None)


def required_rotations(m: int, l: int, n: int, slots: int | None = None, bsgs: bool = True) -> list[int]:
    s = default_slots(m, l, n) if slots is None else int(slots)
    return Transforms(m, l, n, s, bsgs).steps


def operation_counts(m: int, l: int, n: int, slots: int | None = None, bsgs: bool = True) -> dict:
    """Exact counts of matmul. FAME Table I (no BSGS, no sharing): CMult = Rot = φ + ζ with
    φ = d_σ + d_τ, ζ = l(d_ε + d_ω); ours has pmult = φ + ζ and rot <= φ + ζ."""
    s = default_slots(m, l, n) if slots is None else int(slots)
    t = Transforms(m, l, n, s, bsgs)
    loop = t.epsilon + t.omega
    return dict(
        rot=t.sigma.rotations + t.tau.rotations + len(t.eps_baby) + len(t.omega_baby)
        + sum(len(x.plan.giant) for x in loop),
        hoisted=len(t.sigma.plan.baby) + len(t.tau.plan.baby) + len(t.eps_baby) + len(t.omega_baby),
        pmult=sum(x.pmults for x in [t.sigma, t.tau] + loop),
        cmult=l,
        add=sum(x.adds for x in [t.sigma, t.tau] + loop) + (l - 1),
        rescale=2 + 2 * l + 1,
        relin=1,
        depth=DEPTH,
    )


def pack(ctx, M, key, slots: int, level: int | None = None):
    """Encrypt M column-major (vec(M)_{i + j·rows} = M_{i,j}) in the first rows·cols of `slots` slots."""
    M = np.asarray(M)
    if M.ndim != 2 or M.size > slots:
        raise ShapeError(f"a {M.shape} matrix does not fit in {slots} slots")
    v = np.zeros(int(slots), dtype=M.dtype)
    v[:M.size] = M.reshape(-1, order="F")
    return ctx.encrypt(v, key, level=level, slots=int(slots))


def unpack(ctx, ct, sk, m: int, n: int) -> np.ndarray:
    return ctx.decrypt(ct, sk)[:m * n].reshape((m, n), order="F")


def matmul(ctx, ct_a, ct_b, shape, keys, relin_key, bsgs: bool = True, transforms: Transforms | None = None):
    """Encrypted A (m×l) · B (l×n), both packed by pack() on the same slots: three levels (FAME Alg. 2)."""
    m, l, n = (int(x) for x in shape)
    if ct_a.slots != ct_b.slots or ct_a.level != ct_b.level:
        raise ShapeError("A and B must be packed on the same slots and sit at the same level")
    t = transforms if transforms is not None else Transforms(m, l, n, ct_a.slots, bsgs)
    if (t.m, t.l, t.n, t.slots) != (m, l, n, ct_a.slots):
        raise ShapeError("the prepared transforms are for another shape or slot count")

    a0 = t.sigma.apply(ctx, ct_a, keys)
    b0 = t.tau.apply(ctx, ct_b, keys)
    ra = dict(zip(t.eps_baby, ctx.rotate_hoisted(a0, t.eps_baby, keys))) if t.eps_baby else {}
    rb = dict(zip(t.omega_baby, ctx.rotate_hoisted(b0, t.omega_baby, keys))) if t.omega_baby else {}
    acc = None
    for k in range(l):
        ak = t.epsilon[k].apply(ctx, a0, keys, rotated=ra)
        bk = t.omega[k].apply(ctx, b0, keys, rotated=rb)
        p = ctx.mul(ak, bk)  # size 3: relinearise once after the sum
        acc = p if acc is None else ctx.add(acc, p)
    return ctx.rescale(ctx.relinearize(acc, relin_key))
