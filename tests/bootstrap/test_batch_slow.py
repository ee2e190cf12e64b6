"""Batched bootstrapping and MaMBo at the 128-bit N16-boot preset (N = 2^16, 2^15 slots): `make test-slow` only.

k = 2 (the batched CoeffToSlot keys alone are ≈ 8 GiB: docs/design/bootstrap.md §3.1; k = 4 needs ≈ 13.4 GiB and is
measured by `python -m hemlp.bench mambo`, not here). Peak RSS ≈ 15.4 GiB (bench/mambo_N16.json): run it alone (under
flock /work/wt/big.lock). Decrypted without decryption noise (with it, every pipeline reads 17.8 bits in
bench/mambo_N16.json, batched or not). Thresholds: 19 bits, below the single bootstrap's 19.8 (bench/boot_N16.json,
measured without decryption noise), and for the PCMM 1 bit less for its normalisation c = 2. Passed at N = 2^16
on 2026-11-25 (session 11, seeded key parts drawn inside the key-switch jobs), beside test_boot_slow's N16 test.
"""
import math
import warnings

import numpy as np
import pytest

from hemlp import fhe
from hemlp.bootstrap import BootParams
from hemlp.bootstrap.batch import BatchBootstrapKeys, BatchBootstrapper
from hemlp.bootstrap.mambo import S2C_LOG_MESSAGE_RATIO, MamboBootstrapper

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning")]


def bits(got, want) -> float:
    return -math.log2(float(np.max(np.abs(np.asarray(got) - np.asarray(want)))))


def test_batch_and_mambo_n16():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ctx = fhe.Context("N16-boot")
    sk, pk = ctx.keygen()
    bp = BootParams.for_context(ctx)
    keys = BatchBootstrapKeys.generate(ctx, sk, 2, bp)
    bb = BatchBootstrapper(ctx, keys)
    rng = np.random.default_rng(17)
    zs = [rng.uniform(-1, 1, ctx.slots) + 1j * rng.uniform(-1, 1, ctx.slots) for _ in range(2)]
    outs = bb.bootstrap_batch([ctx.encrypt(z, sk, level=1) for z in zs])
    for z, out in zip(zs, outs):
        assert out.level == ctx.max_level - bp.levels_consumed and out.scale == 2.0 ** 40
        assert bits(ctx.decrypt(out, sk, noise="none"), z) >= 19.0
    del bb
    s2c = BootParams.for_context(ctx, order="s2c_first", log_message_ratio=S2C_LOG_MESSAGE_RATIO)
    mkeys = BatchBootstrapKeys(s2c, 2, keys.conversion, keys.ms_galois, keys.galois, keys.relin, keys.cts_levels,
                               keys.stc_levels, keys.conj_level, keys.param_hash)
    mb = MamboBootstrapper(ctx, mkeys)
    X = rng.uniform(-1, 1, (2, ctx.slots))
    U = np.array([[0.7, -0.25], [0.5, 0.5]])
    ys = mb.pcmm_bootstrap(U, [ctx.encrypt(x, sk, level=s2c.stc_depth + 1) for x in X])
    for y, w in zip(ys, U @ X):
        assert y.level == mb.output_level
        assert bits(ctx.decrypt(y, sk, noise="none"), w) >= 18.0
