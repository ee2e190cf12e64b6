"""Which failures of a batch item are worth another attempt.

A typed hemlp error about the item or the job (a corrupted input, a wrong shape, a parameter set the policy refuses)
comes back the same on every attempt: the item fails at once. Anything else (a lost worker, an out-of-memory kill,
an I/O error, an unexpected exception) may pass on a retry.
"""
from __future__ import annotations

from hemlp.errors import HemlpError

__all__ = ["transient", "root_cause"]


def root_cause(exc: BaseException) -> BaseException:
    """The worker's own exception when Ray wrapped it (ray.exceptions.RayTaskError.cause), else exc."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


def transient(exc: BaseException) -> bool:
    """False for deterministic failures (hemlp's typed errors, except those about the machine: OSError or
    ConnectionError subclasses such as a full disk or an unreachable cluster); True otherwise."""
    exc = root_cause(exc)
    return not isinstance(exc, HemlpError) or isinstance(exc, (OSError, ConnectionError))
