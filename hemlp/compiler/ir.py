"""The compiler IR: a chain (DAG) of layers with per-sample shapes, layouts, levels and scales.

A ``Graph`` is a topologically ordered list of ``Node``s. Frontends (torch.fx, ONNX) build it;
``fold`` simplifies it; ``activations`` attaches polynomial approximations; ``lower`` turns it
into executable steps; ``params`` assigns levels. ``print(plan)`` reads like torch.fx code.

Ops (attrs):
    input      shape
    linear     weight (out, in), bias | None          y = W x + b over the flattened features
    conv2d     weight (Co, Ci, kh, kw), bias, stride, padding, dilation, groups
    avgpool2d  kernel, stride, padding, count_include_pad, divisor_override (optional; 1 = window sums)
    batchnorm  scale (C,), shift (C,)                   y = scale[c] x + shift[c]
    affine     alpha (F,), beta (F,)                    per-feature scale and shift
    flatten    (a relabelling of rows in layout A)
    act        kind: square | poly | relu | silu | gelu | sigmoid | tanh | clip(lo,hi) ; coeffs (poly, power basis)
    add        two inputs (residual)
    transpose  swap the last two per-sample dimensions (a permutation of rows in layout A)
    mul        two encrypted inputs of one shape: elementwise ciphertext x ciphertext product
    matmul     two encrypted inputs (..., m, k) @ (..., k, n): ciphertext x ciphertext matrix product
    output
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Optional

import numpy as np

from hemlp.errors import ShapeError, UnsupportedError

class Op(StrEnum):
    """The IR's ops (equal to their strings: ``node.op == "linear"`` and ``Op("linear")`` both work)."""
    INPUT = "input"
    OUTPUT = "output"
    LINEAR = "linear"
    CONV2D = "conv2d"
    AVGPOOL2D = "avgpool2d"
    BATCHNORM = "batchnorm"
    AFFINE = "affine"
    FLATTEN = "flatten"
    IDENTITY = "identity"
    ACT = "act"
    TRANSPOSE = "transpose"
    ADD = "add"
    MUL = "mul"
    MATMUL = "matmul"


LINEAR_OPS = (Op.LINEAR, Op.CONV2D, Op.AVGPOOL2D)
#: every IR op and the number of inputs it takes
OP_ARITY = {
    Op.INPUT: 0,
    Op.OUTPUT: 1,
    Op.LINEAR: 1,
    Op.CONV2D: 1,
    Op.AVGPOOL2D: 1,
    Op.BATCHNORM: 1,
    Op.AFFINE: 1,
    Op.FLATTEN: 1,
    Op.IDENTITY: 1,
    Op.ACT: 1,
    Op.TRANSPOSE: 1,
    Op.ADD: 2,
    Op.MUL: 2,
    Op.MATMUL: 2,
}
ACT_KINDS = ("square", "poly", "relu", "silu", "gelu", "sigmoid", "tanh")


#: bumped by every edit that can change a graph's name or users index: a node's name or inputs assigned, a node's
#: inputs list or a graph's node list edited in place (Graph.nodes and Node.inputs are the tracked lists below). An
#: index built at one value stays valid while the counter keeps it (a global counter: a node may sit in several
#: graphs, e.g. Graph(other.nodes)).
_edits = 0


def _edited() -> None:
    global _edits
    _edits += 1


class _TrackedList(list):
    """A list that bumps the edit counter on every in-place change (its slices and copies are plain lists)."""

    def __setitem__(self, i, v):
        _edited()
        super().__setitem__(i, v)

    def __delitem__(self, i):
        _edited()
        super().__delitem__(i)

    def __iadd__(self, other):
        _edited()
        return super().__iadd__(other)

    def __imul__(self, k):
        _edited()
        return super().__imul__(k)

    def append(self, v):
        _edited()
        super().append(v)

    def extend(self, vs):
        _edited()
        super().extend(vs)

    def insert(self, i, v):
        _edited()
        super().insert(i, v)

    def pop(self, i=-1):
        _edited()
        return super().pop(i)

    def remove(self, v):
        _edited()
        super().remove(v)

    def clear(self):
        _edited()
        super().clear()

    def sort(self, *, key=None, reverse=False):
        _edited()
        super().sort(key=key, reverse=reverse)

    def reverse(self):
        _edited()
        super().reverse()


