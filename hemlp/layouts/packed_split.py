"""Layout (P) for tensors wider than a ciphertext: channel blocks.

Layout (P) holds a sample's tensor in the slots of one ciphertext. A tensor with more features than the slots (a
ResNet-18's 64 x 32 x 32 = 65 536 at N = 2^16) is held here as K ciphertexts instead, each a block of whole
channels, by rewriting the lowered steps before layout (P) plans them: every value wider than the slots becomes K
values (its blocks), and every step on it becomes steps on the blocks, so the planner, the bootstrap placement, the
simulation and the encrypted run see ordinary steps on values that fit:

* an elementwise step (activation polynomial, affine map, ciphertext product, alias) runs block by block;
* a residual add adds block to block (both operands are split alike: same shape, same blocks);
* a PCMM (conv, average pool, linear) from input blocks i to output blocks j is the sum over i of the PCMM of
  block (j, i), whose weights are the entries of the original reading block i into block j (a gather's entries
  partition by the block they read, so the sum is the original map exactly); blocks with no entry are left out,
  the bias goes into the first partial product, and the partial products are summed by add steps.

The rewrite is exact: the steps compute the same numbers (each output feature the same terms, summed in another
order). With bootstraps the rewrite follows the placement (hemlp.layouts.packed_bootstrap), which refreshes a value's
blocks together: a bootstrap or a level drop of a wide value becomes one per block, and a PCMM's partial products
keep its levels (they are summed at its output level: the same input scale and weights' scale, so no level is spent
aligning them). The input and the output must fit one ciphertext (the client encrypts and decrypts one per
sample), and a ciphertext x ciphertext matrix product or a permutation of a wide value has no block form here
(UnsupportedError naming the step and layout='batch').
"""
from __future__ import annotations

import re
from dataclasses import replace

import numpy as np

from hemlp.errors import UnsupportedError
from hemlp.layouts.packed_diagonals import pow2
from hemlp.step_ops import StepOp

__all__ = ["split_wide_steps", "channel_blocks", "block_count", "origin", "value_of", "block_index", "bootstrap_pairs",
           "PART"]

#: the name of block j of value v: f"{v}{PART}{j}"
PART = ".part"

#: ops applied feature by feature: their block j reads their inputs' blocks j
BLOCKWISE = (StepOp.POLY, StepOp.SQUARE, StepOp.AFFINE, StepOp.ADD, StepOp.MUL, StepOp.ALIAS, StepOp.BOOTSTRAP,
             StepOp.DROP)
#: the names the rewrite gives a step's parts: its blocks, and a PCMM's partial products and their sums
_PARTS = re.compile(r"(?:" + re.escape(PART) + r"\d+)?(?:\.(from|sum)\d+)?$")


def origin(name: str, unsplit=()) -> str:
    """The step of the unsplit program a step of the rewritten one comes from: `name` itself when it names a step
    of the unsplit program (`unsplit`: their names) or is no part of one."""
    return name if name in unsplit else _PARTS.sub("", name, count=1)


def value_of(name: str):
    """The whole value a value of the rewritten program holds part of: itself, or the value of which it is a channel
    block; None for a PCMM's partial product or partial sum (part of no value of the unsplit program)."""
    m = _PARTS.search(name)
    return None if m.group(1) else name[:m.start()]


def block_index(name: str):
    """j for the name of channel block j of a value (f"{v}{PART}{j}"), None for any other name."""
    m = _PARTS.search(name)
    if m.group(1) or not m.group(0):
        return None
    return int(m.group(0)[len(PART):])


def bootstrap_pairs(steps) -> dict:
    """{first: second}: the bootstrap steps of blocks 2i and 2i + 1 of one wide value, consecutive as the rewrite
    emits them, which one bootstrap_pair refreshes together (two real ciphertexts as one complex one: the price of a
    single bootstrap); a last odd block is refreshed alone."""
    out = {}
    for a, b in zip(steps, steps[1:]):
        if a.op == StepOp.BOOTSTRAP and b.op == StepOp.BOOTSTRAP:
            ia, ib = block_index(a.out), block_index(b.out)
            if ia is not None and ia % 2 == 0 and ib == ia + 1 and value_of(a.out) == value_of(b.out):
                out[a.out] = b.out
    return out


