"""The layouts' tests share the compiler tests' small models and helpers (tests/compiler/conftest.py)."""
from tests.compiler.conftest import (SmallCNN, Square, _quiet_insecure, encrypted_vs_simulate, mlp,  # noqa: F401
                                     to_onnx, torch, torch_out)


def without_placement(steps) -> list:
    """Compiled steps without the planner's bootstrap / drop steps (their readers renamed back): the steps a
    layout's level DAG is built from."""
    alias, out = {}, []
    for s in steps:
        if s.op in ("bootstrap", "drop"):
            alias[s.out] = alias.get(s.inputs[0], s.inputs[0])
            continue
        out.append(type(s)(s.op, s.out, [alias.get(i, i) for i in s.inputs], s.rows, s.node, U=s.U, index=s.index,
                           bias=s.bias, act=s.act, alpha=s.alpha, beta=s.beta, info=dict(s.info)))
    return out
