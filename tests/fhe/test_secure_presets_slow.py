"""The 128-bit presets end to end (run with `make test-slow`)."""
import numpy as np
import pytest

from hemlp import fhe
from tests.conftest import bits


@pytest.mark.slow
@pytest.mark.parametrize("name,min_bits", [("N14-d6", 20), ("N15-d10", 23)])
def test_secure_preset_ops(name, min_bits, rng):
    ctx = fhe.Context(name)
    sk, pk = ctx.keygen()
    rlk, gk = ctx.relin_key(sk), ctx.rotation_keys(sk, [1, -3])
    x, y = rng.uniform(-1, 1, ctx.slots), rng.uniform(-1, 1, ctx.slots)
    a, b = ctx.encrypt(x, pk), ctx.encrypt(y, sk)
    assert bits(ctx.decrypt(ctx.rescale(ctx.mul(a, b, relin_key=rlk)), sk) - x * y) > min_bits
    assert bits(ctx.decrypt(ctx.rotate(a, -3, gk), sk) - np.roll(x, 3)) > min_bits
    c = a
    for _ in range(ctx.max_level):  # the whole chain
        c = ctx.rescale(ctx.mul(c, c, relin_key=rlk))
    assert c.level == 0
    assert bits(ctx.decrypt(c, sk) - x ** (2 ** ctx.max_level)) > 8
