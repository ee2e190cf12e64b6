"""hemlp.compiler: frontends (torch.fx, ONNX) -> IR -> folding -> activations -> lowering -> levels.

The user entry point is ``hemlp.compile`` (hemlp/model.py); the layouts that run the lowered steps are in
hemlp/layouts/. ``Polynomial`` is a torch module for user-defined polynomial activations (power basis):
``Polynomial([c0, c1, c2])`` computes c0 + c1 x + c2 x^2 and is compiled exactly.
"""
from __future__ import annotations

_poly_cls = None


def _make_polynomial():
    import torch

    class Polynomial(torch.nn.Module):
        """Elementwise polynomial activation sum_i coeffs[i] * x**i (compiled exactly by hemlp)."""

        def __init__(self, coeffs):
            super().__init__()
            self.coeffs = [float(c) for c in coeffs]

        def forward(self, x):
            y = torch.zeros_like(x) + self.coeffs[-1]
            for c in reversed(self.coeffs[:-1]):
                y = y * x + c
            return y

        def extra_repr(self):
            return f"coeffs={self.coeffs}"

    return Polynomial


def __getattr__(name):
    global _poly_cls
    if name == "Polynomial":
        if _poly_cls is None:
            _poly_cls = _make_polynomial()
        return _poly_cls
    raise AttributeError(f"module 'hemlp.compiler' has no attribute {name!r}")
