"""Smoke test of `python -m hemlp.bench mambo` at test-N12-boot: every stage runs and reports (no timing
assertions: speed claims come from the JSON)."""
import warnings

from hemlp.apps.bench import mambo


def test_mambo_bench_runs_every_stage():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = mambo.run("test-N12-boot", [1, 64], [16, 32], threads=1, pcmm_max_d=16, mem_gib=4.0,
                      allow_insecure=True, log=lambda m: None, repeat_single=False)
    st = p["stages"]
    assert st["single"]["max_bits"] > 20
    b1, big = st["batches"]
    assert b1["k"] == 1 and b1["min_max_bits"] > 20 and b1["s2c_min_max_bits"] > 20
    assert b1["pcmm_bootstrap_min_max_bits"] > 18
    assert big["k"] == 64 and big["skipped"]          # its keys (5.4 GiB seeded) + working set are over the budget
    assert b1["seeded"] and b1["key_memory_bytes"] == round(b1["estimated_key_gib"] * 2 ** 30)
    assert p["memory_choice"]["k"] == 1 and "k = 64 needs" in p["memory_choice"]["reason"]
    assert [r["d"] for r in p["layer"]] == [16, 32] and p["layer"][1]["pcmm_extrapolated"]
    assert st["pcmm"]["rows"][1]["extrapolated_from_d"] == 16
