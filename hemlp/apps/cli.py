"""hemlp: encrypted inference on CKKS. Compile a model, then keygen / encrypt (client), run (server) and decrypt
(client) through files; batch jobs, benchmarks and a demo.

    hemlp compile model.onnx --input-shape 1,28,28 --batch-size 16 -o mnist.hemlp
    hemlp keygen mnist.hemlp -o keys/                 # keys/secret.key (client only), keys/eval.keys
    hemlp encrypt mnist.hemlp -k keys/secret.key -i x.npy -o x.ct
    hemlp run mnist.hemlp -e keys/eval.keys -i x.ct -o y.ct      # server: no secret key involved
    hemlp decrypt mnist.hemlp -k keys/secret.key -i y.ct -o y.npy
    hemlp batch mnist.hemlp -e keys/eval.keys -i cts/ -o out/     # many files: resumable, in-process or on Ray
    hemlp serve mnist.hemlp --port 8000               # server: an HTTP endpoint on Ray Serve (--no-ray: without)
    hemlp infer --url http://host:8000 mnist-client.hemlp -i x.npy -o y.npy   # client: keygen, encrypt, send, decrypt
    hemlp demo                                        # train → compile → encrypted inference on MNIST digits
    hemlp calibrate                                   # measure this machine's costs for the planner

Every command refuses to overwrite an existing output unless ``--force``; ``--json`` prints one
JSON object on stdout for programs (progress and messages go to stderr; ``--quiet`` silences them).
Commands that need an optional package (torch / onnx for compile, ray for ``batch --runtime ray``) say which
extra installs it (``pip install 'hemlp[ml]'``, ``'hemlp[ray]'``).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

#: the library's messages name API arguments; the CLI's name its flags (applied to every error message printed)
CLI_WORDING = (("restart=True / --restart", "--force"), ("pass restart=True", "pass --force"),
               ("or --restart", "or --force"), ("hemlp.load(path, allow_insecure=True); CLI: --insecure", "--insecure"),
               ("pass allow_insecure=True", "pass --insecure"), ("allow_insecure=True", "--insecure"))


def cli_wording(message: str) -> str:
    for api, flag in CLI_WORDING:
        message = message.replace(api, flag)
    return message


class CLIError(Exception):
    """A user-facing error: printed without a traceback, exit status 2."""


# ----------------------------------------------------------------------------------------------
# output helpers
class UI:
    def __init__(self, args):
        self.json = getattr(args, "json", False)
        self.quiet = getattr(args, "quiet", False)
        #: the verbose= of hemlp calls: --quiet hides their progress, else it shows on a terminal (hemlp.progress)
        self.verbose = False if self.quiet else None
        self.result: dict = {}

    def msg(self, text: str) -> None:
        if not self.quiet:
            print(text, file=sys.stderr, flush=True)

    @contextlib.contextmanager
    def step(self, desc: str):
        """A start and a done line (with seconds) around a step; the hemlp calls inside show their own progress
        (hemlp.progress: per layer, on a terminal), so no spinner competes with them for the line."""
        t0 = time.perf_counter()
        self.msg(f"{desc} ...")
        yield
        dt = time.perf_counter() - t0
        self.result.setdefault("seconds", {})[desc] = round(dt, 4)
        self.msg(f"{desc}: done in {dt:.2f} s")

    def finish(self, text_lines=()):
        if self.json:
            print(json.dumps(self.result, indent=1, default=str))
        else:
            for line in text_lines:
                print(line)


def check_new(path: Path, force: bool, what: str = "output") -> Path:
    path = Path(path)
    if path.exists() and not force:
        raise CLIError(f"{what} {path} exists; pass --force to overwrite it")
    return path


def fsize(path: Path) -> int:
    p = Path(path)
    return p.stat().st_size if p.is_file() else sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def human(n: int) -> str:
    for u in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or u == "GiB":
            return f"{n:.0f} {u}" if u == "B" else f"{n:.1f} {u}"
        n /= 1024


# ----------------------------------------------------------------------------------------------
# hemlp API access (the compiler and the runtime artefacts)
def compile_fn():
    from hemlp.model import compile

    return compile


def load_compiled(path, insecure: bool = False):
    """The compiled model directory under this user's security policy (--insecure: accept test presets)."""
    from hemlp.model import load

    path = Path(path)
    if not path.is_dir():
        raise CLIError(f"{path} is not a compiled model directory (create one with `hemlp compile`)")
    return load(path, allow_insecure=insecure)


def load_secret_key(path, compiled):
    return compiled.load_secret_key(path)


def load_eval_keys(path, compiled):
    return compiled.load_eval_keys(path)


def load_ciphertext(path, compiled):
    return compiled.load_encrypted(path)


