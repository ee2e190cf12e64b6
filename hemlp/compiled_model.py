"""CompiledModel: a planned chain of encrypted layers and every call on it (client: keygen, encrypt, decrypt;
server: run, prepare, estimate_noise; both: simulate), with its Plan; ``load`` builds one from a compiled-model
directory (hemlp.artefact). hemlp.model.compile makes one.

CompiledModel checks what every layout shares (model ids, key pairs, key levels, shapes) and delegates the rest
to its Layout: adding a layout does not touch this module.
"""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np

from hemlp import layouts
from hemlp.artefact import invalid_plan
from hemlp.artefact import read as read_artefact
from hemlp.artefact import save as save_artefact
from hemlp.compiler.ir import format_graph
from hemlp.errors import (ClientArtefactError, EncodingError, HemlpError, InputRangeError, KeyMismatchError,
                          LevelError, MissingKeyError, ParameterError, ShapeError, UnsupportedError, warn_always)
from hemlp.fhe import Ciphertext, Context, FloodSpec, PublicKey, SecretKey
from hemlp.fhe import load as load_ckks_object
from hemlp.planner import grid_4d, obl, obl_bruteforce
from hemlp.planner.resources import NodeResources, Resources
from hemlp.progress import StepTimings, progress
from hemlp.run_options import RunOptions
from hemlp.runtime.artifacts import EncryptedBatch, EvalKeys, write_batch_stream
from hemlp.runtime.local import range_report
from hemlp.runtime.noise_analysis import STD_FACTOR
from hemlp.threads import set_num_threads

__all__ = ["CompiledModel", "Plan", "load", "noise_line"]


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
                        + ("" if fit["samples"] >= 1000 else " (not certified: < 1000 samples)")
                        + held_out_text(fit.get("held_out")))
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


