"""The SIMD paths (scalar, AVX2, AVX-512; ring/simd.h) give bit-identical results.

The path is chosen once per process, so every path this CPU has runs in its own child process
(HEMLP_SIMD=scalar|avx2|avx512) on the same inputs, written by the parent; each child's outputs are
compared bit for bit with the scalar child's. Covered kernels: forward / inverse NTT (SIMD: integer
Shoup for primes >= 2^46, double precision below), base conversion (into 61- and 45-bit targets)
(centred and not, 1..7 source primes), element-wise ops (the ct x ct tensor, add, rescale, the fused
mul + relinearise + rescale), key switching end to end (relinearisation, a rotation, hoisted
rotations) and the modular GEMM (one K-block, several K-blocks, the int64 fold). On a machine
without AVX2 only the scalar path runs and the comparison is empty: the test says so by skipping.
"""
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from hemlp import fhe
from hemlp._core import ring

REPO = Path(__file__).resolve().parents[2]

# (bits, log_n): the moduli sizes of the presets (30..61 bits), the smallest SIMD ring (2^4) and
# sizes that are not multiples of the 256-coefficient base-conversion block; AVX2 and AVX-512 run primes below
# 2^46 in double precision (ring/ntt.cpp), whose exactness bound is tightest at the largest ring (2^17)
NTT_CASES = [(30, 4), (40, 5), (50, 10), (60, 12), (61, 13), (45, 15), (40, 14), (45, 17)]
BC_SOURCES = (1, 3, 7)  # source primes of the base conversions
# centred lifts (the rescale's): (bits of the source prime, bits of the target prime), larger into smaller too
LIFT_BITS = [(40, 60), (60, 40), (61, 30), (45, 45)]
# modular GEMM: (d1, d2, n, bits of q, bU, config overrides)
GEMM_CASES = [
    (5, 37, 70, 61, 8, {}),                      # one K-block, recombination only
    (7, 64, 33, 50, 12, {"w": 3, "u": 2, "kb": 5}),   # many K-blocks: int64 accumulation
    (3, 1100, 9, 40, 33, {"w": 20}),             # kb = 1: > 511 blocks, the int64 fold
    (4, 256, 40, 33, 12, {}),                    # a 33-bit prime in one digit (N14-pcmm): 2^8 2^12 2^32 < 2^53
]

CHILD = r"""
import sys, warnings
import numpy as np
from hemlp import fhe
from hemlp._core import ring
import hemlp._core as core
from hemlp import pcmm
d, path = sys.argv[1], sys.argv[2]
assert ring.simd_path() == path, (ring.simd_path(), path)
LIFT_CASES = [tuple(map(int, c.split(":"))) for c in sys.argv[5].split(",")]
out = {}
for bits, log_n in [tuple(map(int, c.split(":"))) for c in sys.argv[3].split(",")]:
    q = ring.ntt_primes(bits, log_n, 1)[0]
    a = np.load(f"{d}/ntt_in_{bits}_{log_n}.npy")
    out[f"fwd_{bits}_{log_n}"] = ring.ntt(a, q, log_n)
    out[f"inv_{bits}_{log_n}"] = ring.ntt(a, q, log_n, inverse=True)
    e = np.load(f"{d}/ntt_ext_{bits}_{log_n}.npy")  # extreme residues only: the largest growth between stages
    out[f"fwd_ext_{bits}_{log_n}"] = ring.ntt(e, q, log_n)
    out[f"inv_ext_{bits}_{log_n}"] = ring.ntt(e, q, log_n, inverse=True)
    for k in map(int, sys.argv[4].split(",")):
        frm = ring.ntt_primes(bits, log_n, k)
        # 61-bit targets (integer kernels) and 45-bit ones (AVX2: double precision, ring/rns.cpp)
        to = ring.ntt_primes(61, log_n, 2, frm)
        to = to + ring.ntt_primes(45, log_n, 2, frm + to)
        x = np.load(f"{d}/bc_in_{bits}_{log_n}_{k}.npy")
        out[f"bcc_{bits}_{log_n}_{k}"] = ring.base_convert(x, frm, to, centred=True)
        out[f"bc_{bits}_{log_n}_{k}"] = ring.base_convert(x, frm, to, centred=False)
for i, (frm, to) in enumerate(LIFT_CASES):
    out[f"lift_{i}"] = ring.centred_lift(np.load(f"{d}/lift_{i}.npy"), frm, to)
g = np.load(f"{d}/gemm.npz", allow_pickle=True)
for i, cfg in enumerate(g["cfgs"]):
    out[f"gemm_{i}"] = core.modgemm(g[f"U{i}"], g[f"X{i}"], int(g["qs"][i]), int(g["bUs"][i]), **cfg)
np.savez(f"{d}/{path}.npz", **out)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    ctx = fhe.Context("test-N12", allow_insecure=True)
ct, ct2 = fhe.load(f"{d}/ct.bin", ctx), fhe.load(f"{d}/ct2.bin", ctx)
rlk, gk = fhe.load(f"{d}/rlk.bin", ctx), fhe.load(f"{d}/gk.bin", ctx)
cts = {
    "tensor": ctx.mul(ct, ct2),                                         # tensor product (3 parts)
    "relin": ctx.relinearize(ctx.mul(ct, ct2), rlk),                    # key switch + add
    "rescale": ctx.rescale(ctx.add(ct, ct2)),                           # rescale (sub_mul_shoup)
    # PCMM: K folded into the GEMM recombination, rows written in place, then the rescale's centred lift
    "pcmm": pcmm.pcmm(np.array([[0.75, -1.5], [0.3, 2.0], [-0.9, 0.1]]),
                        pcmm.CtMatrix(ctx, [ct, ct2], (2, ctx.slots), 1, "rlwe"), weight_bits=14).cts[2],
    "fused": ctx.mul(ct, ct2, relin_key=rlk, rescale=True),             # ModDown + rescale fused
    "rot": ctx.rotate(ct, 3, gk),
}
for i, c in enumerate(ctx.rotate_hoisted(ct2, [1, 2, 5], gk)):
    cts[f"hoisted{i}"] = c
for name, c in cts.items():
    open(f"{d}/{path}_{name}.bin", "wb").write(c.to_bytes())
"""
CT_NAMES = ["tensor", "relin", "rescale", "pcmm", "fused", "rot", "hoisted0", "hoisted1", "hoisted2"]