def load_array(path) -> "np.ndarray":  # noqa: F821
    import numpy as np

    path = Path(path)
    try:
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as z:
                key = "x" if "x" in z.files else z.files[0]
                return np.asarray(z[key], dtype=np.float64)
        return np.asarray(np.load(path, allow_pickle=False), dtype=np.float64)
    except (OSError, ValueError) as exc:
        raise CLIError(f"cannot read input array {path}: {exc} (expected a .npy / .npz numpy file)") from None


def parse_shape(s: str) -> tuple:
    try:
        shape = tuple(int(v) for v in s.replace("x", ",").split(",") if v.strip())
    except ValueError:
        raise CLIError(f"--input-shape {s!r}: expected comma-separated integers such as 1,28,28") from None
    if not shape or min(shape) < 1:
        raise CLIError(f"--input-shape {s!r}: expected positive integers")
    return shape


#: byte units --node-memory accepts
BYTE_UNITS = {"": 1, "B": 1, "KB": 10 ** 3, "MB": 10 ** 6, "GB": 10 ** 9, "TB": 10 ** 12, "KIB": 2 ** 10,
              "MIB": 2 ** 20, "GIB": 2 ** 30, "TIB": 2 ** 40}


def parse_nodes(s: str):
    """--nodes: a positive int or 'auto'."""
    if s == "auto":
        return s
    try:
        n = int(s)
    except ValueError:
        n = 0
    if n < 1:
        raise CLIError(f"--nodes {s!r}: expected a number of nodes >= 1 or 'auto'")
    return n


def parse_bytes(s: str, flag: str):
    """A byte count with an optional unit (24GiB, 20GB, 25769803776) or 'auto'."""
    if s == "auto":
        return s
    t = s.strip().upper().replace(" ", "")
    num = t.rstrip("KMGTIB")
    unit = t[len(num):]
    try:
        value = float(num) * BYTE_UNITS[unit]
    except (ValueError, KeyError):
        raise CLIError(f"{flag} {s!r}: expected bytes, e.g. 25769803776, 24GiB or 20GB, or 'auto'") from None
    if not value >= 1:
        raise CLIError(f"{flag} {s!r}: expected a positive number of bytes")
    return int(value)


# ----------------------------------------------------------------------------------------------
# commands
def cmd_compile(args, ui: UI):
    import numpy as np

    out = check_new(args.output, args.force, "compiled model directory")
    client_out = check_new(args.client_output, args.force, "client artefact directory") if args.client_output else None
    model = Path(args.model)
    if not model.exists():
        raise CLIError(f"model file {model} not found")
    # activation ranges need representative inputs: --calibration (a shape-only compile works only for models
    # whose activations need no range, e.g. x^2; hemlp.compile raises CalibrationError otherwise)
    calibration = load_array(args.calibration) if args.calibration else None
    if args.example:
        example = load_array(args.example)
    elif calibration is not None:
        example = calibration[:1]
    elif args.input_shape:
        example = np.zeros((1,) + parse_shape(args.input_shape))
    else:
        raise CLIError("give calibration inputs (--calibration x.npy: >= 1000 representative samples, used for "
                       "activation ranges), an --example x.npy, or --input-shape C,H,W (models without ranged "
                       "activations only)")
    if model.suffix == ".onnx":
        src = str(model)
    elif model.suffix in (".pt", ".pth"):
        from hemlp.extras import require

        torch = require("torch", "compiling a torch.save'd model (.pt)")

        # A whole pickled nn.Module runs the file's code when loaded: only with the user's explicit trust.
        try:
            src = torch.load(str(model), weights_only=not args.trust_pickle)
        except Exception as exc:  # torch raises UnpicklingError (or RuntimeError in older versions) here
            if args.trust_pickle:
                raise
            raise CLIError(f"{model} is a pickled model: loading it would run code from the file ({exc.__class__.__name__})."
                           " Export ONNX instead, or pass --trust-pickle if you trust where the file comes from")
        if not isinstance(src, torch.nn.Module):
            raise CLIError(f"{model} holds a {type(src).__name__}, not a whole torch.nn.Module "
                           "(save with torch.save(model, path), or export ONNX)")
        src.eval()
    else:
        raise CLIError(f"{model}: expected an .onnx file or a torch.save'd nn.Module (.pt)")
    options = {}
    if calibration is not None:
        options["calibration"] = calibration
    if args.target_agreement is not None:
        options["target_agreement"] = args.target_agreement
    if args.preset:
        options["preset"] = args.preset
    if args.layout:
        options["layout"] = args.layout
    if args.nodes is not None:
        options["nodes"] = parse_nodes(args.nodes)
    if args.node_memory is not None:
        options["node_memory"] = parse_bytes(args.node_memory, "--node-memory")
    from hemlp.model import OPTIONS

    flags = {"preset": "--preset", "layout": "--layout", "allow_insecure": "--insecure", "nodes": "--nodes",
             "node_memory": "--node-memory"}
    for kv in args.option or []:
        if "=" not in kv:
            raise CLIError(f"--option {kv!r}: expected key=value")
        k, v = kv.split("=", 1)
        if k in flags:
            raise CLIError(f"--option {k}=...: use {flags[k]} instead")
        if k not in OPTIONS:
            raise CLIError(f"--option {k!r} is not a compile option; options: "
                           + ", ".join(sorted(set(OPTIONS) - set(flags))) + " (see `hemlp compile --help`)")
        try:
            options[k] = json.loads(v)
        except json.JSONDecodeError:
            options[k] = v
    fn = compile_fn()
    with ui.step("compile"):
        compiled = fn(src, example, batch_size=args.batch_size, allow_insecure=args.insecure, **options)
    import shutil

    if out.exists():
        shutil.rmtree(out) if out.is_dir() else out.unlink()
    compiled.save(out)
    lines = [str(compiled.plan), f"compiled model (server artefact, with the weights): {out} ({human(fsize(out))})"]
    if client_out is not None:
        if client_out.exists():
            shutil.rmtree(client_out) if client_out.is_dir() else client_out.unlink()
        compiled.save(client_out, client=True)
        ui.result.update(client_output=str(client_out), client_bytes=fsize(client_out))
        lines.append(f"client artefact (no weights: send this one to the client): {client_out} "
                     f"({human(fsize(client_out))})")
    ui.result.update(command="compile", output=str(out), bytes=fsize(out), batch_size=args.batch_size,
                     plan=str(compiled.plan), resources=compiled.plan.info.get("resources"),
                     nodes=compiled.plan.info.get("nodes"))
    ui.finish(lines)


