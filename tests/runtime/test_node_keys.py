"""hemlp.runtime.ray.node_keys: the policy by which the Ray workers of one machine share a key set (no Ray needed:
load_shared runs in any process)."""
import os
import warnings

import numpy as np
import pytest

from hemlp.fhe import Context
from hemlp.runtime.artifacts import EvalKeys
from hemlp.runtime.ray import node_keys
from hemlp.runtime.ray.node_keys import KEEP_FILES, load_shared, shared_key_folder


@pytest.fixture(scope="module")
def keyset():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")             # insecure test preset
        ctx = Context("test-N10", allow_insecure=True)
    sk, _ = ctx.keygen()
    ek = EvalKeys("m-node", ctx.relin_key(sk), ctx.rotation_keys(sk, [1, 3]))
    return ctx, sk, ek


def test_the_first_process_writes_the_rest_map(keyset, tmp_path):
    ctx, sk, ek = keyset
    calls = []

    def decode():
        calls.append(1)
        return ek

    folder = tmp_path / "k"
    a = load_shared("d1", ctx, decode, str(folder))
    b = load_shared("d1", ctx, decode, str(folder))
    assert len(calls) == 1 and (folder / "d1.keys").is_file()      # decoded once, then mapped
    assert oct(folder.stat().st_mode & 0o777) == oct(0o700)
    ct = ctx.encrypt(np.linspace(-1, 0.5, ctx.slots), sk)
    want = ctx.rotate(ct, 3, ek.galois_keys).to_bytes()
    assert ctx.rotate(ct, 3, a.galois_keys).to_bytes() == want == ctx.rotate(ct, 3, b.galois_keys).to_bytes()
    assert a.galois_keys.native.get(a.galois_keys.elements[0]).mapped     # borrowed from the file, not decoded


def test_no_sharing_decodes_privately(keyset, tmp_path):
    ctx, _, ek = keyset
    got = load_shared("d2", ctx, lambda: ek, False)
    assert got is ek and shared_key_folder(False) is None
    assert shared_key_folder(None) == shared_key_folder(True) and str(os.getuid()) in shared_key_folder(None).name
    with pytest.raises(ValueError, match="shared_keys"):
        shared_key_folder(3)


def test_a_folder_others_can_write_falls_back_with_a_warning(keyset, tmp_path):
    ctx, _, ek = keyset
    folder = tmp_path / "open"
    folder.mkdir()
    folder.chmod(0o777)
    with pytest.warns(RuntimeWarning, match="decodes its own copy"):
        got = load_shared("d3", ctx, lambda: ek, str(folder))
    assert got is ek and not list(folder.glob("*.keys"))


def test_the_folder_keeps_the_newest_files(keyset, tmp_path):
    ctx, _, ek = keyset
    folder = tmp_path / "k"
    for i in range(KEEP_FILES + 2):
        load_shared(f"s{i}", ctx, lambda: ek, str(folder))
        os.utime(folder / f"s{i}.keys", (1000 + i, 1000 + i))    # mtimes in the order written
    left = sorted(p.name for p in folder.glob("*.keys"))
    assert left == [f"s{i}.keys" for i in range(2, KEEP_FILES + 2)]
    assert node_keys.KEEP_FILES == KEEP_FILES
