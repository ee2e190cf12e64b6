"""The PCMM entry points for every format: encrypt_matrix, decrypt_matrix and pcmm (Enc(U @ M + bias) from a
plaintext U and an encrypted M), each dispatching on the matrix format (hemlp.pcmm.rlwe, .mlwe, .msrlwe).

Weights are quantised as U~ = round(Delta_U U) with Delta_U = 2^weight_bits / max|U|; the
product is multiplied by the integer K = round(q_l / Delta_U) and rescaled by q_l, so the
output scale is in.scale * Delta_U * K / q_l (tracked exactly, within 2^-(log q_l - weight_bits)
of the input scale).
"""
from __future__ import annotations

import numpy as np

from hemlp.errors import ContextMismatchError, EncodingError, KeyMismatchError, LevelError, ShapeError
from hemlp.fhe import Context, SecretKey
from hemlp.pcmm import mlwe, msrlwe, rlwe
from hemlp.pcmm.keys import MultiSecretKey
from hemlp.pcmm.matrix import FORMATS, CtMatrix
from hemlp.pcmm.msrlwe import PcmmPrecomputed

__all__ = ["encrypt_matrix", "decrypt_matrix", "pcmm", "drop_matrix"]


def _check_format(fmt: str) -> str:
    if fmt == "auto":
        return "rlwe"
    if fmt not in FORMATS:
        raise EncodingError(f"format must be 'auto' or one of {FORMATS}, got {fmt!r}")
    return fmt


def encrypt_matrix(ctx: Context, M, key, format: str = "auto", encoding: str = "slot",
                   level: int | None = None, scale: float | None = None, session_seed: bytes | None = None) -> CtMatrix:
    """Encrypt a real matrix row-wise (client side).

    key: PublicKey / SecretKey (RLWE rows), or a MultiSecretKey (format "msrlwe": the k chunks of
    a row share one a-part expanded from a per-row seed of the 32-byte encryption session)."""
    fmt = _check_format(format)
    if isinstance(key, MultiSecretKey):
        fmt = "msrlwe"
    elif fmt == "msrlwe":
        raise KeyMismatchError("format 'msrlwe' encrypts under a MultiSecretKey (pcmm.multi_secret_key(ctx, k))")
    M = np.asarray(M)
    if M.ndim != 2 or M.size == 0:
        raise ShapeError(f"encrypt_matrix expects a non-empty 2-D array, got shape {M.shape}")
    if np.iscomplexobj(M) or not np.issubdtype(M.dtype, np.number):
        raise EncodingError("encrypt_matrix takes real numbers")
    if fmt == "msrlwe":
        return msrlwe.encrypt(ctx, M, key, encoding, level, scale, session_seed)
    if fmt == "mlwe":
        return mlwe.encrypt(ctx, M, key, encoding, level, scale)
    return rlwe.encrypt(ctx, M, key, encoding, level, scale)


def decrypt_matrix(ctx: Context, C: CtMatrix, sk: SecretKey) -> np.ndarray:
    """Decrypt to a float64 array of C.shape (client side)."""
    if C.ctx.hash != ctx.hash:
        raise ContextMismatchError("decrypt_matrix: the matrix belongs to another parameter set")
    if C.format == "mlwe":
        return mlwe.decrypt(ctx, C, sk)
    if C.format == "msrlwe":
        if not isinstance(sk, MultiSecretKey):
            raise KeyMismatchError("an MSRLWE matrix decrypts with its MultiSecretKey")
        return msrlwe.decrypt(ctx, C, sk)
    return rlwe.decrypt(ctx, C, sk)


def pcmm(U, C: CtMatrix, keys=None, format: str = "auto", weight_bits: int = 20, bias=None,
         rescale: bool = True, precomputed: PcmmPrecomputed | None = None, level: int | None = None) -> CtMatrix:
    """Enc(U @ M + bias[:, None]) from a plaintext U (d1 x d2) and an encrypted M (d2 x d3).

    Server side: needs no keys for the RLWE format. One level is used (the rescale).
    weight_bits: precision of the quantised weights (|U~| <= 2^weight_bits).
    level: run the product at this level (RLWE: the rows' primes above it are dropped first). A PCMM costs one
    GEMM per prime, part and digit, so a fresh matrix at the top of the chain pays for primes the rest of the
    computation never uses: pass the lowest level it needs (1 when only this rescale follows; 0 with
    rescale=False), or let the compiler plan it (hemlp.compile encrypts at the planned level)."""
    _check_format(format)
    if not isinstance(C, CtMatrix):
        raise TypeError("pcmm: C must be a CtMatrix (see hemlp.pcmm.encrypt_matrix)")
    if level is not None:
        C = drop_matrix(C, level)
    U = np.asarray(U, dtype=np.float64)
    if U.ndim != 2:
        raise ShapeError(f"pcmm: U must be 2-D, got shape {U.shape}")
    if U.shape[1] != C.shape[0]:
        raise ShapeError(f"pcmm: U is {U.shape[0]}x{U.shape[1]} but the encrypted matrix is "
                         f"{C.shape[0]}x{C.shape[1]}: U's columns must equal the encrypted rows")
    if format != "auto" and format != C.format:
        raise EncodingError(f"pcmm: the encrypted matrix is in format {C.format!r}, not {format!r}; encrypt it in "
                            f"format {format!r} (encrypt_matrix(..., format={format!r})) or pass format='auto'")
    if C.format == "msrlwe":
        return msrlwe.product(U, C, weight_bits, bias, rescale, precomputed)
    if C.format == "mlwe":
        return mlwe.product(U, C, keys, weight_bits, bias, rescale)
    if precomputed is not None:
        raise EncodingError("pcmm: precomputed U*A applies to MSRLWE matrices (shared, seeded a-parts)")
    return rlwe.pcmm_gather(U, C, np.arange(C.shape[0])[:, None], weight_bits=weight_bits, bias=bias, rescale=rescale)


def drop_matrix(C: CtMatrix, level: int) -> CtMatrix:
    """C with every RLWE row dropped to `level` (no scale change; the same matrix when already there)."""
    if isinstance(level, bool) or not isinstance(level, (int, np.integer)):
        raise TypeError(f"level must be an integer, got {type(level).__name__}")
    level = int(level)
    if level == C.level:
        return C
    if not 0 <= level < C.level:
        raise LevelError(f"pcmm: cannot run at level {level}: the encrypted matrix is at level {C.level} "
                         f"(levels only go down; encrypt at level >= {level})")
    if C.format != "rlwe":
        raise EncodingError(f"pcmm: level= drops RLWE rows; encrypt this {C.format!r} matrix at level {level} instead")
    return CtMatrix(C.ctx, [C.ctx.drop_level(c, level) for c in C.cts], C.shape, C.chunks, C.format)
