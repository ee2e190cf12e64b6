"""S2C-first batched bootstrapping and MaMBo (docs/design/bootstrap.md §1.4, §3.4) on the insecure test-N12-boot chain
(CtS 3, EvalMod 8 levels; R = 14), against numpy.

- S2C-first bootstrap_batch (k = 2, and k = 1: a single S2C-first bootstrap): random complex slots >= 21 bits
  max, >= 23 mean (measured 22.0-22.1 / 23.6-23.7); output level L − 11, scale 2^40 exactly; real stays real.
- pcmm_bootstrap(U, X) = Bootstrap(U·X + b) against numpy U @ X + b (d1 = 3 and 4 with k = 2: the last batch
  padded): >= 18 bits absolute with |U·X| up to ≈ 3 (measured 19.4-20.1; c = 4 costs 2 bits of the 2^40
  scale) and the same plaintext, within 2^-16.5, as pcmm.pcmm at an application level followed by a CtS-first
  single bootstrap (which itself reaches 17.7-19 bits on these inputs: >= 17 asserted).
"""
import math
import warnings

import numpy as np
import pytest

from hemlp import fhe, pcmm
from hemlp.bootstrap import BootParams, BootstrapKeys, Bootstrapper
from hemlp.bootstrap.batch import BatchBootstrapKeys
from hemlp.bootstrap.mambo import S2C_LOG_MESSAGE_RATIO, MamboBootstrapper
from hemlp.errors import EncodingError, LevelError, ParameterError, ScaleMismatchError, ShapeError


def bits(got, want) -> float:
    err = float(np.max(np.abs(np.asarray(got) - np.asarray(want))))
    return math.inf if err == 0 else -math.log2(err)


@pytest.fixture(scope="module")
def env():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ctx = fhe.Context("test-N12-boot", allow_insecure=True)
    sk, pk = ctx.keygen()
    bp = BootParams.for_context(ctx, order="s2c_first", log_message_ratio=S2C_LOG_MESSAGE_RATIO)
    mb = MamboBootstrapper(ctx, BatchBootstrapKeys.generate(ctx, sk, 2, bp))
    return ctx, sk, pk, bp, mb


def test_s2c_first_batch(env):
    ctx, sk, pk, bp, mb = env
    rng = np.random.default_rng(40)
    zs = [rng.uniform(-1, 1, ctx.slots) + 1j * rng.uniform(-1, 1, ctx.slots) for _ in range(2)]
    outs = mb.bootstrap_batch([ctx.encrypt(z, pk, level=lv) for z, lv in zip(zs, (4, 2))])
    for z, out in zip(zs, outs):
        assert out.level == ctx.max_level - 11 == mb.output_level and out.scale == 2.0 ** 40
        assert out.encoding == "slot" and out.is_complex
        d = ctx.decrypt(out, sk)
        assert bits(d, z) >= 21
        assert -math.log2(float(np.mean(np.abs(d - z)))) >= 23


def test_s2c_first_single_and_real(env):
    ctx, sk, pk, bp, _ = env
    mb1 = MamboBootstrapper(ctx, BatchBootstrapKeys.generate(ctx, sk, 1, bp))
    rng = np.random.default_rng(41)
    x = rng.uniform(-1, 1, ctx.slots)
    (out,) = mb1.bootstrap_batch([ctx.encrypt(x, pk, level=3)])
    assert not out.is_complex and out.level == mb1.output_level
    assert bits(ctx.decrypt(out, sk), x) >= 21


@pytest.mark.parametrize("d1", [4, 3])
def test_pcmm_bootstrap_equals_pcmm_then_bootstrap(env, d1):
    ctx, sk, pk, bp, mb = env
    rng = np.random.default_rng(50 + d1)
    d2 = 4
    X = rng.uniform(-1, 1, (d2, ctx.slots))
    U = rng.uniform(-1, 1, (d1, d2))
    b = rng.uniform(-1, 1, d1)
    want = U @ X + b[:, None]
    cts = [ctx.encrypt(x, pk, level=5) for x in X]
    ys = mb.pcmm_bootstrap(U, cts, bias=b)
    assert len(ys) == d1
    single = Bootstrapper(ctx, BootstrapKeys.generate(ctx, sk))
    C = pcmm.CtMatrix(ctx, [ctx.encrypt(x, pk, level=5) for x in X], (d2, ctx.slots), 1, "rlwe")
    c = 2.0 ** math.ceil(math.log2(np.max(np.sum(np.abs(U), axis=1))))
    sep = pcmm.pcmm(U / c, C, bias=b / c)                       # the conventional order: PCMM, then bootstrap
    for r in range(d1):
        y = ys[r]
        assert y.level == mb.output_level and y.scale == 2.0 ** 40 / c and not y.is_complex   # scale Δ/c exactly
        d = ctx.decrypt(y, sk)
        assert bits(d, want[r]) >= 18, (r, bits(d, want[r]))
        ref = c * ctx.decrypt(single.bootstrap(sep.cts[r]), sk)
        assert bits(ref, want[r]) >= 16.5        # the conventional path: measured 17.66-19.9 over 56 fresh encryptions
        assert bits(d, ref) >= 16.5


