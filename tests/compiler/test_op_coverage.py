"""Every op in one place: each IR op has its semantics (EVAL), its printing and its lowering (LOWER); each lowered
step op has a plaintext step (simulate_step); every layout's step tables (planning, plaintext oracle, encrypted run)
hold a handler or an explicit typed refusal (hemlp.step_ops.Unsupported) for every step op; an unknown op fails in
the one lookup with a typed error; and every layout either runs a model using a step op (simulate agrees with the
float64 reference) or refuses it with a typed UnsupportedError -- never another exception."""
import warnings

import numpy as np
import pytest
import torch

import hemlp
from hemlp.compiler.fold import REWRITES, ROW_SCALE
from hemlp.compiler.ir import DESCRIBE, EVAL, OP_ARITY, Op, describe, Node
from hemlp.compiler.lower import LOWER, Step, StepOp
from hemlp.errors import UnsupportedError, UnsupportedOpError
from hemlp.layouts import LAYOUTS
from hemlp.step_ops import Unsupported, check_table, handler, lint_steps


def test_every_ir_op_has_semantics_arity_printing_and_a_lowering():
    assert set(EVAL) == set(OP_ARITY) == set(Op)
    assert set(LOWER) == set(Op) - {Op.BATCHNORM}          # folded, or made an affine step, before lowering
    for op in Op:
        n = Node("n", op, ["a", "b"][:OP_ARITY[op]], (2,), dict(kind="relu", weight=np.zeros((2, 2)),
                                                                  stride=(1, 1), padding=(0, 0), kernel=(1, 1)))
        if op not in (Op.CONV2D, Op.AVGPOOL2D):
            assert isinstance(describe(n), str)


def test_the_ir_passes_are_tables_keyed_by_op():
    # describe and fold dispatch through tables of Op, like the step passes: an op is an entry, not a branch
    assert set(DESCRIBE) <= set(Op)
    assert describe(Node("n", Op.IDENTITY, ["a"], (2,))) == "identity(a)"     # an op without an entry: op(inputs)
    assert [r.op for r in REWRITES] == [Op.BATCHNORM, Op.CONV2D, Op.ACT, Op.AVGPOOL2D, Op.LINEAR]
    assert set(ROW_SCALE) == {Op.LINEAR, Op.CONV2D}


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


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("op", STEP_OPS)
def test_every_layout_runs_or_refuses_every_step_op(op, layout):
    model = _Block(op).eval()
    x = np.random.default_rng(0).uniform(-1, 1, size=(16, 8))
    kw = dict(encrypted_weights=True) if LAYOUTS[layout].encrypted_weights else dict(layout=layout)
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

    assert set(SIMULATE) == set(StepOp)
    assert set(RUN) == set(StepOp)


def _admitted(table) -> set:
    return {op for op, h in table.items() if not isinstance(h, Unsupported)}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_every_layout_table_has_a_handler_or_a_typed_refusal_for_every_step_op(name):
    tables = LAYOUTS[name].step_tables()
    assert tables
    for table in tables.values():
        check_table(table)
    # an op the layout plans has a handler in each of its other tables (its oracle and its run)
    plan = tables.get("plan", tables["simulate"])
    for pass_name, table in tables.items():
        assert _admitted(plan) <= _admitted(table), (pass_name, _admitted(plan) - _admitted(table))


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_a_refusal_is_typed_and_names_the_op_the_layout_and_the_alternative(name):
    label = LAYOUTS[name].label
    for table in LAYOUTS[name].step_tables().values():
        for op, h in table.items():
            if not isinstance(h, Unsupported):
                continue
            with pytest.raises(UnsupportedOpError) as exc:
                handler(table, Step(op, "v7", ["v6"], 4), "test")
            err = exc.value
            assert (err.op, err.layout, err.alternative) == (op, label, h.alternative)
            assert f"layout {label}" in str(err) and err.alternative in str(err) and "v7" in str(err)


def test_every_table_of_the_other_passes_covers_every_step_op():
    """The compiler's own tables: the levels each op consumes, and the bootstrap placement of layout (C); the noise
    analysis starts from the input's fresh noise and has semantics for every other op."""
    from hemlp.compiler.params import STEP_LEVELS
    from hemlp.layouts.blocked_bootstrap import LEVEL_NODE
    from hemlp.runtime.noise_analysis import NOISE

    check_table(STEP_LEVELS)
    check_table(LEVEL_NODE)
    assert set(NOISE) == set(StepOp) - {StepOp.INPUT}


def test_layout_a_prime_runs_every_kind_its_planning_makes():
    from hemlp.layouts.mlwe import MSTEP_KINDS, MlweProgram, MlweRunner
    from hemlp.step_ops import ELEMENTWISE_OPS

    assert set(MlweRunner.RUN) == set(MSTEP_KINDS)
    assert set(MlweRunner.ACT) == set(ELEMENTWISE_OPS)
    assert {op for op, h in MlweProgram.PLAN.items() if h is MlweProgram.PLAN[StepOp.SQUARE]} == set(ELEMENTWISE_OPS)


def _program_with(op: str):
    """input -> pcmm -> <a step of `op`> -> output, 4 features throughout."""
    U = np.eye(4)
    return [Step(StepOp.INPUT, "x", [], 4), Step(StepOp.PCMM, "h", ["x"], 4, U=U),
            Step(op, "y", ["h"], 4), Step(StepOp.OUTPUT, "out", ["y"], 4)]


def test_an_unknown_step_op_fails_in_the_one_lookup_with_a_typed_error():
    from hemlp.compiler.params import step_cost
    from hemlp.layouts.blocked import BlockedProgram
    from hemlp.layouts.mlwe import MlweProgram
    from hemlp.layouts.packed import PackedProgram
    from hemlp.runtime.local import simulate

    steps = _program_with("frobnicate")
    for build in (lambda: simulate(steps, np.ones((4, 2)), 20), lambda: PackedProgram(steps, 2048, 1),
                  lambda: MlweProgram(steps, 4096, 64, 3), lambda: BlockedProgram(steps, 2048, 4),
                  lambda: step_cost(steps[2])):
        with pytest.raises(UnsupportedOpError, match="unknown step op 'frobnicate'") as exc:
            build()
        assert exc.value.op == "frobnicate"
    with pytest.raises(hemlp.errors.ShapeError, match="unknown op 'frobnicate'"):
        lint_steps(steps)
