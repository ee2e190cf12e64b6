"""Evaluation keys generated only up to the level they are used at.

A key for level l holds q_0..q_l and P (num_digits(l) digits) and switches ciphertexts at levels <= l
exactly like a top-level key; above l it raises LevelError. Precision: every result decrypts to the
numpy oracle within 2^-20 (rotations, conjugation) or 2^-18 (products, as in test_keyswitch.py).
At level 0 a product of two scale-2^40 operands would not fit q_0 (50 bits), so the level-0 products
use secret-key encryptions at scale 2^23 of values with |x y| < 2 (product scale 2^46): their
encryption noise limits the numpy check to 2^-12, and the relinearised result is also checked against
the keyless size-3 decryption (which uses s^2) within 2^-25.
"""
import hashlib
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hemlp import fhe
from hemlp.fhe import serialize
from hemlp.errors import HemlpError, LevelError, ParameterError, SerializationError
from tests.conftest import bits, make_ctx
from tests.conftest import switch_key_bytes as key_bytes

REPO = Path(__file__).resolve().parents[2]
STEPS = [1, -2, 5, 1000]


class Keys:
    def __init__(self, name):
        self.ctx = make_ctx(name)
        self.sk, self.pk = self.ctx.keygen()


@pytest.fixture(scope="module")
def d6():
    """test-N12-d6: L = 6, alpha = 2, |P| = 2 (the N14-d6 chain at N = 2^12)."""
    return Keys("test-N12-d6")


def data(ctx, rng):
    return rng.uniform(-1, 1, ctx.slots) + np.arange(ctx.slots) / ctx.slots


def check_ops(ctx, sk, pk, gk, rlk, level, rng, full_gk=None, full_rlk=None):
    """Every key-switching op at `level` against numpy (and against the top-level keys if given)."""
    x, y = data(ctx, rng), rng.normal(size=ctx.slots)
    z = x + 1j * rng.uniform(-1, 1, ctx.slots)
    ct, ct2 = ctx.encrypt(x, pk, level=level), ctx.encrypt(y, sk, level=level)
    for r in STEPS:
        got = ctx.decrypt(ctx.rotate(ct, r, gk), sk)
        assert bits(got - np.roll(x, -r)) > 20, (level, r)
        if full_gk is not None:
            assert bits(got - ctx.decrypt(ctx.rotate(ct, r, full_gk), sk)) > 20
    for r, h in zip(STEPS, ctx.rotate_hoisted(ct, STEPS, gk)):
        assert bits(ctx.decrypt(h, sk) - np.roll(x, -r)) > 20, (level, r)
    assert bits(ctx.decrypt(ctx.conjugate(ctx.encrypt(z, pk, level=level), gk), sk) - np.conj(z)) > 20
    if level == 0:
        y = rng.uniform(-1, 1, ctx.slots)
        ca, cb = (ctx.encrypt(v, sk, level=0, scale=2.0 ** 23) for v in (x, y))
        raw, need = ctx.mul(ca, cb), 12
    else:
        raw, need = ctx.mul(ct, ct2), 18
    rel = ctx.decrypt(ctx.relinearize(raw, rlk), sk)
    assert bits(rel - x * y) > need, level
    assert bits(rel - ctx.decrypt(raw, sk)) > 25, level
    if full_rlk is not None:
        assert bits(rel - ctx.decrypt(ctx.relinearize(raw, full_rlk), sk)) > 20
    if level > 0:  # the fused relinearise + rescale needs a level to drop
        assert bits(ctx.decrypt(ctx.mul(ct, ct2, relin_key=rlk, rescale=True), sk) - x * y) > 18
        assert bits(ctx.decrypt(ctx.rescale(ctx.mul(ct, ct2, relin_key=rlk)), sk) - x * y) > 18


def level_keys(k, level):
    ctx = k.ctx
    gk = ctx.rotation_keys(k.sk, STEPS, level=level).merge(ctx.conjugation_key(k.sk, level=level))
    return gk, ctx.relin_key(k.sk, level=level)


