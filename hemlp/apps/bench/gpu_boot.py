"""hemlp's bootstrapping on the GPU at N16-boot (hemlp.gpu.bootstrap.DeviceBootstrapper, full slots, from level 0),
timed and checked against the CPU pipeline's words and the input's values. Run by ``python -m hemlp.bench gpu`` in a
subprocess (it needs the CPU core: the plans, keys and diagonals come from it, and a core that crashes on the GPU
machine must not take the benchmark with it):

    python -m hemlp.apps.bench.gpu_boot --repeats 5 --out gpu_bootstrap.json
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np


def measure_bootstrap(repeats: int) -> dict:
    from hemlp import fhe
    from hemlp.apps.bench.gpu import timed
    from hemlp.bootstrap import Bootstrapper, BootstrapKeys
    from hemlp.gpu.bootstrap import DeviceBootstrapper
    from hemlp.gpu.device import CudaEvaluator

    ctx = fhe.Context("N16-boot", decrypt_noise="none")
    sk, pk = ctx.keygen()
    t0 = time.perf_counter()
    boot = Bootstrapper(ctx, BootstrapKeys.generate(ctx, sk))
    dev = CudaEvaluator(ctx)
    dboot = DeviceBootstrapper(dev, boot)
    setup = time.perf_counter() - t0
    z = np.random.default_rng(3).uniform(-1, 1, ctx.slots)
    ct = ctx.encrypt(z, pk, level=0)
    d = dev.to_device(ct)
    t0 = time.perf_counter()
    first = dboot.bootstrap(d)  # uploads the transforms' diagonals
    dev.synchronize()
    first_s = time.perf_counter() - t0
    rec = timed(lambda: dboot.bootstrap(d), dev.synchronize, repeats, warmup=1)
    stages: dict = {}
    dboot.bootstrap(d, stages=stages)  # one more call, synchronised at each stage boundary
    rec["stages_s"] = stages
    out = dev.to_host(first)
    t0 = time.perf_counter()
    want = boot.bootstrap(ct)
    rec.update(first_call_s=first_s, setup_s=setup, cpu_bootstrap_s=time.perf_counter() - t0, levels_left=out.level,
               precision_bits=float(-np.log2(np.max(np.abs(ctx.decrypt(out, sk).real - z)))),
               bit_identical_to_cpu=bool(out.level == want.level and out.scale == want.scale and all(
                   np.array_equal(out.native.poly(j), want.native.poly(j)) for j in range(2))))
    return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", required=True, help="the JSON record of the bootstrap row")
    args = ap.parse_args(argv)
    rec = measure_bootstrap(args.repeats)
    with open(args.out, "w") as f:
        json.dump(rec, f, indent=1, default=float)
    return 0


if __name__ == "__main__":
    sys.exit(main())
