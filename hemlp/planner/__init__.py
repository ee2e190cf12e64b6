"""FHE4DMM planning layer (pure Python): block layouts, processor grids, op counts, chain plans.

Chen et al., "FHE4DMM", IEEE TPDS 2025 [S0]; reconstructions per docs/design/pcmm-and-planning.md §4:

* ``obl``     — Algorithm 2 (Optimal Block Layout, corrected), eq. (1), Table II, eq. (3);
* ``grid``    — Algorithm 3 processor grids minimising eq. (5) / eq. (6), latency eq. (7);
* ``alg4``    — op counts of Algorithm 1 vs Algorithm 4 (loop interchange);
* ``chain``   — layouts across a chain of MMs (DP / exhaustive / greedy) and MCM order;
* ``bootstrap_placement`` — where to bootstrap in a level DAG (exact DP / exhaustive; issue #18);
* ``cost_model`` — the cost profile every estimate is priced with (packaged tables, ``hemlp calibrate``).

Nothing here touches ciphertexts or the C++ core.
"""

from hemlp.planner.alg4 import (
    BmmCounts,
    CgemmBreakdown,
    alg1_counts,
    alg4_counts,
    cgemm_breakdown,
    run_alg1,
    run_alg4,
)
from hemlp.planner.bootstrap_placement import (
    BootstrapCost,
    LevelNode,
    Placement,
    evaluate_placement,
    place_bootstraps,
    place_bootstraps_exhaustive,
)
from hemlp.planner.chain import (
    Activation,
    ChainPlan,
    ChainStep,
    MCMPlan,
    default_reblock_cost,
    mcm_bruteforce,
    mcm_order,
    obl_cost_fn,
    plan_chain,
    plan_chain_exhaustive,
    plan_chain_greedy,
)
from hemlp.planner.grid import Grid, Partition, ProcessorShare, grid_3d, grid_4d, latency_4d, partition, w3d, w4d
from hemlp.planner.obl import (
    DEFAULT_OP_WEIGHTS,
    Layout,
    OpCounts,
    cgemm_cost,
    cgemm_ops,
    layout_cost,
    obl,
    obl_bruteforce,
    slots_required,
)

__all__ = [
    # obl
    "DEFAULT_OP_WEIGHTS", "Layout", "OpCounts", "cgemm_cost", "cgemm_ops", "layout_cost", "obl",
    "obl_bruteforce", "slots_required",
    # grid
    "Grid", "Partition", "ProcessorShare", "grid_3d", "grid_4d", "latency_4d", "partition", "w3d", "w4d",
    # alg4
    "BmmCounts", "CgemmBreakdown", "alg1_counts", "alg4_counts", "cgemm_breakdown", "run_alg1", "run_alg4",
    # chain
    "Activation", "ChainPlan", "ChainStep", "MCMPlan", "default_reblock_cost", "mcm_bruteforce", "mcm_order",
    "obl_cost_fn", "plan_chain", "plan_chain_exhaustive", "plan_chain_greedy",
    # bootstrap_placement
    "BootstrapCost", "LevelNode", "Placement", "evaluate_placement", "place_bootstraps", "place_bootstraps_exhaustive",
]
