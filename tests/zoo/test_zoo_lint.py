"""lint_steps on every zoo model after every compile pass that needs no ciphertext: the lowering, the level planning,
each layout's planning (the ones that cannot run the model refuse with a typed error) and layout (A)'s bootstrap
placement. Activations get a degree-3 approximation on a fixed range (no calibration search: the passes, not the fit,
are under test), so the whole zoo takes seconds."""
import warnings
from dataclasses import replace

import numpy as np
import pytest

from hemlp.compile_options import CompileOptions
from hemlp.compiler.activations import approximate, exact_poly
from hemlp.compiler.fold import fold
from hemlp.compiler.ir import Op
from hemlp.compiler.lower import lower
from hemlp.compiler.params import depth_of, plan_levels
from hemlp.compiler.torch_frontend import from_torch
from hemlp.errors import EncodingError, LevelError, ShapeError, UnsupportedError
from hemlp.fhe import Params
from hemlp.layouts import LAYOUTS, Planned
from hemlp.layouts.batch_bootstrap import plan_bootstrapped
from hemlp.models.zoo import ZOO, build
from hemlp.step_ops import lint_steps

from .test_zoo_frontends import COMPILED

OPTS = CompileOptions(activation_degree=3, allow_insecure=True).validate().as_dict()


def _lowered(name):
    e = ZOO[name]
    x = np.random.default_rng(7).normal(size=(4,) + tuple(e.small_input_shape))
    g = fold(from_torch(build(name, **e.small_options), x))
    for n in g.nodes:
        if n.op == Op.ACT:
            k = n.attrs["kind"]
            n.attrs["approx"] = (exact_poly(k, n.attrs.get("coeffs")) if k in ("square", "poly")
                                 else approximate(k, -8.0, 8.0, degree=3))
    return lint_steps(lower(g), "lowering"), x


@pytest.mark.parametrize("name", COMPILED)
def test_zoo_model_steps_lint_after_every_pass(name):
    steps, x = _lowered(name)
    depth = depth_of(steps)
    plan_levels(steps, depth)
    lint_steps(steps, "level planning")
    params = Params.preset("N16-boot")
    planned = dict(preset=dict(name=params.name, depth=depth, security="none"), depth=depth, reserve=0, top=depth,
                   batch=len(x), options=dict(OPTS, dft_depth=None), max_out=1.0)
    planned_by = []
    for cls in LAYOUTS.values():
        try:
            lay = cls.plan(Planned([s for s in steps], params, **planned))
        except (UnsupportedError, ShapeError, LevelError):
            continue                          # a typed refusal (tests/compiler/test_op_coverage.py)
        lay.commit()
        lint_steps(lay.steps, f"layout {cls.label}'s planning")
        planned_by.append(cls.name)
    assert "batch" in planned_by              # layout (A) runs every op
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            # copies: layout (A')'s commit above wrote its levels into these steps; the placement plans its own
            boot = plan_bootstrapped([replace(s, info=dict(s.info)) for s in steps], x, dict(OPTS, bootstrap=True),
                                     len(x))
        except EncodingError:                 # a value the fixed-range polynomials blow up: too large to bootstrap
            return
    lint_steps(boot.steps, "bootstrap placement")
