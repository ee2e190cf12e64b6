"""torch.nn.Module -> IR with torch.fx (symbolic tracing + shape propagation on the example input).

Supported: nn.Linear, nn.Conv2d (any stride/padding/dilation; groups expanded to a dense weight),
nn.BatchNorm1d/2d (eval statistics), nn.AvgPool2d, nn.AdaptiveAvgPool2d (divisible sizes),
nn.Flatten / torch.flatten / view / reshape to (batch, -1), nn.Dropout / nn.Identity,
nn.ReLU / SiLU / GELU / Sigmoid / Tanh (and their functional forms), x*x, x**2, torch.square,
polynomial expressions in one tensor (c*x, x+c, x*x + ...), hemlp.compiler.Polynomial, residual
x + y. Anything else raises UnsupportedError naming the node and the alternative.
"""
from __future__ import annotations

import operator
from numbers import Number

import numpy as np

from hemlp.compiler.ir import Graph, Node
from hemlp.errors import ShapeError, UnsupportedError


def _np(t):
    return None if t is None else t.detach().cpu().double().numpy().copy()


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (int(v), int(v))


_HINT = ("supported layers: Linear, Conv2d, BatchNorm1d/2d, AvgPool2d, AdaptiveAvgPool2d, Flatten, Dropout, "
         "Identity, ReLU/SiLU/GELU/Sigmoid/Tanh (approximated), x*x / x**2 / polynomials "
         "(hemlp.compiler.Polynomial), residual additions")


def softmax_hint(final: bool) -> str:
    """What to do with a softmax, which is not a polynomial (ONNX and torch frontends)."""
    if final:
        return ("hemlp returns the logits: drop the final softmax from the model and apply it to the decrypted "
                "output on the client (e.g. scipy.special.softmax(y, axis=1) or torch.softmax(torch.from_numpy(y), 1));"
                " the argmax does not change")
    return ("a softmax inside the model (e.g. attention) is not a polynomial and is not supported; replace it with "
            "a polynomial normalisation, or end the model before it and apply it after decryption")


class _Builder:
    def __init__(self, model_name):
        self.g = Graph(name=model_name)
        self.env = {}      # fx node name -> IR node name, or ("const", value) / ("poly", src, coeffs)

    def unsupported(self, node, what, instead=""):
        raise UnsupportedError(f"{what} at fx node {node.name!r} ({node.format_node()}) is not supported by hemlp"
                               + (f"; {instead}" if instead else f"; {_HINT}"))

    def shape_of(self, node):
        tm = node.meta.get("tensor_meta")
        if tm is None or not hasattr(tm, "shape"):
            return None
        return tuple(int(d) for d in tm.shape[1:])

    def new(self, op, inputs, shape, attrs, source, base):
        name = self.g.unique(base)
        self.g.add(Node(name, op, list(inputs), tuple(shape), attrs, source))
        return name

    # ---- polynomial expressions in one tensor: ("poly", src_ir_name, coeffs)
    def as_poly(self, v):
        if isinstance(v, tuple) and v[0] == "poly":
            return v
        if isinstance(v, str):
            return ("poly", v, np.array([0.0, 1.0]))
        return None

    def materialise(self, v, node=None):
        """An IR node name for a value (emits a poly act node for pending polynomial expressions)."""
        if isinstance(v, str):
            return v
        if isinstance(v, tuple) and v[0] == "poly":
            _, src, c = v
            c = np.trim_zeros(np.asarray(c, dtype=np.float64), "b")
            if len(c) == 2 and c[0] == 0 and c[1] == 1:
                return src
            shape = self.g.node(src).shape
            kind = "square" if (len(c) == 3 and c[0] == 0 and c[1] == 0 and c[2] == 1) else "poly"
            where = f"polynomial expression (used by {node.name})" if node is not None else "polynomial expression"
            return self.new("act", [src], shape, dict(kind=kind, coeffs=c), where, kind)
        raise UnsupportedError(f"a constant tensor/scalar where an encrypted tensor is needed"
                               f"{' at fx node ' + repr(node.name) if node is not None else ''}")


def _is_const(v):
    return isinstance(v, (Number, np.ndarray)) and not isinstance(v, bool) or (isinstance(v, tuple) and v[0] == "const")


def _const(v):
    return v[1] if isinstance(v, tuple) else v


