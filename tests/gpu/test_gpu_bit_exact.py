"""The CUDA backend against the CPU core, bit for bit (runs on a machine with an NVIDIA GPU and the library built:
scripts/gpu_check.sh; elsewhere every test here skips, saying why).

Two oracles: the committed digests of the CPU core's outputs on seeded inputs (tests/gpu/golden_digests.json, kept
true by test_golden_digests.py), which need no CPU core on the GPU machine; and, where hemlp._core is built too,
the CPU core itself on real encryptions, with the decrypted values checked against numpy.
"""
import importlib.util
import warnings

import numpy as np
import pytest

from hemlp.gpu import golden
from hemlp.gpu.library import device_info

INFO = device_info()
pytestmark = pytest.mark.skipif(not INFO["available"], reason=f"no CUDA device: {INFO['reason']}")
HAVE_CORE = importlib.util.find_spec("hemlp._core") is not None


@pytest.fixture(scope="module")
def table():
    return golden.load_table()


@pytest.fixture(scope="module")
def devices(table):
    from hemlp.gpu.device import CudaEvaluator, DeviceSpec

    return {p: CudaEvaluator(DeviceSpec.from_dict(s)) for p, s in table["specs"].items()}


@pytest.mark.parametrize("case", golden.CASES, ids=lambda c: c.name)
def test_device_matches_cpu_digest(case, table, devices):
    assert golden.compute_gpu(case, devices[case.preset]) == table["cases"][case.name]


def test_results_do_not_depend_on_earlier_work(table, devices):
    """The same case twice, with other work between: the same words (no stale pool memory is read)."""
    case = next(c for c in golden.CASES if c.op == "mul_relin_rescale" and c.preset == "test-N12")
    dev = devices["test-N12"]
    first = golden.compute_gpu(case, dev)
    golden.compute_gpu(next(c for c in golden.CASES if c.op == "rotate_hoisted"), dev)
    assert golden.compute_gpu(case, dev) == first == table["cases"][case.name]


@pytest.mark.parametrize("d1, d2, ncols, bU", [(8192, 64, 500, 40), (16, (1 << 16) + 37, 40, 8), (48, 192, 4099, 1)])
def test_int8_engine_gives_the_fp64_engine_s_words(table, devices, d1, d2, ncols, bU):
    """The int8 GEMM engine where its shapes split: several column chunks (d1 8192 at bU 40: 160 columns a chunk,
    the last ragged), two K-blocks (d2 > 2^16), unaligned sizes; the fp64 engine's words, and Python integers' on
    64 entries (the golden cases hold the CPU core's words for both engines)."""
    from hemlp.gpu.device import DeviceSpec

    spec = DeviceSpec.from_dict(table["specs"]["N16-boot"])
    dev, q = devices["N16-boot"], int(spec.q[0])
    rng = np.random.default_rng(d1 + d2)
    U = rng.integers(-(1 << bU), (1 << bU) + 1, size=(d1, d2), dtype=np.int64)
    X = rng.integers(0, q, size=(d2, ncols), dtype=np.uint64)
    got = dev.modgemm(U, X, q, bU, mult=q - 5, engine="int8")
    assert np.array_equal(got, dev.modgemm(U, X, q, bU, mult=q - 5, engine="fp64"))
    for r, c in zip(rng.integers(0, d1, 64), rng.integers(0, ncols, 64)):
        want = sum(int(U[r, k]) * int(X[k, c]) for k in range(d2)) * (q - 5) % q
        assert int(got[r, c]) == want


