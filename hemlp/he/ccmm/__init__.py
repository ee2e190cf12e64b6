"""Ciphertext × ciphertext matrix products. rectangular: σ/τ/ε/ω for m×l · l×n (layout C's block product)."""
