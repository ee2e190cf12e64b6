"""Layout (P) linear layers from their nonzero entries: only the generalised diagonals that hold a weight, built
without the dense matrix, and a baby-step / giant-step split chosen for that sparse set of diagonal offsets.

A convolution on a 32x32x16 tensor is a 16384 x 16384 matrix with 16384 generalised diagonals when densified, but
only (2C - 1) x 9 of them are nonzero in the channel-major ordering (one per channel difference and kernel offset):
an entry (output feature r, input feature c) lies on the diagonal j = pos_in(c) - pos_out(r) (mod the period). The
entries come straight from the layer's structure (the im2col gather of the lowered step: kernel offsets x channel
pairs), so the cost is the number of weights times the output positions, never the dense size.

**Multiplexed (gap) placement for strided layers** (Lee et al., "Low-complexity deep convolutional neural networks
on FHE using multiplexed parallel convolutions", 2022): in a plain channel-major ordering a stride-2 conv's output
position (co, ho, wo) = co*Ho*Wo + ho*Wo + wo moves at half the speed of its input position, so the offsets depend
on (ho, wo) and nearly every diagonal is nonzero. Instead, every tensor of an image stage stays on the input's
H0 x W0 grid: a tensor of C channels at H x W (gap g = H0 / H) puts feature (c, h, w) at

    pos = (c // g^2) * H0*W0 + (h*g + (c % g^2) // g) * W0 + (w*g + c % g)

i.e. g^2 channels share one H0 x W0 block, interleaved in the gaps the stride left (g = 1 is the plain
channel-major ordering). A stride-s conv from gap g to gap g*s then has offsets
(Δblock)*H0*W0 + (dh*g + Δa)*W0 + (dw*g + Δb), a few hundred for a CIFAR stage instead of thousands, and the output
is clean (the diagonals are zero off the output positions), so no mask and no extra level: the plaintext products
themselves select. Global average pooling to 1x1 lands at gap H0, i.e. back at pos = c (plain).

BSGS over a sparse offset set J: j = g1*h + g, the baby rotations {j mod g1} hoisted on the input, the giant ones
{j div g1} after the products' rescale; g1 (a power of two) minimises the number of rotations.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["pow2", "grid_positions", "grid_period", "PALETTE_MAX", "SparseDiag", "conv_entries", "conv_entry_chunks",
           "dense_entries", "diagonals_from_entries", "bsgs_split", "ENTRY_CHUNK"]


def pow2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1): a period layout (P) pads a tensor to."""
    return 1 << max(0, int(n - 1).bit_length())


