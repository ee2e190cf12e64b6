"""The encrypted-inference service behind ``hemlp serve``: one compiled model (the server artefact), evaluation keys
uploaded once per client and named by their content hash, ciphertexts in, ciphertexts out.

``ModelService.handle(method, path, query, body)`` is the whole HTTP API, independent of the server that carries it
(Ray Serve in hemlp.serving.ray_serve, or the standard library's threading HTTP server in hemlp.serving.http):

    GET  /v1/health            {"status": "ok", "model_id": ...}
    GET  /v1/model             the model's public description: shapes, batch size, preset and security, layout,
                               expected key / ciphertext sizes, the body limit
    POST /v1/keys              body: the evaluation keys (``EvalKeys.to_bytes``) -> 201 {"key_id": sha256 of the body}
    POST /v1/infer?key=ID      body: an encrypted input batch (``EncryptedBatch.to_bytes``) -> 200, the encrypted
                               result batch (application/octet-stream)

Every failure is a typed JSON error ``{"error": <exception name>, "message": ...}`` with a 4xx status that says
whose fault it is (400 a malformed or corrupted body, 404 an unknown key id or route, 405 a method, 409 keys or
ciphertexts of another model or key pair, 413 a body over the limit); nothing else happens: the keys and the model
stay as they were, and no traceback or secret leaves the server (it holds none: the client keeps its secret key).
"""
from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from pathlib import Path

from hemlp.errors import (ClientArtefactError, ContextMismatchError, EncodingError, HemlpError, KeyMismatchError,
                          LevelError, MissingKeyError, ParameterError, ScaleMismatchError, SerializationError,
                          ShapeError)

__all__ = ["ModelService", "MemoryKeyStore", "HttpError", "DEFAULT_MAX_BODY_BYTES", "DEFAULT_MAX_KEYS"]

#: the largest request body accepted (evaluation keys of a bootstrapped N = 2^16 plan are several GiB: raise it there)
DEFAULT_MAX_BODY_BYTES = 1 << 30
#: evaluation-key sets kept loaded, least recently used out first
DEFAULT_MAX_KEYS = 8

#: exception type -> HTTP status: the client's fault, each with its own code
STATUS = ((KeyMismatchError, 409), (MissingKeyError, 409), (ContextMismatchError, 409),
          (SerializationError, 400), (ShapeError, 400), (EncodingError, 400), (ParameterError, 400),
          (LevelError, 400), (ScaleMismatchError, 400))


class HttpError(HemlpError):
    """A request the service refuses, with its HTTP status."""

    def __init__(self, status: int, message: str, name: str | None = None):
        super().__init__(message)
        self.status, self.name = int(status), name or type(self).__name__


class MemoryKeyStore:
    """Evaluation keys (serialised, or loaded) by key id, in this process (bounded: least recently used out first)."""

    def __init__(self, max_keys: int = DEFAULT_MAX_KEYS):
        self.max_keys = int(max_keys)
        self._keys: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def put(self, key_id: str, data: bytes) -> None:
        with self._lock:
            self._keys[key_id] = data
            self._keys.move_to_end(key_id)
            while len(self._keys) > self.max_keys:
                self._keys.popitem(last=False)

    def get(self, key_id: str):
        with self._lock:
            data = self._keys.get(key_id)
            if data is not None:
                self._keys.move_to_end(key_id)
            return data


def _json(status: int, obj) -> tuple[int, str, bytes]:
    return status, "application/json", json.dumps(obj).encode()