@dataclass
class Node:
    name: str
    op: str
    inputs: list
    shape: tuple                      # per-sample output shape
    attrs: dict = field(default_factory=dict)
    source: str = ""                  # where it came from: fx node / ONNX node (op type)
    # planning annotations (filled by params / lower)
    level_in: Optional[int] = None
    level_out: Optional[int] = None
    scale_out: Optional[float] = None
    notes: list = field(default_factory=list)

    def __setattr__(self, key, value):
        if key == "inputs":
            value = _TrackedList(value)
        object.__setattr__(self, key, value)
        if key in ("name", "inputs"):
            _edited()

    @property
    def features(self) -> int:
        return int(np.prod(self.shape)) if self.shape else 1


class Graph:
    """Nodes in topological order. ``node(name)``, ``users(name)`` and ``unique`` answer from a name index and a users
    index (O(1)), rebuilt lazily after any edit: ``g.nodes`` (assigned or edited in place) or a node's name or inputs
    (assigned or edited in place)."""

    def __init__(self, nodes=None, name: str = "model"):
        self.nodes = list(nodes or [])
        self.name = name

    @property
    def nodes(self) -> list[Node]:
        return self._nodes

    @nodes.setter
    def nodes(self, value) -> None:
        self._nodes = _TrackedList(value)
        _edited()

    def __getstate__(self):                     # the index is per process (it is stamped with _edits)
        return {k: v for k, v in self.__dict__.items() if k != "_index"}

    def _lookup(self) -> tuple[dict, dict]:
        """(name -> first node of that name, name -> its users in node order), current as of the last edit."""
        index = self.__dict__.get("_index")
        if index is None or index[0] != _edits:
            by_name: dict[str, Node] = {}
            users: dict[str, list[Node]] = {}
            for n in self._nodes:
                by_name.setdefault(n.name, n)
                for i in dict.fromkeys(n.inputs):    # a node using one value twice (x + x) is one user of it
                    users.setdefault(i, []).append(n)
            index = self._index = (_edits, by_name, users)
        return index[1], index[2]

    # ---- access
    def __iter__(self):
        return iter(self.nodes)

    def __len__(self):
        return len(self.nodes)

    def node(self, name: str) -> Node:
        try:
            return self._lookup()[0][name]
        except KeyError:
            raise KeyError(name) from None

    def users(self, name: str) -> list[Node]:
        return list(self._lookup()[1].get(name, ()))

    @property
    def input(self) -> Node:
        return next(n for n in self.nodes if n.op == "input")

    @property
    def output(self) -> Node:
        return next(n for n in self.nodes if n.op == "output")

    def unique(self, base: str) -> str:
        names = self._lookup()[0]
        base = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in base).strip("_") or "v"
        if base[0].isdigit():
            base = "layer" + base
        if base not in names:
            return base
        i = 1
        while f"{base}_{i}" in names:
            i += 1
        return f"{base}_{i}"

    def add(self, node: Node) -> Node:
        self.nodes.append(node)
        return node

    def replace_uses(self, old: str, new: str) -> None:
        for n in self.nodes:
            n.inputs = [new if i == old else i for i in n.inputs]

    def remove(self, name: str) -> None:
        self.nodes = [n for n in self.nodes if n.name != name]

    def bypass(self, node: Node) -> None:
        """Remove a single-input node, wiring its users to its input."""
        self.replace_uses(node.name, node.inputs[0])
        self.remove(node.name)

    def dead_code(self) -> None:
        live, out = set(), self.output
        stack = [out.name]
        while stack:
            n = stack.pop()
            if n in live:
                continue
            live.add(n)
            stack.extend(self.node(n).inputs)
        self.nodes = [n for n in self.nodes if n.name in live]

    # ---- checks
    def lint(self) -> "Graph":
        """Raises ShapeError naming the first broken invariant: one input and one output, names unique, ops known,
        every input defined before its use, the op's arity, and every node's shape equal to what its op computes
        from its inputs (evaluated on one zero sample). Returns the graph (chains after a pass)."""
        seen: set = set()
        for n in self.nodes:
            if n.op not in OP_ARITY:
                raise ShapeError(f"node {n.name!r}: unknown op {n.op!r} (known: {sorted(OP_ARITY)})")
            if n.name in seen:
                raise ShapeError(f"node name {n.name!r} is defined twice")
            missing = [i for i in n.inputs if i not in seen]
            if missing:
                raise ShapeError(f"node {n.name!r} uses {missing} before they are defined")
            if len(n.inputs) != OP_ARITY[n.op]:
                raise ShapeError(f"node {n.name!r} ({n.op}) has {len(n.inputs)} inputs, its op takes {OP_ARITY[n.op]}")
            seen.add(n.name)
        for op in ("input", "output"):
            count = sum(n.op == op for n in self.nodes)
            if count != 1:
                raise ShapeError(f"the graph has {count} {op} nodes, it needs exactly one")
        vals = self.reference(np.zeros((1,) + tuple(self.input.shape)))
        for n in self.nodes:
            got = tuple(vals[n.name].shape[1:])
            if got != tuple(n.shape):
                raise ShapeError(f"node {n.name!r} ({n.op}) declares per-sample shape {tuple(n.shape)} but computes "
                                 f"{got}")
        return self

    # ---- reference execution (float64, exact activations): calibration and oracles
    def reference(self, x: np.ndarray, exact: bool = True) -> dict:
        """Run the graph on rows-major data. x: (batch, *input_shape). Returns name -> (batch, *shape)."""
        vals = {}
        for n in self.nodes:
            ins = [vals[i] for i in n.inputs]
            vals[n.name] = eval_node(n, ins, x, exact=exact)
        return vals

    def __str__(self):
        return format_graph(self)

    __repr__ = __str__


