"""The degree search's cut-node cache (hemlp.compiler.calibration.CutCache) gives the graph's own reference output
for every choice of approximations, restarting only at cuts (never inside a residual block)."""
import numpy as np

from hemlp.compiler.activations import approximate
from hemlp.compiler.calibration import CutCache
from hemlp.compiler.fold import fold
from hemlp.compiler.torch_frontend import from_torch
from hemlp.models.zoo import build


def _graph():
    x = np.random.default_rng(0).normal(size=(6, 3, 8, 8))
    return fold(from_torch(build("resnet20"), x[:1])), x


def test_cuts_are_block_boundaries_only():
    g, _ = _graph()
    cache = CutCache(g, None)
    pos = {n.name: i for i, n in enumerate(g.nodes)}
    for i, n in enumerate(g.nodes):
        jumps = any(pos[j] < i < pos[u.name] for u in g.nodes for j in u.inputs)
        assert cache.cut[i] == (not jumps and i < len(g.nodes) - 1)
    # every residual add's output is a cut; nothing inside a block (the skip edge jumps over it) is
    adds = [i for i, n in enumerate(g.nodes) if n.op == "add"]
    assert len(adds) == 9 and sum(cache.cut) >= 10


def test_cached_outputs_equal_the_reference_for_every_choice():
    g, x = _graph()
    acts = [n for n in g.nodes if n.op == "act"]
    ref = g.reference(x)
    polys = {}
    for n in acts:
        lo, hi = float(ref[n.inputs[0]].min()), float(ref[n.inputs[0]].max())
        polys[n.name] = {d: approximate("relu", lo - 0.1, hi + 0.1, d) for d in (3, 7)}
    cache = CutCache(g, x, max_bytes=1 << 22)
    rng = np.random.default_rng(1)
    for trial in range(12):
        for n in acts:
            choice = rng.integers(0, 3)
            if choice == 2:
                n.attrs.pop("approx", None)
            else:
                n.attrs["approx"] = polys[n.name][(3, 7)[choice]]
        want = g.reference(x, exact=False)[g.output.name]
        assert np.array_equal(cache.output(), want)
    assert cache.bytes <= 1 << 22 and len(cache.values) > 0


def test_float32_search_values_stay_within_float32_rounding_of_float64():
    """The search evaluates in float32 (SEARCH_DTYPE, torch's fast convolutions): its outputs stay within float32
    rounding (~1e-6 relative over a ResNet-20) of the float64 ones, far below the approximations' own errors."""
    from hemlp.compiler.calibration import SEARCH_DTYPE

    g, x = _graph()
    ref = g.reference(x)
    for n in [n for n in g.nodes if n.op == "act"]:
        v = ref[n.inputs[0]]
        n.attrs["approx"] = approximate("relu", float(v.min()) - 0.1, float(v.max()) + 0.1, 15)
    y64 = CutCache(g, x).output()
    c32 = CutCache(g, x, dtype=SEARCH_DTYPE, chunk=4)
    y32 = c32.output()
    assert y32.dtype == np.float32 and SEARCH_DTYPE == np.float32
    assert np.max(np.abs(y32 - y64)) <= 1e-5 * max(1.0, float(np.max(np.abs(y64))))
