"""The degree search's shortcuts keep its answers: a polynomial's lookup table (hemlp.compiler.poly_table) stays within
its stated interpolation error and is exact beyond the domain; the chunked reference pass (ReferenceSummary) gives the
full reference's activation ranges and output; margins order the samples."""
import numpy as np
import pytest

from hemlp.compiler.activations import approximate, approximate_composite
from hemlp.compiler.calibration import ReferenceSummary, margins
from hemlp.compiler.fold import fold
from hemlp.compiler.poly_table import TOLERANCE, PolyTable


@pytest.mark.parametrize("degree", [7, 31, 127])
def test_table_error_within_its_check(degree):
    ap = approximate("relu", -3.0, 12.0, degree, "minimax", 0.5)
    t = PolyTable(ap)
    assert t.table is not None and t.interp_err <= TOLERANCE * ap.max_err
    lo, hi = ap.domain
    x = np.random.default_rng(0).uniform(lo, hi, 400_000)
    # the midpoint check bounds linear interpolation's error to within the curvature's change across one cell
    assert np.max(np.abs(t(x) - ap.apply(x))) <= 1.5 * t.interp_err + 1e-12
    beyond = np.array([lo - 1.0, hi + 0.5])
    assert np.array_equal(t(beyond), ap.apply(beyond))


def test_composite_table():
    ap = approximate_composite("relu", -2.0, 5.0, (15, 15, 15), 0.5)
    t = PolyTable(ap)
    x = np.random.default_rng(1).uniform(*ap.domain, 200_000)
    assert np.max(np.abs(t(x) - ap.apply(x))) <= TOLERANCE * ap.max_err


def test_reference_summary_equals_the_full_reference():
    torch = pytest.importorskip("torch")
    from hemlp.compiler.torch_frontend import from_torch
    from hemlp.models.zoo import build

    x = np.random.default_rng(2).normal(size=(37, 3, 8, 8))
    g = fold(from_torch(build("resnet20"), x[:1]))
    ref = g.reference(x)
    s = ReferenceSummary(g, x, chunk=10)
    # chunks of 10 samples against all 37 at once: the same float64 arithmetic, except that a BLAS may block (and so
    # round) a product differently for another number of columns (OpenBLAS's AVX-512 kernels do): equal to within a
    # few ulps of the values' scale
    out = ref[g.output.name]
    assert np.max(np.abs(s.output - out)) <= 1e-13 * np.max(np.abs(out))
    acts = [n for n in g.nodes if n.op == "act"]
    assert len(acts) == 19 and set(s.ranges) == {n.inputs[0] for n in acts}
    for n in acts:
        v = ref[n.inputs[0]]
        scale = float(np.max(np.abs(v)))
        assert np.allclose(s.ranges[n.inputs[0]], (float(v.min()), float(v.max())), rtol=0, atol=1e-13 * scale)
    del torch


def test_margins():
    y = np.array([[0.0, 3.0, 1.0], [2.0, 2.5, -1.0]])
    assert margins(y).tolist() == [2.0, 0.5]
    assert margins(np.array([[-0.25], [2.0]])).tolist() == [0.25, 2.0]


def test_a_shared_table_is_read_only_on_a_symmetric_domain():
    """PolyTable.rescaled reads a table of g on [-1, 1] as D g(x / D): an ActPoly on another domain is refused."""
    from hemlp.compiler.activations import composite_unit

    unit = PolyTable(composite_unit("relu", (15, 15, 15)))
    assert (unit.lo, unit.hi) == (-1.0, 1.0) and unit.interp_err <= TOLERANCE * unit.ap.max_err
    ap = approximate_composite("relu", -2.0, 5.0, (15, 15, 15), 0.5)
    t = PolyTable.rescaled(unit, ap)
    assert t.table is unit.table and t.gain == ap.domain[1] and t.interp_err <= TOLERANCE * ap.max_err
    with pytest.raises(ValueError, match="symmetric"):
        PolyTable.rescaled(unit, approximate("relu", -1.0, 3.0, 15, "minimax", 0.5))
