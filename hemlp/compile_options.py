"""The options of ``hemlp.compile`` as one typed object: a default and a description per field, one ``validate()``.

    opts = CompileOptions(bootstrap=True, target_agreement=0.995)
    hemlp.compile(model, x, batch_size=16, options=opts)                # or keyword overrides:
    hemlp.compile(model, x, batch_size=16, options=opts, layout="packed")
    hemlp.compile(model, x, bootstrap=True)                             # keywords alone, as before

``CompileOptions.help()`` prints every field with its default and description.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from hemlp.errors import ParameterError
from hemlp.options import Options
from hemlp.options import option as _opt

__all__ = ["CompileOptions"]


@dataclass(frozen=True)
class CompileOptions(Options):
    """Every compile option (the module docstring of hemlp.model tells how they interact)."""

    calibration: Any = _opt(None, "representative inputs (n, *input_shape), >= 1000 to certify the agreement "
                                  "target; None: the example input")
    target_agreement: float = _opt(0.99, "the fraction of calibration samples on which the plan's top-1 must agree "
                                         "with the model's (activation degrees are chosen for it)")
    agreement_safety: float = _opt(1.0, "a calibration sample counts as agreeing only if its top-1 survives this many "
                                        "times the plan's error (>= 1; 1: plain agreement; 4 holds the ReLU "
                                        "ResNet-20's target on held-out images, at ~1.8x its run time)")
    agreement_holdout: float = _opt(0.0, "the fraction of >= 1000 calibration samples held out of the degree "
                                         "search to check its choice (0.2: 200 of 1 000); a choice that fails the "
                                         "target on them tightens the search and descends again; 0: none (the check "
                                         "costs the ReLU ResNet-20 2-4x the search's trials)")
    activation_degree: Any = _opt(None, "int, or dict by activation kind / node name; None: chosen for the target")
    activation_range: Any = _opt(None, "(lo, hi), or dict by node name; None: calibrated")
    activation_margin: float = _opt(0.05, "margin added to each calibrated range, as a fraction of its width")
    activation_guard: float = _opt(0.5, "low-weight guard band fitted on each side of a range, in widths")
    activation_method: str = _opt("auto", "'auto' (the better of minimax and Chebyshev), 'minimax', 'chebyshev' or "
                                          "'lsq'")
    weight_bits: int = _opt(20, "bits of the quantised plaintext weights")
    allow_insecure: bool = _opt(False, "allow the insecure test presets (tests only; they warn)")
    preset: Any = _opt(None, "a parameter preset name; None: the smallest that fits the plan")
    workers: int = _opt(4, "processor count of the reported FHE4DMM grids")
    layout: str = _opt("auto", "'auto' (the planner's cheapest for the batch size), 'batch' (A), 'packed' (P), "
                               "'mlwe' (A')")
    encrypted_weights: bool = _opt(False, "layout (C): the weights encrypted too")
    dft_depth: Any = _opt(None, "layout (A'): levels of each CoeffToSlot / SlotToCoeff; None: the planner's choice")
    bootstrap: bool = _opt(False, "place bootstraps (a bootstrapping preset) so the depth is not limited")
    mambo: Any = _opt("auto", "with bootstrap=True: 'auto', True (every refreshed dense layer as MaMBo) or False")
    batch_bootstrap: Any = _opt("auto", "with bootstrap=True: 'auto', True, False or an int k >= 2 (batch size)")
    final_rescale: bool = _opt(True, "False: layout (A) runs its last linear layer at level 0 without the rescale")
    server_memory: Any = _opt("auto", "the server memory budget in bytes; 'auto': this machine's less a reserve (a "
                                      "tenth, >= 1 GiB); None: no limit")
    import_keys: bool = _opt(True, "True: the server imports the client's evaluation keys (a file or an upload) and "
                                   "the import's peak counts against server_memory; False: the server process makes "
                                   "them itself (keygen() in process), only the run's peak counts")
    nodes: Any = _opt(1, "the nodes a batch's ciphertexts are split over (ciphertext ranges / FHE4DMM row splits); "
                         "the plan prints each node's peak; 'auto': the connected Ray cluster's live nodes (1 "
                         "when Ray is not initialised)")
    node_memory: Any = _opt(None, "each node's memory budget in bytes, checked against the per-node peak (keys once "
                                  "per node); 'auto': the smallest 'memory' resource of the connected Ray cluster's "
                                  "nodes, else this machine's; None: server_memory's budget")

    def named(self) -> set:
        """The options set to something other than their default (an explicit target, a calibration set, ...)."""
        d = self.defaults()
        return {k for k, v in self.as_dict().items()
                if not (v is d[k] or (isinstance(v, (bool, int, float, str)) and type(v) is type(d[k]) and v == d[k]))}

    def validate(self) -> "CompileOptions":
        """ParameterError naming the option and its valid values for the first value that cannot work."""
        def bad(name, want):
            raise ParameterError(f"{name}={getattr(self, name)!r}: {want}")

        # target_agreement, activation_method and layout are checked where they are used, with their own types
        # (CalibrationError; ParameterError listing the layouts the batch size allows)
        for name in ("activation_margin", "activation_guard"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and v >= 0):
                bad(name, "a finite number >= 0")
        if isinstance(self.weight_bits, bool) or not isinstance(self.weight_bits, int) or not 2 <= self.weight_bits <= 60:
            bad("weight_bits", "an int in [2, 60]")
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1:
            bad("workers", "an int >= 1")
        if self.nodes != "auto" and (isinstance(self.nodes, bool) or not isinstance(self.nodes, int) or self.nodes < 1):
            bad("nodes", "an int >= 1 or 'auto'")
        nm = self.node_memory
        if not (nm is None or nm == "auto" or (not isinstance(nm, bool) and isinstance(nm, (int, float))
                                               and math.isfinite(nm) and nm > 0)):
            bad("node_memory", "a positive number of bytes, 'auto' or None")
        for name in ("allow_insecure", "encrypted_weights", "bootstrap", "final_rescale", "import_keys"):
            if not isinstance(getattr(self, name), bool):
                bad(name, "True or False")
        return self
