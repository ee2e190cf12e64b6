"""The plan's split of a layout (A) batch over a cluster's nodes, as RayProgram's grids (its default on several nodes).

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
"""
from __future__ import annotations

import numpy as np

from hemlp.runtime.shards import node_peak

__all__ = ["Split", "split_of"]


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