def test_typed_errors(env):
    ctx, sk, pk, bp, mb = env
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, ctx.slots)
    a = ctx.encrypt(x, pk, level=3)
    with pytest.raises(ShapeError):                 # U's columns must match the ciphertexts
        mb.pcmm_bootstrap(np.ones((2, 3)), [a, a])
    with pytest.raises(LevelError):                 # SlotToCoeff + PCMM need stc_depth + 1 levels
        mb.pcmm_bootstrap(np.ones((2, 2)), [ctx.encrypt(x, pk, level=2)] * 2)
    with pytest.raises(LevelError):
        mb.bootstrap_batch([ctx.encrypt(x, pk, level=1)] * 2)
    with pytest.raises(ScaleMismatchError):
        mb.bootstrap_batch([a, ctx.encrypt(x, pk, level=3, scale=2.0 ** 39)])
    with pytest.raises(ShapeError):
        mb.pcmm_bootstrap(np.ones((2, 2)), [a, a], bias=[1.0, 2.0, 3.0])
    cts_keys = BatchBootstrapKeys.generate(ctx, sk, 1)
    with pytest.raises(ParameterError):             # CtS-first keys
        MamboBootstrapper(ctx, cts_keys)


def test_pairs_share_one_complex_refresh(env):
    """pair=True: two real ciphertexts joined (a + i·b, exact) before SlotToCoeff (bootstrap_batch) or after the PCMM
    in the coefficients (pcmm_bootstrap), refreshed at Δ/2 and split with a conjugation: real outputs at Δ exactly,
    an odd count padded. Asymmetric data (shifted ranges per row), so a swapped half or a sign would show."""
    ctx, sk, pk, bp, mb = env
    rng = np.random.default_rng(60)
    xs = [rng.uniform(-1 + 0.3 * i, 0.6, ctx.slots) for i in range(3)]
    outs = mb.bootstrap_batch([ctx.encrypt(x, pk, level=lv) for x, lv in zip(xs, (4, 3, 2))], pair=True)
    assert len(outs) == 3
    for x, o in zip(xs, outs):
        assert o.level == mb.output_level and o.scale == 2.0 ** 40 and not o.is_complex
        assert bits(ctx.decrypt(o, sk), x) >= 21              # measured 23.5-24.1
    X = np.stack([rng.uniform(-0.5, 1, ctx.slots) for _ in range(4)])
    U = rng.uniform(-1, 1, (5, 4))
    b = rng.uniform(-1, 1, 5)
    c = 8.0                                                    # >= ‖U‖·max|X|, given directly
    ys = mb.pcmm_bootstrap(U, [ctx.encrypt(x, pk, level=5) for x in X], bias=b, c=c, pair=True)
    want = U @ X + b[:, None]
    assert len(ys) == 5
    for w, y in zip(want, ys):
        assert y.level == mb.output_level and y.scale == 2.0 ** 40 / c and not y.is_complex
        assert bits(ctx.decrypt(y, sk), w) >= 18               # measured 19.9-20.6 at c = 4; c = 8 costs a bit
    with pytest.raises(ParameterError, match="power of two"):
        mb.pcmm_bootstrap(U, [ctx.encrypt(x, pk, level=5) for x in X], c=3.0)
    z = ctx.encrypt(X[0] + 1j * X[1], pk, level=5)
    with pytest.raises(EncodingError, match="pair=True"):
        mb.bootstrap_batch([z, z], pair=True)
    with pytest.raises(EncodingError, match="pair=True"):
        mb.pcmm_bootstrap(np.ones((1, 2)), [z, z], pair=True)
