"""Key sets the Ray workers of one machine share: the first worker of a machine to need a key set decodes it and
writes it as a shared key file (hemlp.runtime.shared_keys), every worker there maps that file, so the machine holds
one copy of the keys however many worker processes it runs (at N16-boot, 11.4 GiB of batched bootstrapping keys
each) and the other workers skip the decoding.

Where the files go (RayOptions.shared_keys): None or True, the folder hemlp-keys-<uid> in the worker's temporary
directory; a path, that folder (it must be private to the user: mode 0700); False, no file (each worker decodes its
own copy, as before). A file is named after the key set's digest, so another key set never maps it; a folder keeps
the KEEP_FILES newest files and removes older ones (a mapping outlives its file's removal, and a worker that finds its
file gone writes it again). A folder that cannot be used (not private, disk full) falls back to a private copy with
a warning: the run's results are the same either way.
"""
from __future__ import annotations

import os
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

from hemlp.runtime.shared_keys import open_or_write_shared_keys

__all__ = ["KeyHolder", "shared_key_folder", "load_shared", "KEEP_FILES"]

#: the key files a folder keeps (the newest; each as large as its key set)
KEEP_FILES = 4


@dataclass(frozen=True)
class KeyHolder:
    """What a task receives to get a key set: its bytes in the object store (`ref`, fetched by the one worker of a
    machine that decodes them: an ObjectRef inside an argument is not fetched by Ray) and the sharing policy."""
    ref: object
    shared: object = None


def shared_key_folder(shared) -> Path | None:
    """The folder of the policy `shared` (see the module docstring) on this machine; None: no sharing."""
    if shared is False:
        return None
    if shared is None or shared is True:
        return Path(tempfile.gettempdir()) / f"hemlp-keys-{os.getuid()}"
    if isinstance(shared, (str, os.PathLike)) and str(shared):
        return Path(shared)
    raise ValueError(f"shared_keys={shared!r}: True / None (the temporary folder), a private folder's path, or False")


def load_shared(digest: str, context, decode, shared):
    """The EvalKeys of key set `digest`: mapped from this machine's shared file (written by the first worker that
    needs it, with decode()), or decode() itself when the policy says no file or the folder cannot be used.
    context: the compiled model or its Context (what the file is checked against)."""
    folder = shared_key_folder(shared)
    if folder is None:
        return decode()
    path = folder / f"{digest}.keys"
    try:
        keys = open_or_write_shared_keys(path, context, decode)
    except OSError as exc:           # not private, not writable, disk full: the keys still work, privately
        warnings.warn(f"shared key file {path} unusable ({exc}); this worker decodes its own copy of the keys "
                      "(RayOptions.shared_keys: a private folder with room for them)", RuntimeWarning, stacklevel=2)
        return decode()
    prune(folder, keep=path)
    return keys


def prune(folder: Path, keep: Path) -> None:
    """Remove the oldest key files of `folder` beyond KEEP_FILES (never `keep`), with their lock files."""
    try:
        files = sorted((p for p in folder.glob("*.keys") if p != keep), key=lambda p: p.stat().st_mtime)
    except OSError:
        return
    for p in files[:max(0, len(files) - (KEEP_FILES - 1))]:
        for q in (p, Path(f"{p}.lock")):
            try:
                q.unlink()
            except OSError:          # another worker removed it first
                pass
