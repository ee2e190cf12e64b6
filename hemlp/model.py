"""hemlp.model: a torch.nn.Module or an ONNX file -> a planned chain of encrypted layers (``compile``); the
``CompiledModel`` that runs it (hemlp.compiled_model) and its directory format (hemlp.artefact) are re-exported.

    compiled = hemlp.compile(model_or_onnx_path, example_input, batch_size=..., **options)
    print(compiled.plan)
    sk, eval_keys = compiled.keygen()                 # client
    ct = compiled.encrypt(x, sk)                      # client: x (batch, *input_shape)
    ct_out = compiled.run(ct, eval_keys)              # server: no secret key
    y = compiled.decrypt(ct_out, sk)                  # client: (batch, *output_shape)
    compiled.simulate(x)                              # the same plan in plaintext
    compiled.save(dir); hemlp.load(dir)              # the server artefact (with the weights)
    compiled.save(dir, client=True)                   # the client artefact: plan, parameters, ranges, no weights

Options: calibration (representative inputs (n, *input_shape), >= 1000 to certify; default the example input)
and target_agreement (0.99): every ReLU/SiLU/GELU/Sigmoid/Tanh gets the cheapest polynomial (degree 2^k - 1,
minimax or Chebyshev, calibrated range plus a guard band) with which the plan agrees with the model's top-1 on
that fraction of the calibration samples (hemlp.compiler.calibration); activation_degree (int, or dict by
activation kind / node name; None: chosen for the target) and activation_range ((lo, hi), or dict by node name;
default calibrated) override the choice; activation_margin (0.05 of the calibrated width), activation_guard (0.5:
the low-weight guard band on each side, in widths), activation_method ("auto": the better of "minimax" and
"chebyshev"; or "minimax" | "chebyshev" | "lsq"), weight_bits (20), allow_insecure (False),
preset (None: smallest fitting), workers (4: processor count of the reported FHE4DMM grids),
layout ("auto" | "batch" | "packed" | "mlwe"; default "auto"), encrypted_weights (False), dft_depth (None:
the planner's choice; layout (A′): levels of each CoeffToSlot / SlotToCoeff), bootstrap (False; True: a
bootstrapping preset, N16-boot, or test-N12-boot with allow_insecure=True, or the preset option, with the
bootstraps placed by hemlp.planner.bootstrap_placement: layout (A), hemlp.layouts.batch_bootstrap; with
layout="packed" layout (P), one sample by default: hemlp.layouts.packed_bootstrap; with layout="mlwe" layout (A′)
refreshing its activation segments: hemlp.layouts.mlwe_bootstrap; with layout="auto" and a batch_size the cheapest
of the three, bootstraps included, whose keys fit: hemlp.layouts.boot_choice; with
encrypted_weights=True layout (C): hemlp.layouts.blocked_bootstrap), mambo and
batch_bootstrap (with bootstrap=True; "auto": the planner's estimates decide, hemlp.planner.bootstrap_lowering):
mambo=True runs every dense layer whose output is refreshed as MaMBo (the PCMM fused into the S2C-first batched
bootstrap), False never;
batch_bootstrap=True refreshes in batches of the measured k that is cheapest and fits memory, an int k >= 2 in
batches of k, False one bootstrap (pair) per call. A forced choice that cannot run is a typed error.
final_rescale (True; False: layout (A) runs a final linear layer at level 0 without its rescale, so the whole chain
sits one level lower, the client encrypts one prime less and every PCMM runs one GEMM per part and digit less; that
layer's weights are quantised to the bits that keep the output under q_0, at most weight_bits:
hemlp.compiler.params.unrescaled_weight_bits).
server_memory ("auto": this machine's physical memory less a tenth, at least 1 GiB; a number of bytes; None: no
limit): every plan's estimated server memory (hemlp.planner.resources, bootstrapping keys included) must fit it;
layout="auto" skips the layouts that do not, and a plan that cannot fit raises ResourceError naming the fixes, before
any key or ciphertext exists; layout (P) sizes its diagonal cache to what the run leaves of it. import_keys (True; False: the server process makes its own
keys, so the keys' import, often the larger peak, is not counted).
nodes (1; an int, or "auto": the connected Ray cluster's live nodes) and node_memory (None: server_memory's budget;
bytes; "auto": the smallest node of the connected Ray cluster, else this machine): a batch split over several nodes
(hemlp.planner.resources.estimate_nodes: layout (A) by ciphertext ranges and FHE4DMM row splits, every node holding
the keys it needs); the plan prints each node's peak and the split, and when nodes > 1 or node_memory is given, that
peak replaces the whole plan's check (layout="auto" compares the layouts by it: a layout that fits only when split
is taken over one that fits no node): a plan that cannot fit a node raises ResourceError naming the fixes (the
fewest nodes that fit, a smaller batch, streaming), before any key or ciphertext exists.

Layouts (hemlp.layouts, docs/layouts.md): "batch" = (A), one feature per ciphertext and the batch along the
slots (every linear layer a PCMM-as-GEMM, no rotations: best for large batches); "packed" = (P), the features of
a few samples packed in the slots of one ciphertext (linear layers as BSGS diagonal products with rotations: best
for one or a few samples); "mlwe" = (A′), the batch along the coefficients with k = N/B' features interleaved per
ciphertext, every linear layer an MLWE PCMM and every activation between CoeffToSlot and SlotToCoeff (small
batches, √N <= B' < N). "auto" compares the planner's cost estimates of the possible layouts for the given
batch_size (hemlp.planner.layouts) and takes the cheapest one.
encrypted_weights=True hides the model from the server too: layout (C), every linear layer a ciphertext x
ciphertext block matmul planned by FHE4DMM's chain DP; the client sends ``compiled.encrypt_weights(sk)`` once and
the server calls run(ct, eval_keys, weights=...).

The compiled model is hemlp.compiled_model (CompiledModel, Plan, load), its directory format hemlp.artefact; this
module is the compile pipeline and keeps those public names.
"""
from __future__ import annotations

