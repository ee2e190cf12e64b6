"""hemlp.compile: a torch.nn.Module or an ONNX file -> a planned chain of encrypted layers.

    compiled = hemlp.compile(model_or_onnx_path, example_input, batch_size=..., **options)
    print(compiled.plan)
    sk, eval_keys = compiled.keygen()                 # client
    ct = compiled.encrypt(x, sk)                      # client: x (batch, *input_shape)
    ct_out = compiled.run(ct, eval_keys)              # server: no secret key
    y = compiled.decrypt(ct_out, sk)                  # client: (batch, *output_shape)
    compiled.simulate(x)                              # the same plan in plaintext
    compiled.save(dir); hemlp.load(dir)

Options: activation_degree (int, or dict by activation kind / node name; default 7),
activation_range ((lo, hi), or dict by node name; default calibrated), activation_margin (0.2),
activation_method ("chebyshev" | "lsq" | "minimax"), weight_bits (20), allow_insecure (False),
preset (None: smallest fitting), workers (4: processor count of the reported FHE4DMM grids),
layout ("auto" | "batch" | "packed" | "mlwe"; default "auto"), encrypted_weights (False), dft_depth (None:
the planner's choice; layout (A′): levels of each CoeffToSlot / SlotToCoeff).

Layouts: "batch" = (A), one feature per ciphertext and the batch along the slots (every linear layer
a PCMM-as-GEMM, no rotations: best for large batches); "packed" = (P), the features of a few samples
packed in the slots of one ciphertext (linear layers as BSGS diagonal products with rotations: best
for one or a few samples, hemlp.compiler.packed); "mlwe" = (A′), the batch along the coefficients with
k = N/B' features interleaved per ciphertext, every linear layer an MLWE PCMM and every activation between
CoeffToSlot and SlotToCoeff (small batches, √N <= B' < N; hemlp.compiler.mlwe). "auto" compares the
planner's cost estimates of the possible layouts for the given batch_size (hemlp.planner.layouts) and
takes the cheapest one.
encrypted_weights=True hides the model from the server too: layout (C), every linear layer a
ciphertext x ciphertext block matmul planned by FHE4DMM's chain DP (hemlp.compiler.blocked); the
client sends ``compiled.encrypt_weights(sk)`` once and the server calls run(ct, eval_keys, weights=...).
"""
from __future__ import annotations

import hashlib
import json
import math
import warnings
from pathlib import Path

import numpy as np

from hemlp.errors import EncodingError, KeyMismatchError, ParameterError, ShapeError

__all__ = ["compile", "load", "CompiledModel", "Plan"]

_OPTIONS = dict(activation_degree=7, activation_range=None, activation_margin=0.2, activation_method="chebyshev",
                weight_bits=20, allow_insecure=False, preset=None, workers=4, layout="auto",
                encrypted_weights=False, dft_depth=None)
LAYOUTS = ("auto", "batch", "packed", "mlwe")


class Plan:
    """The planned chain: IR with levels/layouts, the lowered steps and the FHE4DMM reports."""

    def __init__(self, graph, steps, info: dict, text: str | None = None):
        self.graph, self.steps, self.info, self._text = graph, steps, info, text

    @property
    def matmuls(self) -> list[dict]:
        """Every PCMM as an (m x k) . (k x n) product: name, shape and its OBL / grid (FHE4DMM planner)."""
        return self.info.get("matmuls", [])

    def obl(self, name: str):
        """FHE4DMM Optimal Block Layout of one matmul for the context's slot count."""
        from hemlp.planner import obl, obl_bruteforce

        mm = next(m for m in self.matmuls if m["name"] == name)
        S_o = self.info["slots"]
        f = obl if math.isqrt(S_o) ** 2 == S_o else obl_bruteforce
        return f(mm["m"], mm["n"], mm["k"], S_o)

    def grid(self, name: str, workers: int):
        """FHE4DMM 4D processor grid for one matmul and a worker count (used by the Ray runtime)."""
        from hemlp.planner import grid_4d

        return grid_4d(self.obl(name), int(workers))

    def __str__(self):
        if self._text is not None:
            return self._text
        from hemlp.compiler.ir import format_graph

        i = self.info
        head = [f"hemlp plan for {i['model']}: preset {i['preset']} (N=2^{int(math.log2(i['N']))}, {i['slots']} slots, "
                f"{i['security']}), depth {i['depth']} of {i['max_level']} levels, input encrypted at L{i['top_level']}",
                ]
        if i.get("layout") == "blocked":
            head += i["blocked"]
            head.append(f"eval keys: relinearisation key + {i['rotation_keys']} rotation keys; the weights are "
                        "encrypted by the client (encrypt_weights)")
        elif i.get("layout") == "mlwe":
            head += i["mlwe"]
            head.append("eval keys: " + ("relinearisation key + " if i["needs_relin"] else "")
                        + f"{i['rotation_keys']} rotation keys + conjugation key + {i['modpack_keys']} ModPack keys")
        elif i.get("layout", "batch") == "packed":
            head += i["packed"]
            head.append("eval keys: " + ("relinearisation key + " if i["needs_relin"] else "")
                        + f"{i['rotation_keys']} rotation keys")
        else:
            head += [f"layout (A): one feature per RLWE ciphertext, batch along the slots; batch {i['batch_size']} -> "
                     f"{i['chunks']} chunk(s) of {i['slots']} slots" + (f", {i['waste']:.1%} of the slots are zero "
                                                                      "padding" if i['waste'] > 0 else ""),
                     f"weights quantised to {i['weight_bits']} bits; eval keys: "
                     + ("relinearisation key only (no rotations)" if i["needs_relin"] else "none (linear model)")]
        if i.get("layout_estimates"):
            head.append("planner estimates (s per batch): " + ", ".join(
                f"{k} {v:.3g}" if isinstance(v, (int, float)) else f"{k} {v}"
                for k, v in i["layout_estimates"].items()) + f" -> layout {i['layout']}")
        text = format_graph(self.graph, "\n".join(head))
        if i.get("layout") == "blocked":
            text = text.replace(" = pcmm_gather(", " = ccmm_blocks(").replace(" = pcmm(", " = ccmm_blocks(")
        if i.get("layout") == "mlwe":
            text = text.replace(" = pcmm(", " = pcmm_mlwe(")
        if i.get("layout", "batch") == "packed":   # the same layers, executed as slot diagonal products
            text = text.replace(" = pcmm_gather(", " = matvec_conv(").replace(" = pcmm(", " = matvec(")
        if self.matmuls and i.get("layout", "batch") == "batch":
            text += f"\n# FHE4DMM (for the distributed runtime, {i['workers']} workers):"
            for m in self.matmuls:
                text += (f"\n#   {m['name']}: ({m['m']}x{m['k']}) . ({m['k']}x{m['n']})  OBL {m['obl']}  "
                         f"grid {m['grid']}")
        self._text = text
        return text

    __repr__ = __str__


