"""Smoke test of `python -m hemlp.bench lowering` on its smallest case: every mode compiles, runs encrypted and
reports its estimate, times and error against simulate (no timing assertions: speed claims come from the JSON)."""
import pytest

from hemlp.apps.bench import lowering

pytest.importorskip("torch")


def test_lowering_bench_runs_every_mode():
    p = lowering.run(["expanding-N10"], ["single", "auto"], repeats=1, threads=1)
    single, auto = p["rows"]
    assert single["kinds"] == ["single k=1"] and single["pipeline"].startswith("single (CtS-first)")
    assert any(k.startswith(("batched", "mambo")) for k in auto["kinds"])
    for r in p["rows"]:
        assert r["estimate_s"] > 0 and r["cpu_s"] > 0 and r["wall_s"] > 0
        assert r["bits_vs_simulate"] > 16
    lowering.print_table(p)
    with pytest.raises(ValueError, match="unknown case"):
        lowering.run(["nope"], ["auto"], 1, 1)


def test_lowering_bench_runs_layout_a_prime_refreshes():
    p = lowering.run(["wide-mlwe-N12"], ["single", "auto"], repeats=1, threads=1)
    single, auto = p["rows"]
    assert single["layout"] == auto["layout"] == "mlwe"
    assert single["kinds"] == ["single k=1"] and auto["kinds"] == ["batched k=2"]     # 2 ciphertexts a value
    assert all(r["bits_vs_simulate"] > 18 for r in p["rows"])                      # measured 24.3-24.4
