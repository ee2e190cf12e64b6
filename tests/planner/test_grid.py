"""Processor grids (Algorithm 3, eqs. 5–7) against brute-force enumeration and [S0] Fig. 9(a)."""

import itertools
import math
import random

import pytest

from hemlp.errors import ParameterError, ShapeError
from hemlp.planner.grid import Grid, grid_3d, grid_4d, latency_4d, partition, w3d, w4d
from hemlp.planner.obl import Layout, obl

S_O = 2 ** 14


def _layout(b_m, b_n, b_k, block=(4, 4, 4), S_o=64):
    """A layout with given block counts and (by default) 4×4×4 blocks."""
    m, n, k = b_m * block[0], b_n * block[1], b_k * block[2]
    return Layout(m, n, k, m, n, k, b_m, b_n, b_k, S_o=S_o, case="manual")


# Independent transcriptions of eqs. (5) and (6) (H = 1).
def _eq5(b, g):
    (b_m, b_n, b_k), (p_m, p_n, p_k) = b, g
    return p_m * b_k * b_n + p_n * b_m * b_k + p_k * b_m * b_n


def _eq6(b, g, R):
    (b_m, b_n, b_k), (p_m, p_n, p_k) = b, g
    s = lambda x: 0 if x == 1 else 1
    return (p_n * b_m * b_k * (1 + (0.5 * R + 1) * s(p_n))
            + p_m * b_k * b_n * (1 + (0.5 * R + 1) * s(p_m)) + p_k * b_m * b_n)


def _brute_grid(b, p, objective):
    """All triples in [1, p]³ that divide the layout and fit in p; max product, min W, lexicographic."""
    feasible = [g for g in itertools.product(range(1, p + 1), repeat=3)
                if g[0] * g[1] * g[2] <= p and all(bb % gg == 0 for bb, gg in zip(b, g))]
    return min(feasible, key=lambda g: (-math.prod(g), objective(g), g))


def _random_layouts(rng, count):
    for _ in range(count):
        b = tuple(rng.choice([1, 2, 3, 4, 6, 8, 12, 16]) for _ in range(3))
        yield _layout(*b)


def test_grid_3d_matches_bruteforce():
    rng = random.Random(3)
    for layout in _random_layouts(rng, 150):
        p = rng.randint(1, 40)
        got = grid_3d(layout, p)
        want = _brute_grid(layout.blocks, p, lambda g: _eq5(layout.blocks, g))
        assert got.dims == want, (layout.blocks, p)
        assert got.W == _eq5(layout.blocks, want)


def test_grid_4d_matches_bruteforce():
    rng = random.Random(4)
    for layout in _random_layouts(rng, 150):
        p = rng.randint(1, 40)
        got = grid_4d(layout, p)
        want = _brute_grid(layout.blocks, p, lambda g: _eq6(layout.blocks, g, layout.R))
        assert got.dims == want, (layout.blocks, p)
        assert got.W == pytest.approx(_eq6(layout.blocks, want, layout.R))


@pytest.mark.parametrize("grid_fn", [grid_3d, grid_4d])
def test_enough_processors_gives_the_obl_as_grid(grid_fn):
    """Algorithm 3 lines 2–3: p >= b_m b_n b_k → [p_m, p_n, p_k] = [b_m, b_n, b_k]."""
    for shape in [(2048, 2048, 2048), (16384, 16, 16384), (16384, 16384, 16), (2 ** 20, 64, 16), (16, 4096, 64)]:
        layout = obl(*shape, S_O)
        for p in (layout.num_blocks, layout.num_blocks + 1, 10 * layout.num_blocks):
            grid = grid_fn(layout, p)
            assert grid.dims == layout.blocks
            assert grid.local_blocks == (1, 1, 1)
            # ... and the general enumeration agrees with the shortcut
            objective = (lambda g: _eq5(layout.blocks, g)) if grid_fn is grid_3d else \
                (lambda g: _eq6(layout.blocks, g, layout.R))
            if layout.num_blocks <= 512:
                assert _brute_grid(layout.blocks, p, objective) == layout.blocks


