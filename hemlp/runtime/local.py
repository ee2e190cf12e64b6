"""Executors of a lowered program (layout A: rows = features, columns = batch).

* ``simulate`` — the same steps in plaintext float64 numpy: quantised weights (hemlp.pcmm.quantize),
  the same polynomials and the same row layouts; warns (RangeWarning) when an approximated
  activation sees inputs outside its calibrated range.
* ``run`` — the same steps on ciphertexts (hemlp.pcmm PCMMs, hemlp.he.polynomial), in process by default;
  an injectable executor runs the PCMMs and elementwise steps elsewhere (hemlp.runtime.ray).
"""
from __future__ import annotations

import time
import warnings

import numpy as np

from hemlp import pcmm
from hemlp.compiler.activations import RangeWarning
from hemlp.compiler.ir import gather_apply, last_uses, matmul_index
from hemlp.errors import LevelError, MissingKeyError, warn_always
from hemlp.pcmm import CtMatrix, quantize
from hemlp.he.polynomial import PolyEvaluator
from hemlp.he.reinterpret import retag
from hemlp.runtime import streamed
from hemlp.runtime.bootstrap_sim import simulate_bootstrap, simulate_mambo
from hemlp.step_ops import ACT_OPS, UNCHECKED_LEVEL_OPS, UNTIMED_OPS, StepOp, handler

__all__ = ["simulate", "simulate_columns", "simulate_peak_bytes", "SIMULATE_CHUNK_BYTES", "run", "run_step",
           "LocalExecutor", "ElementwiseOp", "elementwise",
           "cached_elementwise", "range_check", "range_report", "add_aligned", "ct_products", "bootstrap_rows",
           "bootstrap_units", "bootstrap_unit", "bootstrap_retag", "batch_units", "refresh_units", "refresh_unit",
           "mambo_rows", "mambo_units", "mambo_unit", "mambo_chunk"]


def range_check(step, u, counts: dict | None = None):
    """Warn (RangeWarning) when an approximated activation sees inputs beyond the polynomial's domain (its
    calibrated range plus guard band: garbage there). ``counts`` (node -> dict) accumulates, per activation,
    the values outside the calibrated core, beyond the domain, and the samples (columns) beyond it."""
    ap = step.act
    if ap is None or ap.lo is None:
        return
    x = (u - ap.beta) / ap.alpha
    dlo, dhi = ap.domain
    tol = 1e-4 * (dhi - dlo)   # quantised weights move values by ~2^-20 relative
    beyond = (x < dlo - tol) | (x > dhi + tol)
    if counts is not None:
        c = counts.setdefault(step.node, dict(kind=ap.kind, degree=ap.degree, range=[ap.lo, ap.hi],
                                              domain=[dlo, dhi], values=0, outside_range=0, beyond_domain=0,
                                              bad_samples=set(), seen=[np.inf, -np.inf]))
        c["values"] += int(x.size)
        c["outside_range"] += int(np.count_nonzero((x < ap.lo - tol) | (x > ap.hi + tol)))
        c["beyond_domain"] += int(np.count_nonzero(beyond))
        if x.ndim == 2 and beyond.any():
            c["bad_samples"].update(np.nonzero(beyond.any(axis=0))[0].tolist())
        if x.size:
            c["seen"] = [min(c["seen"][0], float(x.min())), max(c["seen"][1], float(x.max()))]
    if np.any(beyond):
        frac = float(np.mean(beyond))
        warn_always(
            f"activation {step.node!r} ({ap.kind}, degree {ap.degree}): {frac:.2%} of its inputs lie outside the "
            f"calibrated range [{ap.lo:.4g}, {ap.hi:.4g}] and its guard band [{dlo:.4g}, {dhi:.4g}] (seen "
            f"[{float(x.min()):.4g}, {float(x.max()):.4g}]); the polynomial diverges there and the outputs are "
            "garbage. Preprocess inputs like the calibration data (e.g. the same scaling), or recompile with "
            "calibration data that covers them", RangeWarning, stacklevel=3)


