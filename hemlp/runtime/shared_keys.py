"""Node-local shared key files: one read-only copy of a key set per machine, memory-mapped by every process there.

Each process that runs a compiled model decodes its own copy of the evaluation keys (EvalKeys.from_bytes), so k
worker processes on one machine hold k copies: at N16-boot, 11.4 GiB of bootstrapping keys each. Evaluation keys
are public material, so they can be shared: the machine's driver writes them once in the form the native key
switch reads (write_shared_keys), and every process maps that file (open_shared_keys). The page cache then holds
one copy; each process's key objects borrow its pages read-only.

    write_shared_keys(eval_keys, path, compiled)         # once per machine (the driver), into a 0700 folder
    keys = open_shared_keys(path, compiled)              # each process; compiled.run(ct, keys) as with any EvalKeys
    keys = open_or_write_shared_keys(path, compiled, lambda: EvalKeys.from_bytes(data, compiled))
                                                         # each process: the first one on the machine writes it
    staged = stage_shared_keys(eval_keys, folder, compiled)  # the driver: staged-<digest>.keys, and its keys mapped
    keys = open_staged_keys(folder, staged.digest, compiled) # each process, given only the digest
    prune_staged_keys(folder, keep=[staged])             # the driver, when no run needs the other staged files

Staged files: the driver writes the file itself from its in-memory keys (no serialised byte copy: write_shared_keys
streams each key into the file) and names it after the file's own header SHA-256, which covers the header, the
record table, the metadata and the SHA-256 of the key data, so it names the whole content; the worker-written files
are named after the digest of the serialised bytes with other prefixes (boot-, job-, or a shipment's digest), so
the two schemes never share a name. A staged file is never pruned by the workers (node_keys.prune): whoever staged
it removes it, with prune_staged_keys (every staged file of a folder but those kept; nothing else in the folder).

What is shared: every switching key (relinearisation, rotation, ModPack, the bootstrapping keys' rotation and
relinearisation keys, batched bootstrapping's back-conversion keys) and every batched CoeffToSlot key, which are
all but a few percent of a key set. The smaller parts are read from the same file but imported (copied) per
process: the encapsulation keys of single bootstrapping and batched bootstrapping's {q0, p0} and ModRaise keys
(at N16-boot, k = 4: ~0.1 GiB of 12.4).

The file format is the native core's (csrc/ckks/shared_key_file.h); its meta section is this module's JSON
(which key container each record group makes up). The mapped keys refuse every write (ReadOnlyKeyError): other
processes read the same pages. The mapping lives as long as any key object from it, also after the file is
unlinked or replaced; a file is never rewritten in place (it is created read-only and replaced by a rename), as
truncating a mapped file would fault the processes reading it.

Integrity: opening checks the file size, the header's SHA-256 (the records, seeds and metadata), the parameter
set (ContextMismatchError), the key pair (KeyMismatchError, when key_id is given) and the compiled model, before
any pointer into the key data is formed; a truncated, foreign or corrupted header is a SerializationError that
says to write the file again. The SHA-256 of the key data itself is checked only with verify=True: that is one
read of the whole file (GiBs) per process, and it faults in every page at open instead of on first use. The
threat model is a file written by the same machine's driver into a private folder (write_shared_keys refuses a
folder other users can write to), created read-only (0400) and replaced only by rename: the checks on open catch a
foreign, truncated or half-written file, and corrupted key bytes (a disk fault) cannot make the native code read
outside the mapping (every record's offsets and sizes were checked), only compute wrong results. Verify once per
machine after writing (or where the folder is shared) with verify=True.
"""
from __future__ import annotations

import fcntl
import json
import os
import secrets
import socket
import stat
import weakref
from dataclasses import asdict, dataclass
from pathlib import Path

