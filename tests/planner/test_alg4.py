"""Algorithm 1 vs Algorithm 4 op counts ([S0] §III-C, §V-A, §V-C, Fig. 9(a); docs/design/pcmm-and-planning.md §7.1
item 11)."""

import itertools
import random

import numpy as np
import pytest

from hemlp.errors import ShapeError
from hemlp.planner.alg4 import (
    alg1_counts,
    alg4_counts,
    assemble,
    cgemm_breakdown,
    run_alg1,
    run_alg4,
    split,
)
from hemlp.planner.grid import grid_3d, grid_4d
from hemlp.planner.obl import Layout, OpCounts, cgemm_ops, obl

S_O = 2 ** 14


def _square_layout(b_m, b_n, b_k, d):
    m, n, k = b_m * d, b_n * d, b_k * d
    return Layout(m, n, k, m, n, k, b_m, b_n, b_k, S_o=d * d, case="manual")


def test_breakdown_sums_to_table2():
    for m, n, k in itertools.product([1, 4, 16, 128, 1024], repeat=3):
        assert cgemm_breakdown(m, n, k).total() == cgemm_ops(m, n, k), (m, n, k)


@pytest.mark.parametrize("b_m, b_n, b_k, d", [(1, 1, 1, 4), (2, 3, 1, 4), (3, 2, 4, 2), (2, 2, 2, 8), (1, 4, 3, 3)])
def test_alg1_and_alg4_compute_the_product(b_m, b_n, b_k, d):
    rng = np.random.default_rng(b_m * 100 + b_n * 10 + b_k)
    a = rng.integers(-50, 50, size=(b_m * d, b_k * d))
    b = rng.integers(-50, 50, size=(b_k * d, b_n * d))
    c1, _ = run_alg1(split(a, d), split(b, d))
    c4, _ = run_alg4(split(a, d), split(b, d))
    np.testing.assert_array_equal(assemble(c1), a @ b)   # integer data: bit-exact
    np.testing.assert_array_equal(assemble(c4), a @ b)


@pytest.mark.parametrize("b_m, b_n, b_k, d", [(1, 1, 1, 4), (2, 3, 1, 4), (3, 2, 4, 2), (2, 2, 2, 8), (4, 1, 2, 4)])
def test_executed_counts_match_closed_forms(b_m, b_n, b_k, d):
    a = np.ones((b_m, b_k, d, d), dtype=np.int64)
    b = np.ones((b_k, b_n, d, d), dtype=np.int64)
    layout = _square_layout(b_m, b_n, b_k, d)
    _, ran1 = run_alg1(a, b)
    _, ran4 = run_alg4(a, b)
    for ran, closed in ((ran1, alg1_counts(layout)), (ran4, alg4_counts(layout))):
        assert ran.a_movement == closed.a_movement
        assert ran.b_movement == closed.b_movement
        assert ran.compute == closed.compute
        assert (ran.a_units, ran.b_units) == (closed.a_units, closed.b_units)
    # Algorithm 1 on one processor costs exactly b_m b_n b_k CGEMMs of Table II plus the line-5 ADDs
    assert ran1.total == cgemm_ops(d, d, d) * (b_m * b_n * b_k) + OpCounts(add=b_m * b_n * (b_k - 1))


def test_alg4_saves_factor_bn_on_a_and_bm_on_b_single_processor():
    """docs/design/pcmm-and-planning.md §7.1 item 11: A-rotations drop by b_n, B-rotations by b_m; MULTs unchanged."""
    for shape in [(2048, 2048, 2048), (16384, 16, 16384), (16384, 16384, 16), (2 ** 20, 64, 16), (16, 8192, 64)]:
        layout = obl(*shape, S_O)
        one, four = alg1_counts(layout), alg4_counts(layout)
        assert one.a_movement.rot == layout.b_n * four.a_movement.rot
        assert one.b_movement.rot == layout.b_m * four.b_movement.rot
        assert one.a_movement.pmult == layout.b_n * four.a_movement.pmult
        assert one.compute.mult == four.compute.mult == layout.num_blocks * layout.R


def test_alg4_savings_on_grids():
    """§V-C: per processor, E3D does b_m b_n b_k/p block movements of A; 4D-S does b_m b_k/(p_m p_k);
    FHE4DMM (group sharing) b_m b_k/p — so the saving against E3D is b_n/p_n resp. exactly b_n."""
    rng = random.Random(7)
    for _ in range(100):
        b = [2 ** rng.randint(0, 5) for _ in range(3)]
        layout = _square_layout(*b, d=rng.choice([2, 4, 8]))
        grid = grid_3d(layout, rng.randint(1, 64))
        (pm, pn, pk), p = grid.dims, grid.size
        e3d, s4d, fhe4dmm = (alg1_counts(layout, grid), alg4_counts(layout, grid, share_in_group=False),
                             alg4_counts(layout, grid))
        assert e3d.a_units == layout.num_blocks / p
        assert s4d.a_units == layout.b_m * layout.b_k / (pm * pk)
        assert s4d.b_units == layout.b_n * layout.b_k / (pn * pk)
        assert fhe4dmm.a_units == layout.b_m * layout.b_k / p
        assert e3d.a_movement.rot == pytest.approx(fhe4dmm.a_movement.rot * layout.b_n)
        assert e3d.b_movement.rot == pytest.approx(fhe4dmm.b_movement.rot * layout.b_m)
        assert e3d.a_movement.rot == pytest.approx(s4d.a_movement.rot * layout.b_n / pn)
        assert e3d.compute.mult == s4d.compute.mult == fhe4dmm.compute.mult


def test_fig9a_movement_factors():
    """[S0] Fig. 9(a), Square 2048³ on 8 processors: factor (8+8)·8 = 128 for 4D-S on the 2×2×2
    grid, (8+8)·8/2 = 64 for 4D* (same grid, G-redundancy removed), (16+16)·2 = 64 for 4D (1×1×8)."""
    layout = obl(2048, 2048, 2048, S_O)
    g3, g4 = grid_3d(layout, 8), grid_4d(layout, 8)
    s4d = alg4_counts(layout, g3, share_in_group=False)
    star = alg4_counts(layout, g3, share_in_group=True)
    full = alg4_counts(layout, g4, share_in_group=True)
    assert s4d.a_units + s4d.b_units == 128
    assert star.a_units + star.b_units == 64
    assert full.a_units + full.b_units == 64
    baseline = alg1_counts(layout, g3)  # E3D: 8·8·8 movements of A and of B
    assert baseline.a_units == baseline.b_units == 512


def test_counts_reject_non_dividing_grid():
    layout = obl(2048, 2048, 2048, S_O)
    with pytest.raises(ShapeError):
        alg4_counts(layout, (3, 1, 1))


def test_simulators_reject_bad_blocks():
    with pytest.raises(ShapeError):
        run_alg4(np.ones((1, 2, 4, 4)), np.ones((3, 1, 4, 4)))
    with pytest.raises(ShapeError):
        run_alg1(np.ones((1, 1, 4, 2)), np.ones((1, 1, 2, 4)))


def test_counts_repr_is_readable():
    text = repr(alg4_counts(obl(2048, 2048, 2048, S_O)))
    assert "Algorithm 4" in text and "A-rotations" in text and "ROT=" in text
