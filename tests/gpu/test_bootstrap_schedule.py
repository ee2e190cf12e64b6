"""hemlp.gpu.bootstrap runs the CPU Bootstrapper's pipeline operation for operation.

The device pipeline is run here on stand-ins whose every step is the CPU core's (tests/gpu/core_backed.py: the
evaluator; the encapsulation switch, ModRaise and the BSGS transforms through the core's own calls), and its output
must be the CPU Bootstrapper's words exactly: any operation issued in another order, at another level or scale,
would change them. Each device kernel the pipeline maps to is checked against the core by the golden cases
(test_gpu_bit_exact on a GPU machine).
"""
import warnings

import numpy as np
import pytest

from hemlp import fhe
from hemlp.bootstrap import Bootstrapper, BootstrapKeys
from hemlp.errors import EncodingError
from hemlp.gpu import bootstrap as gboot
from hemlp.gpu.device import DeviceCiphertext, DeviceSpec
from tests.gpu.core_backed import Buf, CoreBackedEvaluator, patch_bootstrap


@pytest.fixture(scope="module")
def env():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ctx = fhe.Context("test-N12-boot", allow_insecure=True, decrypt_noise="none")
    sk, pk = ctx.keygen()
    return ctx, sk, pk, Bootstrapper(ctx, BootstrapKeys.generate(ctx, sk))


@pytest.fixture
def core_backed(monkeypatch):
    patch_bootstrap(monkeypatch)


@pytest.mark.parametrize("level", [1, 4, 0])
def test_the_device_pipeline_is_the_cpu_bootstrap(env, core_backed, level):
    ctx, sk, pk, boot = env
    rng = np.random.default_rng(20 + level)
    z = rng.uniform(-1, 1, ctx.slots) + 1j * rng.uniform(-1, 1, ctx.slots)
    ct = ctx.encrypt(z, pk, level=level)
    want = boot.bootstrap(ct).native
    dev = CoreBackedEvaluator(ctx, DeviceSpec.from_context(ctx))
    o = ct.native
    d = DeviceCiphertext([Buf(o.poly(j)) for j in range(2)], o.level, o.scale, o.slots, o.encoding, o.is_complex,
                         o.key_id, ctx.hash)
    got = gboot.DeviceBootstrapper(dev, boot).bootstrap(d)
    assert (got.level, got.scale, got.slots, got.encoding, got.is_complex) == \
        (want.level, want.scale, want.slots, want.encoding, want.is_complex)
    assert all(np.array_equal(got.polys[j].arr, want.poly(j)) for j in range(2))
    # timed by stage: the same words, and every stage's seconds
    stages = {}
    timed = gboot.DeviceBootstrapper(dev, boot).bootstrap(d, stages=stages)
    assert all(np.array_equal(timed.polys[j].arr, want.poly(j)) for j in range(2))
    assert list(stages) == ["scale_down_mod_raise", "coeff_to_slot", "eval_mod", "slot_to_coeff"]
    assert all(s > 0 for s in stages.values())


@pytest.mark.slow
def test_the_device_pipeline_is_the_cpu_bootstrap_at_128_bits(core_backed):
    """The same at N16-boot (128-bit, 2^15 slots): the schedule of the run a GPU machine will time."""
    ctx = fhe.Context("N16-boot", decrypt_noise="none")
    sk, pk = ctx.keygen()
    boot = Bootstrapper(ctx, BootstrapKeys.generate(ctx, sk))
    z = np.random.default_rng(5).uniform(-1, 1, ctx.slots)
    ct = ctx.encrypt(z, pk, level=0)
    want = boot.bootstrap(ct).native
    o = ct.native
    d = DeviceCiphertext([Buf(o.poly(j)) for j in range(2)], o.level, o.scale, o.slots, o.encoding, o.is_complex,
                         o.key_id, ctx.hash)
    got = gboot.DeviceBootstrapper(CoreBackedEvaluator(ctx, DeviceSpec.from_context(ctx)), boot).bootstrap(d)
    assert (got.level, got.scale) == (want.level, want.scale)
    assert all(np.array_equal(got.polys[j].arr, want.poly(j)) for j in range(2))


def device_ct(ctx, ct):
    o = ct.native
    return DeviceCiphertext([Buf(o.poly(j)) for j in range(2)], o.level, o.scale, o.slots, o.encoding, o.is_complex,
                            o.key_id, ctx.hash)


def same_words(got, want) -> bool:
    return (got.level, got.scale, got.slots, got.encoding, got.is_complex) == \
        (want.level, want.scale, want.slots, want.encoding, want.is_complex) and \
        all(np.array_equal(got.polys[j].arr, want.poly(j)) for j in range(2))


@pytest.mark.parametrize("divisor", [4, 2])
def test_sparse_slots_are_the_cpu_bootstrap(env, core_backed, divisor):
    """n = N/8 and N/4 slots (the subring trace's log2(gap) rotations first): the CPU Bootstrapper's words."""
    ctx, sk, pk, _ = env
    from hemlp.bootstrap import BootParams

    n = ctx.slots // divisor
    boot = Bootstrapper(ctx, BootstrapKeys.generate(ctx, sk, BootParams.for_context(ctx, slots=n)))
    z = np.random.default_rng(30 + divisor).uniform(-1, 1, n)
    ct = ctx.encrypt(z, pk, level=1, slots=n)
    got = gboot.DeviceBootstrapper(CoreBackedEvaluator(ctx, DeviceSpec.from_context(ctx)), boot).bootstrap(
        device_ct(ctx, ct))
    assert same_words(got, boot.bootstrap(ct).native)


def test_a_pair_of_real_ciphertexts_is_the_cpu_bootstrap_pair(env, core_backed):
    ctx, sk, pk, boot = env
    rng = np.random.default_rng(40)
    a, b = (ctx.encrypt(rng.uniform(-1, 1, ctx.slots), pk, level=2) for _ in range(2))
    dboot = gboot.DeviceBootstrapper(CoreBackedEvaluator(ctx, DeviceSpec.from_context(ctx)), boot)
    got = dboot.bootstrap_pair(device_ct(ctx, a), device_ct(ctx, b))
    want = boot.bootstrap_pair(a, b)
    assert all(same_words(g, w.native) for g, w in zip(got, want))
    with pytest.raises(EncodingError, match="two real"):
        dboot.bootstrap_pair(device_ct(ctx, ctx.encrypt(np.ones(ctx.slots) * 1j, pk, level=2)), device_ct(ctx, b))
