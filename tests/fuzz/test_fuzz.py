"""Fuzzing of every deserialiser (#21): a short run of each fuzzer in the default suite, 100 000 executions per
target in the slow suite (`make test-slow`; `make fuzz` runs the same from the command line).

Python level: Atheris (coverage-guided) over the loaders of tests/fuzz/targets.py, seeded with real files of
every kind, each input resealed (serialize.recompute_checksums) so the parsers meet the mutations. Native level:
the libFuzzer + ASan/UBSan targets of tests/fuzz/cpp (built with clang, which `make test` installs through
`make fuzz-sysdeps`)."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hemlp.fhe import serialize
from hemlp.errors import SerializationError
from tests.fuzz import targets as T

ROOT = Path(__file__).resolve().parents[2]
FUZZ_DIR = ROOT / "build" / "fuzz"
CPP_TARGETS = ("fuzz_import", "fuzz_params", "fuzz_shared_keys")


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("fuzz-corpus")
    counts = T.build_corpus(root)
    assert set(counts) == set(T.NAMES) and all(counts.values())
    return root


@pytest.fixture(scope="session")
def loaders(corpus):
    return T.Targets(corpus)


def test_every_seed_loads(loaders):
    """The seeds are real objects: each loads as it is (else the fuzzer would only explore the error paths)."""
    for name in T.NAMES:
        for blob in T.seeds_of(loaders.root, name):
            assert loaders.run(name, blob) == "ok", name


def test_recompute_checksums_reaches_the_parsers(loaders):
    """An edit inside a ciphertext nested in an encrypted batch: without resealing the
    outer checksum refuses it; resealed (innermost first), the ciphertext's own parser does."""
    blob = T.seeds_of(loaders.root, "encrypted_batch")[0]
    i = blob.index(b'"level": ', blob.index(b"HEMLP\x00", 200))  # the first ciphertext's header
    edited = blob[:i] + b'"level": 9' + blob[i + 10:]
    assert len(edited) == len(blob)
    with pytest.raises(SerializationError, match="checksum"):
        loaders.loaders["encrypted_batch"](edited)
    resealed = serialize.recompute_checksums(edited)
    assert resealed != edited and serialize.seal_intact(memoryview(resealed))
    with pytest.raises(SerializationError, match="level") as ei:
        loaders.loaders["encrypted_batch"](resealed)
    assert "checksum" not in str(ei.value)
    assert serialize.recompute_checksums(blob) == blob  # intact input: unchanged
    assert serialize.recompute_checksums(b"not a container") == b"not a container"


def test_mutation_loop_quick(loaders):
    """A plain mutation fuzzer (not coverage-guided: runs with or without Atheris) over every target: 300
    mutated inputs each, every one loads or raises a typed hemlp error."""
    for name in T.NAMES:
        out = T.mutation_loop(loaders, name, 300, seed=hash(name) % 2 ** 32)
        assert sum(out.values()) == 300 and set(out) - {"ok"}, (name, out)


def _atheris():
    try:
        import atheris  # noqa: F401
    except ImportError:
        return False
    return True


def test_atheris_quick(corpus, tmp_path):
    """Atheris over every target at once ("all": the first byte picks the target), 3 000 executions."""
    if not _atheris():
        pytest.skip("atheris is not installed (pip install -e '.[fuzz]'); test_mutation_loop_quick still ran")
    from tests.fuzz.run import run_target

    row = run_target("all", corpus, 3000, tmp_path, wall=600)
    assert row["finding"] is None, row["finding"]
    assert row["executions"] == 3000
    assert set(row["outcomes"]) == set(T.NAMES)  # every loader was reached


def _clang():
    """The compiler the Makefile's FUZZ_CXX picks: $FUZZ_CXX, else clang++, else Debian 12's clang++-14."""
    return (os.environ.get("FUZZ_CXX") and shutil.which(os.environ["FUZZ_CXX"])) or shutil.which("clang++") \
        or shutil.which("clang++-14")


