"""Issue #30's driver memory: an encrypted batch written to its file a row at a time (CompiledModel.encrypt(...,
path=)) and run from the file mapped (EncryptedBatch.load(..., mapped=True)), the Ray driver importing one block at
a time; the bootstrapping keys' bytes not kept after a run; staged key files pruned (prune_staged_keys).
test-N12-boot, one local Ray of 2 CPUs, RayProgram driven directly (as tests/runtime/test_staged_keys.py does)."""
import gc
import os
import tracemalloc
import warnings

import numpy as np
import pytest

ray = pytest.importorskip("ray")
torch = pytest.importorskip("torch")

import hemlp  # noqa: E402
from hemlp import pcmm  # noqa: E402
from hemlp.errors import SerializationError  # noqa: E402
from hemlp.run_options import StagedKeys  # noqa: E402
from hemlp.runtime.artifacts import EncryptedBatch, MappedCtMatrix  # noqa: E402
from hemlp.runtime.ray import node_keys  # noqa: E402
from hemlp.runtime.ray.program import RayProgram  # noqa: E402
from hemlp.runtime.shared_keys import prune_staged_keys, stage_shared_keys, staged_path  # noqa: E402
from tests.compiler.conftest import mlp  # noqa: E402
from tests.runtime.boot_case import boot_mlp  # noqa: E402
from tests.runtime.key_sets import eval_key_sets  # noqa: E402


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    """A bootstrapped layout (A) MLP 6-8-8-3 at test-N12-boot (batched k = 2, the N16 job's pipeline), its keys, an
    input encrypted to a file and the in-process output of that file's batch."""
    cm, x = boot_mlp(0.8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sk, ek = cm.keygen()
        path = cm.encrypt(x, sk, path=tmp_path_factory.mktemp("batch") / "input.hct")
        whole = EncryptedBatch.load(path, cm)
        ref = cm.run(whole, ek, threads=1)
    return dict(cm=cm, sk=sk, ek=ek, x=x, path=path, whole=whole, ref=ref)


def bits(C) -> list:
    return [c.to_bytes() for c in C.cts]


def one_ct(case) -> int:
    """The bytes of one input ciphertext: a mapped batch's block_bytes for blocks of one row (one chunk here)."""
    ctx, whole = case["cm"].context, case["whole"]
    return 2 * (whole.level + 1) * ctx.N * 8


# ---------------------------------------------------------------------------------------------- the file
def test_encrypt_to_file_writes_what_save_writes_and_decrypts_as_encrypt(case, tmp_path):
    cm, sk, x, path, whole = case["cm"], case["sk"], case["x"], case["path"], case["whole"]
    assert path.is_file() and not [p for p in path.parent.iterdir() if p != path]     # no temporary file left
    whole.save(tmp_path / "again.hct")                 # the loader's batch saved: the same bytes, byte for byte
    assert (tmp_path / "again.hct").read_bytes() == path.read_bytes()
    plain = cm.encrypt(x, sk)                          # fresh randomness: the same values, not the same bits
    assert (whole.batch, whole.shape, whole.level, whole.num_ciphertexts, whole.key_id, whole.ctm.chunks) == (
        plain.batch, plain.shape, plain.level, plain.num_ciphertexts, plain.key_id, plain.ctm.chunks)
    ctx = cm.context
    a, b = pcmm.decrypt_matrix(ctx, whole.ctm, sk), pcmm.decrypt_matrix(ctx, plain.ctm, sk)
    assert np.abs(a[:, :len(x)] - x.T).max() < 1e-4 and np.abs(a - b).max() < 1e-4
    mapped = EncryptedBatch.load(path, cm, mapped=True)
    assert mapped.mapped and not whole.mapped and isinstance(mapped.ctm, MappedCtMatrix)
    assert (mapped.batch, mapped.shape, mapped.level, mapped.num_ciphertexts, mapped.key_id) == (
        whole.batch, whole.shape, whole.level, whole.num_ciphertexts, whole.key_id)
    assert mapped.ctm.import_stats["imported"] == 0                      # nothing imported until used
    # the in-process runtime imports all of it on first use: the same bits as the loaded batch
    assert bits(cm.run(mapped, case["ek"], threads=1).ctm) == bits(case["ref"].ctm)
    assert mapped.ctm.import_stats["imported"] == whole.num_ciphertexts
    # read at a lower level: each ciphertext's primes dropped as it is imported
    low = EncryptedBatch.load(path, cm, mapped=True).ctm.dropped(whole.level - 1)
    assert low.level == whole.level - 1
    assert bits(low) == [ctx.drop_level(c, whole.level - 1).to_bytes() for c in whole.ctm.cts]
    assert [c.to_bytes() for c in low.block(slice(1, 3), slice(0, 1))] == bits(low)[1:3]


def test_a_corrupted_file_is_refused(case, tmp_path):
    cm, raw = case["cm"], bytearray(case["path"].read_bytes())
    bad = tmp_path / "bad.hct"
    raw[len(raw) // 2] ^= 0x01                          # a bit of a ciphertext's residues
    bad.write_bytes(raw)
    with pytest.raises(SerializationError, match="checksum mismatch"):
        EncryptedBatch.load(bad, cm)
    mapped = EncryptedBatch.load(bad, cm, mapped=True)  # the header holds: refused on use, before any result
    with pytest.raises(SerializationError, match="checksum mismatch.*re-transfer"):
        mapped.ctm.verify()
    with pytest.raises(SerializationError, match="checksum mismatch"):
        cm.run(mapped, case["ek"], threads=1)
    bad.write_bytes(case["path"].read_bytes()[:-100])   # truncated
    with pytest.raises(SerializationError):
        EncryptedBatch.load(bad, cm, mapped=True)
    raw = bytearray(case["path"].read_bytes())
    raw[60] ^= 0x20                                     # the header
    bad.write_bytes(raw)
    with pytest.raises(SerializationError, match="checksum mismatch"):
        EncryptedBatch.load(bad, cm, mapped=True)


# ---------------------------------------------------------------------------------------------- the Ray driver
def test_ray_program_streams_a_mapped_batch_with_the_same_bits(local_ray, case, tmp_path):
    """RayProgram on the mapped file, blocks of one ciphertext: the bits of the whole batch's run; the driver held
    one imported ciphertext at most (counted by watching each import's native objects until freed)."""
    cm, lay = case["cm"], case["cm"].layout_impl
    folder = tmp_path / "keys"
    keys = stage_shared_keys(case["ek"], folder, cm).keys
    runs = {}
    for name, ctm in (("whole", case["whole"].ctm),
                      ("mapped", EncryptedBatch.load(case["path"], cm, mapped=True, block_bytes=one_ct(case)).ctm)):
        prog = RayProgram(num_workers=2, bootstrap_keys=keys.bootstrap_keys, shared_keys=StagedKeys(folder))
        runs[name] = (prog.run(cm.context, lay.steps, ctm, keys.relin_key, lay.weight_bits), prog.stats, ctm)
    assert bits(runs["mapped"][0]) == bits(runs["whole"][0]) == bits(case["ref"].ctm)
    st = next(v for v in runs["mapped"][1].values() if isinstance(v, dict) and v.get("op") == "input")
    n = case["whole"].num_ciphertexts
    assert st["blocks"] == n and st["mapped"]["peak_live"] == 1 and st["mapped"]["imported"] >= n
    assert runs["mapped"][2].import_stats["live"] == 0
    # a bigger block_bytes: blocks of two rows, two ciphertexts held at most
    ctm = EncryptedBatch.load(case["path"], cm, mapped=True, block_bytes=2 * one_ct(case)).ctm
    prog = RayProgram(num_workers=2, bootstrap_keys=keys.bootstrap_keys, shared_keys=StagedKeys(folder))
    assert bits(prog.run(cm.context, lay.steps, ctm, keys.relin_key, lay.weight_bits)) == bits(case["ref"].ctm)
    assert ctm.import_stats["peak_live"] == 2


@pytest.mark.parametrize("grid", [(1, 1, 2), (1, 1, 1, 2), None])
def test_mapped_blocks_feed_every_kind_of_first_wave(local_ray, tmp_path, grid):
    """A plain MLP (64-32-16-10) and a CNN (gathered first PCMM) from mapped files in blocks of one ciphertext, on
    PCMM grids (a reduction split, a part split) and node-local (the first PCMM reading the pieces in place): the
    in-process bits, one imported row at most in the driver."""
    from tests.compiler.conftest import SmallCNN

    rng = np.random.default_rng(7)
    for model, x in ((mlp(dims=(64, 32, 16, 10)), rng.uniform(0, 1, (16, 64))),
                     (SmallCNN(), rng.normal(size=(8, 1, 8, 8)))):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cm = hemlp.compile(model, x, batch_size=x.shape[0], allow_insecure=True, layout="batch")
            sk, ek = cm.keygen()
            path = cm.encrypt(x, sk, path=tmp_path / "in.hct")
            ref = cm.run(EncryptedBatch.load(path, cm), ek)
        ctx = cm.context
        ctm = EncryptedBatch.load(path, cm, mapped=True, block_bytes=1).ctm       # one row a block
        prog = RayProgram(num_workers=2, grid=grid)
        out = prog.run(ctx, cm.steps, ctm, ek.relin_key, cm.weight_bits)
        assert bits(out) == bits(ref.ctm)
        st = next(v for v in prog.stats.values() if isinstance(v, dict) and v.get("op") == "input")
        assert st["blocks"] == ctm.shape[0] * ctm.chunks and st["mapped"]["peak_live"] == ctm.chunks


def test_a_corrupted_mapped_batch_fails_the_ray_run(local_ray, case, tmp_path):
    cm, lay = case["cm"], case["cm"].layout_impl
    raw = bytearray(case["path"].read_bytes())
    raw[-40] ^= 0x01                                    # a residue bit of the last ciphertext
    bad = tmp_path / "bad.hct"
    bad.write_bytes(raw)
    folder = tmp_path / "keys"
    keys = stage_shared_keys(case["ek"], folder, cm).keys
    prog = RayProgram(num_workers=2, bootstrap_keys=keys.bootstrap_keys, shared_keys=StagedKeys(folder))
    with pytest.raises(SerializationError, match="checksum mismatch"):
        prog.run(cm.context, lay.steps, EncryptedBatch.load(bad, cm, mapped=True).ctm, keys.relin_key,
                 lay.weight_bits)


def test_the_bootstrapping_key_bytes_do_not_outlive_the_run(local_ray, case):
    """Default mode (key bytes through the store): after the run the driver holds no copy of the serialised keys
    (tracemalloc sees every Python allocation; the bytes are far larger than anything else the run keeps)."""
    cm, lay, ek = case["cm"], case["cm"].layout_impl, case["ek"]
    key_bytes = len(ek.bootstrap_keys.to_bytes(cm.context))
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        prog = RayProgram(num_workers=2, bootstrap_keys=ek.bootstrap_keys)
        out = prog.run(cm.context, lay.steps, case["whole"].ctm, ek.relin_key, lay.weight_bits)
        assert prog.stats["_bootstrap_keys"]["put_bytes"] == key_bytes
        gc.collect()
        after, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak - before >= key_bytes                  # serialised for the put
    assert after - before < key_bytes / 4, (after - before, key_bytes)
    assert bits(out) == bits(case["ref"].ctm)


# ---------------------------------------------------------------------------------------------- pruning
@pytest.fixture(scope="module")
def small():
    return eval_key_sets("m-prune", 3, [1])


def test_prune_removes_only_staged_files_hemlp_wrote(small, tmp_path):
    ctx, (a, b, c) = small
    sa, sb, sc = (stage_shared_keys(k, tmp_path, ctx) for k in (a, b, c))
    node_keys.load_shared("boot-" + "1" * 64, ctx, lambda: a, str(tmp_path))     # a worker's file: not staged
    others = {
        "staged-notes.keys": b"not a digest",
        f"staged-{'ab' * 32}.keys": b"HEMLPKEY" + bytes(300),     # a header naming another digest: not this file
        f"staged-{'cd' * 32}.keys.bak": sa.path.read_bytes(),     # not named .keys
        "input.hct": b"x",
        f"staging-1-{'0' * 8}.part": b"half written",
    }
    for name, data in others.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / f"staged-{'ef' * 32}.keys").symlink_to(sb.path)    # a link: never followed
    before = set(os.listdir(tmp_path))
    removed = prune_staged_keys(tmp_path, keep=[sa, sb.digest])
    assert removed == [sc.path] and not sc.path.exists()
    assert set(os.listdir(tmp_path)) == before - {sc.path.name}
    # keys mapped from a staged file name it too; then nothing to keep
    assert prune_staged_keys(tmp_path, keep=[sa.keys]) == [sb.path]
    assert prune_staged_keys(tmp_path) == [sa.path] and prune_staged_keys(tmp_path) == []
    assert all((tmp_path / n).exists() for n in others) and any(p.startswith("boot-") for p in os.listdir(tmp_path))
    # a pruned key set is staged again when asked for
    again = stage_shared_keys(sa.keys, tmp_path, ctx)
    assert again.path == staged_path(tmp_path, sa.digest) and again.path.is_file()
    assert prune_staged_keys(tmp_path / "missing") == []
    with pytest.raises(ValueError, match="64 lower-case hex"):
        prune_staged_keys(tmp_path, keep=["nope"])
    with pytest.raises(TypeError, match="keep"):
        prune_staged_keys(tmp_path, keep=[a])
