"""Staged key files (RayOptions.shared_keys=StagedKeys(folder), issue #30): the driver writes layout (A)'s
bootstrapping keys as a shared key file itself, named by the file's header SHA-256, and ships only that name; every
worker maps the file. Bit-identical to the default mode (key bytes through the object store), no key bytes put, a
machine without the file is a MissingKeyFileError naming the fix, and different key sets get different names.
test-N12-boot, one local Ray of 2 CPUs (RayExecutor, and RayProgram driven directly)."""
import hashlib
import os
import warnings

import numpy as np
import pytest

ray = pytest.importorskip("ray")
torch = pytest.importorskip("torch")

import hemlp  # noqa: E402
from hemlp.errors import KeyMismatchError, MissingKeyFileError, OptionError, ParameterError  # noqa: E402
from hemlp.run_options import RayOptions, StagedKeys  # noqa: E402
from hemlp.runtime.jobs import ModelJob  # noqa: E402
from hemlp.runtime.ray import executor as ray_executor  # noqa: E402
from hemlp.runtime.ray import node_keys  # noqa: E402
from hemlp.runtime.ray.program import RayProgram  # noqa: E402
from hemlp.runtime.shared_keys import (STAGED_PREFIX, file_digest, open_staged_keys, stage_shared_keys,  # noqa: E402
                                       staged_file_of, staged_path)
from tests.runtime.boot_case import boot_mlp  # noqa: E402
from tests.runtime.key_sets import eval_key_sets  # noqa: E402


