"""Node-local shared key files (hemlp.runtime.shared_keys, csrc/ckks/shared_key_file.h): one read-only copy of the
evaluation keys per machine, memory-mapped by every process.

- Mapped keys compute what owned keys compute, bit for bit: key switches (rotations, relinearisation) with seeded
  and expanded a-halves, a compiled model's run, single and batched bootstrapping (test presets); re-serialising
  them gives the original bytes.
- Two processes mapping one file share its pages: each one's mapping of the file is resident in full, and its
  proportional share (Pss, /proc/self/smaps) is half of that.
- A truncated file, a flipped header or data byte, another parameter set, key pair or model, a file that is not a key
  file: typed errors naming the fix, never a crash.
- Writes into a mapped key are refused (ReadOnlyKeyError); the mapping outlives the file's unlink.
- open_or_write_shared_keys: the first caller writes the file, later ones map it; a damaged file is written again.
"""
from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import hemlp
from hemlp import _core, fhe
from hemlp.bootstrap import BatchBootstrapKeys, BootParams, BootstrapKeys, Bootstrapper
from hemlp.bootstrap.batch import BatchBootstrapper
from hemlp.errors import ContextMismatchError, KeyMismatchError, ReadOnlyKeyError, SerializationError
from hemlp.runtime.artifacts import EvalKeys
from hemlp.runtime.shared_keys import open_or_write_shared_keys, open_shared_keys, write_shared_keys

pytestmark = pytest.mark.filterwarnings("ignore::hemlp.fhe.InsecureParametersWarning")
ROOT = Path(__file__).resolve().parents[2]
STEPS = (1, 2, 3, -1, 7)  # the first three held expanded, the others seeded (a-halves drawn on use)


def context(name: str) -> fhe.Context:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fhe.Context(name, allow_insecure=True)


def same_ct(a, b) -> bool:
    return (a.level == b.level and a.scale == b.scale and a.size == b.size
            and all(np.array_equal(a.native.poly(i), b.native.poly(i)) for i in range(a.size)))


@pytest.fixture(scope="module")
def keyed():
    """test-N12: a relinearisation key and rotation keys, some seeded, written to a shared key file."""
    ctx = context("test-N12")
    sk, _ = ctx.keygen()
    e = ctx.native
    expanded = ctx.rotation_keys(sk, STEPS[:3])
    seeded = ctx.wrap(fhe.GaloisKeys, _core.galois_keys_at_levels(
        e, ctx.unwrap(sk, fhe.SecretKey, "sk"), [(e.galois_element(s), ctx.max_level) for s in STEPS[3:]],
        ctx.max_level))
    ek = EvalKeys("m-test", ctx.relin_key(sk), expanded.merge(seeded))
    return ctx, sk, ek


@pytest.fixture
def shared(keyed, tmp_path):
    ctx, _, ek = keyed
    path = tmp_path / "keys" / "eval.shared"
    write_shared_keys(ek, path, ctx)
    return path


def test_mapped_switch_keys_compute_bit_identical_results(keyed, shared):
    ctx, sk, ek = keyed
    mapped = open_shared_keys(shared, ctx, key_id=ek.key_id)
    gk = mapped.galois_keys
    assert all(gk.native.get(g).mapped for g in gk.elements) and mapped.relin_key.native.mapped
    assert gk.levels == ek.galois_keys.levels and gk.memory_bytes == ek.galois_keys.memory_bytes
    rng = np.random.default_rng(1)
    x = ctx.encrypt(rng.uniform(-1, 1, ctx.slots), sk)
    y = ctx.encrypt(rng.uniform(-1, 1, ctx.slots), sk)
    for s in STEPS:
        assert same_ct(ctx.rotate(x, s, gk), ctx.rotate(x, s, ek.galois_keys)), s
    for got, want in zip(ctx.rotate_hoisted(x, STEPS, gk), ctx.rotate_hoisted(x, STEPS, ek.galois_keys)):
        assert same_ct(got, want)
    assert same_ct(ctx.mul(x, y, relin_key=mapped.relin_key, rescale=True),
                   ctx.mul(x, y, relin_key=ek.relin_key, rescale=True))
    # the same key material: serialised again, the keys are the uploaded bytes
    assert mapped.to_bytes() == ek.to_bytes()
    assert (shared.stat().st_mode & 0o777) == 0o400 and (shared.parent.stat().st_mode & 0o777) == 0o700


