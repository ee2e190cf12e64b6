"""Homomorphic linear transforms y = T x on CKKS slot vectors (generalised diagonals, BSGS, hoisting).

A transform T acts on the n = ct.slots slots of a ciphertext, cyclically. Its generalised
diagonals are diag_k[i] = T[i, (i + k) mod n] and

    T x = sum_k diag_k ⊙ rot_k(x)                                  (Halevi–Shoup; seed 002 eq. 3, FAME eq. 11)

with rot_k the left rotation by k. Baby-step/giant-step (docs/design/pcmm-and-planning.md §5.1) writes every offset as
k = g·n1 + b (0 <= b < n1) and evaluates

    T x = sum_g rot_{g n1}( sum_b rot_{-g n1}(diag_{g n1 + b}) ⊙ rot_b(x) )

so that only the distinct baby steps b (hoisted: one decomposition + ModUp for all of them)
and the distinct giant steps g·n1 are rotations. The plaintext diagonals are pre-rotated by
g·n1 and encoded at the ciphertext's level with scale q_level, so the single rescale at the
end returns the input scale exactly (FAME Alg. 1/3: one rescale per transform, depth 1).

A matrix smaller than n×n is embedded in the top-left corner of an n×n zero matrix: the
input's slots beyond its columns must be zero, and the output's slots beyond its rows are.

Offsets are kept as signed representatives in (-n/2, n/2], so contiguous diagonal bands
around 0 (σ, block-diagonal matrices) give short baby and giant ranges.

Native evaluation (the default with a hemlp.fhe.Context): the whole schedule runs in one call of
hemlp._core.LinearTransform (csrc/boot/lintrans.h), with the diagonals encoded once per (context,
level) over Q_level ∪ P. hoisting="double" (Bossuat et al. EC'21) keeps the baby steps in Q_level ∪ P
(no ModDown per baby step), accumulates each giant group there, brings only c1 down per giant step and
fuses the final ModDown with the rescale; hoisting="single" rotates every baby step fully (one shared
ModUp), multiplies over Q_level and rescales at the end, as the Python path does. native=False runs the
Python path (one native call per rotation / product / addition): the reference the tests compare with,
and what an OpCounter counts.
"""
from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass

import numpy as np

from hemlp import _core
from hemlp.fhe import Ciphertext, Context, GaloisKeys
from hemlp.errors import MissingKeyError, ParameterError, ShapeError

__all__ = ["diagonals", "plan", "shared_n1", "Plan", "LinearTransform", "rotation_steps", "apply", "OpCounter",
           "signed", "HOISTING", "choose_hoisting"]

#: hoisting schedules of the native path (see the module doc); "auto" picks one by choose_hoisting
HOISTING = {"single": 1, "double": 2}


def choose_hoisting(p: "Plan", level: int, num_p: int) -> str:
    """The native schedule expected to be faster for plan p at this level with |P| = num_p special primes.

    Double hoisting saves a ModDown (|P| INTTs + level+1 NTTs + a base conversion) for two polynomials
    per baby step and one per giant step, and pays for multiplying every diagonal over |P| more limbs
    (and for streaming them from memory). Rule: double when 2·D·|P| <= 1.5·(2·babies + giants)·(|P| +
    level + 1), D the diagonal count. Fitted on CPU-time sweeps (set B chain, |P| = 6, 1 thread, loaded
    machine, about ±5 % noise): 31 diagonals (7 baby + 3 giant steps) cross over at 9-13 Q limbs at
    N = 2^14 and 7-10 at N = 2^15 (0.77x-0.94x below, 1.07x-1.16x above); 63 diagonals (7 + 7) at 10-13
    limbs at N = 2^15 (0.83x at 5, 1.04x-1.07x at 13-16) but above 17 at N = 2^14. Near the crossover
    the two are within ~5 %; double hoisting is also the more precise one (up to 3 bits in StC: the
    baby steps skip their ModDown rounding), which is why hemlp.he.dft asks for it explicitly.
    """
    extra = 2 * p.diagonals * num_p
    saved = 1.5 * (2 * len(p.baby) + len(p.giant)) * (num_p + level + 1)
    return "double" if extra <= saved else "single"


def signed(k: int, n: int) -> int:
    """The representative of k mod n in (-n/2, n/2]."""
    k %= n
    return k - n if k > n // 2 else k


