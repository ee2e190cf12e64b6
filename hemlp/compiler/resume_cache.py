"""Graph outputs under a choice of activation approximations, resumed from values kept for the same choice upstream.

The degree search (hemlp.compiler.calibration) changes a few activations at a time and re-evaluates the graph on
the calibration set, one chunk of samples at a time. Everything before the first changed activation is the same as
in an earlier evaluation, so ``ResumeCache`` keeps, at each *resume point*, the values an evaluation needs to go on
from there: at an activation, every value made before it and read at or after it (in a ResNet block's first
activation: its input and the block's skip value; at the second: the residual sum), and at the output node its
input. An entry is keyed by the chunk, the point and the approximations of the activations before the point (their
ids), so an evaluation that changes activation j starts at j itself. A resumed evaluation computes the same values
as one from the input: the kept arrays are the values it would compute.

Memory: entries are kept within ``max_bytes``. The search ``pin``s the choices the next trials resume from (its
current one, and a trial that met the target and may become it): their entries go last, their first chunk (where
every trial starts) last of all; among the others, the later chunks go before the first one, the least recently used
first.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

from hemlp.compiler.ir import eval_node, last_uses

__all__ = ["CACHE_BYTES", "ResumeCache"]

#: bytes of calibration-set values the search keeps at resume points (a ResNet-20 on 1 000 images: ~1.07 GiB per
#: choice, so the pinned choice and the first chunks of the trials around it fit)
CACHE_BYTES = 3 << 29


class ResumeCache:
    """The graph output of each chunk of X with the approximations currently attached (``attrs['approx']``; none:
    exact), resumed from the last kept point. ``act_eval(node, approx, x)`` evaluates an approximated activation
    (default: approx.apply); ``dtype`` the values' type (the search's float32: calibration.SEARCH_DTYPE)."""

    def __init__(self, g, X, max_bytes: int = CACHE_BYTES, chunk: int | None = None, act_eval=None,
                 dtype=np.float64):
        self.g, self.max_bytes, self.act_eval, self.dtype = g, max_bytes, act_eval, dtype
        n = 0 if X is None else len(X)
        chunk = max(1, n if chunk is None else int(chunk))
        self.chunks = [slice(c, min(c + chunk, n)) for c in range(0, n, chunk)] or [slice(0, 0)]
        # the input in the values' type once (each chunk that starts at the input would convert it again)
        self.X = None if X is None else np.asarray(X).astype(dtype, copy=False)
        self.nodes = list(g.nodes)
        self.acts = [i for i, nd in enumerate(self.nodes) if nd.op == "act"]
        self.last = last_uses(self.nodes)
        out = len(self.nodes) - 1
        self.resume = sorted({i for i in self.acts if i > 0} | ({out} if out > 0 else set()))
        # values live at each resume point: made before it, read at or after it
        self.live = {p: tuple(nd.name for i, nd in enumerate(self.nodes[:p]) if self.last.get(nd.name, -1) >= p)
                     for p in self.resume}
        self.values: OrderedDict = OrderedDict()
        self.bytes = 0
        self.pinned: set = set()

    def keys(self, choice: dict | None = None) -> list:
        """Per node position, the key of the approximations before it: the attached ones, or `choice` (activation
        name -> ActPoly or None for exact) where given."""
        keys, acc = [], []
        for nd in self.nodes:
            keys.append(tuple(acc))
            if nd.op == "act":
                ap = choice.get(nd.name) if choice is not None else nd.attrs.get("approx")
                acc.append((nd.name, None if ap is None else id(ap)))
        return keys

    def pin(self, choice: dict | None = None) -> None:
        """Keep the entries of this choice (default: the attached approximations) over unpinned ones when memory
        runs out: a choice the next evaluations resume from."""
        keys = self.keys(choice)
        self.pinned.update((p, keys[p]) for p in self.resume)

    def unpin(self) -> None:
        """No choice is kept first any more."""
        self.pinned.clear()

    def clear(self) -> None:
        """Drop every entry."""
        self.values.clear()
        self.bytes = 0

    def output(self) -> np.ndarray:
        """The graph output on every sample."""
        return np.concatenate([self.chunk_output(k) for k in range(len(self.chunks))])

    def chunk_output(self, k: int) -> np.ndarray:
        """The graph output on the samples of chunk k."""
        keys = self.keys()
        start, vals = 0, {}
        for p in reversed(self.resume):
            entry = self.values.get((k, p, keys[p]))
            if entry is not None:
                self.values.move_to_end((k, p, keys[p]))
                start, vals = p, dict(zip(self.live[p], entry))
                break
        Xc = None if self.X is None else self.X[self.chunks[k]]
        resume = set(self.resume)
        for i in range(start, len(self.nodes)):
            if i in resume and i > start:
                self._keep((k, i, keys[i]), tuple(vals[name] for name in self.live[i]))
            nd = self.nodes[i]
            ap = nd.attrs.get("approx") if nd.op == "act" else None
            if ap is not None and self.act_eval is not None:
                v = self.act_eval(nd, ap, vals[nd.inputs[0]])
            elif nd.op == "input" and Xc is not None:
                v = Xc                             # what the input node's float64 value becomes in self.dtype
            else:
                v = eval_node(nd, [vals[j] for j in nd.inputs], Xc, exact=False)
            v = vals[nd.name] = v.astype(self.dtype, copy=False)
            for j in set(nd.inputs):
                if self.last[j] == i:
                    del vals[j]
        return v

    def _keep(self, key, entry) -> None:
        size = sum(v.nbytes for v in entry)
        if key in self.values or size > self.max_bytes:
            return
        self.values[key] = entry
        self.bytes += size
        if self.bytes <= self.max_bytes:
            return
        # unpinned first: their later chunks (of use only to a trial that held and is then pinned), then their first
        # chunk (the next round's trials resume from it), least recently used first; then the pinned choices' last
        # chunks (a trial reaches them only when it held on every chunk before), their first chunk last of all
        trials = sorted((q for q in self.values if q[1:] not in self.pinned), key=lambda q: q[0] == 0)
        pinned = sorted((q for q in self.values if q[1:] in self.pinned), key=lambda q: -q[0])
        for old in trials + pinned:
            if self.bytes <= self.max_bytes:
                return
            self._drop(old)

    def _drop(self, key) -> None:
        self.bytes -= sum(v.nbytes for v in self.values.pop(key))
