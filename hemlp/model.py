"""hemlp.model: a torch.nn.Module or an ONNX file -> a planned chain of encrypted layers (``compile``), the
``CompiledModel`` that runs it, and its directory format (``CompiledModel.save`` / ``load``).

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
layout="packed" layout (P), one sample by default: hemlp.layouts.packed_bootstrap; with layout="auto" and a
batch_size the cheaper of the two, bootstraps included, whose keys fit: hemlp.layouts.boot_choice; with
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
server_memory ("auto": this machine's physical memory; a number of bytes; None: no limit): every plan's estimated
server memory (hemlp.planner.resources, bootstrapping keys included) must fit it; layout="auto" skips the layouts that
do not, and a plan that cannot fit raises ResourceError naming the fixes, before any key or ciphertext exists.
nodes (1; an int, or "auto": the connected Ray cluster's live nodes) and node_memory (None: server_memory's budget;
bytes; "auto": the smallest node of the connected Ray cluster, else this machine): a batch split over several nodes
(hemlp.planner.resources.estimate_nodes: layout (A) by ciphertext ranges and FHE4DMM row splits, every node holding
the keys it needs); the plan prints each node's peak and the split, and when nodes > 1 or node_memory is given, that
peak replaces the whole plan's check: a plan that cannot fit a node raises ResourceError naming the fixes (the
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

CompiledModel checks what every layout shares (model ids, key pairs, key levels, shapes) and delegates the rest
to its Layout: adding a layout does not touch this module.
"""
from __future__ import annotations

import hashlib
import json
import math
import time
import warnings
from pathlib import Path

import numpy as np

from hemlp import layouts
from hemlp.fhe import Ciphertext, Context, FloodSpec, Params, PublicKey, SecretKey
from hemlp.fhe import load as load_ckks_object
from hemlp.compiler.calibration import (UNCAPPED_DEPTH, ReferenceSummary, as_calibration, choose_activations,
                                       needs_ranges, top1)
from hemlp.compiler.fold import fold
from hemlp.compiler.ir import format_graph
from hemlp.compiler.lower import Step, lower
from hemlp.compiler.params import candidates as preset_candidates
from hemlp.compiler.params import (choose_preset, depth_of, final_pcmm, output_reserve, plan_levels, unrescaled,
                                   unrescaled_weight_bits)
from hemlp.errors import (ClientArtefactError, EncodingError, HemlpError, InputRangeError,
                          InsecureParametersError, KeyMismatchError, LevelError, MissingKeyError,
                          ParameterError, SerializationError, ShapeError, UnsupportedError, warn_always)
from hemlp.fhe.files import read_file, write_atomic
from hemlp.layouts.base import CT_PRODUCT_OPS
from hemlp.bootstrap.params import preset_levels_consumed
from hemlp.layouts.batch_bootstrap import boot_preset
from hemlp.layouts.boot_choice import boot_key_bytes, plan_with_bootstraps
from hemlp.planner import grid_4d, obl, obl_bruteforce
from hemlp.planner.bootstrap_lowering import check_modes
from hemlp.compile_options import CompileOptions
from hemlp.run_options import RunOptions
from hemlp.planner.resources import NodeResources, Resources, check_nodes, estimate_nodes, estimate_resources
from hemlp.progress import StepTimings, progress
from hemlp.runtime.artifacts import FORMAT_VERSION, EncryptedBatch, EvalKeys
from hemlp.runtime.local import range_report
from hemlp.runtime.local import simulate as simulate_rows
from hemlp.runtime.noise_analysis import STD_FACTOR, plan_noise_bound, row_magnitudes
from hemlp.threads import set_num_threads

__all__ = ["compile", "load", "CompiledModel", "Plan", "OPTIONS"]

#: compile()'s options and their defaults (see the module docstring)
#: every compile option and its default (hemlp.compile_options.CompileOptions documents each)
OPTIONS = CompileOptions.defaults()
#: the options a compiled model keeps (the others only steer compilation)
STORED_OPTIONS = ("weight_bits", "activation_method", "activation_margin", "workers", "dft_depth")


