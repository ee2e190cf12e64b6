"""The MLWE format (decimated rows, sqrt(N) <= d3 < N): k = N / d3 rows per coefficient-encoded ciphertext (row
k i + u, column t -> coefficient t k + u of ciphertext i); a product re-interleaves its rows with ModPack key
switches (csrc/pcmm/mlwe.cpp)."""
from __future__ import annotations

import numpy as np

from hemlp import _core
from hemlp.errors import EncodingError, MissingKeyError, ShapeError
from hemlp.fhe import Ciphertext, Context, PublicKey, SecretKey
from hemlp.pcmm.keys import ModPackKeys
from hemlp.pcmm.matrix import CtMatrix
from hemlp.pcmm.quantize import quantize

__all__ = ["rows_per_ciphertext", "encrypt", "decrypt", "product"]


def rows_per_ciphertext(ctx: Context, d3: int) -> int:
    N = ctx.N
    if d3 >= N or N % d3 or d3 * d3 < N:
        raise ShapeError(f"MLWE needs sqrt(N) <= d3 < N with d3 dividing N = {N}; got d3 = {d3} "
                         "(use format='rlwe' or 'msrlwe' otherwise)")
    return N // d3


def encrypt(ctx: Context, M: np.ndarray, key, encoding: str, level, scale) -> CtMatrix:
    if encoding != "coeff":
        raise EncodingError("format 'mlwe' (k > 1) needs encoding='coeff': the slot encoding does not commute "
                            "with the decimation X -> X^k")
    if not isinstance(key, (PublicKey, SecretKey)):
        raise TypeError("key must be a hemlp.fhe PublicKey or SecretKey")
    d2, d3 = M.shape
    k = rows_per_ciphertext(ctx, d3)
    cts = []
    for i in range(-(-d2 // k)):
        block = np.zeros((k, d3))
        rows = M[i * k : (i + 1) * k]
        block[: rows.shape[0]] = rows
        # row k*i + u, column t -> coefficient t*k + u
        cts.append(ctx.encrypt(block.T.reshape(-1), key, level=level, scale=scale, encoding="coeff"))
    return CtMatrix(ctx, cts, (d2, d3), 1, "mlwe")


def decrypt(ctx: Context, C: CtMatrix, sk: SecretKey) -> np.ndarray:
    d2, d3 = C.shape
    k = C.k
    blocks = [ctx.decrypt(c, sk).reshape(d3, k).T for c in C.cts]
    return np.concatenate(blocks)[:d2]


def product(U: np.ndarray, C: CtMatrix, keys, weight_bits: int, bias, rescale: bool) -> CtMatrix:
    ctx = C.ctx
    k = C.k
    if not isinstance(keys, ModPackKeys) or keys.k != k:
        raise MissingKeyError(f"an MLWE(k={k}) product needs ModPack keys: "
                              f"pcmm(U, C, keys=pcmm.modpack_keys(ctx, sk, {k}))")
    d1, d2 = U.shape
    rows_in, rows_out = len(C.cts) * k, -(-d1 // k) * k
    Up = np.zeros((rows_out, rows_in))  # zero rows/columns pad to whole ciphertexts
    Up[:d1, :d2] = U
    Uq, delta = quantize(Up, weight_bits)
    K = max(1, round(ctx.modulus(C.level) / delta)) if rescale else 1
    plan = _core.ModGemmPlan(Uq, int(weight_bits))
    raw = _core.pcmm_mlwe(ctx.native, plan, [c.native for c in C.cts], k, int(K), float(delta * K), keys.native)
    cts = [ctx.wrap(Ciphertext, o) for o in raw]
    if rescale:
        cts = [ctx.rescale_inplace(c) for c in cts]
    if bias is not None:
        b = np.zeros(rows_out)
        bb = np.asarray(bias, dtype=np.float64).reshape(-1)
        if bb.shape[0] != d1:
            raise ShapeError(f"pcmm: bias has {bb.shape[0]} entries for {d1} output rows")
        b[:d1] = bb
        d3 = C.shape[1]
        cts = [ctx.add(c, np.tile(b[g * k : (g + 1) * k], d3)) for g, c in enumerate(cts)]
    return CtMatrix(ctx, cts, (d1, C.shape[1]), 1, "mlwe")
