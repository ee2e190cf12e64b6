"""Layout (C): encrypted weights — every linear layer a ciphertext x ciphertext block matmul (FHE4DMM).

For users who must hide the model from the server as well as the data (both encrypted under the
client's key). A chain  Y_i = W_i f_{i-1}(Y_{i-1})  of m_i x k_i weight matrices times k_i x n
activations (n = the batch) is split into blocks by FHE4DMM's planner: ``hemlp.planner.plan_chain``
(the DP over the chain of Optimal Block Layouts, docs/design/pcmm-and-planning.md §4.6) with one column blocking shared
by every layer and no re-blocking, so the output blocks of layer i are exactly the input blocks of layer i+1.
Every block is one ciphertext holding a (rows x cols) matrix column-major on `slots` sparse slots (one
slot count for the whole chain); a block product is the rectangular sigma/tau/epsilon/omega CCMM
(hemlp.he.ccmm.rectangular, 3 levels); block products over the reduction blocks are summed.

Biases are encrypted too: one block per output row block (the bias repeated over the columns),
encrypted one level above the layer's output and brought to the product's exact scale by the server
(set_scale), so they cost no level of the data path. Elementwise activations (x^2, polynomials) act on
the blocks as they are; the zero padding of a block is ignored by the next transform.

``EncryptedWeights`` is what the client sends once: per linear layer the weight blocks and one bias block per
output row block, all under the client's key (the server never sees the model). The server runs
``BlockedRunner.run``: per output block C_ij = sum_t CCMM(W_it, X_tj) + bias_i, then the layer's activations on
every block.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from hemlp.bootstrap import BootParams, BootstrapKeys
from hemlp.he.ccmm import rectangular
from hemlp.fhe import Ciphertext, from_bytes
from hemlp.compiler.lower import dense_matrix
from hemlp.errors import (KeyMismatchError, LevelError, MissingKeyError, SerializationError, ShapeError,
                          UnsupportedError)
from hemlp.fhe.files import map_file, write_atomic
from hemlp.layouts import batch_bootstrap
from hemlp.layouts.base import Layout
from hemlp.pcmm import CtMatrix
from hemlp.planner.chain import plan_chain
from hemlp.planner.keyswitch_cost import keyswitch_per_limb
from hemlp.planner.layouts import unit_costs
from hemlp.runtime import artifacts
from hemlp.runtime.bootstrap_sim import simulate_packed_bootstrap
from hemlp.runtime.local import ElementwiseOp, bootstrap_rows, cached_elementwise
from hemlp.step_ops import ACT_OPS, UNTIMED_OPS, StepOp, Unsupported, handler

__all__ = ["Blocked", "BlockedProgram", "BlockedRunner", "EncryptedWeights", "encrypt_blocks", "flat", "CGEMM_LEVELS",
           "REFUSED", "cgemm_weights"]

_NOT_A_CHAIN = Unsupported("(C)", "plaintext weights (layout A/P)",
                           "layout (C) (encrypted weights) runs chains of linear layers and x^2 / polynomial "
                           "activations; step {out} ({op}) is not one: use plaintext weights (layout A/P) for this "
                           "model")
#: the step ops layout (C) cannot run: one refusal each, the entry of all its tables. An affine map would need its
#: per-feature constants laid out like the blocks; MaMBo fuses a plaintext PCMM, and here every PCMM is a CCMM
REFUSED = {
    StepOp.AFFINE: _NOT_A_CHAIN,
    StepOp.ADD: _NOT_A_CHAIN,
    StepOp.MUL: _NOT_A_CHAIN,
    StepOp.MATMUL: _NOT_A_CHAIN,
    StepOp.PERM: _NOT_A_CHAIN,
    StepOp.MAMBO: _NOT_A_CHAIN,
}

CGEMM_LEVELS = 3
#: block CCMMs use at most this many slots: the rectangular kernel's transforms are found from dense
#: (slots x slots) 0/1 matrices, so larger blocks cost quadratic memory and time to prepare
MAX_BLOCK_SLOTS = 2048


@dataclass
class BlockedLayer:
    step: object                 # the lowered pcmm step
    W: np.ndarray                # dense (m, k)
    bias: np.ndarray             # (m,)
    layout: object               # hemlp.planner.obl.Layout
    acts: list = field(default_factory=list)     # elementwise steps after it

    @property
    def dims(self):
        L = self.layout
        return L.block_m, L.block_k, L.block_n


def cgemm_weights(costs: dict, ks_per_limb: float) -> dict:
    """FHE4DMM's Table II op counts priced by this machine's unit costs (hemlp.planner.layouts.unit_costs): seconds
    per ring degree x limb of a rotation, a ciphertext product, a plaintext product and an addition, the key switches
    at ks_per_limb key-switch units per limb (hemlp.planner.keyswitch_cost at the level they run at)."""
    return dict(ROT=costs["rotate"] * ks_per_limb, MULT=costs["ct_mul"] * ks_per_limb, PMULT=costs["pt_mul"],
                ADD=costs["pt_mul"] / 2)


class BlockedProgram:
    """The lowered steps of a chain of linear layers and activations, planned in layout (C)."""

    def __init__(self, steps, slots: int, batch: int, ks_per_limb: float = 1.0):
        # ks_per_limb: a key switch's unit count per limb at the chain's level (hemlp.planner.keyswitch_cost): the
        # rotation and ciphertext-product unit costs are per key-switch unit, the chain's cost per limb
        self.batch = int(batch)
        self.layers: list[BlockedLayer] = []
        #: the lowered steps the program runs, in order (a drop before the first layer is left to the runner's drop
        #: to that layer's input level), and each linear layer's index in self.layers by its step's name
        self.steps: list = []
        self.layer_index: dict[str, int] = {}
        self.input_step, self.output_step = steps[0], steps[-1]
        st = SimpleNamespace(feats=None)      # the features of the last value
        prev = None
        for s in steps:
            f = handler(self.PLAN, s, "layout (C)")
            # the layers run one after the other on one value: a step reading another (a branch) is refused here,
            # before a layer is built for the wrong input
            if s.inputs and list(s.inputs) != [prev]:
                raise UnsupportedError(f"layout (C) (encrypted weights) runs a chain of layers; step {s.out} does not "
                                       "take the previous step's output: use plaintext weights (layout A/P) for this "
                                       "model")
            f(self, s, st)
            prev = s.out
        if not self.layers:
            raise UnsupportedError("layout (C) needs at least one linear layer")

        weights = cgemm_weights(unit_costs(), ks_per_limb)
        shapes = [(L.W.shape[0], self.batch, L.W.shape[1]) for L in self.layers]
        # reblock_cost_fn=None: consistent blocks across the chain
        self.chain = plan_chain(shapes, min(int(slots), MAX_BLOCK_SLOTS), cost_fn=weights)
        for L, lay in zip(self.layers, self.chain.layouts):
            L.layout = lay
        self.slots = max(rectangular.default_slots(*L.dims) for L in self.layers)
        if self.slots > slots:
            raise ShapeError(f"layout (C): blocks need {self.slots} slots, the ciphertext has {slots}")

    def _plan_input(self, s, st) -> None:
        st.feats = s.rows
        self.steps.append(s)

    def _plan_pcmm(self, s, st) -> None:
        W = dense_matrix(s, st.feats)
        b = np.zeros(W.shape[0]) if s.bias is None else np.asarray(s.bias, dtype=np.float64)
        if s.index is not None and s.bias is not None:
            b = np.repeat(b, s.index.shape[1])
        self.layer_index[s.out] = len(self.layers)
        self.layers.append(BlockedLayer(s, W, b, None))
        st.feats = W.shape[0]
        self.steps.append(s)

    def _plan_act(self, s, st) -> None:
        """An activation, or a bootstrap (placed by the planner: layouts.blocked_bootstrap), on the last layer's
        blocks."""
        if not self.layers:
            raise UnsupportedError(f"layout (C): an activation or bootstrap ({s.out}) before the first linear "
                                   "layer; use plaintext weights (layout A/P)")
        self.layers[-1].acts.append(s)
        self.steps.append(s)

    def _plan_drop(self, s, st) -> None:
        if self.layers:                     # before the first layer: the runner drops to its input level
            self.layers[-1].acts.append(s)
            self.steps.append(s)

    def _plan_same(self, s, st) -> None:
        self.steps.append(s)

    #: one planning handler per step op: (program, lowered step, planning state) -> the step placed in the chain
    PLAN = {
        **REFUSED,
        StepOp.INPUT: _plan_input,
        StepOp.PCMM: _plan_pcmm,
        StepOp.SQUARE: _plan_act,
        StepOp.POLY: _plan_act,
        StepOp.BOOTSTRAP: _plan_act,
        StepOp.DROP: _plan_drop,
        StepOp.ALIAS: _plan_same,
        StepOp.OUTPUT: _plan_same,
    }

    # ---- geometry
    def in_blocks(self, i: int):
        """(b_k, b_n, block_k, block_n) of layer i's input."""
        lay = self.layers[i].layout
        return lay.b_k, lay.b_n, lay.block_k, lay.block_n

    def out_blocks(self, i: int):
        lay = self.layers[i].layout
        return lay.b_m, lay.b_n, lay.block_m, lay.block_n

    @staticmethod
    def split(M: np.ndarray, rb: int, cb: int, r: int, c: int) -> list:
        """Zero-pad M to (rb*r, cb*c) and cut it into rb x cb blocks (row-major list of r x c matrices)."""
        P = np.zeros((rb * r, cb * c))
        P[: M.shape[0], : M.shape[1]] = M
        return [[P[i * r:(i + 1) * r, j * c:(j + 1) * c] for j in range(cb)] for i in range(rb)]

    def weight_blocks(self, i: int):
        L = self.layers[i]
        lay = L.layout
        return self.split(L.W, lay.b_m, lay.b_k, lay.block_m, lay.block_k)

    def bias_blocks(self, i: int):
        """One (block_m x block_n) block per output row block: the bias repeated over the columns."""
        L = self.layers[i]
        lay = L.layout
        B = np.repeat(L.bias[:, None], lay.block_n, axis=1)
        return [row[0] for row in self.split(B, lay.b_m, 1, lay.block_m, lay.block_n)]

    @property
    def n1(self) -> int:
        """One BSGS baby-step size for every transform of the program: the rotation keys are then
        at most the n1 baby steps and the slots/n1 giant steps (FHE4DMM-style key pruning)."""
        return 1 << (self.slots.bit_length() - 1) // 2

    def transforms(self, i: int):
        m, k, n = self.layers[i].dims
        return rectangular.Transforms(m, k, n, self.slots, n1=self.n1)

    def rotations(self) -> list:
        r = set()
        for i in range(len(self.layers)):
            r.update(self.transforms(i).steps)
        return sorted(r)

    def rotation_level(self) -> int:
        """The highest level a rotation happens at: the first transforms (sigma, tau) of a layer's CCMM
        rotate its inputs at level_in."""
        return max(L.step.level_in for L in self.layers)

    def relin_level(self) -> int:
        """The highest level a relinearisation happens at: a CCMM relinearises its products after two
        rescales (level_in - 2); activations at their own input level."""
        lv = [L.step.level_in - (CGEMM_LEVELS - 1) for L in self.layers]
        lv += [s.level_in for L in self.layers for s in L.acts if s.op in ACT_OPS]
        return max(lv)

    def describe(self) -> list[str]:
        lines = [f"layout (C): encrypted weights, FHE4DMM chain plan (column blocks c={self.chain.c}), blocks on "
                 f"{self.slots} slots, rectangular CCMM ({CGEMM_LEVELS} levels per layer)"]
        for L in self.layers:
            lay = L.layout
            lines.append(f"  {L.step.out}: [b_m,b_n,b_k]=[{lay.b_m}, {lay.b_n}, {lay.b_k}], blocks "
                         f"{lay.block_m}x{lay.block_k} . {lay.block_k}x{lay.block_n}: {lay.num_blocks} block CCMMs")
        return lines

    # ---- plaintext oracle: the same blocks, sums and activations in numpy
    def simulate(self, X: np.ndarray) -> np.ndarray:
        """X: (B, F_in) -> (B, F_out)."""
        bk, bn, rk, cn = self.in_blocks(0)
        Y = self.split(np.asarray(X, dtype=np.float64).reshape(len(X), -1).T, bk, bn, rk, cn)
        for s in self.steps:
            Y = handler(self.PLAIN, s, "layout (C)'s plaintext program")(self, s, Y)
        m = self.layers[-1].W.shape[0]
        return np.block(Y)[:m, : len(X)].T

    def _plain_layer(self, s, Y: list) -> list:
        """Blocks [a][j] of a linear layer: the block products summed over the reduction blocks, plus the bias."""
        i = self.layer_index[s.out]
        Wb, bb, lay = self.weight_blocks(i), self.bias_blocks(i), self.layers[i].layout
        return [[sum(Wb[a][t] @ Y[t][j] for t in range(lay.b_k)) + bb[a] for j in range(lay.b_n)]
                for a in range(lay.b_m)]

    def _plain_bootstrap(self, s, Y: list) -> list:
        """Every block's slot vector range-checked and given the bootstrap's error, as hemlp.runtime.bootstrap_sim
        models a sparse bootstrap."""
        shapes = [[blk.shape for blk in row] for row in Y]
        vecs = []
        for row in Y:
            for blk in row:
                v = np.zeros(self.slots)
                v[: blk.size] = blk.reshape(-1, order="F")
                vecs.append(v)
        out = iter(simulate_packed_bootstrap(s, vecs, self.slots))
        return [[next(out)[: r * c].reshape((r, c), order="F") for r, c in row] for row in shapes]

    #: the plaintext program, one handler per step op: (program, lowered step, blocks [a][j]) -> blocks after it (a
    #: drop: nothing to model)
    PLAIN = {
        **REFUSED,
        StepOp.INPUT: lambda self, s, Y: Y,
        StepOp.ALIAS: lambda self, s, Y: Y,
        StepOp.OUTPUT: lambda self, s, Y: Y,
        StepOp.DROP: lambda self, s, Y: Y,
        StepOp.PCMM: _plain_layer,
        StepOp.BOOTSTRAP: _plain_bootstrap,
        StepOp.SQUARE: lambda self, s, Y: [[s.act.eval_u(blk) for blk in row] for row in Y],
        StepOp.POLY: lambda self, s, Y: [[s.act.eval_u(blk) for blk in row] for row in Y],
    }


