"""The degree search holds the agreement target with SAFETY times the plan's error to spare
(hemlp.compiler.calibration.disagreements; docs/design/activations.md §3, step 6): a calibration sample whose top-1
survives the plan's error but not SAFETY times it counts against the target, so the cheapest plan that passes on
the calibration samples keeps a margin for new ones."""
import numpy as np
import pytest

from hemlp.compiler import calibration
from hemlp.compiler.calibration import SAFETY, disagreements
from tests.compiler.threshold_model import relu_threshold_model

pytest.importorskip("torch")


def test_disagreements_count_what_the_error_would_flip_with_safety_to_spare():
    ref = np.array([[2.0, 1.0, 0.0]] * 4)                    # margin 1 between classes 0 and 1
    # the plan's error takes 40 %, 60 %, 110 % of the margin, and 60 % on the other, distant class
    out = ref + np.array([[-0.2, 0.2, 0.0], [-0.3, 0.3, 0.0], [-0.55, 0.55, 0.0], [0.0, 0.0, 1.2]])
    assert disagreements(out, ref, 1.0).tolist() == [False, False, True, False]
    assert disagreements(out, ref, 2.0).tolist() == [False, True, True, True]
    assert disagreements(out, ref).tolist() == disagreements(out, ref, SAFETY).tolist() and SAFETY >= 2
    # one output: its sign is the prediction
    r1, o1 = np.array([[1.0], [1.0], [-1.0]]), np.array([[0.6], [0.4], [0.2]])
    assert disagreements(o1, r1, 1.0).tolist() == [False, False, True]
    assert disagreements(o1, r1, 2.0).tolist() == [False, True, True]
    # a plain disagreement is one at any safety >= 1
    rng = np.random.default_rng(0)
    ref, out = rng.normal(size=(500, 10)), rng.normal(size=(500, 10))
    assert np.all(disagreements(out, ref, 3.0)[disagreements(out, ref, 1.0)])


def _near_threshold(t=5e-3):
    """Top-1 of [relu(x), t]; 40 of 1 000 calibration samples sit 1e-5 .. 3e-2 from the threshold t, log-spaced."""
    m = relu_threshold_model(t)
    d = np.geomspace(1e-5, 3e-2, 20)
    x = np.concatenate([np.random.default_rng(0).uniform(-1, 1, 960), t + d, t - d])[:, None]
    return m, x


def _choose(model, x, safety=SAFETY):
    from hemlp.compile_options import CompileOptions
    from hemlp.compiler.fold import fold
    from hemlp.compiler.torch_frontend import from_torch

    g = fold(from_torch(model, x[:1]))
    opts = CompileOptions().merged(target_agreement=0.99, agreement_safety=safety).validate().as_dict()
    rep = calibration.choose_activations(g, x, opts, 18, True, True)
    return rep, g.reference(x, exact=False)[g.output.name], g.reference(x)[g.output.name]


def test_search_keeps_the_safety_margin_a_plain_count_would_spend():
    model, x = _near_threshold()
    rep, out, ref = _choose(model, x)
    # 1 000 samples, 90 % Clopper-Pearson bound >= 99 %: at most 5 samples that SAFETY x the plan's error flips
    assert int(disagreements(out, ref, SAFETY).sum()) <= 5
    assert rep["safety"] == SAFETY and rep["agreement_safety"] >= 0.995 and rep["agreement_bound"] >= 0.99
    assert rep["agreement"] >= rep["agreement_safety"]
    assert rep["agreement"] == np.mean(disagreements(out, ref, 1.0) == 0)
    plain, out1, _ = _choose(model, x, 1.0)                   # the plain count: the cheapest plan that passes it
    assert plain["depth"] < rep["depth"]
    assert int(disagreements(out1, ref, 1.0).sum()) <= 5 < int(disagreements(out1, ref, SAFETY).sum())


def test_the_default_is_plain_agreement_and_bad_values_are_refused():
    from hemlp.compile_options import CompileOptions
    from hemlp.errors import CalibrationError

    assert CompileOptions().agreement_safety == 1.0
    for bad in (0.5, True, "4"):
        with pytest.raises(CalibrationError, match="agreement_safety"):
            calibration.agreement_safety({"agreement_safety": bad})
    assert calibration.agreement_safety({"agreement_safety": 4}) == 4.0
