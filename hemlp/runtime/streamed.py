"""Layout (A) chains run by blocks of features, so that a wide hidden layer is never whole in memory.

In layout (A) every feature is one ciphertext per batch chunk: FHE4DMM's CIFAR-10 net has 6 400 convolution
features, two such layers (the convolution and its square) take ~14 GiB at N = 2^14. A chain

    A: pcmm or gathered pcmm  ->  row-wise steps (square, poly, affine, flatten)  ->  B: dense pcmm

runs block by block of A's output rows (a block of A's rows needs only those rows of U_A): the row-wise steps act
on each ciphertext alone, and B's partial products K (U_B[:, block] X_block) mod q are summed over the blocks and
rescaled once, the bias added after the rescale, as the native PCMM does (hemlp.pcmm.gathered_product with
``delta`` / ``defer_rescale``). Every operation is exact modular arithmetic on one ciphertext, or a sum mod q, so
the output has the same bits as the whole-layer run (tests/runtime/test_streamed.py checks it).
"""
from __future__ import annotations

import time

import numpy as np

from hemlp import _core, pcmm
from hemlp.fhe import Ciphertext
from hemlp.pcmm import CtMatrix, quantize
from hemlp.step_ops import ELEMENTWISE_OPS, SHARED_VALUE_OPS, StepOp

__all__ = ["DEFAULT_STREAM_BYTES", "find_chains", "chain_block_rows", "run_chain", "peak_bytes"]

#: a chain whose intermediate layers would hold more than this many bytes of ciphertexts runs by blocks of
#: features holding at most about this much (hemlp.runtime.local.run's ``stream_bytes``)
DEFAULT_STREAM_BYTES = 1 << 30

#: steps a chain streams through row by row
ROW_WISE = ELEMENTWISE_OPS + (StepOp.ALIAS,)


def ct_bytes(N: int, level: int) -> int:
    return 2 * N * 8 * (level + 1)


def find_chains(steps, last_use: dict, out_name: str) -> dict:
    """{index of A: [indices of A, the row-wise steps, B]} for every chain A -> row-wise* -> B in which each
    intermediate is read only by the next step of the chain (and is not the program's output)."""
    chains = {}
    for i, s in enumerate(steps):
        if s.op != StepOp.PCMM:
            continue
        idx, j = [i], i
        while True:
            cur = steps[j]
            if cur.out == out_name or last_use.get(cur.out) != j + 1 or j + 1 >= len(steps):
                break
            nxt = steps[j + 1]
            if list(nxt.inputs) != [cur.out]:
                break
            idx.append(j + 1)
            if nxt.op == StepOp.PCMM:
                if nxt.index is None and len(idx) > 2:    # a dense B after at least one row-wise step
                    chains[i] = idx
                break
            if nxt.op not in ROW_WISE:
                break
            j += 1
    return chains


def _blocks_of(s) -> int:
    """Output rows of a pcmm step per row of its U (a gathered pcmm's P output positions)."""
    return 1 if s.index is None else int(s.index.shape[1])


