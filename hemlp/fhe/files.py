"""Whole-file reads and atomic writes for hemlp's artefacts (compiled-model directories, encrypted weights).

Writes go through a unique temporary file in the same folder and a rename, so readers see all or nothing and a
failed write leaves no temporary file behind. Reads turn OS errors into SerializationError naming the file;
map_file maps a file read-only instead of copying it (large encrypted batches load from the page cache in place).
"""
from __future__ import annotations

import contextlib
import mmap
import os
import uuid
from pathlib import Path

from hemlp.errors import SerializationError

__all__ = ["write_atomic", "read_file", "map_file"]


def write_atomic(path, data, tmp_prefix: str = "", mode: int = 0o666) -> None:
    """data: bytes, or a list of buffers written one after the other (never joined in memory). tmp_prefix lets
    callers recognise stale temporary files of killed processes; mode: the file's permissions from its creation
    on (0o600 for secrets: never readable by others, not even for a moment; the umask still applies)."""
    path = Path(path)
    tmp = path.with_name(f"{tmp_prefix}{path.name}.tmp{os.getpid()}.{uuid.uuid4().hex[:8]}")
    try:
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "wb") as f:
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
    """The bytes of a file; SerializationError naming `kind` and the path when it cannot be read."""
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise SerializationError(f"cannot read the {kind} file {path}: {exc.strerror}") from None


@contextlib.contextmanager
def map_file(path, kind: str):
    """A read-only memoryview of the whole file, memory-mapped (no copy; pages read ahead), for the block's
    duration; SerializationError naming `kind` and the path when the file cannot be read. Objects loaded from it
    must copy what they keep (the native imports do): the mapping goes when the block ends."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                mm = None
            else:
                flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
                mm = mmap.mmap(f.fileno(), size, flags=flags, prot=mmap.PROT_READ)
    except OSError as exc:
        raise SerializationError(f"cannot read the {kind} file {path}: {exc.strerror}") from None
    if mm is None:
        yield memoryview(b"")
        return
    view = memoryview(mm)
    try:
        yield view
    finally:
        try:
            view.release()
            mm.close()
        except BufferError:  # a view is still referenced (e.g. by a traceback): unmapped when it is collected
            pass
