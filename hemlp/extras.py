"""Optional dependencies, imported where a feature uses them: the base install (numpy) runs everything else.

    onnx = require("onnx", "the ONNX frontend")     # MissingDependencyError naming pip install 'hemlp[ml]'

EXTRAS maps each optional package to the setup.py extra that installs it.
"""
from __future__ import annotations

import importlib

from hemlp.errors import MissingDependencyError

__all__ = ["EXTRAS", "require", "install_hint"]

#: optional package -> the extra of setup.py that installs it
EXTRAS = {"torch": "ml", "torchvision": "ml", "onnx": "ml", "mlxtend": "ml", "tqdm": "ml", "rich": "ml",
          "matplotlib": "ml", "wandb": "ml", "ray": "ray", "grpc": "ray", "mpmath": "boot", "pytest": "dev",
          "threadpoolctl": "dev"}


def install_hint(module: str) -> str:
    top = module.split(".")[0]
    extra = EXTRAS.get(top)
    return f"pip install 'hemlp[{extra}]'" if extra else f"pip install {top}"


def require(module: str, feature: str):
    """The imported module, or MissingDependencyError saying which feature needs it and which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if getattr(exc, "name", None) not in (None, module, module.split(".")[0]):
            raise   # the package is there but one of its own imports fails: show that error as it is
        raise MissingDependencyError(f"{feature} needs the `{module.split('.')[0]}` package, which is not "
                                     f"installed: {install_hint(module)}") from None
