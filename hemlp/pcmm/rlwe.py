"""The RLWE format: every chunk of a row is its own ciphertext; stacked, the ciphertexts satisfy
A Toep(s) + B = M + E, so for a plaintext U (d1 x d2), (U A, U B) encrypts U M: a PCMM is two exact modular GEMMs
per RNS limb (csrc/pcmm), with no rotations and no keys. pcmm_gather runs a gathered product (a convolution as
im2col over ciphertext rows); extract_lwe turns a coefficient into an LWE ciphertext."""
from __future__ import annotations

import numpy as np

from hemlp import _core
from hemlp.errors import EncodingError, LevelError, ShapeError
from hemlp.fhe import Ciphertext, Context, PublicKey, SecretKey
from hemlp.pcmm.matrix import CtMatrix
from hemlp.pcmm.quantize import quantize

__all__ = ["encrypt", "decrypt", "pcmm_gather", "gathered_product", "extract_lwe"]


def encrypt(ctx: Context, M: np.ndarray, key, encoding: str, level, scale) -> CtMatrix:
    """M row by row, chunk by chunk, one ciphertext each (encrypt_matrix's RLWE format)."""
    if not isinstance(key, (PublicKey, SecretKey)):
        raise TypeError("key must be a hemlp.fhe PublicKey or SecretKey")
    width = ctx.slots if encoding == "slot" else ctx.N
    d2, d3 = M.shape
    chunks = -(-d3 // width)
    cts = []
    for i in range(d2):
        for j in range(chunks):
            part = M[i, j * width : (j + 1) * width]
            cts.append(ctx.encrypt(part, key, level=level, scale=scale, encoding=encoding))
    return CtMatrix(ctx, cts, (d2, d3), chunks, "rlwe")


def decrypt(ctx: Context, C: CtMatrix, sk: SecretKey) -> np.ndarray:
    d2, d3 = C.shape
    out = np.empty((d2, d3))
    for i in range(d2):
        row = np.concatenate([ctx.decrypt(c, sk) for c in C.row(i)])
        out[i] = row[:d3]
    return out


def pcmm_gather(U, C: CtMatrix, index, weight_bits: int = 20, bias=None, rescale: bool = True) -> CtMatrix:
    """Gathered PCMM, e.g. a convolution as im2col over ciphertext rows with no crypto work.

    index: int array (d2, P); column p selects the rows of C that U multiplies for output
    block p (-1 = a zero row, e.g. padding). Returns d1*P rows ordered (r, p) -> r*P + p:
        out[r*P + p] = sum_i U[r, i] * C.row(index[i, p]) (+ bias[r]).
    All P blocks run through the same prepared U (one exact GEMM per limb, part and chunk)."""
    if not isinstance(C, CtMatrix):
        raise TypeError("pcmm: C must be a CtMatrix (see hemlp.pcmm.encrypt_matrix)")
    if C.format != "rlwe":
        raise EncodingError("pcmm_gather works on RLWE matrices; convert with pcmm.to_rlwe first")
    U = np.asarray(U, dtype=np.float64)
    index = np.asarray(index)
    if U.ndim != 2 or index.ndim != 2 or index.shape[0] != U.shape[1]:
        raise ShapeError(f"pcmm_gather: U {U.shape} needs an index of shape ({U.shape[1] if U.ndim == 2 else '?'}, P), "
                         f"got {index.shape}")
    if not np.issubdtype(index.dtype, np.integer) or index.min() < -1 or index.max() >= C.shape[0]:
        raise ShapeError(f"pcmm_gather: index entries must be -1 or row numbers < {C.shape[0]}")
    if not 1 <= weight_bits <= 40:
        raise EncodingError("weight_bits must be in [1, 40]")
    ctx = C.ctx
    level = C.level
    if rescale and level == 0:
        raise LevelError("pcmm: the encrypted matrix is at level 0; a PCMM needs one level for its rescale")
    c = C.chunks
    cts = gathered_product(ctx, U, index, lambda r, j: C.cts[r * c + j].native, c, level, C.encoding == "slot",
                           weight_bits, bias, rescale,
                           lambda plan, inputs, *args: _core.pcmm_rlwe(ctx.native, plan, inputs, *args))
    return CtMatrix(ctx, cts, (U.shape[0] * index.shape[1], C.shape[1]), c, C.format)


def gathered_product(ctx, U, index, row, chunks: int, level: int, slot_encoded: bool, weight_bits: int, bias,
                     rescale: bool, native, *, delta: float | None = None, defer_rescale: bool = False) -> list:
    """pcmm_gather's body over any row source (the Ray runtime's in-place PCMM reads object-store views): U
    quantised, K chosen, the inputs laid out (i, p, j) as row(r, j) (None for index -1: a zero row), then
    native(plan, inputs, P * chunks, K, factor, rescale, fused bias) -> native ciphertexts, and a bias that is not
    fused (coefficient encoding) added as an encoded constant. Returns the d1 * P * chunks output Ciphertexts.

    For a product computed by blocks (hemlp.runtime.streamed): ``delta`` quantises U, a block of a larger matrix,
    with the whole matrix's step (quantize's Delta_U), so its entries are the whole's; ``defer_rescale`` (with
    rescale) multiplies by the rescale's K but leaves the rescale and the bias to the caller, who sums such partial
    products over blocks of d2 (exact mod q) and rescales once: the same bits as the whole product."""
    if delta is None:
        Uq, delta = quantize(U, weight_bits)
    else:
        Uq = np.rint(np.asarray(U, dtype=np.float64) * delta).astype(np.int64)
    K = max(1, round(ctx.modulus(level) / delta)) if rescale else 1
    if defer_rescale:
        rescale, bias = False, None
    plan = _core.ModGemmPlan(Uq, int(weight_bits))
    d2, P = index.shape
    # inputs laid out (i, p, j): the P output blocks become extra column panels of one product
    inputs = [None if index[i, p] < 0 else row(int(index[i, p]), j)
              for i in range(d2) for p in range(P) for j in range(chunks)]
    b = None
    if bias is not None:
        b = np.asarray(bias, dtype=np.float64).reshape(-1)
        if b.shape[0] != U.shape[0]:
            raise ShapeError(f"pcmm: bias has {b.shape[0]} entries for {U.shape[0]} output rows")
    fused = b is not None and rescale and slot_encoded  # constant bias added natively
    raw = native(plan, inputs, P * chunks, int(K), float(delta * K), bool(rescale), b.tolist() if fused else [])
    cts = [ctx.wrap(Ciphertext, o) for o in raw]
    if b is not None and not fused:
        cts = [ctx.add(ct, float(b[idx // (P * chunks)])) for idx, ct in enumerate(cts)]
    return cts


def extract_lwe(ctx: Context, ct: Ciphertext, index: int):
    """LWE ciphertext of coefficient `index` of a coefficient-encoded RLWE ciphertext.

    Returns (b, A): b has shape (limbs,), A shape (limbs, N), residues mod q_l, with
    b + <A, s> = m_index (mod q_l), s the secret's coefficients. (c1 s)_i sums
    c1_{i-j} s_j for j <= i and -c1_{N+i-j} s_j for j > i (negacyclic wrap)."""
    if not isinstance(ct, Ciphertext) or ct.encoding != "coeff" or ct.size != 2:
        raise EncodingError("extract_lwe needs a relinearised, coefficient-encoded ciphertext")
    N = ctx.N
    if not 0 <= index < N:
        raise ShapeError(f"coefficient index must be in [0, {N})")
    bs, As = [], []
    for limb in range(ct.level + 1):
        q = ctx.modulus(limb)
        c0 = ctx.intt(ct.native.poly(0)[limb], limb=limb)
        c1 = ctx.intt(ct.native.poly(1)[limb], limb=limb).astype(object)
        j = np.arange(N)
        src = index - j
        a = np.where(src >= 0, c1[src % N], (q - c1[src % N]) % q)
        bs.append(int(c0[index]))
        As.append(a.astype(np.uint64))
    return np.array(bs, dtype=np.uint64), np.stack(As)
