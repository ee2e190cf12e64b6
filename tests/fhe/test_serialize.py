"""Serialisation round trips, and fuzzing of the loaders with mutated blobs."""
import hashlib
import struct

import numpy as np
import pytest

from hemlp import fhe
from hemlp.fhe import serialize
from hemlp.errors import ContextMismatchError, HemlpError, SerializationError
from tests.conftest import bits


@pytest.fixture(scope="module")
def objs(t10):
    ctx = t10.ctx
    x = np.linspace(-1, 1, ctx.slots)
    ct = ctx.encrypt(x, t10.pk, level=1)
    gk = ctx.rotation_keys(t10.sk, [1])
    return dict(ct=ct, seeded=ctx.encrypt(x, t10.sk, level=1), sk=t10.sk, pk=t10.pk, rlk=t10.rlk, gk=gk, x=x)


def test_round_trips(t10, objs, tmp_path):
    ctx = t10.ctx
    for name in ("ct", "seeded", "sk", "pk", "rlk", "gk"):
        path = tmp_path / f"{name}.bin"
        objs[name].save(path)
        back = fhe.load(path, ctx)
        assert type(back) is type(objs[name])
        assert back.to_bytes() == objs[name].to_bytes()
    ct = fhe.load(tmp_path / "ct.bin", ctx)
    sk = fhe.load(tmp_path / "sk.bin", ctx)
    assert bits(ctx.decrypt(ct, sk) - objs["x"]) > 20
    p = fhe.from_bytes(ctx.params.to_bytes())
    assert p.hash == ctx.params.hash
    # a rotation with reloaded keys
    gk = fhe.load(tmp_path / "gk.bin", ctx)
    assert bits(ctx.decrypt(ctx.rotate(ct, 1, gk), sk) - np.roll(objs["x"], -1)) > 18


def test_wrong_context_and_type(t10, t12, objs):
    with pytest.raises(ContextMismatchError):
        fhe.from_bytes(objs["ct"].to_bytes(), t12.ctx)
    with pytest.raises(SerializationError, match="expected a serialised ciphertext"):
        serialize.unpack(objs["sk"].to_bytes(), None, "ciphertext")
    with pytest.raises(SerializationError, match="magic"):
        fhe.from_bytes(b"PK\x03\x04" + b"\0" * 200, t10.ctx)
    with pytest.raises(SerializationError, match="cannot read"):
        fhe.load("/nonexistent/file.bin", t10.ctx)


def _reseal(body: bytes) -> bytes:
    return body + hashlib.sha256(body).digest()


def _check_load(blob, ctx):
    try:
        fhe.from_bytes(blob, ctx)
    except HemlpError:
        pass  # typed error: fine


def test_fuzz_mutated_blobs(t10, objs):
    """10 000 mutations: random byte flips, truncations, and re-checksummed structural edits.
    Every one must load or raise a typed HemlpError; nothing may crash or hang."""
    ctx = t10.ctx
    rnd = np.random.default_rng(7)
    blobs = [objs[k].to_bytes() for k in ("ct", "seeded", "sk", "pk", "rlk")] + [ctx.params.to_bytes()]
    count = 0
    for i in range(10_000):
        blob = bytearray(blobs[i % len(blobs)])
        kind = i % 4
        if kind == 0:  # flip bytes (the checksum catches these)
            for _ in range(rnd.integers(1, 4)):
                blob[rnd.integers(len(blob))] ^= int(rnd.integers(1, 256))
            out = bytes(blob)
        elif kind == 1:  # truncate
            out = bytes(blob[: rnd.integers(0, len(blob))])
        elif kind == 2:  # edit the header or payload and re-checksum, so deeper validation runs
            body = blob[:-32]
            hlen = struct.unpack_from("<I", body, 6 + 2 + 1 + 32)[0]
            start = 6 + 2 + 1 + 32 + 4
            pos = int(rnd.integers(0, len(body)))
            if rnd.random() < 0.7:
                pos = int(rnd.integers(start, start + hlen))
            body[pos] = int(rnd.integers(0, 256))
            out = _reseal(bytes(body))
        else:  # out-of-range residues in the payload, re-checksummed
            body = blob[:-32]
            pos = len(body) - 8 * int(rnd.integers(1, 64))
            body[pos : pos + 8] = b"\xff" * 8
            out = _reseal(bytes(body))
        _check_load(out, ctx)
        count += 1
    assert count == 10_000


