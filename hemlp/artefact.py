"""The compiled-model directory: writing it (``save``: the server artefact, or the client artefact without the
weights) and reading it back (``read``: checked, under the reader's security policy), for hemlp.load.

The compiled-model directory (everything the server needs, nothing secret):
    plan.json     format version, model id, preset, options, input/output shapes, batch size, layout,
                  the printable plan, and every step's metadata (ops, levels, activations)
    weights.npz   the step arrays (weights, im2col indices, biases, affine maps)
    params.bin    the CKKS parameters (hemlp.fhe.Params.to_bytes)
The client artefact (save(..., client=True); plan.json says "artefact": "client") has structure.npz instead of
weights.npz: the index arrays as they are and, for every value array, its zero pattern (bool) only.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hemlp.compiler.lower import Step
from hemlp.errors import ClientArtefactError, HemlpError, InsecureParametersError, SerializationError
from hemlp.fhe import Params
from hemlp.fhe.files import read_file, write_atomic
from hemlp.runtime.artifacts import FORMAT_VERSION

__all__ = ["Artefact", "read", "save", "invalid_plan", "STRUCTURE_ARRAYS"]

#: step arrays that describe structure (im2col gathers), not learned values: kept in the client artefact
STRUCTURE_ARRAYS = ("index",)


def save(compiled, path, client: bool = False) -> None:
    """Write `compiled` (a CompiledModel) as a compiled-model directory (created if missing); client=True: the
    client artefact."""
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



@dataclass
class Artefact:
    """A compiled-model directory as read: its plan.json, parameters and steps (with their arrays; a client
    artefact's value arrays are zero patterns), for hemlp.load to build the CompiledModel from."""

    path: Path
    meta: dict
    params: Params
    steps: list
    client: bool        # the client artefact (no weights)

    def model_id(self, computed: str) -> str:
        """The loaded model's id: the server artefact's must equal the one computed from its weights; the client
        artefact (no weights) takes the publisher's (the server checks every EvalKeys / EncryptedBatch against its
        own, computed from the weights)."""
        if self.client:
            if not isinstance(self.meta.get("model_id"), str):
                raise SerializationError(f"{self.path / 'plan.json'} has no model id")
            return self.meta["model_id"]
        if computed != self.meta.get("model_id"):
            raise SerializationError(f"{self.path}: the weights do not match the plan (model id mismatch); the "
                                     "directory is corrupted or mixed from two models")
        return computed


def invalid_plan(path, exc: Exception) -> SerializationError:
    """The error for a damaged or hostile plan.json (missing fields, wrong types, inconsistent shapes)."""
    return SerializationError(f"{Path(path) / 'plan.json'} does not describe a valid plan ({type(exc).__name__}: "
                              f"{str(exc)[:200]}); the directory is corrupted or from another hemlp version")


def read(path, allow_insecure: bool = False) -> Artefact:
    """Read and check a compiled-model directory written by save (SerializationError when it is not one or is
    damaged). A parameter set below 128-bit is refused with InsecureParametersError unless the caller passes
    allow_insecure=True: the reader's policy, never the directory's."""
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
    except HemlpError:
        raise
    except Exception as exc:
        raise invalid_plan(d, exc) from None
    return Artefact(d, meta, params, steps, client)