@pytest.mark.skipif(not HAVE_CORE, reason="the CPU core (hemlp._core) is not built on this machine")
class TestAgainstTheLiveCore:
    @pytest.fixture(scope="class")
    def setup(self):
        from hemlp import fhe, gpu

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ctx = fhe.Context("test-N12", allow_insecure=True, decrypt_noise="none")
        sk, pk = ctx.keygen()
        rlk, gk = ctx.relin_key(sk), ctx.rotation_keys(sk, [1, -2])
        dev = gpu.CudaEvaluator(ctx)
        return ctx, sk, pk, rlk, gk, dev, dev.upload_relin_key(rlk), dev.upload_galois_keys(gk)

    def test_mul_rotate_bit_identical_and_correct(self, setup):
        ctx, sk, pk, rlk, gk, dev, drlk, dgk = setup
        rng = np.random.default_rng(3)
        x, y = rng.uniform(-1, 1, ctx.slots), rng.uniform(-1, 0.5, ctx.slots)
        a, b = ctx.encrypt(x, pk), ctx.encrypt(y, pk)
        cpu = ctx.rotate(ctx.mul(a, b, relin_key=rlk, rescale=True), 1, gk)
        got = dev.to_host(dev.rotate(dev.mul(dev.to_device(a), dev.to_device(b), drlk, rescale=True), 1, dgk))
        assert all(np.array_equal(cpu.native.poly(j), got.native.poly(j)) for j in range(2))
        assert got.level == cpu.level and got.scale == cpu.scale
        err = np.max(np.abs(ctx.decrypt(got, sk).real - np.roll(x * y, -1)))
        assert err < 2.0 ** -18

    def test_typed_errors(self, setup):
        from hemlp.errors import KeyMismatchError, LevelError, MissingKeyError

        ctx, sk, pk, rlk, gk, dev, drlk, dgk = setup
        a = dev.to_device(ctx.encrypt(np.ones(4), pk))
        low = dev.rescale(a)
        with pytest.raises(LevelError):
            dev.add(a, low)
        with pytest.raises(MissingKeyError):
            dev.rotate(a, 3, dgk)
        with pytest.raises(KeyMismatchError):
            dev.relinearize(dev.mul(a, a), dgk[dev.galois_element(1)])

    def test_mlwe_pcmm_bit_identical_and_correct(self, setup):
        """An MLWE(k = 4) product of real encryptions: the CPU product's words (hemlp.pcmm, the same quantised U,
        K = 1, no rescale), and the quantised U times M after decryption."""
        from hemlp import pcmm
        from hemlp.gpu.device import GemmPlan

        ctx, sk, pk, rlk, gk, dev, drlk, dgk = setup
        rng = np.random.default_rng(9)
        k, d3 = 4, ctx.N // 4
        M = rng.uniform(-1, 1, (3 * k, d3))
        U = rng.uniform(-0.5, 0.5, (2 * k, 3 * k))
        C = pcmm.encrypt_matrix(ctx, M, pk, format="mlwe", encoding="coeff", level=1)
        keys = pcmm.modpack_keys(ctx, sk, k)
        want = pcmm.pcmm(U, C, keys=keys, weight_bits=8, rescale=False)
        Uq, delta = pcmm.quantize(U, 8)
        got = dev.pcmm_mlwe(GemmPlan(dev, Uq, 8), [dev.to_device(c) for c in C.cts], k, 1, delta,
                            [dev.upload_switch_key(key) for key in keys.native])
        assert len(got) == len(want.cts) == 2
        for g, w in zip(got, want.cts):
            h = dev.to_host(g)
            assert (h.level, h.scale) == (w.level, w.scale)
            assert all(np.array_equal(h.native.poly(j), w.native.poly(j)) for j in range(2))
        Y = pcmm.decrypt_matrix(ctx, pcmm.CtMatrix(ctx, [dev.to_host(g) for g in got], want.shape, 1, "mlwe"), sk)
        assert np.max(np.abs(Y - (Uq / delta) @ M)) < 2.0 ** -20   # the quantised U's product, to CKKS precision
    def test_msrlwe_pcmm_bit_identical_and_correct(self, setup):
        """An MSRLWE product (2 chunks sharing each row's a-part) of real encryptions: the CPU product's words
        (hemlp.pcmm, the same quantised U, K = 1, no rescale) through to_device / to_host, and the quantised U times M
        after decryption with the multi-secret key."""
        from hemlp import pcmm
        from hemlp.gpu import msrlwe
        from hemlp.gpu.device import GemmPlan

        ctx, sk, pk, rlk, gk, dev, drlk, dgk = setup
        rng = np.random.default_rng(11)
        msk = pcmm.multi_secret_key(ctx, 2)
        M = rng.uniform(-1, 1, (6, 2 * ctx.slots))
        U = rng.uniform(-0.5, 0.5, (4, 6))
        C = pcmm.encrypt_matrix(ctx, M, msk, level=1)
        want = pcmm.pcmm(U, C, weight_bits=8, rescale=False)
        Uq, delta = pcmm.quantize(U, 8)
        got = [msrlwe.to_host(dev, r) for r in msrlwe.pcmm_msrlwe(dev, GemmPlan(dev, Uq, 8),
                                                                  [msrlwe.to_device(dev, r) for r in C.cts], 1, delta)]
        assert len(got) == len(want.cts) == 4
        for h, w in zip(got, want.cts):
            h, w = h.native, w.native
            assert (h.level, h.scale, h.k) == (w.level, w.scale, w.k)
            assert np.array_equal(h.poly_a(), w.poly_a())
            assert all(np.array_equal(h.poly_b(j), w.poly_b(j)) for j in range(w.k))
        Y = pcmm.decrypt_matrix(ctx, pcmm.CtMatrix(ctx, got, want.shape, want.chunks, "msrlwe"), msk)
        assert np.max(np.abs(Y - (Uq / delta) @ M)) < 2.0 ** -20   # the quantised U's product, to CKKS precision

