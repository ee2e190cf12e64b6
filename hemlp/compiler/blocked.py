"""Layout (C): encrypted weights — every linear layer a ciphertext x ciphertext block matmul (FHE4DMM).

For users who must hide the model from the server as well as the data (both encrypted under the
client's key). A chain  Y_i = W_i f_{i-1}(Y_{i-1})  of m_i x k_i weight matrices times k_i x n
activations (n = the batch) is split into blocks by FHE4DMM's planner: ``hemlp.planner.plan_chain``
(the DP over the chain of Optimal Block Layouts, BRIEF §4.6) with one column blocking shared by every
layer and no re-blocking, so the output blocks of layer i are exactly the input blocks of layer i+1.
Every block is one ciphertext holding a (rows x cols) matrix column-major on `slots` sparse slots (one
slot count for the whole chain); a block product is the rectangular sigma/tau/epsilon/omega CCMM
(hemlp.baselines.rectangular, 3 levels); block products over the reduction blocks are summed.

Biases are encrypted too: one block per output row block (the bias repeated over the columns),
encrypted one level above the layer's output and brought to the product's exact scale by the server
(set_scale), so they cost no level of the data path. Elementwise activations (x^2, polynomials) act on
the blocks as they are; the zero padding of a block is ignored by the next transform.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hemlp.compiler.packed import dense_matrix
from hemlp.errors import ShapeError, UnsupportedError

__all__ = ["BlockedProgram", "CGEMM_LEVELS"]

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


class BlockedProgram:
    """The lowered steps of a chain of linear layers and activations, planned in layout (C)."""

    def __init__(self, steps, slots: int, batch: int):
        self.batch = int(batch)
        self.layers: list[BlockedLayer] = []
        self.input_step, self.output_step = steps[0], steps[-1]
        feats = None
        for s in steps:
            if s.op == "input":
                feats = s.rows
            elif s.op == "pcmm":
                W = dense_matrix(s, feats)
                b = np.zeros(W.shape[0]) if s.bias is None else np.asarray(s.bias, dtype=np.float64)
                if s.index is not None and s.bias is not None:
                    b = np.repeat(b, s.index.shape[1])
                self.layers.append(BlockedLayer(s, W, b, None))
                feats = W.shape[0]
            elif s.op in ("square", "poly"):
                if not self.layers:
                    raise UnsupportedError(f"layout (C): an activation ({s.out}) before the first linear layer; "
                                           "use plaintext weights (layout A/P)")
                self.layers[-1].acts.append(s)
            elif s.op in ("alias", "output"):
                continue
            else:
                raise UnsupportedError(f"layout (C) (encrypted weights) runs chains of linear layers and x^2 / "
                                       f"polynomial activations; step {s.out} ({s.op}) is not one: use plaintext "
                                       "weights (layout A/P) for this model")
        if not self.layers:
            raise UnsupportedError("layout (C) needs at least one linear layer")
        from hemlp.baselines.rectangular import default_slots
        from hemlp.planner.chain import plan_chain

        from hemlp.planner.layouts import unit_costs

        c = unit_costs()   # FHE4DMM's Table II op counts priced by this machine's measured unit costs
        weights = dict(ROT=c["rotate"], MULT=c["ct_mul"], PMULT=c["pt_mul"], ADD=c["pt_mul"] / 2)
        shapes = [(L.W.shape[0], self.batch, L.W.shape[1]) for L in self.layers]
        # reblock_cost_fn=None: consistent blocks across the chain
        self.chain = plan_chain(shapes, min(int(slots), MAX_BLOCK_SLOTS), cost_fn=weights)
        for L, lay in zip(self.layers, self.chain.layouts):
            L.layout = lay
        self.slots = max(default_slots(*L.dims) for L in self.layers)
        if self.slots > slots:
            raise ShapeError(f"layout (C): blocks need {self.slots} slots, the ciphertext has {slots}")

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
        from hemlp.baselines.rectangular import Transforms

        m, k, n = self.layers[i].dims
        return Transforms(m, k, n, self.slots, n1=self.n1)

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
        lv += [s.level_in for L in self.layers for s in L.acts]
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
        for i, L in enumerate(self.layers):
            Wb, bb = self.weight_blocks(i), self.bias_blocks(i)
            lay = L.layout
            Y = [[sum(Wb[a][t] @ Y[t][j] for t in range(lay.b_k)) + bb[a] for j in range(lay.b_n)]
                 for a in range(lay.b_m)]
            for s in L.acts:
                Y = [[s.act.eval_u(blk) for blk in row] for row in Y]
        m = self.layers[-1].W.shape[0]
        return np.block(Y)[:m, : len(X)].T
