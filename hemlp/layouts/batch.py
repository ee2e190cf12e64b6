"""Layout (A): one feature per RLWE ciphertext, the batch along the slots.

Every linear layer is a PCMM-as-GEMM (hemlp.pcmm.pcmm: no rotations), every activation acts on the
slots as they are, so the eval keys are at most a relinearisation key. Best for large batches: a batch of
B samples takes ceil(B / slots) chunks per feature. The steps are the program (hemlp.runtime.local runs them
in process, hemlp.runtime.ray on Ray with FHE4DMM grids).
"""
from __future__ import annotations

import numpy as np

from hemlp import pcmm
from hemlp.bootstrap import BatchBootstrapKeys, BootParams, BootstrapKeys
from hemlp.bootstrap.mambo import S2C_LOG_MESSAGE_RATIO
from hemlp.errors import MissingKeyError, ResourceError
from hemlp.layouts import batch_bootstrap
from hemlp.layouts.base import Layout
from hemlp.planner.layouts import estimate_batch
from hemlp.planner.resources import available_memory_bytes, human_bytes
from hemlp.runtime import shards, streamed
from hemlp.runtime.local import RUN, SIMULATE
from hemlp.runtime.local import run as run_local
from hemlp.runtime.local import simulate as simulate_rows
from hemlp.runtime.local import simulate_peak_bytes

__all__ = ["Batch"]