def test_structural_corruptions_are_named(t10, objs):
    ctx = t10.ctx
    body = bytearray(objs["ct"].to_bytes()[:-32])
    body[-8:] = b"\xff" * 8  # last residue >= q
    with pytest.raises(SerializationError, match="out of range"):
        fhe.from_bytes(_reseal(bytes(body)), ctx)
    blob = objs["ct"].to_bytes()
    with pytest.raises(SerializationError, match="checksum|truncated"):
        fhe.from_bytes(blob[:-100], ctx)


def test_poly_view_is_a_read_only_view_that_keeps_the_ciphertext_alive(t10):
    """Ciphertext.poly_view (what the Ray driver puts without a staging copy): the same residues as poly(),
    no copy, read-only, valid after the last Python reference to the ciphertext is gone."""
    import gc

    ctx = t10.ctx
    x = np.linspace(-1, 0.5, ctx.slots)
    ct = ctx.mul(ctx.encrypt(x, t10.pk), ctx.encrypt(x[::-1].copy(), t10.pk), t10.rlk)  # a computed ciphertext
    views = [ct._obj.poly_view(j) for j in range(ct._obj.size)]
    for j, v in enumerate(views):
        np.testing.assert_array_equal(v, ct._obj.poly(j))
        assert v.shape == (ct.level + 1, ctx.N) and v.dtype == np.uint64 and not v.flags.owndata
        assert not v.flags.writeable
        with pytest.raises(ValueError):
            v[0, 0] = 1
    want = [np.array(v) for v in views]
    with pytest.raises(IndexError):
        ct._obj.poly_view(ct._obj.size)
    del ct
    gc.collect()
    [ctx.encrypt(x, t10.pk) for _ in range(4)]  # would reuse the memory if the views did not hold it
    for v, w in zip(views, want):
        np.testing.assert_array_equal(v, w)


def _layout(obj_type: str, phash: str, header: dict, arrays: list, version: int = serialize.VERSION) -> bytes:
    """The container exactly as the module docstring lays it out, written the plain way (the reference that
    pack / pack_parts, which hash and join buffers without copying them, must reproduce byte for byte)."""
    import json

    header = dict(header, arrays=[[a.dtype.str, list(a.shape)] for a in arrays])
    h = json.dumps(header, sort_keys=True).encode()
    prefix = 6 + 2 + 1 + 32 + 4                     # magic, version, type, parameter hash, header length
    if version >= 3:                                # spaces after the JSON: the payload starts 8-byte aligned
        h += b" " * (-(prefix + len(h) + 8) % 8)
    payload = b"".join(np.ascontiguousarray(a).tobytes() for a in arrays)
    body = (serialize.MAGIC + struct.pack("<HB", version, serialize.TYPES[obj_type]) + bytes.fromhex(phash)
            + struct.pack("<I", len(h)) + h + struct.pack("<Q", len(payload)) + payload)
    return body + hashlib.sha256(body).digest()


def test_zero_copy_packing_writes_the_documented_layout(t10, objs, tmp_path):
    """pack_parts / to_parts (buffers hashed and written without an intermediate copy) give exactly the bytes of
    the documented layout, for plain arrays, ciphertexts (seeded and not) and a matrix of ciphertexts; unpack
    reads any buffer in place, with copy=False as read-only views; a matrix saved part by part loads back."""
    from hemlp.pcmm import CtMatrix

    ctx = t10.ctx
    phash = ctx.hash
    a = np.arange(12, dtype=np.uint64).reshape(3, 4)
    b = np.array([1.5, -2.0])
    assert serialize.pack("ciphertext", phash, {"k": 1}, [a, b]) == _layout("ciphertext", phash, {"k": 1}, [a, b])
    for name in ("ct", "seeded"):
        o = objs[name]._obj
        seeded = o.seeded and o.size == 2
        polys = [o.poly(0)] if seeded else [o.poly(j) for j in range(o.size)]
        header = dict(level=o.level, scale=o.scale.hex(), slots=o.slots, encoding=o.encoding, is_complex=o.is_complex,
                      key_id=f"{o.key_id:016x}", seed=o.seed.hex() if seeded else None)
        assert objs[name].to_bytes() == _layout("ciphertext", phash, header, polys), name
    m = CtMatrix(ctx, [objs["ct"], objs["seeded"]], (2, 1), 1, "rlwe")
    blobs = [c.to_bytes() for c in m.cts]
    want = _layout("ct_matrix", phash, dict(shape=[2, 1], chunks=1, format="rlwe", sizes=[len(x) for x in blobs]),
                   [np.frombuffer(b"".join(blobs), dtype=np.uint8)])
    assert m.to_bytes() == want == b"".join(m.to_parts())
    # unpack in place: from a bytearray and a memoryview too; views when asked
    for data in (want, bytearray(want), memoryview(want)):
        _, _, h, arrays = serialize.unpack(data, phash, "ct_matrix", copy=False)
        assert h["sizes"] == [len(x) for x in blobs] and arrays[0].tobytes() == b"".join(blobs)
    _, _, _, views = serialize.unpack(want, phash, "ct_matrix", copy=False)
    assert not views[0].flags.writeable
    _, _, _, copies = serialize.unpack(want, phash, "ct_matrix")
    assert copies[0].flags.writeable and copies[0].flags.owndata
    m.save(tmp_path / "m.ctm")
    back = CtMatrix.load(tmp_path / "m.ctm", ctx)
    assert [c.to_bytes() for c in back.cts] == blobs


