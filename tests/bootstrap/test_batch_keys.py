"""Batched bootstrapping / MaMBo keys (hemlp.bootstrap.batch_keys): memory estimates, seeded a-parts and the
container (type batch_bootstrap_keys), at test-N10-boot (insecure test chain, k = 2).

- estimate_bytes(ctx, k, params, seeded) equals the generated keys' memory_bytes exactly, seeded or not, for both
  orders; seeded keys hold k instead of k + 1 polynomials per batched CtS digit; S2C-first keys make SlotToCoeff's
  rotation keys for the bottom levels only.
- Seeded and unseeded keys give bit-identical results (the expansion of a seed is the polynomial it replaced):
  bootstrap_batch / pcmm_bootstrap with keys loaded seeded, loaded expanded, and in memory return the same
  ciphertexts, residue for residue.
- Truncated, corrupted, inconsistent or foreign files raise SerializationError / ContextMismatchError.
"""
import warnings

import numpy as np
import pytest

from hemlp import fhe
from hemlp.bootstrap import BootParams
from hemlp.bootstrap.batch import BatchBootstrapKeys, BatchBootstrapper
from hemlp.bootstrap.batch_keys import choose_k, estimate_bytes, key_breakdown, working_bytes
from hemlp.bootstrap.mambo import S2C_LOG_MESSAGE_RATIO, MamboBootstrapper
from hemlp.errors import ContextMismatchError, SerializationError
from hemlp.fhe import serialize as ser

pytestmark = pytest.mark.filterwarnings("ignore::hemlp.fhe.InsecureParametersWarning")


@pytest.fixture(scope="module")
def env():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ctx = fhe.Context("test-N10-boot", allow_insecure=True)
    sk, _ = ctx.keygen()
    bp = BootParams.for_context(ctx)
    s2c = BootParams.for_context(ctx, order="s2c_first", log_message_ratio=S2C_LOG_MESSAGE_RATIO)
    return ctx, sk, bp, s2c


@pytest.fixture(scope="module")
def cts_keys(env):
    ctx, sk, bp, _ = env
    return BatchBootstrapKeys.generate(ctx, sk, 2, bp, seeded=False)


def same(a, b) -> bool:
    """Two lists of ciphertexts equal residue for residue."""
    return len(a) == len(b) and all(x.level == y.level and x.scale == y.scale and
                                    all(np.array_equal(x.native.poly(i), y.native.poly(i)) for i in range(2))
                                    for x, y in zip(a, b))


def test_estimate_is_the_memory_and_seeding_saves_one_part_per_digit(env, cts_keys):
    ctx, sk, bp, s2c = env
    assert cts_keys.memory_bytes == estimate_bytes(ctx, 2, bp, seeded=False)
    seeded = BatchBootstrapKeys.generate(ctx, sk, 2, s2c)
    assert seeded.ms_galois.seeded and seeded.memory_bytes == estimate_bytes(ctx, 2, s2c)
    est = {s: key_breakdown(ctx, 2, bp, seeded=s) for s in (True, False)}
    assert est[False]["cts"] * 2 == est[True]["cts"] * 3                    # k + 1 -> k polynomials per digit
    assert key_breakdown(ctx, 2, s2c)["stc"] < est[True]["stc"]              # S2C-first: StC keys at the bottom
    assert max(seeded.stc_levels.values()) == s2c.stc_depth + 1
    assert seeded.nbytes == cts_keys.nbytes - (key_breakdown(ctx, 2, bp)["stc"] - key_breakdown(ctx, 2, s2c)["stc"])
    # estimates work from the parameters alone (the planner and the benchmark call them before any key exists)
    assert estimate_bytes(ctx.params, 4, bp) == estimate_bytes(ctx, 4, bp) > estimate_bytes(ctx, 2, bp)
    k, report = choose_k(ctx, estimate_bytes(ctx, 4, bp) + working_bytes(ctx, 4, bp) + 1, bp)
    assert k == 4 and report["k"] == 4 and "k = 8 needs" in report["reason"]
    assert choose_k(ctx, 1, bp)[0] == 1