import math
import time
import warnings
from pathlib import Path

import numpy as np

from hemlp import layouts
from hemlp.artefact import save  # noqa: F401  (hemlp.model.save: the directory format, re-exported)
from hemlp.bootstrap.params import preset_levels_consumed
from hemlp.compile_options import CompileOptions
from hemlp.compiled_model import CompiledModel, Plan, load  # noqa: F401  (re-exported: hemlp.model's public names)
from hemlp.compiler.calibration import (UNCAPPED_DEPTH, ReferenceSummary, as_calibration, choose_activations,
                                       needs_ranges, top1)
from hemlp.compiler.fold import fold
from hemlp.compiler.lower import lower
from hemlp.compiler.params import candidates as preset_candidates
from hemlp.compiler.params import (choose_preset, depth_of, final_pcmm, output_reserve, plan_levels, unrescaled,
                                   unrescaled_weight_bits)
from hemlp.errors import ParameterError, ShapeError, UnsupportedError
from hemlp.fhe import Params
from hemlp.layouts.base import CT_PRODUCT_OPS
from hemlp.layouts.batch_bootstrap import boot_preset
from hemlp.layouts.boot_choice import boot_key_bytes, plan_with_bootstraps
from hemlp.layouts.packed import check_widest as check_packed_widest
from hemlp.layouts.packed_split import block_count
from hemlp.planner import grid_4d, obl, obl_bruteforce
from hemlp.planner.bootstrap_lowering import check_modes
from hemlp.planner.resources import check_nodes, estimate_nodes, estimate_resources
from hemlp.runtime.local import simulate_columns
from hemlp.runtime.noise_analysis import plan_noise_bound, recorder
from hemlp.step_ops import StepOp

__all__ = ["compile", "load", "CompiledModel", "Plan", "OPTIONS"]

#: every compile option and its default (hemlp.compile_options.CompileOptions documents each)
OPTIONS = CompileOptions.defaults()
#: the options a compiled model keeps (the others only steer compilation)
STORED_OPTIONS = ("weight_bits", "activation_method", "activation_margin", "workers", "dft_depth",
                  "diagonal_cache_bytes")


