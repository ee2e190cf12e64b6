"""IR -> executable steps in layout (A): one feature per ciphertext row, the batch along the slots.

Every value is a rows matrix (features x batch). Steps:

    pcmm    out = U @ in (+ bias)               Linear; avg pooling (dense); 1 level
            out = pcmm_gather(U, in, index)      Conv2d as im2col over rows (no rotations); avg pooling
    poly    out = p(in), Chebyshev/power basis   depth ceil(log2(deg + 1))
    square  out = sign * in^2 + const           1 level
    affine  out = alpha[row] * in + beta[row]   1 level (only when it cannot be folded)
    add     out = a + b                          0 levels, or 1 to match scales (set_scale)
    mul     out = a * b (ciphertext x ciphertext) 1 level (relinearised, rescaled)
    matmul  out[o] = sum_t a[ia[o,t]] * b[ib[o,t]]  per-sample ct x ct matrix product, batched over the
            slots: m*n*k tensor products, one relinearisation and rescale per output row; 1 level
    alias   out = in                             flatten / reshape (row relabelling)
    perm    out = in[index]                      transpose (row permutation, no crypto)

The input map u = alpha x + beta of every polynomial activation is folded into the producing PCMM
(weights and bias scaled) whenever that PCMM has no other user.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from hemlp.compiler.activations import ActPoly
from hemlp.compiler.ir import Graph, Op, avgpool_matrix, conv2d_index, dense_conv_weight
from hemlp.errors import SerializationError, UnsupportedError
from hemlp.step_ops import MatmulInfo, PcmmInfo, StepInfo, StepOp, lint_pass, step_info


@dataclass
class Step:
    op: str
    out: str
    inputs: list
    rows: int                                  # features of the output
    node: str = ""                             # IR node it implements
    U: Optional[np.ndarray] = None
    index: Optional[np.ndarray] = None
    bias: Optional[np.ndarray] = None
    act: Optional[ActPoly] = None
    alpha: Optional[np.ndarray] = None
    beta: Optional[np.ndarray] = None
    level_in: Optional[int] = None
    level_out: Optional[int] = None
    info: StepInfo = field(default_factory=dict)   # the op's typed metadata (hemlp.step_ops.INFO); a dict converts

    def __post_init__(self):
        self.info = step_info(self.op, self.info)

    def arrays(self) -> dict:
        return {k: getattr(self, k) for k in ("U", "index", "bias", "alpha", "beta") if getattr(self, k) is not None}

    def meta(self) -> dict:
        return dict(op=self.op, out=self.out, inputs=list(self.inputs), rows=self.rows, node=self.node,
                    act=None if self.act is None else self.act.to_json(), level_in=self.level_in,
                    level_out=self.level_out, info=dict(self.info))

    @classmethod
    def from_meta(cls, meta: dict, arrays: dict) -> "Step":
        try:
            info = step_info(meta["op"], dict(meta.get("info", {})))
        except KeyError as exc:       # a key this version's metadata classes do not declare
            raise SerializationError(f"step {meta.get('out')!r}: {exc.args[0]}; the plan comes from another hemlp "
                                     "version: recompile the model with this one") from None
        s = cls(meta["op"], meta["out"], list(meta["inputs"]), int(meta["rows"]), meta.get("node", ""),
                act=None if meta.get("act") is None else ActPoly.from_json(meta["act"]),
                level_in=meta.get("level_in"), level_out=meta.get("level_out"), info=info)
        for k, v in arrays.items():
            setattr(s, k, v)
        return s


def _f64(v):
    return None if v is None else np.asarray(v, dtype=np.float64)


def _lower_linear(n, g, steps):
    steps.append(Step(StepOp.PCMM, n.name, list(n.inputs), n.features, n.name, U=_f64(n.attrs["weight"]),
                      bias=_f64(n.attrs.get("bias"))))


def _lower_conv2d(n, g, steps):
    a = n.attrs
    in_shape = g.node(n.inputs[0]).shape
    w = dense_conv_weight(np.asarray(a["weight"], dtype=np.float64), a.get("groups", 1))
    idx, _ = conv2d_index(in_shape, w.shape[2:], a["stride"], a["padding"], a.get("dilation", (1, 1)))
    # the shapes let layout (P) build the conv's nonzero diagonals from its structure (packed_diagonals)
    steps.append(Step(StepOp.PCMM, n.name, list(n.inputs), n.features, n.name, U=w.reshape(w.shape[0], -1),
                      index=idx, bias=_f64(a.get("bias")), info=PcmmInfo(in_shape=list(in_shape), out_shape=list(n.shape))))


def _lower_avgpool2d(n, g, steps):
    a = n.attrs
    in_shape = g.node(n.inputs[0]).shape
    C = in_shape[0]
    if a.get("count_include_pad", True) or tuple(a["padding"]) == (0, 0):
        idx1, (Ho, Wo) = conv2d_index((1,) + tuple(in_shape[1:]), a["kernel"], a["stride"], a["padding"])
        HW = in_shape[1] * in_shape[2]
        # one U row for every channel: P = C*Ho*Wo output blocks in (c, ho, wo) order
        idx = np.concatenate([np.where(idx1 >= 0, idx1 + c * HW, -1) for c in range(C)], axis=1)
        k = a["kernel"][0] * a["kernel"][1]
        div = a.get("divisor_override") or k
        steps.append(Step(StepOp.PCMM, n.name, list(n.inputs), n.features, n.name, U=np.full((1, k), 1.0 / div),
                          index=idx, info=PcmmInfo(in_shape=list(in_shape), out_shape=list(n.shape))))
    else:
        M = avgpool_matrix(in_shape, a["kernel"], a["stride"], a["padding"], False, a.get("divisor_override"))
        steps.append(Step(StepOp.PCMM, n.name, list(n.inputs), n.features, n.name, U=M))


def _lower_transpose(n, g, steps):           # out row (.., i, j) = in row (.., j, i): no crypto
    sh = g.node(n.inputs[0]).shape
    perm = np.swapaxes(np.arange(int(np.prod(sh))).reshape(sh), -1, -2).reshape(-1)
    steps.append(Step(StepOp.PERM, n.name, list(n.inputs), n.features, n.name, index=perm.astype(np.int64)))


def _lower_matmul(n, g, steps):
    steps.append(Step(StepOp.MATMUL, n.name, list(n.inputs), n.features, n.name,
                      info=MatmulInfo(a_shape=list(g.node(n.inputs[0]).shape),
                                      b_shape=list(g.node(n.inputs[1]).shape))))


def _lower_act(n, g, steps):
    ap: ActPoly = n.attrs["approx"]
    if ap.form == "affine":
        steps.append(Step(StepOp.AFFINE, n.name, list(n.inputs), n.features, n.name,
                          alpha=np.full(n.features, ap.alpha), beta=np.full(n.features, ap.beta)))
        return
    src = n.inputs[0]
    if ap.alpha != 1.0 or ap.beta != 0.0:
        src = _fold_input_affine(steps, g, n, ap)
    if ap.form == "composite":
        _lower_composite(n, g, steps, ap, src)
        return
    steps.append(Step(StepOp.SQUARE if ap.form == "square" else StepOp.POLY, n.name, [src], n.features, n.name,
                      act=ap))


def _lower_composite(n, g, steps, ap: ActPoly, src: str) -> None:
    """u * h(u): one poly step per stage of h (the first carries the activation's range, for the client's range
    checks), then the ct x ct product with u."""
    prev = src
    for i, c in enumerate(ap.stages):
        first = i == 0
        stage = ActPoly(ap.kind if first else "sign_stage", "cheb", ap.alpha if first else 1.0, 0.0, c,
                        degree=len(c) - 1, method="composite", lo=ap.lo if first else None,
                        hi=ap.hi if first else None, dom_lo=ap.dom_lo if first else None,
                        dom_hi=ap.dom_hi if first else None, max_err=ap.max_err if first else 0.0)
        out = g.unique(f"{n.name}_sign{i + 1}")
        steps.append(Step(StepOp.POLY, out, [prev], n.features, n.name, act=stage))
        prev = out
    steps.append(Step(StepOp.MUL, n.name, [src, prev], n.features, n.name))


def _plain(op):
    """A node lowered to one step of `op` reading the node's inputs."""
    def lower_node(n, g, steps):
        steps.append(Step(op, n.name, list(n.inputs), n.features, n.name))
    return lower_node