def grid_positions(grid: tuple) -> np.ndarray:
    """Position of every feature (c, h, w) in channel-major order of a tensor on a grid (C, H, W, H0, W0)."""
    C, H, W, H0, W0 = grid
    g = H0 // H
    c, h, w = np.meshgrid(np.arange(C), np.arange(H), np.arange(W), indexing="ij")
    return ((c // (g * g)) * H0 * W0 + (h * g + (c % (g * g)) // g) * W0 + (w * g + c % g)).reshape(-1)


def grid_period(grid: tuple) -> int:
    C, H, W, H0, W0 = grid
    g = H0 // H
    blocks = -(-C // (g * g))
    return 1 << max(0, int(blocks * H0 * W0 - 1).bit_length())


#: a diagonal's values are kept as codes into its distinct values (a palette) when there are at most this many
PALETTE_MAX = 1 << 16


@dataclass
class SparseDiag:
    """A per-sample diagonal vector of `size` values that repeats every `period` values (a power of two dividing
    `size`), zero except at `positions` (within one period). Kept per period: a layer on a narrow value repeats its
    diagonals size / period times over the slots, and storing each period once is what keeps a deep model's program
    (ResNet-18's 512-channel convs: tens of millions of entries a layer) within memory.

    Stored compactly (from_positions): the positions as a bit mask of the period, the values as 16-bit codes into
    the diagonal's distinct values. A convolution's diagonal holds one weight per (output channel, input channel,
    kernel offset) at every pixel where it applies, so a few hundred distinct values cover tens of thousands of
    positions: ~2 bytes a nonzero instead of 12 (an int32 position and a float64). dense() gives back the same bits."""

    mask: np.ndarray            # np.packbits of the period's nonzero positions
    codes: np.ndarray | None    # uint16 index into palette per nonzero, in position order; None: palette is the values
    palette: np.ndarray         # float64
    size: int
    period: int

    @classmethod
    def from_positions(cls, positions, values, size: int, period: int = 0) -> "SparseDiag":
        """positions: distinct, within [0, period); values: nonzero floats, one per position."""
        period = period or size
        if size % period:
            raise ValueError(f"a diagonal's period {period} must divide its size {size}")
        positions = np.asarray(positions, dtype=np.int64)
        values = np.asarray(values, dtype=np.float64)
        order = np.argsort(positions, kind="stable")
        positions, values = positions[order], values[order]
        bits = np.zeros(period, dtype=bool)
        bits[positions] = True
        codes, palette = None, values
        if values.size > 8:
            uniq, inv = np.unique(values, return_inverse=True)
            # exact round trip only (a NaN weight would not be one): otherwise the values as they are
            smaller = 2 * values.size + 8 * uniq.size < 8 * values.size
            if uniq.size <= PALETTE_MAX and smaller and np.array_equal(uniq[inv], values):
                codes, palette = inv.astype(np.uint16), uniq
        return cls(np.packbits(bits), codes, palette, int(size), int(period))

    @property
    def positions(self) -> np.ndarray:
        """The nonzero positions within one period, ascending (int32)."""
        return np.flatnonzero(np.unpackbits(self.mask, count=self.period)).astype(np.int32)

    @property
    def count(self) -> int:
        """The nonzero positions in one period."""
        return int((self.palette if self.codes is None else self.codes).size)

    @property
    def values(self) -> np.ndarray:
        """The values at `positions`, in their order."""
        return self.palette if self.codes is None else self.palette[self.codes]

    def dense(self) -> np.ndarray:
        d = np.zeros(self.period)
        d[self.positions] = self.values
        return np.tile(d, self.size // self.period)

    def rotated(self, r: int) -> "SparseDiag":
        """The vector rotated left by r (np.roll(d, -r)): still periodic, its positions move within the period (the
        ones below r wrap to the end, their values with them)."""
        r = int(r) % self.period
        bits = np.unpackbits(self.mask, count=self.period)
        k = int(np.count_nonzero(bits[:r]))
        roll = (lambda a: np.concatenate([a[k:], a[:k]])) if k else (lambda a: a)   # noqa: E731
        codes, palette = (None, roll(self.palette)) if self.codes is None else (roll(self.codes), self.palette)
        return SparseDiag(np.packbits(np.roll(bits, -r)), codes, palette, self.size, self.period)

    @property
    def nbytes(self) -> int:
        return self.mask.nbytes + self.palette.nbytes + (0 if self.codes is None else self.codes.nbytes)


#: entries a chunk of a layer's entries holds while its diagonals are summed (a 512-channel 3x3 conv has ~26 M of
#: them: built at once, they and their positions took ~2 GB beside the ~0.3 GB of diagonals they sum to)
ENTRY_CHUNK = 1 << 22


def conv_entries(U: np.ndarray, index: np.ndarray, first_row: int = 0):
    """(rows, cols, weights) of a lowered conv / avgpool step: output row co*P + p reads input idx[i, p] with
    weight U[co, i] (idx -1: zero padding, no entry). first_row: U holds the step's weight rows from that one on
    (a chunk of them), its entries' rows numbered as in the whole step."""
    idx = np.asarray(index)
    P = idx.shape[1]
    ii, pp = np.nonzero(idx >= 0)
    cols = idx[ii, pp]
    U = np.asarray(U, dtype=np.float64)
    rows = ((first_row + np.arange(U.shape[0]))[:, None] * P + pp[None, :]).reshape(-1)
    return rows, np.broadcast_to(cols, (U.shape[0], cols.size)).reshape(-1), U[:, ii].reshape(-1)


def conv_entry_chunks(U: np.ndarray, index: np.ndarray, chunk: int = ENTRY_CHUNK):
    """conv_entries' entries, in the same order, as a function returning an iterator of chunks of whole weight rows
    (about `chunk` entries each): what diagonals_from_entries sums without holding every entry at once."""
    U = np.asarray(U, dtype=np.float64)
    per_row = max(1, int(np.count_nonzero(np.asarray(index) >= 0)))
    step = max(1, chunk // per_row)
    return lambda: (conv_entries(U[lo:lo + step], index, lo) for lo in range(0, U.shape[0], step))


def dense_entries(W: np.ndarray):
    """(rows, cols, weights) of the nonzero entries of a dense matrix."""
    rows, cols = np.nonzero(W)
    return rows, cols, W[rows, cols]


def diagonals_from_entries(rows, cols, vals, pos_out: np.ndarray, period_out: int, pos_in: np.ndarray,
                           period_in: int, S1: int) -> tuple[dict, list]:
    """The nonzero generalised diagonals {j: SparseDiag over S1 positions} with z = sum_j d_j * rot(v, j) and the
    rotate-and-sum amounts that follow (input period larger than the output's: the partial sums of an output sit
    in several copies of the output period and are summed). The input repeats with period_in; the result repeats
    with period_out and is zero off the output positions. `rows` may instead be a function returning an iterator
    of (rows, cols, vals) chunks (conv_entry_chunks; cols and vals then None): the same entries in the same order,
    each output row's entries within one chunk, summed to the same bits."""
    chunks = rows if callable(rows) else (lambda: iter([(rows, cols, vals)]))
    L, Pmin = max(period_in, period_out), min(period_in, period_out)

    def keys(r, c):
        po, pi = pos_out[r].astype(np.int64), pos_in[c].astype(np.int64)
        j = (pi - po) % Pmin
        return j, (po if period_out >= period_in else (pi - j) % period_in)

    # each (diagonal, position) sums its entries in entry order; the diagonals that occur numbered in order, so
    # the sums land in one dense array (a few hundred diagonals x L) instead of a sort of every entry. A key
    # (diagonal, position) names one output position and, with it, one input position: all its entries are one
    # output row's, so summing chunk by chunk adds the same terms in the same order
    counts = np.zeros(Pmin, dtype=np.int64)
    for r, c, _ in chunks():
        counts += np.bincount(keys(r, c)[0], minlength=Pmin)
    used = np.flatnonzero(counts)
    rank = np.zeros(Pmin, dtype=np.int64)
    rank[used] = np.arange(used.size)
    w = np.zeros(used.size * L)
    for r, c, v in chunks():
        j, i = keys(r, c)
        np.add.at(w, rank[j] * L + i, v)
    diags = {}
    # each diagonal is kept over one period L of S1 (SparseDiag repeats it over the S1 positions), read row by row
    # out of the sums (no array of every nonzero's index beside them)
    for jv, row in zip(used, w.reshape(used.size, L)):
        nz = np.flatnonzero(row)
        if nz.size:
            diags[int(jv)] = SparseDiag.from_positions(nz, row[nz], S1, L)
    red = [period_out << e for e in range(int(math.log2(period_in // period_out)))] if period_out < period_in else []
    return diags, red


def bsgs_split(offsets) -> int:
    """The baby-step size g1 (a power of two) with the fewest rotations for the offsets j = g1*h + g: nonzero
    baby steps {j mod g1} (hoisted) plus nonzero giant steps {j div g1}; ties: fewer giant steps."""
    J = np.asarray(sorted(offsets), dtype=np.int64)
    if J.size == 0:
        return 1
    best = None
    g1 = 1
    while g1 <= max(1, int(J.max()) * 2):
        baby = np.unique(J % g1)
        giant = np.unique(J // g1)
        cost = (int(np.count_nonzero(baby)) + int(np.count_nonzero(giant)), int(np.count_nonzero(giant)))
        if best is None or cost < best[0]:
            best = (cost, g1)
        g1 *= 2
    return best[1]