def _frontend(model, x):
    """The IR graph of a torch module or an ONNX model (the frontends are imported only when used: torch and onnx
    are optional dependencies)."""
    if isinstance(model, (str, Path)):
        if not str(model).endswith(".onnx") and not Path(model).is_file():
            raise ParameterError(f"{model!r} is not an ONNX file; pass a torch.nn.Module or a path to a .onnx file")
        from hemlp.compiler.onnx_frontend import from_onnx

        return from_onnx(str(model), x)
    try:
        import onnx

        if isinstance(model, onnx.ModelProto):
            from hemlp.compiler.onnx_frontend import from_onnx

            return from_onnx(model, x)
    except ImportError:
        pass
    try:
        import torch

        if isinstance(model, torch.nn.Module):
            from hemlp.compiler.torch_frontend import from_torch

            return from_torch(model, x)
    except ImportError:
        pass
    raise TypeError(f"hemlp.compile takes a torch.nn.Module or an ONNX file path, got {type(model).__name__}")


def node_options(nodes, node_memory, server_budget: int | None) -> tuple[int, int | None]:
    """(node count, each node's memory budget) of compile's nodes= / node_memory= options: 'auto' reads the Ray
    cluster this process is connected to (its live nodes; their smallest 'memory' resource), else 1 node / this
    machine's usable memory (layouts.usable_memory_bytes); node_memory=None is server_memory's budget."""
    cluster = None
    if nodes == "auto" or node_memory == "auto":
        from hemlp.runtime.ray.cluster import connected_nodes   # reads Ray only when the process already uses it

        cluster = connected_nodes()
    if nodes == "auto":
        nodes = len(cluster) if cluster else 1
    if node_memory is None:
        return int(nodes), server_budget
    if node_memory == "auto":
        mems = [n["memory"] for n in cluster or [] if n["memory"] > 0]
        return int(nodes), min(mems) if mems else layouts.usable_memory_bytes()
    return int(nodes), int(node_memory)


def _fhe4dmm_matmuls(steps, slots: int, chunks: int, workers: int) -> list[dict]:
    """Every PCMM as an FHE4DMM product with its Optimal Block Layout and 4D grid (for the distributed runtime)."""
    matmuls = []
    for s in steps:
        if s.op != StepOp.PCMM:
            continue
        P = 1 if s.index is None else s.index.shape[1]
        m, k, n_ = s.U.shape[0], s.U.shape[1], P * chunks * slots
        f = obl if math.isqrt(slots) ** 2 == slots else obl_bruteforce
        lay = f(m, n_, k, slots)
        grid = grid_4d(lay, int(workers))
        matmuls.append(dict(name=s.out, m=m, k=k, n=n_, obl=list(lay.blocks),
                            grid=f"{grid.p_m}x{grid.p_n}x{grid.p_k}"))
    return matmuls


