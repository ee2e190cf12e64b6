"""A ModelService on Ray Serve (``hemlp serve``): ``--replicas`` copies of the model, each with its weights encoded
once, behind Ray Serve's HTTP proxy. What must survive a request landing on another replica lives in two actors that
every replica calls: the uploaded evaluation keys (one key-store actor; each replica keeps the keys it has loaded)
and the jobs (one job-store actor, hemlp.serving.jobs: the queue, each job's status and its result until fetched).
Each replica runs a job worker that takes the next queued job from that shared queue, so a job submitted through one
replica runs on whichever replica is free and is polled and fetched through any of them. Local Ray by default,
``address`` joins a cluster.

Ray Serve's HTTP proxy hands a request's body to the replica through Ray (actor calls returning the pieces it read,
through the object store): for the demo's 10 MB encrypted upload that costs more than the rest of the serving path
together (docs/serving.md). ``direct_port``: each replica also serves the same API itself, on that port of its node
(hemlp.serving.http, the port shared by the node's replicas with SO_REUSEPORT: the kernel spreads the connections
over them), so a client there skips the proxy; the proxy's port keeps working.

Ray starts its worker processes at nice 15 (its ``worker_niceness``): a replica, which does the service's work, then
gets a fraction of a core shared with any ordinary process. A local Ray started here runs its workers at nice 0, and
each replica asks for nice 0 itself (allowed where the user may raise priority; on a cluster start the nodes with
``RAY_worker_niceness=0 ray start ...``).

A job's input batch goes to the job-store actor as a numpy array (through Ray's object store, not pickled bytes;
the actor keeps a copy, so the job outlives the replica that received it), and comes back to a worker only when
that worker did not decode and check the batch itself at submission (ModelService keeps the latest ones it
decoded: a job run where it was submitted is not fetched, hashed or imported again)."""
from __future__ import annotations

from hemlp.serving.jobs import DEFAULT_LEASE_S, DEFAULT_MAX_FINISHED_JOBS, DEFAULT_MAX_QUEUED_JOBS, MemoryJobStore
from hemlp.serving.service import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_KEYS, MemoryKeyStore

__all__ = ["serve", "start_ray", "APP_NAME", "ActorProxy", "SharedJobStore"]

APP_NAME = "hemlp"
#: calls the job-store actor serves at once: each replica's worker waits on it for the next job, and each
#: GET /v1/jobs/ID/result?wait=S waits on it for its job
JOB_STORE_CONCURRENCY = 128
#: requests one replica holds at once (Ray Serve's default is 5): long polls wait there without evaluating, and
#: evaluations queue on the replica's lock either way
MAX_ONGOING_REQUESTS = 32


class ActorProxy:
    """A key or job store whose methods run on a shared Ray actor: ``proxy.get(k)`` is
    ``ray.get(actor.get.remote(k))``."""

    def __init__(self, actor):
        self.actor = actor

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        import ray

        method = getattr(self.actor, name)
        return lambda *args: ray.get(method.remote(*args))


class SharedJobStore(MemoryJobStore):
    """The MemoryJobStore of the job-store actor: it keeps its own copy of a job's body (the call's argument, a
    numpy array, arrives as a view of Ray's object store, which belongs to the replica that sent it)."""

    def submit(self, key_id: str, body, origin: str | None = None) -> str | None:
        import numpy as np

        return super().submit(key_id, np.array(body, np.uint8, copy=True), origin)


def start_ray(address: str | None = None) -> None:
    """ray.init for serving, unless Ray runs already: a local Ray (address None) with its workers at nice 0 (see the
    module docstring), or the cluster at ``address``."""
    import ray

    if not ray.is_initialized():
        local = {} if address else dict(_system_config={"worker_niceness": 0})
        ray.init(address=address, include_dashboard=False, log_to_driver=False, **local)


def _normal_priority() -> None:
    """This process at nice 0, where it may raise its priority (a Ray worker starts at nice 15)."""
    import os

    try:
        if os.getpriority(os.PRIO_PROCESS, 0) > 0:
            os.setpriority(os.PRIO_PROCESS, 0, 0)
    except OSError:         # not allowed (no CAP_SYS_NICE): the cluster's worker_niceness stays
        pass