from hemlp import _core
from hemlp.bootstrap import BatchBootstrapKeys, BootParams, BootstrapKeys, EncapsulationKeys
from hemlp.errors import KeyMismatchError, MissingKeyFileError, SerializationError
from hemlp.fhe import Context, GaloisKeys, RelinKey
from hemlp.pcmm import ModPackKeys
from hemlp.runtime.artifacts import EvalKeys

__all__ = ["write_shared_keys", "open_shared_keys", "open_or_write_shared_keys", "FORMAT", "StagedKeyFile",
           "stage_shared_keys", "open_staged_keys", "staged_file_of", "staged_path", "file_digest", "STAGED_PREFIX",
           "prune_staged_keys"]

#: the meta section's format name (the file's own layout is versioned by the native core)
FORMAT = "hemlp shared eval keys 1"

# record groups: which key container each record belongs to
_RELIN, _GALOIS, _MODPACK = 1, 2, 3
_BOOT_GALOIS, _BOOT_RELIN, _BOOT_ENCAPSULATION = 4, 5, 6
_BATCH_GALOIS, _BATCH_RELIN, _BATCH_MS_GALOIS, _BATCH_BACK, _BATCH_SMALL_BETA, _BATCH_BIG_B = 7, 8, 9, 10, 11, 12


#: the name prefix of staged files (stage_shared_keys): staged-<the file's header SHA-256>.keys
STAGED_PREFIX = "staged-"

# the native header (csrc/ckks/shared_key_file.cpp, FileHeader): its magic, and where its header_hash lies
_MAGIC, _HEADER_BYTES, _HEADER_HASH_AT = b"HEMLPKEY", 256, 144


def _context(context) -> tuple:
    """(Context, model id or None) of a Context or a compiled model."""
    if isinstance(context, Context):
        return context, None
    ctx = getattr(context, "context", None)
    if not isinstance(ctx, Context):
        raise TypeError(f"expected a hemlp Context or a compiled model, got {type(context).__name__}")
    return ctx, context.model_id


def write_shared_keys(eval_keys: EvalKeys, path, context) -> None:
    """Write `eval_keys` to `path` as a node-local shared key file (atomically: a temporary file and a rename;
    read-only from its creation). context: the compiled model the keys belong to (its model id is checked) or its
    Context. The folder is created 0700 when missing and must not be writable by other users (PermissionError).
    OSError when the file cannot be written."""
    ctx, model_id = _context(context)
    if not isinstance(eval_keys, EvalKeys):
        raise TypeError(f"write_shared_keys takes the EvalKeys from keygen(), got {type(eval_keys).__name__}")
    if model_id is not None and eval_keys.model_id != model_id:
        raise KeyMismatchError(f"the evaluation keys belong to compiled model {eval_keys.model_id}, not {model_id}")
    path = Path(path)
    _private_folder(path.parent)
    items, meta = [], dict(format=FORMAT, model_id=eval_keys.model_id, relin=eval_keys.relin_key is not None,
                           galois=eval_keys.galois_keys is not None, modpack_k=None, bootstrap=None)
    if eval_keys.relin_key is not None:
        items.append((_RELIN, ctx.unwrap(eval_keys.relin_key, RelinKey, "relinearisation key")))
    if eval_keys.galois_keys is not None:
        items.append((_GALOIS, ctx.unwrap(eval_keys.galois_keys, GaloisKeys, "rotation keys")))
    if eval_keys.modpack_keys is not None:
        meta["modpack_k"] = eval_keys.modpack_keys.k
        items += [(_MODPACK, k) for k in eval_keys.modpack_keys.native]
    bk = eval_keys.bootstrap_keys
    if isinstance(bk, BatchBootstrapKeys):
        meta["bootstrap"] = _batch_meta(bk, ctx, items)
    elif isinstance(bk, BootstrapKeys):
        enc_header, enc_arrays = bk.encapsulation.export(ctx)
        meta["bootstrap"] = dict(kind="bootstrap_keys", params=asdict(bk.params), conj_level=bk.conj_level,
                                 rotation_levels={str(s): lv for s, lv in bk.rotation_levels.items()},
                                 encapsulation=enc_header)
        items += [(_BOOT_GALOIS, ctx.unwrap(bk.galois, GaloisKeys, "bootstrapping rotation keys")),
                  (_BOOT_RELIN, ctx.unwrap(bk.relin, RelinKey, "bootstrapping relinearisation key"))]
        items += [(_BOOT_ENCAPSULATION, a) for a in enc_arrays]
    elif bk is not None:
        raise TypeError(f"bootstrap_keys must be BootstrapKeys or BatchBootstrapKeys, got {type(bk).__name__}")
    key_id = eval_keys.key_id
    if key_id is None and bk is not None:
        key_id = bk.relin.key_id
    if key_id is None:
        raise ValueError("these evaluation keys hold no key to share (no model step needs one)")
    _core.write_shared_key_file(ctx.native, str(path), int(key_id), json.dumps(meta, sort_keys=True).encode(), items)