def encrypt_blocks(ctx, blocks, key, slots: int, level: int) -> list:
    """A list (or nested lists) of matrices -> ciphertexts, column-major on `slots` sparse slots."""
    if isinstance(blocks, np.ndarray):
        return rectangular.pack(ctx, blocks, key, slots, level=level)
    return [encrypt_blocks(ctx, b, key, slots, level) for b in blocks]


def flat(nested) -> list:
    if isinstance(nested, list):
        return [c for x in nested for c in flat(x)]
    return [nested]


class EncryptedWeights:
    """The model's weights and biases encrypted block by block (layout C). Save with .save(path)."""

    def __init__(self, model_id: str, layers: list):
        self.model_id, self.layers = model_id, layers        # [(W blocks [b_m][b_k], bias blocks [b_m])]

    key_id = property(lambda self: self.layers[0][0][0][0].native.key_id)

    def __repr__(self):
        n = sum(len(flat(w)) + len(b) for w, b in self.layers)
        return f"EncryptedWeights(model={self.model_id}, {len(self.layers)} layers, {n} ciphertexts)"

    def to_bytes(self) -> bytes:
        return b"".join(self.to_parts())

    def to_parts(self) -> list:
        parts, shape = [], []
        for W, b in self.layers:
            shape.append([len(W), len(W[0]), len(b)])
            parts += [c.to_parts() for c in flat(W) + list(b)]
        sizes = [sum(memoryview(x).nbytes for x in ps) for ps in parts]
        return artifacts.pack_parts("encrypted_weights", self.layers[0][0][0][0].param_hash,
                                    dict(model_id=self.model_id, shape=shape, sizes=sizes),
                                    [x for ps in parts for x in ps])

    def save(self, path) -> None:
        write_atomic(path, self.to_parts())

    @classmethod
    def from_bytes(cls, data: bytes, compiled) -> "EncryptedWeights":
        with artifacts.reading(data, "encrypted_weights", compiled,
                               "encrypt them with this model's encrypt_weights") as (h, payload, _):
            return cls._from_payload(h, memoryview(payload), compiled)

    @classmethod
    def _from_payload(cls, h: dict, payload: memoryview, compiled) -> "EncryptedWeights":
        """The ciphertexts nested in the payload (checked by the enclosing container's checksum)."""
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
            c = from_bytes(payload[off: off + s], compiled.context, checksum=False)
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
        with map_file(path, "encrypted_weights") as data:
            return cls.from_bytes(data, compiled)


