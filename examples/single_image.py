"""Single-image requests: a model compiled for batch 1 runs in layout (P) (each digit's pixels packed in
the slots of a few ciphertexts, linear layers as rotations of diagonals), so one request costs a few
hundred milliseconds instead of a whole batch.

    python examples/single_image.py              # 128-bit parameters
    python examples/single_image.py --insecure   # small INSECURE test parameters (fast)
"""
import argparse
import time

import numpy as np

import hemlp
from hemlp.datasets import load_mnist_sample
from hemlp.models import build
from hemlp.models.train import predict, train

ap = argparse.ArgumentParser()
ap.add_argument("--insecure", action="store_true")
ap.add_argument("--requests", type=int, default=10)
args = ap.parse_args()

train_set, test_set = load_mnist_sample(train=True), load_mnist_sample(train=False, limit=args.requests)
model = build("mlp", (1, 28, 28), 10, seed=0)           # 784-128-64-10 with x^2 activations
train(model, train_set.x, train_set.y, epochs=3, seed=0)

compiled = hemlp.compile(model, train_set.x[:256], batch_size=1, allow_insecure=args.insecure)
print(compiled.plan)                                     # layout (P): rotations, input ciphertexts, estimates
sk, eval_keys = compiled.keygen()                        # client: relinearisation + rotation keys
compiled.prepare()                                       # server, once: encode the weight diagonals

plain = predict(model, test_set.x).argmax(1)
for i in range(len(test_set)):
    ct = compiled.encrypt(test_set.x[i:i + 1], sk)       # client: one digit
    t0 = time.perf_counter()
    out = compiled.run(ct, eval_keys)                    # server
    dt = time.perf_counter() - t0
    pred = int(np.asarray(compiled.decrypt(out, sk)).argmax())   # client
    print(f"request {i}: label {test_set.y[i]}, encrypted prediction {pred} (plaintext {plain[i]}), "
          f"server {dt * 1e3:.0f} ms")
