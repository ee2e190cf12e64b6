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

Staged (RayOptions.shared_keys=StagedKeys(folder)): the driver writes layout (A)'s bootstrapping keys into the
folder itself (stage_bootstrap_keys: hemlp.runtime.shared_keys.stage_shared_keys, the file named by its own header
SHA-256) and the KeyHolder carries only that digest: no key bytes in the object store, none serialised in the driver.
Every worker maps the file from the same folder on its machine (load_staged); a machine without it raises
MissingKeyFileError naming the fix. The workers never prune staged files.
"""
from __future__ import annotations

import os
import tempfile
import warnings
import weakref
from dataclasses import dataclass
from pathlib import Path

from hemlp.errors import MissingKeyError, OptionError
from hemlp.run_options import StagedKeys
from hemlp.runtime.artifacts import EvalKeys
from hemlp.runtime.shared_keys import (STAGED_PREFIX, open_or_write_shared_keys, open_staged_keys, stage_shared_keys,
                                       staged_file_of, staged_path)

__all__ = ["KeyHolder", "shared_key_folder", "staged_folder", "load_shared", "load_staged", "stage_bootstrap_keys",
           "KEEP_FILES"]

#: the key files a folder keeps (the newest; each as large as its key set)
KEEP_FILES = 4


@dataclass(frozen=True)
class KeyHolder:
    """What a task receives to get a key set: its bytes in the object store (`ref`, fetched by the one worker of a
    machine that decodes them: an ObjectRef inside an argument is not fetched by Ray) and the sharing policy; or,
    staged (shared a StagedKeys), no ref and the digest of the file every worker maps (`staged`)."""
    ref: object
    shared: object = None
    staged: str | None = None


def shared_key_folder(shared) -> Path | None:
    """The folder of the policy `shared` (see the module docstring) on this machine; None: no sharing."""
    if shared is False:
        return None
    if isinstance(shared, StagedKeys):
        # staging writes from the driver's in-memory keys, which only layout (A)'s bootstrapping keys are (a
        # request's or a job's keys reach the workers as bytes)
        raise OptionError("shared_keys=StagedKeys(...) stages layout (A)'s bootstrapping keys; for a request's or a "
                          "batch job's evaluation keys use shared_keys=True or a private folder's path")
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


def staged_folder(policy: StagedKeys) -> Path:
    """The folder of a StagedKeys policy on this machine (None: the temporary folder's, as shared_keys=True)."""
    return Path(tempfile.gettempdir()) / f"hemlp-keys-{os.getuid()}" if policy.folder is None else Path(policy.folder)


_LAST_STAGED: list = []   # [(weak ref to the bootstrapping keys, context hash, folder, digest)]: the last staged


def stage_bootstrap_keys(keys, ctx, policy: StagedKeys) -> str:
    """The digest of the staged file (in policy's folder) that holds bootstrapping keys `keys`: keys mapped from such
    a file already (the plan's EvalKeys from stage_shared_keys / open_staged_keys) are not written again, nor the
    last keys staged; other keys are written once (stage_shared_keys: from memory, no serialised copy)."""
    folder = staged_folder(policy)
    known = staged_file_of(keys)
    if known is not None and known[0].parent == folder and known[0].is_file():
        return known[1]
    if _LAST_STAGED:
        ref, phash, where, digest = _LAST_STAGED[0]
        if ref() is keys and phash == ctx.hash and where == folder and staged_path(folder, digest).is_file():
            return digest
    digest = stage_shared_keys(EvalKeys("bootstrap-staged", bootstrap_keys=keys), folder, ctx).digest
    _LAST_STAGED[:] = [(weakref.ref(keys), ctx.hash, folder, digest)]
    return digest


def load_staged(digest: str, context, policy: StagedKeys):
    """The bootstrapping keys of the key set the driver staged as `digest`, mapped from this machine's file in
    policy's folder (MissingKeyFileError naming the fix when the machine lacks it)."""
    keys = open_staged_keys(staged_folder(policy), digest, context).bootstrap_keys
    if keys is None:
        raise MissingKeyError(f"the staged key file {digest} holds no bootstrapping keys: stage the plan's eval keys "
                              "from its keygen() (stage_shared_keys), bootstrapping keys included")
    return keys


def prune(folder: Path, keep: Path) -> None:
    """Remove the oldest key files of `folder` beyond KEEP_FILES (never `keep`, never a staged file: its driver
    staged it for workers that may not have started yet), with their lock files."""
    try:
        files = sorted((p for p in folder.glob("*.keys") if p != keep and not p.name.startswith(STAGED_PREFIX)),
                       key=lambda p: p.stat().st_mtime)
    except OSError:
        return
    for p in files[:max(0, len(files) - (KEEP_FILES - 1))]:
        for q in (p, Path(f"{p}.lock")):
            try:
                q.unlink()
            except OSError:          # another worker removed it first
                pass