def _batch_meta(bk: BatchBootstrapKeys, ctx: Context, items: list) -> dict:
    """The batched bootstrapping keys' fields for the meta section; their key parts appended to items."""
    bk.check_context(ctx)
    info, small_seeds, small_beta, big_a_seed, big_b, _ = _core.export_batch_conversion_keys(ctx.native,
                                                                                             bk.conversion)
    items += [(_BATCH_GALOIS, ctx.unwrap(bk.galois, GaloisKeys, "batched bootstrapping rotation keys")),
              (_BATCH_RELIN, ctx.unwrap(bk.relin, RelinKey, "batched bootstrapping relinearisation key")),
              (_BATCH_MS_GALOIS, bk.ms_galois), (_BATCH_BACK, bk.conversion)]
    items += [(_BATCH_SMALL_BETA, a) for a in small_beta] + [(_BATCH_BIG_B, a) for a in big_b]
    conversion = {name: info[name] for name in ("key_id", "ms_key_id", "sparse_id", "k", "hamming_weight", "level",
                                                "back_level")}
    conversion.update(small_alpha_seeds=[s.hex() for s in small_seeds], big_a_seed=big_a_seed.hex())
    return dict(kind="batch_bootstrap_keys", params=asdict(bk.params), k=bk.k, conj_level=bk.conj_level,
                cts_levels={str(s): lv for s, lv in bk.cts_levels.items()},
                stc_levels={str(s): lv for s, lv in bk.stc_levels.items()}, conversion=conversion)