class BlockedRunner:
    def __init__(self, ctx, prog):
        self.ctx, self.prog = ctx, prog
        self._tr = {}
        self._pe = {}

    def transforms(self, i: int):
        if i not in self._tr:
            self._tr[i] = self.prog.transforms(i)
        return self._tr[i]

    def _act(self, s, blocks, keys):
        fn = cached_elementwise(self._pe, self.ctx, ElementwiseOp.from_step(s), keys.relin)
        return [[fn(0, c) for c in row] for row in blocks]

    def _drop(self, s, blocks, keys):
        return [[self.ctx.drop_level(c, s.level_out) if c.level > s.level_out else c for c in row] for row in blocks]

    def _bootstrap(self, s, blocks, keys):
        """Every block through hemlp.runtime.local.bootstrap_rows (÷ c as a re-tag, two real ones per bootstrap_pair,
        × c exactly, dropped to the planned level), the blocks flattened row by row and put back."""
        boot = keys.boot
        if boot is None:
            raise MissingKeyError(f"step {s.out} bootstraps: run the plan with its bootstrapping keys (keygen()'s "
                                  "eval_keys)")
        flat_blocks = [c for row in blocks for c in row]
        out = iter(bootstrap_rows(self.ctx, boot, CtMatrix(self.ctx, flat_blocks, (len(flat_blocks), self.ctx.slots),
                                                           1), s).cts)
        return [[next(out) for _ in row] for row in blocks]

    def _layer(self, s, Y, keys):
        """A linear layer: per output block C_aj = sum_t CCMM(W_at, Y_tj) + bias_a, with the client's encrypted
        weight and bias blocks."""
        ctx, i = self.ctx, self.prog.layer_index[s.out]
        L, (Wb, bb) = self.prog.layers[i], keys.weights.layers[i]
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
            for j in range(len(Y[0])):    # every column block, or the one of a group (run_group)
                acc = None
                for t in range(lay.b_k):
                    p = rectangular.matmul(ctx, Wb[a][t], Y[t][j], (m, k, n), keys.galois, keys.relin, transforms=tr)
                    acc = p if acc is None else ctx.add(acc, p)
                bias = bb[a]
                if bias.level != acc.level + 1:
                    raise LevelError(f"layer {L.step.out}: bias block at level {bias.level}, expected "
                                     f"{acc.level + 1}")
                row.append(ctx.add(acc, ctx.set_scale(bias, acc.scale)))
            out.append(row)
        return out

    #: the encrypted program, one handler per step op: (runner, lowered step, blocks [a][j], the run's keys and
    #: encrypted weights) -> blocks after it
    RUN = {
        **REFUSED,
        StepOp.INPUT: lambda self, s, Y, keys: Y,
        StepOp.ALIAS: lambda self, s, Y, keys: Y,
        StepOp.OUTPUT: lambda self, s, Y, keys: Y,
        StepOp.PCMM: _layer,
        StepOp.SQUARE: _act,
        StepOp.POLY: _act,
        StepOp.DROP: _drop,
        StepOp.BOOTSTRAP: _bootstrap,
    }

    def run(self, x_blocks, weights: EncryptedWeights, relin_key, galois_keys, timings: dict | None = None,
            boot=None):
        """x_blocks [b_k][b_n] ciphertexts of the input -> output blocks [b_m][b_n]. boot: the Bootstrapper of a
        program with bootstrap steps."""
        if relin_key is None or galois_keys is None:
            raise MissingKeyError("layout (C) needs the relinearisation and rotation keys of keygen()'s eval_keys")
        if len(weights.layers) != len(self.prog.layers):
            raise KeyMismatchError("the encrypted weights do not have this model's layers")
        keys = SimpleNamespace(relin=relin_key, galois=galois_keys, boot=boot, weights=weights)
        Y = x_blocks
        for s in self.prog.steps:
            t0 = time.perf_counter()
            Y = handler(self.RUN, s, "layout (C)'s run")(self, s, Y, keys)
            if timings is not None and s.op not in UNTIMED_OPS:
                timings[s.out] = time.perf_counter() - t0
        return Y