@pytest.mark.skipif(not HAVE_CORE, reason="the CPU core (hemlp._core) is not built on this machine")
def test_device_bootstrap_is_the_cpu_bootstrap():
    """The whole pipeline on the device (test-N12-boot): the CPU Bootstrapper's words, and the input's values."""
    from hemlp import fhe, gpu
    from hemlp.bootstrap import Bootstrapper, BootstrapKeys
    from hemlp.gpu.bootstrap import DeviceBootstrapper

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ctx = fhe.Context("test-N12-boot", allow_insecure=True, decrypt_noise="none")
    sk, pk = ctx.keygen()
    boot = Bootstrapper(ctx, BootstrapKeys.generate(ctx, sk))
    dev = gpu.CudaEvaluator(ctx)
    dboot = DeviceBootstrapper(dev, boot)
    rng = np.random.default_rng(4)
    z = rng.uniform(-1, 1, ctx.slots)
    ct = ctx.encrypt(z, pk, level=1)
    want = boot.bootstrap(ct)
    got = dev.to_host(dboot.bootstrap(dev.to_device(ct)))
    assert got.level == want.level and got.scale == want.scale
    assert all(np.array_equal(got.native.poly(j), want.native.poly(j)) for j in range(2))
    assert np.max(np.abs(ctx.decrypt(got, sk).real - z)) < 2.0 ** -10


@pytest.mark.skipif(not HAVE_CORE, reason="the CPU core (hemlp._core) is not built on this machine")
def test_device_sparse_and_pair_bootstraps_are_the_cpu_s():
    """Sparse slots (n = N/8: the subring trace on the device) and a pair of real ciphertexts in one bootstrap, at
    test-N12-boot: the CPU Bootstrapper's words."""
    from hemlp import fhe, gpu
    from hemlp.bootstrap import BootParams, Bootstrapper, BootstrapKeys
    from hemlp.gpu.bootstrap import DeviceBootstrapper

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ctx = fhe.Context("test-N12-boot", allow_insecure=True, decrypt_noise="none")
    sk, pk = ctx.keygen()
    dev = gpu.CudaEvaluator(ctx)
    rng = np.random.default_rng(5)
    n = ctx.slots // 4
    sparse = Bootstrapper(ctx, BootstrapKeys.generate(ctx, sk, BootParams.for_context(ctx, slots=n)))
    ct = ctx.encrypt(rng.uniform(-1, 1, n), pk, level=1, slots=n)
    got, want = dev.to_host(DeviceBootstrapper(dev, sparse).bootstrap(dev.to_device(ct))), sparse.bootstrap(ct)
    assert (got.level, got.scale, got.slots) == (want.level, want.scale, want.slots)
    assert all(np.array_equal(got.native.poly(j), want.native.poly(j)) for j in range(2))
    full = Bootstrapper(ctx, BootstrapKeys.generate(ctx, sk))
    a, b = (ctx.encrypt(rng.uniform(-1, 1, ctx.slots), pk, level=1) for _ in range(2))
    got = DeviceBootstrapper(dev, full).bootstrap_pair(dev.to_device(a), dev.to_device(b))
    for g, w in zip(got, full.bootstrap_pair(a, b)):
        h = dev.to_host(g)
        assert all(np.array_equal(h.native.poly(j), w.native.poly(j)) for j in range(2))