def _paths():
    return [p.strip() for p in ring.simd_available().split(",")]


def _lift_moduli():
    out = []
    for a, b in LIFT_BITS:
        frm = ring.ntt_primes(a, 10, 1)[0]
        out.append((frm, ring.ntt_primes(b, 10, 1, [frm])[0]))
    return out


def _run_child(tmp_path, path):
    env = dict(os.environ, HEMLP_SIMD=path, PYTHONPATH=str(REPO))
    env.pop("HEMLP_DISABLE_AVX512", None)
    r = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path), path,
                        ",".join(f"{b}:{n}" for b, n in NTT_CASES), ",".join(map(str, BC_SOURCES)),
                        ",".join(f"{a}:{b}" for a, b in _lift_moduli())],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{path}: {r.stderr}"


def test_every_simd_path_is_bit_identical_to_scalar(tmp_path, t12):
    paths = _paths()
    assert paths[-1] == "scalar"
    if len(paths) == 1:
        pytest.skip("this CPU has no AVX2: only the scalar path exists")
    rng = np.random.default_rng(7)
    for bits, log_n in NTT_CASES:
        q = ring.ntt_primes(bits, log_n, 1)[0]
        a = rng.integers(0, q, 1 << log_n, dtype=np.uint64)
        a[:4] = [0, 1, q - 1, q - 2]  # extreme residues
        np.save(tmp_path / f"ntt_in_{bits}_{log_n}.npy", a)
        ext = rng.choice(np.array([0, 1, q - 1, q // 2, q // 2 + 1], dtype=np.uint64), 1 << log_n)
        ext[: (1 << log_n) // 2] = q - 1
        np.save(tmp_path / f"ntt_ext_{bits}_{log_n}.npy", ext)
        for k in BC_SOURCES:
            frm = ring.ntt_primes(bits, log_n, k)
            x = np.stack([rng.integers(0, f, 1 << log_n, dtype=np.uint64) for f in frm])
            x[:, 0] = [f - 1 for f in frm]
            x[:, 1] = 0
            x[:, 2] = [f // 2 for f in frm]  # the centred lift's boundary
            x[:, 3] = [f // 2 + 1 for f in frm]
            np.save(tmp_path / f"bc_in_{bits}_{log_n}_{k}.npy", x)
    for i, (frm, _) in enumerate(_lift_moduli()):
        x = rng.integers(0, frm, 1024, dtype=np.uint64)  # a multiple of 8: the vector kernels run
        x[:5] = [0, 1, frm - 1, frm // 2, frm // 2 + 1]  # the centred lift's boundary
        np.save(tmp_path / f"lift_{i}.npy", x)
    gemm = {"cfgs": np.array([c[5] for c in GEMM_CASES], dtype=object), "qs": [], "bUs": []}
    for i, (d1, d2, n, qbits, bU, _) in enumerate(GEMM_CASES):
        q = ring.ntt_primes(qbits, 10, 1)[0]
        U = rng.integers(-(1 << bU), (1 << bU) + 1, size=(d1, d2), dtype=np.int64)
        U[0, : min(d2, 3)] = [-(1 << bU), 1 << bU, -1][: min(d2, 3)]
        X = rng.integers(0, q, size=(d2, n), dtype=np.uint64)
        X[0, :2] = [q - 1, 0]
        if d2 == 256:  # the one-digit case at its exactness edge: 256 maximal products of one sign
            U[1], X[:, 2] = 1 << bU, q // 2
        gemm.update({f"U{i}": U, f"X{i}": X})
        gemm["qs"].append(q)
        gemm["bUs"].append(bU)
    np.savez(tmp_path / "gemm.npz", **gemm)
    ctx = t12.ctx
    rng_slots = np.random.default_rng(11)
    ct = ctx.encrypt(rng_slots.uniform(-1, 1, ctx.slots), t12.pk)
    ct2 = ctx.encrypt(rng_slots.uniform(-0.5, 1, ctx.slots), t12.pk)
    gk = ctx.rotation_keys(t12.sk, [1, 2, 3, 5])
    for name, obj in (("ct", ct), ("ct2", ct2), ("rlk", t12.rlk), ("gk", gk)):
        obj.save(tmp_path / f"{name}.bin")

    for p in paths:
        _run_child(tmp_path, p)
    ref = np.load(tmp_path / "scalar.npz")
    for p in paths[:-1]:
        got = np.load(tmp_path / f"{p}.npz")
        assert sorted(got.files) == sorted(ref.files)
        for key in ref.files:
            assert np.array_equal(got[key], ref[key]), f"{p} differs from scalar on {key}"
        for name in CT_NAMES:
            assert (tmp_path / f"{p}_{name}.bin").read_bytes() == (tmp_path / f"scalar_{name}.bin").read_bytes(), \
                f"{p} differs from scalar on ciphertext op {name}"
    # the scalar results are right, not only shared: NTT round trip, GEMM against Python integers
    for bits, log_n in NTT_CASES:
        q = ring.ntt_primes(bits, log_n, 1)[0]
        a = np.load(tmp_path / f"ntt_in_{bits}_{log_n}.npy")
        assert np.array_equal(ring.ntt(ref[f"fwd_{bits}_{log_n}"], q, log_n, inverse=True), a)
        ext = np.load(tmp_path / f"ntt_ext_{bits}_{log_n}.npy")
        assert np.array_equal(ring.ntt(ref[f"fwd_ext_{bits}_{log_n}"], q, log_n, inverse=True), ext)
    for i, (frm, to) in enumerate(_lift_moduli()):
        x = np.load(tmp_path / f"lift_{i}.npy").astype(object)
        want = np.array([(int(v) - frm if v > frm // 2 else int(v)) % to for v in x], dtype=object)
        assert np.array_equal(ref[f"lift_{i}"], want.astype(np.uint64))
    for i, (_, _, _, _, _, _) in enumerate(GEMM_CASES):
        q = gemm["qs"][i]
        want = (gemm[f"U{i}"].astype(object) @ gemm[f"X{i}"].astype(object)) % q
        assert np.array_equal(ref[f"gemm_{i}"], want.astype(np.uint64))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fused = fhe.load(tmp_path / "scalar_fused.bin", ctx)
    x, y = ctx.decrypt(ct, t12.sk), ctx.decrypt(ct2, t12.sk)
    assert np.max(np.abs(ctx.decrypt(fused, t12.sk) - x * y)) < 2.0**-15


def _simd_path_in_child(**env_vars):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    for k in ("HEMLP_SIMD", "HEMLP_DISABLE_AVX512"):
        env.pop(k, None)
    env.update(env_vars)
    code = ("import hemlp.errors as E\nfrom hemlp._core import ring\n"
            "try:\n    print(ring.simd_path())\nexcept E.ParameterError as e:\n    print('ParameterError:', e)\n")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_simd_path_selection_and_errors():
    paths = _paths()
    assert _simd_path_in_child() == paths[0]  # the best the CPU has by default
    for p in paths:
        assert _simd_path_in_child(HEMLP_SIMD=p) == p
    below = [p for p in paths if p != "avx512"][0]
    assert _simd_path_in_child(HEMLP_DISABLE_AVX512="1") == below
    assert _simd_path_in_child(HEMLP_DISABLE_AVX512="0") == paths[0]
    msg = _simd_path_in_child(HEMLP_SIMD="avx3")
    assert msg.startswith("ParameterError:") and "scalar, avx2 or avx512" in msg
    for p in ("avx2", "avx512"):
        if p not in paths:
            msg = _simd_path_in_child(HEMLP_SIMD=p)
            assert msg.startswith("ParameterError:") and "lacks" in msg
    if "avx512" in paths:
        msg = _simd_path_in_child(HEMLP_SIMD="avx512", HEMLP_DISABLE_AVX512="1")
        assert msg.startswith("ParameterError:") and "contradicts" in msg
