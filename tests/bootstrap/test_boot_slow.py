"""Bootstrapping at the 128-bit N16-boot preset (N = 2^16, 2^15 slots): `make test-slow` only.

Target (issue #16, BOOTSTRAP.md T8-slow): >= 20 bits max error over all 2^15 random complex slots in
[-1, 1]², >= 12 levels left at scale 2^40 exactly, peak RSS <= 12 GiB. Needs ~10 GiB and minutes.
"""
import math
import resource

import numpy as np
import pytest

from hemlp import ckks
from hemlp.bootstrap import BootstrapKeys, Bootstrapper


@pytest.mark.slow
def test_n16_boot_full_slots():
    ctx = ckks.Context("N16-boot")
    sk, pk = ctx.keygen()
    boot = Bootstrapper(ctx, BootstrapKeys.generate(ctx, sk))
    rng = np.random.default_rng(16)
    z = rng.uniform(-1, 1, ctx.slots) + 1j * rng.uniform(-1, 1, ctx.slots)
    out = boot.bootstrap(ctx.encrypt(z, pk, level=1))
    assert out.level == boot.output_level >= 12 and out.scale == 2.0 ** 40
    err = np.abs(ctx.decrypt(out, sk) - z)
    assert -math.log2(float(err.max())) >= 20.0
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2.0 ** 20
    assert peak_gib <= 12.0