class CompiledModel:
    def __init__(self, plan: Plan, steps, preset: str, params, input_shape, output_shape, batch_size: int,
                 top_level: int, options: dict, allow_insecure: bool, graph=None, layout: str = "batch"):
        if layout not in ("batch", "packed", "blocked", "mlwe"):
            raise ParameterError(f"layout must be 'batch', 'packed', 'blocked' or 'mlwe', got {layout!r}")
        self.layout = layout
        self.plan, self.steps, self.preset, self.params = plan, steps, preset, params
        self.input_shape, self.output_shape = tuple(input_shape), tuple(output_shape)
        self.batch_size, self.top_level, self.options = int(batch_size), int(top_level), dict(options)
        self.allow_insecure = bool(allow_insecure)
        self.weight_bits = int(self.options.get("weight_bits", 20))
        self._ctx = None
        self._packed = None
        self._blocked = None
        self._mlwe = None
        self._runner = None
        self.model_id = self._digest()

    def _digest(self) -> str:
        h = hashlib.sha256()
        h.update(json.dumps([self.preset, list(self.input_shape), list(self.output_shape), self.top_level,
                             self.weight_bits] + ([self.layout, self.batch_size] if self.layout != "batch" else []),
                            sort_keys=True).encode())
        h.update(self.params.hash.encode())
        for s in self.steps:
            h.update(json.dumps([s.op, s.out, s.inputs, s.rows, None if s.act is None else s.act.to_json(),
                                 s.level_out], sort_keys=True, default=float).encode())
            for k, v in sorted(s.arrays().items()):
                h.update(k.encode())
                h.update(np.ascontiguousarray(v).tobytes())
        return h.hexdigest()[:16]

    # ---- context / keys
    @property
    def context(self):
        if self._ctx is None:
            from hemlp import ckks

            self._ctx = ckks.Context(self.params, allow_insecure=self.allow_insecure)
        return self._ctx

    @property
    def needs_relin(self) -> bool:
        return self.layout == "blocked" or any(s.op in ("square", "poly", "mul", "matmul") for s in self.steps)

    @property
    def blocked(self):
        """The layout (C) program (hemlp.compiler.blocked.BlockedProgram); None otherwise."""
        if self.layout != "blocked":
            return None
        if self._blocked is None:
            from hemlp.compiler.blocked import BlockedProgram

            self._blocked = BlockedProgram(self.steps, self.params.N // 2, self.batch_size)
        return self._blocked

    def encrypt_weights(self, key):
        """Layout (C), client side: the model's weights and biases encrypted under the client's key
        (EncryptedWeights; save it and send it to the server once)."""
        from hemlp.runtime.blocked import EncryptedWeights, encrypt_blocks

        if self.layout != "blocked":
            raise ParameterError("encrypt_weights is for models compiled with encrypted_weights=True")
        self._check_key(key)
        prog, ctx, out = self.blocked, self.context, []
        for i, L in enumerate(prog.layers):
            W = encrypt_blocks(ctx, prog.weight_blocks(i), key, prog.slots, L.step.level_in)
            b = encrypt_blocks(ctx, prog.bias_blocks(i), key, prog.slots, L.step.level_out + 1)
            out.append((W, b))
        return EncryptedWeights(self.model_id, out)

    def _check_key(self, key):
        from hemlp import ckks

        if not isinstance(key, (ckks.SecretKey, ckks.PublicKey)):
            raise TypeError("encrypt needs the SecretKey from keygen() (or a PublicKey)")
        if key._phash != self.context.hash:
            raise KeyMismatchError("the key belongs to another parameter set than this compiled model; use the "
                                   "keys from this model's keygen()")

    @property
    def mlwe(self):
        """The layout (A′) program (hemlp.compiler.mlwe.MlweProgram); None otherwise."""
        if self.layout != "mlwe":
            return None
        if self._mlwe is None:
            from hemlp.compiler.mlwe import MlweProgram

            self._mlwe = MlweProgram(self.steps, self.params.N, self.batch_size, int(self.options["dft_depth"]),
                                     top=self.top_level)
        return self._mlwe

    def _mlwe_runner(self):
        if self._runner is None:
            from hemlp.runtime.mlwe import MlweRunner

            self._runner = MlweRunner(self.context, self.mlwe, self.weight_bits)
        return self._runner

    @property
    def packed(self):
        """The layout (P) slot program (hemlp.compiler.packed.PackedProgram); None in layout (A)."""
        if self.layout != "packed":
            return None
        if self._packed is None:
            from hemlp.compiler.packed import PackedProgram

            self._packed = PackedProgram(self.steps, self.params.N // 2, self.batch_size)
        return self._packed

    def prepare(self) -> float:
        """Server side, once after loading: encode the layout (P) weight diagonals (seconds spent).
        Layout (A) has nothing to prepare. run() prepares on first use otherwise."""
        if self.layout == "mlwe":
            return self._mlwe_runner().prepare()
        if self.layout != "packed":
            return 0.0
        return self._packed_runner().prepare()

    def _packed_runner(self):
        if self._runner is None:
            from hemlp.runtime.packed import PackedRunner

            self._runner = PackedRunner(self.context, self.packed)
        return self._runner

    @property
    def key_levels(self) -> dict:
        """{"relin": l, "rotation": l}: the highest ciphertext level at which the plan relinearises /
        rotates (None: never). keygen() generates each key for exactly that level, so it holds only
        q_0..q_l and P instead of the whole chain. Layout (A′) adds "conjugation" and "modpack"."""
        relin = rot = None
        if self.layout == "blocked":
            prog = self.blocked
            relin, rot = prog.relin_level(), prog.rotation_level()
        else:
            lv = [s.level_in for s in self.steps if s.op in ("square", "poly", "mul", "matmul")]
            relin = max(lv) if lv else None
            if self.layout == "packed":
                rot = self.packed.rotation_level()
            if self.layout == "mlwe":
                prog = self.mlwe
                return dict(relin=relin if self.needs_relin else None, rotation=prog.rotation_level(),
                            conjugation=prog.conjugation_level(), modpack=prog.modpack_level())
        return dict(relin=relin if self.needs_relin else None, rotation=rot)

    def keygen(self):
        """(secret_key, eval_keys): the secret key stays on the client; eval_keys go to the server.
        Each key is generated for the highest level the plan uses it at (key_levels)."""
        from hemlp.runtime.artifacts import EvalKeys

        ctx = self.context
        sk, _ = ctx.keygen()
        lv = self.key_levels
        rlk = ctx.relin_key(sk, level=lv["relin"]) if self.needs_relin else None
        gk = None
        if self.layout == "packed" and self.packed.rotations():
            gk = ctx.rotation_keys(sk, self.packed.rotations(), level=lv["rotation"])
        if self.layout == "blocked":
            gk = ctx.rotation_keys(sk, self.blocked.rotations(), level=lv["rotation"])
        mp = None
        if self.layout == "mlwe":
            from hemlp import linalg

            prog = self.mlwe
            if prog.has_acts:   # the DFT rotations, plus the conjugation of the real / imaginary split
                gk = ctx.rotation_keys(sk, prog.rotations(), level=lv["rotation"]).merge(
                    ctx.conjugation_key(sk, level=lv["conjugation"]))
            if prog.has_pcmm():
                mp = linalg.modpack_keys(ctx, sk, prog.k, level=lv["modpack"])
        return sk, EvalKeys(self.model_id, rlk, gk, mp)

    def _check_key_levels(self, eval_keys):
        """Keys built for lower levels than the plan uses them at fail here, before any work."""
        from hemlp.errors import LevelError

        lv = self.key_levels
        gk = eval_keys.galois_keys
        checks = [("relinearisation key", eval_keys.relin_key, lv["relin"], "relin_key"),
                  ("rotation keys", gk, lv["rotation"], "rotation_keys"),
                  ("ModPack keys", getattr(eval_keys, "modpack_keys", None), lv.get("modpack"), "linalg.modpack_keys")]
        if self.layout == "mlwe" and gk is not None:   # rotations and the conjugation are used at different levels
            from types import SimpleNamespace

            conj = self.context._e.conjugation_element()
            lvs = gk.levels
            rot = [v for g, v in lvs.items() if g != conj]
            checks[1] = ("rotation keys", SimpleNamespace(level=min(rot) if rot else None), lv["rotation"],
                         "rotation_keys")
            checks.append(("conjugation key", SimpleNamespace(level=lvs.get(conj)), lv["conjugation"],
                           "conjugation_key"))
        for what, key, need, fix in checks:
            if key is not None and need is not None and key.level is not None and key.level < need:
                raise LevelError(f"{what}: generated for levels <= {key.level}, but this model uses them at level "
                                 f"{need}; use keygen()'s eval_keys (or ctx.{fix}(sk, ..., level={need}))")

    # ---- client side
    def _check_x(self, x) -> np.ndarray:
        try:
            import torch

            if isinstance(x, torch.Tensor):
                x = x.detach().cpu().numpy()
        except ImportError:
            pass
        x = np.asarray(x)
        if x.dtype == object or not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
            raise EncodingError(f"inputs must be real numbers (float or int arrays), got dtype {x.dtype}")
        if x.ndim != len(self.input_shape) + 1 or tuple(x.shape[1:]) != self.input_shape:
            raise ShapeError(f"expected inputs of shape (batch, {', '.join(map(str, self.input_shape))}), got "
                             f"{tuple(x.shape)}")
        if x.shape[0] < 1:
            raise ShapeError("the batch is empty")
        x = x.astype(np.float64)
        if not np.all(np.isfinite(x)):
            raise EncodingError("inputs contain NaN or infinity")
        return x

    @property
    def capacity(self) -> int:
        if self.layout == "packed":
            return self.packed.b * self.packed.groups
        if self.layout == "blocked":
            return self.batch_size
        if self.layout == "mlwe":
            return self.mlwe.d3
        slots = self.params.N // 2
        return -(-self.batch_size // slots) * slots

    def encrypt(self, x, key):
        """Encrypt a batch (batch, *input_shape) under the secret key (or a public key)."""
        from hemlp import linalg
        from hemlp.runtime.artifacts import EncryptedBatch

        x = self._check_x(x)
        if x.shape[0] > self.capacity:
            raise ShapeError(f"batch of {x.shape[0]} samples exceeds the planned capacity {self.capacity} "
                             f"(batch_size={self.batch_size}); recompile with a larger batch_size or split the batch")
        self._check_key(key)
        if self.layout == "blocked":
            from hemlp.runtime.blocked import _flat, encrypt_blocks

            prog, ctx = self.blocked, self.context
            bk, bn, rk, cn = prog.in_blocks(0)
            blocks = prog.split(x.reshape(x.shape[0], -1).T, bk, bn, rk, cn)
            cts = _flat(encrypt_blocks(ctx, blocks, key, prog.slots, self.top_level))
            ctm = linalg.CtMatrix(ctx, cts, (len(cts), ctx.slots), 1)
            return EncryptedBatch(self.model_id, ctm, x.shape[0], self.input_shape, "input")
        if self.layout == "mlwe":   # rows (features) interleaved k per coefficient-encoded ciphertext
            from hemlp.runtime.mlwe import input_scale

            prog = self.mlwe
            ctm = linalg.encrypt_matrix(self.context, prog.pack(x), key, format="mlwe", encoding="coeff",
                                        level=self.top_level, scale=input_scale(self.context, prog))
            return EncryptedBatch(self.model_id, ctm, x.shape[0], self.input_shape, "input")
        if self.layout == "packed":
            ctx = self.context
            b = self.packed.b                      # groups of b samples, K ciphertexts each
            cts = [ctx.encrypt(v, key, level=self.top_level)
                   for i in range(0, x.shape[0], b) for v in self.packed.pack(x[i: i + b])]
            ctm = linalg.CtMatrix(ctx, cts, (len(cts), ctx.slots), 1)
            return EncryptedBatch(self.model_id, ctm, x.shape[0], self.input_shape, "input")
        rows = x.reshape(x.shape[0], -1).T
        ctm = linalg.encrypt_matrix(self.context, rows, key, level=self.top_level)
        return EncryptedBatch(self.model_id, ctm, x.shape[0], self.input_shape, "input")

    def decrypt(self, ct, sk) -> np.ndarray:
        from hemlp import linalg
        from hemlp.runtime.artifacts import EncryptedBatch

        if not isinstance(ct, EncryptedBatch):
            raise TypeError("decrypt takes the EncryptedBatch returned by run()")
        if ct.model_id != self.model_id:
            raise KeyMismatchError(f"the ciphertext belongs to compiled model {ct.model_id}, not {self.model_id}")
        if sk.key_id != ct.key_id:
            raise KeyMismatchError("the secret key does not match the ciphertext's key pair; decrypt with the "
                                   "secret key that encrypted the input")
        if self.layout == "blocked":
            prog = self.blocked
            bm, bn, rm, cn = prog.out_blocks(len(prog.layers) - 1)
            cts = ct.ctm.cts
            Y = np.block([[self.context.decrypt(cts[a * bn + j], sk)[: rm * cn].reshape((rm, cn), order="F")
                           for j in range(bn)] for a in range(bm)])
            m = prog.layers[-1].W.shape[0]
            return Y[:m, : ct.batch].T.reshape((ct.batch,) + tuple(ct.shape))
        if self.layout == "mlwe":
            rows = linalg.decrypt_matrix(self.context, ct.ctm, sk)     # (features, B') from the coefficients
            return rows[:, : ct.batch].T.reshape((ct.batch,) + tuple(ct.shape))
        if self.layout == "packed":
            slots = np.stack([self.context.decrypt(c, sk) for c in ct.ctm.cts])
            prog = self.packed
            K = prog.output.layout.K
            ys = [prog.unpack(slots[g * K:(g + 1) * K], min(prog.b, ct.batch - g * prog.b))
                  for g in range(-(-ct.batch // prog.b))]
            return np.concatenate(ys).reshape((ct.batch,) + tuple(ct.shape))
        rows = linalg.decrypt_matrix(self.context, ct.ctm, sk)
        return rows[:, : ct.batch].T.reshape((ct.batch,) + tuple(ct.shape))

    # ---- server side
    def run(self, ct, eval_keys, runtime: str = "local", address: str | None = None, num_workers: int | None = None,
            threads: int | None = None, weights=None, **ray_options):
        """Encrypted inference (server side: ciphertexts and evaluation keys only).

        runtime="local": in this process (threads: native threads). runtime="ray": every PCMM and
        elementwise step as Ray tasks (hemlp.runtime.ray_models), bit-identical to "local"; address=None
        uses the connected Ray or starts a local one with num_workers CPUs for the call, an address
        ("host:port", "ray://host:10001", "auto") joins that cluster (RuntimeUnavailableError if it
        cannot be reached). Ray options: grid ((p_m, p_n, p_k[, p_s]) or {step: grid}; p_s = 2 puts the two
        polynomials of every ciphertext in different tasks; default the planner's grid_store for num_workers),
        cts_per_task, stats (a dict filled per step). The result's
        layer_seconds holds every step's wall-clock seconds."""
        from hemlp.runtime.artifacts import EncryptedBatch, EvalKeys
        from hemlp.runtime.local import run as _run

        if runtime not in ("local", "ray"):
            raise ValueError(f"runtime must be 'local' or 'ray', got {runtime!r}")
        unknown = set(ray_options) - {"grid", "cts_per_task", "stats"}
        if unknown or (ray_options and runtime != "ray"):
            raise TypeError(f"run() got unexpected options {sorted(unknown or ray_options)} (grid, cts_per_task and "
                            "stats are options of runtime='ray')")
        if runtime == "local" and (address is not None or num_workers is not None):
            raise ValueError("address and num_workers are options of runtime='ray'")

        if not isinstance(ct, EncryptedBatch) or not isinstance(eval_keys, EvalKeys):
            raise TypeError("run(ct, eval_keys) takes an EncryptedBatch and the EvalKeys from keygen()")
        if eval_keys.model_id != self.model_id:
            raise KeyMismatchError(f"the evaluation keys belong to compiled model {eval_keys.model_id}, not "
                                   f"{self.model_id}; use this model's keygen()")
        if ct.model_id != self.model_id:
            raise KeyMismatchError(f"the ciphertext belongs to compiled model {ct.model_id}, not {self.model_id}")
        if ct.stage != "input":
            raise ShapeError("run() takes an encrypted input batch, not an output")
        if self.needs_relin:
            if eval_keys.relin_key is None:
                from hemlp.errors import MissingKeyError

                raise MissingKeyError("this model's activations need the relinearisation key; use keygen()'s eval_keys")
            if eval_keys.relin_key.key_id != ct.key_id:
                raise KeyMismatchError("the evaluation keys and the ciphertext come from different key pairs")
        self._check_key_levels(eval_keys)
        if self.layout == "blocked":
            from hemlp.runtime.blocked import EncryptedWeights

            if not isinstance(weights, EncryptedWeights):
                raise TypeError("a model compiled with encrypted_weights=True runs with weights=EncryptedWeights "
                                "(the client's compiled.encrypt_weights(sk))")
            if weights.model_id != self.model_id:
                raise KeyMismatchError(f"the encrypted weights belong to compiled model {weights.model_id}")
            if weights.key_id != ct.key_id:
                raise KeyMismatchError("the encrypted weights and the ciphertext come from different key pairs")
            if runtime == "ray":
                from hemlp.errors import UnsupportedError

                raise UnsupportedError("layout (C) (encrypted weights) runs in-process: use runtime='local'")
        elif weights is not None:
            raise TypeError("weights= is only for models compiled with encrypted_weights=True")
        if self.layout == "mlwe":
            for what, key in (("rotation keys", eval_keys.galois_keys), ("ModPack keys", eval_keys.modpack_keys)):
                if key is not None and key.key_id != ct.key_id:
                    raise KeyMismatchError(f"the {what} and the ciphertext come from different key pairs")
            if runtime == "ray":
                from hemlp.errors import UnsupportedError

                raise UnsupportedError("layout (A') (MLWE, small batches) runs in-process: use runtime='local', or "
                                       "compile with layout='batch' for a sharded large batch")
        if self.layout == "packed":
            if eval_keys.galois_keys is None and self.packed.rotations():
                from hemlp.errors import MissingKeyError

                raise MissingKeyError("layout (P) needs this model's rotation keys; use keygen()'s eval_keys")
            if eval_keys.galois_keys is not None and eval_keys.galois_keys.key_id != ct.key_id:
                raise KeyMismatchError("the rotation keys and the ciphertext come from different key pairs")
            if runtime == "ray":
                from hemlp.errors import UnsupportedError

                raise UnsupportedError("layout (P) (packed small batches) runs in-process: use runtime='local'; "
                                       "to spread many small requests over Ray use run_batch / `hemlp batch`, "
                                       "or compile with layout='batch' for a sharded large batch")
        if threads is not None:
            import hemlp

            hemlp.set_num_threads(threads)
        timings: dict = {}
        if self.layout == "mlwe":
            from hemlp.linalg import CtMatrix

            prog = self.mlwe
            if ct.ctm.format != "mlwe" or ct.ctm.shape[1] != prog.d3:
                raise ShapeError(f"layout (A') input must be an MLWE matrix with {prog.d3} columns; encrypt it with "
                                 "this model's encrypt()")
            out = self._mlwe_runner().run(ct.ctm.cts, eval_keys.relin_key, eval_keys.galois_keys,
                                          eval_keys.modpack_keys, timings)
            ctm = CtMatrix(self.context, out, (prog.output.rows, prog.d3), 1, "mlwe")
            result = EncryptedBatch(self.model_id, ctm, ct.batch, self.output_shape, "output")
            result.layer_seconds = timings
            return result
        if self.layout == "blocked":
            from hemlp.linalg import CtMatrix
            from hemlp.runtime.blocked import BlockedRunner, _flat

            prog = self.blocked
            bk, bn, _, _ = prog.in_blocks(0)
            cts = ct.ctm.cts
            if len(cts) != bk * bn:
                raise ShapeError(f"layout (C) input needs {bk * bn} ciphertexts, got {len(cts)}")
            if self._runner is None:
                self._runner = BlockedRunner(self.context, prog)
            Y = self._runner.run([cts[t * bn:(t + 1) * bn] for t in range(bk)], weights, eval_keys.relin_key,
                                 eval_keys.galois_keys, timings)
            out = _flat(Y)
            result = EncryptedBatch(self.model_id, CtMatrix(self.context, out, (len(out), self.context.slots), 1),
                                    ct.batch, self.output_shape, "output")
            result.layer_seconds = timings
            return result
        if self.layout == "packed":
            from hemlp.linalg import CtMatrix

            K, groups = self.packed.input.layout.K, -(-ct.batch // self.packed.b)
            if len(ct.ctm.cts) != K * groups:
                raise ShapeError(f"layout (P) input of {ct.batch} samples needs {K * groups} ciphertexts "
                                 f"({groups} group(s) of {K}), got {len(ct.ctm.cts)}")
            outs = []
            for g in range(groups):          # groups are independent: the same program on each
                t = {}
                outs += self._packed_runner().run(ct.ctm.cts[g * K:(g + 1) * K], eval_keys.relin_key,
                                                  eval_keys.galois_keys, t)
                for k, v in t.items():
                    timings[k] = timings.get(k, 0.0) + v
            ctm = CtMatrix(self.context, outs, (len(outs), self.context.slots), 1)
            result = EncryptedBatch(self.model_id, ctm, ct.batch, self.output_shape, "output")
            result.layer_seconds = timings
            return result
        if runtime == "ray":
            from hemlp.runtime.ray import run_on_ray

            out = run_on_ray(self.context, self.steps, ct.ctm, eval_keys.relin_key, self.weight_bits, timings,
                             address=address, num_workers=num_workers, **ray_options)
        else:
            out = _run(self.context, self.steps, ct.ctm, eval_keys.relin_key, self.weight_bits, timings)
        result = EncryptedBatch(self.model_id, out, ct.batch, self.output_shape, "output")
        result.layer_seconds = timings
        return result

    def simulate(self, x) -> np.ndarray:
        """The same plan in plaintext numpy (quantised weights, the same polynomials and layouts)."""
        from hemlp.runtime.local import simulate as _sim

        x = self._check_x(x)
        if self.layout == "blocked":   # any number of samples, in groups of the planned batch
            X, b = x.reshape(x.shape[0], -1), self.batch_size
            y = np.concatenate([self.blocked.simulate(X[i: i + b]) for i in range(0, len(X), b)])
            return y.reshape((x.shape[0],) + self.output_shape)
        if self.layout == "packed":   # any number of samples, in groups of b
            X, b = x.reshape(x.shape[0], -1), self.packed.b
            y = np.concatenate([self.packed.simulate(X[i: i + b]) for i in range(0, len(X), b)])
            return y.reshape((x.shape[0],) + self.output_shape)
        rows = _sim(self.steps, x.reshape(x.shape[0], -1).T, self.weight_bits)
        return rows.T.reshape((x.shape[0],) + self.output_shape)

    # ---- files
    def save(self, path) -> None:
        from hemlp.runtime.artifacts import save_model

        save_model(self, path)

    def load_eval_keys(self, path):
        from hemlp.runtime.artifacts import EvalKeys

        return EvalKeys.load(path, self)

    def load_encrypted(self, path):
        from hemlp.runtime.artifacts import EncryptedBatch

        return EncryptedBatch.load(path, self)

    def load_secret_key(self, path):
        from hemlp import ckks

        sk = ckks.load(path, self.context)
        if not isinstance(sk, ckks.SecretKey):
            raise KeyMismatchError(f"{path} does not hold a secret key")
        return sk

    def __repr__(self):
        return (f"CompiledModel({self.model_id}: {list(self.input_shape)} -> {list(self.output_shape)}, preset "
                f"{self.preset}, depth {self.plan.info.get('depth')}, batch {self.batch_size}, layout {self.layout})")


# ---------------------------------------------------------------------------------------

def _frontend(model, x):
    if isinstance(model, (str, Path)):
        if not str(model).endswith(".onnx") and not Path(model).is_file():
            raise ParameterError(f"{model!r} is not an ONNX file; pass a torch.nn.Module or a path to a .onnx file")
        from hemlp.compiler.onnx_frontend import from_onnx

        return from_onnx(str(model), x)
    try:
        import onnx

        if isinstance(model, onnx.ModelProto):
            from hemlp.compiler.onnx_frontend import from_onnx

            return from_onnx(model, x)
    except ImportError:
        pass
    try:
        import torch

        if isinstance(model, torch.nn.Module):
            from hemlp.compiler.torch_frontend import from_torch

            return from_torch(model, x)
    except ImportError:
        pass
    raise TypeError(f"hemlp.compile takes a torch.nn.Module or an ONNX file path, got {type(model).__name__}")


def _per_node(opt, node, default=None):
    if isinstance(opt, dict):
        for key in (node.name, node.source.split(":")[0], node.attrs.get("kind")):
            if key in opt:
                return opt[key]
        return default
    return default if opt is None else opt


def compile(model_or_onnx_path, example_input, batch_size: int | None = None, **options) -> CompiledModel:
    """Compile a model for encrypted inference (see the module docstring)."""
    from hemlp.ckks import Params
    from hemlp.compiler.activations import approximate, calibrate, exact_poly
    from hemlp.compiler.fold import fold
    from hemlp.compiler.lower import lower
    from hemlp.compiler.params import choose_preset, depth_of, output_reserve, plan_levels
    from hemlp.runtime.local import simulate as _sim

    bad = sorted(set(options) - set(_OPTIONS))
    if bad:
        raise TypeError(f"unknown option(s) {bad}; valid options: {sorted(_OPTIONS)}")
    opts = dict(_OPTIONS, **options)
    try:
        import torch

        if isinstance(example_input, torch.Tensor):
            example_input = example_input.detach().cpu().numpy()
    except ImportError:
        pass
    x = np.asarray(example_input, dtype=np.float64)
    if x.ndim < 2:
        raise ShapeError(f"example_input must be a batch (batch, *input_shape), got shape {x.shape}")
    g = _frontend(model_or_onnx_path, x)
    g = fold(g)
    # calibrate and approximate activations on the exact float model
    ref = g.reference(x)
    for n in g.nodes:
        if n.op != "act":
            continue
        kind = n.attrs["kind"]
        if kind in ("square", "poly"):
            n.attrs["approx"] = exact_poly(kind, n.attrs.get("coeffs"))
            continue
        deg = int(_per_node(opts["activation_degree"], n, 7))
        rng = _per_node(opts["activation_range"], n, None)
        if rng is None:
            lo, hi = calibrate(ref[n.inputs[0]], float(opts["activation_margin"]))
        else:
            lo, hi = map(float, rng)
        n.attrs["approx"] = approximate(kind, lo, hi, deg, opts["activation_method"])
    steps = lower(g)
    enc_w = bool(opts["encrypted_weights"])
    pcmm_levels = 3 if enc_w else 1          # layout (C): a rectangular CCMM per linear layer
    depth = depth_of(steps, pcmm_levels)
    # output magnitude check against q_0 of the candidate preset
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y_sim = _sim(steps, x.reshape(x.shape[0], -1).T, int(opts["weight_bits"]))
    max_out = float(np.max(np.abs(y_sim))) if y_sim.size else 0.0
    info = choose_preset(depth, bool(opts["allow_insecure"]), opts["preset"])
    params = Params.preset(info["name"])
    reserve = output_reserve(max_out, params.log_scale, int(math.log2(params.q[0])))
    if reserve:
        info = choose_preset(depth, bool(opts["allow_insecure"]), opts["preset"], reserve=reserve)
        params = Params.preset(info["name"])
    top = depth + reserve
    plan_levels(steps, top, pcmm_levels)
    slots = params.N // 2
    bs = int(batch_size) if batch_size is not None else slots
    if bs < 1:
        raise ShapeError(f"batch_size must be >= 1, got {batch_size}")
    if enc_w:
        if opts["layout"] not in ("auto", "blocked"):
            raise ParameterError("encrypted_weights=True uses layout (C); drop the layout option")
        from hemlp.compiler.blocked import BlockedProgram

        layout, estimates, prog = "blocked", {}, BlockedProgram(steps, slots, bs)
    else:
        mlwe_plan = None
        if opts["layout"] == "mlwe" or (opts["layout"] == "auto" and batch_size is not None):
            from hemlp.errors import LevelError, UnsupportedError

            try:
                mlwe_plan = _plan_mlwe(steps, bs, opts, max_out)
            except (UnsupportedError, ShapeError, LevelError) as exc:
                if opts["layout"] == "mlwe":
                    raise
                mlwe_plan = f"not possible: {exc}"
        layout, estimates, prog = _choose_layout(opts["layout"], steps, params, bs, batch_size is not None, mlwe_plan)
        if layout == "mlwe":   # its own preset and levels (CoeffToSlot / SlotToCoeff cost levels)
            info, params, prog, reserve = mlwe_plan
            depth, top = prog.depth, prog.top
            prog.apply_levels()
            opts["dft_depth"] = prog.dft_depth
            slots = params.N // 2
    chunks = -(-bs // slots)
    by_node = {}
    for s in steps:
        by_node.setdefault(s.node, []).append(s)
    for n in g.nodes:
        ss = by_node.get(n.name, [])
        if ss:
            n.level_in, n.level_out = ss[0].level_in, ss[-1].level_out
        for s in ss:
            if s.info.get("folded_affine"):
                n.notes.append(f"(input map of {s.info['folded_affine']} folded in)")
            if s.op == "affine" and s.info.get("note"):
                n.notes.append(s.info["note"])
    from hemlp.planner import grid_4d, obl, obl_bruteforce

    matmuls = []
    for s in steps:
        if s.op != "pcmm" or layout == "mlwe":   # FHE4DMM grids serve layout (A)'s distributed runtime
            continue
        P = 1 if s.index is None else s.index.shape[1]
        m, k, n_ = s.U.shape[0], s.U.shape[1], P * chunks * slots
        f = obl if math.isqrt(slots) ** 2 == slots else obl_bruteforce
        lay = f(m, n_, k, slots)
        grid = grid_4d(lay, int(opts["workers"]))
        matmuls.append(dict(name=s.out, m=m, k=k, n=n_, obl=list(lay.blocks),
                            grid=f"{grid.p_m}x{grid.p_n}x{grid.p_k}"))
    plan_info = dict(model=g.name, preset=info["name"], N=params.N, slots=slots, security=info["security"],
                     depth=depth, max_level=params.max_level, top_level=top, reserve=reserve, batch_size=bs,
                     chunks=chunks, waste=1.0 - bs / (chunks * slots), weight_bits=int(opts["weight_bits"]),
                     needs_relin=any(s.op in ("square", "poly", "mul", "matmul") for s in steps), workers=int(opts["workers"]),
                     matmuls=matmuls, layout=layout, layout_estimates=estimates)
    if layout == "packed":
        plan_info.update(packed=prog.describe(), rotation_keys=len(prog.rotations()), counts=prog.counts())
    if layout == "blocked":
        plan_info.update(blocked=prog.describe(), rotation_keys=len(prog.rotations()))
    if layout == "mlwe":
        plan_info.update(mlwe=prog.describe(), rotation_keys=len(prog.rotations()), modpack_keys=prog.k,
                         counts=prog.counts(), dft_depth=prog.dft_depth)
    plan = Plan(g, steps, plan_info)
    inp, out = g.input, g.output
    store_opts = {k: (v if not isinstance(v, tuple) else list(v)) for k, v in opts.items()
                  if k in ("weight_bits", "activation_method", "activation_margin", "workers", "dft_depth")}
    cm = CompiledModel(plan, steps, info["name"], params, inp.shape, out.shape, bs, top, store_opts,
                       bool(opts["allow_insecure"]), layout=layout)
    cm._packed = prog if layout == "packed" else None
    cm._blocked = prog if layout == "blocked" else None
    cm._mlwe = prog if layout == "mlwe" else None
    cm.reference = lambda xx: g.reference(np.asarray(xx, dtype=np.float64))[g.output.name]
    return cm


def _choose_layout(layout: str, steps, params, batch: int, batch_given: bool, mlwe=None):
    """(layout, cost estimates, PackedProgram or None) for the layout option (see the module docstring).
    mlwe: _plan_mlwe's result (or why layout (A′) is not possible) when "auto" should consider it."""
    from hemlp.compiler.packed import PackedProgram
    from hemlp.errors import UnsupportedError

    if layout not in LAYOUTS:
        raise ParameterError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if layout == "batch" or (layout == "auto" and not batch_given):
        return "batch", {}, None
    if layout == "mlwe":
        return "mlwe", {}, None
    from hemlp.planner.layouts import estimate_batch, estimate_mlwe, estimate_packed

    est: dict = {"batch": estimate_batch(steps, params, batch)}
    prog = None
    try:
        prog = PackedProgram(steps, params.N // 2, batch)
    except (UnsupportedError, ShapeError) as exc:
        if layout == "packed":
            raise
        est["packed"] = f"not possible: {exc}"
    if layout == "packed":
        return "packed", {}, prog
    if prog is not None:
        est["packed"] = estimate_packed(prog, steps, params)
    if isinstance(mlwe, tuple):
        kb = _modpack_key_bytes(mlwe[1], mlwe[2])
        if layout == "auto" and kb > MLWE_AUTO_MAX_KEY_BYTES:   # a time estimate alone would ignore the keys
            est["mlwe"] = (f"not chosen: its {mlwe[2].k} ModPack keys alone take ~{kb / 1e9:.1f} GB (auto stays "
                           f"under {MLWE_AUTO_MAX_KEY_BYTES / 1e9:.0f} GB; layout='mlwe' forces it)")
        else:
            est["mlwe"] = estimate_mlwe(mlwe[2], mlwe[1])
    elif mlwe is not None:
        est["mlwe"] = mlwe
    best = min((k for k, v in est.items() if isinstance(v, float)), key=est.get)
    return best, est, prog if best == "packed" else None


#: layout="auto" does not pick layout (A′) when its ModPack keys alone would exceed this (k = N/B' full
#: key-switching keys: a small batch in a large ring costs gigabytes of keys, which the time estimate ignores)
MLWE_AUTO_MAX_KEY_BYTES = 4e9


def _modpack_key_bytes(params, prog) -> int:
    """Upper bound of layout (A′)'s ModPack key bytes: k keys at the program's top level (b-halves; the a-halves
    are seeds)."""
    if not prog.has_pcmm():
        return 0
    top = prog.top if prog.top is not None else params.max_level
    return prog.k * params.switch_key_bytes(top)


def _plan_mlwe(steps, batch: int, opts: dict, max_out: float):
    """Layout (A′): (preset info, Params, MlweProgram with levels set, output reserve) for the smallest preset
    (compiler.params.candidates order, or the given preset) whose depth holds the program with its
    CoeffToSlot / SlotToCoeff levels; LevelError naming the missing levels when none does."""
    from hemlp.ckks import Params
    from hemlp.compiler.mlwe import MlweProgram, dft_depth_candidates
    from hemlp.compiler.params import candidates, choose_preset, output_reserve
    from hemlp.errors import LevelError, UnsupportedError

    allow = bool(opts["allow_insecure"])
    if opts["preset"] is not None:
        cands = [choose_preset(0, allow, opts["preset"])]      # validates the name and the security opt-in
    else:
        cands = candidates(allow)
    last, unsupported = None, None
    for p in cands:
        params = Params.preset(p["name"])
        ds = [int(opts["dft_depth"])] if opts["dft_depth"] is not None else dft_depth_candidates(params.N)
        reserve = output_reserve(max_out, params.log_scale, int(math.log2(params.q[0])))
        for d in ds:
            try:
                prog = MlweProgram(steps, params.N, batch, d)
            except UnsupportedError as exc:     # e.g. the batch does not fit this ring: try a larger one
                unsupported = exc
                break
            if prog.depth + reserve <= p["depth"]:
                prog.set_top(prog.depth + reserve)
                return p, params, prog, reserve
            if last is None or prog.depth + reserve - p["depth"] < last[0]:
                last = (prog.depth + reserve - p["depth"], prog.depth, reserve, d, p)
    if last is None:
        raise unsupported
    miss, depth, reserve, d, p = last
    raise LevelError(f"layout (A') needs {depth + reserve} levels ({depth} for its layers, including 2 x {d} per "
                     "activation block for CoeffToSlot / SlotToCoeff" + (f", + {reserve} kept for the output's "
                     "magnitude" if reserve else "") + f") but preset {p['name']!r} has {p['depth']}: {miss} level(s) "
                     "missing. Use layout='batch' or 'packed' (no DFT levels), square activations or lower "
                     "activation degrees, fewer activation layers" + (", or a deeper preset" if opts["preset"] else ""))


def load(path) -> CompiledModel:
    """Load a compiled model directory written by CompiledModel.save (server or client side)."""
    from hemlp.runtime.artifacts import load_model

    return load_model(path)


# `hemlp.compile` is both this module and the function: importing the submodule rebinds the package
# attribute to the module, so the module itself is made callable (it forwards to compile()).
import sys as _sys  # noqa: E402
import types as _types  # noqa: E402


class _CallableModule(_types.ModuleType):
    def __call__(self, *args, **kwargs):
        return compile(*args, **kwargs)


_sys.modules[__name__].__class__ = _CallableModule
