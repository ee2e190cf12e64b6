"""hemlp.runtime: executors of compiled plans (local: in process; ray: on a Ray cluster), resumable batch jobs
(jobs) and the client/server artefacts."""
from hemlp.runtime.artifacts import EncryptedBatch, EvalKeys  # noqa: F401
