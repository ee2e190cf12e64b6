"""The plan's split of a layout (A) batch over a cluster's nodes, as RayProgram's grids (its default on several nodes),
and the tasks of a bootstrap step on it.

compile(nodes=K) sizes each node's memory by hemlp.runtime.shards: p_n groups of chunks, each group's feature rows
over p_r nodes, every PCMM a gather, a reduce or streamed. RayProgram without grid= on a cluster of K > 1 nodes
runs that split, so each node holds the shards the plan counted and only the bytes the model counts move:

* a PCMM the model keeps local (p_r = 1), gathers, or streams (its gathered rows arrive by blocks in the model; a
  task here holds them whole, so such a layer's node holds more than the model's figure): (p_r, p_n, 1), each
  node computes its own output rows;
* a reduce, and the B of a chain run by blocks (its partial sums sent to the rows' owners): (1, p_n, p_r).

One task per node's share, holding a node's CPUs (cost.node_threads: the fewest of any node, at most num_workers)
as its native threads, as a node-local task does; placement (hemlp.runtime.ray.placement) keeps each chunk group's
blocks on one node. K is the live nodes with CPUs (those placement sends tasks to): on the cluster the plan was
sized for (compile's nodes='auto' reads it) that is the plan's K; on more nodes each holds less than the plan
printed, on fewer more (the plan's split would then put several shares on a node anyway). The runtime receives the
steps, not the plan, so it re-derives the split with the plan's own function and arguments (shards.node_peak over
the steps, N and chunks).

A bootstrap step on that split (plans compiled with bootstrap=True) runs where its ciphertexts lie: refresh_tiles
cuts it into tasks of whole bootstrap calls (the in-process calls, so the same partners and bits) whose chunk ranges
are the same in every row, and row_cuts names the rows at which the producer of its input returns its blocks, so
that each task takes only its own rows.
"""
from __future__ import annotations

from bisect import bisect_right

import numpy as np

from hemlp.runtime.shards import node_peak

__all__ = ["Split", "split_of", "refresh_tiles", "row_cuts"]


class Split:
    """The split of one program over `nodes` nodes: grids ({PCMM step: (p_m, p_n, p_k)}), p_n, p_r, the model's
    per-node peak of ciphertext bytes and each matrix step's kind (local, gather, reduce, streamed, chain)."""

    def __init__(self, nodes: int, grids: dict, p_n: int, p_r: int, peak: int, kinds: dict):
        self.nodes, self.grids, self.p_n, self.p_r, self.peak, self.kinds = nodes, grids, p_n, p_r, peak, kinds

    def stats(self) -> dict:
        """The split as a stats entry (no nodes or tasks of its own, as the other entries that are not steps)."""
        return dict(op="split", nodes=[], tasks=0, cluster_nodes=self.nodes, p_n=self.p_n, p_r=self.p_r,
                    node_peak_bytes=self.peak, splits=dict(self.kinds),
                    grids={k: list(v) for k, v in self.grids.items()})


def split_of(steps, N: int, chunks: int, nodes: int) -> Split:
    """The split of layout (A)'s program `steps` (N slots x 2, `chunks` chunks) over `nodes` nodes (module
    docstring)."""
    peak = node_peak(steps, N, chunks, nodes)
    p_n, p_r = peak["p_n"], peak["p_r"]
    kinds = {}
    for m in peak["splits"]:
        kinds[m["step"]] = m["split"]
        if "chain" in m:     # B's partial sums of every output row, from each node's rows of A
            kinds[m["chain"][-1]] = "chain"
    grids = {}
    for s in steps:
        if s.op != "pcmm":
            continue
        d1, d2 = np.shape(s.U)
        if kinds.get(s.out) in ("reduce", "chain"):
            grids[s.out] = (1, p_n, min(p_r, d2))
        else:
            grids[s.out] = (min(p_r, d1), p_n, 1)
    return Split(int(nodes), grids, p_n, p_r, int(peak["peak"]), kinds)


def refresh_tiles(units, rows: int, chunks: int) -> list:
    """The tasks of a bootstrap step over a rows x chunks value whose ciphertexts (row-major: r chunks + j) refresh in
    `units` (local.refresh_units: consecutive ranges, one bootstrap call each): [((r0, r1, c0, c1), [(a, b): each
    call's ciphertexts as a range of the tile's, row-major])]. A tile is the smallest rectangle made of whole calls
    in a tiling whose chunk ranges are the same in every row (what the next PCMM's tasks read: gemm.block_product):
    one row x the chunks between the column boundaries every row shares, when every row starts a call (pairs or
    batches within rows); else bands of whole rows from one call boundary at a row start to the next (calls that
    run across rows, e.g. 2k ciphertexts of one chunk)."""
    n = rows * chunks
    starts = sorted(u[0] for u in units)
    bounds = set(starts) | {n}
    cols = []
    if all(r * chunks in bounds for r in range(rows)):
        cols = [j for j in range(1, chunks) if all(r * chunks + j in bounds for r in range(rows))]
    if cols:
        edges = [0, *cols, chunks]
        tiles = [(r, r + 1, a, b) for r in range(rows) for a, b in zip(edges, edges[1:])]
    else:
        bands = [r for r in range(rows) if r * chunks in bounds] + [rows]
        tiles = [(a, b, 0, chunks) for a, b in zip(bands, bands[1:])]
    firsts = [t[0] * chunks + t[2] for t in tiles]     # each tile's first ciphertext (tiles in row-major order)
    calls: list = [[] for _ in tiles]
    for u in sorted(units, key=lambda u: u[0]):
        t = bisect_right(firsts, u[0]) - 1 if not cols else (u[0] // chunks) * (len(cols) + 1) + bisect_right(
            cols, u[0] % chunks)
        r0, _, c0, c1 = tiles[t]
        local = [(i // chunks - r0) * (c1 - c0) + i % chunks - c0 for i in (u[0], u[-1])]
        if local[1] - local[0] != u[-1] - u[0]:
            raise AssertionError(f"bootstrap call {u[0]}..{u[-1]} is not contiguous in tile {tiles[t]}")
        calls[t].append((local[0], local[1] + 1))
    return list(zip(tiles, calls))


def row_cuts(tiles) -> list:
    """The rows at which refresh_tiles' tiles begin or end: a producer that returns its output in row pieces cut
    there lets each tile's task read only its rows."""
    return sorted({r for (r0, r1, _, _), _ in tiles for r in (r0, r1)})
