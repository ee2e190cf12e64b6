"""Data movement as convolutions: strided slicing, zero padding and channel concatenation of (C, H, W) tensors.

Each is an exact linear map whose weight is a 0/1 selection, written as a ``conv2d`` node so that every layout runs it
with the machinery it already has (im2col gathers, packed diagonals) and the folding pass can merge it into a
neighbouring convolution (``fold.merge_channel_map``):

* ``x[:, c0:c1:cs, h0:h1:hs, w0:w1:ws]`` picks positions a, a + s, ..., a + (n - 1) s on each spatial axis: a
  convolution with stride s whose weight is 1 at offset a, and kernel a + 1 when the slice runs to the end of the
  axis, else size - (n - 1) s (the last window ends at the last position). The channel slice is the weight's channel
  selection. Option-A ResNet shortcuts (``x[:, :, ::2, ::2]``) become a 1x1 stride-2 kernel.
* ``F.pad(x, (left, right, top, bottom, front, back))`` with zeros: padding P = max(before, after) per spatial axis,
  kernel |before - after| + 1 with the weight at offset P - before; the channel pad embeds the channels.
* ``torch.cat([a, b, ...], dim=1)``: each input embedded at its channel offset (a 1x1 convolution), then added.
"""
from __future__ import annotations

import numpy as np

from hemlp.errors import ShapeError

__all__ = ["slice_conv", "pad_conv", "channel_embed"]


def _selection(weight, stride, padding, out_shape) -> tuple[dict, tuple]:
    """(conv2d attrs, output shape) of a 0/1 selection convolution (no bias, no dilation, one group)."""
    return (dict(weight=weight, bias=None, stride=stride, padding=padding, dilation=(1, 1), groups=1),
            tuple(out_shape))


def _axis(size: int, sl: slice) -> tuple[int, int, int]:
    """(first index a, step s, count n) of a Python slice over an axis of `size` (positive steps only)."""
    start, stop, step = sl.indices(size)
    if step <= 0:
        raise ShapeError(f"slice {sl} has a non-positive step; hemlp supports positive steps (x[..., ::2])")
    n = len(range(start, stop, step))
    if n == 0:
        raise ShapeError(f"slice {sl} selects nothing on an axis of size {size}")
    return start, step, n


def _kernel(size: int, a: int, s: int, n: int) -> int:
    """The smallest kernel whose stride-s windows give exactly n outputs with offset a inside the first window."""
    k = a + 1                                  # enough when the slice runs to the end of the axis
    return k if (size - k) // s + 1 == n else size - (n - 1) * s


def slice_conv(in_shape, slices) -> tuple[dict, tuple]:
    """x[:, slices[0], slices[1], slices[2]] on a (C, H, W) tensor as one convolution."""
    C, H, W = (int(d) for d in in_shape)
    cs, hs, ws = (tuple(slices) + (slice(None),) * 3)[:3]
    chans = list(range(*cs.indices(C)))
    if not chans:
        raise ShapeError(f"channel slice {cs} selects nothing of {C} channels")
    (ah, sh, nh), (aw, sw, nw) = _axis(H, hs), _axis(W, ws)
    kh, kw = _kernel(H, ah, sh, nh), _kernel(W, aw, sw, nw)
    weight = np.zeros((len(chans), C, kh, kw))
    weight[np.arange(len(chans)), chans, ah, aw] = 1.0
    return _selection(weight, (sh, sw), (0, 0), (len(chans), nh, nw))


def pad_conv(in_shape, pads) -> tuple[dict, tuple]:
    """Zero padding of a (C, H, W) tensor as one convolution; pads in F.pad order: (left, right[, top, bottom[,
    front, back]]), non-negative."""
    C, H, W = (int(d) for d in in_shape)
    p = [int(v) for v in pads] + [0] * (6 - len(pads))
    if len(pads) % 2 or len(pads) > 6:
        raise ShapeError(f"padding {tuple(pads)}: give 2, 4 or 6 values (left, right, top, bottom, front, back)")
    if min(p) < 0:
        raise ShapeError(f"negative padding {tuple(pads)} crops the tensor; use slicing (x[..., a:b]) instead")
    (wl, wr, ht, hb, cf, cb) = p
    Ph, Pw = max(ht, hb), max(wl, wr)
    kh, kw = abs(ht - hb) + 1, abs(wl - wr) + 1
    weight = np.zeros((C + cf + cb, C, kh, kw))
    weight[cf + np.arange(C), np.arange(C), Ph - ht, Pw - wl] = 1.0
    return _selection(weight, (1, 1), (Ph, Pw), (C + cf + cb, H + ht + hb, W + wl + wr))


