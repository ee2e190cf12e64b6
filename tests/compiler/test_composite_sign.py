"""Composite minimax sign polynomials (hemlp.compiler.composite_sign) and the ReLU built on them: errors against
numpy on [-1, 1] and on the guard band, the shipped table against a fresh fit, the lowered steps encrypted against
their simulation, and the degree search reaching for a composite when no single polynomial meets the target."""
import warnings

import numpy as np
import pytest

from hemlp.compiler.activations import ActPoly, approximate, approximate_composite
from hemlp.compiler.calibration import ladder, step_depth
from hemlp.compiler.composite_sign import SCHEDULES, composite_sign, fit_composite, relu_error
from hemlp.errors import ParameterError
from tests.compiler.threshold_model import relu_threshold_model

#: ReLU error on [-1, 1] in units of B, per schedule: the shipped fits measure 5.07e-4, 1.94e-4, 9.52e-5, 4.83e-5,
#: 2.45e-5 (python -m hemlp.compiler.composite_sign); the bounds leave 5 % for the grid
RELU_ERR_BOUND = {(31, 31): 5.4e-4, (15, 15, 15): 2.1e-4, (15, 15, 31): 1.0e-4, (15, 31, 31): 5.1e-5,
                  (31, 31, 31): 2.6e-5}
DEPTH = {(31, 31): 11, (15, 15, 15): 13, (15, 15, 31): 14, (15, 31, 31): 15, (31, 31, 31): 16}


def _dense(lim=1.0):
    near = np.geomspace(1e-10, lim, 200_001)
    return np.concatenate([np.linspace(-lim, lim, 1_000_001), near, -near])


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_relu_error_on_the_interval(schedule):
    cs, err = composite_sign(schedule)
    u = _dense()
    measured = float(np.max(np.abs(cs.relu(u) - np.maximum(u, 0))))
    assert measured <= RELU_ERR_BOUND[schedule]
    assert measured <= err * 1.05 and cs.depth == DEPTH[schedule]
    # the composed sign: within sign_err of sign(u) for eps <= |u| <= 1, odd about 1/2 everywhere on [-1, 1]
    far = u[np.abs(u) >= cs.eps]
    assert np.max(np.abs(2 * cs.step(far) - 1 - np.sign(far))) <= cs.sign_err * 1.05
    assert np.max(np.abs(cs.step(u) + cs.step(-u) - 1)) < 1e-9


def test_more_stages_more_precision_than_any_single_polynomial():
    errs = [composite_sign(s)[1] for s in SCHEDULES]
    assert all(a > b for a, b in zip(errs, errs[1:]))
    single = approximate("relu", -1.0, 1.0, 127, "minimax")        # units of B = 1
    assert errs[0] < single.max_err / 2


def test_shipped_table_matches_a_fresh_fit():
    cs, err = composite_sign((31, 31))
    fresh, fresh_err = fit_composite((31, 31))
    assert abs(np.log2(fresh.eps) - np.log2(cs.eps)) < 1e-6
    assert abs(fresh_err - err) <= 1e-3 * err
    for a, b in zip(cs.stages, fresh.stages):
        assert np.max(np.abs(a - b)) < 1e-9


def test_bad_schedules_are_refused():
    for bad in [(), (16, 15), (1, 15)]:
        with pytest.raises(ParameterError, match="odd and >= 3"):
            fit_composite(bad)
    with pytest.raises(ParameterError, match="composites exist for"):
        approximate_composite("silu", -1.0, 1.0, (31, 31))


def test_relu_on_an_asymmetric_range_and_its_guard_band():
    lo, hi, guard = -3.0, 12.0, 0.5
    ap = approximate_composite("relu", lo, hi, (15, 15, 31), guard)
    D = hi + guard * (hi - lo)
    assert ap.domain == (-D, D) and ap.depth == 14 and ap.schedule == (15, 15, 31)
    core = np.linspace(lo, hi, 300_001)
    band = np.concatenate([np.linspace(-D, lo, 100_001), np.linspace(hi, D, 100_001)])
    assert np.max(np.abs(ap.apply(core) - np.maximum(core, 0))) <= ap.max_err
    assert np.max(np.abs(ap.apply(band) - np.maximum(band, 0))) <= ap.max_err_domain
    assert ap.max_err <= RELU_ERR_BOUND[(15, 15, 31)] * D
    # beyond the domain the stages diverge: the client's range check is what stands between those inputs and garbage
    out = np.array([1.02 * D, -1.02 * D])
    with np.errstate(all="ignore"):
        err_out = np.abs(ap.apply(out) - np.maximum(out, 0))
    assert not np.any(err_out <= D)                    # (NaN or beyond D)
    assert ActPoly.from_json(ap.to_json()).apply(core[::1000]).tolist() == ap.apply(core[::1000]).tolist()


def test_ladder_offers_composites_for_relu_only_and_within_a_bootstrap():
    class N:
        def __init__(self, kind):
            self.attrs = dict(kind=kind)

    assert ladder(N("relu"))[-len(SCHEDULES):] == SCHEDULES and ladder(N("silu"))[-1] == 127
    # a bootstrap leaving 4 levels: degree 15 and the (15, 15, 15) stages fit, degree 31 and the 31-stages do not
    rungs = ladder(N("relu"), 4)
    assert rungs == (3, 7, 15, (15, 15, 15)) and all(step_depth(r) <= 4 for r in rungs)


def test_search_reaches_for_a_composite_and_encrypted_equals_simulated():
    """Top-1 of [relu(x), t] flips where the approximation errs by more than |relu(x) - t|: 30 of 1 000 calibration
    samples sit 1.5e-4 .. 4e-4 from the threshold t = 5e-4, closer than degree 127's error near the kink (~1e-3 x
    the range), so only a composite certifies 99 %."""
    pytest.importorskip("torch")
    import hemlp

    t = 5e-4
    m = relu_threshold_model(t)
    rng = np.random.default_rng(0)
    near = t + np.concatenate([np.linspace(1.5e-4, 4e-4, 15), -np.linspace(1.5e-4, 4e-4, 15)])
    x = np.concatenate([rng.uniform(-1, 1, 970), near])[:, None]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = hemlp.compile(m, x[:1], calibration=x, batch_size=4, preset="test-N12-d18", allow_insecure=True,
                           target_agreement=0.99)
    (act,) = cm.plan.info["activation_fit"]["activations"]
    assert act["method"] == "composite" and act["schedule"] in SCHEDULES
    assert cm.plan.info["activation_fit"]["agreement_simulate"] >= 0.99
    assert "relu_composite" in str(cm.plan)
    sk, keys = cm.keygen()
    # the first stage carries the range: inputs beyond the composite's domain are refused before encryption
    from hemlp.errors import InputRangeError

    with pytest.raises(InputRangeError, match="beyond its polynomial's domain"):
        cm.encrypt(np.array([[5.0]]), sk)
    worst = 0.0
    for i in range(20):                                # 20 fresh encryptions of 4 samples each
        xs = rng.uniform(-1, 1, (4, 1))
        y = cm.decrypt(cm.run(cm.encrypt(xs, sk), keys), sk)
        worst = max(worst, float(np.max(np.abs(y - cm.simulate(xs)))))
    # measured worst over 20 encryptions 2^-27.9 (test-N12-d18, 40-bit scale); the bound keeps 8 bits of margin
    assert worst < 2.0 ** -20, worst
