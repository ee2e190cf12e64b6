"""The layouts' tests share the compiler tests' small models and helpers (tests/compiler/conftest.py)."""
from tests.compiler.conftest import (SmallCNN, Square, _quiet_insecure, encrypted_vs_simulate, mlp,  # noqa: F401
                                     to_onnx, torch, torch_out)
