"""Encrypted matrices and plaintext x ciphertext matrix products (PCMM) as exact modular GEMMs (csrc/pcmm).

    from hemlp import fhe, pcmm
    ctx = fhe.Context("N14-d6")
    sk, pk = ctx.keygen()
    C = pcmm.encrypt_matrix(ctx, M, pk)          # M: d2 x d3 (features x batch), row-wise ciphertexts
    Y = pcmm.pcmm(U, C)                          # Enc(U @ M): no rotations, no keys (RLWE format), one level
    pcmm.decrypt_matrix(ctx, Y, sk)

- matrix: CtMatrix (the encrypted matrix in one of the formats rlwe, mlwe, msrlwe), MsRow, choose_format;
- dispatch: encrypt_matrix, decrypt_matrix, pcmm for every format;
- rlwe / mlwe / msrlwe: each format's encryption, decryption and product (pcmm_gather: the im2col gather of the
  RLWE format; PcmmPrecomputed, to_rlwe, to_msrlwe: MSRLWE's offline half and conversions);
- keys: MultiSecretKey, ConversionKeys, MsrlweConversionKeys, ModPackKeys and the functions that make them;
- quantize: the weights' power-of-two quantisation.

Built on hemlp.fhe only (tests/test_architecture.py).
"""
from hemlp.pcmm.dispatch import decrypt_matrix, drop_matrix, encrypt_matrix, pcmm
from hemlp.pcmm.keys import (ConversionKeys, ModPackKeys, MsrlweConversionKeys, MultiSecretKey, conversion_keys,
                             modpack_keys, msrlwe_conversion_keys, multi_secret_key)
from hemlp.pcmm.matrix import FORMATS, CtMatrix, MsRow, choose_format
from hemlp.pcmm.msrlwe import PcmmPrecomputed, to_msrlwe, to_rlwe
from hemlp.pcmm.quantize import quantize
from hemlp.pcmm.rlwe import extract_lwe, gathered_product, pcmm_gather

__all__ = ["CtMatrix", "encrypt_matrix", "decrypt_matrix", "pcmm", "pcmm_gather", "choose_format", "quantize",
           "multi_secret_key", "conversion_keys", "to_rlwe", "PcmmPrecomputed", "MultiSecretKey", "modpack_keys",
           "msrlwe_conversion_keys", "to_msrlwe", "extract_lwe", "ModPackKeys", "ConversionKeys", "MsRow",
           "MsrlweConversionKeys", "gathered_product", "FORMATS", "drop_matrix"]
