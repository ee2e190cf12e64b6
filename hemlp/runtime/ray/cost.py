"""The Ray runtime's cost rules: where a PCMM runs (its grid across nodes or a node-local task) and on which grid.

The figures are measured (the comments say where); ``sharded`` weighs the planner's PCMM work against one more
wave of tasks and the bytes that would move between nodes. Grids: the planner's (``planner.grid``), validated here
when the caller gives one.
"""
from __future__ import annotations

import numpy as np

from hemlp.errors import ShapeError
from hemlp.planner.grid import grid_3d
from hemlp.planner.layouts import unit_costs
from hemlp.planner.obl import Layout
from hemlp.runtime.ray.blocks import ct_bytes

__all__ = ["RAY_WAVE_SECONDS", "RAY_STORE_COPY_BYTES_PER_S", "RAY_NODE_TRANSFER_BYTES_PER_S", "sharded",
           "node_threads", "store_grid", "grid_dims", "pcmm_grid"]

#: RayProgram's choice between sharding a PCMM on its grid over several nodes and running it in a node-local task
#: (see sharded). Measured on the 2-core reference VM (bench ray --model mlp): one more wave of dependent tasks
#: costs about 5 ms of Ray's dispatch, and a task copies its returns into the store at about 6 GB/s.
RAY_WAVE_SECONDS = 0.005
RAY_STORE_COPY_BYTES_PER_S = 6e9
#: blocks pulled from another node's store: 1.4 GB/s between two raylets on this VM (a 600 MB object; 10 GbE
#: would give about 1.2 GB/s)
RAY_NODE_TRANSFER_BYTES_PER_S = 1.4e9


def node_threads(ray, num_workers: int) -> int:
    """Threads (and CPUs) of a node-local task: the fewest CPUs of an alive node that has any, so that the task
    fits on every node, and at most num_workers."""
    cpus = [int(n["Resources"]["CPU"]) for n in ray.nodes() if n.get("Alive") and n["Resources"].get("CPU", 0) >= 1]
    return max(1, min([int(num_workers)] + cpus))


def store_grid(g, d1: int, c: int, d2: int, num_workers: int, parts_ok: bool, default) -> tuple:
    """A validated (p_m, p_n, p_k, p_s) from a planner Grid / 3- or 4-tuple (p_s = 1 if absent) or default()."""
    if g is None:
        return default()
    dims = (g.p_m, g.p_n, g.p_k, g.p_s) if hasattr(g, "p_s") else tuple(g)
    ps = 1
    if len(dims) == 4:
        dims, ps = dims[:3], dims[3]
        if not isinstance(ps, (int, np.integer)) or ps not in (1, 2):
            raise ShapeError(f"grid: p_s (the part split) must be 1 or 2 (a ciphertext has two polynomials), got {ps!r}")
        if ps == 2 and not parts_ok:
            raise ShapeError("grid: p_s = 2 needs a slot-encoded bias (a coefficient-encoded bias is added to whole "
                             "ciphertexts); use p_s = 1")
    return (*grid_dims(dims, d1, c, d2, num_workers), int(ps))


def sharded(ctx, s, chunks: int, num_workers: int, node_threads: int, grid=None) -> bool:
    """Whether PCMM step s runs on its grid (tasks of one thread each over num_workers) or in a node-local task
    with the steps around it. Sharded when a grid is given for it (on several nodes RayProgram gives the plan's
    split, hemlp.runtime.ray.split); otherwise only when the workers outnumber a node-local task's threads and the
    grid saves more time than one more wave costs
    (RAY_WAVE_SECONDS + its tasks' copy of the outputs into the store) plus the transfer between nodes of the
    share of its input and output that the other nodes' tasks read and write (RAY_NODE_TRANSFER_BYTES_PER_S;
    measured on two raylets: a 128 x 64 layer sharded took 0.21 s against 0.16 s in one task). The work: the
    planner's PCMM cost (multiply-accumulates of the exact GEMM x planner.layouts.unit_costs()["pcmm_mac"]).
    Within a node a task with all its CPUs runs the same cells as threads, reading its input in place: no wave, no
    copy of the output between processes (measured: bench ray --model mlp)."""
    if grid is not None and (not isinstance(grid, dict) or s.out in grid):
        return True
    p, t = num_workers, node_threads
    if p <= t:
        return False
    d1, d2 = np.shape(s.U)
    P = 1 if s.index is None else np.shape(s.index)[1]
    work = d1 * d2 * P * chunks * 2 * ctx.N * (s.level_out + 2) * unit_costs()["pcmm_mac"]  # input: l_out + 2 limbs
    out_bytes = d1 * P * chunks * ct_bytes(ctx, s.level_out)
    wave = RAY_WAVE_SECONDS + out_bytes / (p * RAY_STORE_COPY_BYTES_PER_S)
    moved = (1 - t / p) * (d2 * chunks * ct_bytes(ctx, s.level_out + 1) + out_bytes)  # the other nodes' share
    return work / t - work / p > wave + moved / RAY_NODE_TRANSFER_BYTES_PER_S


def pcmm_grid(d1: int, chunks: int, d2: int, num_workers: int):
    """The planner's 3D grid (eq. 5) over (output rows, columns, reduction rows).

    Every row / column / reduction row is one block of the layout, so W counts column-unit-sized
    objects moved: p_m d2 c (input copies) + p_n d1 d2 (weights) + p_k d1 c (partial outputs). The weight
    term is plaintext in reality (8-byte entries, see planner.grid.pcmm_store_bytes; stats["w3d_bytes"]);
    compiled models on Ray use hemlp.runtime.ray.program.RayProgram and planner.grid.grid_store instead."""
    layout = Layout(d1, chunks, d2, d1, chunks, d2, d1, chunks, d2, 1, "pcmm")
    return grid_3d(layout, int(num_workers))


def grid_dims(grid, d1: int, c: int, d2: int, num_workers: int, default=None) -> tuple[int, int, int]:
    """A validated (p_m, p_n, p_k) from a planner Grid / tuple; grid None: default() or the eq. (5) grid."""
    if grid is None:
        return default() if default is not None else pcmm_grid(d1, c, d2, num_workers).dims
    dims = tuple(getattr(grid, "dims", grid))
    if len(dims) != 3 or not all(isinstance(x, (int, np.integer)) and x >= 1 for x in dims):
        raise ShapeError(f"grid must be a planner Grid or (p_m, p_n, p_k) of positive ints, got {grid!r}")
    if dims[0] > d1 or dims[1] > c or dims[2] > d2:
        raise ShapeError(f"grid {dims} splits more than the product has: {d1} output rows, {c} ciphertext "
                         f"columns, {d2} reduction rows")
    return tuple(int(x) for x in dims)
