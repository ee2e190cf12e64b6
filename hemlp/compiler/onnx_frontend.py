"""ONNX -> IR (onnx + shape inference; no onnxruntime needed: calibration runs on the IR).

Supported ops: Gemm, MatMul (+ Add bias; on per-sample matrices too), Conv, BatchNormalization, AveragePool,
GlobalAveragePool, ReduceMean / ReduceSum over per-sample axes, Slice, Pad (zeros), Concat, Clip, Flatten, Reshape,
Squeeze / Unsqueeze, Transpose (last two axes), Dropout, Identity, Constant, Relu, Sigmoid, Tanh, Gelu, the exported
GELU pattern x * 0.5 * (1 + erf(x / sqrt 2)), SiLU as x * Sigmoid(x), and polynomial expressions in one tensor (Mul,
Add, Sub, Div by a constant, Pow with an integer exponent, Neg). Shape plumbing on constants (Shape of a tensor,
Gather, Concat, ConstantOfShape, Cast, ...) is evaluated at compile time with ONNX's reference implementation.
Anything else raises UnsupportedError naming the ONNX node and the alternative.
"""
from __future__ import annotations

import math

import numpy as np

from hemlp.compiler.ir import Graph, Node, clip_kind, conv2d_index
from hemlp.compiler.movement import MovementLowering
from hemlp.compiler.torch_frontend import NORM_HINT, per_token_weight, softmax_hint
from hemlp.errors import ShapeError, UnsupportedError
from hemlp.extras import require

_HINT = ("supported ONNX ops: Gemm, MatMul, Conv, BatchNormalization, AveragePool, GlobalAveragePool, ReduceMean, "
         "ReduceSum, Slice, Pad, Concat, Clip, Flatten, Reshape, Dropout, Identity, Relu, Sigmoid, Tanh, Gelu, Erf-GELU, "
         "x*Sigmoid(x), polynomial Mul/Add/Sub/Div/Pow of one tensor, residual Add")


#: the ops the loop below handles (some only in restricted forms, with their own messages)
HANDLED_OPS = {"Constant", "Dropout", "Identity", "Gemm", "MatMul", "Conv", "BatchNormalization", "AveragePool",
               "GlobalAveragePool", "MaxPool", "GlobalMaxPool", "Flatten", "Reshape", "Transpose", "Relu", "Sigmoid",
               "Tanh", "Gelu", "Erf", "Add", "Sub", "Mul", "Div", "Pow", "Neg", "Slice", "Pad", "Concat", "ReduceMean",
               "ReduceSum", "Clip", "Squeeze", "Unsqueeze"}
#: shape and index plumbing an exporter emits around a layer: never the op to name when a layer is unsupported
PLUMBING_OPS = {"Shape", "Gather", "GatherElements", "Unsqueeze", "Squeeze", "Concat", "Slice", "ConstantOfShape",
                "Cast", "Expand", "Range", "Split", "Where", "Equal", "Size", "Tile", "CastLike"}
#: what to do instead, for layers users meet
LAYER_HINTS = {"LSTM": "recurrent layers (LSTM / GRU / RNN) are not supported: their sigmoid / tanh gates over a "
                       "sequence exhaust the levels; use a feed-forward or convolutional model",
               "MaxPool": "use average pooling (max is not a polynomial)"}
LAYER_HINTS["GRU"] = LAYER_HINTS["RNN"] = LAYER_HINTS["LSTM"]
for _op in ("LayerNormalization", "GroupNormalization", "InstanceNormalization"):
    LAYER_HINTS[_op] = NORM_HINT


def _unsupported_layers(G) -> list:
    """The graph's nodes whose op hemlp does not handle and that are not shape plumbing, in graph order."""
    return [n for n in G.node if n.op_type not in HANDLED_OPS and n.op_type not in PLUMBING_OPS]