def channel_blocks(shape, slots: int) -> list[tuple[int, int]]:
    """Feature ranges [lo, hi) of whole channels, as equal as the channel count allows, each of at most `slots`
    features (padded to a power of two, as layout (P) pads a period). shape: (C, H, W), or (F,) for a flat
    vector (its "channels" single features)."""
    C = int(shape[0])
    per = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    if per > slots:
        raise UnsupportedError(f"one channel of a {tuple(shape)} tensor has {per} features, more than a ciphertext's "
                               f"{slots} slots: use layout='batch' (layout A)")
    most = slots // pow2(per) if len(shape) > 1 else slots
    k = -(-C // most)
    edges = [round(i * C / k) for i in range(k + 1)]
    return [(a * per, b * per) for a, b in zip(edges, edges[1:])]


def split_wide_steps(steps, slots: int, memo: dict | None = None) -> list:
    """The steps with every value of more than `slots` features held as channel blocks (the module doc); the
    steps themselves (not copies) when every value fits. memo: the block weights of an earlier split of the same
    weights, reused (the same arrays: what layout (P) reuses its planned products by), new ones added."""
    if all(s.rows <= slots for s in steps):
        return steps
    shapes = _shapes(steps)
    blocks = {s.out: channel_blocks(shapes.get(s.out, (s.rows,)), slots) for s in steps if s.rows > slots}
    out = []
    for s in steps:
        wide_in = [v for v in s.inputs if v in blocks]
        if s.out not in blocks and not wide_in:
            out.append(s)
            continue
        if s.op == StepOp.INPUT or s.op == StepOp.OUTPUT:
            raise UnsupportedError(
                f"the model's {'input' if s.op == StepOp.INPUT else 'output'} {s.out!r} has {s.rows} features per "
                f"sample, more than a ciphertext's {slots} slots: layout (P) encrypts and decrypts one ciphertext "
                "per sample; use layout='batch' (layout A)")
        if s.op in BLOCKWISE:
            out += _blockwise(s, blocks)
        elif s.op == StepOp.PCMM:
            out += _pcmm(s, blocks, {} if memo is None else memo)
        else:
            raise UnsupportedError(f"step {s.out!r} ({s.op}) reads or makes a value wider than a ciphertext's {slots} "
                                   "slots, which layout (P) holds as channel blocks; it has no block form: use "
                                   "layout='batch' (layout A)")
    return out


def block_count(value: str, steps) -> int:
    """How many channel blocks `value` is held as in `steps` (1: one ciphertext)."""
    return len({s.out for s in steps if s.out != value and value_of(s.out) == value}) or 1


def _shapes(steps) -> dict:
    """Per value, its per-sample shape where a step states it (a conv's or a pool's output; what an elementwise
    step or an add keeps from its input)."""
    shapes: dict = {}
    for s in steps:
        if s.op == StepOp.PCMM and s.info.out_shape:
            shapes[s.out] = tuple(s.info.out_shape)
        elif s.op in BLOCKWISE and s.inputs and s.inputs[0] in shapes and s.rows == _size(shapes[s.inputs[0]]):
            shapes[s.out] = shapes[s.inputs[0]]
    return shapes


def _size(shape) -> int:
    return int(np.prod(shape))


def _name(v: str, j: int, blocks: dict) -> str:
    return f"{v}{PART}{j}" if v in blocks else v


def _slice(a, lo: int, hi: int, rows: int):
    """A per-feature array's block (a scalar or a broadcast one as it is)."""
    if a is None:
        return None
    a = np.asarray(a)
    return a[lo:hi] if a.ndim == 1 and len(a) == rows else a


def _blockwise(s, blocks: dict) -> list:
    ranges = blocks.get(s.out) or blocks[next(v for v in s.inputs if v in blocks)]
    for v in s.inputs:
        if v in blocks and blocks[v] != ranges:
            raise UnsupportedError(f"step {s.out!r} ({s.op}) combines {v!r} split into {len(blocks[v])} blocks with "
                                   f"{len(ranges)} blocks: use layout='batch' (layout A)")
    return [replace(s, out=_name(s.out, j, blocks), inputs=[_name(v, j, blocks) for v in s.inputs], rows=hi - lo,
                    alpha=_slice(s.alpha, lo, hi, s.rows), beta=_slice(s.beta, lo, hi, s.rows), info=s.info.copy())
            for j, (lo, hi) in enumerate(ranges)]


def _pcmm(s, blocks: dict, memo: dict) -> list:
    x = s.inputs[0]
    ins = blocks.get(x) or [(0, _rows_of(s))]
    outs = blocks.get(s.out) or [(0, s.rows)]
    steps = []
    for j, (olo, ohi) in enumerate(outs):
        name = _name(s.out, j, blocks)
        parts = [p for i, (ilo, ihi) in enumerate(ins)
                 if (p := _pcmm_block(s, (olo, ohi), (ilo, ihi), f"{name}.from{i}", _name(x, i, blocks), memo))
                 is not None]
        if not parts:
            raise UnsupportedError(f"step {s.out!r}: block {j} of its output reads no input (a constant): use "
                                   "layout='batch' (layout A)")
        if s.bias is not None:
            parts[0].bias = _bias_block(s, olo, ohi)
        if len(parts) == 1:
            parts[0].out = name
            steps.append(parts[0])
            continue
        steps += parts
        acc = parts[0].out
        for k, p in enumerate(parts[1:], 1):
            out = name if k == len(parts) - 1 else f"{name}.sum{k}"
            steps.append(replace(s, op=StepOp.ADD, out=out, inputs=[acc, p.out], rows=ohi - olo, U=None, index=None,
                                 bias=None, act=None, alpha=None, beta=None, level_in=s.level_out,
                                 level_out=s.level_out, info={}))
            acc = out
    return steps


def _rows_of(s) -> int:
    """The input features of a PCMM whose input is not split."""
    if s.index is None:
        return int(s.U.shape[1])
    return int(np.prod(s.info.in_shape)) if s.info.in_shape else int(np.max(s.index)) + 1


def _bias_block(s, olo: int, ohi: int):
    b = np.asarray(s.bias)
    if s.index is None:
        return b[olo:ohi]
    P = s.index.shape[1]
    return b if s.U.shape[0] == 1 else b[olo // P: ohi // P]


def _pcmm_block(s, out_rng, in_rng, name: str, src: str, memo: dict):
    """The PCMM reading input features in_rng into output features out_rng (None: no entry there)."""
    key = (id(s.U), id(s.index), out_rng, in_rng)
    if key not in memo:                            # the entry keeps U and index alive: the ids in the key are theirs
        memo[key] = (s.U, s.index, _block_weights(s, out_rng, in_rng))
    t = memo[key][2]
    return None if t is None else replace(s, out=name, inputs=[src], rows=t.rows, U=t.U, index=t.index, bias=None,
                                          info=t.info.copy())


def _block_weights(s, out_rng, in_rng):
    (olo, ohi), (ilo, ihi) = out_rng, in_rng
    info = s.info.copy()
    if s.index is None:                                   # dense: a block of the matrix
        U = np.asarray(s.U)[olo:ohi, ilo:ihi]
        if not U.any():
            return None
        return replace(s, rows=ohi - olo, U=U, bias=None, info=info)
    U, idx = np.asarray(s.U), np.asarray(s.index)
    P = idx.shape[1]
    # output feature u * P + p: a pool's one weight row covers every channel's positions p, a conv's rows are
    # its output channels (whole blocks of P positions)
    if U.shape[0] == 1:
        cols, rows_U = slice(olo, ohi), slice(0, 1)
    else:
        if olo % P or ohi % P:
            raise UnsupportedError(f"step {s.out!r}: its output blocks do not fall on whole channels: use "
                                   "layout='batch' (layout A)")
        cols, rows_U = slice(None), slice(olo // P, ohi // P)
    sub = idx[:, cols]
    inside = (sub >= ilo) & (sub < ihi)
    keep = np.nonzero(inside.any(axis=1))[0]
    Ub = U[rows_U][:, keep]
    if not keep.size or not Ub.any():
        return None
    if info.in_shape:
        per = int(np.prod(info.in_shape[1:]))
        info.in_shape = [(ihi - ilo) // per] + list(info.in_shape[1:])
    if info.out_shape:
        per = int(np.prod(info.out_shape[1:]))
        info.out_shape = [(ohi - olo) // per] + list(info.out_shape[1:])
    return replace(s, rows=ohi - olo, U=Ub, index=np.where(inside[keep], sub[keep] - ilo, -1).astype(idx.dtype),
                   bias=None, info=info)
