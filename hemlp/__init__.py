"""hemlp: privacy-preserving ML inference on RNS-CKKS encrypted matrices.

Public API: ``hemlp.compile`` (a torch module or an ONNX file -> CompiledModel), ``hemlp.load`` (a saved compiled
model), ``hemlp.set_num_threads`` and the typed errors of hemlp.errors. Layers (data flows one way; each imports
only the ones below it, tests/test_architecture.py):
model -> compiler -> layouts -> runtime -> bootstrap -> he (building blocks) / pcmm (PCMM) -> fhe (the scheme)
-> hemlp._core (C++); apps (cli, demo, bench) on top; baselines for comparison only.

Importing hemlp changes no environment variable and no import path. compile / load (and the native core behind
them) are loaded on first use, so the pure-Python planner works before the native core is built.
"""
from hemlp.errors import *  # noqa: F401,F403  (typed exceptions are part of the public API)
from hemlp.threads import get_num_threads, set_num_threads  # noqa: F401

__version__ = "0.1.0"


def compile(model_or_onnx_path, example_input, batch_size=None, options=None, **overrides):
    """Compile a model for encrypted inference: hemlp.model.compile (its docstring lists the options;
    ``hemlp.CompileOptions`` holds them as one typed object)."""
    from hemlp import model

    return model.compile(model_or_onnx_path, example_input, batch_size, options, **overrides)


def load(path, allow_insecure: bool = False):
    """Load a compiled-model directory written by CompiledModel.save: hemlp.compiled_model.load (the caller's
    security policy applies, not the directory's)."""
    from hemlp import compiled_model   # not the compile pipeline: a server or a client only loads

    return compiled_model.load(path, allow_insecure=allow_insecure)


def __getattr__(name):  # lazy subpackages: hemlp.fhe, hemlp.pcmm, ... (they load the native core)
    import importlib

    if name in {"fhe", "he", "pcmm", "bootstrap", "planner", "baselines", "model", "layouts", "apps", "serving"}:
        return importlib.import_module(f"hemlp.{name}")
    if name == "CompileOptions":
        return importlib.import_module("hemlp.compile_options").CompileOptions
    if name in ("RunOptions", "RayOptions", "StagedKeys"):     # CompiledModel.run's options
        return getattr(importlib.import_module("hemlp.run_options"), name)
    if name == "Client":                # the client of `hemlp serve`
        return importlib.import_module("hemlp.serving.client").Client
    if name == "calibrate":             # `hemlp calibrate`: this machine's cost profile for the planner
        return importlib.import_module("hemlp.apps.calibrate").calibrate
    raise AttributeError(f"module 'hemlp' has no attribute {name!r}")
