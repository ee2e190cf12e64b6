"""HE-friendly model definitions (imported as hemlp.models).

- ``FHE4DMMNet``: FHE4DMM's 5-layer network (Conv → x² → FC → x² → FC), EMNIST / CIFAR-10 configs.
- ``HEMLP``: MLP 784-128-64-10 with x² or degree-2 polynomial activations.
- ``CifarCNN``: small CNN with x² and average pooling within 6 levels.
- ``CifarResNet``: ResNet-9-style CIFAR-10 network (bootstrapped; not a leveled model, so not in ``build``:
  ``train_deploy.py --resnet`` trains it).
- ``train`` (submodule): seeded deterministic CPU training.
"""
from .layers import PolyAct, Square, mult_depth

MODELS = ("fhe4dmm", "mlp", "mlp-poly", "cifar-cnn")

__all__ = ["Square", "PolyAct", "mult_depth", "build", "MODELS", "FHE4DMMNet", "HEMLP", "CifarCNN", "CifarResNet"]


def build(name: str, input_shape=(1, 28, 28), num_classes: int = 10, seed: int | None = None,
          width: int | None = None):
    """A model by name for inputs of shape (C, H, W); ``seed`` makes the initial weights reproducible;
    ``width`` sets cifar-cnn's first-layer channels (default 16)."""
    c, h, w = input_shape
    if seed is not None:
        import torch

        torch.manual_seed(seed)
    if name == "fhe4dmm":
        from .fhe4dmm import CONFIGS, FHE4DMMNet

        cfg = {(1, 28): "emnist", (3, 32): "cifar10"}.get((c, h))
        if cfg is None:
            raise ValueError(f"fhe4dmm has configs for 1x28x28 (EMNIST) and 3x32x32 (CIFAR-10), not {input_shape}")
        return FHE4DMMNet(CONFIGS[cfg], num_classes)
    if name in ("mlp", "mlp-poly"):
        from .mlp import HEMLP

        return HEMLP(c * h * w, (128, 64), num_classes, "poly" if name == "mlp-poly" else "square", c, h)
    if name == "cifar-cnn":
        from .cifar_cnn import CifarCNN

        return CifarCNN(num_classes, width=width or 16, in_channels=c, image_size=h)
    raise ValueError(f"model {name!r} unknown; choose one of {', '.join(MODELS)}")


def __getattr__(name):
    import importlib

    where = {"FHE4DMMNet": ".fhe4dmm", "HEMLP": ".mlp", "CifarCNN": ".cifar_cnn", "CifarResNet": ".cifar_resnet"}
    if name in where:
        return getattr(importlib.import_module(where[name], __name__), name)
    if name in ("train", "fhe4dmm", "mlp", "cifar_cnn", "cifar_resnet", "layers"):
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
