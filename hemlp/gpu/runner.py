"""A compiled model's encrypted inference on the GPU: layout (P)'s program (the BSGS diagonal products, the
activations' polynomials, the residual adds and the bootstraps) run by the CPU runner's own code
(hemlp.layouts.packed.PackedRunner) on a DeviceContext, so the output holds the words compiled.run computes on the CPU.

    runner = DeviceModelRunner(compiled, eval_keys)     # keys uploaded once, the bootstrapper's plans encoded once
    y = runner.run(compiled.encrypt(x, sk))             # an EncryptedBatch in, the output EncryptedBatch out
    compiled.decrypt(y, sk)

The encoded diagonals stay on the device up to `cache_bytes` (default: half the device's free memory when the runner
is made); the others are encoded by the CPU and uploaded at each use. Layouts other than (P) run on the CPU
(UnsupportedError names them).
"""
from __future__ import annotations

from hemlp.errors import UnsupportedError
from hemlp.gpu.bootstrap import DeviceBootstrapper
from hemlp.gpu.context import DeviceContext, GpuCiphertext
from hemlp.gpu.device import CudaEvaluator
from hemlp.gpu.library import free_memory_bytes

__all__ = ["DeviceModelRunner", "GpuBootstrapper"]


class GpuBootstrapper:
    """A DeviceBootstrapper on GpuCiphertexts (the Bootstrapper interface the runtime's bootstrap step calls)."""

    def __init__(self, dboot: DeviceBootstrapper):
        self.dboot = dboot

    def bootstrap(self, ct: GpuCiphertext) -> GpuCiphertext:
        return GpuCiphertext(self.dboot.bootstrap(ct.d))

    def bootstrap_pair(self, a: GpuCiphertext, b: GpuCiphertext) -> tuple:
        return tuple(GpuCiphertext(d) for d in self.dboot.bootstrap_pair(a.d, b.d))


class DeviceModelRunner:
    """compiled.run(ct, eval_keys) on one GPU for a model compiled to layout (P)."""

    def __init__(self, compiled, eval_keys, dev: CudaEvaluator | None = None, cache_bytes: int | None = None):
        from hemlp.layouts.packed import PackedRunner

        lay = compiled.layout_impl
        if lay.name != "packed":
            raise UnsupportedError(f"the GPU runs layout (P) models; this one is compiled to layout {lay.label}: run "
                                   "it on the CPU (compiled.run) or compile with layout='packed'")
        ctx = compiled.context
        self.compiled, self.eval_keys = compiled, eval_keys
        self.dev = dev if dev is not None else CudaEvaluator(ctx)
        self.dctx = DeviceContext(self.dev)
        self.relin = None if eval_keys.relin_key is None else self.dev.upload_relin_key(eval_keys.relin_key)
        self.galois = None if eval_keys.galois_keys is None else self.dev.upload_galois_keys(eval_keys.galois_keys)
        self.boot = None
        if lay.bootstrapped:
            self.boot = GpuBootstrapper(DeviceBootstrapper(self.dev, lay.bootstrapper(ctx, eval_keys.bootstrap_keys)))
        if cache_bytes is None:
            cache_bytes = free_memory_bytes() // 2
        self.runner = PackedRunner(self.dctx, lay.program, cache_bytes)

    def prepare(self) -> float:
        """Encode and upload the cached diagonals now (seconds); the first run does it otherwise."""
        return self.runner.prepare()

    def run(self, ct, timings: dict | None = None):
        """An encrypted input batch (compiled.encrypt) -> the output EncryptedBatch, as compiled.run computes it."""
        from hemlp.runtime.artifacts import EncryptedBatch

        cm, lay = self.compiled, self.compiled.layout_impl
        cm.check_run(ct, self.eval_keys)
        outs = []
        for g in lay.groups(ct):
            ys = self.runner.run([self.dctx.to_device(ct.ctm.cts[i]) for i in g], self.relin, self.galois, timings,
                                 boot=self.boot)
            outs.append([self.dctx.to_host(y) for y in ys])
        self.dev.synchronize()
        return EncryptedBatch(cm.model_id, lay.join_groups(cm.context, ct, outs), ct.batch, cm.output_shape,
                              "output")
