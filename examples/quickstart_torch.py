"""Quickstart (PyTorch): train an HE-friendly net on real MNIST digits, compile it with hemlp and
classify encrypted digits.

    python examples/quickstart_torch.py              # 128-bit parameters
    python examples/quickstart_torch.py --insecure   # small INSECURE test parameters (fast)
"""
import argparse

import numpy as np

import hemlp
from hemlp.datasets import load_mnist_sample
from hemlp.models import build
from hemlp.models.train import predict, train

ap = argparse.ArgumentParser()
ap.add_argument("--insecure", action="store_true")
ap.add_argument("--samples", type=int, default=32)
args = ap.parse_args()

train_set, test_set = load_mnist_sample(train=True), load_mnist_sample(train=False, limit=args.samples)
model = build("fhe4dmm", (1, 28, 28), 10, seed=0)     # Conv -> x^2 -> FC -> x^2 -> FC, depth 5
train(model, train_set.x, train_set.y, epochs=3, lr=1e-2, seed=0)

# the example input calibrates activation ranges; batch_size = samples per encrypted batch
compiled = hemlp.compile(model, train_set.x[:256], batch_size=args.samples, allow_insecure=args.insecure)
print(compiled.plan)

sk, eval_keys = compiled.keygen()                    # client
ct = compiled.encrypt(test_set.x, sk)                # client
ct_out = compiled.run(ct, eval_keys)                 # server: ciphertexts and evaluation keys only
logits = np.asarray(compiled.decrypt(ct_out, sk)).reshape(args.samples, -1)  # client

plain = predict(model, test_set.x)
print("labels    ", test_set.y[:16])
print("encrypted ", logits.argmax(1)[:16])
print(f"accuracy: encrypted {np.mean(logits.argmax(1) == test_set.y):.3f}, "
      f"plaintext {np.mean(plain.argmax(1) == test_set.y):.3f}, "
      f"max |logit error| {np.max(np.abs(logits - plain)):.2e}")
