"""Serving overhead and throughput of ``hemlp serve`` on loopback.

    python -m hemlp.bench serve [--ray --replicas 2] [--clients 1,4,16] [--json bench/serve_N14.json]

The demo's MLP (hemlp.models "mlp", 784 inputs, 10 classes, seeded weights; the serving path does not depend on the
weights) compiled for batch size 1 at the default 128-bit preset, served from a fresh server (the standard library's
threading server, or Ray Serve with ``--ray``). Each client process-thread keygens and uploads its evaluation keys
once, then sends ``--requests`` encrypted single-image requests back to back. Reported per concurrency level:
requests per second over the whole level, and the p50 / p99 latency of one request as the client sees it (encrypt,
send, evaluate, receive, decrypt). Beside them, the same request in process (encrypt, run, decrypt, no HTTP): the
serving overhead is p50 over-the-wire latency / in-process latency - 1.
"""
from __future__ import annotations

import statistics
import tempfile
import threading
import time
import warnings
from pathlib import Path

import numpy as np

from hemlp.apps.bench import report

HELP = "hemlp serve on loopback: requests/s and p50/p99 latency at several concurrent clients, overhead vs in-process"


def add_arguments(p) -> None:
    p.add_argument("--clients", default="1,4,16", help="comma-separated concurrent client counts")
    p.add_argument("--requests", type=int, default=8, help="requests per client at each level")
    p.add_argument("--ray", action="store_true", help="serve on Ray Serve (default: the threading server)")
    p.add_argument("--replicas", type=int, default=1, help="Ray Serve replicas (--ray)")
    p.add_argument("--preset", default=None, help="CKKS preset (default: the compiler's 128-bit choice)")
    p.add_argument("--json", default=None)


def _model(preset):
    import torch

    import hemlp
    from hemlp.models import build

    torch.manual_seed(0)
    model = build("mlp", (1, 28, 28), 10, seed=0).eval()
    x = np.random.default_rng(0).uniform(0, 1, (256, 1, 28, 28))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kw = dict(preset=preset) if preset else {}
        return hemlp.compile(model, x[:1], calibration=x, batch_size=1, **kw), x


def _percentile(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


def main(args) -> int:
    import hemlp
    from hemlp.serving import Client, ModelService
    from hemlp.serving.http import LocalServer

    hemlp.set_num_threads(1)
    cm, x = _model(args.preset)
    d = Path(tempfile.mkdtemp(prefix="hemlp-serve-bench-"))
    cm.save(d / "server")
    cm.save(d / "client", client=True)
    # in process: the same request without HTTP
    sk, ek = cm.keygen()
    local = []
    for i in range(max(5, args.requests)):
        t0 = time.perf_counter()
        cm.decrypt(cm.run(cm.encrypt(x[i:i + 1], sk), ek), sk)
        local.append(time.perf_counter() - t0)
    srv, url = None, None
    if args.ray:
        import ray

        from hemlp.serving.ray_serve import serve

        ray.init(include_dashboard=False, log_to_driver=False)
        url = serve(d / "server", port=8765, replicas=args.replicas, blocking=False)
    else:
        srv = LocalServer(ModelService(d / "server"), port=0).start()
        url = srv.url
    rows = []
    try:
        for n in [int(c) for c in args.clients.split(",")]:
            clients = [Client(url, d / "client") for _ in range(n)]
            for c in clients:                              # keygen and key upload once per client, not timed
                c.connect()
            lat: list = []
            lock = threading.Lock()

            def work(c, k):
                for j in range(args.requests):
                    t0 = time.perf_counter()
                    c.infer(x[(k + j) % len(x):(k + j) % len(x) + 1])
                    with lock:
                        lat.append(time.perf_counter() - t0)

            threads = [threading.Thread(target=work, args=(c, k)) for k, c in enumerate(clients)]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.perf_counter() - t0
            rows.append(dict(clients=n, requests=len(lat), requests_per_second=len(lat) / wall,
                             p50_s=_percentile(lat, 0.5), p99_s=_percentile(lat, 0.99),
                             overhead_p50=_percentile(lat, 0.5) / statistics.median(local) - 1.0))
            print(rows[-1], flush=True)
    finally:
        if srv is not None:
            srv.close()
        if args.ray:
            from ray import serve as ray_serve

            ray_serve.shutdown()
            ray.shutdown()
    report.table(["clients", "requests", "req/s", "p50 ms", "p99 ms", "overhead (p50)"],
                 [[r["clients"], r["requests"], f"{r['requests_per_second']:.2f}", f"{r['p50_s'] * 1e3:.0f}",
                   f"{r['p99_s'] * 1e3:.0f}", f"{r['overhead_p50']:+.0%}"] for r in rows],
                 title=f"hemlp serve ({'Ray Serve, %d replica(s)' % args.replicas if args.ray else 'threading server'}, "
                       f"{cm.preset}, {cm.plan.info['security']}, loopback)")
    payload = dict(measured=True, server="ray-serve" if args.ray else "threading", replicas=args.replicas if args.ray
                   else 1, preset=cm.preset, security=cm.plan.info["security"], layout=cm.layout, batch_size=1,
                   native_threads=1, in_process_median_s=statistics.median(local), in_process_samples=local, rows=rows,
                   note="latency: encrypt + send + evaluate + receive + decrypt as the client sees it, loopback, "
                        "clients as threads of one process; the server evaluates one request at a time per process")
    if args.json:
        report.save_json(args.json, "serve", payload, machine=report.machine_info())
    return 0
