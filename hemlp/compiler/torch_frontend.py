"""torch.nn.Module -> IR with torch.fx: symbolic tracing, then one run on the example input that records every
node's value, so sizes computed in forward() (``x.size(0)``, ``out.size()[3]``, ``planes // 4``) are concrete.

Supported: nn.Linear / F.linear, nn.Conv2d / F.conv2d (any stride/padding/dilation; groups, depthwise included,
expanded to a dense weight), nn.BatchNorm1d/2d (eval statistics), nn.AvgPool2d / F.avg_pool2d (divisor_override too),
nn.AdaptiveAvgPool2d / F.adaptive_avg_pool2d (divisible sizes), mean / sum over per-sample dimensions, strided slicing
(``x[:, :, ::2, ::2]``), F.pad / nn.ZeroPad2d with zeros, torch.cat, nn.Flatten / torch.flatten / view / reshape with
the batch first, transpose of the last two dimensions, nn.Dropout / nn.Identity, nn.ReLU / SiLU / GELU / Sigmoid / Tanh
/ ReLU6 / Hardtanh and torch.clamp (and their functional forms; approximated by polynomials), x*x, x**2, torch.square,
polynomial expressions in one tensor (c*x, x+c, x*x + ...), hemlp.compiler.Polynomial, residual x + y, products of two
encrypted tensors. Anything else raises UnsupportedError naming the node, its line in forward() and the alternative.
"""
from __future__ import annotations

import operator
import os
import re
from numbers import Number

import numpy as np

from hemlp.compiler.ir import Graph, Node, clip_kind
from hemlp.compiler.movement import MovementLowering
from hemlp.errors import HemlpError, ShapeError, UnsupportedError


def _np(t):
    return None if t is None else t.detach().cpu().double().numpy().copy()


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (int(v), int(v))


_HINT = ("supported layers: Linear, Conv2d (grouped too), BatchNorm1d/2d, AvgPool2d, AdaptiveAvgPool2d, mean/sum over "
         "per-sample dims, slicing, zero padding, torch.cat, Flatten/view/reshape, Dropout, Identity, "
         "ReLU/ReLU6/Hardtanh/clamp/SiLU/GELU/Sigmoid/Tanh (approximated), x*x / x**2 / polynomials "
         "(hemlp.compiler.Polynomial), residual additions")


#: what to do with a normalisation layer that is not a polynomial (ONNX and torch frontends)
NORM_HINT = ("layer / group / instance normalisation divides by a standard deviation computed from the encrypted "
             "input, which is not a polynomial: use BatchNorm (folded into the layer before it) or nn.Identity and "
             "retrain")


def softmax_hint(final: bool) -> str:
    """What to do with a softmax, which is not a polynomial (ONNX and torch frontends)."""
    if final:
        return ("hemlp returns the logits: drop the final softmax from the model and apply it to the decrypted "
                "output on the client (e.g. scipy.special.softmax(y, axis=1) or torch.softmax(torch.from_numpy(y), 1));"
                " the argmax does not change")
    return ("a softmax inside the model (e.g. attention) is not a polynomial and is not supported; replace it with "
            "a polynomial normalisation, or end the model before it and apply it after decryption")


def source_line(node) -> str:
    """'file.py:42: code' of the user's line that made an fx node (its recorded stack trace), or ''."""
    lines = (node.stack_trace or "").strip().splitlines()
    for i in range(len(lines) - 1, -1, -1):
        m = re.match(r'\s*File "(.+)", line (\d+)', lines[i])
        if m and f"{os.sep}torch{os.sep}" not in m.group(1):     # the user's frame, not torch's dispatch
            code = lines[i + 1].strip() if i + 1 < len(lines) else ""
            return f"{os.path.basename(m.group(1))}:{m.group(2)}" + (f": {code}" if code else "")
    return ""


