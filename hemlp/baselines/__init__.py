"""Rotation-based matrix-multiplication baselines on hemlp.ckks (BRIEF §5).

- linear_transform: y = T x via generalised diagonals, BSGS and hoisted baby steps (the HLT);
- halevi_shoup: plaintext matrix × encrypted vectors (the PCMM baseline, §5.1);
- jkls: Jiang–Kim–Lauter–Song square ciphertext × ciphertext matmul (§5.2);
- rectangular: the σ/τ/ε/ω generalisation for m×l · l×n (Huang et al. / FAME, §5.3).

Every function takes the Context as its first argument; pass a linear_transform.OpCounter
instead to count the homomorphic operations it issues.
"""
from hemlp.baselines import halevi_shoup, jkls, linear_transform, rectangular
from hemlp.baselines.linear_transform import LinearTransform, OpCounter

__all__ = ["linear_transform", "halevi_shoup", "jkls", "rectangular", "LinearTransform", "OpCounter"]