@pytest.fixture(scope="module")
def case():
    """A bootstrapped layout (A) MLP 6-8-8-3 at test-N12-boot (one refresh point, S2C-first batched k = 2: the N16
    job's pipeline), its keys, input and in-process output (one thread)."""
    cm, x = boot_mlp(0.9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sk, ek = cm.keygen()
        ct = cm.encrypt(x, sk)
        ref = cm.run(ct, ek, threads=1)
    return dict(cm=cm, ek=ek, ct=ct, ref=ref)


@pytest.fixture
def puts(monkeypatch):
    """The sizes of every object the driver puts (the drivers call ray.put through the module)."""
    sizes, put = [], ray.put

    def spy(value, *a, **kw):
        sizes.append(value.nbytes if isinstance(value, np.ndarray) else len(value) if isinstance(value, bytes) else 0)
        return put(value, *a, **kw)

    monkeypatch.setattr(ray, "put", spy)
    return sizes


def same(a, b) -> bool:
    A, B = a.ctm, b.ctm
    return A.shape == B.shape and A.chunks == B.chunks and all(
        p.to_bytes() == q.to_bytes() for p, q in zip(A.cts, B.cts, strict=True))


def boot_tasks(st):
    return [t for v in st.values() if v.get("op") == "bootstrap" for t in v["tasks"]]


def test_staged_mode_is_bit_identical_and_puts_no_key_bytes(local_ray, case, tmp_path, puts):
    cm, ek = case["cm"], case["ek"]
    key_bytes = len(ek.bootstrap_keys.to_bytes(cm.context))
    st = {}
    shipped = cm.run(case["ct"], ek, runtime="ray", shared_keys=str(tmp_path / "shared"), stats=st)
    assert same(shipped, case["ref"]) and max(puts) >= key_bytes          # the default: the key bytes put once
    assert st["_bootstrap_keys"]["put_bytes"] == key_bytes and st["_bootstrap_keys"]["staged"] is None
    puts.clear()
    folder = tmp_path / "staged"
    st = {}
    out = cm.run(case["ct"], ek, runtime="ray", shared_keys=StagedKeys(folder), stats=st)
    assert same(out, case["ref"])
    assert sum(puts) < key_bytes / 4, puts                   # the relinearisation key and parameters: no key bytes
    digest = st["_bootstrap_keys"]["staged"]
    assert st["_bootstrap_keys"]["put_bytes"] == 0 and [p.name for p in folder.iterdir()] == [f"staged-{digest}.keys"]
    assert file_digest(folder / f"staged-{digest}.keys") == digest
    tasks = boot_tasks(st)
    assert tasks and not any(t["keys_decoded"] for t in tasks)     # every worker mapped the driver's file
    # a second run with the same keys stages nothing again
    mtime = os.stat(staged_path(folder, digest)).st_mtime_ns
    assert same(cm.run(case["ct"], ek, runtime="ray", shared_keys=StagedKeys(folder)), case["ref"])
    assert os.stat(staged_path(folder, digest)).st_mtime_ns == mtime


def test_the_driver_runs_on_its_staged_copy_and_ray_program_ships_only_the_name(local_ray, case, tmp_path, puts):
    """stage_shared_keys gives the driver its keys mapped from the file (the caller drops its own); RayProgram (the
    several-node runtime, driven here on one node) with those keys writes nothing more and puts no key bytes."""
    cm = case["cm"]
    folder = tmp_path / "k"
    staged = stage_shared_keys(case["ek"], folder, cm)
    keys = staged.keys
    assert staged_file_of(keys) == (staged.path, staged.digest) == staged_file_of(keys.bootstrap_keys)
    assert staged.path.name == f"{STAGED_PREFIX}{staged.digest}.keys"
    assert same(cm.run(case["ct"], keys, runtime="ray", shared_keys=StagedKeys(folder)), case["ref"])
    lay = cm.layout_impl
    prog = RayProgram(num_workers=2, bootstrap_keys=keys.bootstrap_keys, shared_keys=StagedKeys(folder))
    out = prog.run(cm.context, lay.steps, case["ct"].ctm, keys.relin_key, lay.weight_bits)
    assert all(p.to_bytes() == q.to_bytes() for p, q in zip(out.cts, case["ref"].ctm.cts, strict=True))
    assert prog.stats["_bootstrap_keys"] == dict(op="keys", put_bytes=0, staged=staged.digest, nodes=[], tasks=0,
                                                 kind="batch")
    assert sum(puts) < staged.path.stat().st_size / 4, puts    # the input blocks and the relinearisation key
    assert [p.name for p in folder.iterdir()] == [staged.path.name]      # the file of the staged keys, once


def test_a_machine_without_the_file_is_a_typed_error(local_ray, case, tmp_path, monkeypatch):
    """A worker that finds no staged file (here: a digest the driver never wrote, as on a node nobody copied the
    file to) fails the run with MissingKeyFileError naming both fixes."""
    monkeypatch.setattr(ray_executor, "stage_bootstrap_keys", lambda keys, ctx, policy: "0" * 64)
    with pytest.raises(MissingKeyFileError, match="copy it .* every node.*default RayOptions.shared_keys"):
        case["cm"].run(case["ct"], case["ek"], runtime="ray", shared_keys=StagedKeys(tmp_path / "nowhere"))


@pytest.fixture(scope="module")
def small():
    return eval_key_sets("m-staged", 2, [1, 3])


def test_digests_name_key_sets_and_never_a_workers_file(small, tmp_path):
    ctx, (a, b) = small
    sa, sb = stage_shared_keys(a, tmp_path, ctx), stage_shared_keys(b, tmp_path, ctx)
    assert sa.digest != sb.digest and sa.path != sb.path and sa.path.is_file() and sb.path.is_file()
    # the digest is the native header's SHA-256 of everything before the key data (its own field zeroed), which
    # holds the key data's SHA-256: it names the whole file
    raw = bytearray(sa.path.read_bytes())
    data_offset = int.from_bytes(raw[96:104], "little")
    raw[144:176] = bytes(32)
    assert hashlib.sha256(raw[:data_offset]).hexdigest() == sa.digest == file_digest(sa.path)
    assert hashlib.sha256(raw[data_offset:]).digest() == bytes(raw[112:144])
    again = stage_shared_keys(a, tmp_path / "other", ctx)        # the same keys: the same file, the same name
    assert again.digest == sa.digest and again.path.read_bytes() == sa.path.read_bytes()
    # a worker's file of the same folder is named <prefix>-<digest of the bytes>.keys: never staged-...
    node_keys.load_shared("boot-" + "1" * 64, ctx, lambda: a, str(tmp_path))
    for i in range(node_keys.KEEP_FILES + 1):
        node_keys.load_shared(f"s{i}", ctx, lambda: a, str(tmp_path))
    assert sa.path.is_file() and sb.path.is_file()           # the workers' pruning leaves staged files alone
    got = open_staged_keys(tmp_path, sa.digest, ctx)
    assert got.galois_keys.native.get(got.galois_keys.elements[0]).mapped
    os.replace(sb.path, tmp_path / f"{STAGED_PREFIX}{sa.digest}.keys")      # another key set under a's name
    with pytest.raises(KeyMismatchError, match="copy the driver's staged file"):
        open_staged_keys(tmp_path, sa.digest, ctx)
    with pytest.raises(MissingKeyFileError, match="copy it from the driver's machine"):
        open_staged_keys(tmp_path, sb.digest, ctx)


def test_the_option():
    assert RayOptions(shared_keys=StagedKeys("/x")).validate().shared_keys.folder == "/x"
    assert hemlp.StagedKeys is StagedKeys and "StagedKeys" in RayOptions.help()
    with pytest.raises(ParameterError, match="StagedKeys"):
        StagedKeys(3)
    with pytest.raises(OptionError, match="layout \\(A\\)'s bootstrapping keys"):
        node_keys.shared_key_folder(StagedKeys())
    assert node_keys.staged_folder(StagedKeys()) == node_keys.shared_key_folder(True)
    with pytest.raises(OptionError, match="shared_keys=True or a private folder"):    # keys that travel as bytes
        ModelJob.from_paths("no-model", "no-keys", shared_keys=StagedKeys())
