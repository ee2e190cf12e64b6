"""Files the runtime writes: atomically (readers see all or nothing), with typed errors when they cannot be read.

The scheme's objects save through the same pattern in ``hemlp.ckks``; the runtime keeps its own copy of these few
lines so that it needs no private name of the scheme layer (until one module writes every object, as the
architecture plans: hemlp/fhe/serialize.py)."""
from __future__ import annotations

import os
import uuid
from pathlib import Path

from hemlp.errors import SerializationError

__all__ = ["atomic_write", "read_file"]


def atomic_write(path, data, tmp_prefix: str = "") -> None:
    """Write via a unique temporary file in the same folder + fsync + rename; a failed write leaves no temporary
    file behind (tmp_prefix lets callers recognise stale ones of killed processes). data: bytes, or a list of
    buffers written one after the other (an object's parts, never joined in memory)."""
    path = Path(path)
    tmp = path.with_name(f"{tmp_prefix}{path.name}.tmp{os.getpid()}.{uuid.uuid4().hex[:8]}")
    try:
        with open(tmp, "wb") as f:
            for part in data if isinstance(data, list) else [data]:
                f.write(part)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise


def read_file(path, kind: str) -> bytes:
    """The bytes of `path`, or SerializationError naming the `kind` of file and why it cannot be read."""
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise SerializationError(f"cannot read the {kind} file {path}: {exc.strerror}") from None
