"""Rotation-based matrix-multiplication baselines on hemlp.fhe (docs/design/pcmm-and-planning.md §5), kept for
comparison only.

- halevi_shoup: plaintext matrix × encrypted vectors (the PCMM baseline, §5.1);
- jkls: Jiang–Kim–Lauter–Song square ciphertext × ciphertext matmul (§5.2).

The building blocks production uses live in hemlp.he: the BSGS linear transform (hemlp.he.lintrans) and the
rectangular σ/τ/ε/ω CCMM (hemlp.he.ccmm.rectangular, layout C). Every function takes the Context as its first
argument; pass a hemlp.he.lintrans.OpCounter instead to count the homomorphic operations it issues.
"""
from hemlp.baselines import halevi_shoup, jkls

__all__ = ["halevi_shoup", "jkls"]
