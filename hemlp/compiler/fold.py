"""Graph simplification before planning (all exact rewrites):

* Dropout / Identity are removed by the frontends; flatten stays as a row relabelling (free);
* BatchNorm is folded into the preceding Linear/Conv2d when it is that layer's only user,
  otherwise it becomes a per-feature affine step (1 level);
* consecutive polynomial activations on one tensor are composed (depth never grows);
  a degree-1 polynomial (c*x + d) is folded into the preceding Linear/Conv2d;
* AvgPool2d is folded into the next Linear (through flatten) when it is that layer's only input
  path, otherwise it is lowered as a PCMM (im2col with a 1/k^2 row, 1 level);
* two Linear layers in a row (no activation between) are merged into one PCMM;
* a 1x1 channel map (a channel pad or concatenation part, hemlp.compiler.movement) after a convolution that is its
  only user is merged into that convolution.

Each is a Rewrite of one IR op (REWRITES: the op, its handler on one node, one sweep or to a fixpoint), run in order.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from hemlp.compiler.ir import Graph, Node, Op, avgpool_matrix, dense_conv_weight


def _single_user(g: Graph, name: str):
    us = g.users(name)
    return us[0] if len(us) == 1 and us[0].inputs.count(name) == 1 else None


def _producer(g: Graph, node: Node):
    return g.node(node.inputs[0])


#: the producers a per-feature scale and shift fold into: how each scales its weight's output rows
ROW_SCALE = {
    Op.LINEAR: lambda W, scale: W * scale[:, None],
    Op.CONV2D: lambda W, scale: W * scale[:, None, None, None],     # per output channel
}


def _scale_rows(prod: Node, scale: np.ndarray, shift: np.ndarray):
    """prod's output (per-feature, features in (C, ...) order) multiplied by scale, plus shift."""
    W = prod.attrs["weight"]
    out_rows = W.shape[0]
    b = prod.attrs.get("bias")
    b = np.zeros(out_rows) if b is None else b
    prod.attrs["weight"] = ROW_SCALE[prod.op](W, scale)
    prod.attrs["bias"] = b * scale + shift


def fold_batchnorm(g: Graph, n: Node) -> bool:
    """A batchnorm into the Linear / Conv2d before it when it is that layer's only user, else a per-feature affine."""
    prod = _producer(g, n)
    C = n.attrs["scale"].shape[0]
    if prod.op in ROW_SCALE and _single_user(g, prod.name) is n and prod.attrs["weight"].shape[0] == C:
        _scale_rows(prod, n.attrs["scale"], n.attrs["shift"])
        prod.notes.append(f"+{n.name} folded")
        g.bypass(n)
    else:
        per = n.features // C
        n.op = Op.AFFINE.value
        n.attrs = dict(alpha=np.repeat(n.attrs["scale"], per), beta=np.repeat(n.attrs["shift"], per))
        n.notes.append("batch norm not after a linear layer: per-feature affine, 1 level")
    return True


def fold_poly(g: Graph, n: Node) -> bool:
    """An exact polynomial activation composed with an exact polynomial before it that only it uses, or, of degree
    <= 1, folded into the Linear / Conv2d before it that only it uses."""
    if n.attrs["kind"] not in ("poly", "square"):
        return False
    c = np.asarray(n.attrs.get("coeffs", [0.0, 0.0, 1.0]), dtype=np.float64)
    prod = _producer(g, n)
    # compose p(q(x)) when the inner is an exact polynomial used only here
    if prod.op == Op.ACT and prod.attrs["kind"] in ("poly", "square") and _single_user(g, prod.name) is n:
        q = np.asarray(prod.attrs.get("coeffs", [0.0, 0.0, 1.0]), dtype=np.float64)
        comp = np.polynomial.polynomial.Polynomial(c)(np.polynomial.polynomial.Polynomial(q)).coef
        n.attrs = dict(kind="poly", coeffs=comp)
        n.inputs = list(prod.inputs)
        n.notes.append(f"composed with {prod.name}")
        g.remove(prod.name)
        return True
    c = np.trim_zeros(c, "b")
    if len(c) <= 2 and prod.op in ROW_SCALE and _single_user(g, prod.name) is n:
        a1 = c[1] if len(c) > 1 else 0.0
        a0 = c[0] if len(c) > 0 else 0.0
        rows = prod.attrs["weight"].shape[0]
        _scale_rows(prod, np.full(rows, a1), np.full(rows, a0))
        prod.notes.append(f"+{n.name} (affine) folded")
        g.bypass(n)
        return True
    return False


