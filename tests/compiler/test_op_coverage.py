"""Every op in one place: each IR op has its semantics (EVAL), its printing and its lowering (LOWER); each lowered
step op has a plaintext step (simulate_step); and every layout either runs a model using a step op (simulate agrees
with the float64 reference) or refuses it with a typed UnsupportedError -- never another exception."""
import warnings

import numpy as np
import pytest
import torch

import hemlp
from hemlp.compiler.ir import EVAL, OP_ARITY, Op, describe, Node
from hemlp.compiler.lower import LOWER, StepOp
from hemlp.errors import UnsupportedError


def test_every_ir_op_has_semantics_arity_printing_and_a_lowering():
    assert set(EVAL) == set(OP_ARITY) == set(Op)
    assert set(LOWER) == set(Op) - {Op.BATCHNORM}          # folded, or made an affine step, before lowering
    for op in Op:
        n = Node("n", op, ["a", "b"][:OP_ARITY[op]], (2,), dict(kind="relu", weight=np.zeros((2, 2)),
                                                                  stride=(1, 1), padding=(0, 0), kernel=(1, 1)))
        if op not in (Op.CONV2D, Op.AVGPOOL2D):
            assert isinstance(describe(n), str)


class _Block(torch.nn.Module):
    """A model whose lowered program uses the step op `op` (besides input, pcmm, output)."""

    def __init__(self, op):
        super().__init__()
        torch.manual_seed(0)
        self.op = op
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)
        self.bn = torch.nn.BatchNorm1d(8)
        self.out = torch.nn.Linear(8, 3)
        self.out4 = torch.nn.Linear(4, 3)

    def forward(self, x):
        y = self.a(x)
        if self.op == "poly":
            y = torch.tanh(y)
        elif self.op == "square":
            y = y * y
        elif self.op == "affine":
            y = self.bn(y * y)                  # a BatchNorm after an activation: an affine step
        elif self.op == "add":
            y = y + self.b(x)
        elif self.op == "mul":
            y = y * self.b(x)
        elif self.op == "matmul":
            return self.out4((y.view(-1, 2, 4) @ self.b(x).view(-1, 4, 2)).reshape(-1, 4))
        elif self.op == "perm":
            y = y.view(-1, 2, 4).transpose(-2, -1).reshape(-1, 8)
        elif self.op == "alias":
            y = torch.tanh(y.view(-1, 2, 4)).flatten(1)   # a reshape between an activation and a layer
        return self.out(y)


STEP_OPS = ["poly", "square", "affine", "add", "mul", "matmul", "perm", "alias"]


@pytest.mark.parametrize("layout", ["batch", "packed", "mlwe", "blocked"])
@pytest.mark.parametrize("op", STEP_OPS)
def test_every_layout_runs_or_refuses_every_step_op(op, layout):
    model = _Block(op).eval()
    x = np.random.default_rng(0).uniform(-1, 1, size=(16, 8))
    kw = dict(encrypted_weights=True) if layout == "blocked" else dict(layout=layout)
    if layout == "mlwe":
        kw["batch_size"] = 16
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            cm = hemlp.compile(model, x, allow_insecure=True, activation_degree=15, server_memory=None, **kw)
        except UnsupportedError as exc:
            assert str(exc)                     # typed, with a message
            return
        assert StepOp(op) in {s.op for s in cm.steps}
        want = model(torch.tensor(x, dtype=torch.float32)).detach().double().numpy()
        assert np.max(np.abs(cm.simulate(x) - want)) < 0.05 * max(1.0, np.abs(want).max())


def test_every_step_op_has_plaintext_and_ciphertext_semantics():
    from hemlp.runtime.local import RUN, SIMULATE

    assert set(SIMULATE) == set(StepOp) - {StepOp.INPUT}
    assert set(RUN) == set(StepOp) - {StepOp.INPUT}
