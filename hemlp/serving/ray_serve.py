"""A ModelService on Ray Serve (``hemlp serve``): ``--replicas`` copies of the model, each with its weights encoded
once, behind Ray Serve's HTTP proxy; the uploaded evaluation keys live in one key-store actor that every replica reads
(a key uploaded through one replica serves requests landing on any other), and each replica keeps the keys it has
loaded. Local Ray by default, ``address`` joins a cluster."""
from __future__ import annotations

from hemlp.serving.service import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_KEYS

__all__ = ["serve", "APP_NAME"]

APP_NAME = "hemlp"


def _deployment(serve_mod, ray, replicas: int):
    from starlette.requests import Request
    from starlette.responses import Response

    @serve_mod.deployment(num_replicas=int(replicas), ray_actor_options={"num_cpus": 1})
    class HemlpModel:
        def __init__(self, model_dir: str, allow_insecure: bool, max_body_bytes: int, max_keys: int, store):
            from hemlp.serving.service import ModelService

            class ActorStore:                   # the shared key store, through its actor
                def put(self, key_id, data):
                    ray.get(store.put.remote(key_id, data))

                def get(self, key_id):
                    return ray.get(store.get.remote(key_id))

            self.service = ModelService(model_dir, allow_insecure, max_body_bytes, max_keys, ActorStore())

        async def __call__(self, request: Request) -> Response:
            import json

            from starlette.concurrency import run_in_threadpool

            limit = self.service.max_body_bytes
            too_large = Response(json.dumps(dict(error="PayloadTooLarge", message=f"the body exceeds this server's "
                                                 f"limit of {limit} bytes")), 413, media_type="application/json")
            body = b""
            if request.method == "POST":
                n = request.headers.get("content-length")
                if n is not None and n.isdigit() and int(n) > limit:      # refused before a byte is read
                    return too_large
                chunks, size = [], 0
                async for chunk in request.stream():       # a body without a length is capped as it arrives
                    size += len(chunk)
                    if size > limit:
                        return too_large
                    chunks.append(chunk)
                body = b"".join(chunks)
            status, ctype, payload = await run_in_threadpool(self.service.handle, request.method, request.url.path,
                                                             dict(request.query_params), body)
            return Response(payload, status, media_type=ctype)

    return HemlpModel


def serve(model_dir, host: str = "127.0.0.1", port: int = 8000, replicas: int = 1, address: str | None = None,
          allow_insecure: bool = False, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, max_keys: int = DEFAULT_MAX_KEYS,
          blocking: bool = True) -> str:
    """Deploy the model on Ray Serve at http://host:port/ and return that URL (blocking=True: serve until
    interrupted). The model directory must be readable by every node (a shared path on a cluster)."""
    from pathlib import Path

    from hemlp.runtime.ray.session import import_ray

    ray = import_ray()
    try:
        from ray import serve as serve_mod
    except ImportError:
        from hemlp.runtime.ray.session import RuntimeUnavailableError

        raise RuntimeUnavailableError("hemlp serve needs Ray Serve: pip install 'ray[serve]' (or serve without Ray: "
                                      "hemlp serve --no-ray)") from None
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False)

    @ray.remote(num_cpus=0)
    class KeyStore:
        def __init__(self, max_keys: int):
            from hemlp.serving.service import MemoryKeyStore

            self.store = MemoryKeyStore(max_keys)

        def put(self, key_id, data):
            self.store.put(key_id, data)

        def get(self, key_id):
            return self.store.get(key_id)

    store = KeyStore.remote(max_keys)
    serve_mod.start(http_options={"host": host, "port": int(port)})
    app = _deployment(serve_mod, ray, replicas).bind(str(Path(model_dir).resolve()), bool(allow_insecure),
                                                     int(max_body_bytes), int(max_keys), store)
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