def simulate(steps, X: np.ndarray, weight_bits: int, range_counts: dict | None = None,
             bootstraps: bool = True, on_value=None) -> np.ndarray:
    """X: rows matrix (features, batch) -> output rows matrix. range_counts: see range_check. bootstraps=False:
    bootstrap (and MaMBo) steps refresh exactly, without their range check and error (their layout (A) model): what
    range_report needs for the activations of any layout. on_value(step, value) sees every step's value; values are
    freed after their last use."""
    last = last_uses(steps)
    out_name = next(s.out for s in steps if s.op == StepOp.OUTPUT)
    vals = {}
    for i, s in enumerate(steps):
        vals[s.out] = simulate_step(s, vals, weight_bits, range_counts, bootstraps, X)
        if on_value is not None:
            on_value(s, vals[s.out])
        for name in s.inputs:
            if last.get(name) == i and name != out_name:
                vals.pop(name, None)
    return vals[out_name]


#: temporaries of a step's output size while it runs (an activation's polynomial basis, a gather's partial sums)
SIMULATE_TEMPORARIES = 3


def simulate_peak_bytes(steps, columns: int) -> int:
    """An estimate of simulate()'s peak memory on `columns` samples: the values alive at each step (freed after their
    last use, as simulate frees them) plus SIMULATE_TEMPORARIES of the step's output, float64."""
    last = last_uses(steps)
    live: dict = {}
    peak = 0
    for i, s in enumerate(steps):
        live[s.out] = s.rows
        peak = max(peak, sum(live.values()) + SIMULATE_TEMPORARIES * s.rows)
        for name in s.inputs:
            if last.get(name) == i:
                live.pop(name, None)
    return peak * int(columns) * 8


#: simulate_columns' budget for one chunk of samples (simulate_peak_bytes' estimate)
SIMULATE_CHUNK_BYTES = 1 << 30


