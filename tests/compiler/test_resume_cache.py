"""The degree search's cache (hemlp.compiler.resume_cache.ResumeCache) gives the graph's own reference output for
every choice of approximations, resuming at the activation a choice changes (inside a residual block too)."""
import numpy as np

from hemlp.compiler.activations import approximate
from hemlp.compiler.fold import fold
from hemlp.compiler.resume_cache import ResumeCache
from hemlp.compiler.torch_frontend import from_torch
from hemlp.models.zoo import build


def _graph():
    x = np.random.default_rng(0).normal(size=(6, 3, 8, 8))
    return fold(from_torch(build("resnet20"), x[:1])), x


def test_resume_points_are_the_activations_and_the_output():
    g, _ = _graph()
    cache = ResumeCache(g, None)
    pos = {n.name: i for i, n in enumerate(g.nodes)}
    acts = [i for i, n in enumerate(g.nodes) if n.op == "act"]
    assert cache.resume == acts + [len(g.nodes) - 1]
    for p in cache.resume:
        # every value made before the point and read at or after it, nothing else
        want = {n.name for n in g.nodes[:p] if any(pos[u.name] >= p for u in g.users(n.name))}
        assert set(cache.live[p]) == want
    # a block's first activation needs the skip value too: two live values inside every residual block
    assert sorted({len(cache.live[p]) for p in acts}) == [1, 2]


def _polys(g, x):
    ref = g.reference(x)
    polys = {}
    for n in [n for n in g.nodes if n.op == "act"]:
        lo, hi = float(ref[n.inputs[0]].min()), float(ref[n.inputs[0]].max())
        polys[n.name] = {d: approximate("relu", lo - 0.1, hi + 0.1, d) for d in (3, 7)}
    return polys


def test_cached_outputs_equal_the_reference_for_every_choice():
    g, x = _graph()
    acts = [n for n in g.nodes if n.op == "act"]
    polys = _polys(g, x)
    cache = ResumeCache(g, x, max_bytes=1 << 22, chunk=4)
    rng = np.random.default_rng(1)
    for trial in range(12):
        for n in acts:
            choice = rng.integers(0, 3)
            if choice == 2:
                n.attrs.pop("approx", None)
            else:
                n.attrs["approx"] = polys[n.name][(3, 7)[choice]]
        if trial % 3 == 0:
            cache.pin()
        want = g.reference(x, exact=False)[g.output.name]
        assert np.array_equal(cache.output(), want)
    assert cache.bytes <= 1 << 22 and len(cache.values) > 0


def test_pinned_choice_is_kept_over_trials():
    """Memory full of trials' values: the pinned choice's entries stay, so a trial that changes one activation
    resumes at that activation."""
    g, x = _graph()
    acts = [n for n in g.nodes if n.op == "act"]
    polys = _polys(g, x)
    for n in acts:
        n.attrs["approx"] = polys[n.name][7]
    probe = ResumeCache(g, x)
    probe.output()
    base_bytes = probe.bytes
    cache = ResumeCache(g, x, max_bytes=int(base_bytes * 1.5))
    cache.output()
    cache.pin()
    for n in acts[:6]:                             # trials, each more than fills what is left
        n.attrs["approx"] = polys[n.name][3]
        cache.output()
        n.attrs["approx"] = polys[n.name][7]
    keys = cache.keys()
    assert all((0, p, keys[p]) in cache.values for p in cache.resume)
    assert cache.bytes <= cache.max_bytes


def test_float32_search_values_stay_within_float32_rounding_of_float64():
    """The search evaluates in float32 (SEARCH_DTYPE, torch's fast convolutions): its outputs stay within float32
    rounding (~1e-6 relative over a ResNet-20) of the float64 ones, far below the approximations' own errors."""
    from hemlp.compiler.calibration import SEARCH_DTYPE

    g, x = _graph()
    ref = g.reference(x)
    for n in [n for n in g.nodes if n.op == "act"]:
        v = ref[n.inputs[0]]
        n.attrs["approx"] = approximate("relu", float(v.min()) - 0.1, float(v.max()) + 0.1, 15)
    y64 = ResumeCache(g, x).output()
    c32 = ResumeCache(g, x, dtype=SEARCH_DTYPE, chunk=4)
    y32 = c32.output()
    assert y32.dtype == np.float32 and SEARCH_DTYPE == np.float32
    assert np.max(np.abs(y32 - y64)) <= 1e-5 * max(1.0, float(np.max(np.abs(y64))))
