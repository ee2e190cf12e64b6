"""The committed bit-exactness table (tests/gpu/golden_digests.json) is what the CPU core computes today.

The device check (scripts/gpu_check.sh) compares the CUDA backend against this table on a GPU machine that has no
CPU core build; this test re-derives every digest from the core, so a change of the core's arithmetic that the
table misses fails here, on the CPU, in every CI run.
"""
import numpy as np
import pytest

from hemlp.errors import ParameterError, ShapeError
from hemlp.gpu import golden
from hemlp.gpu.device import DeviceSpec


@pytest.fixture(scope="module")
def table():
    return golden.load_table()


def test_table_lists_every_case(table):
    assert set(table["cases"]) == {c.name for c in golden.CASES}
    assert set(table["specs"]) == {c.preset for c in golden.CASES}


@pytest.mark.parametrize("preset", sorted({c.preset for c in golden.CASES}))
def test_digests_are_the_cpu_core_s(table, preset):
    ctx = golden.cpu_context(preset)
    spec = DeviceSpec.from_context(ctx)
    assert spec.to_dict() == table["specs"][preset], "the preset's primes or roots changed: rebuild the table"
    for case in (c for c in golden.CASES if c.preset == preset):
        assert golden.compute_cpu(case, ctx, spec) == table["cases"][case.name], case.name


def test_psi_is_the_ntt_root():
    """DeviceSpec reads psi off the core's NTT of X: psi is a primitive 2N-th root and NTT(X)_j = psi^(2 brv(j)+1)."""
    ctx = golden.cpu_context("test-N12")
    spec = DeviceSpec.from_context(ctx)
    n, log_n = spec.n, spec.log_n
    for m, psi in enumerate(spec.psi):
        q = spec.modulus(m)
        assert pow(psi, n, q) == q - 1
        x = np.zeros(n, dtype=np.uint64)
        x[1] = 1
        out = ctx.native.ntt_limb(x, m, False)
        for j in (0, 1, 5, n - 1):
            brv = int(format(j, f"0{log_n}b")[::-1], 2)
            assert int(out[j]) == pow(psi, 2 * brv + 1, q)


def test_elementwise_reference_matches_the_core_mul_plain():
    """The Python-integer product the 'mul' cases use equals the core's mul_plain on the same words."""
    ctx = golden.cpu_context("test-N12")
    spec = DeviceSpec.from_context(ctx)
    pt = ctx.encode(np.linspace(-1, 1, ctx.slots), level=2)
    a = golden.poly(spec, 7, 2)
    ct = ctx.native.import_ciphertext([a, a], 2, golden.SCALE, spec.n // 2, 0, False, golden.KEY_ID, None)
    want = ctx.native.mul_plain(ct, pt.native).poly(0)
    assert np.array_equal(golden.elementwise_product(a, pt.native.poly(), spec), want)


def test_switch_key_round_trip_through_arrays():
    """export_switch_key_expanded gives the a-parts the core uses: a key rebuilt from them switches identically."""
    ctx = golden.cpu_context("test-N12")
    sk, pk = ctx.keygen()
    rlk = ctx.relin_key(sk)
    bs, as_ = ctx.native.export_switch_key_expanded(rlk.native)
    again = ctx.native.switch_key_from_arrays(bs, as_, 0, rlk.level, rlk.key_id)
    x = ctx.encrypt(np.linspace(-1, 1, ctx.slots), pk)
    one = ctx.native.mul_relin_rescale(x.native, x.native, rlk.native)
    two = ctx.native.mul_relin_rescale(x.native, x.native, again)
    assert all(np.array_equal(one.poly(j), two.poly(j)) for j in range(2))
    with pytest.raises(ShapeError, match="digits"):
        ctx.native.switch_key_from_arrays(bs[:1], as_[:1], 0, rlk.level, rlk.key_id)
    bad = [b.copy() for b in bs]
    bad[0][0, 0] = ctx.modulus(0)  # a residue equal to its modulus
    with pytest.raises(ParameterError, match="residue"):
        ctx.native.switch_key_from_arrays(bad, as_, 0, rlk.level, rlk.key_id)


def test_lintrans_layout_round_trip():
    """A transform rebuilt from its exported layout (what hemlp.gpu uploads) computes the same words as the one the
    core encoded, under both hoistings; a residue out of range is refused."""
    from hemlp import _core

    ctx = golden.cpu_context("test-N12")
    sk, pk = ctx.keygen()
    rng = np.random.default_rng(11)
    slots, level = ctx.slots, 2
    giant, baby = [0, 4], [[0, 1, 2, 3], [0, 1, 2, 3]]
    diags = rng.uniform(-1, 1, (8, slots)) + 1j * rng.uniform(-1, 1, (8, slots))
    lt = _core.LinearTransform(ctx.native, slots, level, float(ctx.modulus(level)), giant, baby, diags, True)
    g, b, enc, cplx = lt.layout()
    assert g == giant and b == baby and cplx and len(enc) == 8 and enc[0].shape == (level + 1 + 2, ctx.N)
    again = _core.LinearTransform.from_encoded(ctx.native, slots, level, lt.scale, g, b, enc, True, cplx)
    gk = ctx.rotation_keys(sk, [1, 2, 3, 4])
    x = ctx.encrypt(rng.uniform(-1, 1, slots), pk, level=level)
    for hoisting in (1, 2):
        one, _ = lt.apply(ctx.native, x.native, gk.native, hoisting, True)
        two, _ = again.apply(ctx.native, x.native, gk.native, hoisting, True)
        assert all(np.array_equal(one.poly(j), two.poly(j)) for j in range(2))
    bad = [e.copy() for e in enc]
    bad[3][1, 5] = ctx.modulus(1)
    with pytest.raises(ParameterError, match="residue"):
        _core.LinearTransform.from_encoded(ctx.native, slots, level, lt.scale, g, b, bad, True, cplx)
    with pytest.raises(ShapeError):
        _core.LinearTransform.from_encoded(ctx.native, slots, level, lt.scale, g, b, enc[:7], True, cplx)
