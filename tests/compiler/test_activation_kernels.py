"""The native plaintext kernels of the degree search (csrc/plain): Clenshaw's recurrence and the table lookup give
the bits of the numpy computations they replaced (each element's products and sums rounded one by one, no fused
multiply-adds), on every SIMD path this CPU has (each in a child process, HEMLP_SIMD=scalar|avx2|avx512), and refuse
wrong arrays with a typed error."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hemlp import _core
from hemlp._core import ring
from hemlp.errors import ShapeError

REPO = Path(__file__).resolve().parents[2]


def _clenshaw_numpy(u, c):
    """The whole-array recurrence: b_k = (2u b_{k+1} - b_{k+2}) + c_k, each operation rounded on its own."""
    u2 = u * 2.0
    b1, b2 = np.full(u.shape, c[-1]), np.zeros(u.shape)
    for ck in c[-2:0:-1]:
        b1, b2 = u2 * b1 - b2 + ck, b1
    return u * b1 - b2 + c[0]


def _lookup_numpy(table, points, lo, scale, gain, x):
    f = (x.astype(np.float64) - lo) * scale
    i = np.clip(np.floor(f), 0, points - 1)
    f = f - i
    k = i.astype(np.intp)
    return gain * (table[k] + (table[k + 1] - table[k]) * f)


def _cases(seed=11):
    rng = np.random.default_rng(seed)
    # degrees 2 (the shortest recurrence), odd and even ones, 127; lengths around the 32-lane blocks
    cheb = [(rng.normal(size=nc) / np.arange(1, nc + 1), rng.uniform(-1.2, 1.05, n))
            for nc, n in [(3, 1), (4, 31), (32, 32), (33, 33), (64, 95), (128, 1000), (128, 4099)]]
    table = np.cumsum(rng.normal(size=1025))
    x = rng.uniform(-3.0, 5.5, 3001)
    x[:6] = [-3.0, 5.0, -2.0, 4.999, np.nextafter(5.0, 9.0), np.nan]
    return cheb, (table, 1024, -3.0, 1024 / 8.0, x)


def test_clenshaw_bits_equal_the_numpy_recurrence():
    cheb, _ = _cases()
    for c, u in cheb:
        got = _core.chebval_clenshaw(u, c)
        assert got.dtype == np.float64 and np.array_equal(got, _clenshaw_numpy(u, c)), len(c)
    u = np.random.default_rng(1).uniform(-1, 1, (3, 70))
    assert _core.chebval_clenshaw(u, cheb[-1][0]).shape == (3, 70)


@pytest.mark.parametrize("in_dtype", [np.float32, np.float64])
@pytest.mark.parametrize("out_dtype", [np.float32, np.float64])
@pytest.mark.parametrize("gain", [1.0, 7.25])
def test_table_lookup_bits_equal_the_numpy_interpolation(in_dtype, out_dtype, gain):
    _, (table, points, lo, scale, x) = _cases()
    x = x.astype(in_dtype)
    out = np.empty(x.size, dtype=out_dtype)
    beyond = _core.table_lookup(table, points, lo, scale, gain, lo, 5.0, x, out)
    assert beyond                                   # x reaches past 5.0 and holds a NaN
    inside = (x >= lo) & (x <= 5.0)
    want = _lookup_numpy(table, points, lo, scale, gain, x[inside]).astype(out_dtype)
    assert np.array_equal(out[inside], want)
    assert not _core.table_lookup(table, points, lo, scale, gain, lo, 5.0, x[inside].copy(), out[:inside.sum()])


def test_table_lookup_refuses_wrong_arrays():
    table = np.linspace(0.0, 1.0, 9)
    x = np.zeros(4, dtype=np.float32)
    with pytest.raises(ShapeError, match="points \\+ 1"):
        _core.table_lookup(table, 9, 0.0, 1.0, 1.0, 0.0, 1.0, x, np.empty(4, np.float32))
    with pytest.raises(ShapeError, match="as many values"):
        _core.table_lookup(table, 8, 0.0, 1.0, 1.0, 0.0, 1.0, x, np.empty(3, np.float32))
    with pytest.raises(ShapeError, match="float32 or float64"):
        _core.table_lookup(table, 8, 0.0, 1.0, 1.0, 0.0, 1.0, x.astype(np.float16), np.empty(4, np.float32))
    with pytest.raises(ShapeError, match="at least 3"):
        _core.chebval_clenshaw(np.zeros(3), np.ones(2))
    with pytest.raises(ShapeError, match="float64"):
        _core.chebval_clenshaw(np.zeros(3, dtype=np.float32), np.ones(4))
    with pytest.raises(ShapeError, match="C-contiguous"):                 # a strided view: no silent copy
        _core.chebval_clenshaw(np.zeros((4, 6))[:, ::2], np.ones(4))
    with pytest.raises(ShapeError, match="C-contiguous"):
        _core.table_lookup(table, 8, 0.0, 1.0, 1.0, 0.0, 1.0, np.zeros(8, np.float32)[::2], np.empty(4, np.float32))


CHILD = r"""
import sys
import numpy as np
from hemlp import _core
from hemlp._core import ring
sys.path.insert(0, sys.argv[3])
from test_activation_kernels import _cases
assert ring.simd_path() == sys.argv[2], (ring.simd_path(), sys.argv[2])
cheb, (table, points, lo, scale, x) = _cases()
out = {f"cheb{i}": _core.chebval_clenshaw(u, c) for i, (c, u) in enumerate(cheb)}
for dt in (np.float32, np.float64):
    y = np.empty(x.size, dtype=np.float32)
    _core.table_lookup(table, points, lo, scale, 3.5, lo, 5.0, x.astype(dt), y)
    out[f"lookup_{np.dtype(dt).name}"] = y
np.savez(sys.argv[1], **out)
"""


def test_every_simd_path_gives_the_scalar_bits(tmp_path):
    paths = [p.strip() for p in ring.simd_available().split(",")]
    if len(paths) == 1:
        pytest.skip("this CPU has no AVX2: only the scalar path exists")
    got = {}
    for path in paths:
        env = dict(os.environ, HEMLP_SIMD=path, PYTHONPATH=str(REPO))
        env.pop("HEMLP_DISABLE_AVX512", None)
        r = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / f"{path}.npz"), path,
                            str(Path(__file__).parent)], env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"{path}: {r.stderr}"
        got[path] = np.load(tmp_path / f"{path}.npz")
    for path in paths[:-1]:
        for name in got["scalar"].files:
            a, b = got[path][name], got["scalar"][name]
            assert np.array_equal(a, b, equal_nan=True), (path, name)
