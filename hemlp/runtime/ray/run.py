"""run_on_ray: a lowered program (a step list) on Ray, as RayProgram when it knows every step, else step by step."""
from __future__ import annotations

from hemlp.runtime.local import run
from hemlp.runtime.ray.executor import RayExecutor
from hemlp.runtime.ray.program import RayProgram, supported
from hemlp.runtime.ray.session import check_task_cpus, ray_session, task_threads

__all__ = ["run_on_ray"]


def run_on_ray(ctx, steps, C, relin_key, weight_bits: int, timings: dict | None = None, *, address=None,
               num_workers: int | None = None, grid=None, cts_per_task: int | None = None, stats: dict | None = None,
               tune_malloc: bool | None = None, bootstrap_keys=None, threads_per_task: int | None = None,
               shared_keys=None):
    """Run a lowered program on Ray (joins `address` or starts a local Ray for the call when none is connected;
    see ray_session): RayProgram, activations kept in the object store between layers. Programs with steps it
    does not know fall back to local.run with a RayExecutor (one Ray call per step). tune_malloc: the workers'
    malloc tuning, off unless True or HEMLP_RAY_TUNE_MALLOC=1 (hemlp.runtime.ray.malloc). bootstrap_keys: the
    hemlp.bootstrap.BootstrapKeys or BatchBootstrapKeys of a program with bootstrap steps (compile(...,
    bootstrap=True)): on a cluster of several nodes such a program runs as RayProgram too (the plan's split, every
    bootstrap call a task on the node holding its ciphertexts); on one node, or with MaMBo steps, step by step,
    every bootstrap call a task (RayExecutor.bootstrap). threads_per_task: the native threads (and CPUs held) of
    each task (default 1; RayProgram's node-local tasks use a node's cores anyway). shared_keys: how a machine's
    workers hold the bootstrapping keys (RayOptions.shared_keys, hemlp.runtime.ray.node_keys)."""
    threads = task_threads(threads_per_task)
    with ray_session(address, num_workers) as ray:
        check_task_cpus(ray, threads)
        prog = RayProgram(num_workers=num_workers, grid=grid, cts_per_task=cts_per_task, tune_malloc=tune_malloc,
                          threads_per_task=threads, bootstrap_keys=bootstrap_keys, shared_keys=shared_keys)
        # bootstraps on one node stay with RayExecutor: every call a task over the node's workers (measured there)
        if supported(steps, C) or (supported(steps, C, bootstraps=True) and prog.split_nodes() > 1):
            ex = prog
            out = ex.run(ctx, steps, C, relin_key, weight_bits, timings)
        else:
            ex = RayExecutor(num_workers=num_workers, grid=grid, cts_per_task=cts_per_task, tune_malloc=tune_malloc,
                             bootstrap_keys=bootstrap_keys, threads_per_task=threads, shared_keys=shared_keys)
            out = run(ctx, steps, C, relin_key, weight_bits, timings, executor=ex)
    if stats is not None:
        stats.update(ex.stats)
    return out