def chain_block_rows(steps, idx: list, N: int, chunks: int, stream_bytes: int | None) -> int | None:
    """Rows of U_A per block for the chain, or None when the chain's intermediates fit stream_bytes whole."""
    if stream_bytes is None:
        return None
    A = steps[idx[0]]
    per_row = sum(ct_bytes(N, steps[k].level_out) for k in idx[:-1] if steps[k].op != StepOp.ALIAS)
    P = _blocks_of(A)
    whole = A.U.shape[0] * P * chunks * per_row
    if whole <= stream_bytes:
        return None
    return max(1, int(stream_bytes // (P * chunks * per_row)))


def _native_pcmm(ctx):
    return lambda plan, inputs, *args: _core.pcmm_rlwe(ctx.native, plan, inputs, *args)


def run_chain(ctx, steps, idx: list, X: CtMatrix, ex, relin_key, weight_bits: int, block_rows: int,
              make_op, timings: dict | None = None) -> CtMatrix:
    """The chain steps[idx] on X (A's input) by blocks of block_rows rows of U_A; returns B's output.
    ex: the executor whose map_cts applies the row-wise steps; make_op(step): the step's op for it (the caller's,
    hemlp.runtime.local.ElementwiseOp.from_step)."""
    A, mids, B = steps[idx[0]], [steps[k] for k in idx[1:-1]], steps[idx[-1]]
    t = {steps[k].out: 0.0 for k in idx}
    ch, d1 = X.chunks, A.U.shape[0]
    P = _blocks_of(A)
    index_a = np.arange(X.shape[0])[:, None] if A.index is None else np.asarray(A.index)
    _, delta_a = quantize(A.U, weight_bits)
    _, delta_b = quantize(B.U, weight_bits)
    ops = [None if m.op == StepOp.ALIAS else make_op(m) for m in mids]
    acc = None
    for r0 in range(0, d1, block_rows):
        r1 = min(d1, r0 + block_rows)
        t0 = time.perf_counter()
        cts = pcmm.gathered_product(ctx, A.U[r0:r1], index_a, lambda r, j: X.cts[r * ch + j].native, ch, X.level,
                                      X.encoding == "slot", weight_bits,
                                      None if A.bias is None else A.bias[r0:r1], True, _native_pcmm(ctx),
                                      delta=delta_a)
        Y = CtMatrix(ctx, cts, ((r1 - r0) * P, X.shape[1]), ch, X.format)
        t[A.out] += time.perf_counter() - t0
        for m, op in zip(mids, ops):
            t0 = time.perf_counter()
            if op is not None:
                Y = ex.map_cts(ctx, Y, op.rows(r0 * P, r1 * P), relin_key, step=m.out)
            t[m.out] += time.perf_counter() - t0
        t0 = time.perf_counter()
        a0, a1 = r0 * P, r1 * P
        part = pcmm.gathered_product(ctx, B.U[:, a0:a1], np.arange(a1 - a0)[:, None],
                                       lambda r, j: Y.cts[r * ch + j].native, ch, Y.level, Y.encoding == "slot",
                                       weight_bits, None, True, _native_pcmm(ctx), delta=delta_b,
                                       defer_rescale=True)
        del Y
        acc = part if acc is None else [ctx.add(a, p) for a, p in zip(acc, part)]
        del part
        t[B.out] += time.perf_counter() - t0
    t0 = time.perf_counter()
    # the native PCMM's epilogue: rescale, then the bias as a constant (Evaluator::add_const), row r = o // chunks
    eng = ctx.native
    out = []
    for o, a in enumerate(acc):
        c = eng.rescale(a.native)
        if B.bias is not None:
            c = eng.add_const(c, float(B.bias[o // ch]))
        out.append(ctx.wrap(Ciphertext, c))
    t[B.out] += time.perf_counter() - t0
    if timings is not None:
        timings.update(t)
    return CtMatrix(ctx, out, (B.U.shape[0], X.shape[1]), ch, X.format)


def peak_bytes(steps, N: int, chunks: int, stream_bytes: int | None = DEFAULT_STREAM_BYTES) -> int:
    """Peak bytes of live ciphertexts while hemlp.runtime.local.run runs this program (layout A), the encrypted
    input included (its caller holds it): a step's output lives until its last reader ran (aliases share it); a
    streamed chain holds one block of two consecutive intermediate layers and B's partial sums and output."""
    last_use, out_name = {}, next(s.out for s in steps if s.op == StepOp.OUTPUT)
    for i, s in enumerate(steps):
        for name in s.inputs:
            last_use[name] = i
    chains = find_chains(steps, last_use, out_name)
    store, nbytes, held = {}, {}, set()      # name -> storage, storage -> bytes, storages the caller holds
    live = lambda: sum(nbytes[k] for k in set(store.values()) | held)  # noqa: E731
    peak, i = 0, 0
    while i < len(steps):
        s, last, extra = steps[i], i, 0
        if i in chains:
            block = chain_block_rows(steps, chains[i], N, chunks, stream_bytes)
            if block is not None:
                idx = chains[i]
                last, B = idx[-1], steps[idx[-1]]
                inter = [ct_bytes(N, steps[k].level_out) for k in idx[:-1] if steps[k].op != StepOp.ALIAS]
                pair = max([inter[k] + inter[k + 1] for k in range(len(inter) - 1)] or inter)
                extra = block * _blocks_of(s) * chunks * pair + B.rows * chunks * ct_bytes(N, B.level_out + 1)
                s = B
        if s.op in SHARED_VALUE_OPS:
            store[s.out] = store[s.inputs[0]]
        else:
            store[s.out] = s.out
            nbytes[s.out] = s.rows * chunks * ct_bytes(N, s.level_out)
            if s.op == StepOp.INPUT:
                held.add(s.out)
        peak = max(peak, live() + extra)
        for k in range(i, last + 1):
            for name in steps[k].inputs:
                if last_use.get(name) == k and name != out_name:
                    store.pop(name, None)
        i = last + 1
    return int(peak)