def fold_avgpool(g: Graph, n: Node) -> bool:
    """An AvgPool2d into the Linear after it (through flattens) when it is that layer's only input path, else a
    note that it is lowered as a PCMM."""
    a = n.attrs
    M = avgpool_matrix(g.node(n.inputs[0]).shape, a["kernel"], a["stride"], a["padding"], a["count_include_pad"],
                       a.get("divisor_override"))
    user = _single_user(g, n.name)
    chain = []
    while user is not None and user.op == Op.FLATTEN:
        chain.append(user)
        user = _single_user(g, user.name)
    if user is not None and user.op == Op.LINEAR:
        W = user.attrs["weight"]
        user.attrs["weight"] = W @ M
        user.notes.append(f"{n.name} folded in")
        for f in chain:
            f.shape = (M.shape[1],)
        # flatten of the pooled tensor -> flatten of the pool input
        src = n.inputs[0]
        g.bypass(n)
        if not chain:
            f = Node(g.unique(n.name + "_flat"), Op.FLATTEN.value, [src], (M.shape[1],), {}, "", notes=[])
            g.nodes.insert(g.nodes.index(user), f)
            user.inputs = [f.name]
        return True
    n.notes.append("lowered as a PCMM (1 level)")
    return False


def merge_linear(g: Graph, n: Node) -> bool:
    """A Linear merged with the Linear before it (through flattens) when it is that layer's only user."""
    prod = g.node(n.inputs[0])
    chain = []
    while prod.op == Op.FLATTEN and _single_user(g, prod.name) is (chain[-1] if chain else n):
        chain.append(prod)
        prod = g.node(prod.inputs[0])
    if prod.op == Op.LINEAR and _single_user(g, prod.name) is (chain[-1] if chain else n):
        W2, b2 = n.attrs["weight"], n.attrs.get("bias")
        W1, b1 = prod.attrs["weight"], prod.attrs.get("bias")
        n.attrs["weight"] = W2 @ W1
        bias = (W2 @ b1 if b1 is not None else 0) + (b2 if b2 is not None else 0)
        n.attrs["bias"] = None if isinstance(bias, int) else bias
        n.inputs = list(prod.inputs)
        n.notes.append(f"merged with {prod.name}")
        for f in chain:
            g.remove(f.name)
        g.remove(prod.name)
        return True
    return False


def _is_channel_map(n: Node) -> bool:
    """A 1x1, stride-1, unpadded, ungrouped convolution: a per-pixel matrix over channels."""
    a = n.attrs
    return (n.op == Op.CONV2D and a["weight"].shape[2:] == (1, 1) and tuple(a["stride"]) == (1, 1)
            and tuple(a["padding"]) == (0, 0) and a.get("groups", 1) == 1)


def merge_channel_map(g: Graph, n: Node) -> bool:
    """A channel map after a convolution that is its only user becomes part of that convolution (B o A: the
    weights' channel product, bias B bA + bB): a slice then a channel pad (ResNet option-A shortcut) is one PCMM."""
    if not _is_channel_map(n):
        return False
    prod = g.node(n.inputs[0])
    if prod.op != Op.CONV2D or _single_user(g, prod.name) is not n:
        return False
    B = n.attrs["weight"][:, :, 0, 0]
    A = dense_conv_weight(prod.attrs["weight"], prod.attrs.get("groups", 1))
    bA, bB = prod.attrs.get("bias"), n.attrs.get("bias")
    bias = (B @ bA if bA is not None else 0) + (bB if bB is not None else 0)
    prod.attrs = dict(prod.attrs, weight=np.einsum("oc,cikl->oikl", B, A), groups=1,
                      bias=None if isinstance(bias, int) else bias)
    prod.shape = n.shape
    prod.notes.append(f"+{n.name} (channel map) merged")
    g.bypass(n)
    return True


@dataclass(frozen=True)
class Rewrite:
    """One rewrite pass: `apply(graph, node)` on every node of op `op` (True: it changed the graph)."""
    op: Op
    apply: Callable[[Graph, Node], bool]
    #: True: after each change the pass starts over, until nothing changes (a change can enable another: composed
    #: polynomials, chains of Linear layers); False: one sweep over the nodes as they were
    to_fixpoint: bool


#: the rewrites in the order fold runs them (a rewrite can enable a later one: a batchnorm folded into its Linear
#: leaves two Linear layers in a row for merge_linear)
REWRITES = (
    Rewrite(Op.BATCHNORM, fold_batchnorm, to_fixpoint=False),
    Rewrite(Op.CONV2D, merge_channel_map, to_fixpoint=True),
    Rewrite(Op.ACT, fold_poly, to_fixpoint=True),
    Rewrite(Op.AVGPOOL2D, fold_avgpool, to_fixpoint=False),
    Rewrite(Op.LINEAR, merge_linear, to_fixpoint=True),
)


def rewrite(g: Graph, r: Rewrite) -> None:
    """Run one rewrite pass over g's nodes."""
    changed = True
    while changed:
        changed = False
        for n in list(g.nodes):
            if n.op == r.op and r.apply(g, n) and r.to_fixpoint:
                changed = True
                break


def fold(g: Graph) -> Graph:
    for r in REWRITES:
        rewrite(g, r)
    g.dead_code()
    return g
