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
"""
from __future__ import annotations

import numpy as np

from hemlp.compiler.ir import Graph, Node, avgpool_matrix, dense_conv_weight


def _single_user(g: Graph, name: str):
    us = g.users(name)
    return us[0] if len(us) == 1 and us[0].inputs.count(name) == 1 else None


def _producer(g: Graph, node: Node):
    return g.node(node.inputs[0])


def _scale_rows(prod: Node, scale: np.ndarray, shift: np.ndarray):
    """prod's output (per-feature, features in (C, ...) order) multiplied by scale, plus shift."""
    W = prod.attrs["weight"]
    out_rows = W.shape[0]
    b = prod.attrs.get("bias")
    b = np.zeros(out_rows) if b is None else b
    if prod.op == "linear":
        prod.attrs["weight"] = W * scale[:, None]
    else:  # conv2d: per output channel
        prod.attrs["weight"] = W * scale[:, None, None, None]
    prod.attrs["bias"] = b * scale + shift


def fold_batchnorm(g: Graph) -> None:
    for n in list(g.nodes):
        if n.op != "batchnorm":
            continue
        prod = _producer(g, n)
        C = n.attrs["scale"].shape[0]
        if prod.op in ("linear", "conv2d") and _single_user(g, prod.name) is n and prod.attrs["weight"].shape[0] == C:
            _scale_rows(prod, n.attrs["scale"], n.attrs["shift"])
            prod.notes.append(f"+{n.name} folded")
            g.bypass(n)
        else:
            per = n.features // C
            n.op = "affine"
            n.attrs = dict(alpha=np.repeat(n.attrs["scale"], per), beta=np.repeat(n.attrs["shift"], per))
            n.notes.append("batch norm not after a linear layer: per-feature affine, 1 level")


def fold_polys(g: Graph) -> None:
    changed = True
    while changed:
        changed = False
        for n in list(g.nodes):
            if n.op != "act" or n.attrs["kind"] not in ("poly", "square"):
                continue
            c = np.asarray(n.attrs.get("coeffs", [0.0, 0.0, 1.0]), dtype=np.float64)
            prod = _producer(g, n)
            # compose p(q(x)) when the inner is an exact polynomial used only here
            if prod.op == "act" and prod.attrs["kind"] in ("poly", "square") and _single_user(g, prod.name) is n:
                q = np.asarray(prod.attrs.get("coeffs", [0.0, 0.0, 1.0]), dtype=np.float64)
                comp = np.polynomial.polynomial.Polynomial(c)(np.polynomial.polynomial.Polynomial(q)).coef
                n.attrs = dict(kind="poly", coeffs=comp)
                n.inputs = list(prod.inputs)
                n.notes.append(f"composed with {prod.name}")
                g.remove(prod.name)
                changed = True
                break
            c = np.trim_zeros(c, "b")
            if len(c) <= 2 and prod.op in ("linear", "conv2d") and _single_user(g, prod.name) is n:
                a1 = c[1] if len(c) > 1 else 0.0
                a0 = c[0] if len(c) > 0 else 0.0
                rows = prod.attrs["weight"].shape[0]
                _scale_rows(prod, np.full(rows, a1), np.full(rows, a0))
                prod.notes.append(f"+{n.name} (affine) folded")
                g.bypass(n)
                changed = True
                break


def fold_avgpool(g: Graph) -> None:
    for n in list(g.nodes):
        if n.op != "avgpool2d":
            continue
        a = n.attrs
        M = avgpool_matrix(g.node(n.inputs[0]).shape, a["kernel"], a["stride"], a["padding"], a["count_include_pad"],
                           a.get("divisor_override"))
        user = _single_user(g, n.name)
        chain = []
        while user is not None and user.op == "flatten":
            chain.append(user)
            user = _single_user(g, user.name)
        if user is not None and user.op == "linear":
            W = user.attrs["weight"]
            user.attrs["weight"] = W @ M
            user.notes.append(f"{n.name} folded in")
            for f in chain:
                f.shape = (M.shape[1],)
            # flatten of the pooled tensor -> flatten of the pool input
            src = n.inputs[0]
            g.bypass(n)
            if not chain:
                f = Node(g.unique(n.name + "_flat"), "flatten", [src], (M.shape[1],), {}, "", notes=[])
                g.nodes.insert(g.nodes.index(user), f)
                user.inputs = [f.name]
        else:
            n.notes.append("lowered as a PCMM (1 level)")


def merge_linears(g: Graph) -> None:
    changed = True
    while changed:
        changed = False
        for n in list(g.nodes):
            if n.op != "linear":
                continue
            prod = g.node(n.inputs[0])
            chain = []
            while prod.op == "flatten" and _single_user(g, prod.name) is (chain[-1] if chain else n):
                chain.append(prod)
                prod = g.node(prod.inputs[0])
            if prod.op == "linear" and _single_user(g, prod.name) is (chain[-1] if chain else n):
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
                changed = True
                break


def _is_channel_map(n: Node) -> bool:
    """A 1x1, stride-1, unpadded, ungrouped convolution: a per-pixel matrix over channels."""
    a = n.attrs
    return (n.op == "conv2d" and a["weight"].shape[2:] == (1, 1) and tuple(a["stride"]) == (1, 1)
            and tuple(a["padding"]) == (0, 0) and a.get("groups", 1) == 1)


def merge_channel_maps(g: Graph) -> None:
    """A channel map after a convolution that is its only user becomes part of that convolution (B o A: the
    weights' channel product, bias B bA + bB): a slice then a channel pad (ResNet option-A shortcut) is one PCMM."""
    changed = True
    while changed:
        changed = False
        for n in list(g.nodes):
            if not _is_channel_map(n):
                continue
            prod = g.node(n.inputs[0])
            if prod.op != "conv2d" or _single_user(g, prod.name) is not n:
                continue
            B = n.attrs["weight"][:, :, 0, 0]
            A = dense_conv_weight(prod.attrs["weight"], prod.attrs.get("groups", 1))
            bA, bB = prod.attrs.get("bias"), n.attrs.get("bias")
            bias = (B @ bA if bA is not None else 0) + (bB if bB is not None else 0)
            prod.attrs = dict(prod.attrs, weight=np.einsum("oc,cikl->oikl", B, A), groups=1,
                              bias=None if isinstance(bias, int) else bias)
            prod.shape = n.shape
            prod.notes.append(f"+{n.name} (channel map) merged")
            g.bypass(n)
            changed = True
            break


def fold(g: Graph) -> Graph:
    fold_batchnorm(g)
    merge_channel_maps(g)
    fold_polys(g)
    fold_avgpool(g)
    merge_linears(g)
    g.dead_code()
    return g