def test_a_compiled_model_runs_bit_identically_on_mapped_keys(tmp_path):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.Linear(6, 3)).eval()
    x = np.random.default_rng(3).normal(size=(2, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = hemlp.compile(net, x, batch_size=2, allow_insecure=True, preset="test-N10", layout="packed")
    sk, ek = cm.keygen()
    ct = cm.encrypt(x, sk)
    write_shared_keys(ek, tmp_path / "m.keys", cm)
    mapped = open_shared_keys(tmp_path / "m.keys", cm, key_id=ct.key_id, verify=True)
    assert mapped.model_id == cm.model_id and mapped.galois_keys.native.get(mapped.galois_keys.elements[0]).mapped
    assert cm.run(ct, mapped).to_bytes() == cm.run(ct, ek).to_bytes()
    other = hemlp.compile(torch.nn.Sequential(torch.nn.Linear(8, 3)).eval(), x, batch_size=2, allow_insecure=True,
                          preset="test-N10", layout="packed")
    with pytest.raises(KeyMismatchError, match="compiled model"):
        open_shared_keys(tmp_path / "m.keys", other)
    with pytest.raises(KeyMismatchError, match="compiled model"):
        write_shared_keys(ek, tmp_path / "o.keys", other)


@pytest.fixture(scope="module")
def boot_env():
    ctx = context("test-N10-boot")
    sk, _ = ctx.keygen()
    return ctx, sk


def test_single_bootstrapping_keys_shared(boot_env, tmp_path):
    ctx, sk = boot_env
    bk = BootstrapKeys.generate(ctx, sk)
    ek = EvalKeys("m-boot", ctx.relin_key(sk), bootstrap_keys=bk)
    write_shared_keys(ek, tmp_path / "b.keys", ctx)
    mapped = open_shared_keys(tmp_path / "b.keys", ctx).bootstrap_keys
    assert isinstance(mapped, BootstrapKeys) and mapped.galois.native.get(mapped.galois.elements[0]).mapped
    mapped.check(ctx)
    ct = ctx.encrypt(np.random.default_rng(5).uniform(-1, 1, ctx.slots), sk, level=1)
    assert same_ct(Bootstrapper(ctx, mapped).bootstrap(ct), Bootstrapper(ctx, bk).bootstrap(ct))
    assert mapped.to_bytes(ctx) == bk.to_bytes(ctx)


@pytest.mark.parametrize("seeded", [True, False])
def test_batched_bootstrapping_keys_shared(boot_env, tmp_path, seeded):
    ctx, sk = boot_env
    bk = BatchBootstrapKeys.generate(ctx, sk, 2, BootParams.for_context(ctx), seeded=seeded)
    ek = EvalKeys("m-batch", bootstrap_keys=bk)
    write_shared_keys(ek, tmp_path / "bb.keys", ctx)
    mapped = open_shared_keys(tmp_path / "bb.keys", ctx).bootstrap_keys
    assert isinstance(mapped, BatchBootstrapKeys) and mapped.ms_galois.seeded == seeded
    assert mapped.memory_bytes == bk.memory_bytes
    rng = np.random.default_rng(7)
    cts = [ctx.encrypt(rng.uniform(-1, 0.7, ctx.slots), sk, level=1) for _ in range(2)]
    got, want = BatchBootstrapper(ctx, mapped).bootstrap_batch(cts), BatchBootstrapper(ctx, bk).bootstrap_batch(cts)
    assert all(same_ct(a, b) for a, b in zip(got, want))
    assert mapped.to_bytes(ctx) == bk.to_bytes(ctx)
    with pytest.raises(ReadOnlyKeyError, match="memory-mapped read-only"):
        _core.seed_ms_galois_keys(ctx.native, mapped.ms_galois, ctx.max_level)


def test_writes_into_mapped_keys_are_refused(keyed, shared):
    ctx, _, _ = keyed
    mapped = open_shared_keys(shared, ctx)
    before = mapped.galois_keys.memory_bytes
    with pytest.raises(ReadOnlyKeyError, match="seed_galois_keys: this key is memory-mapped read-only"):
        _core.seed_galois_keys(ctx.native, mapped.galois_keys.native, ctx.max_level)
    assert mapped.galois_keys.memory_bytes == before          # all or nothing: no key was changed
    # reading is not writing: a mapped set merges into a new one (sharing the pages) and exports copies
    merged = mapped.galois_keys.merge(mapped.galois_keys)
    assert merged.native.get(merged.elements[0]).mapped
    f = _core.SharedKeyFile.open(ctx.native, str(shared))
    with pytest.raises(ReadOnlyKeyError):
        _core.seed_galois_keys(ctx.native, f.galois_keys(2), ctx.max_level)


def test_the_mapping_outlives_the_files_unlink(keyed, shared):
    ctx, sk, ek = keyed
    mapped = open_shared_keys(shared, ctx)
    shared.unlink()
    gc.collect()
    maps = Path("/proc/self/maps").read_text()
    assert f"{shared} (deleted)" in maps                      # held by the keys alone
    x = ctx.encrypt(np.random.default_rng(2).uniform(-1, 1, ctx.slots), sk)
    assert same_ct(ctx.rotate(x, 7, mapped.galois_keys), ctx.rotate(x, 7, ek.galois_keys))
    del mapped
    gc.collect()
    assert str(shared) not in Path("/proc/self/maps").read_text()   # unmapped with the last key


def _corrupt(src: Path, dst: Path, offset: int | None = None, size: int | None = None) -> Path:
    shutil.copyfile(src, dst)
    with open(dst, "r+b") as f:
        if offset is not None:
            f.seek(offset)
            b = f.read(1)
            f.seek(offset)
            f.write(bytes([b[0] ^ 0x40]))
        if size is not None:
            f.truncate(size)
    return dst


def test_damaged_foreign_and_mismatched_files_raise_typed_errors(keyed, shared, tmp_path):
    ctx, _, ek = keyed
    size = shared.stat().st_size
    fix = "write it again from the uploaded evaluation keys"
    cases = {"truncated": (_corrupt(shared, tmp_path / "t", size=size - 4096), "truncated or overwritten"),
             "header only": (_corrupt(shared, tmp_path / "h", size=100), "shorter than its"),
             "magic": (_corrupt(shared, tmp_path / "m", offset=0), "not a hemlp shared key file"),
             "key id byte": (_corrupt(shared, tmp_path / "k", offset=48), "header is corrupted"),
             "record byte": (_corrupt(shared, tmp_path / "r", offset=256 + 30), "header is corrupted")}
    for name, (path, what) in cases.items():
        with pytest.raises(SerializationError, match=what) as e:
            open_shared_keys(path, ctx)
        assert fix in str(e.value), name
    # a flipped key byte: the header still matches, verify=True finds it
    data = _corrupt(shared, tmp_path / "d", offset=size - 5)
    open_shared_keys(data, ctx)
    with pytest.raises(SerializationError, match="key data is corrupted"):
        open_shared_keys(data, ctx, verify=True)
    open_shared_keys(shared, ctx, verify=True)
    with pytest.raises(ContextMismatchError, match="another parameter set"):
        open_shared_keys(shared, context("test-N10"))
    with pytest.raises(KeyMismatchError, match=f"key pair {ek.key_id:016x}"):
        open_shared_keys(shared, ctx, key_id=ek.key_id ^ 2)
    for junk in (b"", b"HEMLP\x00" + bytes(300)):
        (tmp_path / "junk").write_bytes(junk)
        with pytest.raises(SerializationError, match=fix):
            open_shared_keys(tmp_path / "junk", ctx)
    with pytest.raises(SerializationError, match="cannot open"):
        open_shared_keys(tmp_path / "missing", ctx)
    with pytest.raises(ContextMismatchError):
        write_shared_keys(ek, tmp_path / "x.keys", context("test-N10"))


def test_a_folder_others_can_write_to_is_refused(keyed, tmp_path):
    ctx, _, ek = keyed
    (tmp_path / "open").mkdir(mode=0o777)
    os.chmod(tmp_path / "open", 0o777)
    with pytest.raises(PermissionError, match="private folder"):
        write_shared_keys(ek, tmp_path / "open" / "k", ctx)


_HOLDER = r"""
import sys, warnings
from hemlp import fhe
from hemlp.runtime.shared_keys import open_shared_keys
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    ctx = fhe.Context("test-N12", allow_insecure=True)
path = sys.argv[1]
keys = open_shared_keys(path, ctx, verify=True)    # verify reads every page of the mapping
print("ready", flush=True)
sys.stdin.readline()
fields, mine = {}, False
for line in open("/proc/self/smaps"):
    head = line.split()
    if head and "-" in head[0] and ":" not in head[0]:
        mine = line.rstrip("\n").endswith(path)
    elif mine and head[0].rstrip(":") in ("Rss", "Pss", "Shared_Clean", "Private_Clean", "Private_Dirty"):
        fields[head[0].rstrip(":")] = fields.get(head[0].rstrip(":"), 0) + int(head[1])
print(fields, flush=True)
sys.stdin.readline()
"""


def test_two_processes_share_the_key_pages(keyed, shared):
    """Each process's mapping of the file is resident in full (Rss = the file) and shared (Shared_Clean), its
    proportional share half of it (Pss: 2 processes), none of it private."""
    procs = []
    try:
        for _ in range(2):   # one after the other: the second maps pages the first already faulted in
            p = subprocess.Popen([sys.executable, "-c", _HOLDER, str(shared)], cwd=ROOT, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
            procs.append(p)
            assert p.stdout.readline().strip() == "ready"
        stats = []
        for p in procs:
            p.stdin.write("\n")
            p.stdin.flush()
            stats.append(eval(p.stdout.readline()))   # noqa: S307 (our own child's dict of ints)
        for p in procs:
            p.stdin.write("\n")
            p.stdin.flush()
            assert p.wait(timeout=60) == 0
    finally:
        for p in procs:
            p.kill() if p.poll() is None else None
    kib = shared.stat().st_size / 1024
    for s in stats:
        assert s["Rss"] >= 0.98 * kib and s["Shared_Clean"] >= 0.98 * kib, s
        assert abs(s["Pss"] - kib / 2) <= 0.02 * kib, (s, kib)
        assert s.get("Private_Clean", 0) + s.get("Private_Dirty", 0) <= 0.02 * kib, s
    print(json.dumps({"file_kib": kib, "per_process": stats}))


def test_open_or_write_writes_once_and_repairs(keyed, tmp_path):
    ctx, sk, ek = keyed
    path, loads = tmp_path / "node" / "k.shared", []

    def load():
        loads.append(1)
        return ek

    first = open_or_write_shared_keys(path, ctx, load, key_id=ek.key_id)
    again = open_or_write_shared_keys(path, ctx, load, key_id=ek.key_id)
    assert len(loads) == 1 and first.to_bytes() == again.to_bytes() == ek.to_bytes()
    damaged = _corrupt(path, tmp_path / "node" / "damaged", size=path.stat().st_size // 2)
    os.replace(damaged, path)                                  # as a rename replaces it: live mappings keep theirs
    repaired = open_or_write_shared_keys(path, ctx, load, key_id=ek.key_id)
    assert len(loads) == 2 and repaired.to_bytes() == ek.to_bytes()
    x = ctx.encrypt(np.random.default_rng(4).uniform(-1, 1, ctx.slots), sk)
    assert same_ct(ctx.rotate(x, 1, first.galois_keys), ctx.rotate(x, 1, repaired.galois_keys))