def _private_folder(folder: Path) -> None:
    """Create `folder` 0700 when missing; PermissionError when another user could write into it (and so replace
    the file the workers map)."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = folder.stat()
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or st.st_uid != os.getuid():
        raise PermissionError(f"shared key files belong in a private folder (mode 0700, owned by this user); "
                              f"{folder} is {'writable by other users' if st.st_uid == os.getuid() else 'not ours'}")


def open_shared_keys(path, context, key_id: int | None = None, verify: bool = False) -> EvalKeys:
    """The evaluation keys of a shared key file, borrowing its pages (no copy of the switching keys): usable
    wherever the EvalKeys from keygen() / EvalKeys.load are, with bit-identical results. context: the compiled model
    (its model id is checked, KeyMismatchError) or its Context. key_id: the key pair the keys must belong to
    (KeyMismatchError otherwise; None: any). verify: also check the SHA-256 of the key data (one read of the file;
    see the module docstring). SerializationError (naming the fix) for a missing, truncated, corrupted or foreign
    file; ContextMismatchError for another parameter set."""
    ctx, model_id = _context(context)
    f = _core.SharedKeyFile.open(ctx.native, str(path), 0 if key_id is None else int(key_id))
    if verify:
        f.verify()
    try:
        meta = json.loads(f.meta)
        ok = isinstance(meta, dict) and meta.get("format") == FORMAT and isinstance(meta.get("model_id"), str)
    except (UnicodeDecodeError, ValueError):
        ok = False
    if not ok:
        raise SerializationError(f"shared key file {path}: not an evaluation key set of this hemlp; write it again "
                                 "from the uploaded evaluation keys (write_shared_keys)")
    if model_id is not None and meta["model_id"] != model_id:
        raise KeyMismatchError(f"shared key file {path} holds the keys of compiled model {meta['model_id']}, not "
                               f"{model_id}; write it again from this model's uploaded evaluation keys")
    try:
        return _eval_keys(f, ctx, meta)
    except (KeyError, TypeError, ValueError) as exc:
        if type(exc).__module__ == "hemlp.errors":
            raise
        raise SerializationError(f"shared key file {path}: malformed key set ({exc}); write it again from the "
                                 "uploaded evaluation keys") from None


def open_or_write_shared_keys(path, context, load_eval_keys, key_id: int | None = None) -> EvalKeys:
    """What every process of a machine can call: open_shared_keys(path, context, key_id), the file written first
    (write_shared_keys(load_eval_keys(), ...)) by the one process that finds it missing or damaged. The processes
    take turns on the lock file path + ".lock" (fcntl.flock), so one writes while the others wait, then all map the
    same file; load_eval_keys (e.g. EvalKeys.from_bytes of the shipped bytes) runs in the writer only. Name the file
    after the key set (its digest): a file of another key set at `path` raises KeyMismatchError, as
    open_shared_keys does."""
    path = Path(path)
    _private_folder(path.parent)
    fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            return open_shared_keys(path, context, key_id)
        except SerializationError:   # missing, truncated or corrupted: the fix is to write it again
            pass
        write_shared_keys(load_eval_keys(), path, context)
        return open_shared_keys(path, context, key_id)
    finally:
        os.close(fd)                 # releases the lock


def _eval_keys(f, ctx: Context, meta: dict) -> EvalKeys:
    relin = ctx.wrap(RelinKey, f.switch_keys(_RELIN)[0]) if meta["relin"] else None
    galois = ctx.wrap(GaloisKeys, f.galois_keys(_GALOIS)) if meta["galois"] else None
    modpack = None
    if meta["modpack_k"] is not None:
        keys = f.switch_keys(_MODPACK)
        if len(keys) != meta["modpack_k"]:
            raise SerializationError("shared key file: the ModPack keys do not match their count")
        modpack = ModPackKeys(keys, meta["modpack_k"], ctx)
    b = meta["bootstrap"]
    bk = None
    if b is not None and b["kind"] == "bootstrap_keys":
        enc = EncapsulationKeys.restore(ctx, b["encapsulation"], f.arrays(_BOOT_ENCAPSULATION))
        bk = BootstrapKeys(BootParams(**b["params"]), ctx.wrap(GaloisKeys, f.galois_keys(_BOOT_GALOIS)),
                           ctx.wrap(RelinKey, f.switch_keys(_BOOT_RELIN)[0]), enc,
                           {int(s): int(lv) for s, lv in b["rotation_levels"].items()}, int(b["conj_level"]))
    elif b is not None and b["kind"] == "batch_bootstrap_keys":
        bk = _batch_keys(f, ctx, b)
    elif b is not None:
        raise SerializationError(f"shared key file: unknown bootstrapping key kind {b['kind']!r}")
    return EvalKeys(meta["model_id"], relin, galois, modpack, bk)


def _batch_keys(f, ctx: Context, b: dict) -> BatchBootstrapKeys:
    c = b["conversion"]
    # the {q0, p0} and ModRaise parts are imported (validated, copied); the back-conversion keys stay borrowed
    conv = _core.import_batch_conversion_keys(
        ctx.native, c["key_id"], c["ms_key_id"], c["sparse_id"], c["k"], c["hamming_weight"], c["level"],
        c["back_level"], [bytes.fromhex(s) for s in c["small_alpha_seeds"]], f.arrays(_BATCH_SMALL_BETA),
        bytes.fromhex(c["big_a_seed"]), f.arrays(_BATCH_BIG_B), f.switch_keys(_BATCH_BACK), False)
    ms_galois = f.ms_galois_keys(ctx.native, _BATCH_MS_GALOIS)
    if ms_galois.ms_key_id != c["ms_key_id"] or ms_galois.k != b["k"]:
        raise SerializationError("shared key file: the batched CoeffToSlot and conversion keys name different "
                                 "multi-secret keys or batch sizes")
    return BatchBootstrapKeys(BootParams(**b["params"]), b["k"], conv, ms_galois,
                              ctx.wrap(GaloisKeys, f.galois_keys(_BATCH_GALOIS)),
                              ctx.wrap(RelinKey, f.switch_keys(_BATCH_RELIN)[0]),
                              {int(s): int(lv) for s, lv in b["cts_levels"].items()},
                              {int(s): int(lv) for s, lv in b["stc_levels"].items()}, int(b["conj_level"]), ctx.hash)


@dataclass(frozen=True)
class StagedKeyFile:
    """A key set staged by stage_shared_keys: its file, the digest that names it, and the driver's keys mapped from
    it (use these and drop the in-memory ones: the driver then holds no private copy)."""
    path: Path
    digest: str
    keys: EvalKeys


# key objects (EvalKeys and their bootstrapping keys) mapped from a staged file, by id -> (weak ref, path, digest):
# weak, so an entry never keeps GiBs of keys alive, and dropped with its object
_STAGED: dict = {}


def _remember(staged: StagedKeyFile) -> None:
    for obj in (staged.keys, staged.keys.bootstrap_keys):
        if obj is not None:
            _STAGED[id(obj)] = (weakref.ref(obj, lambda _, k=id(obj): _STAGED.pop(k, None)), staged.path,
                                staged.digest)


def staged_file_of(keys):
    """(path, digest) of the staged file that `keys` (an EvalKeys or its bootstrapping keys, from stage_shared_keys
    or open_staged_keys in this process) are mapped from, or None."""
    got = _STAGED.get(id(keys))
    return None if got is None or got[0]() is not keys else got[1:]


def staged_path(folder, digest: str) -> Path:
    """Where key set `digest` is staged in `folder`."""
    if not (isinstance(digest, str) and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)):
        raise ValueError(f"a staged key set's digest is 64 lower-case hex digits, got {digest!r}")
    return Path(folder) / f"{STAGED_PREFIX}{digest}.keys"


def file_digest(path) -> str:
    """The digest of a shared key file: its header SHA-256 (hex), read from the header (256 bytes, not the GiBs of
    key data: the header holds the data's own SHA-256). SerializationError when `path` is no shared key file."""
    with open(path, "rb") as f:
        head = f.read(_HEADER_BYTES)
    if len(head) < _HEADER_BYTES or not head.startswith(_MAGIC):
        raise SerializationError(f"{path} is not a hemlp shared key file; stage the keys again (stage_shared_keys)")
    return head[_HEADER_HASH_AT:_HEADER_HASH_AT + 32].hex()


def stage_shared_keys(eval_keys: EvalKeys, folder, context) -> StagedKeyFile:
    """Write `eval_keys` into `folder` as the shared key file staged-<digest>.keys (write_shared_keys: straight from
    the keys in memory, no serialised copy) and map it back: the StagedKeyFile's keys are the driver's copy from now
    on (the caller may drop `eval_keys`). digest: the file's header SHA-256 (file_digest), computed as it is written;
    the same keys give the same file and name. context: the compiled model or its Context. Keys already mapped from
    a file staged in `folder` are not written again."""
    folder = Path(folder)
    known = staged_file_of(eval_keys)
    if known is not None and known[0].parent == folder and known[0].is_file():
        return StagedKeyFile(known[0], known[1], eval_keys)
    # written under a name no worker globs or prunes, then renamed to its digest's name
    tmp = folder / f"staging-{os.getpid()}-{secrets.token_hex(4)}.part"
    write_shared_keys(eval_keys, tmp, context)
    try:
        digest = file_digest(tmp)
        path = staged_path(folder, digest)
        os.replace(tmp, path)       # the same content if one was there: a process mapping the old file keeps it
    finally:
        tmp.unlink(missing_ok=True)
    staged = StagedKeyFile(path, digest, open_shared_keys(path, context))
    _remember(staged)
    return staged


def open_staged_keys(folder, digest: str, context, key_id: int | None = None) -> EvalKeys:
    """The keys of the file stage_shared_keys staged as `digest` in `folder`, mapped (open_shared_keys).
    MissingKeyFileError naming the fix when this machine has no such file; KeyMismatchError when the file there
    holds another key set (another header SHA-256)."""
    path = staged_path(folder, digest)
    try:
        have = file_digest(path)
    except FileNotFoundError:
        raise MissingKeyFileError(
            f"the staged key file {path} is not on this machine ({socket.gethostname()}): copy it from the driver's "
            "machine into the same folder on every node (a private folder, mode 0700: e.g. rsync -a), or run with "
            "the default RayOptions.shared_keys, which ships the key bytes through Ray") from None
    if have != digest:
        raise KeyMismatchError(f"{path} holds key set {have}, not {digest}: copy the driver's staged file there "
                               "again (stage_shared_keys)")
    keys = open_shared_keys(path, context, key_id)
    _remember(StagedKeyFile(path, digest, keys))
    return keys


def _staged_digest(keep) -> str:
    """The digest of what prune_staged_keys' keep names: a StagedKeyFile, keys mapped from a staged file, a digest."""
    if isinstance(keep, StagedKeyFile):
        return keep.digest
    if isinstance(keep, str):
        staged_path(".", keep)          # ValueError unless 64 lower-case hex digits
        return keep
    known = staged_file_of(keep)
    if known is None:
        raise TypeError(f"prune_staged_keys(keep=...) takes StagedKeyFiles, their digests or keys mapped from a "
                        f"staged file; got {type(keep).__name__}")
    return known[1]


def prune_staged_keys(folder, keep=()) -> list:
    """Remove the key files stage_shared_keys wrote into `folder`, but those of `keep` (StagedKeyFiles, their
    digests, or EvalKeys / bootstrapping keys mapped from a staged file); returns the paths removed.

    Only a file that is staged-<64 hex digits>.keys, a regular file of this user whose native header names that
    same digest (file_digest: the file hemlp wrote under that name) is removed; anything else in the folder (the
    workers' files, a half-written staging-*.part, files of other programs, a file whose content does not match its
    name) is left alone. A process that mapped a removed file keeps its keys (the mapping outlives the name); a
    worker that opens it afterwards fails with MissingKeyFileError, so prune when no run on those keys is going
    on (or keep them)."""
    kept = {_staged_digest(k) for k in keep}
    folder = Path(folder)
    if not folder.is_dir():
        return []
    removed = []
    for p in sorted(folder.iterdir()):
        name = p.name
        if not (name.startswith(STAGED_PREFIX) and name.endswith(".keys")):
            continue
        digest = name[len(STAGED_PREFIX):-len(".keys")]
        if digest in kept:
            continue
        try:
            staged_path(folder, digest)     # ValueError unless the name's digest is one stage_shared_keys writes
            st = p.lstat()
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or file_digest(p) != digest:
                continue
            p.unlink()
        except (ValueError, OSError, SerializationError):
            continue                    # not a digest, gone meanwhile, unreadable, or no shared key file: not ours
        removed.append(p)
    return removed
