"""Ciphertexts in the object store: the block layout, and the copies between native ciphertexts and blocks.

A value between layers is a Dist: blocks of ciphertexts (a row range x a chunk range). A block lives in the object
store as two uint64 arrays, one per polynomial part (c0, c1), each (L, rows, chunks, N), limb-major: one limb of a
part is a contiguous (rows, chunks N) matrix that the exact GEMM reads in place (zero-copy; a chunk range is a
row-strided view), and a task that works on one part takes only that part's object (across nodes only it moves).
Several input blocks are summed mod q (exact, so the sum of the per-block products has the same bits as one
product). A layer's tasks return their output blocks and the next layer's tasks take them by ObjectRef; the driver
only sees small per-block metadata (levels, scales, timings, byte counts) and materialises the final output.
The driver's input may also be "ct-major": per part, the list of the block's ciphertexts' (limbs, N) polynomials.

``pack_cts`` / ``unpack_cts``: groups of ciphertexts as one array plus metas (the per-step executor's tasks).
"""
from __future__ import annotations

import numpy as np

from hemlp import _core
from hemlp.fhe import Ciphertext
from hemlp.errors import LevelError

__all__ = ["PARTS", "Block", "Dist", "pack_cts", "unpack_cts", "staging_buffer", "release_staging", "ct_bytes",
           "meta_of", "export_block", "import_block", "import_range", "block_pairs", "limb_rows", "splits",
           "row_pieces", "add_mod_limbs", "packed_nbytes"]

#: the two polynomials of an RLWE ciphertext (c0, c1): a block holds one store object per part
PARTS = (0, 1)


def pack_cts(cts) -> tuple[np.ndarray, list]:
    """(array (n, size, L, N) uint64, metas): the exact state of each ciphertext (as Ciphertext.to_bytes)."""
    objs = [ct.native for ct in cts]
    o0 = objs[0]
    size, L = o0.size, o0.level + 1
    uniform = all(o.size == size and o.level + 1 == L for o in objs)
    if uniform:
        arr = np.empty((len(objs), size, L, o0.poly(0).shape[-1]), dtype=np.uint64)
        for i, o in enumerate(objs):
            for j in range(size):
                arr[i, j] = o.poly(j)
    else:  # mixed sizes / levels (not produced by a compiled plan): one array per ciphertext
        arr = [np.stack([o.poly(j) for j in range(o.size)]) for o in objs]
    metas = [(o.level, o.scale, o.slots, o.encoding, o.is_complex, o.key_id,
              o.seed if (o.seeded and o.size == 2) else None) for o in objs]
    return arr, metas


def packed_nbytes(arr) -> int:
    """The bytes of pack_cts' array (or list of arrays)."""
    return arr.nbytes if isinstance(arr, np.ndarray) else sum(a.nbytes for a in arr)


def unpack_cts(ctx, arr, metas) -> list:
    """The ciphertexts pack_cts packed, bit for bit, under ctx."""
    out = []
    for i, (level, scale, slots, enc, is_complex, key_id, seed) in enumerate(metas):
        polys = arr[i]
        polys = [polys[0]] if seed is not None else [polys[j] for j in range(polys.shape[0])]
        obj = ctx.native.import_ciphertext(polys, level, scale, slots, enc, is_complex, key_id, seed)
        out.append(ctx.wrap(Ciphertext, obj))
    return out


_STAGING: dict = {}


def staging_buffer(shape) -> np.ndarray:
    """The driver's reused export buffer for input blocks (ray.put copies it into the
    store; see hemlp.runtime.ray.malloc)."""
    n = int(np.prod(shape))
    buf = _STAGING.get("buf")
    if buf is None or buf.size < n:
        _STAGING.clear()
        buf = _STAGING["buf"] = np.empty(n, dtype=np.uint64)
    return buf[:n].reshape(shape)


def release_staging() -> None:
    """Free the driver's input export buffer (kept between runs to avoid page faults on every input)."""
    _STAGING.clear()


def ct_bytes(ctx, level: int) -> int:
    """Bytes of one RLWE ciphertext's residues at `level` (2 polynomials, level + 1 limbs, N uint64 each)."""
    return 2 * (level + 1) * ctx.N * 8


def meta_of(o) -> tuple:
    """(level, scale, slots, encoding, is_complex, key_id) of a native ciphertext: a block's metadata per
    ciphertext."""
    return (o.level, o.scale, o.slots, o.encoding, o.is_complex, o.key_id)


def export_block(objs, nr: int, nc: int, N: int, out: np.ndarray | None = None) -> np.ndarray:
    """(2, L, nr, nc, N) uint64: part p of nr x nc (row-major) native ciphertexts of one level is arr[p]."""
    L = objs[0].level + 1
    if any(o.level + 1 != L or o.size != 2 for o in objs):
        raise LevelError("a block of ciphertexts must share one level and be relinearised (size 2)")
    arr = np.empty((2, L, nr, nc, N), dtype=np.uint64) if out is None else out
    if not arr.flags.c_contiguous:
        raise ValueError("export_block: out must be C-contiguous (the native copy writes through a reshaped view)")
    for p in PARTS:
        _core.export_part(objs, p, arr[p].reshape(L, nr * nc, N))  # one native copy per polynomial
    return arr