class Blocked(Layout):
    """Layout (C): weights and data encrypted, every linear layer a block CCMM (the encrypted_weights option)."""

    name, label = "blocked", "(C)"
    pcmm_levels = CGEMM_LEVELS
    encrypted_weights = True

    def build_program(self) -> BlockedProgram:
        return BlockedProgram(self.steps, self.params.N // 2, self.batch_size,
                              keyswitch_per_limb(self.params, self.params.max_level))

    @classmethod
    def step_tables(cls) -> dict:
        return {"plan": BlockedProgram.PLAN, "simulate": BlockedProgram.PLAIN, "run": BlockedRunner.RUN}

    def estimate(self):
        return "the only layout with encrypted weights"

    def _boot_summary(self):
        N, lv = self.params.N, self.top_level + 1
        return batch_bootstrap.summary(self.steps, self.params, self.batch_size,
                                       layer_seconds=self.program.chain.total_cost * N * lv)

    def plan_info(self) -> dict:
        prog = self.program
        info = dict(blocked=prog.describe(), rotation_keys=len(prog.rotations()))
        b = batch_bootstrap.sparse_summary(self._boot_summary(), self.params, prog.slots)
        if b is not None:
            info["bootstrap"] = b
        return info

    @staticmethod
    def plan_header(info: dict) -> list[str]:
        return list(info["blocked"]) + [f"eval keys: relinearisation key + {info['rotation_keys']} rotation keys"
                                        + (" + bootstrapping keys" if info.get("bootstrap") else "")
                                        + "; the weights are encrypted by the client (encrypt_weights)"]

    @staticmethod
    def finish_plan_text(text: str, info: dict) -> str:
        text = text.replace(" = pcmm_gather(", " = ccmm_blocks(").replace(" = pcmm(", " = ccmm_blocks(")
        return text + batch_bootstrap.sparse_summary_text(
            info, "layout (C): each bootstrap refreshes every block ciphertext with {slots} slots (a block's matrix "
                  "sits in its first rows x cols slots)")

    @property
    def needs_relin(self) -> bool:
        return True   # every block CCMM multiplies ciphertexts

    def key_inventory(self) -> dict:
        lv = self.key_levels()
        return {"relin": (1, lv["relin"]), "rotation": (len(self.program.rotations()), lv["rotation"])}

    def ciphertexts_in(self) -> int:
        bk, bn, _, _ = self.program.in_blocks(0)
        return bk * bn

    def seconds_estimate(self) -> float:
        # the chain planner's cost (FHE4DMM Table II counts at the unit costs per N x limb) at the input's level,
        # plus the client's encryption of the input blocks
        N, lv = self.params.N, self.top_level + 1
        b = self._boot_summary()         # the placed bootstraps' estimate (bench/boot_*.json), when there are any
        return (self.program.chain.total_cost + self.ciphertexts_in() * unit_costs()["encrypt"]) * N * lv \
            + (0.0 if b is None else b["boot_seconds"])

    def ciphertexts_out(self) -> tuple:
        bm, bn, _, _ = self.program.out_blocks(len(self.program.layers) - 1)
        return bm * bn, self.output_level()

    def key_levels(self) -> dict:
        prog = self.program
        return dict(relin=prog.relin_level(), rotation=prog.rotation_level())

    def boot_params(self, ctx) -> BootParams:
        """The bootstrapping parameters of the chain: the preset's, with the blocks' slot count."""
        return BootParams.for_context(ctx, slots=self.program.slots)

    def keygen(self, ctx, sk) -> tuple:
        lv = self.key_levels()
        keys = (ctx.relin_key(sk, level=lv["relin"]),
                ctx.rotation_keys(sk, self.program.rotations(), level=lv["rotation"]), None)
        if self.bootstrapped:
            return keys + (BootstrapKeys.generate(ctx, sk, self.boot_params(ctx)),)
        return keys

    def check_run(self, ct, eval_keys, weights, runtime: str, model_id: str) -> None:
        if not isinstance(weights, EncryptedWeights):
            raise TypeError("a model compiled with encrypted_weights=True runs with weights=EncryptedWeights "
                            "(the client's compiled.encrypt_weights(sk))")
        if weights.model_id != model_id:
            raise KeyMismatchError(f"the encrypted weights belong to compiled model {weights.model_id}")
        if weights.key_id != ct.key_id:
            raise KeyMismatchError("the encrypted weights and the ciphertext come from different key pairs")
        if self.bootstrapped:
            batch_bootstrap.check_single_boot_keys(eval_keys, self.program.slots, "blocks")

    @property
    def capacity(self) -> int:
        return self.batch_size

    def encrypt(self, ctx, x, key, level: int):
        prog = self.program
        bk, bn, rk, cn = prog.in_blocks(0)
        blocks = prog.split(x.reshape(x.shape[0], -1).T, bk, bn, rk, cn)
        cts = flat(encrypt_blocks(ctx, blocks, key, prog.slots, level))
        return CtMatrix(ctx, cts, (len(cts), ctx.slots), 1)

    def encrypt_weights(self, ctx, key, model_id: str) -> EncryptedWeights:
        prog, out = self.program, []
        for i, L in enumerate(prog.layers):
            W = encrypt_blocks(ctx, prog.weight_blocks(i), key, prog.slots, L.step.level_in)
            b = encrypt_blocks(ctx, prog.bias_blocks(i), key, prog.slots, L.step.level_out + 1)
            out.append((W, b))
        return EncryptedWeights(model_id, out)

    def decrypt(self, ctx, ctm, sk, batch: int) -> np.ndarray:
        prog = self.program
        bm, bn, rm, cn = prog.out_blocks(len(prog.layers) - 1)
        cts = ctm.cts
        Y = np.block([[ctx.decrypt(cts[a * bn + j], sk)[: rm * cn].reshape((rm, cn), order="F")
                       for j in range(bn)] for a in range(bm)])
        m = prog.layers[-1].W.shape[0]
        return Y[:m, :batch].T

    def groups(self, ct) -> list[list[int]]:
        """One group per column block j (samples j*block_n ...): every layer's output block (a, j) reads only the
        input blocks (t, j) of the same column, and the chain keeps one column blocking (no re-blocking)."""
        bk, bn, _, _ = self.program.in_blocks(0)
        if len(ct.ctm.cts) != bk * bn:
            raise ShapeError(f"layout (C) input needs {bk * bn} ciphertexts, got {len(ct.ctm.cts)}")
        return [[t * bn + j for t in range(bk)] for j in range(bn)]

    def run_group(self, ctx, cts: list, eval_keys, weights, timings: dict, part=None) -> list:
        """Column block j: its b_k input blocks -> its b_m output blocks (BlockedRunner.run on one column)."""
        runner = self.runner(ctx, lambda c: BlockedRunner(c, self.program))
        boot = self.bootstrapper(ctx, eval_keys.bootstrap_keys) if self.bootstrapped else None
        Y = runner.run([[c] for c in cts], weights, eval_keys.relin_key, eval_keys.galois_keys, timings, boot=boot)
        return [row[0] for row in Y]

    def join_groups(self, ctx, ct, outs: list):
        """Column groups [j][a] -> the output blocks row-major (a * b_n + j), as flat(Y) of a whole run."""
        out = [outs[j][a] for a in range(len(outs[0])) for j in range(len(outs))]
        return CtMatrix(ctx, out, (len(out), ctx.slots), 1)

    def weights_from_bytes(self, data: bytes, compiled):
        return EncryptedWeights.from_bytes(data, compiled)

    def simulate(self, X: np.ndarray) -> np.ndarray:   # any number of samples, in groups of the planned batch
        return self.in_groups(self.program.simulate, X, self.batch_size)
