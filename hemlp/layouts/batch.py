"""Layout (A): one feature per RLWE ciphertext, the batch along the slots.

Every linear layer is a PCMM-as-GEMM (hemlp.linalg.pcmm: no rotations), every activation acts on the
slots as they are, so the eval keys are at most a relinearisation key. Best for large batches: a batch of
B samples takes ceil(B / slots) chunks per feature. The steps are the program (hemlp.runtime.local runs them
in process, hemlp.runtime.ray on Ray with FHE4DMM grids).
"""
from __future__ import annotations

import numpy as np

from hemlp import linalg
from hemlp.layouts.base import Layout
from hemlp.planner.layouts import estimate_batch
from hemlp.runtime.local import run as run_local
from hemlp.runtime.local import simulate as simulate_rows

__all__ = ["Batch"]


class Batch(Layout):
    name, label = "batch", "(A)"

    def estimate(self) -> float:
        return estimate_batch(self.steps, self.params, self.batch_size)

    def id_fields(self) -> list:
        return []   # the first layout: its model ids predate the layout option

    @staticmethod
    def plan_header(info: dict) -> list[str]:
        return [f"layout (A): one feature per RLWE ciphertext, batch along the slots; batch {info['batch_size']} -> "
                f"{info['chunks']} chunk(s) of {info['slots']} slots" + (f", {info['waste']:.1%} of the slots are zero "
                                                                        "padding" if info['waste'] > 0 else ""),
                f"weights quantised to {info['weight_bits']} bits; eval keys: "
                + ("relinearisation key only (no rotations)" if info["needs_relin"] else "none (linear model)")]

    @staticmethod
    def finish_plan_text(text: str, info: dict) -> str:
        if info.get("matmuls"):
            text += f"\n# FHE4DMM (for the distributed runtime, {info['workers']} workers):"
            for m in info["matmuls"]:
                text += (f"\n#   {m['name']}: ({m['m']}x{m['k']}) . ({m['k']}x{m['n']})  OBL {m['obl']}  "
                         f"grid {m['grid']}")
        return text

    @property
    def capacity(self) -> int:
        slots = self.params.N // 2
        return -(-self.batch_size // slots) * slots

    def encrypt(self, ctx, x, key, level: int):
        return linalg.encrypt_matrix(ctx, x.reshape(x.shape[0], -1).T, key, level=level)

    def decrypt(self, ctx, ctm, sk, batch: int) -> np.ndarray:
        return linalg.decrypt_matrix(ctx, ctm, sk)[:, :batch].T

    def check_run(self, ct, eval_keys, weights, runtime: str, model_id: str) -> None:
        if weights is not None:
            raise TypeError("weights= is only for models compiled with encrypted_weights=True")

    def run(self, ctx, ct, eval_keys, weights, timings: dict, runtime: str, ray: dict):
        if runtime == "ray":
            from hemlp.runtime.ray import run_on_ray   # Ray is optional: imported only when asked for

            return run_on_ray(ctx, self.steps, ct.ctm, eval_keys.relin_key, self.weight_bits, timings, **ray)
        return run_local(ctx, self.steps, ct.ctm, eval_keys.relin_key, self.weight_bits, timings)

    def simulate(self, X: np.ndarray) -> np.ndarray:
        return simulate_rows(self.steps, X.T, self.weight_bits).T

    # ---- resources
    @property
    def chunks(self) -> int:
        return -(-self.batch_size // (self.params.N // 2))

    def ciphertexts_in(self) -> int:
        return next(s.rows for s in self.steps if s.op == "input") * self.chunks

    def ciphertexts_out(self) -> tuple:
        return next(s.rows for s in self.steps if s.op == "output") * self.chunks, self.output_level()

    def working_bytes(self) -> int:
        # hemlp.runtime.local.run keeps every step's output until the run returns
        ct = lambda lv: 2 * self.params.N * (lv + 1) * 8  # noqa: E731
        return sum(s.rows * self.chunks * ct(s.level_out) for s in self.steps
                   if s.op not in ("input", "alias", "output") and s.level_out is not None)