class Batch(Layout):
    name, label = "batch", "(A)"
    unrescaled_final = True     # a PCMM product at level 0 needs no rescale: hemlp.pcmm runs it with K = 1
    own_program = False         # the steps are the program

    @classmethod
    def step_tables(cls) -> dict:
        return {"simulate": SIMULATE, "run": RUN}      # the steps are the program: every op runs

    def estimate(self) -> float:
        b = batch_bootstrap.summary(self.steps, self.params, self.batch_size)
        return estimate_batch(self.steps, self.params, self.batch_size) + (0.0 if b is None else b["boot_seconds"])

    def id_fields(self) -> list:
        return []   # the first layout: its model ids predate the layout option

    @staticmethod
    def plan_header(info: dict) -> list[str]:
        return [f"layout (A): one feature per RLWE ciphertext, batch along the slots; batch {info['batch_size']} -> "
                f"{info['chunks']} chunk(s) of {info['slots']} slots" + (f", {info['waste']:.1%} of the slots are zero "
                                                                        "padding" if info['waste'] > 0 else ""),
                f"weights quantised to {info['weight_bits']} bits; eval keys: "
                + ("relinearisation key only (no rotations)" if info["needs_relin"] else "none (linear model)")]

    def keyswitches(self) -> dict:
        return {}        # PCMMs and elementwise steps: no rotation

    def plan_info(self) -> dict:
        b = batch_bootstrap.summary(self.steps, self.params, self.batch_size)
        return {} if b is None else dict(bootstrap=b)

    @staticmethod
    def finish_plan_text(text: str, info: dict) -> str:
        if info.get("bootstrap"):
            text += "\n" + batch_bootstrap.summary_text(info["bootstrap"])
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
        return pcmm.encrypt_matrix(ctx, x.reshape(x.shape[0], -1).T, key, level=level)

    def decrypt(self, ctx, ctm, sk, batch: int) -> np.ndarray:
        return pcmm.decrypt_matrix(ctx, ctm, sk)[:, :batch].T

    @property
    def boot_order(self) -> str | None:
        """"cts_first" (single bootstraps) / "s2c_first" (batched bootstraps and MaMBo) / None (no bootstrap)."""
        return batch_bootstrap.boot_order(self.steps)

    def keygen(self, ctx, sk) -> tuple:
        rlk, gk, mp = super().keygen(ctx, sk)
        if not self.bootstrapped:
            return rlk, gk, mp
        if self.boot_order == "s2c_first":
            bp = BootParams.for_context(ctx, order="s2c_first", log_message_ratio=S2C_LOG_MESSAGE_RATIO)
            return rlk, gk, mp, BatchBootstrapKeys.generate(ctx, sk, batch_bootstrap.boot_batch_size(self.steps), bp)
        return rlk, gk, mp, BootstrapKeys.generate(ctx, sk, BootParams.for_context(ctx))

    def check_run(self, ct, eval_keys, weights, runtime: str, model_id: str) -> None:
        if weights is not None:
            raise TypeError("weights= is only for models compiled with encrypted_weights=True")
        if self.bootstrapped:
            bk = getattr(eval_keys, "bootstrap_keys", None)
            if bk is None:
                raise MissingKeyError("this plan bootstraps: its eval keys need the bootstrapping keys; use keygen()'s "
                                      "eval_keys")
            want = BatchBootstrapKeys if self.boot_order == "s2c_first" else BootstrapKeys
            if not isinstance(bk, want):
                raise MissingKeyError(f"this plan's bootstraps run the {self.boot_order} pipeline and need "
                                      f"{want.__name__}; the eval keys hold {type(bk).__name__}: use this plan's "
                                      "keygen()")
            k = batch_bootstrap.boot_batch_size(self.steps)
            if want is BatchBootstrapKeys and bk.k != k:
                raise MissingKeyError(f"this plan bootstraps in batches of k = {k}; the bootstrapping keys are for "
                                      f"k = {bk.k}: use this plan's keygen()")

    def run(self, ctx, ct, eval_keys, weights, timings: dict, runtime: str, ray=None, model=None):
        if runtime == "ray":      # layout (A) runs steps, not groups: the workers never load the model
            from hemlp.runtime.ray import run_on_ray   # Ray is optional: imported only when asked for

            # a bootstrapped plan: step by step, every bootstrap a Ray task (the keys shipped once per worker)
            return run_on_ray(ctx, self.steps, ct.ctm, eval_keys.relin_key, self.weight_bits, timings,
                              bootstrap_keys=eval_keys.bootstrap_keys if self.bootstrapped else None, **ray.as_dict())
        if self.bootstrapped:
            return run_local(ctx, self.steps, ct.ctm, eval_keys.relin_key, self.weight_bits, timings,
                             boot=self.bootstrapper(ctx, eval_keys.bootstrap_keys))
        return run_local(ctx, self.steps, ct.ctm, eval_keys.relin_key, self.weight_bits, timings)

    def simulate(self, X: np.ndarray) -> np.ndarray:
        if self.bootstrapped:
            # the zero-padded slots are a sample too (the network on a zero input) and their values enter every
            # bootstrap's coefficients: simulate whole encrypted batches, padding included
            cap = self.capacity
            self.check_simulate_memory(cap)
            return self.in_groups(lambda G: batch_bootstrap.simulate_padded(self.steps, G, cap, self.weight_bits),
                                  X, cap)
        return simulate_rows(self.steps, X.T, self.weight_bits).T

    def check_simulate_memory(self, columns: int) -> None:
        """ResourceError before any work when simulating `columns` samples at once would not fit in the memory this
        machine has available (a bootstrapped plan simulates whole encrypted batches of N/2 samples, padding too)."""
        need, have = simulate_peak_bytes(self.steps, columns), available_memory_bytes()
        if have is not None and need > have:
            raise ResourceError(
                f"simulating this plan needs about {human_bytes(need)} (every value of the program on {columns} "
                f"samples at once: a bootstrapped layout (A) plan simulates whole encrypted batches of N/2 = "
                f"{self.capacity} slots, the zero padding included, since it enters every bootstrap), and this "
                f"machine has {human_bytes(have)} available: simulate on a machine with more memory, or compile for "
                f"layout='packed' (one sample's features per ciphertext) or a smaller ring")

    # ---- resources
    @property
    def chunks(self) -> int:
        return -(-self.batch_size // (self.params.N // 2))

    def ciphertexts_in(self) -> int:
        return next(s.rows for s in self.steps if s.op == "input") * self.chunks

    def ciphertexts_out(self) -> tuple:
        return next(s.rows for s in self.steps if s.op == "output") * self.chunks, self.output_level()

    def working_bytes(self) -> int:
        # hemlp.runtime.local.run frees each layer after its last reader and runs wide conv/FC -> x² -> FC chains by
        # blocks of features (hemlp.runtime.streamed): its peak of live ciphertexts, less the input
        inp = next(s for s in self.steps if s.op == "input")
        return max(0, streamed.peak_bytes(self.steps, self.params.N, self.chunks)
                   - inp.rows * self.chunks * streamed.ct_bytes(self.params.N, inp.level_out))

    def node_peak(self, nodes: int) -> dict:
        # ciphertext ranges and FHE4DMM row splits over the nodes (hemlp.runtime.shards)
        r = shards.node_peak(self.steps, self.params.N, self.chunks, nodes)
        kinds = ", ".join(f"{m['step']} {m['split']}" + (f" (blocks of {m['block_rows']} rows)" if m["block_rows"]
                                                         else "") for m in r["splits"] if m["split"] != "local")
        r["split"] = (f"ciphertext ranges: {r['p_n']} group(s) of the {self.chunks} chunk(s)"
                      + (f", each group's rows over {r['p_r']} nodes; PCMMs: {kinds}" if r["p_r"] > 1 else ""))
        return r