def from_torch(model, example_input) -> Graph:
    import torch
    import torch.fx as fx
    from torch.fx.passes.shape_prop import ShapeProp

    from hemlp.compiler.activations import ActPoly  # noqa: F401  (Polynomial module lives in __init__)

    nn = torch.nn
    F = torch.nn.functional
    model = model.eval()
    x = torch.as_tensor(np.asarray(example_input) if not isinstance(example_input, torch.Tensor) else example_input)
    x = x.to(torch.float32)
    from hemlp.compiler import Polynomial

    class _Tracer(fx.Tracer):
        def is_leaf_module(self, m, qualname):
            if isinstance(m, Polynomial):
                return True
            return super().is_leaf_module(m, qualname)

    try:
        graph = _Tracer().trace(model)
    except Exception as exc:  # data-dependent control flow, unsupported Python
        raise UnsupportedError(f"torch.fx could not trace {type(model).__name__}: {exc}. hemlp needs a model "
                               "without data-dependent control flow; export it to ONNX or simplify forward()") from None
    gm = fx.GraphModule(model, graph)
    with torch.no_grad():
        try:
            ShapeProp(gm).propagate(x)
        except Exception as exc:
            raise ShapeError(f"the example input of shape {tuple(x.shape)} does not run through the model: {exc}") from None
    b = _Builder(type(model).__name__)
    mods = dict(gm.named_modules())
    act_modules = {nn.ReLU: "relu", nn.SiLU: "silu", nn.GELU: "gelu", nn.Sigmoid: "sigmoid", nn.Tanh: "tanh"}
    act_funcs = {F.relu: "relu", torch.relu: "relu", F.silu: "silu", F.gelu: "gelu", torch.sigmoid: "sigmoid",
                 F.sigmoid if hasattr(F, "sigmoid") else torch.sigmoid: "sigmoid", torch.tanh: "tanh",
                 F.tanh if hasattr(F, "tanh") else torch.tanh: "tanh"}
    act_methods = {"relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh"}
    softmax_funcs = (torch.softmax, F.softmax, torch.log_softmax, F.log_softmax)

    def is_final(node) -> bool:
        """The node's value is the model's output (only the output node uses it)."""
        return bool(node.users) and all(u.op == "output" for u in node.users)
    env = b.env
    placeholder_seen = False

    def val(a):
        if isinstance(a, fx.Node):
            return env[a.name]
        if isinstance(a, (int, float)):
            return ("const", float(a))
        return a

    def ir(a, node):
        return b.materialise(val(a), node)

    def act(node, kind, arg):
        src = ir(arg, node)
        env[node.name] = b.new("act", [src], b.g.node(src).shape, dict(kind=kind), f"{node.name}: {kind}", node.name)

    for node in gm.graph.nodes:
        shape = b.shape_of(node)
        if node.op == "placeholder":
            if placeholder_seen:
                b.unsupported(node, "a second model input", "hemlp models take one encrypted input tensor")
            placeholder_seen = True
            env[node.name] = b.new("input", [], tuple(x.shape[1:]), {}, "input", node.name)
            continue
        if node.op == "output":
            out = node.args[0]
            if isinstance(out, (tuple, list)):
                if len(out) != 1:
                    b.unsupported(node, "several model outputs", "return one tensor")
                out = out[0]
            src = ir(out, node)
            b.new("output", [src], b.g.node(src).shape, {}, "output", "output")
            continue
        if node.op == "get_attr":
            b.unsupported(node, f"a parameter/buffer used as a tensor ({node.target})",
                          "use layers (nn.Linear / nn.Conv2d) for weights; elementwise products with a "
                          "plaintext tensor are not supported yet")
        if node.op == "call_module":
            m = mods[node.target]
            where = f"{node.target}: {type(m).__name__}"
            nm = node.target.replace(".", "_")
            if nm.split("_")[-1].isdigit():
                nm = f"{type(m).__name__.lower()}_{nm}"
            if isinstance(m, nn.Linear):
                src = ir(node.args[0], node)
                in_shape = b.g.node(src).shape
                W, bias = _np(m.weight), _np(m.bias)
                if len(in_shape) > 1:
                    rest = int(np.prod(in_shape[:-1]))
                    if rest * W.size > 5e7:
                        b.unsupported(node, "nn.Linear on a multi-dimensional input", "flatten first")
                    W = np.kron(np.eye(rest), W)
                    bias = None if bias is None else np.tile(bias, rest)
                env[node.name] = b.new("linear", [src], shape, dict(weight=W, bias=bias), where, nm)
            elif isinstance(m, nn.Conv2d):
                src = ir(node.args[0], node)
                if m.padding_mode != "zeros":
                    b.unsupported(node, f"Conv2d with padding_mode={m.padding_mode!r}", "use padding_mode='zeros'")
                if isinstance(m.padding, str):
                    b.unsupported(node, f"Conv2d with padding={m.padding!r}", "give the padding as integers")
                if len(b.g.node(src).shape) != 3:
                    b.unsupported(node, "Conv2d on a non-(C, H, W) input")
                attrs = dict(weight=_np(m.weight), bias=_np(m.bias), stride=_pair(m.stride),
                             padding=_pair(m.padding), dilation=_pair(m.dilation), groups=int(m.groups))
                env[node.name] = b.new("conv2d", [src], shape, attrs, where, nm)
            elif isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
                src = ir(node.args[0], node)
                if m.running_mean is None:
                    b.unsupported(node, "BatchNorm without running statistics", "use track_running_stats=True")
                inv = 1.0 / np.sqrt(_np(m.running_var) + m.eps)
                w = _np(m.weight) if m.weight is not None else np.ones_like(inv)
                bb = _np(m.bias) if m.bias is not None else np.zeros_like(inv)
                scale = w * inv
                shift = bb - _np(m.running_mean) * scale
                env[node.name] = b.new("batchnorm", [src], shape, dict(scale=scale, shift=shift), where, nm)
            elif isinstance(m, (nn.Dropout, nn.Identity, nn.Dropout2d)):
                env[node.name] = val(node.args[0])
            elif isinstance(m, (nn.MaxPool2d, nn.AdaptiveMaxPool2d, nn.MaxPool1d)):
                b.unsupported(node, f"max pooling ({type(m).__name__})",
                              "use nn.AvgPool2d: max is not a polynomial and has no encrypted evaluation here")
            elif isinstance(m, nn.Flatten):
                src = ir(node.args[0], node)
                if m.start_dim not in (1,) or m.end_dim != -1:
                    b.unsupported(node, f"Flatten(start_dim={m.start_dim}, end_dim={m.end_dim})",
                                  "flatten everything but the batch dimension (start_dim=1)")
                env[node.name] = b.new("flatten", [src], shape, {}, where, nm)
            elif isinstance(m, nn.AvgPool2d):
                src = ir(node.args[0], node)
                if m.ceil_mode or m.divisor_override:
                    b.unsupported(node, "AvgPool2d with ceil_mode/divisor_override", "use the defaults")
                k = _pair(m.kernel_size)
                attrs = dict(kernel=k, stride=_pair(m.stride if m.stride is not None else k),
                             padding=_pair(m.padding), count_include_pad=bool(m.count_include_pad))
                env[node.name] = b.new("avgpool2d", [src], shape, attrs, where, nm)
            elif isinstance(m, nn.AdaptiveAvgPool2d):
                src = ir(node.args[0], node)
                C, H, W = b.g.node(src).shape
                Ho, Wo = shape[1], shape[2]
                if H % Ho or W % Wo:
                    b.unsupported(node, f"AdaptiveAvgPool2d from {H}x{W} to {Ho}x{Wo} (not divisible)",
                                  "use AvgPool2d or sizes that divide")
                k = (H // Ho, W // Wo)
                env[node.name] = b.new("avgpool2d", [src], shape, dict(kernel=k, stride=k, padding=(0, 0),
                                                                       count_include_pad=True), where, nm)
            elif type(m) in act_modules:
                kind = act_modules[type(m)]
                if kind == "gelu" and getattr(m, "approximate", "none") != "none":
                    pass  # tanh-GELU: approximated by the same polynomial fit of exact GELU (difference < 1e-3)
                act(node, kind, node.args[0])
            elif isinstance(m, Polynomial):
                p = b.as_poly(val(node.args[0]))
                src = b.materialise(p, node) if not isinstance(val(node.args[0]), str) else val(node.args[0])
                env[node.name] = b.new("act", [src], b.g.node(src).shape,
                                       dict(kind="poly", coeffs=np.asarray(m.coeffs, dtype=np.float64)),
                                       where, nm)
            elif isinstance(m, (nn.Softmax, nn.LogSoftmax)):
                b.unsupported(node, f"{type(m).__name__} (module {node.target!r})", softmax_hint(is_final(node)))
            else:
                b.unsupported(node, f"module {node.target!r} of type {type(m).__name__}")
            continue
        # call_function / call_method
        tgt = node.target
        name = tgt if isinstance(tgt, str) else getattr(tgt, "__name__", str(tgt))
        args = node.args
        if tgt in act_funcs or (node.op == "call_method" and tgt in act_methods):
            kind = act_funcs.get(tgt) if tgt in act_funcs else act_methods[tgt]
            act(node, kind, args[0])
        elif tgt in (torch.flatten,) or (node.op == "call_method" and tgt == "flatten"):
            start = args[1] if len(args) > 1 else node.kwargs.get("start_dim", 0)
            end = args[2] if len(args) > 2 else node.kwargs.get("end_dim", -1)
            if start != 1 or end != -1:
                b.unsupported(node, f"flatten(start_dim={start}, end_dim={end})", "use torch.flatten(x, 1)")
            env[node.name] = b.new("flatten", [ir(args[0], node)], shape, {}, f"{node.name}: flatten", node.name)
        elif (node.op == "call_method" and tgt in ("view", "reshape")) or tgt in (torch.reshape,):
            src = ir(args[0], node)
            if shape is None or int(np.prod(shape)) != b.g.node(src).features:
                b.unsupported(node, f"{tgt} to per-sample shape {shape}", "keep the batch dimension first: "
                              "x.view(batch, ...) with the same number of features per sample")
            env[node.name] = b.new("flatten", [src], shape, {}, f"{node.name}: {getattr(tgt, '__name__', tgt)}",
                                   node.name)
        elif (node.op == "call_method" and tgt in ("transpose", "t")) or tgt in (torch.transpose, torch.t):
            src = ir(args[0], node)
            nd = len(b.g.node(src).shape) + 1
            dims = [d % nd for d in args[1:3]] if len(args) >= 3 else [nd - 2, nd - 1]
            if sorted(dims) != [nd - 2, nd - 1] or nd < 3:
                b.unsupported(node, f"transpose of dimensions {args[1:3]}", "only the last two per-sample "
                              "dimensions can be swapped (x.transpose(-2, -1))")
            env[node.name] = b.new("transpose", [src], shape, {}, f"{node.name}: transpose", node.name)
        elif node.op == "call_method" and tgt in ("size", "dim"):
            env[node.name] = ("meta", None)
        elif tgt is getattr and len(args) == 2 and args[1] in ("shape", "ndim"):   # x.shape, as x.size()
            env[node.name] = ("meta", None)
        elif tgt is operator.getitem and isinstance(val(args[0]), tuple) and val(args[0])[0] == "meta":
            env[node.name] = ("meta", None)                                       # x.shape[0], as x.size(0)
        elif tgt in softmax_funcs or (node.op == "call_method" and tgt in ("softmax", "log_softmax")):
            b.unsupported(node, f"{name}", softmax_hint(is_final(node)))
        elif tgt in (F.dropout,) or (node.op == "call_method" and tgt in ("contiguous", "clone", "float")):
            env[node.name] = val(args[0])
        elif tgt in (F.avg_pool2d,):
            k = _pair(args[1] if len(args) > 1 else node.kwargs["kernel_size"])
            s = args[2] if len(args) > 2 else node.kwargs.get("stride")
            p = args[3] if len(args) > 3 else node.kwargs.get("padding", 0)
            env[node.name] = b.new("avgpool2d", [ir(args[0], node)], shape,
                                   dict(kernel=k, stride=_pair(s) if s else k, padding=_pair(p),
                                        count_include_pad=node.kwargs.get("count_include_pad", True)),
                                   f"{node.name}: avg_pool2d", node.name)
        elif tgt in (operator.add, torch.add, operator.sub, torch.sub) or (
                node.op == "call_method" and tgt in ("add", "sub")):
            sub = tgt in (operator.sub, torch.sub, "sub")
            va, vb = val(args[0]), val(args[1])
            if _is_const(va) and _is_const(vb):
                env[node.name] = ("const", _const(va) - _const(vb) if sub else _const(va) + _const(vb))
                continue
            pa, pb = b.as_poly(va), b.as_poly(vb)
            sgn = -1.0 if sub else 1.0
            if _is_const(vb) or _is_const(va):
                p, c = (pa, _const(vb) * sgn) if _is_const(vb) else (b.as_poly(vb), _const(va))
                if not isinstance(c, float):
                    b.unsupported(node, "adding a constant tensor", "fold it into the previous layer's bias")
                if _is_const(va) and sub:
                    p = ("poly", p[1], -p[2])
                coeffs = p[2].copy()
                coeffs[0] += c
                env[node.name] = ("poly", p[1], coeffs)
            elif pa[1] == pb[1]:
                n = max(len(pa[2]), len(pb[2]))
                c = np.zeros(n)
                c[: len(pa[2])] += pa[2]
                c[: len(pb[2])] += sgn * pb[2]
                env[node.name] = ("poly", pa[1], c)
            else:
                a_ir, b_ir = b.materialise(va, node), b.materialise(vb, node)
                if sub:
                    b_ir = b.new("act", [b_ir], b.g.node(b_ir).shape, dict(kind="poly", coeffs=np.array([0.0, -1.0])),
                                 f"{node.name}: negate", node.name + "_neg")
                if b.g.node(a_ir).shape != b.g.node(b_ir).shape:
                    b.unsupported(node, f"adding tensors of shapes {b.g.node(a_ir).shape} and "
                                  f"{b.g.node(b_ir).shape} (broadcasting)", "add tensors of equal shape")
                env[node.name] = b.new("add", [a_ir, b_ir], shape, {}, f"{node.name}: add", node.name)
        elif tgt in (operator.mul, torch.mul) or (node.op == "call_method" and tgt == "mul"):
            va, vb = val(args[0]), val(args[1])
            if _is_const(va) and _is_const(vb):
                env[node.name] = ("const", _const(va) * _const(vb))
                continue
            if _is_const(va) or _is_const(vb):
                p, c = (b.as_poly(vb), _const(va)) if _is_const(va) else (b.as_poly(va), _const(vb))
                if not isinstance(c, float):
                    b.unsupported(node, "multiplying by a constant tensor", "use a layer with weights")
                env[node.name] = ("poly", p[1], p[2] * c)
                continue
            pa, pb = b.as_poly(va), b.as_poly(vb)
            if pa[1] != pb[1]:                    # two different encrypted tensors: a ct x ct product
                a_ir, b_ir = b.materialise(va, node), b.materialise(vb, node)
                sa, sb = b.g.node(a_ir).shape, b.g.node(b_ir).shape
                if sa != sb:
                    b.unsupported(node, f"the product of encrypted tensors of shapes {sa} and {sb} (broadcasting)",
                                  "multiply tensors of equal shape")
                env[node.name] = b.new("mul", [a_ir, b_ir], sa, {}, f"{node.name}: mul", node.name)
                continue
            env[node.name] = ("poly", pa[1], np.polynomial.polynomial.polymul(pa[2], pb[2]))
        elif tgt in (operator.truediv, torch.div) or (node.op == "call_method" and tgt == "div"):
            vb = val(args[1])
            if not _is_const(vb):
                b.unsupported(node, "division by an encrypted tensor", "only division by a constant")
            p = b.as_poly(val(args[0]))
            env[node.name] = ("poly", p[1], p[2] / _const(vb))
        elif tgt in (operator.neg, torch.neg) or (node.op == "call_method" and tgt == "neg"):
            p = b.as_poly(val(args[0]))
            env[node.name] = ("poly", p[1], -p[2])
        elif tgt in (operator.pow, torch.pow, torch.square) or (node.op == "call_method" and tgt in ("pow", "square")):
            e = 2 if tgt in (torch.square, "square") else args[1]
            if not (isinstance(e, int) or (isinstance(e, float) and float(e).is_integer())) or int(e) < 1:
                b.unsupported(node, f"power x**{e}", "only positive integer powers (x**2, x**3, ...)")
            p = b.as_poly(val(args[0]))
            c = np.array([1.0])
            for _ in range(int(e)):
                c = np.polynomial.polynomial.polymul(c, p[2])
            env[node.name] = ("poly", p[1], c)
        elif tgt in (operator.matmul, torch.matmul, torch.bmm) or (node.op == "call_method"
                                                                   and tgt in ("matmul", "bmm")):
            va, vb = val(args[0]), val(args[1])
            if _is_const(va) or _is_const(vb) or isinstance(va, torch.Tensor) or isinstance(vb, torch.Tensor):
                b.unsupported(node, "a matrix product with a constant operand",
                              "put weights in nn.Linear / nn.Conv2d modules")
            a_ir, b_ir = b.materialise(va, node), b.materialise(vb, node)
            from hemlp.compiler.ir import matmul_index

            sa, sb = b.g.node(a_ir).shape, b.g.node(b_ir).shape
            try:
                matmul_index(sa, sb)
            except ShapeError as exc:
                b.unsupported(node, str(exc))
            env[node.name] = b.new("matmul", [a_ir, b_ir], tuple(sa[:-1]) + (sb[-1],), {},
                                   f"{node.name}: matmul", node.name)
        elif tgt in (F.linear,):
            b.unsupported(node, "functional F.linear", "use nn.Linear modules (weights must be module parameters)")
        elif tgt in (F.conv2d,):
            b.unsupported(node, "functional F.conv2d", "use nn.Conv2d modules")
        elif tgt in (F.max_pool2d,) or "max_pool" in str(name):
            b.unsupported(node, "max pooling", "use nn.AvgPool2d (max is not a polynomial)")
        else:
            b.unsupported(node, f"{node.op} {name!r}")
    g = b.g
    g.dead_code()
    return g
