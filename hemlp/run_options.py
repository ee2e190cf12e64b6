"""The options of ``CompiledModel.run`` as typed objects: a default and a description per field, one ``validate()``.

    out = compiled.run(ct, eval_keys)                                              # in this process
    out = compiled.run(ct, eval_keys, runtime="ray", num_workers=2)                # keywords, as before
    opts = RunOptions(runtime="ray", ray=RayOptions(num_workers=2, threads_per_task=2))
    out = compiled.run(ct, eval_keys, options=opts)                                # or one object
    out = compiled.run(ct, eval_keys, options=opts, stats=st)                      # plus keyword overrides

Keyword overrides take RunOptions' names and RayOptions' names alike (a Ray name goes to ``ray``). The data a run
works on (the batch, the keys, layout (C)'s encrypted weights) are run()'s arguments, never options.
``RunOptions.help()`` prints every field with its default and description, the Ray options included.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from numbers import Integral
from typing import Any

from hemlp.errors import OptionError, ParameterError
from hemlp.options import Options, option

__all__ = ["RunOptions", "RayOptions", "StagedKeys", "RUNTIMES"]

#: where run() evaluates: in this process, or as Ray tasks (bit-identical)
RUNTIMES = ("local", "ray", "cuda")


def _count_or_none(v) -> bool:
    return v is None or (isinstance(v, Integral) and not isinstance(v, bool) and v >= 1)


@dataclass(frozen=True)
class StagedKeys:
    """RayOptions.shared_keys=StagedKeys(folder): the driver writes layout (A)'s bootstrapping keys as a shared key file
    into `folder` itself (hemlp.runtime.shared_keys.stage_shared_keys, named by the file's own SHA-256) and ships only
    that name: no key bytes go through Ray, and the driver holds no serialised copy (at N16-boot, 3.3-11.4 GiB less
    at the put). Every worker maps the file from the same folder on its machine; a machine without it fails with
    MissingKeyFileError (copy the file there, or use the default shared_keys). folder: None, the temporary folder's
    hemlp-keys-<uid> (as shared_keys=True); else a private (0700) folder, the same path on every node."""

    folder: Any = None

    def __post_init__(self):
        if not (self.folder is None or (isinstance(self.folder, (str, os.PathLike)) and str(self.folder))):
            raise ParameterError(f"StagedKeys(folder={self.folder!r}): a private folder's path, or None (the "
                                 "temporary folder's hemlp-keys-<uid>)")


@dataclass(frozen=True)
class RayOptions(Options):
    """How run(runtime="ray") uses Ray (docs/ray.md). Every default is None: Ray's and the planner's choice."""

    address: Any = option(None, "None: the connected Ray, else a local one started for the call with num_workers "
                                "CPUs; 'host:port', 'ray://host:10001' or 'auto': join that cluster "
                                "(RuntimeUnavailableError if it cannot be reached)")
    num_workers: Any = option(None, "the CPUs of a local Ray started for the call and the worker count the grids "
                                    "are planned for; None: this machine's / the cluster's CPUs")
    grid: Any = option(None, "layout (A): (p_m, p_n, p_k[, p_s]) for every PCMM or {step: grid}; p_s = 2 puts the "
                             "two polynomials of a ciphertext in different tasks; None: on several live nodes the "
                             "plan's split of the batch over them (compile(nodes=K)'s per-node memory), on one node "
                             "node-local tasks")
    cts_per_task: Any = option(None, "layout (A): elementwise steps as tasks of their own over groups of this many "
                                     "ciphertexts; None: fused into the tasks around them (a plan run step by step, "
                                     "e.g. with bootstraps: spread over 2 x num_workers tasks)")
    threads_per_task: Any = option(None, "native threads of every task, each holding that many CPUs (e.g. a node's "
                                         "cores when its memory holds one N16 bootstrapping process); None: 1")
    stats: Any = option(None, "a dict that run() fills per step (tasks, nodes, bytes, seconds): an output")
    shared_keys: Any = option(None, "how the workers of one machine hold the evaluation and bootstrapping keys: None / "
                                    "True, one memory-mapped copy per machine in the temporary folder's "
                                    "hemlp-keys-<uid>; a private folder's path, there; False, a copy per worker "
                                    "(hemlp.runtime.ray.node_keys); StagedKeys(folder), layout (A)'s bootstrapping "
                                    "keys written by the driver into that folder and only the file's name shipped "
                                    "(no key bytes through Ray; the file must be in that folder on every node)")

    def named(self) -> list:
        """The options set (not None), in field order."""
        return [f.name for f in fields(self) if getattr(self, f.name) is not None]

    def validate(self) -> "RayOptions":
        """ParameterError naming the option and its valid values for the first value that cannot work (a grid's
        shape is checked by the runtime, against the plan)."""
        def bad(name, want):
            raise ParameterError(f"{name}={getattr(self, name)!r}: {want}")

        if self.address is not None and not (isinstance(self.address, str) and self.address):
            bad("address", "a Ray address ('host:port', 'ray://host:10001', 'auto') or None")
        for name in ("num_workers", "cts_per_task", "threads_per_task"):
            if not _count_or_none(getattr(self, name)):
                bad(name, "an int >= 1, or None")
        if self.grid is not None and not isinstance(self.grid, (tuple, list, dict)):
            bad("grid", "(p_m, p_n, p_k[, p_s]), {step: grid}, or None")
        if self.stats is not None and not isinstance(self.stats, dict):
            bad("stats", "a dict to fill, or None")
        if not (self.shared_keys is None or isinstance(self.shared_keys, (bool, StagedKeys))
                or (isinstance(self.shared_keys, (str, os.PathLike)) and str(self.shared_keys))):
            bad("shared_keys", "True / None (the temporary folder), a private folder's path, False, or "
                               "StagedKeys(folder)")
        return self


@dataclass(frozen=True)
class RunOptions(Options):
    """Every option of CompiledModel.run (the Ray ones in ``ray``)."""

    runtime: str = option("local", "'local': in this process; 'ray': as Ray tasks, bit-identical (layout (A): every "
                                   "PCMM, elementwise step and bootstrap; (P), (A'), (C): the request's independent "
                                   "groups, one task each); 'cuda': in this process on its GPU, bit-identical "
                                   "(layout (P) models; hemlp.gpu.runner)")
    threads: Any = option(None, "native threads of this process (hemlp.set_num_threads); None: as they are")
    verbose: Any = option(None, "a per-layer progress bar on stderr: True / False; None: only when stderr is a "
                                "terminal (hemlp.progress)")
    ray: RayOptions = option(RayOptions(), "the Ray options (RayOptions), with runtime='ray' only")

    @classmethod
    def help(cls) -> str:
        return super().help() + "".join(f"\n  ray.{line}" for line in RayOptions.help().splitlines())

    @classmethod
    def of(cls, options: "RunOptions | None" = None, **overrides) -> "RunOptions":
        """``options`` (default RunOptions()) with keyword overrides on top, validated: what run() evaluates with.
        A RayOptions name goes to ``ray``; an unknown name is an OptionError listing the valid ones."""
        if options is not None and not isinstance(options, cls):
            raise OptionError(f"options must be a hemlp.RunOptions, got {type(options).__name__}; pass runtime=, "
                              "threads=, verbose= and the Ray options as keywords")
        return (options or cls()).merged(**overrides).validate()

    def merged(self, **overrides) -> "RunOptions":
        ray_names = set(RayOptions.names())
        bad = sorted(set(overrides) - set(self.names()) - ray_names)
        if bad:
            raise OptionError(f"run() got unknown option(s) {bad}; valid options: {sorted(self.names())} and the Ray "
                              f"options {sorted(ray_names)}")
        ray_over = {k: overrides.pop(k) for k in list(overrides) if k in ray_names}
        out = replace(self, **overrides)
        if ray_over:
            if not isinstance(out.ray, RayOptions):
                raise OptionError(f"ray={out.ray!r}: a hemlp.RayOptions (or its fields as keywords)")
            out = replace(out, ray=out.ray.merged(**ray_over))
        return out

    def validate(self) -> "RunOptions":
        """ParameterError naming the option and its valid values; OptionError (also a TypeError) for Ray options
        with runtime='local'."""
        if self.runtime not in RUNTIMES:
            raise ParameterError(f"runtime={self.runtime!r}: 'local' (in this process), 'ray' or 'cuda' (this "
                                 "process on its GPU: layout (P) models)")
        if not _count_or_none(self.threads):
            raise ParameterError(f"threads={self.threads!r}: an int >= 1, or None (the threads as they are)")
        if self.verbose is not None and not isinstance(self.verbose, bool):
            raise ParameterError(f"verbose={self.verbose!r}: True, False or None")
        if not isinstance(self.ray, RayOptions):
            raise OptionError(f"ray={self.ray!r}: a hemlp.RayOptions (or its fields as keywords)")
        if self.runtime != "ray" and self.ray.named():
            named = self.ray.named()
            raise OptionError(f"{', '.join(named)} {'is an option' if len(named) == 1 else 'are options'} of "
                              f"runtime='ray': pass runtime='ray' to run on Ray, or leave {'it' if len(named) == 1 else 'them'} out")
        self.ray.validate()
        return self