# ---------------------------------------------------------------------------------------
# Numpy semantics of every op (batch-first tensors)
# ---------------------------------------------------------------------------------------

def clip_kind(lo, hi) -> str:
    """The activation kind of clamp(x, lo, hi) (hardtanh, ReLU6; a missing bound is infinite): 'clip(0,6)'."""
    lo = -math.inf if lo is None else float(lo)
    hi = math.inf if hi is None else float(hi)
    if not lo < hi:
        raise ShapeError(f"clamp bounds [{lo}, {hi}] are empty; give min < max")
    return f"clip({lo:.17g},{hi:.17g})"


def clip_bounds(kind: str):
    """(lo, hi) of a 'clip(lo,hi)' kind, or None for any other kind."""
    if not kind.startswith("clip(") or not kind.endswith(")"):
        return None
    lo, hi = (float(v) for v in kind[5:-1].split(","))
    return lo, hi


def exact_activation(kind: str, x, coeffs=None):
    bounds = clip_bounds(kind)
    if bounds is not None:
        return np.clip(x, *bounds)
    if kind == "square":
        return x * x
    if kind == "poly":
        return np.polynomial.polynomial.polyval(x, np.asarray(coeffs, dtype=np.float64))
    if kind == "relu":
        return np.maximum(x, 0.0)
    if kind == "sigmoid":
        return 0.5 * (1.0 + np.tanh(0.5 * x))
    if kind == "tanh":
        return np.tanh(x)
    if kind == "silu":
        return x * 0.5 * (1.0 + np.tanh(0.5 * x))
    if kind == "gelu":
        from math import erf

        verf = np.vectorize(erf, otypes=[np.float64])
        return 0.5 * x * (1.0 + verf(x / math.sqrt(2.0)))
    raise UnsupportedError(f"activation {kind!r}")