def diagonals(T, n: int | None = None) -> dict[int, np.ndarray]:
    """Nonzero generalised diagonals of T (x×y, x, y <= n) embedded in n×n: {signed offset: vector}.

    Found by scanning the nonzero entries: entry (i, j) lies on diagonal (j - i) mod n.
    """
    T = np.asarray(T)
    if T.ndim != 2:
        raise ShapeError(f"a linear transform is a 2-D matrix, got shape {T.shape}")
    x, y = T.shape
    n = max(x, y) if n is None else int(n)
    if x > n or y > n:
        raise ShapeError(f"a {x}×{y} matrix does not fit in {n} slots")
    dtype = np.complex128 if np.iscomplexobj(T) else np.float64
    rows, cols = np.nonzero(T)
    offs = (cols - rows) % n
    out = {}
    for k in np.unique(offs):
        sel = offs == k
        v = np.zeros(n, dtype=dtype)
        v[rows[sel]] = T[rows[sel], cols[sel]]
        out[signed(int(k), n)] = v
    return out


def _normalise(diags: dict, n: int) -> dict[int, np.ndarray]:
    out = {}
    for k, v in diags.items():
        v = np.asarray(v)
        if v.shape != (n,):
            raise ShapeError(f"diagonal {k} has shape {v.shape}; every diagonal needs exactly n = {n} entries")
        ks = signed(int(k), n)
        out[ks] = out[ks] + v if ks in out else v  # offsets equal mod n are the same diagonal
    return {k: v for k, v in out.items() if np.any(v != 0)}


@dataclass(frozen=True)
class Plan:
    """A BSGS decomposition of a set of offsets: offset = g·n1 + b, grouped by giant index g.

    n1 = 0 denotes the plain (non-BSGS) evaluation: one group, every offset a (hoisted) baby step.
    """

    n: int
    n1: int
    groups: tuple  # ((g, (b, ...)), ...) sorted

    @property
    def baby(self) -> list[int]:
        return sorted({b for _, bs in self.groups for b in bs} - {0})

    @property
    def giant(self) -> list[int]:
        return sorted(g * self.n1 for g, _ in self.groups if g != 0)

    @property
    def steps(self) -> list[int]:
        """Rotation steps the evaluation uses (the keys a caller must generate)."""
        return sorted(set(self.baby) | set(self.giant))

    @property
    def rotations(self) -> int:
        return len(self.baby) + len(self.giant)

    @property
    def diagonals(self) -> int:
        return sum(len(bs) for _, bs in self.groups)

    def offset(self, g: int, b: int) -> int:
        return g * self.n1 + b


def _split(offsets, n1: int) -> tuple:
    groups: dict[int, list[int]] = {}
    for k in offsets:
        g, b = divmod(k, n1)  # floor division: b in [0, n1) also for negative k
        groups.setdefault(g, []).append(b)
    return tuple((g, tuple(sorted(bs))) for g, bs in sorted(groups.items()))