def import_block(ctx, cells: dict, parts, desc, metas, rows, cols) -> None:
    """Ciphertexts (r, j) of the block (global indices) that fall in rows x cols, into cells[(r, j)]."""
    r0, r1, c0, c1 = desc
    nc = c1 - c0
    ra, rb, ca, cb = max(r0, rows[0]), min(r1, rows[1]), max(c0, cols[0]), min(c1, cols[1])
    if ra >= rb or ca >= cb:
        return
    if isinstance(parts[0], list):  # a ct-major input part: (limbs, N) arrays, row-major over rows x chunks
        for r in range(ra, rb):
            for j in range(ca, cb):
                k = (r - r0) * nc + (j - c0)
                m = metas[k]
                obj = ctx.native.import_ciphertext([parts[0][k], parts[1][k]], m[0], m[1], m[2], m[3], m[4], m[5], None)
                cells[r, j] = ctx.wrap(Ciphertext, obj)
        return
    sel = [metas[(r - r0) * nc + (j - c0)] for r in range(ra, rb) for j in range(ca, cb)]
    if all(m == sel[0] for m in sel):  # one native call for the range: one copy per polynomial, range-checked
        objs = _core.cts_from_parts(ctx.native, parts[0][:, ra - r0: rb - r0, ca - c0: cb - c0],
                                    parts[1][:, ra - r0: rb - r0, ca - c0: cb - c0], *sel[0])
        w = cb - ca
        for k, obj in enumerate(objs):
            cells[ra + k // w, ca + k % w] = ctx.wrap(Ciphertext, obj)
        return
    for r in range(ra, rb):
        for j in range(ca, cb):
            m = metas[(r - r0) * nc + (j - c0)]
            obj = ctx.native.import_ciphertext([parts[0][:, r - r0, j - c0], parts[1][:, r - r0, j - c0]],
                                           m[0], m[1], m[2], m[3], m[4], m[5], None)
            cells[r, j] = ctx.wrap(Ciphertext, obj)


def import_range(ctx, blocks, rows, cols) -> list:
    """The ciphertexts of rows x cols (row-major) from (parts, desc, metas) blocks that cover them."""
    cells = {}
    for parts, desc, metas in blocks:
        import_block(ctx, cells, parts, desc, metas, rows, cols)
    return [cells[r, j] for r in range(*rows) for j in range(*cols)]


def block_pairs(arrays, descs) -> list:
    """(parts, desc, metas) per block from task arguments that hold both parts of each block in turn."""
    return [((arrays[2 * k], arrays[2 * k + 1]), d, m) for k, (d, m) in enumerate(descs)]


def limb_rows(part, l: int, a: int, b: int, j: int, nc: int) -> list:
    """Limb l of the ciphertexts in local rows a:b, local chunk j of a block's part, as (1, N) row views: from a
    limb-major array (limbs, rows, chunks, N) or a ct-major input part (a list of (limbs, N) arrays, row-major
    over the block's rows x nc chunks)."""
    if isinstance(part, list):
        return [part[r * nc + j][l: l + 1] for r in range(a, b)]
    return [part[l, r, j][None] for r in range(a, b)]


def splits(n: int, parts: int) -> list[slice]:
    """range(n) in `parts` contiguous slices whose sizes differ by at most one."""
    edges = [n * i // parts for i in range(parts + 1)]
    return [slice(edges[i], edges[i + 1]) for i in range(parts)]


def row_pieces(rows: int, n: int) -> list:
    """rows split into min(rows, n) contiguous (a, b) ranges, as the grids split them."""
    return [(r.start, r.stop) for r in splits(rows, max(1, min(rows, n)))]


def add_mod_limbs(a: np.ndarray, b: np.ndarray, qv: np.ndarray) -> np.ndarray:
    """(a + b) mod q_l for limb-major arrays (L, ..., N); qv: the moduli as a (L, 1, 1) uint64 array."""
    s = a + b  # < 2 q < 2^63: no overflow
    np.subtract(s, qv, out=s, where=s >= qv)
    return s


class Block:
    """A block in the store: refs, one ObjectRef per polynomial part."""
    __slots__ = ("refs", "r0", "r1", "c0", "c1", "metas", "nbytes", "meta_src")

    def __init__(self, refs, r0, r1, c0, c1, metas, nbytes, meta_src=None):
        self.refs, self.r0, self.r1, self.c0, self.c1, self.metas, self.nbytes = refs, r0, r1, c0, c1, metas, nbytes
        self.meta_src = meta_src  # (meta ref, a, b) while metas is None: the producing task's metas a:b

    @property
    def desc(self):
        return (self.r0, self.r1, self.c0, self.c1)


class Dist:
    """A ciphertext matrix (rows x chunks) as blocks in the object store."""

    def __init__(self, shape, chunks: int, blocks: list, planned: tuple | None = None):
        self.shape, self.chunks, self.blocks = shape, chunks, blocks
        # (level, None, slots, encoding, is_complex, key_id) of blocks still being computed: the plan's level and
        # the input's labels; the scale is only known to the tasks (they get the producers' metas as arguments)
        self.planned = planned

    @property
    def rows(self) -> int:
        return self.shape[0]

    @property
    def level(self) -> int:
        return self.meta[0]

    @property
    def meta(self) -> tuple:
        m = self.blocks[0].metas
        return m[0] if m is not None else self.planned

    def overlapping(self, rows, cols) -> list:
        return [b for b in self.blocks if b.r0 < rows[1] and rows[0] < b.r1 and b.c0 < cols[1] and cols[0] < b.c1]
