"""The client of ``hemlp serve``: ``Client(url, model)`` holds the secret key, uploads the evaluation keys once, and
``infer(x)`` encrypts, sends, receives and decrypts. Standard library HTTP only (the client needs no server packages).
``model``: the client artefact directory (or any compiled model: it uses only the plan, parameters and ranges)."""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import numpy as np

from hemlp.errors import HemlpError, KeyMismatchError

__all__ = ["Client", "ServerError", "ServerUnavailableError"]


class ServerUnavailableError(HemlpError, ConnectionError):
    """No server answers at the client's URL."""


class ServerError(HemlpError):
    """The server refused a request: its HTTP status, error name and message."""

    def __init__(self, status: int, name: str, message: str):
        super().__init__(f"{name} ({status}): {message}")
        self.status, self.name, self.detail = status, name, message


#: retries of an inference after a server error (5xx: a replica dying mid-request, a gateway) or a dropped
#: connection, with backoff; inference is pure, so a retry can only cost time
RETRIES = 3


class Client:
    """``Client(url, model)``: see the module docstring. An inference is idempotent (the same ciphertext gives the
    same result), so it is retried after a server error (5xx) or a dropped connection, and re-sends the keys once
    when the server no longer holds them (evicted, or a restarted key store)."""

    def __init__(self, url: str, model, allow_insecure: bool = False, timeout: float = 600.0):
        import hemlp

        self.url = url.rstrip("/")
        self.model = model if hasattr(model, "keygen") else hemlp.load(model, allow_insecure=allow_insecure)
        self.timeout = float(timeout)
        meta = self.describe()
        if meta["model_id"] != self.model.model_id:
            raise KeyMismatchError(f"the server at {self.url} serves model {meta['model_id']}, this client holds "
                                   f"{self.model.model_id}: use the client artefact of the model it serves")
        self.secret_key = self._eval_keys = None
        self.key_id = None

    def _request(self, method: str, path: str, body: bytes | None = None) -> tuple[str, bytes]:
        req = urllib.request.Request(self.url + path, data=body, method=method,
                                     headers={"Content-Type": "application/octet-stream"} if body is not None else {})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return r.headers.get("Content-Type", ""), r.read()
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                err = json.loads(raw)
                name, message = err.get("error", "Error"), err.get("message", "")
            except (ValueError, AttributeError):
                name, message = "HTTPError", raw[:200].decode(errors="replace")
            raise ServerError(e.code, name, message) from None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
            reason = getattr(e, "reason", e)
            raise ServerUnavailableError(f"no hemlp server answers at {self.url} ({reason}): start it with "
                                         "`hemlp serve MODEL_DIR`, or check the URL") from None

    def describe(self) -> dict:
        """The served model's public description (GET /v1/model)."""
        return json.loads(self._request("GET", "/v1/model")[1])

    def connect(self) -> str:
        """Keygen (once) and upload the evaluation keys (once); returns their key id on the server."""
        if self.secret_key is None:
            self.secret_key, self._eval_keys = self.model.keygen(verbose=False)
        if self.key_id is None:
            self._upload(self._eval_keys)
        return self.key_id

    def _upload(self, eval_keys) -> None:
        reply = json.loads(self._request("POST", "/v1/keys", eval_keys.to_bytes(self.model.context))[1])
        self.key_id = reply["key_id"]

    def infer(self, x) -> np.ndarray:
        """Encrypt x (batch, *input_shape), evaluate on the server, decrypt: the outputs (batch, *output_shape)."""
        from hemlp.runtime.artifacts import EncryptedBatch

        self.connect()
        body = self.model.encrypt(np.asarray(x), self.secret_key).to_bytes()
        resent = False
        for attempt in range(RETRIES + 1):
            try:
                _, data = self._request("POST", f"/v1/infer?key={self.key_id}", body)
                break
            except ServerError as e:
                if e.name == "UnknownKey" and not resent:        # evicted: upload the same keys again
                    resent = True
                    self._upload(self._eval_keys)
                    continue
                if e.status < 500 or attempt == RETRIES:
                    raise
            except ServerUnavailableError:
                if attempt == RETRIES:
                    raise
            time.sleep(0.5 * 2 ** attempt)
        out = EncryptedBatch.from_bytes(data, self.model)
        if out.stage != "output" or out.model_id != self.model.model_id:
            raise ServerError(502, "BadResult", "the server's reply is not an encrypted result of this model")
        return self.model.decrypt(out, self.secret_key)