@functools.lru_cache(maxsize=4096)
def _plan(offsets: tuple, n: int, bsgs: bool, n1: int | None) -> Plan:
    if not bsgs:
        return Plan(n, 0, ((0, offsets),))
    if n1 is not None:
        if n1 < 1:
            raise ValueError(f"n1 must be >= 1, got {n1}")
        return Plan(n, n1, _split(offsets, n1))
    # Search every n1 up to the offset span: fewest rotations, then fewest (non-hoisted) giant steps.
    ks = np.asarray(offsets)
    best_key = None
    for c in range(1, int(ks[-1] - ks[0]) + 2):
        b, g = np.unique(ks % c), np.unique(ks // c)
        giant = len(g) - int(np.any(g == 0))
        key = (len(b) - int(b[0] == 0) + giant, giant, c)
        best_key = key if best_key is None or key < best_key else best_key
    return Plan(n, best_key[2], _split(offsets, best_key[2]))


def plan(offsets, n: int, bsgs: bool = True, n1: int | None = None) -> Plan:
    """BSGS plan for these diagonal offsets (taken mod n); n1=None searches the best n1."""
    offs = tuple(sorted({signed(int(k), n) for k in offsets}))
    if not offs:
        raise ValueError("the transform has no nonzero diagonal")
    return _plan(offs, int(n), bool(bsgs), None if n1 is None else int(n1))


def shared_n1(offset_sets, n: int) -> int:
    """One n1 for several transforms of the same ciphertext whose baby steps share one hoisted
    decomposition: minimises |∪ baby| + Σ |giant| (0: no BSGS, every offset a baby step)."""
    sets = [np.array(sorted({signed(int(k), n) for k in s})) for s in offset_sets]
    allk = np.concatenate(sets)
    best = (len(set(allk.tolist()) - {0}), 0, 0)
    for c in range(1, int(allk.max() - allk.min()) + 2):
        b = np.unique(allk % c)
        giant = sum(int(np.count_nonzero(np.unique(s // c))) for s in sets)
        best = min(best, (len(b) - int(b[0] == 0) + giant, giant, c))
    return best[2]


class LinearTransform:
    """T as diagonals plus a BSGS plan; plaintexts encoded once per (context, level) and cached.

    T: a matrix (x×y, x, y <= n) or a dict {offset: length-n vector}; n: the ciphertext's slots.
    """

    def __init__(self, T, n: int, bsgs: bool = True, n1: int | None = None):
        self.n = int(n)
        self.diags = _normalise(T, self.n) if isinstance(T, dict) else diagonals(T, self.n)
        self.plan = plan(self.diags, self.n, bsgs, n1)
        self._pts: dict = {}
        self._native: dict = {}
        self._pt_bytes: dict = {}

    steps = property(lambda self: self.plan.steps)
    rotations = property(lambda self: self.plan.rotations)
    pmults = property(lambda self: self.plan.diagonals)
    adds = property(lambda self: self.plan.diagonals - 1)

    def encode(self, ctx, level: int) -> dict:
        """{(g, b): Plaintext of rot_{-g n1}(diag_{g n1 + b})} at this level, scale q_level."""
        key = (ctx.hash, int(level))
        if key not in self._pts:
            q = float(ctx.modulus(level))
            p = self.plan
            self._pts[key] = {
                (g, b): ctx.encode(np.roll(self.diags[p.offset(g, b)], g * p.n1), level=level, scale=q, slots=self.n)
                for g, bs in p.groups for b in bs}
            self._pt_bytes[key] = p.diagonals * (int(level) + 1) * ctx.N * 8
        return self._pts[key]

    def simulate(self, x) -> np.ndarray:
        """The BSGS schedule of apply() on a cleartext vector (numpy rolls): checks plans without keys."""
        x = np.asarray(x)
        rot = lambda v, k: np.roll(v, -k)  # noqa: E731  left rotation, as ctx.rotate
        p, y = self.plan, 0
        for g, bs in p.groups:
            inner = sum(np.roll(self.diags[p.offset(g, b)], g * p.n1) * rot(x, b) for b in bs)
            y = y + rot(inner, g * p.n1)
        return y

    def encode_native(self, ctx, level: int, qp: bool = True):
        """The native transform with every pre-rotated diagonal encoded at scale q_level over Q_level ∪ P
        (qp=True: what double hoisting needs) or over Q_level only (qp=False: enough for single
        hoisting, |P| limbs less per diagonal); hemlp._core.LinearTransform, cached per (context, level):
        a Q_level ∪ P set also serves single hoisting, a Q_level set is replaced when qp is asked."""
        key = (ctx.hash, int(level))
        t = self._native.get(key)
        if t is None or (qp and not t.qp):
            p = self.plan
            diags = np.array([np.roll(self.diags[p.offset(g, b)], g * p.n1) for g, bs in p.groups for b in bs],
                             dtype=np.complex128)
            t = self._native[key] = _core.LinearTransform(
                ctx.native, self.n, int(level), float(ctx.modulus(level)), [g * p.n1 for g, _ in p.groups],
                [list(bs) for _, bs in p.groups], diags, bool(qp))
        return t

    def clear_cache(self) -> None:
        """Forget every encoded diagonal set (Python plaintexts and native Q_level ∪ P encodings)."""
        self._pts.clear()
        self._native.clear()
        self._pt_bytes.clear()

    @property
    def nbytes(self) -> int:
        """Bytes of the encoded diagonals cached so far (native Q_level ∪ P sets and Python plaintexts)."""
        return sum(self._pt_bytes.values()) + sum(t.nbytes for t in self._native.values())

    def apply_native(self, ctx: Context, ct, keys, rescale: bool = True, hoisting: str = "auto"):
        """T·ct in one native call; returns (ciphertext, counts) with counts of ModUps, key inner
        products, ModDowns (polynomials), diagonal products and rescales. hoisting: "single",
        "double" or "auto" (choose_hoisting)."""
        if hoisting == "auto":
            hoisting = choose_hoisting(self.plan, ct.level, len(ctx.params.p))
        if hoisting not in HOISTING:
            raise ParameterError(f"hoisting must be 'auto' or one of {sorted(HOISTING)}, got {hoisting!r}")
        c = ctx.unwrap(ct, Ciphertext, "ciphertext")
        if ct.slots != self.n:
            raise ShapeError(f"the transform acts on {self.n} slots but the ciphertext has {ct.slots}")
        if keys is None:
            if self.plan.steps:
                raise MissingKeyError(f"the transform rotates by {self.plan.steps}: pass "
                                      "ctx.rotation_keys(sk, steps) with these steps")
            k = _core.GaloisKeys()  # nothing to rotate: never read
        else:
            k = ctx.unwrap(keys, GaloisKeys, "Galois keys")
        t = self.encode_native(ctx, ct.level, qp=hoisting == "double")
        out, counts = t.apply(ctx.native, c, k, HOISTING[hoisting], bool(rescale))
        return ctx.wrap(Ciphertext, out), counts

    def apply(self, ctx, ct, keys, rescale: bool = True, rotated: dict | None = None, native: bool | None = None,
              hoisting: str = "auto"):
        """T·ct: hoisted baby steps, pre-rotated diagonals, giant steps, one rescale.

        native: None runs the native path when ctx is a Context and `rotated` is not given (an
        OpCounter counts the Python path); False forces the Python path, True the native one.
        hoisting: "auto" (choose_hoisting), "double" or "single" (native path only; see the module doc).
        rotated: {step: rot_step(ct)} already computed by the caller (several transforms of one
        ciphertext sharing one hoisted decomposition); it must hold every baby step (Python path).
        """
        if native is None:
            native = isinstance(ctx, Context) and rotated is None
        if native:
            if rotated is not None:
                raise ParameterError("the native path does its own hoisting: pass rotated only with native=False")
            return self.apply_native(ctx, ct, keys, rescale, hoisting)[0]
        if ct.slots != self.n:
            raise ShapeError(f"the transform acts on {self.n} slots but the ciphertext has {ct.slots}")
        p = self.plan
        pts = self.encode(ctx, ct.level)
        rots = {0: ct}
        if rotated is not None:
            missing = set(p.baby) - set(rotated)
            if missing:
                raise ValueError(f"rotated lacks the baby steps {sorted(missing)}")
            rots.update(rotated)
        elif p.baby:
            rots.update(zip(p.baby, ctx.rotate_hoisted(ct, p.baby, keys)))
        acc = None
        for g, bs in p.groups:
            inner = None
            for b in bs:
                t = ctx.mul(rots[b], pts[(g, b)])
                inner = t if inner is None else ctx.add(inner, t)
            if g != 0:
                inner = ctx.rotate(inner, g * p.n1, keys)
            acc = inner if acc is None else ctx.add(acc, inner)
        return ctx.rescale(acc) if rescale else acc


def rotation_steps(T, bsgs: bool = True, n: int | None = None, n1: int | None = None) -> list[int]:
    """Rotation steps apply() needs for T (n defaults to T's size; required for a dict of diagonals)."""
    if isinstance(T, dict):
        if n is None:
            raise ValueError("rotation_steps of a dict of diagonals needs n (the ciphertext's slots)")
        return plan(_normalise(T, n), n, bsgs, n1).steps
    return LinearTransform(T, n or max(np.shape(T)), bsgs, n1).steps


def apply(ctx, ct, T, keys, bsgs: bool = True, n1: int | None = None, native: bool | None = None):
    """y = T x for x encrypted in ct (n = ct.slots), rescaled: one level, scale unchanged."""
    lt = T if isinstance(T, LinearTransform) else LinearTransform(T, ct.slots, bsgs, n1)
    return lt.apply(ctx, ct, keys, native=native)


class OpCounter:
    """A Context proxy counting the homomorphic operations issued through it.

    Pass it wherever a ctx is expected; counts: rot (of which hoisted), pmult (ct × plaintext),
    cmult (ct × ct), add, rescale, relin, drop; `steps` records the rotation steps used.
    """

    def __init__(self, ctx):
        self.ctx = ctx
        self.counts = Counter()
        self.steps = set()

    def __getattr__(self, name):
        return getattr(self.ctx, name)

    def reset(self) -> None:
        self.counts.clear()
        self.steps.clear()

    def rotate(self, ct, step, keys):
        self.counts["rot"] += 1
        self.steps.add(int(step))
        return self.ctx.rotate(ct, step, keys)

    def rotate_hoisted(self, ct, steps, keys):
        self.counts["rot"] += len(steps)
        self.counts["hoisted"] += len(steps)
        self.steps.update(int(k) for k in steps)
        return self.ctx.rotate_hoisted(ct, steps, keys)

    def mul(self, a, b, relin_key=None):
        from hemlp.fhe import Ciphertext

        self.counts["cmult" if isinstance(b, Ciphertext) else "pmult"] += 1
        return self.ctx.mul(a, b, relin_key)

    def add(self, a, b):
        self.counts["add"] += 1
        return self.ctx.add(a, b)

    def rescale(self, a):
        self.counts["rescale"] += 1
        return self.ctx.rescale(a)

    def relinearize(self, a, relin_key):
        self.counts["relin"] += 1
        return self.ctx.relinearize(a, relin_key)

    def drop_level(self, a, level):
        self.counts["drop"] += 1
        return self.ctx.drop_level(a, level)