class ModelService:
    """One compiled model served over the API above. ``key_store``: where uploaded keys live (default: this
    process; hemlp.serving.ray_serve shares one store among replicas)."""

    def __init__(self, model_dir, allow_insecure: bool = False, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                 max_keys: int = DEFAULT_MAX_KEYS, key_store=None):
        import hemlp

        self.model_dir = Path(model_dir)
        self.model = hemlp.load(self.model_dir, allow_insecure=allow_insecure)
        if self.model.client_only:
            raise ClientArtefactError(f"{self.model_dir} is a client artefact (no weights): serve the server artefact "
                                      "(compiled.save(dir) without client=True)")
        self.model.prepare(verbose=False)                     # encode the weights once, for every request
        self.max_body_bytes, self.max_keys = int(max_body_bytes), int(max_keys)
        self.key_store = key_store if key_store is not None else MemoryKeyStore(max_keys)
        self._loaded = MemoryKeyStore(max_keys)               # key id -> EvalKeys, this process's cache
        self._lock = threading.Lock()                         # one evaluation at a time per process

    # ---- the API
    def handle(self, method: str, path: str, query: dict, body: bytes) -> tuple[int, str, bytes]:
        """(status, content type, body) of one request; never raises."""
        try:
            return self._route(method.upper(), path.rstrip("/") or "/", query, body)
        except HttpError as e:
            return _json(e.status, dict(error=e.name, message=str(e)))
        except HemlpError as e:
            status = next((code for cls, code in STATUS if isinstance(e, cls)), 400)
            return _json(status, dict(error=type(e).__name__, message=str(e)))
        except Exception as e:  # noqa: BLE001 - a request must never take the service down or leak a traceback
            return _json(500, dict(error="InternalError", message=f"the server failed on this request "
                                                                  f"({type(e).__name__}); see its log"))

    def _route(self, method, path, query, body):
        routes = {"/v1/health": ("GET", self._health), "/v1/model": ("GET", self._meta),
                  "/v1/keys": ("POST", self._put_keys), "/v1/infer": ("POST", self._infer)}
        if path not in routes:
            raise HttpError(404, f"no route {path!r}; the API: " + ", ".join(f"{m} {p}" for p, (m, _) in
                                                                                routes.items()), "NotFound")
        want, fn = routes[path]
        if method != want:
            raise HttpError(405, f"{path} takes {want}, not {method}", "MethodNotAllowed")
        if len(body) > self.max_body_bytes:
            raise HttpError(413, f"the body has {len(body)} bytes, above this server's limit of {self.max_body_bytes}",
                            "PayloadTooLarge")
        return fn(query, body)

    def _health(self, query, body):
        return _json(200, dict(status="ok", model_id=self.model.model_id))

    def _meta(self, query, body):
        return _json(200, self.describe())

    def describe(self) -> dict:
        """What a client may know before sending anything: the plan's public side."""
        m, info = self.model, self.model.plan.info
        r = m.plan.resources
        return dict(model_id=m.model_id, input_shape=list(m.input_shape), output_shape=list(m.output_shape),
                    batch_size=m.batch_size, preset=m.preset, security=info.get("security"), layout=m.layout,
                    N=info.get("N"), max_body_bytes=self.max_body_bytes,
                    expected_bytes=None if r is None else dict(eval_keys=r.eval_key_bytes, upload=r.upload_bytes,
                                                               download=r.download_bytes))

    def _put_keys(self, query, body):
        from hemlp.runtime.artifacts import EvalKeys

        if not body:
            raise HttpError(400, "the body is empty: send the evaluation keys (EvalKeys.to_bytes / eval.keys)",
                            "EmptyBody")
        key_id = hashlib.sha256(body).hexdigest()[:32]
        keys = EvalKeys.from_bytes(body, self.model)          # checks format, checksum, model and parameters
        self.key_store.put(key_id, bytes(body))
        self._loaded.put(key_id, keys)
        return _json(201, dict(key_id=key_id))

    def _keys(self, key_id: str):
        from hemlp.runtime.artifacts import EvalKeys

        keys = self._loaded.get(key_id)
        if keys is not None:
            return keys
        data = self.key_store.get(key_id)
        if data is None:
            raise HttpError(404, f"no evaluation keys with id {key_id!r} on this server (evicted or never "
                                 "uploaded): POST them to /v1/keys first", "UnknownKey")
        keys = EvalKeys.from_bytes(data, self.model)
        self._loaded.put(key_id, keys)
        return keys

    def _infer(self, query, body):
        from hemlp.runtime.artifacts import EncryptedBatch

        key_id = query.get("key")
        if not key_id:
            raise HttpError(400, "name the evaluation keys: POST /v1/infer?key=<key_id from /v1/keys>", "MissingKeyId")
        keys = self._keys(str(key_id))
        if not body:
            raise HttpError(400, "the body is empty: send an encrypted input batch (compiled.encrypt(...).to_bytes())",
                            "EmptyBody")
        ct = EncryptedBatch.from_bytes(body, self.model)
        with self._lock:
            out = self.model.run(ct, keys)
        return 200, "application/octet-stream", out.to_bytes()