class _Builder:
    def __init__(self, model_name, values):
        self.g = Graph(name=model_name)
        self.env = {}      # fx node name -> IR node name, or ("const", value) / ("poly", src, coeffs)
        self.values = values   # fx node name -> its value on the example input (tensors, sizes, ints)

    def unsupported(self, node, what, instead=""):
        line = source_line(node)
        raise UnsupportedError(f"{what} at fx node {node.name!r} ({node.format_node()})"
                               + (f" [{line}]" if line else "") + " is not supported by hemlp"
                               + (f"; {instead}" if instead else f"; {_HINT}"))

    def shape_of(self, node):
        v = self.values.get(node.name)
        if not hasattr(v, "shape") or not hasattr(v, "dim") or v.dim() < 1:
            return None
        return tuple(int(d) for d in v.shape[1:])

    def moved(self, node):
        """The data-movement lowering for one fx node; the result's shape is checked against torch's."""
        def emit(op, inputs, shp, attrs, base):
            return self.new(op, inputs, shp, attrs, f"{node.name}: {base}", f"{node.name}_{base}")

        def refuse(what, instead):
            self.unsupported(node, what, instead)

        return MovementLowering(self.g, emit, refuse)

    def checked(self, node, out, shape):
        """`out`, after checking that hemlp's per-sample shape for it is the one torch computed."""
        got = self.g.node(out).shape
        if shape is not None and tuple(got) != tuple(shape):
            raise ShapeError(f"fx node {node.name!r}: hemlp derived per-sample shape {tuple(got)}, torch computed "
                             f"{tuple(shape)}")
        return out

    def avgpool_attrs(self, node, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
        """avgpool2d attrs from nn.AvgPool2d's / F.avg_pool2d's arguments (stride None: the kernel)."""
        if ceil_mode:
            self.unsupported(node, "average pooling with ceil_mode=True", "use ceil_mode=False (the default)")
        k = _pair(kernel_size)
        attrs = dict(kernel=k, stride=_pair(stride) if stride else k, padding=_pair(padding),
                     count_include_pad=bool(count_include_pad))
        if divisor_override:
            attrs["divisor_override"] = int(divisor_override)
        return attrs

    def concrete(self, a):
        """A node argument's value on the example input: ints, sizes and tuples of them stay Python values."""
        import torch.fx as fx

        if isinstance(a, fx.Node):
            v = self.values.get(a.name)
            return tuple(int(d) for d in v) if type(v).__name__ == "Size" else v
        if isinstance(a, dict):
            return {k: self.concrete(v) for k, v in a.items()}
        if isinstance(a, (list, tuple)):
            return type(a)(self.concrete(v) for v in a)
        if isinstance(a, slice):
            return slice(self.concrete(a.start), self.concrete(a.stop), self.concrete(a.step))
        return a

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


def _is_meta(v) -> bool:
    """A value forward() computes from shapes (x.size(0), out.size()[3], planes // 4), not a tensor."""
    if isinstance(v, (bool, int, float)) or type(v).__name__ == "Size":
        return True
    return isinstance(v, (tuple, list)) and all(isinstance(e, (bool, int, float)) for e in v)


def _const(v):
    return v[1] if isinstance(v, tuple) else v


#: entries of the block-diagonal weight a Linear / MatMul on each row of a per-sample matrix becomes (rest copies of
#: W on the diagonal of a rest x rest block matrix); above, the frontends refuse it
MAX_TOKEN_WEIGHT_ENTRIES = 50_000_000


def per_token_weight(W: np.ndarray, rest: int) -> np.ndarray | None:
    """W applied to each of `rest` rows of a per-sample matrix, as one block-diagonal weight (None: too large)."""
    if rest * rest * W.size > MAX_TOKEN_WEIGHT_ENTRIES:
        return None
    return np.kron(np.eye(rest), W)


def from_torch(model, example_input) -> Graph:
    import torch
    import torch.fx as fx

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

    class _Recorder(fx.Interpreter):
        """Runs the traced module on the example input and keeps every node's value: tensor shapes, and the
        concrete sizes and ints that forward() computes from them (x.size(0), out.size()[3], planes // 4)."""

        def __init__(self, module):
            super().__init__(module)
            self.values = {}

        def run_node(self, n):
            v = super().run_node(n)
            self.values[n.name] = v
            return v

    tracer = _Tracer()
    tracer.record_stack_traces = True            # error messages name the line of forward() a node comes from
    try:
        graph = tracer.trace(model)
    except Exception as exc:  # data-dependent control flow, unsupported Python
        raise UnsupportedError(f"torch.fx could not trace {type(model).__name__}: {exc}. hemlp needs a model "
                               "without data-dependent control flow; export it to ONNX or simplify forward()") from None
    gm = fx.GraphModule(model, graph)
    recorder = _Recorder(gm)
    with torch.no_grad():
        try:
            recorder.run(x)
        except Exception as exc:
            raise ShapeError(f"the example input of shape {tuple(x.shape)} does not run through the model: {exc}") from None
    b = _Builder(type(model).__name__, recorder.values)
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

    def handle(node):
        nonlocal placeholder_seen
        shape = b.shape_of(node)
        if node.op == "placeholder":
            if placeholder_seen:
                b.unsupported(node, "a second model input", "hemlp models take one encrypted input tensor")
            placeholder_seen = True
            env[node.name] = b.new("input", [], tuple(x.shape[1:]), {}, "input", node.name)
            return
        if node.op == "output":
            out = node.args[0]
            if isinstance(out, (tuple, list)):
                if len(out) != 1:
                    b.unsupported(node, "several model outputs", "return one tensor")
                out = out[0]
            src = ir(out, node)
            b.new("output", [src], b.g.node(src).shape, {}, "output", "output")
            return
        if node.op == "get_attr":          # a parameter / buffer: a constant (F.linear / F.conv2d weights)
            env[node.name] = ("const", _np(b.values[node.name]))
            return
        if node.op in ("call_function", "call_method") and _is_meta(b.values.get(node.name)):
            env[node.name] = ("meta", b.concrete(node))    # sizes and ints computed from shapes: concrete
            return
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
                    W = per_token_weight(W, rest)
                    if W is None:
                        b.unsupported(node, "nn.Linear on a large multi-dimensional input", "flatten first")
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
                attrs = b.avgpool_attrs(node, m.kernel_size, m.stride, m.padding, m.ceil_mode, m.count_include_pad,
                                        m.divisor_override)
                env[node.name] = b.new("avgpool2d", [src], shape, attrs, where, nm)
            elif isinstance(m, nn.AdaptiveAvgPool2d):
                env[node.name] = b.checked(node, b.moved(node).adaptive_pool(ir(node.args[0], node), shape[1:]), shape)
            elif isinstance(m, (nn.ZeroPad2d, nn.ConstantPad2d)):
                value = getattr(m, "value", 0.0)
                env[node.name] = b.checked(node, b.moved(node).pad(ir(node.args[0], node), m.padding, "constant",
                                                                   value), shape)
            elif isinstance(m, nn.Hardtanh):           # ReLU6 is a Hardtanh(0, 6)
                act(node, clip_kind(m.min_val, m.max_val), node.args[0])
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
            elif isinstance(m, (nn.LayerNorm, nn.GroupNorm, nn.InstanceNorm1d, nn.InstanceNorm2d)):
                b.unsupported(node, f"{type(m).__name__} (module {node.target!r})", NORM_HINT)
            elif isinstance(m, (nn.Softmax, nn.LogSoftmax)):
                b.unsupported(node, f"{type(m).__name__} (module {node.target!r})", softmax_hint(is_final(node)))
            else:
                b.unsupported(node, f"module {node.target!r} of type {type(m).__name__}")
            return
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
            if b.concrete(start) % (len(shape) + 1 if shape else 2) == 0:
                b.unsupported(node, f"flatten(start_dim={start}, end_dim={end}) across the batch dimension",
                              "use torch.flatten(x, 1): the batch lives in the ciphertext slots")
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
        elif tgt is operator.getitem:                                           # x[:, :, ::2, ::2]
            env[node.name] = b.checked(node, b.moved(node).getitem(ir(args[0], node), b.concrete(args[1])), shape)
        elif tgt in (F.pad,):
            pad = b.concrete(args[1] if len(args) > 1 else node.kwargs["pad"])
            mode = b.concrete(args[2] if len(args) > 2 else node.kwargs.get("mode", "constant"))
            value = b.concrete(args[3] if len(args) > 3 else node.kwargs.get("value", None))
            env[node.name] = b.checked(node, b.moved(node).pad(ir(args[0], node), pad, mode, value), shape)
        elif tgt in (torch.cat, torch.concat, torch.concatenate):
            tensors = args[0] if args else node.kwargs["tensors"]
            dim = b.concrete(args[1] if len(args) > 1 else node.kwargs.get("dim", 0))
            env[node.name] = b.checked(node, b.moved(node).cat([ir(t, node) for t in tensors], dim), shape)
        elif tgt in (torch.mean, torch.sum) or (node.op == "call_method" and tgt in ("mean", "sum")):
            dim = b.concrete(args[1] if len(args) > 1 else node.kwargs.get("dim", None))
            keep = b.concrete(args[2] if len(args) > 2 else node.kwargs.get("keepdim", False))
            mean = tgt in (torch.mean, "mean")
            env[node.name] = b.checked(node, b.moved(node).reduce(ir(args[0], node), dim, bool(keep), mean), shape)
        elif tgt in (F.adaptive_avg_pool2d,):
            env[node.name] = b.checked(node, b.moved(node).adaptive_pool(ir(args[0], node), shape[1:]), shape)
        elif tgt in (F.hardtanh, F.relu6, torch.clamp, torch.clip) or (
                node.op == "call_method" and tgt in ("clamp", "clip", "clamp_", "hardtanh")):
            if tgt is F.relu6:
                lo, hi = 0.0, 6.0
            elif tgt is F.hardtanh:
                lo = b.concrete(args[1] if len(args) > 1 else node.kwargs.get("min_val", -1.0))
                hi = b.concrete(args[2] if len(args) > 2 else node.kwargs.get("max_val", 1.0))
            else:
                lo = b.concrete(args[1] if len(args) > 1 else node.kwargs.get("min", None))
                hi = b.concrete(args[2] if len(args) > 2 else node.kwargs.get("max", None))
            if not all(v is None or isinstance(v, Number) for v in (lo, hi)) or (lo is None and hi is None):
                b.unsupported(node, "clamp with tensor or missing bounds", "clamp to scalar bounds")
            act(node, clip_kind(lo, hi), args[0])
        elif tgt in softmax_funcs or (node.op == "call_method" and tgt in ("softmax", "log_softmax")):
            b.unsupported(node, f"{name}", softmax_hint(is_final(node)))
        elif tgt in (F.dropout,) or (node.op == "call_method" and tgt in ("contiguous", "clone", "float")):
            env[node.name] = val(args[0])
        elif tgt in (F.avg_pool2d,):
            names = ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override")
            kw = dict(zip(names, b.concrete(tuple(args[1:]))), **b.concrete(dict(node.kwargs)))
            attrs = b.avgpool_attrs(node, kw["kernel_size"], kw.get("stride"), kw.get("padding", 0),
                                    kw.get("ceil_mode", False), kw.get("count_include_pad", True),
                                    kw.get("divisor_override"))
            env[node.name] = b.new("avgpool2d", [ir(args[0], node)], shape, attrs, f"{node.name}: avg_pool2d",
                                   node.name)
        elif tgt in (F.linear,):
            w, bias = val(args[1]), val(args[2]) if len(args) > 2 else val(node.kwargs.get("bias"))
            if not _is_const(w) or not (bias is None or _is_const(bias)):
                b.unsupported(node, "F.linear with an encrypted weight or bias", "weights must be parameters")
            src = ir(args[0], node)
            if len(b.g.node(src).shape) != 1:
                b.unsupported(node, "F.linear on a multi-dimensional input", "flatten first")
            env[node.name] = b.new("linear", [src], shape, dict(weight=np.asarray(_const(w), dtype=np.float64),
                                                                bias=None if bias is None else _const(bias)),
                                   f"{node.name}: linear", node.name)
        elif tgt in (F.conv2d,):
            names = ("weight", "bias", "stride", "padding", "dilation", "groups")
            kw = dict(zip(names, args[1:]), **dict(node.kwargs))
            w, bias = val(kw["weight"]), val(kw.get("bias"))
            if not _is_const(w) or not (bias is None or _is_const(bias)):
                b.unsupported(node, "F.conv2d with an encrypted weight or bias", "weights must be parameters")
            pad = b.concrete(kw.get("padding", 0))
            if isinstance(pad, str):
                b.unsupported(node, f"conv2d with padding={pad!r}", "give the padding as integers")
            attrs = dict(weight=np.asarray(_const(w), dtype=np.float64), bias=None if bias is None else _const(bias),
                         stride=_pair(b.concrete(kw.get("stride", 1))), padding=_pair(pad),
                         dilation=_pair(b.concrete(kw.get("dilation", 1))), groups=int(b.concrete(kw.get("groups", 1))))
            env[node.name] = b.new("conv2d", [ir(args[0], node)], shape, attrs, f"{node.name}: conv2d", node.name)
        elif tgt in (operator.add, torch.add, operator.sub, torch.sub) or (
                node.op == "call_method" and tgt in ("add", "sub")):
            sub = tgt in (operator.sub, torch.sub, "sub")
            va, vb = val(args[0]), val(args[1])
            if _is_const(va) and _is_const(vb):
                env[node.name] = ("const", _const(va) - _const(vb) if sub else _const(va) + _const(vb))
                return
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
                return
            if _is_const(va) or _is_const(vb):
                p, c = (b.as_poly(vb), _const(va)) if _is_const(va) else (b.as_poly(va), _const(vb))
                if not isinstance(c, float):
                    b.unsupported(node, "multiplying by a constant tensor", "use a layer with weights")
                env[node.name] = ("poly", p[1], p[2] * c)
                return
            pa, pb = b.as_poly(va), b.as_poly(vb)
            if pa[1] != pb[1]:                    # two different encrypted tensors: a ct x ct product
                a_ir, b_ir = b.materialise(va, node), b.materialise(vb, node)
                sa, sb = b.g.node(a_ir).shape, b.g.node(b_ir).shape
                if sa != sb:
                    b.unsupported(node, f"the product of encrypted tensors of shapes {sa} and {sb} (broadcasting)",
                                  "multiply tensors of equal shape")
                env[node.name] = b.new("mul", [a_ir, b_ir], sa, {}, f"{node.name}: mul", node.name)
                return
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
        elif tgt in (F.max_pool2d,) or "max_pool" in str(name):
            b.unsupported(node, "max pooling", "use nn.AvgPool2d (max is not a polynomial)")
        else:
            b.unsupported(node, f"{node.op} {name!r}")

    for node in gm.graph.nodes:
        try:
            handle(node)
        except HemlpError:
            raise
        except Exception as exc:          # a raw error from torch or numpy on an idiom the handlers did not expect
            line = source_line(node)
            raise UnsupportedError(f"fx node {node.name!r} ({node.format_node()})" + (f" [{line}]" if line else "")
                                   + f" could not be compiled: {type(exc).__name__}: {exc}; {_HINT}") from None
    g = b.g
    g.dead_code()
    return g
