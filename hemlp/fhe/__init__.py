"""The scheme layer: RNS-CKKS on the native core (hemlp._core), as Lattigo's core/rlwe + schemes/ckks.

- ckks: Params (presets, the 128-bit policy), Context (keygen, encrypt, decrypt with IND-CPA-D noise, the
  homomorphic operations), the key and ciphertext objects with their documented ``.native`` handles;
- serialize: the checksummed, versioned container of every scheme object;
- files: atomic file writes (secret keys created 0600) and checked reads.

Nothing here imports a higher layer (he, bootstrap, linalg, layouts, model, runtime, apps): tests/test_architecture.py.
"""