def cmd_keygen(args, ui: UI):
    out = Path(args.output)
    sk_path, ek_path = out / "secret.key", out / "eval.keys"
    for p in (sk_path, ek_path):
        check_new(p, args.force, "key file")
    compiled = load_compiled(args.compiled, args.insecure)
    with ui.step("keygen"):
        sk, ek = compiled.keygen(verbose=ui.verbose)
    out.mkdir(parents=True, exist_ok=True)
    sk.save(sk_path)
    ek.save(ek_path, compiled.context)   # the context serialises a bootstrapped plan's bootstrapping keys
    ui.result.update(command="keygen", secret_key=str(sk_path), eval_keys=str(ek_path),
                     bytes={"secret_key": fsize(sk_path), "eval_keys": fsize(ek_path)})
    ui.finish([f"secret key (keep on the client): {sk_path} ({human(fsize(sk_path))})",
               f"evaluation keys (send to the server): {ek_path} ({human(fsize(ek_path))})"])


def cmd_encrypt(args, ui: UI):
    out = check_new(args.output, args.force, "ciphertext file")
    compiled = load_compiled(args.compiled, args.insecure)
    sk = load_secret_key(args.key, compiled)
    x = load_array(args.input)
    with ui.step(f"encrypt {tuple(x.shape)}"):
        ct = compiled.encrypt(x, sk, verbose=ui.verbose)
    out.parent.mkdir(parents=True, exist_ok=True)   # -o cts/x.ct: a directory for `hemlp batch -i cts/`
    ct.save(out)
    ui.result.update(command="encrypt", output=str(out), bytes=fsize(out), input_shape=list(x.shape))
    ui.finish([f"ciphertext: {out} ({human(fsize(out))})"])


def cmd_run(args, ui: UI):
    out = check_new(args.output, args.force, "ciphertext file")
    compiled = load_compiled(args.compiled, args.insecure)
    ek = load_eval_keys(args.eval_keys, compiled)
    ct = load_ciphertext(args.input, compiled)
    with ui.step("run (encrypted)"):
        y = compiled.run(ct, ek, verbose=ui.verbose)
    out.parent.mkdir(parents=True, exist_ok=True)
    y.save(out)
    ui.result.update(command="run", output=str(out), bytes=fsize(out))
    ui.finish([f"encrypted result: {out} ({human(fsize(out))})"])


def cmd_decrypt(args, ui: UI):
    import numpy as np

    out = check_new(args.output, args.force, "output file") if args.output else None
    compiled = load_compiled(args.compiled, args.insecure)
    sk = load_secret_key(args.key, compiled)
    ct = load_ciphertext(args.input, compiled)
    with ui.step("decrypt"):
        y = np.asarray(compiled.decrypt(ct, sk))
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "wb") as f:
            np.save(f, y)
    pred = y.reshape(len(y), -1).argmax(1).tolist() if y.ndim >= 1 and len(y) else []
    ui.result.update(command="decrypt", output=str(out) if out else None, shape=list(y.shape), argmax=pred)
    if args.json and args.values:
        ui.result["values"] = y.tolist()
    lines = [f"decrypted {tuple(y.shape)} -> {out}" if out else f"decrypted {tuple(y.shape)}",
             f"argmax: {pred}"]
    ui.finish(lines)


