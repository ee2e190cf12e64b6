"""Server side of a file-based client/server pair (see client.py). The server owns the model;
it never sees the secret key, inputs or outputs in the clear.

    python examples/server.py compile WORK [--insecure]   # train + compile: WORK/model/ (kept), WORK/client_model/
    python examples/client.py encrypt WORK                 # client: keys + encrypted digits
    python examples/server.py serve WORK                   # evaluate WORK/to_server/x.ct -> WORK/to_client/y.ct
    python examples/client.py decrypt WORK                 # client: predictions

WORK is the "network": the server reads WORK/to_server/ and writes WORK/to_client/.
"""
import argparse
import time
from pathlib import Path

import hemlp
from hemlp.runtime.artifacts import EncryptedBatch, EvalKeys

ap = argparse.ArgumentParser()
ap.add_argument("action", choices=("compile", "serve"))
ap.add_argument("work", type=Path)
ap.add_argument("--insecure", action="store_true")
ap.add_argument("--batch-size", type=int, default=16)
args = ap.parse_args()

if args.action == "compile":
    from hemlp.datasets import load_mnist_sample
    from hemlp.models import build
    from hemlp.models.train import train

    if (args.work / "model").exists():
        raise SystemExit(f"{args.work / 'model'} exists; remove it first")
    data = load_mnist_sample(train=True)
    model = build("fhe4dmm", (1, 28, 28), 10, seed=0)
    train(model, data.x, data.y, epochs=3, lr=1e-2, seed=0)
    compiled = hemlp.compile(model, data.x[:256], batch_size=args.batch_size, allow_insecure=args.insecure)
    compiled.save(args.work / "model")              # the server's own artefact: plan, parameters and weights
    compiled.save(args.work / "client_model", client=True)   # published: what the client needs, no weights
    print(compiled.plan)
    print(f"kept {args.work / 'model'}; published {args.work / 'client_model'}")
else:
    compiled = hemlp.load(args.work / "model")
    inbox, outbox = args.work / "to_server", args.work / "to_client"
    outbox.mkdir(parents=True, exist_ok=True)
    keys = EvalKeys.load(inbox / "eval.keys", compiled)   # evaluation keys only: no secret key here
    x = EncryptedBatch.load(inbox / "x.ct", compiled)
    t0 = time.perf_counter()
    y = compiled.run(x, keys)
    y.save(outbox / "y.ct")
    print(f"served {x} in {time.perf_counter() - t0:.2f} s -> {outbox / 'y.ct'}")