def held_out_text(held: dict | None) -> str:
    """The plan line's account of the held-out check (compile's agreement_holdout), or nothing."""
    if not held:
        return ""
    tight = len(held["looks"]) - 1
    return (f"; on the {held['samples']} calibration samples held out of the search it agrees on "
            f"{held['samples'] - held['disagreements']} ({held['agreement']:.2%}: "
            f"{'passed' if held['passed'] else 'FAILED'} the target"
            + (f", after {tight} tightening(s) of the search" if tight else "") + ")")


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
        self._cuda = None   # (eval_keys, hemlp.gpu.runner.DeviceModelRunner) of the last runtime="cuda" run
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
        if name in layouts.LAYOUTS and layouts.LAYOUTS[name].own_program:
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

    def encrypt(self, x, key, on_range: str = "error", verbose: bool | None = None, path=None):
        """Encrypt a batch (batch, *input_shape) under the secret key (or a public key). The inputs are first
        run through the plan in plaintext: InputRangeError if they leave an activation's calibrated domain
        (on_range="warn": a RangeWarning instead; "ignore": no check). verbose: progress on stderr (None: only on
        a terminal).

        path: write the batch to this file instead of returning it (returns the Path): the file EncryptedBatch.save
        writes, which EncryptedBatch.load reads (mapped=True: the Ray driver then streams it, never holding it
        whole). Layout (A) encrypts it a feature row at a time and writes each row as it is encrypted, so the whole
        batch is never in memory; the other layouts encrypt it whole, then save it."""
        x = self._check_x(x)
        self.check_ranges(x, on_range)
        if x.shape[0] > self.capacity:
            raise ShapeError(f"batch of {x.shape[0]} samples exceeds the planned capacity {self.capacity} "
                             f"(batch_size={self.batch_size}); recompile with a larger batch_size or split the batch")
        self._check_key(key)
        if path is not None and self.layout_impl.name == "batch":
            return self._encrypt_rows_to(path, x, key, verbose)
        with progress(f"encrypt {x.shape[0]} samples", verbose=verbose, unit="batch") as bar:
            ctm = self.layout_impl.encrypt(self.context, x, key, self.top_level)
            bar.update(1)
        batch = EncryptedBatch(self.model_id, ctm, x.shape[0], self.input_shape, "input")
        if path is None:
            return batch
        batch.save(path)
        return Path(path)

    def _encrypt_rows_to(self, path, x, key, verbose) -> Path:
        """Layout (A): each ciphertext row is one feature of every sample, encrypted on its own, so the layout's
        encrypt of one feature column at a time gives the rows of the whole batch's matrix in order."""
        X = x.reshape(x.shape[0], -1)
        rows, ctx = X.shape[1], self.context
        chunks = -(-X.shape[0] // ctx.slots)

        def blocks(bar):
            for r in range(rows):
                ctm = self.layout_impl.encrypt(ctx, X[:, r:r + 1], key, self.top_level)
                if ctm.shape != (1, X.shape[0]) or ctm.chunks != chunks or ctm.format != "rlwe":
                    raise ShapeError(f"layout (A) encrypted feature {r} as a {ctm.shape} {ctm.format} matrix of "
                                     f"{ctm.chunks} chunks, not one RLWE row of {chunks}")
                yield ctm.cts
                bar.update(1)

        with progress(f"encrypt {x.shape[0]} samples to {path}", total=rows, verbose=verbose, unit="row") as bar:
            write_batch_stream(path, self, x.shape[0], self.input_shape, (rows, X.shape[0]), chunks, blocks(bar))
        return Path(path)

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
        threads). runtime="cuda": in this process on its GPU (layout (P) models; hemlp.gpu.runner), bit-identical to
        "local". runtime="ray": bit-identical to "local"; layout (A): every PCMM, elementwise step and bootstrap as
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
            if opts.runtime == "cuda":
                result = self._cuda_runner(eval_keys).run(ct, timings)
            else:
                # model=self: layouts (P), (A'), (C) ship this model to the Ray workers, which reload it with
                # CompiledModel.load (the runtime sits below the model and does not import it)
                out = self.layout_impl.run(self.context, ct, eval_keys, weights, timings, opts.runtime, ray,
                                           model=self)
                result = EncryptedBatch(self.model_id, out, ct.batch, self.output_shape, "output")
        result.layer_seconds = dict(timings)
        return result

    def _cuda_runner(self, eval_keys):
        """The GPU runner of these keys (keys uploaded and the bootstrapper's plans encoded once per key set)."""
        from hemlp.gpu.runner import DeviceModelRunner

        if self._cuda is None or self._cuda[0] is not eval_keys:
            self._cuda = None            # the old runner's device memory goes first
            self._cuda = (eval_keys, DeviceModelRunner(self, eval_keys))
        return self._cuda[1]

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
        save_artefact(self, path, client=client)

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



def load(path, allow_insecure: bool = False) -> CompiledModel:
    """Load a compiled model directory written by CompiledModel.save: the server artefact, or the client artefact
    (save(dir, client=True): no weights; the model makes keys, encrypts and decrypts, and its run() raises
    ClientArtefactError).

    The security policy is the loader's, never the directory's: whoever published the directory (the server, for a
    client) chose its parameters, so a set below 128-bit is refused with InsecureParametersError unless the caller
    itself passes allow_insecure=True (tests only; CLI: --insecure). The flag stored in the directory is ignored."""
    art = read_artefact(path, allow_insecure)
    meta = art.meta
    try:
        plan = Plan(None, art.steps, meta["plan_info"], text=meta["plan_text"])
        cm = CompiledModel(plan, art.steps, meta["preset"], art.params, tuple(meta["input_shape"]),
                           tuple(meta["output_shape"]), meta["batch_size"], meta["top_level"], meta["options"],
                           bool(allow_insecure), layout=meta.get("layout", "batch"))
    except HemlpError:
        raise
    except Exception as exc:  # a damaged or hostile plan.json: missing fields, wrong types, inconsistent shapes
        raise invalid_plan(art.path, exc) from None
    cm.model_id, cm.client_only = art.model_id(cm.model_id), art.client
    return cm