def test_seed_expansion_known_answer():
    """A seeded ciphertext's second polynomial is expanded from its seed (AES-256-CTR, rejection mod each q):
    a file written by any hemlp version must decode to the same polynomial, so the expansion is pinned by a known
    answer (recorded with the per-value sampler; the bulk sampler reads the same keystream)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fhe.InsecureParametersWarning)
        ctx = fhe.Context(fhe.Params.preset("test-N10"), allow_insecure=True)
    c0 = np.zeros((2, ctx.N), dtype=np.uint64)
    header = dict(level=1, scale=(2.0 ** 30).hex(), slots=ctx.N // 2, encoding=0, is_complex=False,
                  key_id=f"{12345:016x}", seed="00112233445566778899aabbccddeeff" * 2)
    a = fhe.from_bytes(serialize.pack("ciphertext", ctx.hash, header, [c0]), ctx)._obj.poly(1)
    assert a[0, :3].tolist() == [1043845045192113, 65553900113939, 694512736089249]
    assert hashlib.sha256(a.tobytes()).hexdigest() == (
        "3f154479a633e3b5b3705a528b114a699b211afb60e788b7a1b351edef828a62")


@pytest.mark.parametrize("bad", [float("inf"), float("nan"), 40.5, True, "40", 10 ** 400])
def test_parameter_prime_sizes_must_be_integers(bad):
    """A hostile params header with a non-integer prime size (JSON carries Infinity, NaN, floats, booleans) is a
    SerializationError, not a Python OverflowError or a silently truncated size."""
    p = fhe.Params.preset("test-N12")
    s = p.native.spec
    header = dict(name=p.name, log_n=s.log_n, q_bits=[bad] + list(s.q_bits)[1:], p_bits=list(s.p_bits),
                  alpha=s.alpha, log_scale=s.log_scale, secret_hw=s.secret_hw)
    with pytest.raises(SerializationError):
        fhe.Params.from_bytes(serialize.pack("params", p.hash, header, []))


def test_pending_seals_give_the_bytes_of_sequential_seals(t10, objs):
    """seal_later hashes nested containers in a thread pool while the outer SHA-256 runs: the container's bytes are
    exactly those of sealing each element first; a seal that fails raises from pack_parts, never a short blob."""
    from concurrent.futures import ThreadPoolExecutor

    ctx = t10.ctx
    cts = [ctx.encrypt(np.linspace(-1, 1, ctx.slots) * (k + 1), t10.pk, level=1) for k in range(5)]
    want = serialize.pack("ct_matrix", ctx.hash, dict(n=5), [[c.to_bytes() for c in cts]])
    with ThreadPoolExecutor(max_workers=2) as pool:
        chunks = [part for c in cts for part in serialize.seal_later(*c.unsealed_parts(), pool)]
        got = b"".join(serialize.pack_parts("ct_matrix", ctx.hash, dict(n=5), [chunks]))
        assert got == want
        assert all(c.to_bytes() == b"".join(serialize.sealed(*c.unsealed_parts())) for c in cts)

        def boom(*_):
            raise RuntimeError("seal failed")

        broken = list(chunks)
        broken[-1] = serialize.PendingSeal(pool.submit(boom))
        with pytest.raises(RuntimeError, match="seal failed"):
            serialize.pack_parts("ct_matrix", ctx.hash, dict(n=5), [broken])


def _received(data: bytes, pieces, size=True):
    """data fed to a Receiver in pieces of the given lengths (cycled), announced or not."""
    r = serialize.Receiver(len(data) if size else None)
    i, k = 0, 0
    while i < len(data):
        n = pieces[k % len(pieces)]
        r.feed(data[i:i + n])
        i, k = i + n, k + 1
    return r.finish()


def test_receiver_hashes_as_the_bytes_arrive(t10, objs):
    """A Receiver keeps the bytes it is fed, in any pieces (shorter than a seal too, announced or not), and their
    digest: its seal check and SHA-256 are those of the bytes, and the loaders take a Received as they take bytes
    (a corrupted one is the same checksum mismatch); the announced size is held to, and a finished Receiver takes
    nothing more."""
    blob = objs["ct"].to_bytes()
    bad = bytearray(blob)
    bad[len(blob) // 2] ^= 1
    for data in (blob, bytes(bad), blob[:20], b""):
        for pieces, size in (([len(data) or 1], True), ([1], True), ([7, 31, 32, 33, 4096], True), ([5, 64], False)):
            got = _received(data, pieces, size)
            assert bytes(got) == data and len(got) == len(data)
            assert serialize.sha256(got) == hashlib.sha256(data).digest()
            assert got.seal_intact() == (len(data) >= 32 and serialize.seal_intact(memoryview(data)))
    got = _received(blob, [1000])
    assert got.data.readonly and got.seal_intact()
    assert serialize.unpack(got, None)[0] == serialize.unpack(blob, None)[0] == "ciphertext"
    assert fhe.from_bytes(got, t10.ctx).to_bytes() == blob and bytes(got[:6]) == serialize.MAGIC
    keys = objs["gk"].to_bytes()
    assert fhe.from_bytes(_received(keys, [999]), t10.ctx).to_bytes() == keys
    with serialize.reading(got, "ciphertext") as (obj_type, *_):
        assert obj_type == "ciphertext"
    with pytest.raises(SerializationError, match="checksum mismatch"):
        serialize.unpack(_received(bytes(bad), [1000]), None)
    with pytest.raises(SerializationError, match="checksum mismatch"):
        with serialize.reading(_received(bytes(bad), [1000]), "ciphertext"):
            pass
    r = serialize.Receiver(10)
    with pytest.raises(ValueError, match="11 bytes arrived, 10 were announced"):
        r.feed(b"x" * 11)
    r.feed(b"x" * 4)
    with pytest.raises(ValueError, match="ended after 4 of 10 bytes"):
        r.finish()
    r.feed(b"y" * 6)
    r.finish()
    for late in (lambda: r.feed(b"z"), r.finish, lambda: r.read_from(None)):
        with pytest.raises(ValueError):
            late()
    # a large announced size is not committed memory until the bytes come (a body that never does costs nothing)
    import os

    def resident() -> int:      # bytes (Linux)
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    before = resident()
    big = serialize.Receiver(1 << 30)
    big.feed(b"x" * 1000)
    assert resident() - before < (256 << 20)
    del big


def test_receiver_reads_a_stream_and_calls_its_watcher(objs):
    """read_from fills the announced size from a file's readinto, in blocks (a short stream: fewer bytes, and
    finish refuses); the watcher sees, after each piece, the whole buffer and how much of it is in."""
    import io

    blob = objs["ct"].to_bytes()
    seen = []
    r = serialize.Receiver(len(blob), watcher=lambda view, n: seen.append((len(view), n, bytes(view[:n]))))
    assert r.read_from(io.BytesIO(blob).readinto, block=1000) == len(blob)
    got = r.finish()
    assert got.seal_intact() and bytes(got) == blob and got.watcher is r.watcher
    assert [n for _, n, _ in seen] == list(range(1000, len(blob), 1000)) + [len(blob)]
    assert all(size == len(blob) and head == blob[:n] for size, n, head in seen)
    short = serialize.Receiver(len(blob) + 5)
    assert short.read_from(io.BytesIO(blob).readinto) == len(blob)
    with pytest.raises(ValueError, match="ended after"):
        short.finish()


def test_sealed_stream_is_the_packed_bytes_hashed_as_sent(t10, objs):
    """A SealedStream's length is known before it is hashed, and its parts, handed out one at a time (any number
    of times: a retried request), are pack_parts' bytes; header_end finds where a container's payload starts once
    its prefix and header are in."""
    ctx = t10.ctx
    cts = [ctx.encrypt(np.linspace(-1, 1, ctx.slots) * (k + 1), t10.pk, level=1) for k in range(3)]
    head, bufs = serialize.unsealed_parts("ct_matrix", ctx.hash, dict(n=3), [[c.to_bytes() for c in cts]])
    want = serialize.pack("ct_matrix", ctx.hash, dict(n=3), [[c.to_bytes() for c in cts]])
    stream = serialize.SealedStream(head, bufs)
    assert len(stream) == stream.nbytes == len(want)
    assert bytes(stream) == b"".join(bytes(p) for p in stream) == want
    assert serialize.header_end(want, len(head) - 9) is None
    assert serialize.header_end(want, len(head)) == len(head)
    assert serialize.header_end(want, 3) is None