class Plan:
    """The planned chain: IR with levels/layouts, the lowered steps and the FHE4DMM reports."""

    def __init__(self, graph, steps, info: dict, text: str | None = None):
        self.graph, self.steps, self.info, self.text = graph, steps, info, text

    @property
    def matmuls(self) -> list[dict]:
        """Every PCMM as an (m x k) . (k x n) product: name, shape and its OBL / grid (FHE4DMM planner)."""
        return self.info.get("matmuls", [])

    def obl(self, name: str):
        """FHE4DMM Optimal Block Layout of one matmul for the context's slot count."""
        mm = next(m for m in self.matmuls if m["name"] == name)
        S_o = self.info["slots"]
        f = obl if math.isqrt(S_o) ** 2 == S_o else obl_bruteforce
        return f(mm["m"], mm["n"], mm["k"], S_o)

    def grid(self, name: str, workers: int):
        """FHE4DMM 4D processor grid for one matmul and a worker count (used by the Ray runtime)."""
        return grid_4d(self.obl(name), int(workers))

    def __str__(self):
        if self.text is not None:
            return self.text
        i = self.info
        lay = layouts.get(i.get("layout", "batch"))
        boots = len((i.get("bootstrap") or {}).get("placements") or [])
        depth = (f"depth {i['depth']} on {i['max_level']} levels refreshed by {boots} bootstrap point(s)" if boots
                 else f"depth {i['depth']} of {i['max_level']} levels")
        head = [f"hemlp plan for {i['model']}: preset {i['preset']} (N=2^{int(math.log2(i['N']))}, {i['slots']} slots, "
                f"{i['security']}), {depth}, input encrypted at L{i['top_level']}"] + lay.plan_header(i)
        fit = i.get("activation_fit")
        if fit:
            head.append(f"activations {'chosen for' if fit['searched'] else 'fixed by activation_degree; target'} "
                        f"{fit['target']:.2%} top-1 agreement: simulated plan agrees with the model on "
                        f"{fit['agreement_simulate']:.2%} of {fit['samples']} calibration samples"
                        + (f" (90 % lower bound {fit['agreement_bound']:.2%})" if fit.get("agreement_bound") else "")
                        + ("" if fit["samples"] >= 1000 else " (not certified: < 1000 samples)"))
        if i.get("layout_estimates"):
            head.append("planner estimates (s per batch): " + ", ".join(
                f"{k} {v:.3g}" if isinstance(v, (int, float)) else f"{k} {v}"
                for k, v in i["layout_estimates"].items()) + f" -> layout {i['layout']}"
                + (f" ({i['layout_reason']})" if i.get("layout_reason") else ""))
        if i.get("resources"):
            head += self.resources.lines(i["batch_size"])
        if i.get("nodes"):
            head += NodeResources.from_json(i["nodes"]).lines()
        if (line := noise_line(i)) is not None:
            head.append(line)
        if i.get("compile_seconds") is not None:
            search = (f" (activation search {fit['search_seconds']:.1f} s, {fit['trials']} choices tried)"
                      if fit and fit.get("search_seconds") is not None and fit.get("searched") else "")
            head.append(f"compiled in {i['compile_seconds']:.1f} s{search}")
        self.text = lay.finish_plan_text(format_graph(self.graph, "\n".join(head)), i)
        return self.text

    @property
    def resources(self) -> Resources | None:
        """Evaluation-key bytes per kind, upload bytes per input batch, server peak memory, seconds of keygen /
        encrypt / run: estimated at compile time, before any key exists (hemlp.planner.resources)."""
        r = self.info.get("resources")
        return None if r is None else Resources.from_json(r)

    __repr__ = __str__


