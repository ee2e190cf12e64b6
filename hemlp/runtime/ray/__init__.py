"""hemlp on Ray: compiled models with the activations in the object store, one sharded PCMM, batch jobs.

One job per module (data flows down the list; no module imports one above it):

    session   joining / starting a cluster (ray_session), the optional `ray` import, fault injection
    malloc    opt-in malloc tuning of the worker processes (off by default)
    blocks    ciphertexts as blocks in the object store: the layout and the copies in and out
    cost      where a PCMM runs (its grid across nodes or a node-local task) and on which grid
    split     the plan's split of a batch over the live nodes as grids (the default on several nodes)
    gemm      the PCMM over store blocks: exact GEMM per limb, epilogue, the in-place product
    tasks     what runs in the workers: task bodies, per-process caches, the remote-function registry
    placement which node each task of a wave runs on: next to its arguments' bytes, the wave balanced
    driver    the state both drivers share (the Ray, the worker count, the relinearisation key shipped once)
    pcmm      ray_pcmm / ray_pcmm_gather: one PCMM sharded on a grid
    program   RayProgram: a whole program in waves of tasks, blocks kept in the store
    executor  RayExecutor: the per-step executor of local.run (the fallback)
    run       run_on_ray: RayProgram when it knows every step, else local.run with RayExecutor
    batch     RayItems: whole items of a resumable batch job (hemlp.runtime.jobs) as Ray tasks
    requests  run_groups: one request's independent groups (layouts P, A', C) as tasks, the model shipped once

docs/ray.md describes how it works and how to run it on a cluster.
"""
from hemlp.runtime.ray.batch import RayItems
from hemlp.runtime.ray.blocks import pack_cts, release_staging, unpack_cts
from hemlp.runtime.ray.executor import RayExecutor
from hemlp.runtime.ray.malloc import TUNE_MALLOC_ENV
from hemlp.runtime.ray.pcmm import ray_pcmm, ray_pcmm_gather
from hemlp.runtime.ray.program import RayProgram
from hemlp.runtime.ray.requests import run_groups
from hemlp.runtime.ray.run import run_on_ray
from hemlp.runtime.ray.session import LOCAL_SYSTEM_CONFIG, RuntimeUnavailableError, ray_session

__all__ = ["ray_session", "RuntimeUnavailableError", "LOCAL_SYSTEM_CONFIG", "TUNE_MALLOC_ENV", "RayProgram",
           "RayExecutor", "run_on_ray", "run_groups", "ray_pcmm", "ray_pcmm_gather", "RayItems", "pack_cts",
           "unpack_cts",
           "release_staging"]
