"""The Layout protocol: everything that differs between ways of placing a batch in ciphertexts.

A compiled model (hemlp.model.CompiledModel) holds the lowered steps, the parameters and one Layout; every
client or server call that depends on where the values sit in the ciphertexts is delegated to it:

    planning   Layout.plan(planned)  the layout's program for the planned steps (or UnsupportedError /
                                     ShapeError / LevelError when it cannot run them); estimate(); commit()
    keys       key_levels(), keygen(ctx, sk), level_checks(ctx, eval_keys), check_run(...)
    client     capacity, encrypt(ctx, x, key), decrypt(ctx, ctm, sk, batch), encrypt_weights(...)
    server     prepare(ctx), run(ctx, ct, eval_keys, weights, timings, runtime, ray, model); a request's independent
               groups: groups(ct), run_group(...), join_groups(...) (run's default, in process or on Ray)
    oracle     simulate(X)
    text       plan_header(info), finish_plan_text(text, info), plan_info()
    resources  key_inventory(), ciphertexts_in(), ciphertexts_out(), prepared_bytes(), working_bytes(): the
               counts hemlp.planner.resources turns into key / upload / memory estimates before any key exists
    files      the steps and options are saved by the model; Layout(steps, params, batch, top, options)
               rebuilds the same program from them (programs are deterministic functions of those)

Adding a layout = one module in hemlp/layouts/ with a Layout subclass, named in hemlp.layouts.LAYOUTS.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import ClassVar

import numpy as np

from hemlp.bootstrap import BatchBootstrapKeys, Bootstrapper, MamboBootstrapper
from hemlp.errors import OptionError, ParameterError, UnsupportedError
from hemlp.pcmm import CtMatrix
from hemlp.step_ops import CT_PRODUCT_OPS, REFRESH_OPS, UNTIMED_OPS, StepOp, lint_pass

__all__ = ["Layout", "Planned", "CT_PRODUCT_OPS"]


@dataclass
class Planned:
    """What compile() hands every candidate layout: the lowered steps with their levels planned for the
    default preset, and that preset."""
    steps: list
    params: object          # hemlp.fhe.Params
    preset: dict            # hemlp.compiler.params.choose_preset's entry (name, depth, security)
    depth: int
    reserve: int            # levels kept for the output's magnitude
    top: int                # the input's level
    batch: int
    options: dict           # compile options (hemlp.model.OPTIONS)
    max_out: float          # largest |output| of the plaintext simulation of the example input
    #: what the planner computed that the layout's program may reuse (layout (P): its planned matrix-vector
    #: products, hemlp.layouts.packed.PackedProgram's `memo`); handed to build_program, then dropped
    reuse: dict = field(default_factory=dict)

    def __post_init__(self):
        lint_pass(self.steps, "planning")       # every planner (bootstrap placements included) hands over a Planned


class Layout:
    """One way of laying a batch out in ciphertexts, bound to one compiled model's steps."""

    #: the layout option's value ("batch", "packed", ...)
    name: ClassVar[str] = ""
    #: the layout's label in docs/layouts.md: (A), (P), (A'), (C)
    label: ClassVar[str] = ""
    #: levels one linear layer costs in this layout (compile() plans the default levels with it)
    pcmm_levels: ClassVar[int] = 1
    #: True: the model's weights are encrypted by the client too (the encrypted_weights option selects it)
    encrypted_weights: ClassVar[bool] = False
    #: True: the plan reports FHE4DMM block layouts / grids of its PCMMs (slot-GEMM layouts)
    fhe4dmm_grids: ClassVar[bool] = True
    #: True: the layout can run the model's last linear layer at level 0 without its rescale (compile's
    #: final_rescale=False; hemlp.compiler.params.unrescaled)
    unrescaled_final: ClassVar[bool] = False
    #: True: build_program makes a program of its own, which compiled.<name> returns (False: the steps are it)
    own_program: ClassVar[bool] = True

    def __init__(self, steps, params, batch_size: int, top_level: int, options: dict, program=None):
        self.steps, self.params = steps, params
        self.batch_size, self.top_level, self.options = int(batch_size), int(top_level), dict(options)
        self.weight_bits = int(self.options.get("weight_bits", 20))
        self._program = program
        self._runner = None
        self.reuse: dict = {}          # Planned.reuse while the program is built
        # planning results (compile() reads them from the chosen layout)
        self.preset_info: dict | None = None
        self.depth: int | None = None
        self.reserve = 0

    # ---- planning
    @classmethod
    def plan(cls, p: Planned) -> "Layout":
        """This layout for the planned steps, with the default preset and levels."""
        lay = cls(p.steps, p.params, p.batch, p.top, p.options)
        lay.reuse = p.reuse
        lay.program  # builds it now, so an unsupported model fails here
        lay.reuse = {}
        lay.preset_info, lay.depth, lay.reserve = p.preset, p.depth, p.reserve
        return lay

    def build_program(self):
        """The layout's program for the steps (None: the steps are the program)."""
        return None

    @classmethod
    def step_tables(cls) -> dict:
        """{pass: its handler table} for every pass of this layout that interprets lowered steps (planning, the
        plaintext oracle, the encrypted run), each keyed by hemlp.step_ops.StepOp with one entry per op: a handler,
        or an Unsupported refusal (tests/compiler/test_op_coverage.py checks every table of every layout)."""
        raise NotImplementedError(f"layout {cls.name!r} does not list its step handler tables")

    @property
    def program(self):
        if self._program is None:
            self._program = self.build_program()
        return self._program

    def estimate(self):
        """The planner's cost estimate in seconds per batch (float), or why the layout is not chosen (str)."""
        raise NotImplementedError(f"layout {self.name!r} has no cost estimate")

    def commit(self) -> None:
        """Called once on the chosen layout, before the plan is built (e.g. to write its own levels)."""

    def plan_info(self) -> dict:
        """Entries this layout adds to the plan's info (saved with the model)."""
        return {}

    def keyswitches(self) -> dict | None:
        """Step name -> (1 if the step's input is rotated before its weights apply, rotations of partial sums after
        them, rotate-and-sum steps of the result): the key switches and automorphism sums the plan's noise analysis
        (hemlp.runtime.noise_analysis) adds to each linear step.
        None: this layout's error is not analysed (its ciphertexts go through steps the lowered program does not
        describe)."""
        return None

    def value_magnitudes(self, magnitudes: dict) -> dict:
        """Per-row magnitudes (hemlp.runtime.noise_analysis.row_magnitudes) of this layout's values, from those of
        the lowered steps' values (compile's calibration pass): the same names, unless the layout rewrote the steps
        (layout (P)'s channel blocks)."""
        return magnitudes

    @staticmethod
    def plan_header(info: dict) -> list[str]:
        """The plan's header lines that describe the layout (from the saved info alone)."""
        return []

    @staticmethod
    def finish_plan_text(text: str, info: dict) -> str:
        """The printed plan with the ops renamed to what this layout executes."""
        return text

    def id_fields(self) -> list:
        """Extra values of the model id (a model compiled for another layout or batch is another model)."""
        return [self.name, self.batch_size]

    # ---- keys
    _boot = None        # (keys, bootstrapper) of the last bootstrapped run

    @property
    def bootstrapped(self) -> bool:
        """True when the planner placed bootstraps (or MaMBo steps) in the program (compile(..., bootstrap=True))."""
        return any(s.op in REFRESH_OPS for s in self.steps)

    def bootstrapper(self, ctx, keys):
        """The bootstrapper of these keys (a Bootstrapper for BootstrapKeys, a MamboBootstrapper for the S2C-first
        BatchBootstrapKeys), built once per key set and context (the groups of a run, and later runs with the same
        keys, reuse it)."""
        if self._boot is None or self._boot[0] is not keys or self._boot[1].ctx is not ctx:
            make = MamboBootstrapper if isinstance(keys, BatchBootstrapKeys) else Bootstrapper
            self._boot = (keys, make(ctx, keys))
        return self._boot[1]

    @property
    def needs_relin(self) -> bool:
        return any(s.op in CT_PRODUCT_OPS for s in self.steps)

    def relin_level(self):
        lv = [s.level_in for s in self.steps if s.op in CT_PRODUCT_OPS]
        return (max(lv) if lv else None) if self.needs_relin else None

    def key_levels(self) -> dict:
        """{"relin": l, "rotation": l, ...}: the highest ciphertext level each key is used at (None: never)."""
        return dict(relin=self.relin_level(), rotation=None)

    def keygen(self, ctx, sk) -> tuple:
        """(relin_key, galois_keys, modpack_keys) for this layout, each at its key level."""
        lv = self.key_levels()
        rlk = ctx.relin_key(sk, level=lv["relin"]) if self.needs_relin else None
        return rlk, None, None

    def level_checks(self, ctx, eval_keys) -> list:
        """[(what, key-like with .level, level needed, the ctx method that makes it)] checked before a run."""
        lv = self.key_levels()
        return [("relinearisation key", eval_keys.relin_key, lv["relin"], "relin_key"),
                ("rotation keys", eval_keys.galois_keys, lv["rotation"], "rotation_keys"),
                ("ModPack keys", eval_keys.modpack_keys, lv.get("modpack"), "pcmm.modpack_keys")]

    def check_run(self, ct, eval_keys, weights, runtime: str, model_id: str) -> None:
        """Layout-specific checks of a run's arguments (typed errors, before any work)."""
        if weights is not None:
            raise TypeError("weights= is only for models compiled with encrypted_weights=True")

    # ---- client side
    @property
    def capacity(self) -> int:
        """Samples one encrypted batch holds."""
        raise NotImplementedError

    def encrypt(self, ctx, x: np.ndarray, key, level: int):
        """x (batch, *input_shape) -> CtMatrix in this layout."""
        raise NotImplementedError

    def decrypt(self, ctx, ctm, sk, batch: int) -> np.ndarray:
        """CtMatrix of a run's output -> (batch, output features)."""
        raise NotImplementedError

    def encrypt_weights(self, ctx, key, model_id: str):
        raise ParameterError("encrypt_weights is for models compiled with encrypted_weights=True")

    # ---- server side
    def prepare(self, ctx) -> float:
        """Encode / precompute what run() needs (seconds spent); run() does it on first use otherwise."""
        return 0.0

    def run(self, ctx, ct, eval_keys, weights, timings: dict, runtime: str, ray=None, model=None):
        """The encrypted input batch (hemlp.runtime.artifacts.EncryptedBatch) -> output CtMatrix. The default runs
        the request's independent groups (groups / run_group / join_groups): in process one after the other, on
        Ray (runtime="ray") as one task each (run_groups_on_ray). ray: the hemlp.RayOptions of runtime="ray";
        model: the compiled model, which the Ray workers load (CompiledModel.load)."""
        if runtime == "ray":
            return self.run_groups_on_ray(ctx, ct, eval_keys, weights, timings, ray, model)
        outs = []
        for g in self.groups(ct):
            t: dict = {}
            outs.append(self.run_group(ctx, [ct.ctm.cts[i] for i in g], eval_keys, weights, t))
            for k, v in t.items():
                timings[k] = timings.get(k, 0.0) + v
        return self.join_groups(ctx, ct, outs)

    # ---- a request as independent groups (the data-parallel unit of the Ray runtime)
    def groups(self, ct) -> list[list[int]]:
        """The independent groups of an input batch: lists of indices into ct.ctm.cts, each of which run_group
        computes alone (default: the whole request is one group). Checks the input's shape (ShapeError)."""
        return [list(range(len(ct.ctm.cts)))]

    def run_group(self, ctx, cts: list, eval_keys, weights, timings: dict, part=None) -> list:
        """One group's input ciphertexts -> its output ciphertexts: the layout's in-process program, the same
        arithmetic wherever it runs (so a Ray worker gives the same bits). part: None (the whole program) or a
        part of it the layout defines (layout (A′): one activation segment on one ciphertext)."""
        raise NotImplementedError(f"layout {self.name!r} does not run groups")

    def join_groups(self, ctx, ct, outs: list):
        """The groups' outputs (in the order of groups(ct)) -> the run's output CtMatrix."""
        flat = [c for out in outs for c in out]
        return CtMatrix(ctx, flat, (len(flat), ctx.slots), 1)

    def weights_from_bytes(self, data: bytes, compiled):
        """A run's weights= argument from its to_bytes() (the Ray workers receive bytes); layouts with plaintext
        weights take none."""
        raise ParameterError(f"layout {self.name!r} takes no weights= argument")

    def run_groups_on_ray(self, ctx, ct, eval_keys, weights, timings: dict, ray, model):
        """run() on Ray: every group a task in a worker that loads the model and the keys once (put once in the
        object store), bit-identical to the in-process run (hemlp.runtime.ray.requests)."""
        groups = [[ct.ctm.cts[i] for i in g] for g in self.groups(ct)]
        return self.join_groups(ctx, ct, self.ray_tasks(ctx, groups, eval_keys, weights, timings, ray, model))

    def ray_tasks(self, ctx, groups: list, eval_keys, weights, timings: dict, ray, model, part=None) -> list:
        """run_group(ctx, group, eval_keys, weights, timings, part) on Ray, one task per group of ciphertexts:
        their output lists. ray: hemlp.RayOptions; model: the compiled model the workers load. part: what of the
        program a task runs (None: all; layouts define others)."""
        from hemlp.runtime.ray import run_groups   # Ray is optional: imported only when asked for

        if model is None:
            raise UnsupportedError(f"layout {self.label} runs on Ray through its compiled model: "
                                   "compiled.run(ct, eval_keys, runtime='ray')")
        grids = [n for n in ("grid", "cts_per_task") if getattr(ray, n) is not None]
        if grids:
            raise OptionError(f"layout {self.label} on Ray runs its groups as tasks: {grids} are options of "
                              "layout (A) only")
        return run_groups(model, model.load, eval_keys, weights, ctx, groups, timings, address=ray.address,
                          num_workers=ray.num_workers, stats=ray.stats, part=part,
                          threads_per_task=1 if ray.threads_per_task is None else ray.threads_per_task,
                          shared_keys=ray.shared_keys)

    # ---- plaintext oracle
    def simulate(self, X: np.ndarray) -> np.ndarray:
        """X (n, input features) -> (n, output features): the same plan on numpy values."""
        raise NotImplementedError

    # ---- resources (counts only; hemlp.planner.resources turns them into bytes and seconds)
    def key_inventory(self) -> dict:
        """{kind: (number of key-switching keys, level)} of keygen()'s evaluation keys."""
        lv = self.key_levels()
        return {"relin": (1, lv["relin"])} if self.needs_relin else {}

    def ciphertexts_in(self) -> int:
        """Ciphertexts the client encrypts (at top_level) for one batch of batch_size samples."""
        raise NotImplementedError(f"layout {self.name!r} does not count its input ciphertexts")

    def ciphertexts_out(self) -> tuple:
        """(ciphertexts, level) of a run's output for one batch."""
        raise NotImplementedError(f"layout {self.name!r} does not count its output ciphertexts")

    def prepared_bytes(self) -> int:
        """Bytes prepare() keeps on the server (encoded weights / diagonals)."""
        return 0

    def working_bytes(self) -> int:
        """Bytes of the ciphertexts a run holds at its peak, the input excluded."""
        return 0

    def fit_memory(self, budget: int | None, boot_key_bytes: int = 0) -> None:
        """Size what the layout keeps between runs to a memory budget in bytes (None: no budget) before its memory
        is checked against it; boot_key_bytes: its bootstrapping keys in memory. Layout (P) sizes its diagonal
        cache; the others keep nothing whose size they choose."""

    def node_peak(self, nodes: int) -> dict:
        """Each node's ciphertexts when a batch is split over `nodes` nodes (hemlp.planner.resources.estimate_nodes):
        dict(peak: bytes at the node's peak, its share of the input included; input: that share; extra: bytes
        received from other nodes held at the peak; split: how the batch splits; splits: per step). Default: no
        split is modelled, so every node is counted with the whole run (layouts that split override it)."""
        top = int(self.top_level)
        inp = int(self.ciphertexts_in()) * 2 * self.params.N * (top + 1) * 8
        return dict(peak=inp + int(self.working_bytes()), input=inp, extra=0, at=None, splits=[],
                    split=f"not split: layout {self.label}'s per-node memory is counted as the whole run on each node")

    def prepare_seconds_estimate(self) -> float:
        """Seconds of prepare(): the server's one-time encoding of what run() reuses (0: nothing to encode)."""
        return 0.0

    def seconds_estimate(self) -> float | None:
        """Seconds per batch, client encryption included (the plan's resources; None: no estimate). Unlike
        estimate() it never declines for a reason other than time."""
        est = self.estimate()
        return float(est) if isinstance(est, (int, float)) else None

    def progress_total(self) -> int | None:
        """Entries run() records in its timings (one per executed step): the length of run's progress bar."""
        return sum(1 for s in self.steps if s.op not in UNTIMED_OPS)

    def output_level(self) -> int:
        out = [s.level_out for s in self.steps if s.op == StepOp.OUTPUT]
        return int(out[0]) if out and out[0] is not None else 0

    # ---- helpers for subclasses
    def runner(self, ctx, make):
        """The layout's encrypted executor for ctx, built once by make(ctx) (it caches encoded weights)."""
        if self._runner is None or self._runner.ctx is not ctx:
            self._runner = make(ctx)
        return self._runner

    @staticmethod
    def in_groups(fn, X: np.ndarray, size: int) -> np.ndarray:
        """fn on consecutive groups of `size` rows of X, concatenated (layouts with a fixed group size)."""
        return np.concatenate([fn(X[i: i + size]) for i in range(0, len(X), size)])

    @staticmethod
    def key_level_view(level):
        """A key-like object with only a level (for level_checks of keys split by use)."""
        return SimpleNamespace(level=level)