def _attrs(node):
    from onnx import helper   # from_onnx has imported onnx (or said which extra installs it)

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def from_onnx(model, example_input) -> Graph:
    onnx = require("onnx", "compiling an ONNX model")
    from onnx import numpy_helper, shape_inference

    if isinstance(model, str):
        try:
            model = onnx.load(model)
        except Exception as exc:
            raise UnsupportedError(f"cannot read the ONNX file {model!r}: {exc}") from None
    try:
        model = shape_inference.infer_shapes(model)
    except Exception:
        pass  # shapes are also derived op by op below
    G = model.graph
    raw = {t.name: numpy_helper.to_array(t) for t in G.initializer}      # constants in their ONNX dtypes
    consts = {k: v.astype(np.float64) for k, v in raw.items()}
    inputs = [i for i in G.input if i.name not in consts]
    if len(inputs) != 1:
        raise UnsupportedError(f"the ONNX graph has {len(inputs)} inputs ({[i.name for i in inputs]}); "
                               "hemlp models take one encrypted input tensor")
    vinfo = {}
    for v in list(G.value_info) + list(G.output):
        dims = [d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim]
        vinfo[v.name] = dims
    g = Graph(name=getattr(model.graph, "name", "onnx") or "onnx")
    x = np.asarray(example_input)
    env = {}

    def where(node):
        if node is None:
            return "the graph input/output"
        return f"ONNX node {node.name or '(unnamed)'!r} ({node.op_type})"

    # name the layer hemlp cannot run (an LSTM), not the first Shape / Transpose the exporter put before it
    layers = _unsupported_layers(G)
    if layers:
        first, kinds = layers[0], sorted({n.op_type for n in layers})
        if first.op_type in ("Softmax", "LogSoftmax"):
            final = any(o.name in first.output for o in G.output)
            raise UnsupportedError(f"ONNX op {first.op_type} at {where(first)} is not supported by hemlp; "
                                   + softmax_hint(final))
        raise UnsupportedError(f"ONNX op{'s' if len(kinds) > 1 else ''} {', '.join(kinds)} (first at {where(first)}) "
                               "not supported by hemlp; " + LAYER_HINTS.get(first.op_type, _HINT))

    def unsupported(node, what, instead=""):
        raise UnsupportedError(f"{what} at {where(node)} is not supported by hemlp; " + (instead or _HINT))

    def checked(node, name):
        """`name`, after cross-checking its per-sample shape against ONNX shape inference (when it knows it)."""
        dims = vinfo.get(node.output[0]) if node is not None and node.output else None
        shape = tuple(g.node(name).shape)
        if dims and all(d is not None for d in dims[1:]) and tuple(dims[1:]) != shape:
            raise ShapeError(f"{where(node)}: hemlp derived per-sample shape {shape} but ONNX shape "
                             f"inference says {tuple(dims[1:])}")
        return name

    def new(op, ins, shape, attrs, node, base, check=True):
        name = g.unique(base or node.op_type.lower())
        g.add(Node(name, op, list(ins), tuple(int(d) for d in shape), attrs, where(node)))
        return checked(node, name) if check else name

    def const_of(name):
        return consts.get(name)

    def val(name):
        if name in consts:
            return ("const", consts[name])
        return env[name]

    def as_poly(v):
        if isinstance(v, tuple) and v[0] == "poly":
            return v
        if isinstance(v, str):
            return ("poly", v, np.array([0.0, 1.0]))
        return None

    def scalar(v):
        if isinstance(v, tuple) and v[0] == "const":
            a = np.asarray(v[1])
            if a.size == 1:
                return float(a.reshape(-1)[0])
        return None

    def materialise(v, node):
        if isinstance(v, str):
            return v
        if isinstance(v, tuple) and v[0] == "poly":
            _, src, c = v
            c = np.trim_zeros(np.asarray(c, dtype=np.float64), "b")
            if len(c) == 2 and c[0] == 0 and c[1] == 1:
                return src
            kind = "square" if (len(c) == 3 and c[0] == 0 and c[1] == 0 and c[2] == 1) else "poly"
            return new("act", [src], g.node(src).shape, dict(kind=kind, coeffs=c), node, kind, check=False)
        if isinstance(v, tuple) and v[0] == "gelu":
            _, src, f = v
            a = new("act", [src], g.node(src).shape, dict(kind="gelu"), node, "gelu", check=False)
            if abs(f - 1.0) > 1e-12:
                a = new("act", [a], g.node(a).shape, dict(kind="poly", coeffs=np.array([0.0, f])), node, "scale",
                        check=False)
            return a
        unsupported(node, "a partial expression (e.g. a bare erf) used as a tensor")

    shape_in = tuple(x.shape[1:])
    env[inputs[0].name] = new("input", [], shape_in, {}, None, "input")

    def moves(node):
        def emit(op, ins_, shape, attrs, base):
            return new(op, ins_, shape, attrs, node, f"{node.name or node.op_type.lower()}_{base}", check=False)

        def refuse(what, instead):
            unsupported(node, what, instead)

        return MovementLowering(g, emit, refuse)

    def ints(name):
        v = raw.get(name)
        return None if v is None else [int(i) for i in np.asarray(v).reshape(-1)]

    def fold_constant(node) -> bool:
        """Evaluates a node whose inputs are all constants (shape plumbing: Shape of an encrypted tensor, Gather,
        Concat, ConstantOfShape, Cast, ...) with ONNX's reference implementation."""
        if node.op_type == "Shape" and node.input[0] in env and isinstance(env[node.input[0]], str):
            full = np.array((len(x),) + tuple(g.node(env[node.input[0]]).shape), dtype=np.int64)
            at_ = _attrs(node)
            raw[node.output[0]] = full[at_.get("start", 0):at_.get("end", len(full))]
        elif node.input and all((i == "" or i in raw) for i in node.input):
            from onnx.reference import ReferenceEvaluator

            try:
                outs_ = ReferenceEvaluator(node).run(None, {i: raw[i] for i in node.input if i})
            except Exception as exc:
                unsupported(node, f"constant {node.op_type} ({type(exc).__name__}: {exc})")
            raw.update(zip(node.output, (np.asarray(v) for v in outs_)))
        else:
            return False
        for o_ in node.output:
            if o_ in raw and np.issubdtype(raw[o_].dtype, np.number):
                consts[o_] = raw[o_].astype(np.float64)
        return True

    # torch.onnx exports x[:, :, ::2, ::2] as one Slice per axis: lowered one by one they are two subsampling 1x1
    # convolutions of strides (2, 1) and (1, 2), which layout (P) cannot place where torch's frontend gives one of
    # stride (2, 2). A Slice whose only consumer is a Slice waits (``pending``) and is applied with it, as one index.
    readers: dict = {}
    for n_ in G.node:
        for i_ in n_.input:
            if i_:
                readers.setdefault(i_, []).append(n_)
    graph_outputs = {v.name for v in G.output}
    pending: dict = {}

    for node in G.node:
        op, ins, outs = node.op_type, list(node.input), list(node.output)
        at = _attrs(node)
        o = outs[0]
        if op == "Constant":
            t = at.get("value")
            if t is None:
                unsupported(node, "a Constant without a tensor value")
            raw[o] = numpy_helper.to_array(t)
            consts[o] = raw[o].astype(np.float64)
            continue
        if op in PLUMBING_OPS | {"Reshape", "Transpose", "Add", "Sub", "Mul", "Div", "Identity", "Neg", "Pow"} \
                and fold_constant(node):
            continue
        if op == "Slice":
            starts = ints(ins[1]) if len(ins) > 1 else at.get("starts")
            ends = ints(ins[2]) if len(ins) > 2 else at.get("ends")
            axes = (ints(ins[3]) if len(ins) > 3 and ins[3] else at.get("axes")) or list(range(len(starts or [])))
            steps = (ints(ins[4]) if len(ins) > 4 and ins[4] else None) or [1] * len(axes)
            if starts is None or ends is None:
                unsupported(node, "Slice with computed bounds", "slice with constant bounds")
            inner = pending.pop(ins[0], None)
            if inner is not None:
                src, index = inner[0], list(inner[1])
                nd_ = len(index)
                if any(index[a_ % nd_] != slice(None) for a_ in axes):    # the same axis twice: one after the other
                    src = checked(inner[2], moves(inner[2]).getitem(src, tuple(index)))
                    index = [slice(None)] * nd_
            else:
                src = materialise(val(ins[0]), node)
                index = [slice(None)] * (len(g.node(src).shape) + 1)
            big = 1 << 62                          # ONNX's INT_MAX end: to the end of the axis
            for a_, st, en, sp in zip(axes, starts, ends, steps):
                index[a_ % len(index)] = slice(st, None if en >= big else en, sp)
            nxt = readers.get(o, [])
            if o not in graph_outputs and len(nxt) == 1 and nxt[0].op_type == "Slice" and nxt[0].input[0] == o:
                pending[o] = (src, tuple(index), node)
                continue
            env[o] = checked(node, moves(node).getitem(src, tuple(index)))
            continue
        if op == "Pad":
            src = materialise(val(ins[0]), node)
            pads = ints(ins[1]) if len(ins) > 1 and ins[1] else list(at.get("pads", []))
            value = float(np.asarray(raw[ins[2]]).reshape(-1)[0]) if len(ins) > 2 and ins[2] in raw else \
                float(at.get("value", 0.0))
            mode = at.get("mode", b"constant")
            mode = mode.decode() if isinstance(mode, bytes) else mode
            nd = len(g.node(src).shape) + 1
            if pads is None or len(pads) != 2 * nd or (len(ins) > 3 and ins[3]):
                unsupported(node, "Pad with computed pads or axes", "pad with constant amounts")
            if pads[0] or pads[nd]:
                unsupported(node, "padding the batch dimension", "pad per-sample dimensions")
            torch_order = [v for d in range(nd - 1, 0, -1) for v in (pads[d], pads[nd + d])]
            env[o] = checked(node, moves(node).pad(src, torch_order[:6], mode, value))
            continue
        if op == "Concat":
            srcs = [val(i) for i in ins]
            if any(i in raw for i in ins):
                unsupported(node, "Concat of an encrypted tensor with a constant", "concatenate encrypted tensors")
            env[o] = checked(node, moves(node).cat([materialise(v, node) for v in srcs], int(at["axis"])))
            continue
        if op in ("ReduceMean", "ReduceSum"):
            src = materialise(val(ins[0]), node)
            axes = ints(ins[1]) if len(ins) > 1 and ins[1] else at.get("axes")
            if axes is None and at.get("noop_with_empty_axes", 0):
                env[o] = src
                continue
            if axes is None:
                axes = list(range(len(g.node(src).shape) + 1))
            env[o] = checked(node, moves(node).reduce(src, [int(a_) for a_ in axes], bool(at.get("keepdims", 1)),
                                                      op == "ReduceMean"))
            continue
        if op == "Clip":
            src = materialise(val(ins[0]), node)
            if (len(ins) > 1 and ins[1] and ins[1] not in raw) or (len(ins) > 2 and ins[2] and ins[2] not in raw):
                unsupported(node, "Clip with computed bounds", "clip to constant bounds")
            lo = float(raw[ins[1]]) if len(ins) > 1 and ins[1] else at.get("min")
            hi = float(raw[ins[2]]) if len(ins) > 2 and ins[2] else at.get("max")
            kind = clip_kind(lo, hi)
            env[o] = new("act", [src], g.node(src).shape, dict(kind=kind), node, node.name or "clip")
            continue
        if op in ("Squeeze", "Unsqueeze"):
            src = materialise(val(ins[0]), node)
            dims = vinfo.get(o)
            if not dims or any(d is None for d in dims[1:]) or dims[0] not in (None, len(x)) and dims[0] != 1:
                unsupported(node, f"{op} without a known output shape", "reshape with constant sizes")
            env[o] = new("flatten", [src], tuple(dims[1:]), {}, node, "reshape")
            continue
        if op in ("Dropout", "Identity"):
            env[o] = val(ins[0])
            continue
        if op == "Gemm":
            src = materialise(val(ins[0]), node)
            W = const_of(ins[1])
            if W is None:
                unsupported(node, "Gemm with an encrypted (non-constant) B", "the weights must be initializers")
            if at.get("transA", 0):
                unsupported(node, "Gemm with transA=1")
            W = W.T if not at.get("transB", 0) else W
            W = W * at.get("alpha", 1.0)
            bias = const_of(ins[2]) * at.get("beta", 1.0) if len(ins) > 2 and ins[2] else None
            if bias is not None:
                bias = np.broadcast_to(bias.reshape(-1), (W.shape[0],)).copy()
            if g.node(src).features != W.shape[1]:
                raise ShapeError(f"{where(node)}: Gemm expects {W.shape[1]} features, the input has "
                                 f"{g.node(src).features}")
            env[o] = new("linear", [src], (W.shape[0],), dict(weight=W, bias=bias), node, node.name or "gemm")
            continue
        if op == "MatMul":
            W = const_of(ins[1])
            if W is None and const_of(ins[0]) is None:       # both operands encrypted: ct x ct product
                from hemlp.compiler.ir import matmul_index

                a_ir, b_ir = materialise(val(ins[0]), node), materialise(val(ins[1]), node)
                sa, sb = g.node(a_ir).shape, g.node(b_ir).shape
                try:
                    matmul_index(sa, sb)
                except ShapeError as exc:
                    unsupported(node, str(exc), "MatMul of per-sample matrices (..., m, k) @ (..., k, n)")
                env[o] = new("matmul", [a_ir, b_ir], tuple(sa[:-1]) + (sb[-1],), {}, node, node.name or "ccmm")
                continue
            if W is None or W.ndim != 2:
                unsupported(node, "MatMul with a constant left or non-2-D right operand",
                            "the weights must be a 2-D initializer on the right (x @ W)")
            src = materialise(val(ins[0]), node)
            sh = g.node(src).shape
            Wt = W.T.copy()
            if sh[-1] != W.shape[0]:
                raise ShapeError(f"{where(node)}: MatMul expects {W.shape[0]} features, the input has {sh[-1]}")
            if len(sh) > 1:                        # x @ W on every row of a per-sample matrix (tokens)
                rest = int(np.prod(sh[:-1]))
                Wt = per_token_weight(Wt, rest)
                if Wt is None:
                    unsupported(node, "MatMul on a large multi-dimensional input", "flatten first")
            env[o] = new("linear", [src], tuple(sh[:-1]) + (W.shape[1],), dict(weight=Wt, bias=None), node,
                         node.name or "matmul")
            continue
        if op == "Conv":
            src = materialise(val(ins[0]), node)
            w = const_of(ins[1])
            b = const_of(ins[2]) if len(ins) > 2 and ins[2] else None
            if w is None or w.ndim != 4:
                unsupported(node, "a non-2-D or non-constant convolution")
            if at.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
                unsupported(node, f"Conv with auto_pad={at['auto_pad']}", "export with explicit pads")
            pads = list(at.get("pads", [0, 0, 0, 0]))
            if pads[0] != pads[2] or pads[1] != pads[3]:
                unsupported(node, f"asymmetric padding {pads}", "use symmetric padding")
            k = tuple(at.get("kernel_shape", w.shape[2:]))
            stride, dil = tuple(at.get("strides", [1, 1])), tuple(at.get("dilations", [1, 1]))
            groups = int(at.get("group", 1))
            in_shape = g.node(src).shape
            _, (Ho, Wo) = conv2d_index(in_shape, k, stride, (pads[0], pads[1]), dil)
            env[o] = new("conv2d", [src], (w.shape[0], Ho, Wo),
                         dict(weight=w, bias=b, stride=stride, padding=(pads[0], pads[1]), dilation=dil, groups=groups),
                         node, node.name or "conv")
            continue
        if op == "BatchNormalization":
            src = materialise(val(ins[0]), node)
            sc, bb, mean, var = (const_of(i) for i in ins[1:5])
            inv = 1.0 / np.sqrt(var + at.get("epsilon", 1e-5))
            env[o] = new("batchnorm", [src], g.node(src).shape, dict(scale=sc * inv, shift=bb - mean * sc * inv),
                         node, node.name or "bn")
            continue
        if op in ("AveragePool", "GlobalAveragePool"):
            src = materialise(val(ins[0]), node)
            C, H, W = g.node(src).shape
            if op == "GlobalAveragePool":
                k, s, p, cip = (H, W), (H, W), (0, 0), True
            else:
                if at.get("ceil_mode", 0):
                    unsupported(node, "AveragePool with ceil_mode=1")
                k = tuple(at["kernel_shape"])
                s = tuple(at.get("strides", k))
                pads = list(at.get("pads", [0, 0, 0, 0]))
                if pads[0] != pads[2] or pads[1] != pads[3]:
                    unsupported(node, f"asymmetric padding {pads}")
                p, cip = (pads[0], pads[1]), bool(at.get("count_include_pad", 0))
            _, (Ho, Wo) = conv2d_index((1, H, W), k, s, p)
            env[o] = new("avgpool2d", [src], (C, Ho, Wo), dict(kernel=k, stride=s, padding=p, count_include_pad=cip),
                         node, node.name or "avgpool")
            continue
        if op in ("MaxPool", "GlobalMaxPool"):
            unsupported(node, "max pooling", "use average pooling (max is not a polynomial)")
        if op == "Flatten":
            src = materialise(val(ins[0]), node)
            if at.get("axis", 1) != 1:
                unsupported(node, f"Flatten(axis={at.get('axis')})", "flatten from axis 1")
            env[o] = new("flatten", [src], (g.node(src).features,), {}, node, "flatten")
            continue
        if op == "Reshape":
            src = materialise(val(ins[0]), node)
            tgt = const_of(ins[1])
            feats = g.node(src).features
            dims = None if tgt is None or len(tgt) < 2 else [int(d) for d in tgt[1:]]
            if dims is not None and dims.count(-1) == 1:
                known = int(np.prod([d for d in dims if d != -1]))
                dims[dims.index(-1)] = feats // known if known and feats % known == 0 else -1
            if dims is None or any(d <= 0 for d in dims) or int(np.prod(dims)) != feats:
                unsupported(node, f"Reshape to {None if tgt is None else tgt.astype(int).tolist()}",
                            "keep the batch dimension first, with the same number of features per sample")
            env[o] = new("flatten", [src], tuple(dims), {}, node, "flatten" if len(dims) == 1 else "reshape")
            continue
        if op == "Transpose":
            src = materialise(val(ins[0]), node)
            nd = len(g.node(src).shape) + 1
            perm = list(at.get("perm", range(nd)[::-1]))
            if nd < 3 or perm != list(range(nd - 2)) + [nd - 1, nd - 2]:
                unsupported(node, f"Transpose with perm {perm}", "only swapping the last two per-sample dimensions")
            sh = g.node(src).shape
            env[o] = new("transpose", [src], tuple(sh[:-2]) + (sh[-1], sh[-2]), {}, node, "transpose")
            continue
        if op in ("Relu", "Sigmoid", "Tanh", "Gelu"):
            src = materialise(val(ins[0]), node)
            kind = op.lower()
            env[o] = new("act", [src], g.node(src).shape, dict(kind=kind), node, node.name or kind)
            continue
        if op == "Erf":
            p = as_poly(val(ins[0]))
            if p is None or len(p[2]) != 2 or p[2][0] != 0 or abs(p[2][1] - 1 / math.sqrt(2)) > 1e-6:
                unsupported(node, "Erf outside the GELU pattern x * 0.5 * (1 + erf(x / sqrt(2)))")
            env[o] = ("erf1", p[1], 0.0, 1.0)
            continue
        if op in ("Add", "Sub"):
            va, vb = val(ins[0]), val(ins[1])
            sa, sb = scalar(va), scalar(vb)
            sgn = -1.0 if op == "Sub" else 1.0
            if isinstance(va, tuple) and va[0] == "erf1" and sb is not None:
                env[o] = ("erf1", va[1], va[2] + sgn * sb, va[3])
                continue
            if isinstance(vb, tuple) and vb[0] == "erf1" and sa is not None and op == "Add":
                env[o] = ("erf1", vb[1], vb[2] + sa, vb[3])
                continue
            if sa is not None or sb is not None:
                p, c = (as_poly(va), sgn * sb) if sb is not None else (as_poly(vb), sa)
                if p is None:
                    unsupported(node, "Add of a constant to an unsupported expression")
                if sa is not None and op == "Sub":
                    p = ("poly", p[1], -p[2])
                cc = p[2].copy()
                cc[0] += c
                env[o] = ("poly", p[1], cc)
                continue
            if op == "Add" and isinstance(va, tuple) and va[0] == "const":
                va, vb = vb, va                    # the exporter may write the bias first: Add(bias, x W)
            if isinstance(vb, tuple) and vb[0] == "const":
                # bias add after MatMul: fold into the linear node if it is its only use
                prod = g.node(va) if isinstance(va, str) else None
                bias = np.asarray(vb[1]).reshape(-1)
                rows = prod.features if prod is not None else 0
                if prod is not None and prod.op == "linear" and rows % max(bias.size, 1) == 0 \
                        and bias.size in (1, prod.shape[-1], rows):
                    b0 = prod.attrs.get("bias")
                    prod.attrs["bias"] = (0 if b0 is None else b0) + np.tile(bias, rows // bias.size)
                    env[o] = va
                    continue
                unsupported(node, "adding a constant tensor", "fold it into the previous layer's bias")
            pa, pb = as_poly(va), as_poly(vb)
            if pa is not None and pb is not None and pa[1] == pb[1]:
                n = max(len(pa[2]), len(pb[2]))
                c = np.zeros(n)
                c[: len(pa[2])] += pa[2]
                c[: len(pb[2])] += sgn * pb[2]
                env[o] = ("poly", pa[1], c)
                continue
            a_ir, b_ir = materialise(va, node), materialise(vb, node)
            if op == "Sub":
                b_ir = new("act", [b_ir], g.node(b_ir).shape, dict(kind="poly", coeffs=np.array([0.0, -1.0])),
                           node, "neg", check=False)
            if g.node(a_ir).shape != g.node(b_ir).shape:
                unsupported(node, "Add with broadcasting", "add tensors of equal shape")
            env[o] = new("add", [a_ir, b_ir], g.node(a_ir).shape, {}, node, "add")
            continue
        if op in ("Mul", "Div"):
            va, vb = val(ins[0]), val(ins[1])
            sa, sb = scalar(va), scalar(vb)
            if op == "Div":
                if sb is None:
                    unsupported(node, "division by an encrypted or non-scalar tensor", "divide by a constant")
                sb, sa = 1.0 / sb, None
            if sa is not None or sb is not None:
                v, c = (vb, sa) if sa is not None else (va, sb)
                if isinstance(v, tuple) and v[0] == "gelu":
                    env[o] = ("gelu", v[1], v[2] * c)
                elif isinstance(v, tuple) and v[0] == "erf1":
                    env[o] = ("erf1", v[1], v[2] * c, v[3] * c)
                else:
                    p = as_poly(v)
                    if p is None:
                        unsupported(node, "Mul of a constant with an unsupported expression")
                    env[o] = ("poly", p[1], p[2] * c)
                continue
            for u, w in ((va, vb), (vb, va)):   # x * (a + a erf(x/sqrt2)) = 2a gelu(x)
                if isinstance(w, tuple) and w[0] == "erf1" and as_poly(u) is not None and as_poly(u)[1] == w[1] \
                        and np.allclose(as_poly(u)[2], [0, 1]) and abs(w[2] - w[3]) < 1e-12:
                    env[o] = ("gelu", w[1], 2 * w[2])
                    break
                if isinstance(u, str) and isinstance(w, str):
                    nw = g.node(w)
                    if nw.op == "act" and nw.attrs.get("kind") == "sigmoid" and nw.inputs[0] == u:
                        env[o] = new("act", [u], g.node(u).shape, dict(kind="silu"), node, "silu")
                        break
            else:
                pa, pb = as_poly(va), as_poly(vb)
                if pa is None or pb is None:
                    unsupported(node, "Mul of these operands",
                                "polynomials of tensors, x*Sigmoid(x), the GELU pattern, products of tensors")
                if pa[1] != pb[1]:                 # two different encrypted tensors: a ct x ct product
                    a_ir, b_ir = materialise(va, node), materialise(vb, node)
                    if g.node(a_ir).shape != g.node(b_ir).shape:
                        unsupported(node, f"Mul of encrypted tensors of shapes {g.node(a_ir).shape} and "
                                    f"{g.node(b_ir).shape} (broadcasting)", "multiply tensors of equal shape")
                    env[o] = new("mul", [a_ir, b_ir], g.node(a_ir).shape, {}, node, node.name or "mul")
                else:
                    env[o] = ("poly", pa[1], np.polynomial.polynomial.polymul(pa[2], pb[2]))
            continue
        if op == "Pow":
            e = scalar(val(ins[1]))
            if e is None or not float(e).is_integer() or e < 1:
                unsupported(node, f"Pow with exponent {e}", "only positive integer exponents")
            p = as_poly(val(ins[0]))
            c = np.array([1.0])
            for _ in range(int(e)):
                c = np.polynomial.polynomial.polymul(c, p[2])
            env[o] = ("poly", p[1], c)
            continue
        if op == "Neg":
            p = as_poly(val(ins[0]))
            env[o] = ("poly", p[1], -p[2])
            continue
        unsupported(node, f"ONNX op {op}")
    if len(G.output) != 1:
        raise UnsupportedError(f"the ONNX graph has {len(G.output)} outputs; hemlp models return one tensor")
    out_name = G.output[0].name
    src = materialise(val(out_name), None) if out_name in env else None
    if src is None:
        raise UnsupportedError(f"the ONNX output {out_name!r} is not computed from the input")
    g.add(Node("output", "output", [src], g.node(src).shape, {}, "output"))
    g.dead_code()
    return g