def compile(model_or_onnx_path, example_input, batch_size: int | None = None, options: CompileOptions | None = None,
            **overrides) -> CompiledModel:
    """Compile a model for encrypted inference (see the module docstring): ``options`` a CompileOptions, keyword
    overrides on top of it (or alone)."""
    if options is not None and not isinstance(options, CompileOptions):
        raise TypeError(f"options must be a hemlp.CompileOptions, got {type(options).__name__}; pass single options "
                        "as keywords")
    t_compile = time.perf_counter()
    opts = (options or CompileOptions()).merged(**overrides).validate().as_dict()
    options = (options.named() if options is not None else set()) | set(overrides)   # the options the caller set
    budget = layouts.memory_budget(opts["server_memory"])      # checked against every plan before any key exists
    nodes, node_budget = node_options(opts["nodes"], opts["node_memory"], budget)
    per_node = nodes > 1 or opts["node_memory"] is not None
    # split over nodes, layouts compare by each node's peak and that peak replaces the whole plan's check
    limit = layouts.MemoryLimit(node_budget, nodes) if per_node else layouts.MemoryLimit(budget)
    cands = layouts.candidates(opts["layout"], bool(opts["encrypted_weights"]), batch_size is not None)
    try:
        import torch   # optional: tensors are accepted when torch is installed

        if isinstance(example_input, torch.Tensor):
            example_input = example_input.detach().cpu().numpy()
    except ImportError:
        pass
    x = np.asarray(example_input, dtype=np.float64)
    if x.ndim < 2:
        raise ShapeError(f"example_input must be a batch (batch, *input_shape), got shape {x.shape}")
    # lint after the frontend and after folding: a broken rewrite is a ShapeError here, not wrong numbers later
    g = fold(_frontend(model_or_onnx_path, x).lint()).lint()
    # activations: ranges from the calibration set (default: the example), degrees for the agreement target
    calib = x if opts["calibration"] is None else as_calibration(opts["calibration"], g.input.shape)
    allow = bool(opts["allow_insecure"])
    if [c.name for c in cands] == ["packed"]:
        # before the activation search (minutes for a deep net): an input or output wider than the slots of the
        # named preset, or of the largest ring when none is named (wider values inside are held as channel blocks)
        named = [p["slots"] for p in Params.presets() if p["name"] == opts["preset"]]
        slots = named[0] if named else max(p["slots"] for p in Params.presets())
        check_packed_widest(max(n.features for n in g if n.op in ("input", "output")), slots)
    check_modes(opts["mambo"], opts["batch_bootstrap"])
    forced = opts["mambo"] not in ("auto", False) or opts["batch_bootstrap"] not in ("auto", False)
    if not opts["bootstrap"] and forced:
        raise ParameterError(f"mambo={opts['mambo']!r} / batch_bootstrap={opts['batch_bootstrap']!r} choose how "
                             "bootstraps run: they need bootstrap=True")
    if opts["bootstrap"]:
        # a bootstrapping preset is checked first; the chain's depth is not capped (the planner places bootstraps
        # and names any single layer deeper than what a bootstrap leaves)
        boot_name = boot_preset(opts["preset"], allow)["name"]
        max_depth = UNCAPPED_DEPTH
        max_step_depth = Params.preset(boot_name).max_level - preset_levels_consumed(boot_name)
    else:
        max_depth = (choose_preset(0, allow, opts["preset"]) if opts["preset"] else
                     max(preset_candidates(allow), key=lambda p: p["depth"]))["depth"]
        max_step_depth = None
    # one exact pass over the calibration set: activation ranges and the model's own outputs
    reference = ReferenceSummary(g, calib) if needs_ranges(g) else None
    fit_report = choose_activations(g, calib, opts, max_depth, "target_agreement" in options,
                                    opts["calibration"] is not None, reference, max_step_depth)
    steps = lower(g)
    # the simulated plan's agreement on the calibration set; its output magnitude (checked against q_0 below)
    # every value's largest |value| per row: the bootstrap planners' peaks and the noise analysis' magnitudes
    row_peaks: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y_sim = simulate_columns(steps, calib.reshape(calib.shape[0], -1).T, int(opts["weight_bits"]),
                                 on_value=recorder(row_peaks))
    max_out = float(np.max(np.abs(y_sim))) if y_sim.size else 0.0
    if fit_report:
        fit_report["agreement_simulate"] = float(np.mean(top1(y_sim.T) == top1(reference.output)))
    if opts["bootstrap"]:      # every layout with bootstraps placed by the planner (hemlp.layouts.boot_choice)
        lay, estimates, why = plan_with_bootstraps(steps, calib, opts, batch_size, limit, row_peaks)
        steps, bs, allow = lay.steps, lay.batch_size, bool(opts["allow_insecure"])
    else:
        last = None
        if not opts["final_rescale"]:
            cands = layouts.unrescaled_candidates(opts["layout"], bool(opts["encrypted_weights"]))
            last = final_pcmm(steps)
            if last is None:
                raise UnsupportedError("final_rescale=False needs a model whose output is a linear layer")
            last.info.rescale = False
        pcmm_levels = max(c.pcmm_levels for c in cands)
        depth = depth_of(steps, pcmm_levels)
        info = choose_preset(depth, allow, opts["preset"])
        params = Params.preset(info["name"])
        q0_bits = int(math.log2(params.q[0]))
        # an unrescaled final layer keeps its output under q_0 through its weight bits: no reserve level
        reserve = 0 if last is not None else output_reserve(max_out, params.log_scale, q0_bits)
        if last is not None:
            last.info.weight_bits = unrescaled_weight_bits(last, max_out, params.log_scale, q0_bits,
                                                              int(opts["weight_bits"]))
        if reserve:
            info = choose_preset(depth, allow, opts["preset"], reserve=reserve)
            params = Params.preset(info["name"])
        top = depth + reserve
        plan_levels(steps, top, pcmm_levels)
        bs = int(batch_size) if batch_size is not None else params.N // 2
        if bs < 1:
            raise ShapeError(f"batch_size must be >= 1, got {batch_size}")
        lay, estimates, why = layouts.choose(cands, layouts.Planned(steps, params, info, depth, reserve, top, bs, opts,
                                                               max_out), limit)
        steps = lay.steps          # the chosen layout's (layout (P): values wider than a ciphertext as channel blocks)
    info, params, depth, top, reserve = lay.preset_info, lay.params, lay.depth, lay.top_level, lay.reserve
    opts = dict(lay.options)
    slots = params.N // 2
    chunks = -(-bs // slots)
    by_node = {}
    for s in steps:
        by_node.setdefault(s.node, []).append(s)
    for n in g.nodes:
        ss = by_node.get(n.name, [])
        if ss:
            n.level_in, n.level_out = ss[0].level_in, ss[-1].level_out
        notes = []
        for s in ss:
            if s.op == StepOp.PCMM and s.info.folded_affine:
                notes.append(f"(input map of {s.info.folded_affine} folded in)")
            if s.op == StepOp.AFFINE and s.info.note:
                notes.append(s.info.note)
            if unrescaled(s):
                notes.append(f"(not rescaled: weights {s.info.weight_bits} bits keep the output under q_0)")
        blocks = block_count(n.name, ss)
        if blocks > 1:
            notes.append(f"(held as {blocks} ciphertexts of whole channels: wider than one)")
        n.notes += list(dict.fromkeys(notes))      # a node's steps on its channel blocks note it once
    matmuls = _fhe4dmm_matmuls(steps, slots, chunks, opts["workers"]) if lay.fhe4dmm_grids else []
    plan_info = dict(model=g.name, preset=info["name"], N=params.N, slots=slots, security=info["security"],
                     depth=depth, max_level=params.max_level, top_level=top, reserve=reserve, batch_size=bs,
                     chunks=chunks, waste=1.0 - bs / (chunks * slots), weight_bits=int(opts["weight_bits"]),
                     needs_relin=any(s.op in CT_PRODUCT_OPS for s in steps), workers=int(opts["workers"]),
                     matmuls=matmuls, layout=lay.name, layout_estimates=estimates, layout_reason=why)
    if fit_report:
        plan_info["activation_fit"] = fit_report
    # the calibration inputs' range: what a client artefact (no weights) checks its inputs against
    plan_info["input_range"] = [float(np.min(calib)), float(np.max(calib))]
    plan_info.update(lay.plan_info())
    boot = boot_key_bytes(lay)
    lay.fit_memory(node_budget if per_node else budget, boot)    # what it keeps, sized to the budget it is held to
    resources = estimate_resources(lay, boot)     # the server's peak with the bootstrapping keys, as checked
    plan_info["resources"] = resources.to_json()
    if per_node:
        # each node's peak (keys once per node), refused here, before any key or ciphertext exists
        est = estimate_nodes(lay, nodes, boot, resources, node_budget)
        check_nodes(lay, est, node_budget, boot, resources)
        plan_info["nodes"] = est.to_json()
    # the decryption noise's sigma: the plan's own bound on its output error (the client artefact carries it)
    noise = plan_noise_bound(lay, calib, row_peaks)
    plan_info["fresh_bound_log2"] = math.log2(params.native.fresh_noise_bound)
    plan_info["log_scale"] = float(params.log_scale)
    if noise is not None:
        plan_info["noise_bound_log2"] = noise.log2_t
        plan_info["noise_bound"] = noise.to_json()
    plan_info["compile_seconds"] = time.perf_counter() - t_compile
    plan = Plan(g, steps, plan_info)
    # the layout's options: the compile options plus what fit_memory sized (layout (P)'s diagonal cache)
    store_opts = {k: (v if not isinstance(v, tuple) else list(v)) for k, v in lay.options.items()
                  if k in STORED_OPTIONS}
    lay.options = store_opts
    cm = CompiledModel(plan, steps, info["name"], params, g.input.shape, g.output.shape, bs, top, store_opts, allow,
                       layout=lay.name, planned_layout=lay)
    cm.reference = lambda xx: g.reference(np.asarray(xx, dtype=np.float64))[g.output.name]
    return cm