def test_fig9a_square_on_8_processors():
    """[S0] Fig. 9(a): Square 2048³ on 8 processors.  The baseline/3D grid keeps [8, 8, 8]
    blocks per processor; 4D scheduling gives [16, 16, 2] (grid 1×1×8)."""
    layout = obl(2048, 2048, 2048, S_O)
    g3 = grid_3d(layout, 8)
    assert g3.dims == (2, 2, 2) and g3.local_blocks == (8, 8, 8)
    assert g3.W == 3 * 2 * 256
    g4 = grid_4d(layout, 8)
    assert g4.dims == (1, 1, 8) and g4.local_blocks == (16, 16, 2)
    assert g4.W == 256 + 256 + 8 * 256
    # the 3D grid is far worse under eq. (6): R = 128, (0.5R + 1) = 65
    assert w4d(layout, 2, 2, 2) == 2 * 256 * 66 * 2 + 2 * 256


def test_w_scales_with_H():
    layout = obl(2048, 2048, 2048, S_O)
    assert w3d(layout, 2, 2, 2, H=3.0) == 3 * w3d(layout, 2, 2, 2)
    assert w4d(layout, 2, 1, 4, H=0.5) == 0.5 * w4d(layout, 2, 1, 4)


def test_latency_4d_eq7():
    layout = obl(2048, 2048, 2048, S_O)
    grid = grid_4d(layout, 8)  # 1×1×8, W4D = 2560 H
    # α[2 log 1 + 0 + 0 + 2 log 8] + 2β·2560·H/8
    assert latency_4d(grid, layout, alpha=1.0, beta=0.0, H=1.0) == pytest.approx(6.0)
    assert latency_4d(grid, layout, alpha=0.0, beta=1.0, H=2.0) == pytest.approx(2 * 2560 * 2 / 8)
    g = Grid(2, 4, 1, 8, "W4D", 0.0)
    # α[2 log 8 + 1 + 3 + 2 log 8] = 16α
    assert latency_4d(g, layout, alpha=1.0, beta=0.0, H=1.0) == pytest.approx(16.0)


def test_grid_rejects_bad_p():
    layout = obl(2048, 2048, 2048, S_O)
    for p in (0, -3, 2.5, True):
        with pytest.raises(ParameterError):
            grid_3d(layout, p)


def test_partition_covers_every_block_product_once():
    rng = random.Random(5)
    for layout in _random_layouts(rng, 40):
        grid = grid_3d(layout, rng.randint(1, 30))
        parts = partition(layout, grid)
        assert len(parts) == grid.size
        b_m, b_n, b_k = layout.blocks
        owners = {}
        for proc, share in parts.shares.items():
            a, b = set(share.a_blocks), set(share.b_blocks)
            assert len(a) == len(share.a_blocks) == grid.local_blocks[0] * grid.local_blocks[2]
            assert len(b) == len(share.b_blocks) == grid.local_blocks[2] * grid.local_blocks[1]
            for (r, kk) in a:
                for (kk2, c) in b:
                    if kk == kk2:
                        assert (r, c, kk) not in owners
                        owners[(r, c, kk)] = proc
        # every CGEMM(A*_{r,kk}, B*_{kk,c}) of Algorithm 1 is done exactly once
        assert set(owners) == set(itertools.product(range(b_m), range(b_n), range(b_k)))
        # the client sends each block exactly once (Algorithm 3 line 8)
        sent_a = [blk for s in parts.shares.values() if s.a_from_client for blk in s.a_blocks]
        sent_b = [blk for s in parts.shares.values() if s.b_from_client for blk in s.b_blocks]
        assert sorted(sent_a) == sorted(itertools.product(range(b_m), range(b_k)))
        assert sorted(sent_b) == sorted(itertools.product(range(b_k), range(b_n)))


def test_partition_matches_algorithm3_slices():
    layout = obl(2048, 2048, 2048, S_O)
    parts = partition(layout, grid_3d(layout, 8))
    share = parts[(1, 0, 1)]
    assert share.a_blocks[0] == (8, 8) and share.a_blocks[-1] == (15, 15)
    assert share.b_blocks[0] == (8, 0) and share.b_blocks[-1] == (15, 7)
    assert share.a_from_client and not share.b_from_client
    assert "each holds 8×8 A-blocks" in repr(parts)


