"""The compile's fast paths give what the straightforward computations give, bit for bit: a polynomial table's
native lookup (float32 and float64, a composite's shared table read at its own scale), layout (P)'s diagonals summed by a dense bincount, and the degree search
with its resumed evaluations, pinned cache and early-stopped uniform rungs (same degrees, agreements, harm ranking)."""
import functools

import numpy as np
import pytest

from hemlp.compiler.activations import approximate, approximate_composite
from hemlp.compiler.poly_table import TOLERANCE, PolyTable, TableActivations
from hemlp.layouts.packed_diagonals import conv_entries, conv_entry_chunks, diagonals_from_entries


def _lookup(t: PolyTable, x) -> np.ndarray:
    """The table's interpolation written out plainly (float64, fresh arrays)."""
    x = np.asarray(x, dtype=np.float64)
    f = (x - t.lo) * t.scale
    i = np.clip(np.floor(f), 0, t.points - 1)
    f = f - i
    idx = i.astype(np.intp)
    y = t.gain * (t.table[idx] + (t.table[idx + 1] - t.table[idx]) * f)
    out = (x < t.lo) | (x > t.hi)
    y[out] = t.ap.apply(x[out])
    return y


@pytest.mark.parametrize("degree", [15, 127])
def test_table_lookup_equals_the_plain_interpolation(degree):
    ap = approximate("relu", -4.0, 9.0, degree, "minimax", 0.5)
    t = PolyTable(ap)
    lo, hi = ap.domain
    rng = np.random.default_rng(degree)
    x = rng.uniform(lo - 2.0, hi + 2.0, (3, 5000))     # beyond the domain on both sides too
    x[0, :4] = [lo, hi, 0.0, np.nextafter(hi, np.inf)]
    want = _lookup(t, x)
    assert np.array_equal(t(x), want)
    assert np.array_equal(t(x[:, :100]), want[:, :100])
    assert np.array_equal(t(x[:, ::3]), want[:, ::3])                     # a strided view
    x32 = x.astype(np.float32)
    got = t(x32, np.float32)
    assert got.dtype == np.float32 and np.array_equal(got, _lookup(t, x32).astype(np.float32))
    assert np.array_equal(t(x32), _lookup(t, x32))                       # float32 in, float64 out
    assert np.array_equal(t(x, np.float32), want.astype(np.float32))
    acts = TableActivations(np.float32)
    assert np.array_equal(acts(None, ap, x32), got) and len(acts.tables) == 1


def test_composite_tables_share_one_table_per_schedule():
    """Two composite ReLUs of one schedule read one table of g on [-1, 1], each at its own D, and get the plain
    interpolation of D g(x / D): within TOLERANCE of their own error bounds."""
    acts = TableActivations(np.float64)
    aps = [approximate_composite("relu", -2.0, 5.0, (15, 15, 15), 0.5),
           approximate_composite("relu", -7.5, 3.0, (15, 15, 15), 0.25)]
    rng = np.random.default_rng(5)
    for ap in aps:
        x = rng.uniform(ap.domain[0] - 1.0, ap.domain[1] + 1.0, 50_000)
        y = acts(None, ap, x)
        t = acts.tables[id(ap)][1]
        assert np.array_equal(y, _lookup(t, x), equal_nan=True)        # far beyond, p overflows
        inside = (x >= ap.domain[0]) & (x <= ap.domain[1])
        assert np.max(np.abs(y[inside] - ap.apply(x[inside]))) <= TOLERANCE * ap.max_err
        assert np.array_equal(y[~inside], ap.apply(x[~inside]), equal_nan=True)
    assert len(acts.units) == 1 and acts.tables[id(aps[0])][1].table is acts.tables[id(aps[1])][1].table


def test_table_lookup_of_nan_is_nan():
    ap = approximate("relu", -1.0, 1.0, 31, "minimax", 0.5)
    y = PolyTable(ap)(np.array([np.nan, 0.5], dtype=np.float32), np.float32)
    assert np.isnan(y[0]) and np.isfinite(y[1])