def channel_embed(in_shape, total: int, offset: int) -> tuple[dict, tuple]:
    """A (C, H, W) tensor placed at channels [offset, offset + C) of a (total, H, W) zero tensor (torch.cat)."""
    C, H, W = (int(d) for d in in_shape)
    if offset < 0 or offset + C > total:
        raise ShapeError(f"channels [{offset}, {offset + C}) do not fit in {total}")
    weight = np.zeros((total, C, 1, 1))
    weight[offset + np.arange(C), np.arange(C), 0, 0] = 1.0
    return _selection(weight, (1, 1), (0, 0), (total, H, W))


#: the largest dense selection matrix (rows x cols) a reduction or slice of a non-image tensor may become
DENSE_LIMIT = 1 << 24


class MovementLowering:
    """Lowers slicing, padding, concatenation and mean/sum reductions of one frontend node to IR nodes.

    ``emit(op, inputs, shape, attrs, base) -> name`` adds an IR node; ``refuse(what, instead)`` raises the frontend's
    UnsupportedError. Dimensions are given as the frontend sees them: dimension 0 is the batch."""

    def __init__(self, graph, emit, refuse):
        self.g, self.emit, self.refuse = graph, emit, refuse

    def _shape(self, name) -> tuple:
        return tuple(self.g.node(name).shape)

    def _reshape(self, src, shape, base="reshape"):
        return src if self._shape(src) == tuple(shape) else self.emit("flatten", [src], tuple(shape), {}, base)

    def _conv(self, src, selection: tuple[dict, tuple], base):
        attrs, shape = selection
        return self.emit("conv2d", [src], shape, attrs, base)

    def _dense(self, src, M, out_shape, base, what):
        if M.size > DENSE_LIMIT:
            self.refuse(f"{what} on a tensor of per-sample shape {self._shape(src)} (a {M.shape[0]}x{M.shape[1]} "
                        "selection)", "apply it to (C, H, W) image tensors, where it is a convolution")
        flat = self._reshape(src, (M.shape[1],), "flatten")
        out = self.emit("linear", [flat], (M.shape[0],), dict(weight=M, bias=None), base)
        return self._reshape(out, out_shape)

    def _dims(self, dims, rank) -> list:
        """Per-sample axes (0-based, batch removed) of frontend dims over a tensor with `rank` per-sample axes."""
        dims = [dims] if isinstance(dims, int) else list(dims)
        out = []
        for d in dims:
            d = int(d) % (rank + 1)
            if d == 0:
                self.refuse("an operation across the batch dimension",
                            "operate on per-sample dimensions (1, 2, ...); the batch lives in the ciphertext slots")
            out.append(d - 1)
        return sorted(set(out))

    # ---- x[index]
    def getitem(self, src, index):
        S = self._shape(src)
        index = index if isinstance(index, tuple) else (index,)
        if any(i is Ellipsis for i in index):
            k = index.index(Ellipsis)
            fill = (slice(None),) * (len(S) + 1 - (len(index) - 1))
            index = index[:k] + fill + index[k + 1:]
        if not index or not all(isinstance(i, slice) for i in index) or len(index) > len(S) + 1:
            self.refuse(f"indexing with {index!r}", "slice with ranges on per-sample dimensions (x[:, :, ::2, ::2]); "
                        "integer indices, masks and index tensors are not supported")
        if index[0] != slice(None):
            self.refuse("slicing the batch dimension", "slice per-sample dimensions; split batches before encrypting")
        per = tuple(index[1:]) + (slice(None),) * (len(S) - len(index) + 1)
        if all(sl.indices(n) == (0, n, 1) for sl, n in zip(per, S)):
            return src
        if len(S) == 3:
            return self._conv(src, slice_conv(S, per), "slice")
        sel = np.arange(int(np.prod(S))).reshape(S)[per]
        M = np.zeros((sel.size, int(np.prod(S))))
        M[np.arange(sel.size), sel.reshape(-1)] = 1.0
        return self._dense(src, M, sel.shape, "slice", "slicing")

    # ---- F.pad
    def pad(self, src, pads, mode="constant", value=0.0):
        if mode != "constant" or (value not in (None, 0, 0.0)):
            self.refuse(f"padding with mode={mode!r}, value={value!r}", "pad with zeros (mode='constant', value=0)")
        S = self._shape(src)
        if len(S) != 3:
            self.refuse(f"padding a tensor of per-sample shape {S}", "pad (C, H, W) image tensors")
        try:
            selection = pad_conv(S, pads)
        except ShapeError as exc:
            self.refuse(str(exc), "pad with non-negative amounts on the last three dimensions")
        return self._conv(src, selection, "pad")

    # ---- torch.cat / Concat
    def cat(self, srcs, dim):
        shapes = [self._shape(s) for s in srcs]
        rank = len(shapes[0])
        (axis,) = self._dims([dim], rank)
        if any(len(s) != rank or s[:axis] + s[axis + 1:] != shapes[0][:axis] + shapes[0][axis + 1:] for s in shapes):
            self.refuse(f"concatenating shapes {shapes} on dimension {dim}", "concatenate tensors that agree "
                        "on every other dimension")
        if len(srcs) == 1:
            return srcs[0]
        total = sum(s[axis] for s in shapes)
        out_shape = shapes[0][:axis] + (total,) + shapes[0][axis + 1:]
        parts, offset = [], 0
        for s, sh in zip(srcs, shapes):
            if rank == 3 and axis == 0:
                parts.append(self._conv(s, channel_embed(sh, total, offset), "cat_part"))
            else:
                n_in, n_out = int(np.prod(sh)), int(np.prod(out_shape))
                pos = np.arange(n_out).reshape(out_shape)
                pos = pos[(slice(None),) * axis + (slice(offset, offset + sh[axis]),)]
                M = np.zeros((n_out, n_in))
                M[pos.reshape(-1), np.arange(n_in)] = 1.0
                parts.append(self._dense(s, M, out_shape, "cat_part", "concatenation"))
            offset += sh[axis]
        out = parts[0]
        for p in parts[1:]:
            out = self.emit("add", [out, p], out_shape, {}, "cat")
        return out

    # ---- mean / sum over per-sample dimensions
    def reduce(self, src, dims, keepdim, mean):
        S = self._shape(src)
        if dims is None or (isinstance(dims, (tuple, list)) and len(dims) == 0):
            self.refuse(f"{'mean' if mean else 'sum'} over every dimension (the batch included)",
                        "reduce per-sample dimensions only, e.g. x.mean((2, 3))")
        axes = self._dims(dims, len(S))
        kept = tuple(1 if i in axes else n for i, n in enumerate(S))
        out_shape = kept if keepdim else tuple(n for i, n in enumerate(S) if i not in axes)
        count = int(np.prod([S[i] for i in axes]))
        attrs = {} if mean else dict(divisor_override=1)
        if axes == list(range(axes[0], len(S))):      # trailing axes: one pooling window per leading position
            lead = int(np.prod(S[:axes[0]]))
            img = S if (len(S) == 3 and axes == [1, 2]) else (lead, 1, count)
            pooled = self.emit("avgpool2d", [self._reshape(src, img)], (img[0], 1, 1),
                               dict(kernel=img[1:], stride=img[1:], padding=(0, 0), count_include_pad=True, **attrs),
                               "mean" if mean else "sum")
            return self._reshape(pooled, out_shape)
        n_in = int(np.prod(S))
        idx = np.arange(n_in).reshape(S)
        out_pos = np.zeros(S, dtype=np.int64) + np.arange(int(np.prod(kept))).reshape(kept)
        M = np.zeros((int(np.prod(kept)), n_in))
        M[out_pos.reshape(-1), idx.reshape(-1)] = 1.0 / count if mean else 1.0
        return self._dense(src, M, out_shape, "mean" if mean else "sum", "a reduction over leading dimensions")

    # ---- adaptive average pooling to (Ho, Wo)
    def adaptive_pool(self, src, out_hw):
        S = self._shape(src)
        if len(S) != 3:
            self.refuse(f"adaptive pooling of a tensor of per-sample shape {S}", "pool (C, H, W) image tensors")
        C, H, W = S
        Ho, Wo = out_hw
        if H % Ho or W % Wo:
            self.refuse(f"adaptive average pooling from {H}x{W} to {Ho}x{Wo} (not divisible)",
                        "use output sizes that divide the input (e.g. 1), or AvgPool2d")
        k = (H // Ho, W // Wo)
        return self.emit("avgpool2d", [src], (C, Ho, Wo), dict(kernel=k, stride=k, padding=(0, 0),
                                                              count_include_pad=True), "avgpool")