def test_partition_rejects_non_dividing_grid():
    layout = _layout(4, 4, 4)
    with pytest.raises(ShapeError):
        partition(layout, Grid(3, 1, 1, 3, "W3D", 0.0))


def test_block_padded_layout_uses_non_power_of_two_divisors():
    """CIFAR-10 FC1 with pad='block' has b_k = 50; p_k may be 5, 10, 25 or 50."""
    layout = obl(128, 1024, 6400, S_O, pad="block")
    assert layout.blocks == (1, 8, 50)
    grid = grid_3d(layout, 64)
    assert grid.size == 50 and layout.b_k % grid.p_k == 0 and layout.b_n % grid.p_n == 0
    assert grid.dims == _brute_grid(layout.blocks, 64, lambda g: _eq5(layout.blocks, g))


# ---------------------------------------------------------------- object-store bytes (the Ray runtime's model)

from hemlp.planner.grid import grid_store, pcmm_store_bytes  # noqa: E402

H_IN, H_OUT = 2 * 7 * 2**14 * 8, 2 * 5 * 2**14 * 8  # N = 2^14 ciphertexts at levels 6 and 4


def test_store_bytes_terms():
    b = pcmm_store_bytes((2, 1, 1), 128, 784, 1, H_IN, H_OUT)
    assert b["reads"] == dict(inputs=2 * 784 * H_IN, weights=128 * 784 * 8, partials=0)
    assert b["writes"] == dict(partials=0, outputs=128 * H_OUT, weights=128 * 784 * 8)
    assert b["total"] == sum(b["reads"].values()) + sum(b["writes"].values())
    k = pcmm_store_bytes((1, 1, 2), 128, 784, 1, H_IN, H_OUT)
    assert k["reads"]["inputs"] == 784 * H_IN and k["reads"]["partials"] == k["writes"]["partials"] == 2 * 128 * H_IN
    # the weight term is plaintext-sized: eq. (5) in units of H overstates it by H / 8
    lay = Layout(128, 1, 784, 128, 1, 784, 128, 1, 784, 1, "pcmm")
    assert w3d(lay, 1, 1, 2, H_IN) - (784 + 2 * 128) * H_IN == 128 * 784 * H_IN
    assert k["reads"]["weights"] * H_IN / 8 == 128 * 784 * H_IN
    g = pcmm_store_bytes((2, 1, 1), 16, 4, 2, H_IN, H_OUT, d_in=10, P=3)  # gathered: every task reads all rows
    assert g["reads"]["inputs"] == 2 * 10 * 2 * H_IN and g["writes"]["outputs"] == 48 * 2 * H_OUT


def test_grid_store_minimises_store_bytes():
    # wide layer: splitting the reduction reads each input row once (the partial sums are only 128 rows)
    assert grid_store(128, 1, 784, 2, H_IN, H_OUT).dims == (1, 1, 2)
    # square layer: the partial-sum round trip costs more than reading (splitting) the input twice
    assert grid_store(128, 1, 128, 2, H_IN, H_OUT).dims == (2, 1, 1)
    assert grid_store(128, 2, 784, 2, H_IN, H_OUT).dims == (1, 2, 1)  # columns: no duplicated reads at all
    assert grid_store(1, 1, 64, 2, H_IN, H_OUT).dims == (1, 1, 2)     # one output row: only the reduction splits
    for p in (1, 2, 3, 4, 6):
        g = grid_store(128, 1, 784, p, H_IN, H_OUT)
        assert g.size == p and g.objective == "store bytes"
        assert g.W == pcmm_store_bytes(g.dims, 128, 784, 1, H_IN, H_OUT)["total"] == min(
            pcmm_store_bytes((a, 1, b), 128, 784, 1, H_IN, H_OUT)["total"] for a in range(1, p + 1)
            for b in range(1, p + 1) if a * b == p)