def test_round_trip_is_bit_identical_seeded_or_not(env, cts_keys, tmp_path):
    ctx, sk, _, _ = env
    rng = np.random.default_rng(7)
    cts = [ctx.encrypt(rng.uniform(-1, 0.7, ctx.slots), sk, level=1) for _ in range(2)]
    want = BatchBootstrapper(ctx, cts_keys).bootstrap_batch(cts)
    cts_keys.save(tmp_path / "batch.keys", ctx)
    assert (tmp_path / "batch.keys").stat().st_size == len(cts_keys.to_bytes(ctx))
    for seeded in (True, False):
        loaded = BatchBootstrapKeys.load(tmp_path / "batch.keys", ctx, seeded=seeded)
        assert loaded.ms_galois.seeded == seeded and loaded.cts_levels == cts_keys.cts_levels
        assert same(BatchBootstrapper(ctx, loaded).bootstrap_batch(cts), want)
    dec = [ctx.decrypt(c, sk) for c in want]
    assert all(np.max(np.abs(d.real - c_in)) < 2.0 ** -15 for d, c_in in
               zip(dec, [ctx.decrypt(c, sk).real for c in cts]))


def test_mambo_from_saved_keys_is_bit_identical(env):
    ctx, sk, _, s2c = env
    keys = BatchBootstrapKeys.generate(ctx, sk, 2, s2c)          # seeded, as the model's keygen makes them
    rng = np.random.default_rng(8)
    xs = [rng.uniform(-1, 0.6, ctx.slots) for _ in range(3)]
    cts = [ctx.encrypt(x, sk, level=s2c.stc_depth + 1) for x in xs]
    U = rng.uniform(-1, 1, (2, 3)) / 3
    want = MamboBootstrapper(ctx, keys).pcmm_bootstrap(U, cts)
    loaded = BatchBootstrapKeys.from_bytes(keys.to_bytes(ctx), ctx, seeded=False)
    assert not loaded.ms_galois.seeded
    assert same(MamboBootstrapper(ctx, loaded).pcmm_bootstrap(U, cts), want)
    got = np.array([ctx.decrypt(c, sk).real for c in want])
    assert np.max(np.abs(got - U @ np.array(xs))) < 2.0 ** -12


def test_bad_files_are_typed_errors(env, cts_keys):
    ctx, _, _, _ = env
    data = cts_keys.to_bytes(ctx)
    with pytest.raises(SerializationError, match="truncated|too short"):
        BatchBootstrapKeys.from_bytes(data[: len(data) // 2], ctx)
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 1
    with pytest.raises(SerializationError, match="checksum"):
        BatchBootstrapKeys.from_bytes(bytes(flipped), ctx)
    _, phash, h, arrays = ser.unpack(data, ctx.hash, "batch_bootstrap_keys")
    h = {k: v for k, v in h.items() if k != "arrays"}

    def repack(header, arrs):
        return ser.pack("batch_bootstrap_keys", phash, header, arrs)

    bad = [a.copy() for a in arrays]
    bad[-1][0, 0] = np.uint64(2 ** 64 - 1)                 # a batched CtS b-part residue above its modulus
    with pytest.raises(SerializationError, match="residue out of range"):
        BatchBootstrapKeys.from_bytes(repack(h, bad), ctx)
    bad = [a.copy() for a in arrays]
    bad[3][1, 5] = np.uint64(2 ** 63)                        # a {q0, p0} conversion key residue
    with pytest.raises(SerializationError, match="residue out of range"):
        BatchBootstrapKeys.from_bytes(repack(h, bad), ctx)
    with pytest.raises(SerializationError, match="arrays"):
        BatchBootstrapKeys.from_bytes(repack(dict(h, k=3), arrays), ctx)
    with pytest.raises(SerializationError, match="misses field .key_id."):
        BatchBootstrapKeys.from_bytes(repack(dict(h, conversion={}), arrays), ctx)
    with pytest.raises(SerializationError, match="expected a serialised batch_bootstrap_keys"):
        BatchBootstrapKeys.from_bytes(cts_keys.galois.to_bytes(), ctx)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        other = fhe.Context("test-N12-boot", allow_insecure=True)
    with pytest.raises(ContextMismatchError):
        BatchBootstrapKeys.from_bytes(data, other)
    with pytest.raises(ContextMismatchError):
        cts_keys.to_bytes(other)