def simulate_columns(steps, X: np.ndarray, weight_bits: int, on_value=None,
                     max_bytes: int = SIMULATE_CHUNK_BYTES) -> np.ndarray:
    """simulate(..., bootstraps=False) over the samples (columns) of X, in chunks of samples whose estimated peak
    (simulate_peak_bytes) stays within max_bytes: the same values per sample (refreshes exact, each sample's values
    computed from its own column alone), a ResNet-18's calibration pass in a few GiB instead of 13. on_value(step,
    value) sees each chunk's values in turn."""
    n = X.shape[1]
    per = max(1, simulate_peak_bytes(steps, 1))
    size = max(1, min(n, int(max_bytes) // per))
    if size >= n:
        return simulate(steps, X, weight_bits, bootstraps=False, on_value=on_value)
    return np.concatenate([simulate(steps, X[:, c:c + size], weight_bits, bootstraps=False, on_value=on_value)
                           for c in range(0, n, size)], axis=1)


def _sim_pcmm(s, x, vals, weight_bits, range_counts, bootstraps):
    Uq, delta = quantize(s.U, s.info.weight_bits or weight_bits)
    U = Uq / delta
    if s.index is not None:
        return gather_apply(U, s.index, x, s.bias)
    y = U @ x
    return y if s.bias is None else y + s.bias[:, None]


def _sim_act(s, x, vals, weight_bits, range_counts, bootstraps):
    range_check(s, x, range_counts)
    return s.act.eval_u(x)


def _sim_matmul(s, x, vals, weight_bits, range_counts, bootstraps):
    ia, ib = matmul_index(s.info.a_shape, s.info.b_shape)
    return np.einsum("otb,otb->ob", x[ia], vals[s.inputs[1]][ib])


def _sim_mambo(s, x, vals, weight_bits, range_counts, bootstraps):
    """A PCMM fused into its output's refresh (hemlp.planner.bootstrap_lowering)."""
    if bootstraps:
        return simulate_mambo(s, x, weight_bits)
    Uq, delta = quantize(s.U, weight_bits)
    return (Uq / delta) @ x + (0.0 if s.bias is None else s.bias[:, None])


def _identity(s, x, vals, weight_bits, range_counts, bootstraps):
    return x


#: the plaintext semantics of every step op: (step, first input's rows matrix (the input step: the program's input),
#: values, weight_bits, range_counts, bootstraps) -> the step's rows matrix
SIMULATE = {
    StepOp.INPUT: lambda s, x, *_: np.asarray(x, dtype=np.float64),
    StepOp.PCMM: _sim_pcmm,
    StepOp.POLY: _sim_act,
    StepOp.SQUARE: _sim_act,
    StepOp.AFFINE: lambda s, x, *_: x * s.alpha[:, None] + s.beta[:, None],
    StepOp.ADD: lambda s, x, vals, *_: x + vals[s.inputs[1]],
    StepOp.MUL: lambda s, x, vals, *_: x * vals[s.inputs[1]],
    StepOp.PERM: lambda s, x, *_: x[s.index],
    StepOp.MATMUL: _sim_matmul,
    StepOp.ALIAS: _identity,
    StepOp.OUTPUT: _identity,
    StepOp.DROP: _identity,
    # placed by hemlp.planner.bootstrap_placement (bootstrap=True)
    StepOp.BOOTSTRAP: lambda s, x, vals, wb, rc, bootstraps: simulate_bootstrap(s, x) if bootstraps else x,
    StepOp.MAMBO: _sim_mambo,
}


def simulate_step(s, vals: dict, weight_bits: int, range_counts: dict | None = None,
                  bootstraps: bool = True, X=None) -> np.ndarray:
    """One lowered step in plaintext (see simulate) from the values it reads (SIMULATE); X: the program's input
    (what the input step reads)."""
    f = handler(SIMULATE, s, "the plaintext simulation")
    return f(s, vals[s.inputs[0]] if s.inputs else X, vals, weight_bits, range_counts, bootstraps)


# ---------------------------------------------------------------------------------------
# Encrypted execution
# ---------------------------------------------------------------------------------------

def _map_cts(C, fn):
    return CtMatrix(C.ctx, [fn(i // C.chunks, ct) for i, ct in enumerate(C.cts)], C.shape, C.chunks, C.format)


def add_aligned(ctx, A, B, level_out):
    """A + B (CtMatrix) for a residual add: the higher operand is brought to the other's level and exact scale
    first (no level spent), and the sum is dropped to the planned output level."""
    a0, b0 = A.cts[0], B.cts[0]
    out = []
    for ca, cb in zip(A.cts, B.cts):
        if ca.level < cb.level:
            ca, cb = cb, ca                      # ca: the higher (or equal) one
        if ca.level > cb.level:
            ca = ctx.set_scale(ctx.drop_level(ca, cb.level + 1), cb.scale)
        elif abs(ca.scale / cb.scale - 1.0) > 2.0 ** -40:
            ca = ctx.set_scale(ca, cb.scale)
            cb = ctx.drop_level(cb, ca.level)
        ct = ctx.add(ca, cb)
        if ct.level > level_out:
            ct = ctx.drop_level(ct, level_out)
        out.append(ct)
    del a0, b0
    return CtMatrix(ctx, out, A.shape, A.chunks, A.format)


def ct_products(ctx, s, A, B, relin_key):
    """Step mul / matmul on two CtMatrix operands (layout A): ciphertext x ciphertext products, SIMD over
    the batch in the slots. Both operands go to the lower level first; a matmul output row sums its k
    tensor products before one relinearisation and one rescale (lazy relinearisation)."""
    if relin_key is None:
        raise MissingKeyError(f"step {s.out} multiplies two ciphertexts: it needs the relinearisation key")
    lv = min(A.level, B.level)
    drop = lambda ct: ctx.drop_level(ct, lv) if ct.level != lv else ct  # noqa: E731
    ch = A.chunks
    if s.op == StepOp.MUL:
        out = [ctx.mul(drop(a), drop(b), relin_key=relin_key, rescale=True) for a, b in zip(A.cts, B.cts)]
        return CtMatrix(ctx, out, A.shape, ch, A.format)
    ia, ib = matmul_index(s.info.a_shape, s.info.b_shape)
    Ad = [drop(c) for c in A.cts]
    Bd = [drop(c) for c in B.cts]
    out = []
    for o in range(ia.shape[0]):
        for c in range(ch):
            acc = None
            for t in range(ia.shape[1]):
                p = ctx.mul(Ad[ia[o, t] * ch + c], Bd[ib[o, t] * ch + c])        # 3-part, not relinearised
                acc = p if acc is None else ctx.add(acc, p)
            out.append(ctx.rescale(ctx.relinearize(acc, relin_key)))
    return CtMatrix(ctx, out, (ia.shape[0], A.shape[1]), ch, A.format)


class ElementwiseOp:
    """One elementwise step (square / poly / affine) as a small picklable description: what a worker
    needs to apply it to some ciphertexts (see ``elementwise``). alpha / beta (affine) are per row."""

    __slots__ = ("kind", "sign", "const", "coeffs", "basis", "alpha", "beta")

    def __init__(self, kind, sign=0.0, const=0.0, coeffs=None, basis=None, alpha=None, beta=None):
        self.kind, self.sign, self.const, self.coeffs, self.basis = kind, sign, const, coeffs, basis
        self.alpha, self.beta = alpha, beta

    @classmethod
    def from_step(cls, s) -> "ElementwiseOp":
        """The op of an elementwise step (ELEMENTWISE_OPS; ELEMENTWISE_FROM_STEP)."""
        return handler(ELEMENTWISE_FROM_STEP, s, "an elementwise op")(s)

    @property
    def needs_relin(self) -> bool:
        return self.kind in ACT_OPS

    def rows(self, r0: int, r1: int) -> "ElementwiseOp":
        """The same op for rows r0 .. r1 - 1 only (row r0 becomes row 0)."""
        if self.kind != "affine":
            return self
        return ElementwiseOp("affine", alpha=self.alpha[r0:r1].copy(), beta=self.beta[r0:r1].copy())

    def __getstate__(self):
        return {k: getattr(self, k) for k in self.__slots__}

    def __setstate__(self, state):
        for k, v in state.items():
            setattr(self, k, v)


#: an elementwise step's ElementwiseOp, by step op
ELEMENTWISE_FROM_STEP = {
    StepOp.SQUARE: lambda s: ElementwiseOp("square", sign=float(s.act.coeffs[1]), const=float(s.act.coeffs[0])),
    StepOp.POLY: lambda s: ElementwiseOp("poly", coeffs=np.asarray(s.act.coeffs, dtype=np.float64),
                                         basis="chebyshev" if s.act.form == "cheb" else "power"),
    StepOp.AFFINE: lambda s: ElementwiseOp("affine", alpha=np.asarray(s.alpha, dtype=np.float64),
                                           beta=np.asarray(s.beta, dtype=np.float64)),
}


def _square_fn(ctx, op, relin_key, pe):
    sign, const = op.sign, op.const

    def sq(r, ct):
        y = ctx.mul(ct, ct, relin_key=relin_key, rescale=True)
        if sign < 0:
            y = ctx.negate(y)
        return ctx.add(y, const) if const else y

    return sq


def _poly_fn(ctx, op, relin_key, pe):
    if pe is None:
        pe = PolyEvaluator(ctx, relin_key)
    return lambda r, ct: pe.evaluate(ct, op.coeffs, basis=op.basis)


def _affine_fn(ctx, op, relin_key, pe):
    def aff(r, ct):
        y = ctx.rescale(ctx.mul(ct, float(op.alpha[r])))
        return ctx.add(y, float(op.beta[r])) if op.beta[r] else y

    return aff


#: every ElementwiseOp kind's arithmetic: (ctx, op, relin_key, polynomial evaluator or None) -> fn(row, ct) -> ct
ELEMENTWISE_FNS = {StepOp.SQUARE: _square_fn, StepOp.POLY: _poly_fn, StepOp.AFFINE: _affine_fn}


def elementwise(ctx, op: ElementwiseOp, relin_key, pe=None):
    """fn(row, ct) -> ct applying op; the one definition of the elementwise steps' arithmetic, used in
    process and by the Ray workers (so both give the same bits)."""
    return ELEMENTWISE_FNS[op.kind](ctx, op, relin_key, pe)


def cached_elementwise(cache: dict, ctx, op: ElementwiseOp, relin_key):
    """elementwise() with the polynomial evaluator kept in `cache` per (context, relin key), so its
    power tables and plaintext constants are built once per run, not once per step."""
    pe = None
    if op.kind == StepOp.POLY:
        key = (id(ctx), id(relin_key))
        if key not in cache:
            cache[key] = PolyEvaluator(ctx, relin_key)
        pe = cache[key]
    return elementwise(ctx, op, relin_key, pe)


class LocalExecutor:
    """In-process execution of the heavy steps (the default of ``run``). Another executor (e.g.
    hemlp.runtime.ray.RayExecutor) provides the same five methods and gives the same bits."""

    name = "local"

    def __init__(self):
        self._pe = {}

    def pcmm(self, U, C, *, bias=None, weight_bits: int = 20, step=None, rescale: bool = True):
        return pcmm.pcmm(U, C, bias=bias, weight_bits=weight_bits, rescale=rescale)

    def pcmm_gather(self, U, C, index, *, bias=None, weight_bits: int = 20, step=None, rescale: bool = True):
        return pcmm.pcmm_gather(U, C, index, weight_bits=weight_bits, bias=bias, rescale=rescale)

    def map_cts(self, ctx, C, op: ElementwiseOp, relin_key, step=None):
        if op.kind == StepOp.SQUARE and relin_key is not None and len(C.cts) > 1:
            return _square_many(ctx, C, op, relin_key)
        return _map_cts(C, cached_elementwise(self._pe, ctx, op, relin_key))

    def bootstrap(self, ctx, C, step, boot):
        if boot is None:
            raise MissingKeyError(f"step {step.out} bootstraps: run the plan with its bootstrapper (the eval keys' "
                                  "bootstrapping keys)")
        return bootstrap_rows(ctx, boot, C, step)

    def mambo(self, ctx, C, step, boot, weight_bits: int):
        if boot is None:
            raise MissingKeyError(f"step {step.out} runs MaMBo: run the plan with its bootstrapper (the eval keys' "
                                  "bootstrapping keys)")
        return mambo_rows(ctx, boot, C, step, weight_bits)


def _square_many(ctx, C, op: ElementwiseOp, relin_key):
    """elementwise()'s square on every ciphertext, the products in parallel over ciphertexts (native threads); the
    same operations in the same order, so the same bits as the per-ciphertext path (the Ray workers use that)."""
    ys = ctx.mul_rescale_many(C.cts, C.cts, relin_key)
    if op.sign < 0:
        ys = [ctx.negate(y) for y in ys]
    if op.const:
        ys = [ctx.add(y, op.const) for y in ys]
    return CtMatrix(C.ctx, ys, C.shape, C.chunks, C.format)


def bootstrap_units(cts) -> list[tuple]:
    """How the bootstrap step refreshes a list of ciphertexts: (i, i + 1) two by two (bootstrap_pair) when both are
    real with equal level and scale, else (i,) alone. The Ray runtime spreads these units over its tasks, so a
    ciphertext is refreshed with the same partner, and so to the same bits, wherever it runs."""
    units, i = [], 0
    while i < len(cts):
        a = cts[i]
        b = cts[i + 1] if i + 1 < len(cts) else None
        if b is not None and not a.is_complex and not b.is_complex and a.level == b.level and a.scale == b.scale:
            units.append((i, i + 1))
            i += 2
        else:
            units.append((i,))
            i += 1
    return units


def bootstrap_unit(ctx, boot, cts: list, step) -> list:
    """One unit of bootstrap_units (one or two ciphertexts, already re-tagged x c by bootstrap_retag): refreshed,
    multiplied back by c exactly (mul_integer) and dropped to the step's planned level."""
    return bootstrap_restore(ctx, list(boot.bootstrap_pair(*cts)) if len(cts) == 2 else [boot.bootstrap(cts[0])],
                             step)


def bootstrap_restore(ctx, out: list, step) -> list:
    """Refreshed ciphertexts of the bootstrap step multiplied back by c = step.info.scale_factor exactly
    (mul_integer) and dropped to the step's planned level."""
    c = int(step.info.scale_factor)
    if c != 1:
        out = [ctx.mul_integer(ct, c) for ct in out]
    return [ctx.drop_level(ct, step.level_out) if ct.level > step.level_out else ct for ct in out]


def bootstrap_retag(ctx, cts: list, step) -> list:
    """The bootstrap step's input divided by c = step.info.scale_factor: a re-tag of the scale (no arithmetic)."""
    c = int(step.info.scale_factor)
    return [retag(ctx, ct, scale=ct.scale * c) if c != 1 else ct for ct in cts]


def batch_units(cts, k: int) -> tuple[list[tuple], bool]:
    """How an S2C-first (batched) bootstrap step refreshes a list of ciphertexts: consecutive groups of 2k real
    ciphertexts (k pairs, one batch) or k complex ones, and whether they pair. MamboBootstrapper.bootstrap_batch
    joins consecutive ciphertexts two by two and refreshes k at a time, so running it group by group gives the
    same bits as one call on the whole list; the Ray runtime makes each group a task."""
    pair = not any(ct.is_complex for ct in cts)
    size = 2 * k if pair else k
    return [tuple(range(i, min(i + size, len(cts)))) for i in range(0, len(cts), size)], pair


def refresh_units(cts, step) -> tuple[list[tuple], bool]:
    """The units a bootstrap step refreshes its (re-tagged) ciphertexts in, and whether they pair: batch_units for
    the S2C-first batched pipeline, bootstrap_units for CtS-first single bootstraps."""
    if step.info.order == "s2c_first":
        return batch_units(cts, int(step.info.k or 1))
    return bootstrap_units(cts), False


def refresh_unit(ctx, boot, cts: list, step, pair: bool = False) -> list:
    """One unit of a bootstrap step (bootstrap_units for CtS-first single bootstraps, batch_units for the
    S2C-first batched pipeline), already re-tagged by bootstrap_retag: refreshed and restored (bootstrap_restore)."""
    if step.info.order == "s2c_first":
        return bootstrap_restore(ctx, boot.bootstrap_batch(list(cts), pair=pair), step)
    return bootstrap_unit(ctx, boot, cts, step)


def bootstrap_rows(ctx, boot, C: CtMatrix, step) -> CtMatrix:
    """The bootstrap step on every ciphertext of C: re-tag the scale x c, refresh two by two (bootstrap_pair)
    when level and scale agree, or the S2C-first batched pipeline with pairs (MamboBootstrapper.bootstrap_batch(
    pair=True), k pairs per call); multiply back by c exactly (mul_integer), drop to the planned level."""
    _check_boot_kind(boot, step)
    cts = bootstrap_retag(ctx, C.cts, step)
    units, pair = refresh_units(cts, step)
    out = [None] * len(cts)
    for u in units:
        for i, ct in zip(u, refresh_unit(ctx, boot, [cts[i] for i in u], step, pair)):
            out[i] = ct
    return CtMatrix(ctx, out, C.shape, C.chunks, C.format)


def _check_boot_kind(boot, step) -> None:
    order = step.info.order or "cts_first"
    have = getattr(getattr(boot, "params", None), "order", None)
    if have is not None and have != order:
        raise MissingKeyError(f"step {step.out} runs the {order} bootstrapping pipeline, but the run's bootstrapper "
                              f"is for {have}: use the eval keys this plan's keygen() makes")
    if order == "s2c_first" and getattr(boot, "k", None) not in (None, int(step.info.k or 1)):
        raise MissingKeyError(f"step {step.out} is planned for batches of k = {step.info.k} but the "
                              f"bootstrapping keys are for k = {boot.k}: use the eval keys this plan's keygen() makes")


def mambo_units(C: CtMatrix) -> tuple[list[tuple], bool]:
    """How the MaMBo step splits its input's chunks (U mixes rows, not chunks, so chunks are independent): two
    real chunks share every SlotToCoeff and refresh (pcmm_bootstrap_pairs), a last odd chunk or complex ones run
    alone; and whether the rows are real. The Ray runtime makes each unit a task."""
    real = not any(ct.is_complex for ct in C.cts)
    units, j = [], 0
    while j < C.chunks:
        if real and j + 1 < C.chunks:
            units.append((j, j + 1))
            j += 2
        else:
            units.append((j,))
            j += 1
    return units, real


def mambo_unit(ctx, boot, step, chunks: list, weight_bits: int, real: bool) -> list:
    """One unit of mambo_units: chunks holds one or two lists of the input's rows (one chunk each); returns, per
    chunk, its d1 output ciphertexts: U·X / c refreshed, re-tagged and multiplied back by c exactly (as a bootstrap
    step), the bias added, dropped to the planned level."""
    c = int(step.info.scale_factor)
    if len(chunks) == 2:
        outs = boot.pcmm_bootstrap_pairs(step.U, chunks[0], chunks[1], weight_bits=weight_bits, c=float(c))
    else:
        outs = [boot.pcmm_bootstrap(step.U, chunks[0], weight_bits=weight_bits, c=float(c), pair=real)]
    res = []
    for ys in outs:
        done = []
        for r, y in enumerate(ys):
            y = retag(ctx, y, scale=y.scale * c)           # slots U·X / c at scale Δ ...
            if c != 1:
                y = ctx.mul_integer(y, c)                  # ... U·X at scale Δ (as bootstrap_rows)
            if step.bias is not None and step.bias[r] != 0:
                y = ctx.add(y, float(step.bias[r]))
            done.append(ctx.drop_level(y, step.level_out) if y.level > step.level_out else y)
        res.append(done)
    return res


def mambo_chunk(C: CtMatrix, j: int) -> list:
    """Chunk j of C: its rows' ciphertexts."""
    return [C.cts[r * C.chunks + j] for r in range(C.shape[0])]


def mambo_rows(ctx, boot, C: CtMatrix, step, weight_bits: int) -> CtMatrix:
    """The MaMBo step (hemlp.bootstrap.mambo.MamboBootstrapper) on the PCMM's input C, unit by unit (mambo_units,
    mambo_unit): Enc(U·X + bias) refreshed, d1 rows of C's chunks."""
    _check_boot_kind(boot, step)
    ch, d1 = C.chunks, step.U.shape[0]
    units, real = mambo_units(C)
    out = [None] * (d1 * ch)
    for u in units:
        for j, ys in zip(u, mambo_unit(ctx, boot, step, [mambo_chunk(C, j) for j in u], weight_bits, real)):
            for r, y in enumerate(ys):
                out[r * ch + j] = y
    return CtMatrix(ctx, out, (d1, C.shape[1]), ch, C.format)


def _run_pcmm(ctx, s, x, vals, ex, relin_key, weight_bits, boot):
    bits = s.info.weight_bits or weight_bits
    # an unrescaled final PCMM (final_rescale=False): its product without the rescale (K = 1), at level 0
    kw = dict(rescale=False) if s.info.rescale is False else {}
    if s.index is None:
        return ex.pcmm(s.U, x, bias=s.bias, weight_bits=bits, step=s.out, **kw)
    return ex.pcmm_gather(s.U, x, s.index, bias=s.bias, weight_bits=bits, step=s.out, **kw)


def _run_elementwise(ctx, s, x, vals, ex, relin_key, weight_bits, boot):
    return ex.map_cts(ctx, x, ElementwiseOp.from_step(s), relin_key, step=s.out)


def _run_perm(ctx, s, x, vals, ex, relin_key, weight_bits, boot):
    ch = x.chunks
    return CtMatrix(ctx, [x.cts[r * ch + c] for r in s.index for c in range(ch)], (len(s.index), x.shape[1]), ch,
                    x.format)


def _run_input(ctx, s, x, vals, ex, relin_key, weight_bits, boot):
    if x.level != s.level_out:
        if x.level < s.level_out:
            raise LevelError(f"the input is at level {x.level} but the plan starts at level {s.level_out}")
        x = _map_cts(x, lambda r, ct: ctx.drop_level(ct, s.level_out))
    return x


#: every step op on ciphertexts: (ctx, step, first input's CtMatrix (the input step: the encrypted input), values,
#: executor, relin key, weight_bits, bootstrapper) -> the step's CtMatrix
RUN = {
    StepOp.INPUT: _run_input,
    StepOp.PCMM: _run_pcmm,
    StepOp.POLY: _run_elementwise,
    StepOp.SQUARE: _run_elementwise,
    StepOp.AFFINE: _run_elementwise,
    StepOp.ADD: lambda ctx, s, x, vals, *_: add_aligned(ctx, x, vals[s.inputs[1]], s.level_out),
    StepOp.MUL: lambda ctx, s, x, vals, ex, relin_key, *_: ct_products(ctx, s, x, vals[s.inputs[1]], relin_key),
    StepOp.MATMUL: lambda ctx, s, x, vals, ex, relin_key, *_: ct_products(ctx, s, x, vals[s.inputs[1]], relin_key),
    StepOp.PERM: _run_perm,
    StepOp.ALIAS: lambda ctx, s, x, *_: x,
    StepOp.OUTPUT: lambda ctx, s, x, *_: x,
    StepOp.DROP: lambda ctx, s, x, *_: CtMatrix(ctx, [ctx.drop_level(ct, s.level_out) for ct in x.cts], x.shape,
                                                 x.chunks, x.format),
    StepOp.BOOTSTRAP: lambda ctx, s, x, vals, ex, relin_key, wb, boot: ex.bootstrap(ctx, x, s, boot),
    StepOp.MAMBO: lambda ctx, s, x, vals, ex, relin_key, wb, boot: ex.mambo(ctx, x, s, boot, wb),
}


def run_step(ctx, s, vals: dict, ex, relin_key, weight_bits: int, boot=None, C=None):
    """One step of a lowered program on ciphertexts (RUN): its output CtMatrix from the values it reads (vals, by
    name; the input step reads C, the encrypted input). The one definition of each step's arithmetic in process;
    Ray's node-local tasks run it too."""
    f = handler(RUN, s, "layout (A)'s in-process run")
    return f(ctx, s, vals[s.inputs[0]] if s.inputs else C, vals, ex, relin_key, weight_bits, boot)


def run(ctx, steps, C, relin_key, weight_bits: int, timings: dict | None = None, executor=None, boot=None,
        stream_bytes: int | None = streamed.DEFAULT_STREAM_BYTES):
    """C: CtMatrix (features x batch) at the program's input level -> output CtMatrix.
    timings (optional): filled with the wall-clock seconds of every step, by step name.
    boot (optional): the hemlp.bootstrap.Bootstrapper (CtS-first single bootstraps) or MamboBootstrapper (S2C-first
    batched bootstraps and MaMBo steps) of a plan with bootstrap steps.
    executor (optional): runs the PCMMs, elementwise steps, bootstraps and MaMBo steps (``pcmm``, ``pcmm_gather``,
    ``map_cts``, ``bootstrap``, ``mambo``); default LocalExecutor(), in this process. Residual adds and level drops
    stay here.
    stream_bytes: in process, a chain pcmm -> row-wise steps -> dense pcmm whose intermediate layers would hold
    more ciphertext bytes than this runs by blocks of features of about this size (hemlp.runtime.streamed: the
    same bits); None runs every layer whole."""
    ex = LocalExecutor() if executor is None else executor
    vals = {}
    # free every intermediate after its last use: a layer's ciphertexts can take gigabytes (one per feature)
    last_use = {}
    for i, s in enumerate(steps):
        for name in s.inputs:
            last_use[name] = i
    out_name = next(s.out for s in steps if s.op == StepOp.OUTPUT)
    chains = streamed.find_chains(steps, last_use, out_name) if isinstance(ex, LocalExecutor) else {}
    skip_to = -1
    for i, s in enumerate(steps):
        if i <= skip_to:
            continue
        block = None
        if i in chains and C.format == "rlwe" and C.encoding == "slot":
            block = streamed.chain_block_rows(steps, chains[i], ctx.N, C.chunks, stream_bytes)
        if block is not None:
            idx = chains[i]
            B = steps[idx[-1]]
            y = streamed.run_chain(ctx, steps, idx, vals[s.inputs[0]], ex, relin_key, weight_bits, block,
                                   ElementwiseOp.from_step, timings)
            if y.level != B.level_out:
                raise AssertionError(f"step {B.out}: level {y.level}, planned {B.level_out}")
            vals[B.out] = y
            for k in idx:
                for name in steps[k].inputs:
                    if last_use.get(name) == k and name != out_name:
                        vals.pop(name, None)
            skip_to = idx[-1]
            continue
        t0 = time.perf_counter()
        y = run_step(ctx, s, vals, ex, relin_key, weight_bits, boot=boot, C=C)
        if s.op not in UNCHECKED_LEVEL_OPS and y.level != s.level_out:
            raise AssertionError(f"step {s.out}: level {y.level}, planned {s.level_out}")
        if timings is not None and s.op not in UNTIMED_OPS:
            timings[s.out] = time.perf_counter() - t0
        vals[s.out] = y
        for name in s.inputs:
            if last_use.get(name) == i and name != out_name:
                vals.pop(name, None)
    return vals[out_name]


def range_report(steps, X, weight_bits: int) -> dict:
    """Run the plan in plaintext on rows matrix X and count, per approximated activation, the inputs outside
    its calibrated core and beyond its domain (where the polynomial is garbage)."""
    counts: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # the bootstraps as exact refreshes: their range and error are each layout's own simulate's business
        # (layout (A)'s per-row coefficient check would be wrong, and slow, for layout (P)'s packed ciphertexts)
        simulate(steps, X, weight_bits, range_counts=counts, bootstraps=False)
    return counts
