"""The AVX-512 kernels (chosen at run time) and the portable scalar code give bit-identical results.

The scalar path is forced in a child process with HEMLP_DISABLE_AVX512=1; on a machine without
AVX-512 both processes run the scalar code and the test is trivially true.
"""
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np

from hemlp import ckks
from hemlp._core import ring

REPO = Path(__file__).resolve().parents[2]

# (bits, log_n): the moduli sizes of the presets (40..61 bits) and the smallest SIMD ring (2^4)
NTT_CASES = [(30, 4), (40, 5), (50, 10), (60, 12), (61, 13), (45, 15)]

CHILD = r"""
import sys, warnings
import numpy as np
from hemlp import ckks
from hemlp._core import ring
d = sys.argv[1]
cases = [tuple(map(int, c.split(":"))) for c in sys.argv[2].split(",")]
for bits, log_n in cases:
    q = ring.ntt_primes(bits, log_n, 1)[0]
    a = np.load(f"{d}/ntt_in_{bits}_{log_n}.npy")
    np.save(f"{d}/fwd_{bits}_{log_n}.npy", ring.ntt(a, q, log_n))
    np.save(f"{d}/inv_{bits}_{log_n}.npy", ring.ntt(a, q, log_n, inverse=True))
    frm = ring.ntt_primes(bits, log_n, 3)
    to = ring.ntt_primes(61, log_n, 4, frm)
    x = np.load(f"{d}/bc_in_{bits}_{log_n}.npy")
    np.save(f"{d}/bc_{bits}_{log_n}.npy", ring.base_convert(x, frm, to, centred=True))
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    ctx = ckks.Context("test-N12", allow_insecure=True)
ct = ckks.load(f"{d}/ct.bin", ctx)
ct2 = ckks.load(f"{d}/ct2.bin", ctx)
rlk = ckks.load(f"{d}/rlk.bin", ctx)
gk = ckks.load(f"{d}/gk.bin", ctx)
open(f"{d}/mul.bin", "wb").write(ctx.mul(ct, ct2, relin_key=rlk, rescale=True).to_bytes())
open(f"{d}/rot.bin", "wb").write(ctx.rotate(ct, 3, gk).to_bytes())
for i, c in enumerate(ctx.rotate_hoisted(ct, [1, 2, 5], gk)):
    open(f"{d}/h{i}.bin", "wb").write(c.to_bytes())
"""


def test_simd_and_scalar_paths_agree(tmp_path, t12):
    rng = np.random.default_rng(7)
    for bits, log_n in NTT_CASES:
        q = ring.ntt_primes(bits, log_n, 1)[0]
        a = rng.integers(0, q, 1 << log_n, dtype=np.uint64)
        a[:4] = [0, 1, q - 1, q - 2]  # extreme residues
        np.save(tmp_path / f"ntt_in_{bits}_{log_n}.npy", a)
        frm = ring.ntt_primes(bits, log_n, 3)
        x = np.stack([rng.integers(0, f, 1 << log_n, dtype=np.uint64) for f in frm])
        x[:, 0] = [f - 1 for f in frm]
        x[:, 1] = 0
        np.save(tmp_path / f"bc_in_{bits}_{log_n}.npy", x)
    ctx = t12.ctx
    x = np.linspace(-1, 1, ctx.slots)
    ct = ctx.encrypt(x, t12.pk)
    ct2 = ctx.encrypt(x[::-1].copy(), t12.pk)
    gk = ctx.rotation_keys(t12.sk, [1, 2, 3, 5])
    for name, obj in (("ct", ct), ("ct2", ct2), ("rlk", t12.rlk), ("gk", gk)):
        obj.save(tmp_path / f"{name}.bin")
    env = dict(os.environ, HEMLP_DISABLE_AVX512="1", PYTHONPATH=str(REPO))
    cases = ",".join(f"{b}:{n}" for b, n in NTT_CASES)
    r = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path), cases], env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    for bits, log_n in NTT_CASES:
        q = ring.ntt_primes(bits, log_n, 1)[0]
        a = np.load(tmp_path / f"ntt_in_{bits}_{log_n}.npy")
        assert np.array_equal(ring.ntt(a, q, log_n), np.load(tmp_path / f"fwd_{bits}_{log_n}.npy"))
        assert np.array_equal(ring.ntt(a, q, log_n, inverse=True), np.load(tmp_path / f"inv_{bits}_{log_n}.npy"))
        frm = ring.ntt_primes(bits, log_n, 3)
        to = ring.ntt_primes(61, log_n, 4, frm)
        xb = np.load(tmp_path / f"bc_in_{bits}_{log_n}.npy")
        assert np.array_equal(ring.base_convert(xb, frm, to, centred=True), np.load(tmp_path / f"bc_{bits}_{log_n}.npy"))
    rlk = ckks.load(tmp_path / "rlk.bin", ctx)
    gk2 = ckks.load(tmp_path / "gk.bin", ctx)
    assert ctx.mul(ct, ct2, relin_key=rlk, rescale=True).to_bytes() == (tmp_path / "mul.bin").read_bytes()
    assert ctx.rotate(ct, 3, gk2).to_bytes() == (tmp_path / "rot.bin").read_bytes()
    for i, c in enumerate(ctx.rotate_hoisted(ct, [1, 2, 5], gk2)):
        assert c.to_bytes() == (tmp_path / f"h{i}.bin").read_bytes()