def _deployment(serve_mod, replicas: int, threads: int | None):
    from starlette.requests import Request
    from starlette.responses import Response

    @serve_mod.deployment(num_replicas=int(replicas), ray_actor_options={"num_cpus": threads or 1},
                          max_ongoing_requests=MAX_ONGOING_REQUESTS)
    class HemlpModel:
        def __init__(self, model_dir: str, allow_insecure: bool, max_body_bytes: int, max_keys: int, keys, jobs,
                     direct=None):
            from hemlp.serving.service import ModelService

            _normal_priority()
            self.service = ModelService(model_dir, allow_insecure, max_body_bytes, max_keys, ActorProxy(keys),
                                        ActorProxy(jobs), threads=threads)
            self.service.start_jobs()           # this replica takes queued jobs, whichever replica received them
            self.direct = None
            if direct is not None:              # (host, port): the API without Ray's proxy, the port shared
                from hemlp.serving.http import LocalServer

                self.direct = LocalServer(self.service, *direct, shared_port=True).start()

        def __del__(self):                      # Ray Serve's replica shutdown
            if getattr(self, "direct", None) is not None:
                self.direct.close()

        async def __call__(self, request: Request) -> Response:
            import json

            from starlette.concurrency import run_in_threadpool

            limit = self.service.max_body_bytes
            too_large = Response(json.dumps(dict(error="PayloadTooLarge", message=f"the body exceeds this server's "
                                                 f"limit of {limit} bytes")), 413, media_type="application/json")
            body = b""
            if request.method == "POST":
                n = request.headers.get("content-length")
                n = int(n) if n is not None and n.isdigit() else None
                if n is not None and n > limit:             # refused before a byte is read
                    return too_large
                # copied once into one buffer, hashed (and a batch's ciphertexts imported) as the proxy hands the
                # pieces over: the container's checksum is known when its last piece is in
                receiver = self.service.receiver(request.method, request.url.path, dict(request.query_params), n)
                async for chunk in request.stream():       # a body without a length is capped as it arrives
                    if receiver.received + len(chunk) > limit:
                        return too_large
                    try:
                        receiver.feed(chunk)
                    except ValueError as e:                # more than the Content-Length announced
                        return Response(json.dumps(dict(error="BadRequest", message=str(e))), 400,
                                        media_type="application/json")
                try:
                    body = receiver.finish()
                except ValueError as e:                    # fewer: the client stopped sending
                    return Response(json.dumps(dict(error="TruncatedBody", message=str(e))), 400,
                                    media_type="application/json")
            status, ctype, payload = await run_in_threadpool(self.service.handle, request.method, request.url.path,
                                                             dict(request.query_params), body)
            return Response(payload, status, media_type=ctype)

    return HemlpModel


def serve(model_dir, host: str = "127.0.0.1", port: int = 8000, replicas: int = 1, address: str | None = None,
          allow_insecure: bool = False, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, max_keys: int = DEFAULT_MAX_KEYS,
          blocking: bool = True, max_queued_jobs: int = DEFAULT_MAX_QUEUED_JOBS,
          max_finished_jobs: int = DEFAULT_MAX_FINISHED_JOBS, threads: int | None = None,
          direct_port: int | None = None) -> str:
    """Deploy the model on Ray Serve at http://host:port/ and return that URL (blocking=True: serve until
    interrupted). The model directory must be readable by every node (a shared path on a cluster). threads: native
    threads per evaluation, each replica holding that many CPUs (None: 1, Ray's count for a 1-CPU actor).
    direct_port: each replica also serves the API at http://host:direct_port/ on its node, without Ray's proxy (see
    the module docstring; across nodes, a load balancer in front)."""
    from pathlib import Path

    from hemlp.runtime.ray.session import import_ray

    ray = import_ray()
    try:
        from ray import serve as serve_mod
    except ImportError:
        from hemlp.runtime.ray.session import RuntimeUnavailableError

        raise RuntimeUnavailableError("hemlp serve needs Ray Serve: pip install 'ray[serve]' (or serve without Ray: "
                                      "hemlp serve --no-ray)") from None
    start_ray(address)
    keys = ray.remote(num_cpus=0)(MemoryKeyStore).remote(max_keys)
    # a threaded actor: claims and long polls block in it, each on a thread of its own, until a job arrives or ends
    jobs = ray.remote(num_cpus=0, max_concurrency=JOB_STORE_CONCURRENCY)(SharedJobStore).remote(
        max_queued_jobs, max_finished_jobs, DEFAULT_LEASE_S)
    serve_mod.start(http_options={"host": host, "port": int(port)})
    direct = None if direct_port is None else (host, int(direct_port))
    app = _deployment(serve_mod, replicas, threads).bind(str(Path(model_dir).resolve()), bool(allow_insecure),
                                                         int(max_body_bytes), int(max_keys), keys, jobs, direct)
    serve_mod.run(app, name=APP_NAME, route_prefix="/", blocking=False)
    url = f"http://{host}:{int(port)}"
    if blocking:
        import time

        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            serve_mod.shutdown()
    return url