#: one lowering per IR op: (node, graph, steps so far) -> appends the node's steps
LOWER = {
    Op.INPUT: lambda n, g, steps: steps.append(Step(StepOp.INPUT, n.name, [], n.features, n.name)),
    Op.OUTPUT: _plain(StepOp.OUTPUT),
    Op.LINEAR: _lower_linear,
    Op.CONV2D: _lower_conv2d,
    Op.AVGPOOL2D: _lower_avgpool2d,
    Op.FLATTEN: _plain(StepOp.ALIAS),
    Op.IDENTITY: _plain(StepOp.ALIAS),
    Op.AFFINE: lambda n, g, steps: steps.append(Step(StepOp.AFFINE, n.name, list(n.inputs), n.features, n.name,
                                                     alpha=_f64(n.attrs["alpha"]), beta=_f64(n.attrs["beta"]))),
    Op.ADD: _plain(StepOp.ADD),
    Op.TRANSPOSE: _lower_transpose,
    Op.MUL: _plain(StepOp.MUL),
    Op.MATMUL: _lower_matmul,
    Op.ACT: _lower_act,
}


def lower(g: Graph) -> list[Step]:
    """The graph as executable steps, one LOWER handler per node (batchnorm is folded or made affine before)."""
    steps: list[Step] = []
    for n in g.nodes:
        handler = LOWER.get(n.op)
        if handler is None:
            raise UnsupportedError(f"cannot lower IR op {n.op!r} (node {n.name}); ops with a lowering: "
                                   f"{sorted(LOWER)}")
        handler(n, g, steps)
    return lint_pass(steps, "lowering")