def conv2d_index(in_shape, kernel, stride, padding, dilation=(1, 1)):
    """im2col over rows: index (Ci*kh*kw, Ho*Wo) of input rows (c, y, x) -> c*H*W + y*W + x, -1 = pad."""
    Ci, H, W = in_shape
    kh, kw = kernel
    sh, sw = stride
    ph, pw = padding
    dh, dw = dilation
    Ho = (H + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    Wo = (W + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    if Ho <= 0 or Wo <= 0:
        raise ShapeError(f"conv/pool output would be empty for input {in_shape} and kernel {kernel}")
    c, ky, kx = np.meshgrid(np.arange(Ci), np.arange(kh), np.arange(kw), indexing="ij")
    oy, ox = np.meshgrid(np.arange(Ho), np.arange(Wo), indexing="ij")
    iy = oy.reshape(1, -1) * sh + ky.reshape(-1, 1) * dh - ph
    ix = ox.reshape(1, -1) * sw + kx.reshape(-1, 1) * dw - pw
    idx = c.reshape(-1, 1) * H * W + iy * W + ix
    idx = np.where((iy >= 0) & (iy < H) & (ix >= 0) & (ix < W), idx, -1)
    return idx.astype(np.int64), (Ho, Wo)


def dense_conv_weight(w: np.ndarray, groups: int) -> np.ndarray:
    """A grouped conv weight (Co, Ci/g, kh, kw) as the equivalent dense (Co, Ci, kh, kw)."""
    if groups == 1:
        return w
    Co, cig, kh, kw = w.shape
    out = np.zeros((Co, cig * groups, kh, kw))
    cog = Co // groups
    for g in range(groups):
        out[g * cog:(g + 1) * cog, g * cig:(g + 1) * cig] = w[g * cog:(g + 1) * cog]
    return out


def last_uses(items) -> dict:
    """Value name -> position of the last item (graph node or lowered step) that reads it: the passes that free
    each value after its last use."""
    last = {}
    for i, it in enumerate(items):
        for name in it.inputs:
            last[name] = i
    return last


#: bytes of gathered im2col columns gather_apply holds at once (larger batches are evaluated in column chunks)
GATHER_CHUNK_BYTES = 1 << 28


def gather_apply(U, index, X, bias=None):
    """Rows semantics of pcmm.pcmm_gather on a plaintext rows matrix X (d, B): one BLAS product per chunk of
    samples (the gathered columns of a whole calibration set would take gigabytes)."""
    U = np.asarray(U, dtype=np.float64)
    d2, P = index.shape
    B = X.shape[1]
    out = np.empty((U.shape[0] * P, B))
    step = max(1, int(GATHER_CHUNK_BYTES // max(1, d2 * P * 8)))
    for b0 in range(0, B, step):
        Xc = X[:, b0:b0 + step]
        Xz = np.concatenate([Xc, np.zeros((1, Xc.shape[1]))], axis=0)
        G = Xz[index]                            # (d2, P, b), -1 -> zero row
        out[:, b0:b0 + step] = np.tensordot(U, G, axes=(1, 0)).reshape(U.shape[0] * P, Xc.shape[1])
    if bias is not None:
        out += np.repeat(np.asarray(bias, dtype=np.float64), P)[:, None]
    return out


def avgpool_matrix(in_shape, kernel, stride, padding, count_include_pad=True, divisor_override=None):
    """Dense pooling matrix (C*Ho*Wo, C*H*W)."""
    C, H, W = in_shape
    idx, (Ho, Wo) = conv2d_index((1, H, W), kernel, stride, padding)
    P = Ho * Wo
    M = np.zeros((C * P, C * H * W))
    for p in range(P):
        rows = idx[:, p]
        valid = rows[rows >= 0]
        div = divisor_override or (kernel[0] * kernel[1] if count_include_pad else max(len(valid), 1))
        for c in range(C):
            M[c * P + p, c * H * W + valid] = 1.0 / div
    return M


def avgpool_apply(X, kernel, stride, padding, count_include_pad=True, divisor_override=None):
    """Average pooling of a batch (B, C, H, W) by window sums: what ``X @ avgpool_matrix(...).T`` computes,
    without the dense (C*Ho*Wo, C*H*W) matrix (2 GiB for 32 channels at 32x32: the activation search of a CIFAR
    ResNet evaluated it dozens of times)."""
    B, C, H, W = X.shape
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    torch = _torch()
    if torch is not None and 2 * ph <= kh and 2 * pw <= kw:       # torch's limit on the padding
        with torch.no_grad():
            return torch.nn.functional.avg_pool2d(
                torch.from_numpy(np.ascontiguousarray(X, dtype=np.float64)), (kh, kw), (sh, sw), (ph, pw),
                ceil_mode=False, count_include_pad=bool(count_include_pad),
                divisor_override=int(divisor_override) if divisor_override else None).numpy()
    Ho, Wo = (H + 2 * ph - kh) // sh + 1, (W + 2 * pw - kw) // sw + 1
    if Ho <= 0 or Wo <= 0:
        raise ShapeError(f"pool output would be empty for input {(C, H, W)} and kernel {kernel}")
    Xp = np.pad(np.asarray(X, dtype=np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    inside = np.pad(np.ones((H, W)), ((ph, ph), (pw, pw)))
    total, count = np.zeros((B, C, Ho, Wo)), np.zeros((Ho, Wo))
    for i in range(kh):
        for j in range(kw):
            window = (slice(i, i + sh * (Ho - 1) + 1, sh), slice(j, j + sw * (Wo - 1) + 1, sw))
            total += Xp[(slice(None), slice(None)) + window]
            count += inside[window]
    if divisor_override:
        return total / divisor_override
    return total / (kh * kw if count_include_pad else np.maximum(count, 1))


def _torch():
    """torch when installed (its convolutions are ~50x faster than the numpy im2col below), else None."""
    try:
        import torch
    except ImportError:    # pragma: no cover - torch is optional for the core
        return None
    return torch


def conv2d_apply(X, weight, bias, stride, padding, dilation=(1, 1), groups=1):
    """A batch (B, Ci, H, W) through a convolution: torch's kernel when torch is installed (in float32 for a float32
    batch, else float64), else the im2col gather of the lowering (the same sums in another order)."""
    torch = _torch()
    if torch is not None:
        dt = np.float32 if np.asarray(X).dtype == np.float32 else np.float64
        with torch.no_grad():
            y = torch.nn.functional.conv2d(torch.from_numpy(np.ascontiguousarray(X, dtype=dt)),
                                           torch.from_numpy(np.asarray(weight, dtype=dt)),
                                           None if bias is None else torch.from_numpy(np.asarray(bias, dt)),
                                           tuple(stride), tuple(padding), tuple(dilation), int(groups))
        return y.numpy()
    B = X.shape[0]
    w = dense_conv_weight(np.asarray(weight, dtype=np.float64), groups)
    idx, (Ho, Wo) = conv2d_index(X.shape[1:], w.shape[2:], stride, padding, dilation)
    y = gather_apply(w.reshape(w.shape[0], -1), idx, X.reshape(B, -1).T, bias)
    return y.T.reshape(B, w.shape[0], Ho, Wo)


def _rows(X):
    return X.shape[0]


def _eval_linear(n, ins, x, exact):
    X, a = ins[0], n.attrs
    y = X.reshape(_rows(X), -1) @ a["weight"].T
    if a.get("bias") is not None:
        y = y + a["bias"]
    return y.reshape((_rows(X),) + tuple(n.shape))


def _eval_conv2d(n, ins, x, exact):
    a = n.attrs
    y = conv2d_apply(ins[0], a["weight"], a.get("bias"), a["stride"], a["padding"], a.get("dilation", (1, 1)),
                     a.get("groups", 1))
    return y.reshape((_rows(ins[0]),) + tuple(n.shape))


def _eval_avgpool2d(n, ins, x, exact):
    a = n.attrs
    y = avgpool_apply(ins[0], a["kernel"], a["stride"], a["padding"], a.get("count_include_pad", True),
                      a.get("divisor_override"))
    return y.reshape((_rows(ins[0]),) + tuple(n.shape))


def _eval_batchnorm(n, ins, x, exact):
    X = ins[0]
    sh = (1, X.shape[1]) + (1,) * (X.ndim - 2)
    return X * n.attrs["scale"].reshape(sh) + n.attrs["shift"].reshape(sh)


def _eval_act(n, ins, x, exact):
    a = n.attrs
    if exact or "approx" not in a:
        return exact_activation(a["kind"], ins[0], a.get("coeffs"))
    return a["approx"].apply(ins[0])


#: the float64 semantics of every IR op on batch-first tensors: (node, input values, graph input, exact) -> value;
#: exact=False evaluates activations with their attached approximations (attrs['approx'])
EVAL = {
    Op.INPUT: lambda n, ins, x, exact: np.asarray(x, dtype=np.float64),
    Op.OUTPUT: lambda n, ins, x, exact: ins[0],
    Op.LINEAR: _eval_linear,
    Op.CONV2D: _eval_conv2d,
    Op.AVGPOOL2D: _eval_avgpool2d,
    Op.BATCHNORM: _eval_batchnorm,
    Op.AFFINE: lambda n, ins, x, exact: (ins[0].reshape(_rows(ins[0]), -1) * n.attrs["alpha"]
                                         + n.attrs["beta"]).reshape(ins[0].shape),
    Op.FLATTEN: lambda n, ins, x, exact: ins[0].reshape((_rows(ins[0]),) + tuple(n.shape)),
    Op.IDENTITY: lambda n, ins, x, exact: ins[0].reshape((_rows(ins[0]),) + tuple(n.shape)),
    Op.ACT: _eval_act,
    Op.TRANSPOSE: lambda n, ins, x, exact: np.swapaxes(ins[0], -1, -2),
    Op.ADD: lambda n, ins, x, exact: ins[0] + ins[1],
    Op.MUL: lambda n, ins, x, exact: ins[0] * ins[1],
    Op.MATMUL: lambda n, ins, x, exact: np.matmul(ins[0], ins[1]),
}


def eval_node(n: Node, ins, x, exact=True):
    """One node's value from its inputs' values (EVAL)."""
    try:
        f = EVAL[n.op]
    except KeyError:
        raise UnsupportedError(f"IR op {n.op!r} (node {n.name!r}) has no semantics; known ops: "
                               f"{sorted(EVAL)}") from None
    return f(n, ins, x, exact)


# ---------------------------------------------------------------------------------------
# Printing (torch.fx-like)
# ---------------------------------------------------------------------------------------

def _shape(s) -> str:
    return "[" + ", ".join(str(d) for d in s) + "]"


def _lv(n: Node) -> str:
    if n.level_in is None or n.level_out is None:
        return ""
    return f"L{n.level_in}" if n.level_in == n.level_out else f"L{n.level_in}→L{n.level_out}"


def _describe_linear(n: Node, ins: str) -> str:
    w = n.attrs["weight"]
    b = ", bias" if n.attrs.get("bias") is not None else ""
    return f"pcmm({n.name}.weight[{w.shape[0]}x{w.shape[1]}], {ins}{b})"


def _describe_conv2d(n: Node, ins: str) -> str:
    a = n.attrs
    w = a["weight"]
    extra = f", groups={a['groups']}" if a.get("groups", 1) != 1 else ""
    return (f"pcmm_gather({n.name}.weight[{w.shape[0]}x{w.shape[1]}x{w.shape[2]}x{w.shape[3]}], {ins}, "
            f"stride={tuple(a['stride'])}, padding={tuple(a['padding'])}{extra})")


def _describe_avgpool2d(n: Node, ins: str) -> str:
    a = n.attrs
    div = f", divisor={a['divisor_override']}" if a.get("divisor_override") else ""
    return f"avg_pool2d({ins}, kernel={tuple(a['kernel'])}, stride={tuple(a['stride'])}{div})"


def _describe_act(n: Node, ins: str) -> str:
    a = n.attrs
    ap = a.get("approx")
    if ap is not None:
        return f"{ap.expr(ins)}"
    if a["kind"] == "poly":
        return f"poly({ins}, {np.round(a['coeffs'], 4).tolist()})"
    return f"{a['kind']}({ins})"


#: the printed right-hand side of every IR op: (node, its inputs joined by ", ") -> text; an op without an entry
#: prints as op(inputs)
DESCRIBE = {
    Op.INPUT: lambda n, ins: "input",
    Op.LINEAR: _describe_linear,
    Op.CONV2D: _describe_conv2d,
    Op.AVGPOOL2D: _describe_avgpool2d,
    Op.BATCHNORM: lambda n, ins: f"batch_norm({ins})",
    Op.AFFINE: lambda n, ins: f"affine({ins})",
    Op.FLATTEN: lambda n, ins: f"flatten({ins})" if len(n.shape) == 1 else f"reshape({ins}, {list(n.shape)})",
    Op.ACT: _describe_act,
    Op.ADD: lambda n, ins: f"{n.inputs[0]} + {n.inputs[1]}",
    Op.MUL: lambda n, ins: f"{n.inputs[0]} * {n.inputs[1]}  (ct x ct)",
    Op.TRANSPOSE: lambda n, ins: f"{ins}.mT",
    Op.MATMUL: lambda n, ins: f"ccmm({n.inputs[0]}, {n.inputs[1]})",
}


def describe(n: Node) -> str:
    """The right-hand side of `name = ...` for one node (DESCRIBE)."""
    ins = ", ".join(n.inputs)
    f = DESCRIBE.get(n.op)
    return f"{n.op}({ins})" if f is None else f(n, ins)


def format_graph(g: Graph, header: str = "", steps_info: dict | None = None) -> str:
    inp = g.input
    lines = []
    if header:
        lines += [f"# {h}" if h else "#" for h in header.splitlines()]
    lv = f" @ L{inp.level_out}" if inp.level_out is not None else ""
    lines.append(f"def forward({inp.name}: Enc{_shape(inp.shape)}{lv}):")
    w = max([len(n.name) for n in g.nodes] + [4])
    for n in g.nodes:
        if n.op == Op.INPUT:
            continue
        if n.op == Op.OUTPUT:
            lines.append(f"    return {n.inputs[0]}")
            continue
        rhs = describe(n)
        comment = [_shape(n.shape)]
        if _lv(n):
            comment.append(_lv(n))
        if n.source:
            comment.append(n.source)
        comment += n.notes
        lines.append(f"    {n.name:<{w}} = {rhs:<48}  # " + "  ".join(comment))
    return "\n".join(lines)


def matmul_index(a_shape, b_shape):
    """Row indices of a per-sample matrix product (..., m, k) @ (..., k, n) on flattened features:
    (ia, ib), each (rows_out, k): output row o = (lead, i, j) sums A[ia[o, t]] * B[ib[o, t]] over t."""
    a_shape, b_shape = tuple(a_shape), tuple(b_shape)
    if len(a_shape) < 2 or len(b_shape) < 2 or a_shape[:-2] != b_shape[:-2] or a_shape[-1] != b_shape[-2]:
        raise ShapeError(f"matrix product of per-sample shapes {a_shape} and {b_shape}: need (..., m, k) @ (..., k, n) "
                         "with equal leading dimensions")
    lead, (m, k), n = int(np.prod(a_shape[:-2], dtype=np.int64)), a_shape[-2:], b_shape[-1]
    L, i, j, t = np.meshgrid(np.arange(lead), np.arange(m), np.arange(n), np.arange(k), indexing="ij")
    ia = (L * m * k + i * k + t).reshape(-1, k)
    ib = (L * k * n + t * n + j).reshape(-1, k)
    return ia.astype(np.int64), ib.astype(np.int64)