def cmd_batch(args, ui: UI):
    from hemlp.runtime import jobs

    runtime = args.runtime or ("ray" if args.address or args.workers else "local")
    if runtime == "local" and (args.address or args.workers):
        raise CLIError("--address and --workers are options of --runtime ray; --threads sets the local runtime's "
                       "threads")
    src = Path(args.inputs)
    inputs = sorted(src.glob("*.ct")) if src.is_dir() else [src]
    if not inputs or not all(p.is_file() for p in inputs):
        raise CLIError(f"no ciphertext files found at {src} (a file, or a directory of *.ct)")
    out = Path(args.output)
    resumable = (out / jobs.MANIFEST).is_file()
    if out.exists() and not args.force and not resumable and (out.is_file() or any(out.iterdir())):
        raise CLIError(f"output directory {out} exists and is not a batch job to resume; pass --force to reuse it")
    if runtime == "local":
        from hemlp.runtime.inprocess import InProcessItems

        executor = InProcessItems(args.threads)
        where = f"in this process ({executor.threads} threads per item)"
    else:
        from hemlp.runtime.ray import RayItems
        from hemlp.runtime.ray.session import import_ray

        import_ray()   # RuntimeUnavailableError naming the extra, before any work
        if args.threads is not None and args.threads < 1:
            raise CLIError(f"--threads must be >= 1, got {args.threads}")
        executor = RayItems(args.address, args.workers, args.threads or 1)
        where = "on Ray" + (f" at {args.address}" if args.address else "") + \
            (f" ({executor.threads} threads per item)" if executor.threads > 1 else "")
    if args.shared_keys is not None and runtime == "local":
        raise CLIError("--shared-keys is an option of --runtime ray (the workers of a machine share one key file)")
    shared = {None: None, "off": False, "tmp": True}.get(args.shared_keys, args.shared_keys)
    kw = dict(restart=bool(args.force), progress=not ui.quiet, allow_insecure=bool(args.insecure), executor=executor,
              shared_keys=shared)
    with ui.step(f"batch of {len(inputs)} ciphertext file(s) {where}" + (" (resuming)" if resumable and not args.force
                                                                        else "")):
        files = jobs.run_model_batch(str(args.compiled), str(args.eval_keys), inputs, out, **kw)
    ui.result.update(command="batch", runtime=runtime, outputs=[str(f) for f in files], output_dir=str(out))
    ui.finish([f"{len(files)} result(s) in {out}"])


def cmd_serve(args, ui: UI):
    path = Path(args.compiled)
    if not path.is_dir():
        raise CLIError(f"{path} is not a compiled model directory (from `hemlp compile`)")
    if args.no_ray:
        from hemlp.serving.http import LocalServer
        from hemlp.serving.service import ModelService

        with ui.step("load and prepare the model"):
            service = ModelService(path, args.insecure, args.max_body_bytes, args.max_keys,
                                   max_queued_jobs=args.max_queued_jobs, max_finished_jobs=args.max_finished_jobs,
                                   threads=args.threads)
        srv = LocalServer(service, args.host, args.port)
        ui.finish([f"serving {path} (model {service.model.model_id}) at {srv.url}/v1/ (no Ray; Ctrl-C stops)"])
        try:
            srv.serve_forever()
        finally:
            srv.close()
        return 0
    from hemlp.serving.ray_serve import serve

    with ui.step(f"deploy on Ray Serve ({args.replicas} replica(s))"):
        url = serve(path, args.host, args.port, args.replicas, args.address, args.insecure, args.max_body_bytes,
                    args.max_keys, blocking=False, max_queued_jobs=args.max_queued_jobs,
                    max_finished_jobs=args.max_finished_jobs, threads=args.threads, direct_port=args.direct_port)
    lines = [f"serving {path} at {url}/v1/ on Ray Serve (Ctrl-C stops)"]
    if args.direct_port is not None:
        lines.append(f"each replica also at http://{args.host}:{args.direct_port}/v1/ (no Ray proxy)")
    ui.finish(lines)
    try:
        while True:
            time.sleep(3600)
    finally:
        from ray import serve as ray_serve

        ray_serve.shutdown()
        _stop_ray()