def _fold_input_affine(steps: list[Step], g: Graph, n, ap: ActPoly) -> str:
    """Fold u = alpha x + beta into the PCMM producing x (through flattens), or emit an affine step."""
    name = n.inputs[0]
    cur = g.node(name)
    ok = len(g.users(cur.name)) == 1
    while ok and cur.op == "flatten":
        cur = g.node(cur.inputs[0])
        ok = len(g.users(cur.name)) == 1
    prod = next((s for s in steps if s.out == cur.name), None)
    if ok and prod is not None and prod.op == StepOp.PCMM and not prod.info.folded_affine:
        rows_U = prod.U.shape[0]
        prod.U = prod.U * ap.alpha
        b = np.zeros(rows_U) if prod.bias is None else prod.bias
        prod.bias = b * ap.alpha + ap.beta
        prod.info.folded_affine = n.name
        return name
    aff = Step(StepOp.AFFINE, g.unique(n.name + "_in"), [name], n.features, n.name,
               alpha=np.full(n.features, ap.alpha), beta=np.full(n.features, ap.beta))
    aff.info.note = "activation input scaling not foldable (1 level)"
    steps.append(aff)
    return aff.out


def dense_matrix(step, rows_in: int) -> np.ndarray:
    """The (rows_out, rows_in) matrix of a lowered pcmm step (im2col gathers expanded)."""
    U = np.asarray(step.U, dtype=np.float64)
    if step.index is None:
        return U
    idx = np.asarray(step.index)
    P = idx.shape[1]
    M = np.zeros((U.shape[0] * P, int(rows_in)))
    for p in range(P):
        # output row r*P + p gathers input rows idx[i, p] with weights U[r, i] (-1: zero padding)
        for i in np.nonzero(idx[:, p] >= 0)[0]:
            M[p::P, idx[i, p]] += U[:, i]
    return M
