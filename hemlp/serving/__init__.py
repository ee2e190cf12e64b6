"""Serving a compiled model over HTTP: ``hemlp serve`` (hemlp.serving.ray_serve on Ray Serve, hemlp.serving.http
without Ray), the API of hemlp.serving.service with its asynchronous jobs (hemlp.serving.jobs), and the client of
hemlp.serving.client (``hemlp.Client``)."""
from hemlp.serving.client import Client, JobTimeoutError, ServerError
from hemlp.serving.jobs import MemoryJobStore
from hemlp.serving.service import HttpError, MemoryKeyStore, ModelService

__all__ = ["Client", "ServerError", "JobTimeoutError", "ModelService", "MemoryKeyStore", "MemoryJobStore", "HttpError"]