def cmd_infer(args, ui: UI):
    import numpy as np

    from hemlp.serving.client import Client

    out = check_new(args.output, args.force, "output file")
    x = load_array(args.input)
    with ui.step(f"connect to {args.url}"):
        client = Client(args.url, args.compiled, allow_insecure=args.insecure)
        key_id = client.connect()
    jobs = -(-len(x) // client.batch_size) if x.ndim == len(client.model.input_shape) + 1 else 1
    how = f" ({jobs} jobs of up to {client.batch_size} samples)" if jobs > 1 else ""
    with ui.step(f"encrypted inference of {tuple(x.shape)} on the server{how}"):
        y = np.asarray(client.infer(x, progress=False if ui.quiet else None))   # a bar of jobs on a terminal
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as f:
        np.save(f, y)
    ui.result.update(command="infer", url=args.url, key_id=key_id, output=str(out), shape=list(y.shape),
                     argmax=y.reshape(len(y), -1).argmax(1).tolist())
    ui.finish([f"decrypted {tuple(y.shape)} -> {out}"])


def cmd_bench(args, ui: UI):
    cmd = [sys.executable, "-m", "hemlp.bench"] + args.bench_args
    return subprocess.call(cmd)


def cmd_calibrate(args, ui: UI):
    """Measure this machine's unit costs, bootstrap and batched ratios; write the planner's cost profile."""
    from hemlp.apps.calibrate import calibrate, print_comparison

    out = check_new(Path(args.output), args.force, "profile") if args.output else None
    boots = [b for b in (args.boot or "").split(",") if b]
    profile = calibrate(quick=args.quick, output=out, log=ui.msg, boot_presets=boots)
    ui.result.update(command="calibrate", path=profile.source, cpu_model=profile.cpu_model,
                     simd_path=profile.simd_path, unit_costs=profile.unit_costs)
    if ui.json:
        ui.finish()
    else:
        print_comparison(profile)


def cmd_demo(args, ui: UI):
    """Train a small HE-friendly net on real MNIST digits, compile it, and classify encrypted digits
    through files exactly as client and server would."""
    import tempfile

    import numpy as np

    try:
        import torch  # noqa: F401

        from hemlp.datasets import load_mnist_sample
        from hemlp.models import build
        from hemlp.models.train import predict, shift_augment, train
    except ImportError as exc:
        if args.export:
            raise CLIError(f"--export trains a model with torch ({exc}): pip install 'hemlp[ml]'") from None
        ui.msg(f"the model demo needs the ml extras ({exc}); running the core demo instead "
               "(pip install 'hemlp[ml]' for the full one)")
        from hemlp.apps import demo

        return demo.main([])
    from hemlp import progress

    files = None
    if args.export:
        out = Path(args.export)
        files = [check_new(out / f, args.force, "export file") for f in ("model.onnx", "calib.npy", "x.npy")]
    tr, te = load_mnist_sample(True), load_mnist_sample(False, limit=args.samples)
    model = build(args.model, (1, 28, 28), 10, seed=args.seed)
    x_train, y_train = shift_augment(tr.x, tr.y) if args.augment else (tr.x, tr.y)
    with ui.step(f"train {args.model} on {len(tr)} real MNIST digits{' + 6 shifted copies' if args.augment else ''} "
                 f"({args.epochs} epochs)"):
        train(model, x_train, y_train, epochs=args.epochs, lr=1e-2 if args.model == "fhe4dmm" else 2e-3,
              seed=args.seed, progress=progress.enabled(ui.verbose))
    if files is not None:
        return export_example(model, tr.x[:1000], te.x, files, ui)
    plain = predict(model, te.x).argmax(1)
    fn = compile_fn()
    n = len(te)
    with ui.step(f"compile (batch {n}{', INSECURE test parameters' if args.insecure else ', 128-bit'})"):
        compiled = fn(model, tr.x[:256], batch_size=n, allow_insecure=args.insecure)
    ui.msg(str(compiled.plan))
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        compiled.save(d / "model")
        with ui.step("client: keygen"):
            sk, ek = compiled.keygen()
        sk.save(d / "secret.key")
        ek.save(d / "eval.keys")
        with ui.step(f"client: encrypt {n} digits"):
            compiled.encrypt(te.x, sk).save(d / "x.ct")
        server = load_compiled(d / "model", args.insecure)
        with ui.step("server: run on ciphertexts (no secret key)"):
            y = server.run(load_ciphertext(d / "x.ct", server), load_eval_keys(d / "eval.keys", server))
            y.save(d / "y.ct")
        with ui.step("client: decrypt"):
            logits = np.asarray(compiled.decrypt(load_ciphertext(d / "y.ct", compiled), sk)).reshape(n, -1)
        sizes = {f.name: fsize(f) for f in d.iterdir()}
    pred = logits.argmax(1)
    acc_enc, acc_plain = float(np.mean(pred == te.y)), float(np.mean(plain == te.y))
    ui.result.update(command="demo", samples=n, accuracy_encrypted=acc_enc, accuracy_plaintext=acc_plain,
                     agreement=float(np.mean(pred == plain)), bytes=sizes)
    single = []
    if args.single > 0:
        import time

        with ui.step(f"single-image requests: compile for batch 1, keygen, classify {args.single} digits one by one"):
            one = fn(model, tr.x[:256], batch_size=1, allow_insecure=args.insecure)
            sk1, ek1 = one.keygen()
            one.prepare()
            lat, hits = [], 0
            for i in range(min(args.single, n)):
                ct = one.encrypt(te.x[i: i + 1], sk1)
                t0 = time.perf_counter()
                out = one.run(ct, ek1)
                lat.append(time.perf_counter() - t0)
                hits += int(np.asarray(one.decrypt(out, sk1)).reshape(-1).argmax() == plain[i])
        med = float(np.median(lat))
        ui.result.update(single_image=dict(layout=one.layout, n=len(lat), agreement=hits / len(lat),
                                           run_seconds_median=med))
        single = [f"one digit at a time (layout {one.layout_impl.label.strip('()')}, {one.preset}): "
                  f"{med * 1e3:.0f} ms per digit on the server (median of {len(lat)}), "
                  f"{hits} / {len(lat)} equal to plaintext"]
    ui.finish([f"labels:     {te.y[:20].tolist()}{' ...' if n > 20 else ''}",
               f"encrypted:  {pred[:20].tolist()}{' ...' if n > 20 else ''}",
               f"accuracy on {n} held-out digits: encrypted {acc_enc * 100:.1f} %, plaintext {acc_plain * 100:.1f} %",
               "files exchanged: " + ", ".join(f"{k} {human(v)}" for k, v in sorted(sizes.items()))] + single)


def export_example(model, calib, x, files, ui: UI) -> None:
    """The demo's trained model as ONNX, its calibration digits and a batch of test digits: the inputs of
    `hemlp compile` / `hemlp encrypt` (the README's command-line section starts here)."""
    import warnings

    import numpy as np
    import torch

    onnx_path, calib_path, x_path = files
    onnx_path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model.eval(), (torch.as_tensor(x[:1], dtype=torch.float32),), str(onnx_path), dynamo=False,
                          input_names=["x"], output_names=["logits"], dynamic_axes={"x": {0: "batch"}})
    np.save(calib_path, np.asarray(calib, dtype=np.float32))
    np.save(x_path, np.asarray(x, dtype=np.float32))
    ui.result.update(command="demo", export={str(f): fsize(f) for f in files})
    ui.finish([f"{onnx_path} ({human(fsize(onnx_path))}): the trained model",
               f"{calib_path}: {len(calib)} training digits (--calibration of hemlp compile)",
               f"{x_path}: {len(x)} test digits (hemlp encrypt's input; compile with --batch-size >= {len(x)})"])


