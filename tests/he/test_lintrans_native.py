"""The native BSGS linear transform (csrc/boot/lintrans) against numpy and the Python reference path.

Insecure N = 2^12 test chain (60 + 9×40 bits, P = 2×61, α = 2), asymmetric random complex data.
Precision is -log2(max |error| / max |expected|) against numpy's T·x (a dense matrix built from the
diagonals, or the DFT oracles of test_dft) and must reach MIN_BITS (measured 25-29 bits; the fresh
encryption noise dominates). Single hoisting runs exactly the Python path's operations, so its
ciphertext is bit-identical to it; double hoisting differs only by key-switching noise.
"""
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from hemlp import fhe
from hemlp.he import lintrans as lt
from hemlp.he import dft
from hemlp.he import special_fft as sf
from hemlp.errors import (ContextMismatchError, EncodingError, KeyMismatchError, LevelError, MissingKeyError,
                          ParameterError, ShapeError)

REPO = Path(__file__).resolve().parents[2]
LOG_N = 12
N = 1 << LOG_N
FULL, SPARSE = N // 2, 256
MIN_BITS = 24
DFT_CONFIGS = [(FULL, 2), (FULL, 3), (FULL, 4), (SPARSE, 3)]
BANDED_OFFSETS = [0, 1, 2, 7, -3, 40, -41, 333, -1000, 1024]


def params():
    return fhe.Params(LOG_N, (60,) + (40,) * 9, (61, 61), alpha=2, log_scale=40, name="test-N12-d9")


def make_context():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fhe.Context(params(), allow_insecure=True)


def rel_bits(got, expected) -> float:
    err = float(np.max(np.abs(np.asarray(got) - np.asarray(expected))))
    return float("inf") if err == 0 else float(np.log2(np.max(np.abs(expected)) / err))


def dense(L: lt.LinearTransform) -> np.ndarray:
    """The n×n matrix whose generalised diagonals L holds: T[i, (i + k) mod n] = diag_k[i]."""
    n = L.n
    T = np.zeros((n, n), dtype=complex)
    i = np.arange(n)
    for k, v in L.diags.items():
        T[i, (i + k) % n] += v
    return T