# test-N12 (L = 3, alpha = 2): key level 0 = one partial digit, 1 = one full digit, 2 = a full and a partial
@pytest.mark.parametrize("key_level", [0, 1, 2])
def test_level_limited_keys_match_numpy_and_full_keys(t12, rng, key_level):
    ctx = t12.ctx
    gk, rlk = level_keys(t12, key_level)
    assert gk.level == rlk.level == key_level
    assert set(gk.levels.values()) == {key_level}
    full = ctx.rotation_keys(t12.sk, STEPS).merge(ctx.conjugation_key(t12.sk))
    for level in sorted({0, key_level // 2, key_level}):
        check_ops(ctx, t12.sk, t12.pk, gk, rlk, level, rng, full, t12.rlk)


# test-N12-d6 (L = 6): key level 4 = 3 digits (the last with one limb), 5 = 3 full digits
@pytest.mark.parametrize("key_level", [4, 5])
def test_level_limited_keys_deep_chain(d6, rng, key_level):
    gk, rlk = level_keys(d6, key_level)
    for level in (0, 3, key_level):
        check_ops(d6.ctx, d6.sk, d6.pk, gk, rlk, level, rng)


def test_default_level_is_the_top(t12):
    ctx = t12.ctx
    assert t12.rlk.level == ctx.max_level
    assert ctx.rotation_keys(t12.sk, [1]).level == ctx.max_level
    assert ctx.conjugation_key(t12.sk).level == ctx.max_level
    assert ctx.rotation_keys(t12.sk, [1], level=None).level == ctx.max_level
    assert ctx.rotation_keys(t12.sk, []).level is None  # an empty set


def test_keys_above_their_level_raise_level_error(t12, rng):
    ctx = t12.ctx
    gk, rlk = level_keys(t12, 1)
    x = data(ctx, rng)
    ct = ctx.encrypt(x, t12.pk, level=2)
    fix = r"level 2 but the .* generated for levels <= 1; generate the keys with level >= 2"
    with pytest.raises(LevelError, match="rotate: the ciphertext is at " + fix + r" \(the level of rotation-key"):
        ctx.rotate(ct, 1, gk)
    with pytest.raises(LevelError, match=fix):
        ctx.rotate_hoisted(ct, [1, -2], gk)
    with pytest.raises(LevelError, match=fix):
        ctx.conjugate(ct, gk)
    raw = ctx.mul(ct, ct)
    with pytest.raises(LevelError, match="relinearize: the ciphertext is at " + fix + r" \(the level of relin"):
        ctx.relinearize(raw, rlk)
    with pytest.raises(LevelError, match=fix):
        ctx.mul(ct, ct, relin_key=rlk)
    with pytest.raises(LevelError, match=fix):
        ctx.mul(ct, ct, relin_key=rlk, rescale=True)
    # dropping the ciphertext to the key's level is the other fix
    low = ctx.drop_level(ct, 1)
    assert bits(ctx.decrypt(ctx.rotate(low, 1, gk), t12.sk) - np.roll(x, -1)) > 20


@pytest.mark.parametrize("bad", [-1, 4, 100, 1.5, True, "2"])
def test_invalid_key_level_arguments(t12, bad):
    ctx = t12.ctx
    with pytest.raises(ParameterError, match="level"):
        ctx.relin_key(t12.sk, level=bad)
    with pytest.raises(ParameterError, match="level"):
        ctx.rotation_keys(t12.sk, [1], level=bad)
    with pytest.raises(ParameterError, match="level"):
        ctx.conjugation_key(t12.sk, level=bad)
    if isinstance(bad, int) and not isinstance(bad, bool) and bad != -1:  # the native check as well
        with pytest.raises(ParameterError, match=r"outside this context's modulus chain \[0, 3\]"):
            ctx._e.relin_key(t12.sk._obj, bad)


def _blob_parts(blob: bytes):
    hlen = struct.unpack_from("<I", blob, serialize._PREFIX.size - 4)[0]
    (plen,) = struct.unpack_from("<Q", blob, serialize._PREFIX.size + hlen)
    return hlen, plen


@pytest.mark.parametrize("name", ["test-N12", "test-N12-d6"])
def test_key_sizes_follow_the_formula(name, t12, d6):
    k = t12 if name == "test-N12" else d6
    ctx = k.ctx
    steps = [1, 2, 3]
    sizes = {}
    for level in range(ctx.max_level + 1):
        rlk = ctx.relin_key(k.sk, level=level)
        gk = ctx.rotation_keys(k.sk, steps, level=level)
        assert rlk.nbytes == key_bytes(ctx, level) == ctx.params.switch_key_bytes(level)
        assert gk.nbytes == len(steps) * key_bytes(ctx, level)
        for obj, payload in ((rlk, key_bytes(ctx, level)), (gk, len(steps) * key_bytes(ctx, level))):
            blob = obj.to_bytes()
            hlen, plen = _blob_parts(blob)
            assert plen == payload
            assert len(blob) == serialize._PREFIX.size + hlen + 8 + payload + 32
        sizes[level] = rlk.nbytes
    L, K = ctx.max_level, len(ctx.params.p)
    for level in range(L + 1):  # (digits(l) * (l + 1 + K)) / (digits(L) * (L + 1 + K))
        dl, dL = -(-(level + 1) // ctx.params.alpha), -(-(L + 1) // ctx.params.alpha)
        assert sizes[level] * dL * (L + 1 + K) == sizes[L] * dl * (level + 1 + K)
    assert all(sizes[a] < sizes[b] for a, b in zip(range(L), range(1, L + 1)))


def test_serialisation_keeps_the_level(t12, rng, tmp_path):
    ctx = t12.ctx
    gk1 = ctx.rotation_keys(t12.sk, [1, -2], level=1)
    mixed = gk1.merge(ctx.conjugation_key(t12.sk, level=2)).merge(ctx.rotation_keys(t12.sk, [5]))
    rlk = ctx.relin_key(t12.sk, level=2)
    for obj in (gk1, mixed, rlk):
        obj.save(tmp_path / "k.bin")
        back = fhe.load(tmp_path / "k.bin", ctx)
        assert type(back) is type(obj) and back.level == obj.level
        assert back.to_bytes() == obj.to_bytes()
        if isinstance(obj, fhe.GaloisKeys):
            assert back.levels == obj.levels
    assert mixed.level == 1 and sorted(mixed.levels.values()) == [1, 1, 2, 3]
    h = serialize.unpack(mixed.to_bytes(), ctx.hash)[2]
    assert sorted(h["levels"]) == [1, 1, 2, 3]
    # the reloaded keys work at their levels
    back = fhe.from_bytes(mixed.to_bytes(), ctx)
    check_ops(ctx, t12.sk, t12.pk, fhe.from_bytes(gk1.to_bytes(), ctx).merge(ctx.conjugation_key(t12.sk, level=1))
              .merge(ctx.rotation_keys(t12.sk, [5, 1000], level=1)),
              fhe.from_bytes(rlk.to_bytes(), ctx), 1, rng)
    x = data(ctx, rng)
    ct = ctx.encrypt(x, t12.pk, level=3)
    assert bits(ctx.decrypt(ctx.rotate(ct, 5, back), t12.sk) - np.roll(x, -5)) > 20  # the top-level key
    with pytest.raises(LevelError):
        ctx.rotate(ct, 1, back)


def _repack(blob: bytes, ctx, edit, version=None) -> bytes:
    """Re-serialise with an edited header (checksum recomputed): the deeper validation runs."""
    obj_type, phash, header, arrays = serialize.unpack(blob, ctx.hash)
    header.pop("arrays")
    edit(header)
    return serialize.pack(obj_type, phash, header, arrays,
                          version=serialize.peek_version(blob) if version is None else version)


@pytest.mark.parametrize("levels, match", [
    ([2], "array count does not match|limbs"),       # 2 digits expected, the data has 1
    ([0], "level 0 .* but the data has 4 limbs"),    # same digit count, fewer limbs
    ([3], "array count does not match"),
    ([-1], "invalid key level"),
    ([4], "invalid key level"),
    (["1"], "invalid key level"),
    ([True], "invalid key level"),
    ([1.0], "invalid key level"),
    ([None], "invalid key level"),
    ([], "0 key levels for 1 keys"),
    ([1, 1], "2 key levels for 1 keys"),
])
def test_tampered_level_field_is_rejected(t12, levels, match):
    ctx = t12.ctx
    blob = ctx.relin_key(t12.sk, level=1).to_bytes()
    bad = _repack(blob, ctx, lambda h: h.__setitem__("levels", levels))
    with pytest.raises(SerializationError, match=match):
        fhe.from_bytes(bad, ctx)


def test_missing_truncated_or_flipped_level_field(t12):
    ctx = t12.ctx
    blob = ctx.rotation_keys(t12.sk, [1, 3], level=1).to_bytes()
    with pytest.raises(SerializationError, match="misses field 'levels'"):
        fhe.from_bytes(_repack(blob, ctx, lambda h: h.pop("levels")), ctx)
    with pytest.raises(SerializationError, match="levels"):  # not a list
        fhe.from_bytes(_repack(blob, ctx, lambda h: h.__setitem__("levels", 1)), ctx)
    i = blob.index(b'"levels": [1, 1]')
    flipped = bytearray(blob)
    flipped[i + len('"levels": [')] = ord("2")       # without re-checksumming: the checksum catches it
    with pytest.raises(SerializationError, match="checksum"):
        fhe.from_bytes(bytes(flipped), ctx)
    for cut in (i + 5, len(blob) // 2, len(blob) - 1):
        with pytest.raises(SerializationError):
            fhe.from_bytes(blob[:cut], ctx)


def test_native_import_rejects_a_level_that_does_not_fit_the_limbs(t12):
    ctx = t12.ctx
    blob = ctx.relin_key(t12.sk, level=1).to_bytes()
    _, _, h, arrays = serialize.unpack(blob, ctx.hash)
    seeds = [bytes.fromhex(s) for s in h["seeds"]]
    e = ctx._e
    k = e.import_switch_key(list(arrays), seeds, 1, 0, 1)
    assert k.level == 1 and k.num_digits == 1
    with pytest.raises(SerializationError, match="level 0 .* but the data has 4 limbs"):
        e.import_switch_key(list(arrays), seeds, 1, 0, 0)
    with pytest.raises(SerializationError, match="digits"):
        e.import_switch_key(list(arrays), seeds, 1, 0, 2)
    for lv in (-1, 4, 1 << 30):
        with pytest.raises(SerializationError, match="outside this context's modulus chain"):
            e.import_switch_key(list(arrays), seeds, 1, 0, lv)


def test_fuzzed_level_fields_never_crash(t12):
    """Random values in the levels field (re-checksummed): a typed error or a key at the stated level."""
    ctx = t12.ctx
    blob = ctx.rotation_keys(t12.sk, [1], level=2).to_bytes()
    rnd = np.random.default_rng(3)
    pool = [-(1 << 40), -1, 0, 1, 2, 3, 4, 7, 1 << 31, 1 << 63, 2.0, "2", None, [], [2], {"a": 2}]
    loaded = 0
    for _ in range(300):
        levels = [pool[int(rnd.integers(len(pool)))] for _ in range(int(rnd.integers(0, 3)))]
        try:
            k = fhe.from_bytes(_repack(blob, ctx, lambda h: h.__setitem__("levels", levels)), ctx)
        except HemlpError:
            continue
        assert levels == [2] and k.level == 2
        loaded += 1
    assert loaded > 0


def test_version_1_files_still_load_as_top_level_keys(t12, rng):
    ctx = t12.ctx
    x = data(ctx, rng)
    ct = ctx.encrypt(x, t12.pk)
    gk = ctx.rotation_keys(t12.sk, [1])
    v1 = _repack(gk.to_bytes(), ctx, lambda h: h.pop("levels"), version=1)
    assert serialize.peek_version(v1) == 1
    back = fhe.from_bytes(v1, ctx)
    assert back.level == ctx.max_level
    assert bits(ctx.decrypt(ctx.rotate(ct, 1, back), t12.sk) - np.roll(x, -1)) > 20
    rv1 = _repack(t12.rlk.to_bytes(), ctx, lambda h: h.pop("levels"), version=1)
    assert fhe.from_bytes(rv1, ctx).level == ctx.max_level
    # a version 1 header around level-limited arrays does not fit the top level: refused
    low = _repack(ctx.rotation_keys(t12.sk, [1], level=1).to_bytes(), ctx, lambda h: h.pop("levels"), version=1)
    with pytest.raises(SerializationError):
        fhe.from_bytes(low, ctx)
    # newer versions are refused by number
    body = bytearray(gk.to_bytes()[:-32])
    struct.pack_into("<H", body, 6, serialize.VERSION + 1)
    with pytest.raises(SerializationError, match=f"format version {serialize.VERSION + 1} is not supported.*reads "
                                                 "versions 1, 2, 3.*upgrade hemlp"):
        fhe.from_bytes(bytes(body) + hashlib.sha256(bytes(body)).digest(), ctx)


CHILD = r"""
import sys, warnings
from hemlp import fhe
d = sys.argv[1]
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    ctx = fhe.Context("test-N12-d6", allow_insecure=True)
gk = fhe.load(f"{d}/gk.bin", ctx)
rlk = fhe.load(f"{d}/rlk.bin", ctx)
for lv in map(int, sys.argv[2].split(",")):
    a, b = fhe.load(f"{d}/a{lv}.bin", ctx), fhe.load(f"{d}/b{lv}.bin", ctx)
    r = fhe.load(f"{d}/r0.bin", ctx) if lv == 0 else a
    open(f"{d}/rot{lv}.bin", "wb").write(ctx.rotate(r, 5, gk).to_bytes())
    for i, c in enumerate(ctx.rotate_hoisted(r, [1, -2, 1000], gk)):
        open(f"{d}/h{lv}_{i}.bin", "wb").write(c.to_bytes())
    open(f"{d}/rel{lv}.bin", "wb").write(ctx.relinearize(ctx.mul(a, b), rlk).to_bytes())
    if lv:
        open(f"{d}/mul{lv}.bin", "wb").write(ctx.mul(a, b, relin_key=rlk, rescale=True).to_bytes())
"""


def test_simd_and_scalar_paths_agree_on_level_limited_keys(d6, rng, tmp_path):
    """The SIMD key inner product (this process, when the CPU has one) and the scalar one
    (HEMLP_SIMD=scalar child) give bit-identical results with a level-4 key, at levels 0, 2, 4;
    both decrypt to numpy (level-0 products as in the module docstring)."""
    ctx = d6.ctx
    levels = [0, 2, 4]
    gk = ctx.rotation_keys(d6.sk, [1, -2, 5, 1000], level=4)
    rlk = ctx.relin_key(d6.sk, level=4)
    gk.save(tmp_path / "gk.bin")
    rlk.save(tmp_path / "rlk.bin")
    x, y = data(ctx, rng), rng.uniform(-1, 1, ctx.slots)
    cts = {}
    for lv in levels:
        cts[lv] = ctx.encrypt(x, d6.pk, level=lv), ctx.encrypt(y, d6.pk, level=lv)
        if lv == 0:  # a level-0 product must fit q_0: see the module docstring
            cts[lv] = tuple(ctx.encrypt(v, d6.sk, level=0, scale=2.0 ** 23) for v in (x, y))
            cts["r0"] = ctx.encrypt(x, d6.pk, level=0)
            cts["r0"].save(tmp_path / "r0.bin")
        cts[lv][0].save(tmp_path / f"a{lv}.bin")
        cts[lv][1].save(tmp_path / f"b{lv}.bin")
    # the child forced to the scalar path (HEMLP_DISABLE_AVX512 alone gives AVX2 where the CPU has it, and
    # contradicts an inherited HEMLP_SIMD=avx512)
    env = dict(os.environ, HEMLP_SIMD="scalar", PYTHONPATH=str(REPO))
    env.pop("HEMLP_DISABLE_AVX512", None)
    r = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path), ",".join(map(str, levels))], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr

    def same(ct, name):
        scalar = fhe.load(tmp_path / name, ctx)
        assert ct.to_bytes() == scalar.to_bytes(), name
        return ctx.decrypt(scalar, d6.sk)

    for lv in levels:
        a, b = cts[lv]
        r = cts["r0"] if lv == 0 else a
        assert bits(same(ctx.rotate(r, 5, gk), f"rot{lv}.bin") - np.roll(x, -5)) > 20
        for i, (s, h) in enumerate(zip([1, -2, 1000], ctx.rotate_hoisted(r, [1, -2, 1000], gk))):
            assert bits(same(h, f"h{lv}_{i}.bin") - np.roll(x, -s)) > 20
        raw = ctx.mul(a, b)
        rel = same(ctx.relinearize(raw, rlk), f"rel{lv}.bin")
        assert bits(rel - x * y) > (12 if lv == 0 else 18)
        assert bits(rel - ctx.decrypt(raw, d6.sk)) > 25
        if lv:
            assert bits(same(ctx.mul(a, b, relin_key=rlk, rescale=True), f"mul{lv}.bin") - x * y) > 18


def test_header_levels_are_plain_json_ints(t12):
    """The levels field is readable by other tools: a JSON list of ints, one per key."""
    ctx = t12.ctx
    blob = ctx.rotation_keys(t12.sk, [1, 2], level=1).to_bytes()
    hlen, _ = _blob_parts(blob)
    header = json.loads(blob[serialize._PREFIX.size: serialize._PREFIX.size + hlen])
    assert header["levels"] == [1, 1] and serialize.peek_version(blob) == serialize.VERSION == 3