def _diagonals_plain(rows, cols, vals, pos_out, period_out, pos_in, period_in, S1):
    """The diagonals by np.unique and np.add.at over every entry."""
    po, pi = pos_out[rows].astype(np.int64), pos_in[cols].astype(np.int64)
    L, Pmin = max(period_in, period_out), min(period_in, period_out)
    j = (pi - po) % Pmin
    i = po if period_out >= period_in else (pi - j) % period_in
    uk, inv = np.unique(j * L + i, return_inverse=True)
    w = np.zeros(uk.size)
    np.add.at(w, inv, vals)
    keep = w != 0
    uk, w = uk[keep], w[keep]
    out = {}
    for jj in np.unique(uk // L):
        sel = uk // L == jj
        p = uk[sel] % L
        full = (p[None, :] + L * np.arange(S1 // L)[:, None]).reshape(-1)
        out[int(jj)] = (full.astype(np.int32), np.tile(w[sel], S1 // L))
    return out


@pytest.mark.parametrize("period_out,period_in", [(64, 64), (32, 128), (128, 32)])
def test_diagonals_equal_the_plain_sums(period_out, period_in):
    rng = np.random.default_rng(period_out + period_in)
    n_out, n_in, S1 = period_out - 5, period_in - 3, 512
    pos_out, pos_in = rng.permutation(period_out)[:n_out], rng.permutation(period_in)[:n_in]
    k = 4000
    rows, cols = rng.integers(0, n_out, k), rng.integers(0, n_in, k)
    vals = rng.normal(size=k)
    rows[-10:], cols[-10:], vals[-10:] = rows[:10], cols[:10], -vals[:10]      # entries that cancel exactly
    vals[100:200] = np.round(vals[100:200], 1)                                 # sums of many terms
    diags, red = diagonals_from_entries(rows, cols, vals, pos_out, period_out, pos_in, period_in, S1)
    want = _diagonals_plain(rows, cols, vals, pos_out, period_out, pos_in, period_in, S1)
    assert sorted(diags) == sorted(want)
    L = max(period_in, period_out)
    for j, d in diags.items():
        assert d.size == S1 and d.period == L and d.positions.size == want[j][0].size * L // S1   # one period kept
        dense = np.zeros(S1)
        dense[want[j][0]] = want[j][1]
        assert np.array_equal(d.dense(), dense)
        assert np.array_equal(d.rotated(-37).dense(), np.roll(dense, 37))
    assert red == ([period_out << e for e in range(int(np.log2(period_in // period_out)))]
                   if period_out < period_in else [])


@pytest.mark.parametrize("period_out,period_in", [(64, 64), (32, 128), (128, 32)])
def test_diagonals_summed_chunk_by_chunk_are_the_same_bits(period_out, period_in):
    """A conv's entries summed in chunks of whole weight rows (conv_entry_chunks, a few rows a chunk here) give
    the diagonals of all its entries at once, bit for bit: each (diagonal, position) is one output row's."""
    rng = np.random.default_rng(period_out * 7 + period_in)
    co, taps, P = 6, 10, min(period_out // 6, 8)
    n_in = period_in - 3
    index = rng.integers(-1, n_in, (taps, P))
    U = rng.normal(size=(co, taps))
    U[:, 3] = np.round(U[:, 3], 1)
    pos_out, pos_in = rng.permutation(period_out)[:co * P], rng.permutation(period_in)[:n_in]
    whole, red = diagonals_from_entries(*conv_entries(U, index), pos_out, period_out, pos_in, period_in, 256)
    for chunk in (1, 2 * taps, 10 ** 6):
        got, red2 = diagonals_from_entries(conv_entry_chunks(U, index, chunk), None, None, pos_out, period_out,
                                           pos_in, period_in, 256)
        assert red2 == red and list(got) == list(whole)
        for j, d in got.items():
            assert np.array_equal(d.positions, whole[j].positions) and np.array_equal(d.values, whole[j].values)


def _run_search(monkeypatch, plain: bool):
    """choose_activations on a small ResNet-20 (4x4 inputs, 200 samples in chunks of 50, target 99.5 %: a descent of
    several rounds): the fit report and every harm value in order. The fast search keeps 1 MiB of values (a third of
    one choice's: entries are evicted, pinned ones too); plain=True keeps none (each evaluation from the input) and
    runs every trial on every sample, as a search without its shortcuts does."""
    from hemlp.compile_options import CompileOptions
    from hemlp.compiler import calibration, resume_cache
    from hemlp.compiler.fold import fold
    from hemlp.compiler.torch_frontend import from_torch
    from hemlp.models.zoo import build

    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = build("resnet20").eval()
    x = np.random.default_rng(0).normal(size=(200, 3, 4, 4))
    g = fold(from_torch(model, x[:1]))
    harms = []
    harm = calibration._Search.harm

    def logged(self, degrees, base):
        harms.append(harm(self, degrees, base))
        return harms[-1]

    monkeypatch.setattr(calibration._Search, "harm", logged)
    monkeypatch.setattr(calibration, "SEARCH_CHUNK", 50)
    init = resume_cache.ResumeCache.__init__
    monkeypatch.setattr(resume_cache.ResumeCache, "__init__",
                        lambda self, *a, **k: init(self, *a, **dict(k, max_bytes=0 if plain else 1 << 20)))
    if plain:
        agreement = calibration._Search.agreement
        monkeypatch.setattr(calibration._Search, "agreement",
                            lambda self, degrees, early=False: agreement(self, degrees, False))
    opts = CompileOptions().merged(target_agreement=0.995).validate().as_dict()
    with pytest.warns(calibration.CalibrationWarning):
        rep = calibration.choose_activations(g, x, opts, calibration.UNCAPPED_DEPTH, True, True)
    return rep, harms


def test_search_shortcuts_keep_the_plain_search_result(monkeypatch):
    fast, harms_fast = _run_search(monkeypatch, plain=False)
    monkeypatch.undo()
    plain, harms_plain = _run_search(monkeypatch, plain=True)
    pick = functools.partial(map, lambda a: (a["node"], a["degree"], a["schedule"], a["max_err"],
                                             a["agreement_alone"]))
    assert list(pick(fast["activations"])) == list(pick(plain["activations"]))
    assert fast["agreement"] == plain["agreement"] and fast["depth"] == plain["depth"]
    assert harms_fast == harms_plain and len(harms_fast) > 19       # the descent ran rounds, ranked the same way
    assert fast["trials_stopped_early"] > plain["trials_stopped_early"] == 0
    assert len({a["degree"] for a in fast["activations"]}) > 1        # the descent lowered some, not all
