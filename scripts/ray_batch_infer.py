#!/usr/bin/env python3
"""Resumable encrypted batch inference over a directory (or manifest) of ciphertext files, on Ray.

Weights mode (each input is a CtMatrix file; out = pcmm(W, in) + bias):
    python scripts/ray_batch_infer.py IN_DIR -o OUT_DIR --weights W.npy [--bias b.npy] --preset N14-d6
Compiled-model mode (each input is an EncryptedBatch file of that model):
    python scripts/ray_batch_infer.py IN_DIR -o OUT_DIR --model model.hemlp --keys eval.keys

Runs on the Ray cluster at --address, the one `ray job submit` provides (RAY_ADDRESS), or a local
Ray with --workers CPUs; --local runs in this process without Ray. Unchanged on a cluster:
    ray job submit --address http://HEAD:8265 -- python /abs/path/scripts/ray_batch_infer.py ...
(paths are read by the driver only; workers receive bytes). Re-running with the same arguments
skips finished items; OUT_DIR/batch_manifest.json lists every item as done or failed with the
reason. Exit status: 0 all done, 1 some items failed, 2 the job could not run.
"""
from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

if __package__ in (None, ""):  # run as a script from a source checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("inputs", help="a directory of input files, or a manifest (.json list or one path per line)")
    p.add_argument("-o", "--output", required=True, help="output directory (created; resumable)")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--weights", help="weight matrix .npy (d1 x d2): out = W @ in")
    mode.add_argument("--model", help="compiled model directory (hemlp.compile(...).save)")
    p.add_argument("--bias", help="bias .npy (d1,), weights mode")
    p.add_argument("--weight-bits", type=int, default=20, help="weights mode: quantisation bits")
    p.add_argument("--preset", help="weights mode: CKKS parameter preset of the inputs")
    p.add_argument("--params", help="weights mode: CKKS parameters file (Params.to_bytes) instead of --preset")
    p.add_argument("--allow-insecure", action="store_true", help="accept test parameter sets (never real data)")
    p.add_argument("--keys", help="model mode: evaluation keys file")
    p.add_argument("--pattern", default="*", help="files of an input directory to take (glob)")
    p.add_argument("--retries", type=int, default=2, help="extra attempts for a failing item before it is reported")
    p.add_argument("--address", help="Ray cluster address (default: RAY_ADDRESS, else a local Ray)")
    p.add_argument("--workers", type=int, help="CPUs of the local Ray (default: all)")
    p.add_argument("--local", action="store_true", help="run in this process, without Ray")
    p.add_argument("--limit", type=int, help="process at most this many new items, then stop")
    p.add_argument("--restart", action="store_true", help="ignore an existing manifest and redo every item")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--json", help="write the summary as JSON here")
    args = p.parse_args(argv)
    if args.weights and not (args.preset or args.params):
        p.error("--weights needs --preset or --params (the CKKS parameters of the input ciphertexts)")
    if args.model and not args.keys:
        p.error("--model needs --keys (the evaluation keys file)")
    return args


def make_job(args):
    from hemlp.runtime.jobs import ModelJob, WeightsJob

    if args.model:
        return ModelJob.from_paths(args.model, args.keys, args.allow_insecure)
    if args.allow_insecure:
        from hemlp import fhe

        warnings.warn("INSECURE test parameters: for tests only, never for real data", fhe.InsecureParametersWarning)
    return WeightsJob.from_files(args.weights, preset=args.preset, params=args.params, bias=args.bias,
                                 weight_bits=args.weight_bits, allow_insecure=args.allow_insecure)


def main(argv=None) -> int:
    args = parse(argv)
    from hemlp.errors import HemlpError
    from hemlp.runtime.jobs import list_inputs, run_batch

    try:
        job = make_job(args)
        inputs = list_inputs(args.inputs, args.pattern)
        res = run_batch(job, inputs, args.output, retries=args.retries, executor="local" if args.local else "ray",
                        address=args.address, num_workers=args.workers, progress=not args.no_progress,
                        restart=args.restart, limit=args.limit)
    except (HemlpError, NotImplementedError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    summary = res.summary()
    print(f"{summary['done']} done, {summary['skipped']} already done, {len(res.failed)} failed "
          f"({summary['seconds']:.1f} s) -> {res.out_dir}")
    for name, why in sorted(res.failed.items()):
        print(f"FAILED {name}: {why}")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1))
    return 1 if res.failed else 0


if __name__ == "__main__":
    sys.exit(main())
