"""compile's agreement_holdout: the degree search selects on part of the calibration set and checks its choice on
the rest (hemlp.compiler.calibration.holdout_split, docs/design/activations.md §3); a choice that fails the target
there tightens the search, and the plan says what the held-out samples measured."""
import warnings

import numpy as np
import pytest

from hemlp.compiler import calibration
from hemlp.compiler.calibration import AgreementWarning, allowed_disagreements, holdout_split, margins
from tests.compiler.threshold_model import relu_threshold_model

torch = pytest.importorskip("torch")

T = 0.1                                            # the decision threshold: class 0 when relu(x) > T


def _threshold_model():
    return relu_threshold_model(T)


def _pairs(held_above, search_above, n=1000):
    """1 000 samples: pairs at distances d and 1.001 d on either side of T, far samples after them. The held-out
    half (fraction 0.5: one of each pair in margin order) gets the sample above T of the `held_above` pairs, the
    search half that of the `search_above` pairs: an approximation whose error is negative at T flips only samples
    above it, so the search half of the first kind never sees a flip the held-out half has."""
    xs = []
    for d in held_above:
        xs += [T - d, T + 1.001 * d]
    for d in search_above:
        xs += [T + d, T - 1.001 * d]
    far = np.random.default_rng(1).uniform(-1, 1, 4 * n)
    far = far[np.abs(far - T) > 0.1][:n - len(xs)]
    return np.concatenate([xs, far])[:, None]


def _ref_margins(x):
    return margins(np.c_[np.maximum(x[:, 0], 0), np.full(len(x), T)])


def _choose(x, holdout, target=0.99):
    from hemlp.compile_options import CompileOptions
    from hemlp.compiler.fold import fold
    from hemlp.compiler.torch_frontend import from_torch

    model = _threshold_model()
    g = fold(from_torch(model, x[:1]))
    opts = CompileOptions().merged(target_agreement=target, agreement_holdout=holdout).validate().as_dict()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rep = calibration.choose_activations(g, x, opts, 18, True, True)
    return rep, g, [w for w in caught if issubclass(w.category, AgreementWarning)]


def test_the_split_is_deterministic_disjoint_and_stratified_by_margin():
    m = np.random.default_rng(3).exponential(size=1000)
    s, h = holdout_split(m, 0.2)
    s2, h2 = holdout_split(m.copy(), 0.2)
    assert np.array_equal(s, s2) and np.array_equal(h, h2)
    assert len(h) == 200 and len(s) == 800 and not set(s) & set(h) and set(s) | set(h) == set(range(1000))
    assert np.all(np.diff(h) > 0) and np.all(np.diff(s) > 0)
    # every 5th sample in margin order: each fifth of the margins holds 40 held-out samples
    rank = np.empty(1000, dtype=np.intp)
    rank[np.argsort(m, kind="stable")] = np.arange(1000)
    assert np.bincount(rank[h] // 200).tolist() == [40] * 5
    assert not np.array_equal(holdout_split(m, 0.2, seed=1)[1], h)       # the seed moves the offset
    assert len(holdout_split(m, 0.0)[1]) == 0


def test_the_held_out_rule_is_the_searchs_for_its_size():
    assert allowed_disagreements(1000, 0.99, True) == 5 and allowed_disagreements(1000, 0.995, True) == 1
    assert allowed_disagreements(200, 0.99, False) == 2 and allowed_disagreements(200, 0.995, False) == 1
    assert allowed_disagreements(800, 0.995, True) == 1 and allowed_disagreements(300, 0.995, True) == -1


def test_a_choice_that_fails_the_held_out_samples_is_tightened_until_they_pass():
    x = _pairs(np.geomspace(1e-4, 3e-3, 10), np.geomspace(3e-3, 3e-2, 10))
    held_rows = holdout_split(_ref_margins(x), 0.5)[1]
    assert np.sum(x[held_rows, 0] > T) - np.sum(x[held_rows, 0] > T + 0.1) >= 10     # the construction holds
    rep, g, warned = _choose(x, 0.5)
    held = rep["held_out"]
    assert rep["search_samples"] == 500 and held["samples"] == 500 and held["allowed"] == 5
    first, last = held["looks"][0], held["looks"][-1]
    # the search's first choice met the target on its half and failed on the held-out half: it was not kept
    assert first["search_disagreements"] <= first["search_allowed"] and first["disagreements"] > held["allowed"]
    assert len(held["looks"]) >= 2 and held["passed"] and not warned
    assert last["disagreements"] == held["disagreements"] <= held["allowed"]
    # the count is the final plan's, recounted here in float64 on the held-out rows
    out = g.reference(x, exact=False)[g.output.name]
    ref = g.reference(x)[g.output.name]
    assert int(np.sum(calibration.top1(out[held_rows]) != calibration.top1(ref[held_rows]))) == held["disagreements"]
    assert first["depth"] < last["depth"] == rep["depth"]                # the cheaper choice was refused


def test_a_choice_no_tightening_fixes_is_reported_as_failed():
    x = _pairs(np.geomspace(1e-4, 1e-2, 10), [])
    rep, _, warned = _choose(x, 0.5)
    held = rep["held_out"]
    assert not held["passed"] and held["disagreements"] > held["allowed"]
    assert [look["safety"] for look in held["looks"]] == list(calibration.HOLDOUT_SAFETIES)
    assert len(warned) == 1 and "held-out" in str(warned[0].message)


def test_the_plan_states_the_held_out_count():
    import hemlp

    x = _pairs(np.geomspace(1e-4, 3e-3, 10), np.geomspace(3e-3, 3e-2, 10)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = hemlp.compile(_threshold_model(), x[:1], calibration=x, target_agreement=0.99, agreement_holdout=0.5,
                           allow_insecure=True)
    held = cm.plan.info["activation_fit"]["held_out"]
    assert held["samples"] == 500 and held["passed"]
    assert (f"on the 500 calibration samples held out of the search it agrees on {500 - held['disagreements']} "
            in str(cm.plan))
    assert "passed the target" in str(cm.plan)


def test_bad_values_are_refused_and_the_default_is_none():
    from hemlp.compile_options import CompileOptions
    from hemlp.errors import CalibrationError

    assert CompileOptions().agreement_holdout == 0.0
    for bad in (-0.1, 0.6, True, "0.2"):
        with pytest.raises(CalibrationError, match="agreement_holdout"):
            calibration.agreement_holdout({"agreement_holdout": bad})
    assert calibration.agreement_holdout({"agreement_holdout": 0.2}) == 0.2
