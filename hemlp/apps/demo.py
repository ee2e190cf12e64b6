"""`make demo`: an end-to-end encrypted computation at 128-bit security.

The client holds the secret key; the server sees only the public parameters, evaluation
keys and ciphertexts (exchanged as files, as they would be over a network). The server
evaluates a small encrypted model: a linear layer y = W x + b as Halevi–Shoup style
rotations and slot products, then the activation y^2 — and the client checks the result
against numpy.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from hemlp import fhe


def _client_setup(workdir: Path, preset: str, d: int, rng):
    ctx = fhe.Context(preset)
    sk, pk = ctx.keygen()
    ctx.params.to_bytes()
    (workdir / "params.bin").write_bytes(ctx.params.to_bytes())
    ctx.relin_key(sk).save(workdir / "relin.key")
    ctx.rotation_keys(sk, range(1, d)).save(workdir / "rotation.key")
    x = rng.uniform(-1, 1, d)
    # replicate x across all slots so that rotations are cyclic with period d
    ctx.encrypt(np.tile(x, ctx.slots // d), pk).save(workdir / "x.ct")
    return ctx, sk, x


def _server_compute(workdir: Path, W: np.ndarray, b: np.ndarray) -> float:
    """Runs with no secret key: loads params, evaluation keys and the ciphertext from files."""
    t0 = time.perf_counter()
    params = fhe.Params.from_bytes((workdir / "params.bin").read_bytes())
    ctx = fhe.Context(params)
    rlk = fhe.load(workdir / "relin.key", ctx)
    gk = fhe.load(workdir / "rotation.key", ctx)
    x = fhe.load(workdir / "x.ct", ctx)
    d = W.shape[0]
    reps = ctx.slots // d
    rots = ctx.rotate_hoisted(x, list(range(d)), gk)  # one decomposition shared by all rotations
    acc = None
    for i, r in enumerate(rots):  # diagonal method: y = sum_i diag_i(W) * rot_i(x)
        diag = np.tile(np.array([W[j, (j + i) % d] for j in range(d)]), reps)
        term = ctx.mul(r, diag)
        acc = term if acc is None else ctx.add(acc, term)
    y = ctx.add(ctx.rescale(acc), np.tile(b, reps))
    out = ctx.rescale(ctx.mul(y, y, relin_key=rlk))
    out.save(workdir / "y.ct")
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hemlp.apps.demo", description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="N14-d6")
    ap.add_argument("--dim", type=int, default=16, help="layer width (power of two)")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(2026)
    d = args.dim
    W = rng.normal(0, 1 / np.sqrt(d), (d, d))
    b = rng.uniform(-0.1, 0.1, d)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        t0 = time.perf_counter()
        ctx, sk, x = _client_setup(work, args.preset, d, rng)
        t_setup = time.perf_counter() - t0
        print(f"client: {ctx.params!r}")
        print(f"client: keys + encryption of a {d}-vector in {t_setup:.2f} s; files for the server:")
        for f in sorted(work.iterdir()):
            print(f"    {f.name:14s} {f.stat().st_size / 1e6:8.2f} MB")
        t_server = _server_compute(work, W, b)
        print(f"server: y = (W x + b)^2 on ciphertexts only (no secret key) in {t_server:.2f} s")
        y_ct = fhe.load(work / "y.ct", ctx)
        got = ctx.decrypt(y_ct, sk)[:d]
    want = (W @ x + b) ** 2
    err = np.max(np.abs(got - want))
    print(f"client: decrypted {np.array2string(got[:4], precision=5)} ...")
    print(f"client: numpy     {np.array2string(want[:4], precision=5)} ...")
    print(f"client: max error {err:.2e} ({-np.log2(err):.1f} bits of precision), level left {y_ct.level}")
    ok = err < 1e-4
    print("demo:", "OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
