"""HE-friendly building blocks and multiplicative-depth accounting."""
from __future__ import annotations

import math

import torch
from torch import nn


class Square(nn.Module):
    """x ↦ x² (exported to ONNX as Mul(x, x)); one ciphertext-ciphertext multiplication level."""

    def forward(self, x):
        return x * x

    degree = 2


class PolyAct(nn.Module):
    """x ↦ Σ_i c_i x^i with fixed coefficients (low degree, e.g. a least-squares fit of an
    activation). Exported as Mul/Add nodes. Depth ⌈log2 degree⌉ when the scalar coefficients are
    folded into neighbouring linear layers (a x² + b x + c = a (x + b/2a)² + c − b²/4a)."""

    def __init__(self, coeffs):
        super().__init__()
        # Python floats (not buffers): traced graphs / ONNX see plain constants
        self.coeffs = tuple(float(c) for c in coeffs)
        if len(self.coeffs) < 2:
            raise ValueError("PolyAct needs degree >= 1")

    @property
    def degree(self) -> int:
        return len(self.coeffs) - 1

    def forward(self, x):
        c = self.coeffs
        y = x * c[1] + c[0]
        p = x
        for ci in c[2:]:
            p = p * x
            y = y + p * ci
        return y

    def extra_repr(self):
        return "coeffs=" + ", ".join(f"{v:.4g}" for v in self.coeffs)


# Least-squares degree-2 fit of ReLU on [-4, 4] (uniform weight): 0.375 + 0.5 x + 0.1171875 x²
RELU_DEG2 = (0.375, 0.5, 0.1171875)


def mult_depth(model: nn.Module, fuse_linear: bool = False) -> int:
    """Multiplicative depth of a sequential HE-friendly model: each Conv/Linear/AvgPool layer
    is one level (plaintext-weight products followed by a rescale), each Square one level, a
    degree-d PolyAct ⌈log2 d⌉. With fuse_linear=True, runs of consecutive linear layers
    (e.g. AvgPool then Linear) count as one level (a compiler may fold them)."""
    depth, prev_linear = 0, False
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear, nn.AvgPool2d)):
            if not (fuse_linear and prev_linear):
                depth += 1
            prev_linear = True
        elif isinstance(m, (Square, PolyAct)):
            depth += max(1, math.ceil(math.log2(max(2, m.degree))))
            prev_linear = False
        elif isinstance(m, (nn.Sequential, nn.Flatten, nn.Identity)) or m is model:
            continue
        else:
            prev_linear = False
    return depth


def activation(kind: str) -> nn.Module:
    if kind == "square":
        return Square()
    if kind in ("poly", "relu-poly2"):
        return PolyAct(RELU_DEG2)
    raise ValueError(f"activation {kind!r} unknown; use 'square' or 'poly'")
