"""hemlp.step_ops.lint_steps names the first broken invariant of a lowered program (ops known, values defined once and
before use, arities, features and the shapes steps carry, levels that only refreshes raise), and the compile passes
run it on what they hand on whenever HEMLP_LINT_STEPS=1 -- which tests/conftest.py sets for the whole suite."""
import warnings
from dataclasses import replace

import numpy as np
import pytest

import hemlp
import hemlp.step_ops as step_ops
from hemlp.compiler.lower import Step, StepOp
from hemlp.errors import LevelError, ShapeError
from hemlp.step_ops import LINT_ENV, lint_pass, lint_steps

from .conftest import mlp


def _program():
    """input(6) -> conv-like gather pcmm (2 channels x 3 positions) -> square -> affine -> add -> matmul -> pcmm
    -> output, with planned levels."""
    rng = np.random.default_rng(0)
    sq = hemlp.compiler.activations.exact_poly("square")
    index = np.array([[0, 1, 2], [3, 4, 5]])                       # (taps, positions)
    return [
        Step(StepOp.INPUT, "x", [], 6, level_in=5, level_out=5),
        Step(StepOp.PCMM, "c", ["x"], 6, U=rng.normal(size=(2, 2)), index=index, bias=np.zeros(2), level_in=5,
             level_out=4, info=dict(in_shape=[2, 3], out_shape=[2, 3])),
        Step(StepOp.SQUARE, "s", ["c"], 6, act=sq, level_in=4, level_out=3),
        Step(StepOp.AFFINE, "a", ["s"], 6, alpha=np.ones(6), beta=np.zeros(6), level_in=3, level_out=2),
        Step(StepOp.ADD, "r", ["a", "c"], 6, level_in=4, level_out=2),
        Step(StepOp.MATMUL, "m", ["r", "c"], 4, level_in=2, level_out=1,
             info=dict(a_shape=[2, 3], b_shape=[3, 2])),
        Step(StepOp.PCMM, "y", ["m"], 3, U=rng.normal(size=(3, 4)), level_in=1, level_out=0),
        Step(StepOp.OUTPUT, "out", ["y"], 3, level_in=0, level_out=0),
    ]


def _with(steps, k, **changes):
    out = list(steps)
    out[k] = replace(out[k], **changes)
    return out


def test_a_sound_program_passes():
    steps = _program()
    assert lint_steps(steps) is steps
    lint_steps([replace(s, level_in=None, level_out=None) for s in steps])      # levels not planned yet


@pytest.mark.parametrize("k, changes, error, match", [
    (2, dict(op="frobnicate"), ShapeError, "unknown op 'frobnicate'"),
    (3, dict(out="s"), ShapeError, "'s' is defined twice"),
    (2, dict(inputs=["later"]), ShapeError, r"reads \['later'\] before they are defined"),
    (4, dict(inputs=["a"]), ShapeError, "reads 1 values, its op takes 2"),
    (2, dict(rows=5), ShapeError, r"keeps its inputs' features \(\[6\]\) but has 5"),
    (1, dict(U=np.zeros((3, 2))), ShapeError, "im2col index .* do not make 6 output features"),
    (1, dict(index=np.array([[0, 1, 2], [3, 4, 6]])), ShapeError, "reads rows outside the input's 6 features"),
    (1, dict(bias=np.zeros(3)), ShapeError, "its bias has shape"),
    (1, dict(info=dict(in_shape=[2, 2])), ShapeError, "in_shape"),
    (6, dict(U=np.zeros((3, 5))), ShapeError, "its weight is 3x5, the step maps 4 features to 3"),
    (3, dict(alpha=np.ones(5)), ShapeError, "its alpha has shape"),
    (5, dict(info=dict(a_shape=[3, 2], b_shape=[3, 2])), ShapeError, r"operand shapes \(3, 2\) @ \(3, 2\)"),
    (2, dict(level_out=5), LevelError, "raises the level from 4 to 5"),
    (3, dict(level_in=4, level_out=3), LevelError, r"planned at level 4, above its inputs' \[3\]"),
])
def test_each_broken_invariant_is_named(k, changes, error, match):
    with pytest.raises(error, match=match):
        lint_steps(_with(_program(), k, **changes), "a pass")
    with pytest.raises(error, match=r"\(after a pass\)"):
        lint_steps(_with(_program(), k, **changes), "a pass")


def test_a_refresh_may_raise_the_level_and_the_program_needs_one_input_and_one_output():
    steps = _program()
    boot = Step(StepOp.BOOTSTRAP, "s#boot", ["s"], 6, level_in=3, level_out=9)
    lint_steps(steps[:3] + [boot, replace(steps[3], inputs=["s#boot"], level_in=9, level_out=8)] + steps[4:])
    with pytest.raises(ShapeError, match="has 2 output steps"):
        lint_steps(steps + [Step(StepOp.OUTPUT, "out2", ["y"], 3)])
    with pytest.raises(ShapeError, match="has 0 input steps"):
        lint_steps([])


def test_lint_pass_lints_only_when_asked(monkeypatch):
    broken = _with(_program(), 2, rows=5)
    monkeypatch.setenv(LINT_ENV, "0")
    assert lint_pass(broken, "a pass") is broken
    monkeypatch.setenv(LINT_ENV, "1")
    with pytest.raises(ShapeError):
        lint_pass(broken, "a pass")


@pytest.mark.parametrize("kw", [dict(layout="batch"), dict(layout="packed"), dict(layout="mlwe", batch_size=32),
                                dict(encrypted_weights=True)])
def test_the_suite_lints_after_every_compile_pass(monkeypatch, kw):
    """The suite runs with HEMLP_LINT_STEPS=1, so every compile in it lints the lowering, the level planning, the
    planned program each layout gets (bootstrap placements hand over the same Planned) and layout (A')'s levels."""
    import os

    assert os.environ.get(LINT_ENV) == "1"
    seen = []
    real = step_ops.lint_steps
    monkeypatch.setattr(step_ops, "lint_steps", lambda steps, where="": seen.append(where) or real(steps, where))
    x = np.random.default_rng(0).uniform(-1, 1, size=(32, 16))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hemlp.compile(mlp(dims=(16, 8, 4)), x, allow_insecure=True, activation_degree=3, server_memory=None, **kw)
    assert {"lowering", "level planning", "planning"} <= set(seen)
    if kw.get("layout") == "mlwe":
        assert "layout (A')'s levels" in seen
