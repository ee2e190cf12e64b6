"""Layout (P) convolutions without dense diagonals (hemlp.layouts.packed_diagonals): only the nonzero generalised
diagonals, built from the conv's structure; stride-2 convs and avgpools onto a multiplexed (gap) placement.
Oracles: PackedProgram.simulate (numpy) against PyTorch's conv; the diagonal set against the dense matrix's nonzero
diagonals in the same packing; encrypted against simulate at a small preset (a stride-2 conv, an avgpool, a
residual add on the multiplexed layout and a dense layer reading it)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import hemlp
from hemlp.compiler.lower import dense_matrix
from hemlp.layouts.packed_diagonals import bsgs_split, grid_positions

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.filterwarnings("ignore::hemlp.fhe.InsecureParametersWarning"),
              pytest.mark.filterwarnings("ignore::hemlp.compiler.calibration.CalibrationWarning")]


def compile_quiet(*a, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return hemlp.compile(*a, **kw)


def nonzero_dense_diagonals(W, pos_out, P_out, pos_in, P_in):
    """The offsets j of the generalised diagonals of the dense matrix W in a packing (pos_out, pos_in): the
    brute-force oracle, j = pos_in(c) - pos_out(r) reduced by the smaller period."""
    r, c = np.nonzero(W)
    return set(((pos_in[c] - pos_out[r]) % min(P_out, P_in)).tolist())


@pytest.mark.parametrize("stride,pool", [(1, False), (2, False), (1, True)])
def test_conv_simulate_equals_torch_and_only_nonzero_diagonals(stride, pool):
    torch.manual_seed(stride)
    C, H = 4, 8
    layer = torch.nn.AvgPool2d(2) if pool else torch.nn.Conv2d(C, C, 3, stride=stride, padding=1)
    x = np.random.default_rng(stride).uniform(-1, 1, (3, C, H, H))
    # a 1x1 conv first, so that the layer under test reads a computed per(256) value (not the client's input)
    net = torch.nn.Sequential(torch.nn.Conv2d(C, C, 1), layer)
    cm = compile_quiet(net, x, layout="packed", preset="test-N10-boot", batch_size=1, allow_insecure=True)
    prog = cm.layout_impl.program
    first, mv = [s for s in prog.steps if s.op == "matvec"]
    assert mv.method == "bsgs" and first.layout.grid is None
    with torch.no_grad():
        ref = net.double()(torch.tensor(x)).numpy().reshape(3, -1)
    Lin = first.layout
    assert np.max(np.abs(cm.simulate(x).reshape(3, -1) - ref)) < 1e-12
    # the diagonals are exactly the nonzero ones of the dense matrix in the same packing
    W = dense_matrix(mv.src, Lin.features)
    want = nonzero_dense_diagonals(W, mv.layout.positions(), mv.layout.period, Lin.positions(), Lin.period)
    got = {mv.g1 * h + g for (h, g) in mv.diags}
    assert got == want
    if stride == 2 or pool:
        # output on the input's 8x8 grid with gap 2: 4 channels share a block, the diagonals stay few
        assert mv.layout.grid == (C, H // 2, H // 2, H, H) and "gap 2" in mv.layout.describe()
        assert len(got) <= 2 * 9 * 4
    else:
        assert mv.layout.grid is None and len(got) == C * 9     # (ci - co) mod C x 9 kernel offsets (period C*H*H)
    c = mv.count()
    assert c["pt_mul"] == len(got) and c["rot_hoisted"] + c["rot"] < len(got)


def test_multiplexed_positions_are_a_permutation_into_the_period():
    pos = grid_positions((16, 8, 8, 32, 32))        # gap 4: 16 channels in one 32x32 block
    assert len(set(pos.tolist())) == pos.size == 16 * 64 and pos.max() < 1024
    assert np.array_equal(grid_positions((3, 4, 4, 4, 4)), np.arange(48))     # gap 1: channel-major


def test_bsgs_split_minimises_rotations_on_a_sparse_offset_set():
    J = {o * 1024 + d for o in range(16) for d in (0, 1, 2, 31, 32, 33, 1023, 991, 992)}
    g1 = bsgs_split(J)
    rots = len({j % g1 for j in J} - {0}) + len({j // g1 for j in J} - {0})
    for k in range(0, 15):          # no power of two does better
        b = 1 << k
        assert rots <= len({j % b for j in J} - {0}) + len({j // b for j in J} - {0})


class Strided(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c0 = torch.nn.Conv2d(2, 4, 3, padding=1)      # reads the client's replicated input (dense rep)
        self.c1 = torch.nn.Conv2d(4, 4, 3, stride=2, padding=1)
        self.c2 = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.pool = torch.nn.AvgPool2d(2)
        self.fc = torch.nn.Linear(4 * 2 * 2, 3)

    def forward(self, x):
        h = self.c0(x)
        h = self.c1(h * h)
        h = h + self.c2(h * h)        # a residual add on the multiplexed layout
        return self.fc(self.pool(h).flatten(1))


def test_strided_net_on_the_multiplexed_layout_encrypted_equals_simulate():
    torch.manual_seed(4)
    x = np.random.default_rng(9).uniform(-1, 1, (16, 2, 8, 8))
    cm = compile_quiet(Strided(), x, layout="packed", preset="test-N12-d6", batch_size=2, allow_insecure=True)
    prog = cm.layout_impl.program
    grids = [s.layout.grid for s in prog.steps if s.op == "matvec"]
    # c0 (replicated input), c1 (stride 2: gap 2), c2 (gap 2), fc (the avgpool folded into it, reading gap 2)
    assert grids == [None, (4, 4, 4, 8, 8), (4, 4, 4, 8, 8), None]
    sim = cm.simulate(x[:2])
    assert np.max(np.abs(sim - cm.reference(x[:2]))) < 1e-9
    sk, ek = cm.keygen()
    y = cm.decrypt(cm.run(cm.encrypt(x[:2], sk), ek, threads=1), sk)
    # 20 fresh key sets / encryptions: |y - sim| between 2^-24.6 and 2^-22.5; asserted with 3 bits of margin
    assert np.max(np.abs(y - sim)) < 2.0 ** -19.5


def test_diagonals_beyond_the_cache_budget_are_encoded_when_used(monkeypatch):
    from hemlp.layouts import packed

    torch.manual_seed(4)
    x = np.random.default_rng(9).uniform(-1, 1, (16, 2, 8, 8))
    cm = compile_quiet(Strided(), x, layout="packed", preset="test-N12-d6", batch_size=2, allow_insecure=True)
    lay = cm.layout_impl
    full = lay.prepared_bytes()
    assert lay.uncached_diagonals() == 0
    monkeypatch.setattr(packed, "MAX_CACHED_DIAGONAL_BYTES", full // 3)
    assert 0 < lay.prepared_bytes() <= full // 3 and lay.uncached_diagonals() > 0
    sim = cm.simulate(x[:2])
    sk, ek = cm.keygen()
    y = cm.decrypt(cm.run(cm.encrypt(x[:2], sk), ek, threads=1), sk)
    assert np.max(np.abs(y - sim)) < 2.0 ** -19.5        # as above: the same arithmetic, encoded later
    r = packed.PackedRunner(cm.context, lay.program)
    r.prepare()
    assert 0 < r.cached_bytes <= full // 3


@pytest.mark.parametrize("distinct", [3, 300, None])
def test_sparse_diagonal_storage_gives_back_the_same_bits(distinct):
    """SparseDiag.from_positions keeps a bit mask and 16-bit codes into the distinct values where that is smaller
    (a conv's diagonal: few weights over many pixels), the values as they are otherwise (every value distinct); both
    give the dense vector, and every rotation of it, bit for bit."""
    from hemlp.layouts.packed_diagonals import SparseDiag

    rng = np.random.default_rng(distinct or 1)
    period, size = 1024, 4096
    pos = rng.choice(period, 700, replace=False)
    vals = rng.normal(size=700) if distinct is None else rng.normal(size=distinct)[rng.integers(0, distinct, 700)]
    d = SparseDiag.from_positions(pos, vals, size, period)
    want = np.zeros(period)
    want[pos] = vals
    assert np.array_equal(d.dense(), np.tile(want, size // period))
    assert (d.codes is not None) == (distinct is not None) and d.count == 700
    if distinct == 3:
        assert d.nbytes < 0.2 * 700 * 12          # an int32 position and a float64 value each: 12 bytes
    for r in (0, 1, 37, -5, period - 1, period + 3):
        assert np.array_equal(d.rotated(r).dense(), np.roll(d.dense(), -r))
    assert np.array_equal(d.rotated(9).rotated(-9).values, d.values)


def test_sparse_diagonal_with_a_nan_keeps_its_values():
    from hemlp.layouts.packed_diagonals import SparseDiag

    vals = np.array([1.5, 2.5] * 10 + [np.nan])
    d = SparseDiag.from_positions(np.arange(21) * 3, vals, 64)
    assert d.codes is None and np.array_equal(d.values, vals, equal_nan=True)


def test_a_conv_s_diagonals_take_a_fraction_of_their_positions_and_values():
    """A 64-channel 3x3 conv at 4x4 on a 16x16 grid (gap 4): its diagonals, as stored, take under a third of the
    int32 position and float64 value of each nonzero, and densify to the sums of its entries."""
    from hemlp.layouts.packed_diagonals import (conv_entries, conv_entry_chunks, diagonals_from_entries,
                                                grid_positions, grid_period)

    C, H = 64, 4
    grid = (C, H, H, 16, 16)
    pos, L = grid_positions(grid), grid_period(grid)
    index = np.array([[ci * H * H + (h + dy) * H + (w + dx) if 0 <= h + dy < H and 0 <= w + dx < H else -1
                       for h in range(H) for w in range(H)]
                      for ci in range(C) for dy in (-1, 0, 1) for dx in (-1, 0, 1)])
    U = np.random.default_rng(3).normal(size=(C, C * 9))
    diags, _ = diagonals_from_entries(conv_entry_chunks(U, index), None, None, pos, L, pos, L, 4 * L)
    nnz = sum(d.count for d in diags.values())
    assert nnz == C * C * np.count_nonzero(index[:9] >= 0)          # every (co, ci, tap, pixel) its own position
    assert sum(d.nbytes for d in diags.values()) < 12 * nnz / 3
    rows, cols, vals = conv_entries(U, index)
    W = np.zeros((C * H * H, C * H * H))
    np.add.at(W, (rows, cols), vals)
    x = np.random.default_rng(4).normal(size=C * H * H)
    v = np.zeros(4 * L)
    v[pos] = x                                                       # one period of the input, then its copies
    v[L:] = np.tile(v[:L], 3)
    z = sum(d.dense() * np.roll(v, -j) for j, d in diags.items())
    np.testing.assert_allclose(z[pos], W @ x, atol=1e-9)
