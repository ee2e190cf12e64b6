"""hemlp.runtime: executors of compiled plans (simulate / local run) and client/server artefacts."""
from hemlp.runtime.artifacts import EncryptedBatch, EvalKeys  # noqa: F401