class CompiledModel:
    def __init__(self, plan: Plan, steps, preset: str, params, input_shape, output_shape, batch_size: int,
                 top_level: int, options: dict, allow_insecure: bool, graph=None, layout: str = "batch",
                 planned_layout: layouts.Layout | None = None):
        cls = layouts.get(layout)
        self.layout = layout
        self.plan, self.steps, self.preset, self.params = plan, steps, preset, params
        self.input_shape, self.output_shape = tuple(input_shape), tuple(output_shape)
        self.batch_size, self.top_level, self.options = int(batch_size), int(top_level), dict(options)
        self.allow_insecure = bool(allow_insecure)
        self.weight_bits = int(self.options.get("weight_bits", 20))
        #: the Layout this model delegates to (hemlp.layouts); its program is rebuilt from the steps when loaded
        self.layout_impl = planned_layout or cls(self.steps, params, self.batch_size, self.top_level, self.options)
        self._ctx = None
        self.model_id = self._digest()
        #: True for a client artefact (loaded from save(dir, client=True)): no weights, so no run / simulate
        self.client_only = False

    def _digest(self) -> str:
        h = hashlib.sha256()
        h.update(json.dumps([self.preset, list(self.input_shape), list(self.output_shape), self.top_level,
                             self.weight_bits] + self.layout_impl.id_fields(), sort_keys=True).encode())
        h.update(self.params.hash.encode())
        for s in self.steps:
            h.update(json.dumps([s.op, s.out, s.inputs, s.rows, None if s.act is None else s.act.to_json(),
                                 s.level_out], sort_keys=True, default=float).encode())
            for k, v in sorted(s.arrays().items()):
                h.update(k.encode())
                h.update(np.ascontiguousarray(v).tobytes())
        return h.hexdigest()[:16]

    # ---- context / keys
    @property
    def context(self) -> Context:
        if self._ctx is None:
            self._ctx = Context(self.params, allow_insecure=self.allow_insecure)
            # standard-mode decryption noise: sigma = the plan's error bound, never anything a ciphertext carries
            self._ctx.noise_bound_log2 = self.noise_bound_log2
        return self._ctx

    @property
    def noise_bound_log2(self) -> float | None:
        """log2 of the plan's bound t on the output ciphertexts' error (coefficient units): compile's noise analysis
        (hemlp.runtime.noise_analysis), or estimate_noise's measurement where larger; saved with the plan (both
        artefacts). None (a layout whose error is not analysed): decryption uses the fresh-encryption bound."""
        v = self.plan.info.get("noise_bound_log2")
        return None if v is None else float(v)

    def estimate_noise(self, inputs, runs: int = 16, margin_bits: float = 1.0, seed: int = 0) -> float:
        """A measured check of the plan's output error bound: returns the log2 t decryption uses from now on, the
        larger of this measurement and compile's noise analysis (hemlp.runtime.noise_analysis; a RuntimeWarning when
        the measurement exceeds it), stored with the plan so that decrypt() adds noise of sigma = t (standard mode)
        and FloodSpec(bound_log2=t) floods with it (docs/design/decryption.md §3). Measured by runs of the exact
        compiled circuit under throwaway key pairs (never the client's keys).

        Inputs: the given samples plus worst cases of their domain (every feature at +max, at -max, alternating signs,
        then random sign patterns at +-max and, every third run, uniform draws), max = the largest |value| of `inputs`.
        Random signs at +-max gave the largest errors measured (about 1 bit above the given samples and uniform draws,
        with a spread of about 1 bit between draws), so most runs are spent on them. Each run encrypts the same batch
        under two independent key pairs and runs it twice: the two raw decryptions (noise "none", coefficient domain)
        hold the same message, so their difference is e1 - e2 exactly; t = 2^margin_bits * the largest |e1 - e2| over
        all runs and output ciphertexts (|e1 - e2| is about sqrt(2) |e| for independent errors, so the margin starts
        above the observed error). A measurement, not a proof: LMSS flooding is provable only if t truly bounds the
        error, which is why the margin is there; bootstrapped plans need their failure probability in t too. Needs the
        weights (a server artefact, or the model owner's copy)."""
        self._need_weights("estimate_noise()")
        if runs < 1 or margin_bits < 0:
            raise ParameterError("estimate_noise: runs >= 1 and margin_bits >= 0")
        x = self._check_x(inputs)
        rng = np.random.default_rng(seed)
        m = max(float(np.max(np.abs(x))), 1e-12)
        cap = min(self.capacity, self.batch_size)
        shape = (cap,) + self.input_shape
        worst = [x[:cap], np.full(shape, m), np.full(shape, -m),
                 m * np.where(np.indices(shape).sum(axis=0) % 2 == 0, 1.0, -1.0)]
        ctx = self.context
        q0 = int(self.params.q[0])
        peak = 0
        for r in range(runs):
            if r < len(worst):
                xb = worst[r]
            elif (r - len(worst)) % 3 == 2:
                xb = rng.uniform(-m, m, shape)
            else:
                xb = np.where(rng.random(shape) < 0.5, m, -m)
            raw = []
            for _ in range(2):  # two independent throwaway key pairs, the same message
                sk, ek = self.keygen()
                out = self.run(self.encrypt(xb, sk), ek)
                raw.append([self._raw_coefficients(c, sk, q0) for c in out.ctm.cts])
            for a, b in zip(*raw):
                d = (a - b) % q0
                d = np.where(d > q0 // 2, d - q0, d)
                peak = max(peak, int(np.max(np.abs(d))))
        measured = math.log2(max(peak, 1)) + float(margin_bits)
        nb = dict(self.plan.info.get("noise_bound") or {})
        analysed = nb.get("log2_t")           # compile's analysis (None: this layout has none); never overwritten
        if analysed is not None and measured > analysed:
            warn_always(f"estimate_noise: the measured error bound 2^{measured:.2f} exceeds the plan's noise analysis "
                        f"(2^{analysed:.2f}); decryption uses the measured one", RuntimeWarning, stacklevel=2)
        t_log2 = measured if analysed is None else max(measured, analysed)
        self.plan.info["noise_bound"] = dict(nb, source="measured" if t_log2 == measured else "analysis",
                                             analysis_log2_t=analysed, measured_log2_t=measured, runs=int(runs))
        self.plan.info["noise_bound_log2"] = t_log2
        self.plan.text = None          # the printed plan names the bound
        ctx.noise_bound_log2 = t_log2
        return t_log2

    def _raw_coefficients(self, ct, sk, q0: int) -> np.ndarray:
        """The exact decryption c0 + c1 s (+ c2 s^2) of one output ciphertext, its first limb in coefficient form."""
        if not isinstance(ct, Ciphertext):
            raise UnsupportedError(f"estimate_noise measures RLWE ciphertexts; this layout's outputs are "
                                   f"{type(ct).__name__}")
        pt = self.context.native.decrypt(ct.native, sk.native, 0, 0)
        limb0 = np.asarray(pt.poly()[0], dtype=np.uint64)
        return self.context.intt(limb0, 0).astype(np.int64) % q0

    @property
    def program(self):
        """The layout's program (PackedProgram, MlweProgram, BlockedProgram; None in layout (A))."""
        return self.layout_impl.program

    def __getattr__(self, name):
        # compiled.packed / .mlwe / .blocked: the program of that layout, None for the others
        if name in layouts.LAYOUTS and name != "batch":
            return self.program if name == self.__dict__.get("layout") else None
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def needs_relin(self) -> bool:
        return self.layout_impl.needs_relin

    @property
    def key_levels(self) -> dict:
        """{"relin": l, "rotation": l, ...}: the highest ciphertext level at which the plan relinearises /
        rotates (None: never). keygen() generates each key for exactly that level, so it holds only
        q_0..q_l and P instead of the whole chain. Layout (A′) adds "conjugation" and "modpack"."""
        return self.layout_impl.key_levels()

    def keygen(self, verbose: bool | None = None):
        """(secret_key, eval_keys): the secret key stays on the client; eval_keys go to the server.
        Each key is generated for the highest level the plan uses it at (key_levels). verbose: progress on stderr
        (None: only on a terminal; hemlp.progress)."""
        with progress("keygen", verbose=verbose, unit="key") as bar:
            sk, _ = self.context.keygen()
            keys = self.layout_impl.keygen(self.context, sk)
            bar.update(sum(k is not None for k in keys))
        return sk, EvalKeys(self.model_id, *keys)

    def _check_key(self, key):
        if not isinstance(key, (SecretKey, PublicKey)):
            raise TypeError("encrypt needs the SecretKey from keygen() (or a PublicKey)")
        if key.param_hash != self.context.hash:
            raise KeyMismatchError("the key belongs to another parameter set than this compiled model; use the "
                                   "keys from this model's keygen()")

    def check_run(self, ct, eval_keys, weights=None, runtime: str = "local") -> None:
        """Every check run() makes before any work: the batch and the keys belong to this model and to one key pair,
        the batch is an input, the keys reach the levels the plan uses them at, and the layout's own checks. Raises
        the typed error run() would (a server refuses a request with it before queueing any work)."""
        if not isinstance(ct, EncryptedBatch) or not isinstance(eval_keys, EvalKeys):
            raise TypeError("run(ct, eval_keys) takes an EncryptedBatch and the EvalKeys from keygen()")
        if eval_keys.model_id != self.model_id:
            raise KeyMismatchError(f"the evaluation keys belong to compiled model {eval_keys.model_id}, not "
                                   f"{self.model_id}; use this model's keygen()")
        if ct.model_id != self.model_id:
            raise KeyMismatchError(f"the ciphertext belongs to compiled model {ct.model_id}, not {self.model_id}")
        if ct.stage != "input":
            raise ShapeError("run() takes an encrypted input batch, not an output (an encrypted result): send an "
                             "encrypted input (compiled.encrypt(...))")
        if self.needs_relin:
            if eval_keys.relin_key is None:
                raise MissingKeyError("this model's activations need the relinearisation key; use keygen()'s eval_keys")
            if eval_keys.relin_key.key_id != ct.key_id:
                raise KeyMismatchError("the evaluation keys and the ciphertext come from different key pairs")
        self._check_key_levels(eval_keys)
        self.layout_impl.check_run(ct, eval_keys, weights, runtime, self.model_id)

    def _check_key_levels(self, eval_keys):
        """Keys built for lower levels than the plan uses them at fail here, before any work."""
        for what, key, need, fix in self.layout_impl.level_checks(self.context, eval_keys):
            if key is not None and need is not None and key.level is not None and key.level < need:
                raise LevelError(f"{what}: generated for levels <= {key.level}, but this model uses them at level "
                                 f"{need}; use keygen()'s eval_keys (or ctx.{fix}(sk, ..., level={need}))")

    # ---- client side
    def _check_x(self, x) -> np.ndarray:
        try:
            import torch   # optional: tensors are accepted when torch is installed

            if isinstance(x, torch.Tensor):
                x = x.detach().cpu().numpy()
        except ImportError:
            pass
        x = np.asarray(x)
        if x.dtype == object or not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
            raise EncodingError(f"inputs must be real numbers (float or int arrays), got dtype {x.dtype}")
        if x.ndim != len(self.input_shape) + 1 or tuple(x.shape[1:]) != self.input_shape:
            raise ShapeError(f"expected inputs of shape (batch, {', '.join(map(str, self.input_shape))}), got "
                             f"{tuple(x.shape)}")
        if x.shape[0] < 1:
            raise ShapeError("the batch is empty")
        x = x.astype(np.float64)
        if not np.all(np.isfinite(x)):
            raise EncodingError("inputs contain NaN or infinity")
        return x

    @property
    def capacity(self) -> int:
        return self.layout_impl.capacity

    def range_report(self, x) -> dict:
        """Per approximated activation, for inputs x (batch, *input_shape) run through the plan in plaintext:
        values outside the calibrated range, beyond the polynomial's domain (garbage), and those samples."""
        x = self._check_x(x)
        return range_report(self.steps, x.reshape(x.shape[0], -1).T, self.weight_bits)

    def check_ranges(self, x, on_range: str = "error") -> dict:
        """Client side, before encrypting (the client holds the plaintext): InputRangeError naming the first
        offending activation when inputs drive one beyond its polynomial's domain; on_range="warn" warns
        (RangeWarning) instead, "ignore" skips the check."""
        if on_range not in ("error", "warn", "ignore"):
            raise ValueError(f"on_range must be 'error', 'warn' or 'ignore', got {on_range!r}")
        if on_range == "ignore" or not any(s.act is not None and s.act.lo is not None for s in self.steps):
            return {}
        if self.client_only:
            # no weights here to run the plan: check the inputs against the calibration set's input range instead
            return self._check_input_range(x, on_range)
        rep = self.range_report(x)
        bad = [(k, v) for k, v in rep.items() if v["beyond_domain"]]
        if bad:
            node, v = bad[0]
            msg = (f"{len(v['bad_samples'])} of {len(x)} input sample(s) drive activation {node!r} ({v['kind']}, "
                   f"degree {v['degree']}) to [{v['seen'][0]:.4g}, {v['seen'][1]:.4g}], beyond its polynomial's domain "
                   f"[{v['domain'][0]:.4g}, {v['domain'][1]:.4g}] (calibrated range [{v['range'][0]:.4g}, "
                   f"{v['range'][1]:.4g}]): the decrypted outputs would be garbage"
                   + (f"; {len(bad) - 1} later activation(s) too" if len(bad) > 1 else "")
                   + ". Preprocess the inputs exactly like the calibration data (same scaling, e.g. /255), or "
                   "recompile with calibration data covering them; encrypt(..., on_range='warn') to go ahead anyway")
            if on_range == "error":
                raise InputRangeError(msg)
            from hemlp.compiler.activations import RangeWarning

            warn_always(msg, RangeWarning, stacklevel=3)
        return rep

    def _check_input_range(self, x, on_range: str) -> dict:
        """Client artefact: inputs outside the calibrated input range widened by half its width on each side (as far
        as a client without the weights can tell, where activations leave their domains) are refused."""
        rng = self.plan.info.get("input_range")
        if rng is None:
            return {}
        lo, hi = float(rng[0]), float(rng[1])
        pad = 0.5 * max(hi - lo, 1e-12)
        seen = (float(np.min(x)), float(np.max(x)))
        if seen[0] >= lo - pad and seen[1] <= hi + pad:
            return {}
        msg = (f"inputs span [{seen[0]:.4g}, {seen[1]:.4g}], far outside the calibration data's [{lo:.4g}, {hi:.4g}]: "
               "the activations would leave their polynomials' domains and the decrypted outputs would be garbage. "
               "Preprocess the inputs exactly like the calibration data (same scaling, e.g. /255); "
               "encrypt(..., on_range='warn') to go ahead anyway")
        if on_range == "error":
            raise InputRangeError(msg)
        from hemlp.compiler.activations import RangeWarning

        warn_always(msg, RangeWarning, stacklevel=3)
        return {"input": {"seen": seen, "range": (lo, hi)}}

    def encrypt(self, x, key, on_range: str = "error", verbose: bool | None = None):
        """Encrypt a batch (batch, *input_shape) under the secret key (or a public key). The inputs are first
        run through the plan in plaintext: InputRangeError if they leave an activation's calibrated domain
        (on_range="warn": a RangeWarning instead; "ignore": no check). verbose: progress on stderr (None: only on
        a terminal)."""
        x = self._check_x(x)
        self.check_ranges(x, on_range)
        if x.shape[0] > self.capacity:
            raise ShapeError(f"batch of {x.shape[0]} samples exceeds the planned capacity {self.capacity} "
                             f"(batch_size={self.batch_size}); recompile with a larger batch_size or split the batch")
        self._check_key(key)
        with progress(f"encrypt {x.shape[0]} samples", verbose=verbose, unit="batch") as bar:
            ctm = self.layout_impl.encrypt(self.context, x, key, self.top_level)
            bar.update(1)
        return EncryptedBatch(self.model_id, ctm, x.shape[0], self.input_shape, "input")

    def encrypt_weights(self, key):
        """Layout (C), client side: the model's weights and biases encrypted under the client's key
        (EncryptedWeights; save it and send it to the server once)."""
        if not self.layout_impl.encrypted_weights:
            raise ParameterError("encrypt_weights is for models compiled with encrypted_weights=True")
        self._need_weights("encrypt_weights()")
        self._check_key(key)
        return self.layout_impl.encrypt_weights(self.context, key, self.model_id)

    def decrypt(self, ct, sk, noise: str | None = None, flood: FloodSpec | None = None) -> np.ndarray:
        """The outputs (batch, *output_shape). noise (default the context's, "standard"): standard adds an integer
        Gaussian of sigma = the plan's error bound t (noise_bound_log2: compile's noise analysis; the
        fresh-encryption bound when the layout has none); "flood" floods with FloodSpec(bound_log2=t) by default
        (LMSS: s = 30, one query), or `flood`;
        "none" is for tests only."""
        if noise == "flood" and flood is None:
            if self.noise_bound_log2 is None:
                raise ParameterError(f"noise='flood' needs the plan's error bound, and layout {self.layout!r} has no "
                                     "noise analysis: run compiled.estimate_noise(inputs) on the model owner's side "
                                     "first, or pass flood=FloodSpec(bound_log2=...)")
            flood = FloodSpec(bound_log2=self.noise_bound_log2)
        with self.context.decrypt_settings(noise=noise, flood=flood):
            return self._decrypt(ct, sk)

    def _decrypt(self, ct, sk) -> np.ndarray:
        if not isinstance(ct, EncryptedBatch):
            raise TypeError("decrypt takes the EncryptedBatch returned by run()")
        if ct.model_id != self.model_id:
            raise KeyMismatchError(f"the ciphertext belongs to compiled model {ct.model_id}, not {self.model_id}")
        if ct.stage != "output":
            raise ShapeError("this is an encrypted input batch (from encrypt), not a result: run it first "
                             "(compiled.run(ct, eval_keys); CLI: hemlp run), then decrypt the run's output")
        if sk.key_id != ct.key_id:
            raise KeyMismatchError("the secret key does not match the ciphertext's key pair; decrypt with the "
                                   "secret key that encrypted the input")
        y = self.layout_impl.decrypt(self.context, ct.ctm, sk, ct.batch)
        return y.reshape((ct.batch,) + tuple(ct.shape))

    # ---- server side
    def _need_weights(self, what: str) -> None:
        if self.client_only:
            raise ClientArtefactError(f"{what} needs the model's weights, but this is a client artefact (saved with "
                                      "client=True: plan, parameters and ranges only); run it on the server, which "
                                      "loads the server artefact (compiled.save(dir) without client=True)")

    def prepare(self, verbose: bool | None = None) -> float:
        """Server side, once after loading: encode the layout's weight diagonals / plans (seconds spent).
        Layout (A) has nothing to prepare. run() prepares on first use otherwise. verbose: as in run()."""
        self._need_weights("prepare()")
        with progress("prepare", verbose=verbose) as bar:
            seconds = self.layout_impl.prepare(self.context)
            bar.update(1)
        return seconds

    def run(self, ct, eval_keys, options: RunOptions | None = None, *, weights=None, **overrides):
        """Encrypted inference (server side: ciphertexts and evaluation keys only).

        options: a hemlp.RunOptions (``RunOptions.help()`` lists every field with its default), keyword overrides
        on top of it (or alone, as before): runtime, threads, verbose and the Ray options (hemlp.RayOptions: address,
        num_workers, grid, cts_per_task, threads_per_task, stats). runtime="local": in this process (threads: native
        threads). runtime="ray": bit-identical to "local"; layout (A): every PCMM, elementwise step and bootstrap as
        Ray tasks (hemlp.runtime.ray); layouts (P), (A′), (C): the request's independent groups (sample groups,
        column blocks) one task each, the workers loading this model (docs/ray.md). weights: layout (C)'s
        EncryptedWeights (compiled.encrypt_weights on the client). The result's layer_seconds holds every step's
        wall-clock seconds."""
        self._need_weights("run()")
        opts = RunOptions.of(options, **overrides)
        self.check_run(ct, eval_keys, weights, opts.runtime)
        if opts.threads is not None:
            set_num_threads(opts.threads)
        ray = opts.ray if opts.runtime == "ray" else None
        with progress("run", total=self.layout_impl.progress_total(), verbose=opts.verbose, unit="layer") as bar:
            timings = StepTimings(bar)     # each step's seconds, advancing the bar as the layout records them
            # model=self: layouts (P), (A'), (C) ship this model to the Ray workers, which reload it with
            # CompiledModel.load (the runtime sits below the model and does not import it)
            out = self.layout_impl.run(self.context, ct, eval_keys, weights, timings, opts.runtime, ray, model=self)
        result = EncryptedBatch(self.model_id, out, ct.batch, self.output_shape, "output")
        result.layer_seconds = dict(timings)
        return result

    @staticmethod
    def load(path, allow_insecure: bool = False) -> "CompiledModel":
        """hemlp.load: a compiled-model directory (what the Ray workers load a shipped model with)."""
        return load(path, allow_insecure=allow_insecure)

    def simulate(self, x) -> np.ndarray:
        """The same plan in plaintext numpy (quantised weights, the same polynomials and layouts)."""
        self._need_weights("simulate()")
        x = self._check_x(x)
        #: per-activation counts of out-of-range inputs in this call (range_report)
        self.last_range_report = self.range_report(x) if any(
            s.act is not None and s.act.lo is not None for s in self.steps) else {}
        y = self.layout_impl.simulate(x.reshape(x.shape[0], -1))
        return y.reshape((x.shape[0],) + self.output_shape)

    # ---- files
    def save(self, path, client: bool = False) -> None:
        """The compiled-model directory (docs/formats.md): plan.json, weights.npz, params.bin; nothing secret.
        client=True: the client artefact, to send to the client instead: no weights (structure.npz holds each
        weight array's zero pattern, which the rotation-key set depends on, and the structural index arrays);
        hemlp.load gives a model that makes keys, encrypts and decrypts, and raises ClientArtefactError on run()."""
        save(self, path, client=client)

    def load_eval_keys(self, path):
        return EvalKeys.load(path, self)

    def load_encrypted(self, path):
        return EncryptedBatch.load(path, self)

    def load_secret_key(self, path):
        sk = load_ckks_object(path, self.context)
        if not isinstance(sk, SecretKey):
            raise KeyMismatchError(f"{path} does not hold a secret key")
        return sk

    def __repr__(self):
        return (f"CompiledModel({self.model_id}: {list(self.input_shape)} -> {list(self.output_shape)}, preset "
                f"{self.preset}, depth {self.plan.info.get('depth')}, batch {self.batch_size}, layout {self.layout})")


# ---------------------------------------------------------------------------------------
# compile
# ---------------------------------------------------------------------------------------

def noise_line(info: dict) -> str | None:
    """The plan's line on the standard decryption noise: its sigma, where it comes from and the bits per output
    value it leaves (decrypt_noise_args' estimate over the slots); None for plans saved before it existed."""
    fresh, scale = info.get("fresh_bound_log2"), info.get("log_scale")
    if fresh is None or scale is None:
        return None
    nb = info.get("noise_bound") or {}
    t = info.get("noise_bound_log2")
    left = lambda lt: scale - lt - 0.5 * math.log2(info["slots"])     # noqa: E731
    if t is None:
        return (f"decryption noise: sigma = 2^{fresh:.1f}, the fresh-encryption bound (this layout's error is not "
                "analysed: compiled.estimate_noise(inputs) measures a bound that follows the circuit), leaves ~"
                f"{left(fresh):.1f} bits per output value")
    margin = nb.get("margin_bits", 1)
    how = ("measured by estimate_noise" if nb.get("source") == "measured" else
           f"the plan's noise analysis: {STD_FACTOR:g} std of its worst output coefficient + {margin:g} bit")
    return (f"decryption noise: sigma = 2^{t:.1f} ({how}; fresh-encryption bound 2^{fresh:.1f}), leaves ~"
            f"{left(t):.1f} bits per output value")


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
    machine's memory; node_memory=None is server_memory's budget."""
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
        return int(nodes), min(mems) if mems else layouts.machine_memory_bytes()
    return int(nodes), int(node_memory)


def _fhe4dmm_matmuls(steps, slots: int, chunks: int, workers: int) -> list[dict]:
    """Every PCMM as an FHE4DMM product with its Optimal Block Layout and 4D grid (for the distributed runtime)."""
    matmuls = []
    for s in steps:
        if s.op != "pcmm":
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
    if per_node:    # each node's peak is checked below instead of the whole plan against one server
        budget = None
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
        y_sim = simulate_rows(steps, calib.reshape(calib.shape[0], -1).T, int(opts["weight_bits"]),
                              on_value=lambda step, v: row_peaks.__setitem__(step.out, row_magnitudes(v)))
    max_out = float(np.max(np.abs(y_sim))) if y_sim.size else 0.0
    if fit_report:
        fit_report["agreement_simulate"] = float(np.mean(top1(y_sim.T) == top1(reference.output)))
    if opts["bootstrap"]:      # every layout with bootstraps placed by the planner (hemlp.layouts.boot_choice)
        lay, estimates, why = plan_with_bootstraps(steps, calib, opts, batch_size, budget, row_peaks)
        steps, bs, allow = lay.steps, lay.batch_size, bool(opts["allow_insecure"])
    else:
        last = None
        if not opts["final_rescale"]:
            if opts["layout"] not in ("auto", "batch") or opts["encrypted_weights"]:
                raise UnsupportedError("final_rescale=False plans layout (A) only (layout='batch')")
            cands = [layouts.get("batch")]
            last = final_pcmm(steps)
            if last is None:
                raise UnsupportedError("final_rescale=False needs a model whose output is a linear layer")
            last.info["rescale"] = False
        pcmm_levels = max(c.pcmm_levels for c in cands)
        depth = depth_of(steps, pcmm_levels)
        info = choose_preset(depth, allow, opts["preset"])
        params = Params.preset(info["name"])
        q0_bits = int(math.log2(params.q[0]))
        # an unrescaled final layer keeps its output under q_0 through its weight bits: no reserve level
        reserve = 0 if last is not None else output_reserve(max_out, params.log_scale, q0_bits)
        if last is not None:
            last.info["weight_bits"] = unrescaled_weight_bits(last, max_out, params.log_scale, q0_bits,
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
                                                               max_out), budget)
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
        for s in ss:
            if s.info.get("folded_affine"):
                n.notes.append(f"(input map of {s.info['folded_affine']} folded in)")
            if s.op == "affine" and s.info.get("note"):
                n.notes.append(s.info["note"])
            if unrescaled(s):
                n.notes.append(f"(not rescaled: weights {s.info['weight_bits']} bits keep the output under q_0)")
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
    resources = estimate_resources(lay)
    plan_info["resources"] = resources.to_json()
    if per_node:
        # each node's peak (keys once per node), refused here, before any key or ciphertext exists
        boot = boot_key_bytes(lay)
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
    store_opts = {k: (v if not isinstance(v, tuple) else list(v)) for k, v in opts.items() if k in STORED_OPTIONS}
    lay.options = store_opts
    cm = CompiledModel(plan, steps, info["name"], params, g.input.shape, g.output.shape, bs, top, store_opts, allow,
                       layout=lay.name, planned_layout=lay)
    cm.reference = lambda xx: g.reference(np.asarray(xx, dtype=np.float64))[g.output.name]
    return cm


# ---------------------------------------------------------------------------------------
# The compiled-model directory (everything the server needs, nothing secret):
#     plan.json     format version, model id, preset, options, input/output shapes, batch size, layout,
#                   the printable plan, and every step's metadata (ops, levels, activations)
#     weights.npz   the step arrays (weights, im2col indices, biases, affine maps)
#     params.bin    the CKKS parameters (hemlp.fhe.Params.to_bytes)
# The client artefact (save(..., client=True); plan.json says "artefact": "client") has structure.npz instead of
# weights.npz: the index arrays as they are and, for every value array, its zero pattern (bool) only.
# ---------------------------------------------------------------------------------------

#: step arrays that describe structure (im2col gathers), not learned values: kept in the client artefact
STRUCTURE_ARRAYS = ("index",)


def save(compiled: CompiledModel, path, client: bool = False) -> None:
    """Write `compiled` as a compiled-model directory (created if missing); client=True: the client artefact."""
    if compiled.client_only and not client:
        raise ClientArtefactError("this model was loaded from a client artefact: it has no weights to save as a "
                                  "server artefact; save it with client=True")
    d = Path(path)
    d.mkdir(parents=True, exist_ok=True)
    # layout (C): the weights are the client's own (it encrypts them), so its artefact keeps them
    strip = client and not compiled.layout_impl.encrypted_weights
    arrays = {}
    metas = []
    for i, s in enumerate(compiled.steps):
        metas.append(s.meta())
        for k, v in s.arrays().items():
            arrays[f"s{i}_{k}"] = v if not strip or k in STRUCTURE_ARRAYS else (np.asarray(v) != 0)
    meta = dict(format="hemlp-compiled-model", version=FORMAT_VERSION, model_id=compiled.model_id,
                artefact="client" if strip else "server",
                preset=compiled.preset, allow_insecure=compiled.allow_insecure, options=compiled.options,
                input_shape=list(compiled.input_shape), output_shape=list(compiled.output_shape),
                batch_size=compiled.batch_size, top_level=compiled.top_level, layout=compiled.layout,
                plan_text=str(compiled.plan),
                plan_info=compiled.plan.info, steps=metas)
    name = "structure.npz" if strip else "weights.npz"
    tmp = d / f"{name}.tmp.npz"
    np.savez(tmp, **arrays)
    tmp.replace(d / name)
    (d / ("weights.npz" if strip else "structure.npz")).unlink(missing_ok=True)  # never both (an overwritten dir)
    write_atomic(d / "params.bin", compiled.context.params.to_bytes())
    write_atomic(d / "plan.json", json.dumps(meta, indent=1, default=_json_default).encode())


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, tuple):
        return list(o)
    raise TypeError(type(o).__name__)


def load(path, allow_insecure: bool = False) -> CompiledModel:
    """Load a compiled model directory written by CompiledModel.save: the server artefact, or the client artefact
    (save(dir, client=True): no weights; the model makes keys, encrypts and decrypts, and its run() raises
    ClientArtefactError).

    The security policy is the loader's, never the directory's: whoever published the directory (the server, for a
    client) chose its parameters, so a set below 128-bit is refused with InsecureParametersError unless the caller
    itself passes allow_insecure=True (tests only; CLI: --insecure). The flag stored in the directory is ignored."""
    d = Path(path)
    try:
        meta = json.loads((d / "plan.json").read_text())
    except OSError as exc:
        raise SerializationError(f"{d} is not a compiled hemlp model directory: {exc.strerror}") from None
    except (UnicodeDecodeError, ValueError, RecursionError):  # JSONDecodeError is a ValueError
        raise SerializationError(f"{d / 'plan.json'} is corrupted (not UTF-8 JSON)") from None
    if not isinstance(meta, dict) or meta.get("format") != "hemlp-compiled-model" or meta.get("version") != FORMAT_VERSION:
        raise SerializationError(f"{d} holds an unsupported compiled-model format")
    client = meta.get("artefact", "server")
    if client not in ("client", "server"):
        raise SerializationError(f"{d / 'plan.json'}: unknown artefact kind {client!r} (expected client or server)")
    client = client == "client"
    name = "structure.npz" if client else "weights.npz"
    try:
        with np.load(d / name, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError) as exc:
        raise SerializationError(f"cannot read {d / name}: {exc}") from None
    except Exception as exc:  # zipfile.BadZipFile, zlib.error, KeyError from a damaged archive
        raise SerializationError(f"{d / name} is corrupted ({type(exc).__name__}: {exc})") from None
    if client:  # zero patterns (bool) stand in for the values: structure only
        arrays = {k: (v.astype(np.float64) if v.dtype == np.bool_ else v) for k, v in arrays.items()}
    params = Params.from_bytes(read_file(d / "params.bin", "params"))
    if not params.is_128_bit_secure and not allow_insecure:
        bound = (f"log QP = {params.log_qp:.1f} bits > {params.max_log_qp_128} for N = 2^{params.log_n}"
                 if params.max_log_qp_128 > 0 else f"N = 2^{params.log_n} is outside the 128-bit table")
        raise InsecureParametersError(
            f"{d} publishes parameter set {meta.get('preset')!r} ({bound}), below this client's 128-bit security "
            "policy: refuse it and ask the publisher for a 128-bit preset. Only tests may accept it "
            "(hemlp.load(path, allow_insecure=True); CLI: --insecure)")
    try:
        steps = []
        for i, m in enumerate(meta["steps"]):
            pre = f"s{i}_"
            steps.append(Step.from_meta(m, {k[len(pre):]: v for k, v in arrays.items() if k.startswith(pre)}))
        plan = Plan(None, steps, meta["plan_info"], text=meta["plan_text"])
        cm = CompiledModel(plan, steps, meta["preset"], params, tuple(meta["input_shape"]),
                           tuple(meta["output_shape"]), meta["batch_size"], meta["top_level"], meta["options"],
                           bool(allow_insecure), layout=meta.get("layout", "batch"))
    except HemlpError:
        raise
    except Exception as exc:  # a damaged or hostile plan.json: missing fields, wrong types, inconsistent shapes
        raise SerializationError(f"{d / 'plan.json'} does not describe a valid plan ({type(exc).__name__}: "
                                 f"{str(exc)[:200]}); the directory is corrupted or from another hemlp version") from None
    if client:
        # the id was computed from the weights, which are not here: the client takes the publisher's id (the server
        # checks every EvalKeys / EncryptedBatch against its own, computed from the weights)
        if not isinstance(meta.get("model_id"), str):
            raise SerializationError(f"{d / 'plan.json'} has no model id")
        cm.model_id, cm.client_only = meta["model_id"], True
    elif cm.model_id != meta.get("model_id"):
        raise SerializationError(f"{d}: the weights do not match the plan (model id mismatch); the directory is "
                                 "corrupted or mixed from two models")
    return cm
