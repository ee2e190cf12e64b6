"""Homomorphic building blocks on hemlp.fhe (as Lattigo's he/hefloat), used by bootstrapping and the layouts.

- lintrans: the BSGS linear transform over generalised diagonals (single / double hoisting, native path);
- polynomial: BSGS polynomial evaluation (Python reference and the native evaluator);
- special_fft, reinterpret, subring, dft: the canonical embedding's factorisation, exact level-free
  re-reading of ciphertexts, the subring trace, and the homomorphic CoeffToSlot / SlotToCoeff;
- ccmm: ciphertext × ciphertext matrix products (rectangular: the σ/τ/ε/ω CCMM of layout C).

It imports only hemlp.fhe, hemlp.errors and the native core (tests/test_architecture.py).
"""
