"""A zoo of standard PyTorch architectures written the way their authors wrote them (functional calls,
``x.size()``-dependent pooling, ``view(out.size(0), -1)``, lambda shortcuts, in-place residual adds, ...): the
regression suite for hemlp's torch and ONNX frontends, which must accept what users copy from these repositories.

``ZOO`` maps a name to a ``ZooEntry``; ``build(name)`` gives a seeded model in eval mode. The models are as published
(ReLU, LayerNorm, ...): whether hemlp compiles each one, and how, is for the frontend tests to say, not for this
package to arrange.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .lenet import LeNet5
from .lola import LoLAMNIST
from .mixer import mixer_tiny
from .mlp import mlp_emnist
from .mobilenet import mobilenet_v1, mobilenet_v2
from .resnet18 import ResNet18
from .resnet_cifar import resnet20, resnet20_b, resnet32, resnet44
from .vgg_small import vgg_small

__all__ = ["ZOO", "ZooEntry", "build", "load_weights"]


@dataclass(frozen=True)
class ZooEntry:
    """One architecture: ``builder(num_classes, **options)`` returns a fresh ``nn.Module``.

    ``input_shape`` is the (C, H, W) it is written for; ``small_input_shape`` a smaller one the same model also runs on
    (equal to ``input_shape`` where the architecture fixes its input size); ``small_options`` builder keywords that
    give a narrow copy for fast tests (``{}`` where the published size is already cheap)."""
    name: str
    builder: Callable[..., nn.Module]
    input_shape: tuple[int, int, int]
    small_input_shape: tuple[int, int, int]
    dataset: str                        # "cifar10" | "emnist"
    source: str
    num_classes: int = 10               # the class count it is written for
    small_options: dict[str, Any] = field(default_factory=dict)


_CIFAR = (3, 32, 32)
_EMNIST = (1, 28, 28)

ZOO: dict[str, ZooEntry] = {e.name: e for e in (
    ZooEntry("resnet20", resnet20, _CIFAR, (3, 8, 8), "cifar10",
             "akamaster/pytorch_resnet_cifar10 resnet.py, He et al. 2016 (option A shortcuts)"),
    ZooEntry("resnet32", resnet32, _CIFAR, (3, 8, 8), "cifar10",
             "akamaster/pytorch_resnet_cifar10 resnet.py, He et al. 2016 (option A shortcuts)"),
    ZooEntry("resnet44", resnet44, _CIFAR, (3, 8, 8), "cifar10",
             "akamaster/pytorch_resnet_cifar10 resnet.py, He et al. 2016 (option A shortcuts)"),
    ZooEntry("resnet20_b", resnet20_b, _CIFAR, (3, 8, 8), "cifar10",
             "akamaster/pytorch_resnet_cifar10 resnet.py, He et al. 2016 (option B: 1x1 conv + BN projections)"),
    ZooEntry("resnet18", ResNet18, _CIFAR, _CIFAR, "cifar10",
             "kuangliu/pytorch-cifar models/resnet.py, He et al. 2016", small_options={"width": 8}),
    ZooEntry("lenet5", LeNet5, _EMNIST, _EMNIST, "emnist",
             "LeCun et al. 1998, as in the PyTorch tutorials (ReLU, average pooling)"),
    ZooEntry("lola_mnist", LoLAMNIST, _EMNIST, _EMNIST, "emnist",
             "Brutzkus et al. 2019 (LoLA), Gilad-Bachrach et al. 2016 (CryptoNets)"),
    ZooEntry("vgg_small", vgg_small, _CIFAR, _CIFAR, "cifar10",
             "kuangliu/pytorch-cifar models/vgg.py, Simonyan & Zisserman 2015 (avg pooling, torchvision head)",
             small_options={"width_mult": 0.25}),
    ZooEntry("mobilenet_v1", mobilenet_v1, _CIFAR, (3, 8, 8), "cifar10",
             "marvis/pytorch-mobilenet, Howard et al. 2017 (small CIFAR config, ReLU6)"),
    ZooEntry("mobilenet_v2", mobilenet_v2, _CIFAR, (3, 8, 8), "cifar10",
             "kuangliu/pytorch-cifar models/mobilenetv2.py, Sandler et al. 2018 (small config, ReLU6)"),
    ZooEntry("mixer", mixer_tiny, _CIFAR, _CIFAR, "cifar10",
             "timm mlp_mixer.py / lucidrains mlp-mixer-pytorch, Tolstikhin et al. 2021 (tiny, LayerNorm)"),
    ZooEntry("mixer_nonorm", functools.partial(mixer_tiny, norm=nn.Identity), _CIFAR, _CIFAR, "cifar10",
             "timm mlp_mixer.py / lucidrains mlp-mixer-pytorch, Tolstikhin et al. 2021 (tiny, norm=nn.Identity)"),
    ZooEntry("mlp_emnist", mlp_emnist, _EMNIST, _EMNIST, "emnist",
             "the MNIST-tutorial MLP, 784-256-128-47 for EMNIST balanced", num_classes=47),
)}


def build(name: str, num_classes: int | None = None, seed: int = 0, **options) -> nn.Module:
    """``ZOO[name]``'s model with weights drawn under ``torch.manual_seed(seed)``, in eval mode. ``num_classes``
    defaults to the entry's (10, or 47 for the EMNIST MLP); ``options`` go to the builder (e.g. ``width=8``)."""
    if name not in ZOO:
        raise ValueError(f"zoo model {name!r} unknown; choose one of {', '.join(ZOO)}")
    entry = ZOO[name]
    torch.manual_seed(seed)
    model = entry.builder(entry.num_classes if num_classes is None else num_classes, **options)
    return model.eval()


def load_weights(path) -> tuple[nn.Module, dict]:
    """A zoo model with the weights of a file saved by scripts/train_resnet20.py (``model``: its zoo name,
    ``state_dict``: its weights, stored as float16; ``mean``, ``std``: the input standardisation): the model in
    float32 and eval mode, and the file's dict."""
    state = torch.load(path, weights_only=False)
    model = build(state["model"])
    model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in state["state_dict"].items()})
    return model.eval(), state
