"""Client side of a file-based client/server pair (see server.py for the whole sequence).
The client holds the secret key; only evaluation keys and ciphertexts go to the server.

    python examples/client.py encrypt WORK   # keys, then encrypt held-out MNIST digits
    python examples/client.py decrypt WORK   # decrypt the server's answer
"""
import argparse
from pathlib import Path

import numpy as np

import hemlp
from hemlp import fhe
from hemlp.datasets import load_mnist_sample
from hemlp.runtime.artifacts import EncryptedBatch

ap = argparse.ArgumentParser()
ap.add_argument("action", choices=("encrypt", "decrypt"))
ap.add_argument("work", type=Path)
args = ap.parse_args()

compiled = hemlp.load(args.work / "client_model")  # the server's client artefact: plan + parameters, no weights
private = args.work / "client"                      # never sent anywhere
n = compiled.batch_size
digits = load_mnist_sample(train=False, limit=n)

if args.action == "encrypt":
    private.mkdir(parents=True, exist_ok=True)
    outbox = args.work / "to_server"
    outbox.mkdir(parents=True, exist_ok=True)
    sk, eval_keys = compiled.keygen()
    sk.save(private / "secret.key")
    eval_keys.save(outbox / "eval.keys")
    compiled.encrypt(digits.x, sk).save(outbox / "x.ct")
    print(f"sent {outbox / 'eval.keys'} and {outbox / 'x.ct'} ({n} encrypted digits)")
else:
    sk = fhe.load(private / "secret.key", compiled.context)
    y = EncryptedBatch.load(args.work / "to_client" / "y.ct", compiled)
    logits = np.asarray(compiled.decrypt(y, sk)).reshape(n, -1)
    pred = logits.argmax(1)
    print("labels     ", digits.y.tolist())
    print("predictions", pred.tolist())
    print(f"accuracy {np.mean(pred == digits.y):.3f} on {n} encrypted digits")
