"""Quickstart (ONNX): compile an exported ONNX model, check the plan in simulation, then run it
on ciphertexts. Any exporter works as long as the graph uses Conv / Gemm / MatMul / Add / Mul /
AveragePool / Flatten and polynomial activations; here we export one of hemlp's models.

    python examples/quickstart_onnx.py [--insecure] [--onnx model.onnx]
"""
import argparse
import tempfile
import warnings
from pathlib import Path

import numpy as np

import hemlp
from hemlp.datasets import load_mnist_sample

ap = argparse.ArgumentParser()
ap.add_argument("--onnx", help="an existing ONNX model for 1x28x28 inputs (default: train and export one)")
ap.add_argument("--insecure", action="store_true")
ap.add_argument("--samples", type=int, default=32)
args = ap.parse_args()

train_set, test_set = load_mnist_sample(train=True), load_mnist_sample(train=False, limit=args.samples)
tmp = tempfile.TemporaryDirectory()
onnx_path = args.onnx
if onnx_path is None:
    import torch

    from hemlp.models import build
    from hemlp.models.train import train

    model = build("mlp", (1, 28, 28), 10, seed=0)    # 784-128-64-10 with x^2 activations
    train(model, train_set.x, train_set.y, epochs=3, seed=0)
    onnx_path = str(Path(tmp.name) / "mlp.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.as_tensor(train_set.x[:1]),), onnx_path, dynamo=False,
                          input_names=["x"], output_names=["logits"], dynamic_axes={"x": {0: "batch"}})

compiled = hemlp.compile(onnx_path, train_set.x[:256], batch_size=args.samples, allow_insecure=args.insecure)
print(compiled.plan)
sim = np.asarray(compiled.simulate(test_set.x)).reshape(args.samples, -1)   # same plan, plaintext
print(f"simulated accuracy {np.mean(sim.argmax(1) == test_set.y):.3f}")

sk, eval_keys = compiled.keygen()
logits = np.asarray(compiled.decrypt(compiled.run(compiled.encrypt(test_set.x, sk), eval_keys), sk))
logits = logits.reshape(args.samples, -1)
print(f"encrypted accuracy {np.mean(logits.argmax(1) == test_set.y):.3f}; "
      f"max |encrypted - simulated| = {np.max(np.abs(logits - sim)):.2e}")

compiled.save(Path(tmp.name) / "compiled")             # the server artefact; reload with hemlp.load(dir)
print("reloaded:", hemlp.load(Path(tmp.name) / "compiled").plan is not None)