def _build_cpp():
    if not _clang():
        pytest.skip("the native fuzz targets need clang with libFuzzer (`make test` installs it as root: "
                    "apt-get install clang libclang-rt-dev)")
    r = subprocess.run(["make", "-s", "-j2", *[f"build/fuzz/{t}" for t in CPP_TARGETS]], cwd=ROOT,
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def _run_cpp(target: str, runs: int, tmp_path, seed: int | None = None) -> int:
    corpus = tmp_path / f"corpus-{target}"
    corpus.mkdir(exist_ok=True)
    # libFuzzer's RSS limit reads the peak RSS, which a child inherits from this (multi-GiB) test process across
    # fork and exec: bound single allocations instead (the subprocess timeout bounds the rest)
    r = subprocess.run([str(FUZZ_DIR / target), f"-runs={runs}", "-max_len=4096", "-timeout=10",
                        "-rss_limit_mb=0", "-malloc_limit_mb=2048", f"-artifact_prefix={tmp_path}/{target}-"]
                       + ([f"-seed={seed}"] if seed is not None else []) + [str(corpus)],
                       capture_output=True, text=True, timeout=3600, env=dict(os.environ, ASAN_OPTIONS="detect_leaks=1"))
    assert r.returncode == 0, r.stderr[-4000:]
    done = [ln for ln in r.stderr.splitlines() if ln.startswith("Done ")]
    assert done, r.stderr[-2000:]
    return int(done[-1].split()[1])


@pytest.mark.parametrize("target", CPP_TARGETS)
def test_native_import_fuzz_quick(target, tmp_path):
    _build_cpp()
    # a fixed seed: the same inputs every run (a CI failure replays); 30 000 runs of fuzz_params once hit libFuzzer's
    # 2 GiB RSS limit in a CI run without reproducing locally: the long runs (make test-slow, make fuzz) look for it
    assert _run_cpp(target, 5000, tmp_path, seed=1) == 5000


# ------------------------------------------------------------------------- the slow suite: 100 000 per target

@pytest.mark.slow
@pytest.mark.parametrize("target", CPP_TARGETS)
def test_native_import_fuzz_100k(target, tmp_path):
    _build_cpp()
    assert _run_cpp(target, 100_000, tmp_path) == 100_000


@pytest.mark.slow
@pytest.mark.parametrize("name", T.NAMES)
def test_atheris_100k(name, corpus, tmp_path):
    if not _atheris():
        pytest.skip("atheris is not installed (pip install -e '.[fuzz]')")
    from tests.fuzz.run import run_target

    row = run_target(name, corpus, 100_000, tmp_path)
    assert row["finding"] is None, row["finding"]
    assert row["executions"] == 100_000
    assert set(row["outcomes"].get(name, {})) - {"ok"}  # the mutations reached the typed refusals


def _sealed_artifact(header: bytes, payload: bytes = b"") -> bytes:
    """An artefact in the container before version 3 (b"HEMLPC\\0\\1"), which still loads."""
    import struct

    head = serialize.LEGACY_ARTEFACT_MAGIC + struct.pack("<I", len(header)) + header + struct.pack("<Q", len(payload))
    return serialize.recompute_checksums(head + payload + b"\0" * 32)


def _sealed_container(kind: str, header: bytes, phash: str) -> bytes:
    """An artefact in the one container (version 3), with a hand-written header and an empty payload."""
    import struct

    head = (serialize.MAGIC + struct.pack("<HB", serialize.VERSION, serialize.TYPES[kind]) + bytes.fromhex(phash)
            + struct.pack("<I", len(header)) + header + struct.pack("<Q", 0))
    return serialize.recompute_checksums(head + b"\0" * 32)


def _sealed_object(header: bytes, ctx) -> bytes:
    import struct

    head = (serialize.MAGIC + struct.pack("<HB", serialize.VERSION, serialize.TYPES["ciphertext"])
            + bytes.fromhex(ctx.hash) + struct.pack("<I", len(header)) + header + struct.pack("<Q", 0))
    return serialize.recompute_checksums(head + b"\0" * 32)


def test_hostile_headers_are_typed_errors(loaders):
    """Headers a fuzzer reaches only rarely, written by hand: not an object, nested past the recursion limit,
    wrong field types. Each is a SerializationError (never AttributeError, RecursionError, KeyError, TypeError)."""
    deep = b"[" * 100_000 + b"]" * 100_000
    for header in (b"[1, 2]", b'"x"', deep, b'{"kind": "encrypted_batch", "version": 1, "model_id": "%s"}',
                   b'{"kind": "encrypted_batch", "version": 1, "model_id": "%s", "batch": "8", "shape": [4]}',
                   b'{"kind": "encrypted_batch", "version": 1, "model_id": "%s", "batch": 8, "shape": {"a": 1}}'):
        h = header.replace(b"%s", _packed_model_id(loaders).encode()) if b"%s" in header else header
        with pytest.raises(SerializationError):
            loaders.loaders["encrypted_batch"](_sealed_artifact(h))
        with pytest.raises(SerializationError):
            loaders.loaders["eval_keys"](_sealed_artifact(h))
    # the same defects in the one container (version 3): the artefact fields next to the array list
    for kind in ("encrypted_batch", "eval_keys", "encrypted_weights"):
        model = "blocked" if kind == "encrypted_weights" else "packed"
        mid = json.loads((loaders.root / "models" / model / "plan.json").read_text())["model_id"]
        phash = serialize.unpack(T.seeds_of(loaders.root, kind)[0], None)[1]
        own = {"encrypted_batch": (b'"batch": "8", "shape": [4]', b'"batch": 8, "shape": [4], "matrix": 3',
                                   b'"batch": 8, "shape": [4], "matrix": {"shape": [1, 1], "chunks": 1, '
                                   b'"format": "rlwe", "sizes": [true]}'),
               "eval_keys": (b'"relin_bytes": -1, "has_relin": true', b'"galois_bytes": 5'),
               "encrypted_weights": (b'"shape": [[1, 1, "x"]], "sizes": {}', b'"shape": 7, "sizes": [1]')}[kind]
        for header in (b"[1, 2]", deep, b'{"arrays": []}', b'{"arrays": [], "model_id": "%s"}',
                       *(b'{"arrays": [["|u1", [0]]], "model_id": "%s", ' + f + b"}" for f in own)):
            with pytest.raises(SerializationError):
                loaders.loaders[kind](_sealed_container(kind, header.replace(b"%s", mid.encode()), phash))
    ctx10 = T.test_context()
    for header in (b"[1]", deep, b'{"arrays": {}}', b'{"arrays": [["<u8", [-1]]]}', b'{"arrays": [[1, 2, 3]]}',
                   b'{"arrays": [], "level": "0"}'):
        with pytest.raises(SerializationError):
            loaders.loaders["ciphertext"](_sealed_object(header, ctx10))


def _packed_model_id(loaders) -> str:
    import json as _json

    return _json.loads((loaders.root / "models" / "packed" / "plan.json").read_text())["model_id"]


def test_modpack_key_seed_that_is_not_hex(loaders):
    """Found by Atheris (modpack_keys, 100 000-run campaign): a seed string that is not hex raised ValueError."""
    blob = T.seeds_of(loaders.root, "modpack_keys")[0]
    i = blob.index(b'"seeds": ["') + len(b'"seeds": ["')
    bad = serialize.recompute_checksums(blob[:i] + b"z" + blob[i + 1:])
    with pytest.raises(SerializationError, match="seed"):
        loaders.loaders["modpack_keys"](bad)
