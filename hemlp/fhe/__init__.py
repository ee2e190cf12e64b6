"""The scheme layer: RNS-CKKS on the native core (hemlp._core), as Lattigo's core/rlwe + schemes/ckks.

    from hemlp import fhe
    ctx = fhe.Context("N14-d6")
    sk, pk = ctx.keygen()
    y = ctx.decrypt(ctx.mul(ctx.encrypt(x, pk), ctx.encrypt(x, pk), relin_key=ctx.relin_key(sk), rescale=True), sk)

- params: Params (presets, the 128-bit policy), FloodSpec, the default decryption noise;
- context: Context (keygen, encrypt, decrypt with IND-CPA-D noise, the homomorphic operations);
- objects: the key and ciphertext objects with their documented ``.native`` handles, from_bytes / load;
- serialize: the checksummed, versioned container of every serialised object;
- files: atomic file writes (secret keys created 0600) and checked reads.

Nothing here imports a higher layer (he, bootstrap, pcmm, layouts, model, runtime, apps): tests/test_architecture.py.
"""
from hemlp.errors import InsecureParametersWarning, UnsafeDecryptionWarning
from hemlp.fhe.context import Context
from hemlp.fhe.objects import (Ciphertext, GaloisKeys, Plaintext, PublicKey, RelinKey, SecretKey, ciphertexts_from_bytes,
                               from_bytes, load)
from hemlp.fhe.params import DECRYPT_NOISE_MODES, FloodSpec, Params, set_default_decrypt_noise

__all__ = ["Params", "Context", "Plaintext", "Ciphertext", "SecretKey", "PublicKey", "RelinKey", "GaloisKeys",
           "from_bytes", "load", "InsecureParametersWarning", "UnsafeDecryptionWarning", "FloodSpec",
           "DECRYPT_NOISE_MODES", "set_default_decrypt_noise", "ciphertexts_from_bytes"]
