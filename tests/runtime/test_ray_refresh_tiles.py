"""How RayProgram cuts a bootstrap step into tasks (hemlp.runtime.ray.split.refresh_tiles, issue #30): every tile
holds whole bootstrap calls of the in-process run (local.refresh_units: the same partners, so the same bits), the
tiles cover the value once, and their chunk ranges are the same in every row (what the next PCMM's tasks read:
gemm.block_product). No Ray needed."""
from collections import namedtuple

import pytest

from hemlp.runtime.local import refresh_units
from hemlp.runtime.ray.split import refresh_tiles, row_cuts
from hemlp.step_ops import RefreshInfo

Ct = namedtuple("Ct", "level scale is_complex")
Step = namedtuple("Step", "out info")


def step(order: str, k: int = 1):
    return Step("boot", RefreshInfo(order=order, k=k, scale_factor=1))


def check(units, rows: int, chunks: int) -> list:
    tiles = refresh_tiles(units, rows, chunks)
    seen, calls = {}, []
    for (r0, r1, c0, c1), cs in tiles:
        cells = [r * chunks + j for r in range(r0, r1) for j in range(c0, c1)]
        for r in range(r0, r1):
            for j in range(c0, c1):
                assert (r, j) not in seen, "tiles overlap"
                seen[r, j] = (c0, c1)
        assert [i for a, b in cs for i in range(a, b)] == list(range(len(cells))), "calls must fill the tile in order"
        calls += [tuple(cells[a:b]) for a, b in cs]
    assert len(seen) == rows * chunks
    assert sorted(calls) == sorted(tuple(u) for u in units)          # the in-process calls, partners and all
    for r in range(rows):     # one column tiling for every row
        assert {seen[r, j] for j in range(chunks)} == {seen[0, j] for j in range(chunks)}
    edges = {r for (r0, r1, _, _), _ in tiles for r in (r0, r1)}
    assert set(row_cuts(tiles)) == edges
    return tiles


@pytest.mark.parametrize("rows,chunks", [(8, 1), (8, 3), (5, 6), (7, 2), (3, 4), (1, 5)])
@pytest.mark.parametrize("order,k", [("cts_first", 1), ("s2c_first", 2), ("s2c_first", 8)])
def test_tiles_hold_whole_calls_in_one_column_tiling(rows, chunks, order, k):
    cts = [Ct(3, 2.0 ** 30, False)] * (rows * chunks)
    units, _ = refresh_units(cts, step(order, k))
    check(units, rows, chunks)


def test_tile_shapes():
    """Pairs within rows (6 chunks): one row x 2 chunks a tile, one call each; pairs across rows (3 chunks): bands of
    2 rows, 3 calls each; 2k = 4 ciphertexts of one chunk: 4 rows a tile."""
    pairs = lambda n: [(i, i + 1) for i in range(0, n, 2)]       # noqa: E731
    assert [t for t, _ in check(pairs(12), 2, 6)][:3] == [(0, 1, 0, 2), (0, 1, 2, 4), (0, 1, 4, 6)]
    assert [(t, len(c)) for t, c in check(pairs(12), 4, 3)] == [((0, 2, 0, 3), 3), ((2, 4, 0, 3), 3)]
    quads = [tuple(range(i, i + 4)) for i in range(0, 8, 4)]
    assert [t for t, _ in check(quads, 8, 1)] == [(0, 4, 0, 1), (4, 8, 0, 1)]


def test_a_ciphertext_that_refreshes_alone_moves_the_tiles():
    """A ciphertext of another scale has no partner (local.bootstrap_units): the calls after it shift by one, and
    the tiles follow the calls, not the pattern a uniform value would have."""
    cts = [Ct(3, 2.0 ** 30, False)] * 12
    cts[1] = Ct(3, 2.0 ** 31, False)
    units, _ = refresh_units(cts, step("cts_first"))
    assert units[:3] == [(0,), (1,), (2, 3)]
    check(units, 4, 3)
    check(units, 12, 1)