# ----------------------------------------------------------------------------------------------
def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="hemlp", description=" ".join(__doc__.split("\n\n")[0].split()),
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[2:]))
    from hemlp import __version__

    ap.add_argument("--version", action="version", version=f"hemlp {__version__}", help="print the version and exit")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")

    def model_dir(p):
        p.add_argument("--insecure", action="store_true",
                       help="accept a model directory whose parameters are below 128-bit security (testing only)")
        p.add_argument("compiled", help="the compiled model directory (from `hemlp compile`)")

    def common(p, output=True, out_help="output file"):
        p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
        p.add_argument("-q", "--quiet", action="store_true", help="no progress or messages on stderr")
        if output:
            p.add_argument("-o", "--output", required=True, help=out_help)
            p.add_argument("--force", action="store_true", help="overwrite an existing output")

    p = sub.add_parser("compile", help="compile an ONNX / torch model into a deployable plan directory")
    p.add_argument("model", help="model.onnx, or a torch.save'd nn.Module (.pt)")
    p.add_argument("--input-shape", help="per-sample input shape, e.g. 1,28,28 (when no --example)")
    p.add_argument("--example", help=".npy with representative inputs (activation ranges)")
    p.add_argument("--calibration", metavar="FILE.npy",
                   help="(n, *input_shape) representative inputs, preprocessed like the ones you will encrypt "
                        "(>= 1000 to certify): activation ranges and degrees are fitted to them")
    p.add_argument("--target-agreement", type=float, default=None,
                   help="top-1 agreement with the model to reach on the calibration set (default 0.99)")
    p.add_argument("--batch-size", type=int, default=1, help="samples per encrypted batch")
    p.add_argument("--preset", help="CKKS preset (default: the compiler's 128-bit choice)")
    p.add_argument("--layout", default=None,
                   help="auto (default: the planner's cost estimate for --batch-size) or a layout of hemlp.layouts: "
                        "batch (one feature per ciphertext, large batches), packed (samples in the slots, one or a "
                        "few samples), mlwe (the batch along the coefficients); see docs/layouts.md")
    p.add_argument("--nodes", default=None, metavar="N|auto",
                   help="split each batch over N nodes (layout (A): ciphertext ranges and FHE4DMM row splits): the "
                        "plan prints each node's peak memory (keys once per node) and layout auto compares the "
                        "layouts by it; auto: the connected Ray cluster's live nodes")
    p.add_argument("--node-memory", default=None, metavar="BYTES|auto",
                   help="each node's memory, checked against its estimated peak before any key exists (bytes, or "
                        "with a unit: 24GiB, 20GB; auto: the smallest node of the connected Ray cluster, else this "
                        "machine; default: --nodes 1 checks the whole plan against this machine's memory)")
    p.add_argument("--option", action="append", metavar="KEY=VALUE",
                   help="another hemlp.compile option, repeatable, the value in JSON (e.g. activation_degree=15, "
                        "encrypted_weights=true); the options are listed in hemlp.model's docstring")
    p.add_argument("--insecure", action="store_true", help="allow INSECURE test presets (testing only)")
    p.add_argument("--trust-pickle", action="store_true",
                   help="load a torch.save'd nn.Module (.pt) although unpickling runs code from the file")
    p.add_argument("--client-output", metavar="DIR",
                   help="also write the client artefact here: plan, parameters and ranges without the weights "
                        "(what the client needs for keygen / encrypt / decrypt)")
    common(p, out_help="compiled model directory (the server artefact, with the weights)")
    p.set_defaults(fn=cmd_compile)

    p = sub.add_parser("keygen", help="client: secret key + evaluation keys for a compiled model")
    model_dir(p)
    common(p, out_help="key directory (secret.key, eval.keys)")
    p.set_defaults(fn=cmd_keygen)

    p = sub.add_parser("encrypt", help="client: encrypt a .npy batch of inputs")
    model_dir(p)
    p.add_argument("-k", "--key", required=True, help="secret.key")
    p.add_argument("-i", "--input", required=True, help="inputs .npy (batch, *input_shape)")
    common(p, out_help="ciphertext file")
    p.set_defaults(fn=cmd_encrypt)

    p = sub.add_parser("run", help="server: evaluate the model on a ciphertext file (no secret key)")
    model_dir(p)
    p.add_argument("-e", "--eval-keys", required=True, help="eval.keys")
    p.add_argument("-i", "--input", required=True, help="ciphertext file")
    common(p, out_help="result ciphertext file")
    p.set_defaults(fn=cmd_run)

    p = sub.add_parser("decrypt", help="client: decrypt a result ciphertext to .npy")
    model_dir(p)
    p.add_argument("-k", "--key", required=True, help="secret.key")
    p.add_argument("-i", "--input", required=True, help="result ciphertext file")
    p.add_argument("-o", "--output", help="output .npy (optional)")
    p.add_argument("--force", action="store_true", help="overwrite an existing output")
    p.add_argument("--values", action="store_true", help="with --json: include the decrypted values")
    common(p, output=False)
    p.set_defaults(fn=cmd_decrypt)

    p = sub.add_parser("batch", help="server: run many ciphertext files as a resumable job, in this process or on Ray")
    model_dir(p)
    p.add_argument("-e", "--eval-keys", required=True, help="eval.keys (from `hemlp keygen`)")
    p.add_argument("-i", "--inputs", required=True, help="a ciphertext file or a directory of *.ct")
    p.add_argument("--runtime", choices=("local", "ray"),
                   help="local: the items one after the other in this process, each on every core (the default); "
                        "ray: Ray tasks, one item each (the default when --address or --workers is given)")
    p.add_argument("--threads", type=int,
                   help="native threads per item: --runtime local default every core; --runtime ray default 1 (each "
                        "task holds that many CPUs: e.g. a node's cores when its memory holds one N16 item)")
    p.add_argument("--address", help="--runtime ray: the cluster to join (default: a local Ray for this command)")
    p.add_argument("--workers", type=int, help="--runtime ray: CPUs of the local Ray (default: every core)")
    p.add_argument("--shared-keys", metavar="FOLDER|tmp|off",
                   help="--runtime ray: how a machine's workers hold the evaluation keys: one key file they all map, "
                        "in FOLDER (private, mode 0700) or 'tmp' (the temporary folder, the default), or 'off' (a "
                        "decoded copy per worker)")
    common(p, out_help="output directory (an interrupted job resumes; --force starts it over)")
    p.set_defaults(fn=cmd_batch)

    p = sub.add_parser("serve", help="server: an encrypted-inference HTTP endpoint for a compiled model (Ray Serve)")
    model_dir(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--replicas", type=int, default=1, help="Ray Serve replicas of the model (default 1)")
    p.add_argument("--address", default=None, help="a Ray cluster to join (default: a local Ray)")
    p.add_argument("--no-ray", action="store_true", help="serve from this process, without Ray")
    p.add_argument("--direct-port", type=int, default=None,
                   help="Ray Serve: each replica also serves the API on this port of its node, without Ray's HTTP proxy "
                        "(the node's replicas share it; large uploads skip the proxy's transfer through Ray)")
    p.add_argument("--max-body-bytes", type=int, default=1 << 30, help="largest request body (default 1 GiB)")
    p.add_argument("--max-keys", type=int, default=8, help="evaluation-key sets kept (default 8)")
    p.add_argument("--max-queued-jobs", type=int, default=32,
                   help="jobs (POST /v1/jobs) waiting at once; beyond, 503 Busy (default 32)")
    p.add_argument("--max-finished-jobs", type=int, default=128,
                   help="finished jobs kept with their unfetched results, oldest out first (default 128)")
    p.add_argument("--threads", type=int, default=None,
                   help="native threads per evaluation (default: --no-ray every core; Ray Serve 1 per replica, each "
                        "replica holding that many CPUs)")
    common(p, output=False)
    p.set_defaults(fn=cmd_serve)

    p = sub.add_parser("infer", help="client: encrypted inference on a `hemlp serve` endpoint")
    model_dir(p)
    p.add_argument("--url", required=True, help="the server, e.g. http://127.0.0.1:8000")
    p.add_argument("-i", "--input", required=True, help="inputs .npy (batch, *input_shape)")
    common(p, out_help="decrypted outputs .npy")
    p.set_defaults(fn=cmd_infer)

    p = sub.add_parser("bench", help="benchmarks (runs python -m hemlp.bench with the remaining arguments)",
                       add_help=False)
    p.add_argument("bench_args", nargs=argparse.REMAINDER,
                   help="a benchmark and its options (`hemlp bench --help` lists them)")
    p.set_defaults(fn=cmd_bench)

    p = sub.add_parser("calibrate", help="measure this machine's costs for the planner (a few minutes, one thread) "
                                         "and write its cost profile to the user cache")
    p.add_argument("--quick", action="store_true", help="tiny repeat counts (seconds, noisy: for tests)")
    p.add_argument("-o", "--output", help="write the profile here instead of the user cache (HEMLP_COST_PROFILE=PATH "
                                          "then selects it)")
    p.add_argument("--force", action="store_true", help="overwrite an existing --output")
    p.add_argument("--boot", default=None, metavar="PRESETS",
                   help="comma-separated bootstrapping presets whose single bootstrap is measured here too instead of "
                        "derived from test-N12-boot's (N16-boot: a few minutes and ~10 GiB; refused up front when the "
                        "machine lacks the memory)")
    common(p, output=False)
    p.set_defaults(fn=cmd_calibrate)

    p = sub.add_parser("demo", help="train, compile and classify encrypted MNIST digits end to end")
    p.add_argument("--model", choices=("fhe4dmm", "mlp", "mlp-poly", "cifar-cnn"), default="fhe4dmm",
                   help="the network to train (hemlp.models; default fhe4dmm)")
    p.add_argument("--epochs", type=int, default=10, help="training epochs (default 10)")
    p.add_argument("--augment", action=argparse.BooleanOptionalAction, default=True,
                   help="train on one-pixel shifted copies too (~97.6%% instead of ~96%% for the MLP)")
    p.add_argument("--samples", type=int, default=1000,
                   help="held-out digits classified under encryption (all 1000 fit one batch of slots)")
    p.add_argument("--single", type=int, default=10,
                   help="then classify this many digits one at a time with a batch-1 model (layout P); 0: skip")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and the data order (default 0)")
    p.add_argument("--insecure", action="store_true", help="INSECURE small parameters (fast; testing only)")
    p.add_argument("--export", metavar="DIR",
                   help="train, then write DIR/model.onnx, DIR/calib.npy (1000 training digits) and DIR/x.npy (the "
                        "first --samples test digits) for the other commands, and stop")
    p.add_argument("--force", action="store_true", help="--export: overwrite existing files")
    common(p, output=False)
    p.set_defaults(fn=cmd_demo)
    return ap


def main(argv=None) -> int:
    # OpenMP threads that spin at barriers collapse when other processes share the cores (2-thread ops 8x
    # slower on a loaded machine); sleeping waiters cost microseconds per region. An application's choice, so
    # made here, before the native core loads, not by `import hemlp`; users may override it.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:  # pass everything (including --help) through to python -m hemlp.bench
        return subprocess.call([sys.executable, "-m", "hemlp.bench"] + argv[1:])
    ap = parser()
    args = ap.parse_args(argv)
    if not getattr(args, "fn", None):
        ap.print_help()
        return 2
    ui = UI(args)
    from hemlp.errors import HemlpError

    previous = signal.signal(signal.SIGTERM, _terminated)   # `kill` cleans up as Ctrl-C does
    try:
        rc = args.fn(args, ui)
        return int(rc or 0)
    except (CLIError, HemlpError, FileNotFoundError) as exc:
        message = cli_wording(str(exc))
        if getattr(args, "json", False):
            print(json.dumps({"command": args.command, "error": type(exc).__name__, "message": message}))
        print(f"hemlp {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        _stop_ray()
        print("terminated" if isinstance(exc, Terminated) else "interrupted", file=sys.stderr)
        return 143 if isinstance(exc, Terminated) else 130
    finally:
        signal.signal(signal.SIGTERM, previous)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is so that its cleanup (finally blocks, Ray shutdown) runs."""


def _terminated(signum, frame):
    raise Terminated()


def _stop_ray() -> None:
    """Shut down the local Ray this process started (its raylet, GCS and workers would otherwise linger)."""
    session = sys.modules.get("hemlp.runtime.ray.session")
    if session is not None:
        session.shutdown_local()


if __name__ == "__main__":
    sys.exit(main())
