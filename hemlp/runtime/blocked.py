"""Encrypted execution of a layout (C) program (hemlp.compiler.blocked): encrypted weights and data.

``EncryptedWeights`` is what the client sends once: per linear layer the weight blocks and one bias
block per output row block, all under the client's key (the server never sees the model). The server
runs ``BlockedRunner.run``: per output block C_ij = sum_t CCMM(W_it, X_tj) + bias_i, then the layer's
activations on every block.
"""
from __future__ import annotations

import time

import numpy as np

from hemlp.errors import KeyMismatchError, LevelError, MissingKeyError, SerializationError

__all__ = ["BlockedRunner", "EncryptedWeights", "encrypt_blocks"]


def encrypt_blocks(ctx, blocks, key, slots: int, level: int) -> list:
    """A list (or nested lists) of matrices -> ciphertexts, column-major on `slots` sparse slots."""
    from hemlp.baselines.rectangular import pack

    if isinstance(blocks, np.ndarray):
        return pack(ctx, blocks, key, slots, level=level)
    return [encrypt_blocks(ctx, b, key, slots, level) for b in blocks]


def _flat(nested) -> list:
    if isinstance(nested, list):
        return [c for x in nested for c in _flat(x)]
    return [nested]


class EncryptedWeights:
    """The model's weights and biases encrypted block by block (layout C). Save with .save(path)."""

    def __init__(self, model_id: str, layers: list):
        self.model_id, self.layers = model_id, layers        # [(W blocks [b_m][b_k], bias blocks [b_m])]

    key_id = property(lambda self: self.layers[0][0][0][0]._obj.key_id)

    def __repr__(self):
        n = sum(len(_flat(w)) + len(b) for w, b in self.layers)
        return f"EncryptedWeights(model={self.model_id}, {len(self.layers)} layers, {n} ciphertexts)"

    def to_bytes(self) -> bytes:
        from hemlp.runtime.artifacts import pack

        blobs, shape = [], []
        for W, b in self.layers:
            shape.append([len(W), len(W[0]), len(b)])
            blobs += [c.to_bytes() for c in _flat(W) + list(b)]
        return pack("encrypted_weights", dict(model_id=self.model_id, shape=shape, sizes=[len(x) for x in blobs]),
                    b"".join(blobs))

    def save(self, path) -> None:
        from hemlp.runtime.artifacts import _write

        _write(path, self.to_bytes())

    @classmethod
    def from_bytes(cls, data: bytes, compiled) -> "EncryptedWeights":
        from hemlp.ckks import Ciphertext, from_bytes
        from hemlp.runtime.artifacts import unpack_for

        h, payload = unpack_for(data, "encrypted_weights", compiled, "encrypt them with this model's encrypt_weights")
        sizes, shape = h.get("sizes"), h.get("shape")
        try:
            total = sum(a * b + c for a, b, c in shape)
            ok = len(sizes) == total and sum(sizes) == len(payload) and all(s > 0 for s in sizes)
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise SerializationError("encrypted_weights: the header does not match the payload; the file is corrupted")
        cts, off = [], 0
        for s in sizes:
            c = from_bytes(payload[off: off + s], compiled.context)
            if not isinstance(c, Ciphertext):
                raise SerializationError("encrypted_weights: an element is not a ciphertext")
            cts.append(c)
            off += s
        layers, i = [], 0
        for bm, bk, nb in shape:
            W = [cts[i + r * bk: i + (r + 1) * bk] for r in range(bm)]
            i += bm * bk
            layers.append((W, cts[i: i + nb]))
            i += nb
        return cls(h["model_id"], layers)

    @classmethod
    def load(cls, path, compiled) -> "EncryptedWeights":
        from hemlp.runtime.artifacts import _read

        return cls.from_bytes(_read(path, "encrypted_weights"), compiled)


class BlockedRunner:
    def __init__(self, ctx, prog):
        self.ctx, self.prog = ctx, prog
        self._tr = {}
        self._pe = {}

    def transforms(self, i: int):
        if i not in self._tr:
            self._tr[i] = self.prog.transforms(i)
        return self._tr[i]

    def _acts(self, s, blocks, relin_key):
        from hemlp.runtime.local import ElementwiseOp, cached_elementwise

        fn = cached_elementwise(self._pe, self.ctx, ElementwiseOp.from_step(s), relin_key)
        return [[fn(0, c) for c in row] for row in blocks]

    def run(self, x_blocks, weights: EncryptedWeights, relin_key, galois_keys, timings: dict | None = None):
        """x_blocks [b_k][b_n] ciphertexts of the input -> output blocks [b_m][b_n]."""
        from hemlp.baselines.rectangular import matmul

        ctx = self.ctx
        if relin_key is None or galois_keys is None:
            raise MissingKeyError("layout (C) needs the relinearisation and rotation keys of keygen()'s eval_keys")
        if len(weights.layers) != len(self.prog.layers):
            raise KeyMismatchError("the encrypted weights do not have this model's layers")
        Y = x_blocks
        for i, (L, (Wb, bb)) in enumerate(zip(self.prog.layers, weights.layers)):
            t0 = time.perf_counter()
            lay = L.layout
            if (len(Wb), len(Wb[0]), len(bb)) != (lay.b_m, lay.b_k, lay.b_m):
                raise KeyMismatchError(f"layer {L.step.out}: the encrypted weights have another block layout")
            lv = L.step.level_in
            if Y[0][0].level != lv:
                if Y[0][0].level < lv:
                    raise LevelError(f"layer {L.step.out}: input at level {Y[0][0].level}, planned {lv}")
                Y = [[ctx.drop_level(c, lv) for c in row] for row in Y]
            tr = self.transforms(i)
            m, k, n = L.dims
            out = []
            for a in range(lay.b_m):
                row = []
                for j in range(lay.b_n):
                    acc = None
                    for t in range(lay.b_k):
                        p = matmul(ctx, Wb[a][t], Y[t][j], (m, k, n), galois_keys, relin_key, transforms=tr)
                        acc = p if acc is None else ctx.add(acc, p)
                    bias = bb[a]
                    if bias.level != acc.level + 1:
                        raise LevelError(f"layer {L.step.out}: bias block at level {bias.level}, expected "
                                         f"{acc.level + 1}")
                    row.append(ctx.add(acc, ctx.set_scale(bias, acc.scale)))
                out.append(row)
            Y = out
            if timings is not None:
                timings[L.step.out] = time.perf_counter() - t0
            for s in L.acts:
                t0 = time.perf_counter()
                Y = self._acts(s, Y, relin_key)
                if timings is not None:
                    timings[s.out] = time.perf_counter() - t0
        return Y
