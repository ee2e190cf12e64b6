"""The fuzz targets: every deserialiser hemlp exposes, each with real seed files of its kind.

``build_corpus(root)`` writes, under the insecure test-N10 parameters (small and fast), one folder of seed files
per target (real objects: ciphertexts, keys, Galois / relinearisation / ModPack / bootstrapping keys, ciphertext
matrices, evaluation-key files, encrypted batches, encrypted weights, parameter files, weight files, compiled-model
files) plus the compiled models the artefact loaders need. ``Targets(root)`` loads that once and gives, per target,
a function of one input's bytes. Each function first recomputes every checksum in the input
(``hemlp.fhe.serialize.recompute_checksums``: the format code's own helper, so this harness does not know the layout),
so a mutation reaches the parsers instead of stopping at the checksum. A typed hemlp error is a pass; anything
else (ValueError, RecursionError, AttributeError, ...) propagates and is a finding.

Used by the Atheris driver (``python -m tests.fuzz.atheris_main``), and by the mutation loop of the quick tests.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
import warnings
import weakref
from pathlib import Path

import numpy as np

PRESET = "test-N10"
#: every target, in the order of the reports
NAMES = ("params", "ciphertext", "secret_key", "public_key", "relin_key", "galois_keys", "modpack_keys",
         "multi_secret_key", "ct_matrix", "eval_keys", "encrypted_batch", "encrypted_weights", "bootstrap_keys",
         "batch_bootstrap_keys", "weights_npy", "model_plan", "model_weights", "model_params")


def _quiet():
    warnings.simplefilter("ignore")


def _ctx(name=PRESET):
    from hemlp import fhe

    with warnings.catch_warnings():
        _quiet()
        return fhe.Context(name, allow_insecure=True)


def test_context():
    """The insecure test-N10 context the targets load into."""
    return _ctx()


def build_corpus(root) -> dict:
    """Write the seed corpus under root/<target>/ and the models under root/models/; returns {target: count}."""
    import torch

    import hemlp
    from hemlp import pcmm
    from hemlp.bootstrap.keys import BootstrapKeys, EncapsulationKeys
    from hemlp.bootstrap.params import BootParams
    from hemlp.runtime.artifacts import EvalKeys

    root = Path(root)
    seeds: dict = {n: [] for n in NAMES}
    with warnings.catch_warnings():
        _quiet()
        ctx = _ctx()
        sk, pk = ctx.keygen()
        rng = np.random.default_rng(21)
        x = rng.uniform(-1, 1, ctx.slots)
        seeds["params"] += [ctx.params.to_bytes(), _ctx("test-N12").params.to_bytes()]
        seeds["ciphertext"] += [ctx.encrypt(x, pk).to_bytes(), ctx.encrypt(x, sk, level=1).to_bytes()]
        seeds["secret_key"] += [sk.to_bytes()]
        seeds["public_key"] += [pk.to_bytes()]
        seeds["relin_key"] += [ctx.relin_key(sk).to_bytes(), ctx.relin_key(sk, level=1).to_bytes()]
        seeds["galois_keys"] += [ctx.rotation_keys(sk, [1, -3]).to_bytes()]
        mp = pcmm.modpack_keys(ctx, sk, 4)
        seeds["modpack_keys"] += [mp.to_bytes()]
        msk = pcmm.multi_secret_key(ctx, 2)
        seeds["multi_secret_key"] += [msk.to_bytes()]
        M = rng.uniform(-1, 1, (3, 8))
        seeds["ct_matrix"] += [pcmm.encrypt_matrix(ctx, M, sk, level=1).to_bytes(),
                               pcmm.encrypt_matrix(ctx, M, pk, level=1).to_bytes()]
        try:
            seeds["ct_matrix"].append(pcmm.encrypt_matrix(ctx, rng.uniform(-1, 1, (2, ctx.N)), msk, level=1,
                                                            format="msrlwe").to_bytes())
        except Exception:  # noqa: BLE001  (an encrypt_matrix without the MSRLWE path: the other seeds remain)
            pass
        # bootstrapping keys: the real container (header, encapsulation keys) with the Galois and relinearisation
        # keys made at level 0 (the full set at test-N10-boot is 17 MB: too slow to mutate 10^5 times; the
        # parser's path is the same)
        boot_ctx = _ctx("test-N10-boot")
        bsk, _ = boot_ctx.keygen()
        bp = BootParams(slots=4, cts_depth=2, stc_depth=2)
        enc = EncapsulationKeys(boot_ctx, bsk, h=bp.h, level=boot_ctx.max_level)
        small = BootstrapKeys(bp, boot_ctx.rotation_keys(bsk, [1], level=0), boot_ctx.relin_key(bsk, level=0), enc,
                              {1: 0, 2: 0}, 0)
        seeds["bootstrap_keys"] += [small.to_bytes(boot_ctx)]
        # batched bootstrapping keys (k = 2), likewise with every key made for level 0: the real container
        seeds["batch_bootstrap_keys"] += [_small_batch_keys(boot_ctx, bsk, bp).to_bytes(boot_ctx)]

        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.Linear(6, 3)).eval()
        xb = rng.normal(size=(2, 8))
        cm = hemlp.compile(net, xb, batch_size=2, allow_insecure=True, preset=PRESET, layout="packed")
        cm.save(root / "models" / "packed")
        csk, ek = cm.keygen()
        ek_full = EvalKeys(cm.model_id, ctx.relin_key(csk), ek.galois_keys, None)
        seeds["eval_keys"] += [ek.to_bytes(), ek_full.to_bytes()]
        seeds["encrypted_batch"] += [cm.encrypt(xb, csk).to_bytes()]
        cmw = hemlp.compile(net, xb, batch_size=2, allow_insecure=True, preset=PRESET, encrypted_weights=True)
        cmw.save(root / "models" / "blocked")
        wsk, _ = cmw.keygen()
        seeds["encrypted_weights"] += [cmw.encrypt_weights(wsk).to_bytes()]
        # EvalKeys with ModPack keys (what layout A' sends), under the packed model's id
        seeds["eval_keys"].append(EvalKeys(cm.model_id, None, None, pcmm.modpack_keys(cm.context, csk, 2)).to_bytes())

        buf = io.BytesIO()
        np.save(buf, rng.normal(size=(3, 4)))
        seeds["weights_npy"] += [buf.getvalue()]
        d = root / "models" / "packed"
        seeds["model_plan"] += [(d / "plan.json").read_bytes()]
        seeds["model_weights"] += [(d / "weights.npz").read_bytes()]
        seeds["model_params"] += [(d / "params.bin").read_bytes()]
        cm.save(root / "models" / "client", client=True)
        seeds["model_plan"] += [(root / "models" / "client" / "plan.json").read_bytes()]

    for name, blobs in seeds.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        for i, b in enumerate(blobs):
            (root / name / f"seed{i}").write_bytes(bytes(b))
    return {n: len(b) for n, b in seeds.items()}


def _small_batch_keys(ctx, sk, bp):
    """BatchBootstrapKeys for k = 2 with every key made for level 0 (the full set is ~34 MB at test-N10-boot)."""
    from hemlp import _core, pcmm
    from hemlp.bootstrap.batch import BatchBootstrapKeys
    from hemlp.fhe import GaloisKeys, SecretKey

    e, msk = ctx.native, pcmm.multi_secret_key(ctx, 2)
    conv = _core.batch_conversion_keys(e, ctx.unwrap(sk, SecretKey, "sk"), msk.native, bp.h, 0, 0, True)
    ms = _core.ms_galois_keys(e, msk.native, [(e.galois_element(1), 0), (e.galois_element(2), 0)], 0)
    galois = ctx.wrap(GaloisKeys, _core.galois_keys_at_levels(e, ctx.unwrap(sk, SecretKey, "sk"),
                                                              [(e.conjugation_element(), 0)], 0))
    return BatchBootstrapKeys(bp, 2, conv, ms, galois, ctx.relin_key(sk, level=0), {1: 0, 2: 0}, {}, 0, ctx.hash)


def seeds_of(root, name) -> list:
    return [p.read_bytes() for p in sorted((Path(root) / name).iterdir())]


class Targets:
    """The loaders, bound to the contexts and models of a corpus built by build_corpus."""

    def __init__(self, root):
        import hemlp
        from hemlp import fhe, pcmm
        from hemlp.fhe import serialize
        from hemlp.bootstrap.batch import BatchBootstrapKeys
        from hemlp.bootstrap.keys import BootstrapKeys
        from hemlp.errors import HemlpError
        from hemlp.layouts.blocked import EncryptedWeights
        from hemlp.runtime import jobs
        from hemlp.runtime.artifacts import EncryptedBatch, EvalKeys

        self.root = Path(root)
        self.HemlpError = HemlpError
        self.reseal = serialize.recompute_checksums
        with warnings.catch_warnings():
            _quiet()
            ctx, boot_ctx = _ctx(), _ctx("test-N10-boot")
            packed = hemlp.load(self.root / "models" / "packed", allow_insecure=True)
            blocked = hemlp.load(self.root / "models" / "blocked", allow_insecure=True)
        self.tmp = Path(tempfile.mkdtemp(prefix="hemlp-fuzz-"))
        weakref.finalize(self, shutil.rmtree, str(self.tmp), True)     # removed with the targets (or at exit)
        model_dir = self.root / "models" / "packed"

        def model_file(name):
            def load(data):
                d = self.tmp / f"model-{name}"
                if not d.exists():  # the server files plus the client artefact's structure.npz: both plans load
                    d.mkdir()
                    for f in [*model_dir.iterdir(), self.root / "models" / "client" / "structure.npz"]:
                        (d / f.name).write_bytes(f.read_bytes())
                (d / name).write_bytes(data)
                return hemlp.load(d, allow_insecure=True)
            return load

        def npy(data):
            p = self.tmp / "W.npy"
            p.write_bytes(data)
            return jobs.WeightsJob.from_files(p, preset=PRESET, allow_insecure=True)

        typed = {"params": fhe.Params.from_bytes,
                 "ciphertext": lambda b: fhe.from_bytes(b, ctx), "secret_key": lambda b: fhe.from_bytes(b, ctx),
                 "public_key": lambda b: fhe.from_bytes(b, ctx), "relin_key": lambda b: fhe.from_bytes(b, ctx),
                 "galois_keys": lambda b: fhe.from_bytes(b, ctx),
                 "modpack_keys": lambda b: pcmm.ModPackKeys.from_bytes(b, ctx),
                 "multi_secret_key": lambda b: pcmm.MultiSecretKey.from_bytes(b, ctx),
                 "ct_matrix": lambda b: pcmm.CtMatrix.from_bytes(b, ctx),
                 "eval_keys": lambda b: EvalKeys.from_bytes(b, packed),
                 "encrypted_batch": lambda b: EncryptedBatch.from_bytes(b, packed),
                 "encrypted_weights": lambda b: EncryptedWeights.from_bytes(b, blocked),
                 "bootstrap_keys": lambda b: BootstrapKeys.from_bytes(b, boot_ctx),
                 "batch_bootstrap_keys": lambda b: BatchBootstrapKeys.from_bytes(b, boot_ctx),
                 "weights_npy": npy, "model_plan": model_file("plan.json"),
                 "model_weights": model_file("weights.npz"), "model_params": model_file("params.bin")}
        self.loaders = typed

    def run(self, name: str, data: bytes) -> str:
        """Load one input (checksums recomputed first); returns "ok" or the typed error's class name. Any other
        exception propagates (a finding)."""
        blob = self.reseal(bytes(data))
        with warnings.catch_warnings():
            _quiet()
            try:
                self.loaders[name](blob)
            except self.HemlpError as exc:
                return type(exc).__name__
        return "ok"


def mutate(blob: bytes, rng: np.random.Generator, dictionary=()) -> bytes:
    """One structural mutation (for the quick loop; Atheris brings its own): byte flips, interesting integers at
    a random offset, a JSON-token splice, truncation, duplication or deletion of a range."""
    b = bytearray(blob)
    if not b:
        return bytes(rng.integers(0, 256, int(rng.integers(1, 64)), dtype=np.uint8))
    k = int(rng.integers(0, 7))
    pos = int(rng.integers(0, len(b)))
    if k == 0:
        for _ in range(int(rng.integers(1, 5))):
            b[int(rng.integers(0, len(b)))] ^= 1 << int(rng.integers(0, 8))
    elif k == 1:
        v = [0, 1, 2, 0x7F, 0x80, 0xFF, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 2 ** 63 - 1, 2 ** 64 - 1][int(rng.integers(0, 11))]
        w = [1, 2, 4, 8][int(rng.integers(0, 4))]
        b[pos:pos + w] = (v % (1 << (8 * w))).to_bytes(w, "little")
    elif k == 2 and dictionary:
        tok = dictionary[int(rng.integers(0, len(dictionary)))]
        b[pos:pos + int(rng.integers(0, 8))] = tok
    elif k == 3:
        del b[int(rng.integers(0, len(b) + 1)):]
    elif k == 4:
        end = min(len(b), pos + int(rng.integers(1, 64)))
        b[pos:pos] = b[pos:end]
    elif k == 5:
        del b[pos:pos + int(rng.integers(1, 64))]
    else:
        b[pos] = int(rng.integers(0, 256))
    return bytes(b)


#: tokens that steer JSON headers into odd corners (types, nesting, huge numbers, NaN)
JSON_TOKENS = [b"[", b"]", b"{", b"}", b"null", b"true", b"-1", b"1e308", b"NaN", b"Infinity", b'"', b",", b":",
               b"[[[[[[[[[[[[[[[[", b"99999999999999999999", b'"x"', b"0", b"[]", b"{}", b"-0"]


def mutation_loop(targets: Targets, name: str, runs: int, seed: int = 0) -> dict:
    """A plain (not coverage-guided) mutation fuzzer over one target: each input is a seed mutated 1-4 times.
    Returns {outcome: count}."""
    rng = np.random.default_rng(seed)
    corpus = seeds_of(targets.root, name)
    out: dict = {}
    for _ in range(runs):
        blob = corpus[int(rng.integers(0, len(corpus)))]
        for _ in range(int(rng.integers(1, 5))):
            blob = mutate(blob, rng, JSON_TOKENS)
        r = targets.run(name, blob)
        out[r] = out.get(r, 0) + 1
    return out


if __name__ == "__main__":  # python -m tests.fuzz.targets ROOT: build a corpus
    import sys

    print(json.dumps(build_corpus(sys.argv[1])))
    os._exit(0)