def subring_data(rng, n):
    gap = N // (2 * n)
    x = np.zeros(N)
    k = np.arange(n) * gap
    x[k] = rng.uniform(-1, 1, n)
    x[N // 2 + k] = rng.uniform(-0.5, 1, n)  # asymmetric
    return x


def w_of(x, n):
    gap = N // (2 * n)
    k = np.arange(n) * gap
    return x[k] + 1j * x[N // 2 + k]


class Env:
    def __init__(self):
        self.ctx = make_context()
        self.sk, self.pk = self.ctx.keygen()
        rng = np.random.default_rng(11)
        self.plans = {c: (dft.plan_coeff_to_slot(*c), dft.plan_slot_to_coeff(*c)) for c in DFT_CONFIGS}
        self.banded = lt.LinearTransform(
            {k: rng.uniform(-1, 1, FULL) + 1j * rng.uniform(-0.3, 1, FULL) for k in BANDED_OFFSETS}, FULL)
        # one group of 48 products (> 32: the lazy accumulators are folded) on 64 slots
        self.naive = lt.LinearTransform(rng.uniform(-1, 1, (48, 64)) + 1j * rng.uniform(-1, 1, (48, 64)), 64,
                                        bsgs=False)
        steps = set(dft.dft_rotation_steps(*[p for pr in self.plans.values() for p in pr]))
        steps |= set(self.banded.steps) | set(self.naive.steps)
        self.keys = self.ctx.rotation_keys(self.sk, sorted(steps))


@pytest.fixture(scope="module")
def env():
    return Env()


def three_ways(L, ctx, ct, keys, **kw):
    """(Python path, native single, native double) results and the native counts."""
    py = L.apply(ctx, ct, keys, native=False, **kw)
    single, cs = L.apply_native(ctx, ct, keys, hoisting="single", **kw)
    double, cd = L.apply_native(ctx, ct, keys, hoisting="double", **kw)
    return py, single, double, cs, cd


@pytest.mark.parametrize("which", ["banded", "naive", "cts-level", "stc-level"])
def test_single_level_native_equals_python_path_and_numpy(env, which, rng):
    ctx, sk = env.ctx, env.sk
    L = {"banded": env.banded, "naive": env.naive, "cts-level": env.plans[(FULL, 3)][0].levels[0],
         "stc-level": env.plans[(FULL, 3)][1].levels[1]}[which]
    x = rng.uniform(-1, 1, L.n) + 1j * rng.uniform(-0.5, 1, L.n)
    ct = ctx.encrypt(x, env.pk, slots=L.n, level=7)
    expected = dense(L) @ x
    py, single, double, cs, cd = three_ways(L, ctx, ct, env.keys)
    for y in (py, single, double):
        assert y.level == ct.level - 1 and y.scale == ct.scale and y.slots == L.n
    assert single.to_bytes() == py.to_bytes()                 # same operations, same bits
    bits = {name: rel_bits(ctx.decrypt(y, sk), expected) for name, y in (("py", py), ("double", double))}
    assert bits["py"] >= MIN_BITS and bits["double"] >= MIN_BITS, bits
    assert bits["double"] >= bits["py"] - 1, bits
    assert rel_bits(ctx.decrypt(double, sk), ctx.decrypt(py, sk)) >= MIN_BITS
    # what the hoisting saves: one ModUp for every baby step, ModDowns only per giant step in double
    p = L.plan
    for c in (cs, cd):
        assert c["modup"] == int(bool(p.baby)) + len(p.giant)
        assert c["inner_product"] == p.rotations
        assert c["pmult"] == p.diagonals and c["rescale"] == 1
    assert cs["moddown"] == 2 * p.rotations
    assert cd["moddown"] == len(p.giant) + 2


@pytest.mark.parametrize("cfg", DFT_CONFIGS, ids=[f"n{n}-d{d}" for n, d in DFT_CONFIGS])
def test_full_coeff_to_slot_and_slot_to_coeff_native(env, cfg, rng):
    n, depth = cfg
    ctx, sk = env.ctx, env.sk
    cts, stc = env.plans[cfg]
    x = subring_data(rng, n)
    ct = ctx.encrypt(x, env.pk, encoding="coeff")
    expected = w_of(x, n)[sf.bit_reverse(n)]
    got, bits = {}, {}
    for mode, kw in (("py", dict(native=False)), ("single", dict(hoisting="single")),
                     ("double", dict(hoisting="double"))):
        y = dft.coeff_to_slot(ctx, ct, env.keys, cts, **kw)
        assert y.level == ct.level - depth and y.scale == ct.scale and (y.encoding, y.slots) == ("slot", n)
        got[mode] = y
        bits[mode] = rel_bits(ctx.decrypt(y, sk), expected)
    assert got["single"].to_bytes() == got["py"].to_bytes()
    assert min(bits.values()) >= MIN_BITS and bits["double"] >= bits["py"] - 1, bits
    # StC(CtS(x)) = x, native (the default schedule) both ways; StC alone against its numpy oracle
    back = dft.slot_to_coeff(ctx, got["double"], env.keys, stc)
    assert back.level == ct.level - 2 * depth and back.scale == ct.scale and back.encoding == "coeff"
    assert rel_bits(ctx.decrypt(back, sk), x) >= MIN_BITS
    v = rng.uniform(-1, 1, n) + 1j * rng.uniform(-0.5, 1, n)
    cv = ctx.encrypt(v[sf.bit_reverse(n)], env.pk, slots=n)
    gap = N // (2 * n)
    ref = np.zeros(N)
    dv = ctx.decrypt(cv, sk)[sf.bit_reverse(n)]
    ref[np.arange(n) * gap], ref[N // 2 + np.arange(n) * gap] = dv.real, dv.imag
    sb = {mode: rel_bits(ctx.decrypt(dft.slot_to_coeff(ctx, cv, env.keys, stc, **kw), sk), ref)
          for mode, kw in (("py", dict(native=False)), ("double", dict(hoisting="double")))}
    assert min(sb.values()) >= MIN_BITS and sb["double"] >= sb["py"] - 1, sb


def test_hoisting_rule_picks_double_where_it_was_measured_faster():
    """choose_hoisting against the outcomes that were clear (> 5 % apart) at both N = 2^14 and 2^15
    (set B chain, |P| = 6, 1 thread, CPU time)."""
    cts = dft.plan_coeff_to_slot(1 << 13, 4)
    heavy = cts.levels[3].plan  # 31 diagonals, 7 baby + 3 giant steps
    light = cts.levels[2].plan  # 15 diagonals, 3 + 3
    wide = dft.plan_slot_to_coeff(1 << 13, (5, 4, 4)).levels[0].plan  # 63 diagonals, 7 + 7
    assert (heavy.diagonals, len(heavy.baby), len(heavy.giant)) == (31, 7, 3)
    assert (light.diagonals, len(light.baby), len(light.giant)) == (15, 3, 3)
    assert (wide.diagonals, len(wide.baby), len(wide.giant)) == (63, 7, 7)
    for level in (12, 13, 16, 20, 25, 28):  # measured 1.07x-1.16x for double
        assert lt.choose_hoisting(heavy, level, 6) == "double"
    for level in (2, 3):                    # measured 0.77x-0.94x
        assert lt.choose_hoisting(heavy, level, 6) == "single"
    for level in (8, 11, 13, 16, 26):       # measured 1.02x-1.09x
        assert lt.choose_hoisting(light, level, 6) == "double"
    for level in (4, 8):                    # measured 0.81x-0.85x
        assert lt.choose_hoisting(wide, level, 6) == "single"
    # the bootstrapping DFT asks for double hoisting explicitly (faster at every set B level at N = 2^15)
    import inspect
    assert inspect.signature(dft.coeff_to_slot).parameters["hoisting"].default == "double"
    assert inspect.signature(dft.slot_to_coeff).parameters["hoisting"].default == "double"


def test_no_rescale_keeps_the_level_and_multiplies_the_scale(env, rng):
    ctx, sk, L = env.ctx, env.sk, env.banded
    x = rng.uniform(-1, 1, FULL) + 1j * rng.uniform(-1, 1, FULL)
    ct = ctx.encrypt(x, env.pk, level=5)
    q = float(ctx.modulus(5))
    for h in ("single", "double"):
        y, c = L.apply_native(ctx, ct, env.keys, rescale=False, hoisting=h)
        assert y.level == 5 and y.scale == ct.scale * q and c["rescale"] == 0
        assert rel_bits(ctx.decrypt(ctx.rescale(y), sk), dense(L) @ x) >= MIN_BITS


def test_diagonals_are_encoded_over_qp_once_per_level(env, rng):
    ctx, L = env.ctx, lt.LinearTransform(env.banded.diags, FULL)
    assert L.nbytes == 0
    t5 = L.encode_native(ctx, 5)
    assert L.encode_native(ctx, 5) is t5 and t5.level == 5 and t5.scale == float(ctx.modulus(5))
    per = (5 + 1 + len(ctx.params.p)) * N * 8
    assert t5.nbytes == L.plan.diagonals * per == L.nbytes
    L.encode_native(ctx, 3)
    assert L.nbytes == L.plan.diagonals * (per + (3 + 1 + len(ctx.params.p)) * N * 8)
    assert sorted(t5.steps) == L.steps
    # single hoisting alone needs Q_level only; a later double-hoisted call re-encodes over Q_level ∪ P
    L.clear_cache()
    ct = ctx.encrypt(rng.uniform(-1, 1, FULL), env.pk, level=5)
    ys = L.apply(ctx, ct, env.keys, hoisting="single")
    assert not L.encode_native(ctx, 5, qp=False).qp and L.nbytes == L.plan.diagonals * 6 * N * 8
    yd = L.apply(ctx, ct, env.keys, hoisting="double")
    assert L.encode_native(ctx, 5, qp=False).qp and L.nbytes == L.plan.diagonals * per
    assert ys.to_bytes() == L.apply(ctx, ct, env.keys, hoisting="single").to_bytes()  # same bits from either set
    assert rel_bits(ctx.decrypt(yd, env.sk), ctx.decrypt(ys, env.sk)) >= MIN_BITS
    # nothing to rotate: no keys needed
    ident = lt.LinearTransform({0: rng.uniform(-1, 1, FULL)}, FULL)
    y = ident.apply(ctx, ct, None)
    assert rel_bits(ctx.decrypt(y, env.sk), ident.diags[0] * ctx.decrypt(ct, env.sk)) >= MIN_BITS


def test_bad_input_gets_typed_errors(env, rng):
    ctx, sk, pk, L = env.ctx, env.sk, env.pk, env.banded
    ct = ctx.encrypt(rng.uniform(-1, 1, FULL), pk, level=4)
    step = L.steps[3]
    short = ctx.rotation_keys(sk, [s for s in L.steps if s != step])
    for h in ("single", "double"):
        with pytest.raises(MissingKeyError, match=rf"rotation step {step} \(Galois element"):
            L.apply(ctx, ct, short, hoisting=h)
    with pytest.raises(MissingKeyError, match="rotation_keys"):
        L.apply(ctx, ct, None)
    with pytest.raises(ShapeError, match="2048 slots but the ciphertext has 64"):
        L.apply(ctx, ctx.encrypt(np.ones(64), pk, slots=64), env.keys)
    with pytest.raises(LevelError, match="level 0"):
        L.apply(ctx, ctx.encrypt(np.ones(FULL), pk, level=0), env.keys)
    with pytest.raises(LevelError, match="consumes 3 levels"):
        dft.coeff_to_slot(ctx, ctx.encrypt(subring_data(rng, FULL), pk, encoding="coeff", level=2), env.keys,
                          env.plans[(FULL, 3)][0])
    low = ctx.rotation_keys(sk, L.steps, level=2)
    with pytest.raises(LevelError, match="levels <= 2"):
        L.apply(ctx, ct, low)
    huge = lt.LinearTransform({0: np.full(FULL, 1e150), 1: np.ones(FULL)}, FULL)
    with pytest.raises(EncodingError, match="too large"):
        huge.apply(ctx, ct, env.keys)
    with pytest.raises(ParameterError, match="hoisting"):
        L.apply(ctx, ct, env.keys, hoisting="triple")
    with pytest.raises(ParameterError, match="rotated"):
        L.apply(ctx, ct, env.keys, native=True, rotated={})
    with pytest.raises(KeyMismatchError):  # same parameters, another key pair
        L.apply(ctx, ct, ctx.rotation_keys(ctx.keygen()[0], L.steps))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        other = fhe.Context(fhe.Params(LOG_N, (60,) + (40,) * 5, (61, 61), alpha=2, log_scale=40), True)
    with pytest.raises(ContextMismatchError):
        L.apply(ctx, other.encrypt(np.ones(FULL), other.keygen()[1], level=4), env.keys)


CHILD = r"""
import sys, warnings
import numpy as np
sys.path.insert(0, sys.argv[2])
from tests.he.test_lintrans_native import make_context
from hemlp import fhe
from hemlp.he import lintrans as lt
d = sys.argv[1]
ctx = make_context()
ct = fhe.load(f"{d}/ct.bin", ctx)
gk = fhe.load(f"{d}/gk.bin", ctx)
for name in ("banded", "naive"):
    z = np.load(f"{d}/{name}.npz")
    L = lt.LinearTransform({int(k): z[k] for k in z.files}, int(z[z.files[0]].size), bsgs=name == "banded")
    c = ct if L.n == ct.slots else fhe.load(f"{d}/ct64.bin", ctx)
    for h in ("single", "double"):
        open(f"{d}/{name}_{h}.bin", "wb").write(L.apply(ctx, c, gk, hoisting=h).to_bytes())
"""


def test_simd_and_scalar_paths_give_the_same_bits(env, tmp_path, rng):
    """The AVX-512 product-sum kernel and the scalar one (forced in a child process) agree bit for bit."""
    ctx = env.ctx
    ct = ctx.encrypt(rng.uniform(-1, 1, FULL) + 1j * rng.uniform(-1, 1, FULL), env.pk, level=6)
    ct64 = ctx.encrypt(rng.uniform(-1, 1, 64), env.pk, slots=64, level=6)
    ct.save(tmp_path / "ct.bin")
    ct64.save(tmp_path / "ct64.bin")
    env.keys.save(tmp_path / "gk.bin")
    for name in ("banded", "naive"):
        L = getattr(env, name)
        np.savez(tmp_path / f"{name}.npz", **{str(k): v for k, v in L.diags.items()})
    r = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path), str(REPO)], capture_output=True, text=True,
                       env=dict(os.environ, HEMLP_DISABLE_AVX512="1", PYTHONPATH=str(REPO)), timeout=600)
    assert r.returncode == 0, r.stderr
    for name in ("banded", "naive"):
        L = getattr(env, name)
        c = ct if L.n == FULL else ct64
        for h in ("single", "double"):
            assert L.apply(ctx, c, env.keys, hoisting=h).to_bytes() == (tmp_path / f"{name}_{h}.bin").read_bytes()
