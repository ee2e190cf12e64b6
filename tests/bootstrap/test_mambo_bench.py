"""Smoke test of `python -m hemlp.bench mambo` at test-N12-boot: every stage runs and reports (no timing
assertions: speed claims come from the JSON)."""
import warnings

from hemlp.apps.bench import mambo


def test_mambo_bench_runs_every_stage():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = mambo.run("test-N12-boot", [1, 64], [16, 32], threads=1, pcmm_max_d=16, mem_gib=4.0,
                      allow_insecure=True, log=lambda m: None, repeats=2, inner=1)
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
    # interleaved rounds: every timed call recorded, the summary is their median
    assert [r["round"] for r in st["single_runs"]] == [0, 1] and len(st["single"]["samples_s"]) == 2
    assert [r["round"] for r in st["batch_runs"]["1"]] == [0, 1] and len(b1["s2c_batch_samples"]) == 2
    assert min(b1["s2c_batch_samples"]) <= b1["s2c_batch_s"] <= max(b1["s2c_batch_samples"])
    assert len(st["batch_runs"]["64"]) == 1             # a skipped k is not tried again
    # measured end to end (the k whose keys fit): the same rows through every path, each output checked
    e = b1["end_to_end"]
    assert e["derived"] is False and e["rows"] == 2 and "end_to_end" not in big
    assert len(e["mambo_samples_s"]) == len(e["single_samples_s"]) == len(e["batched_samples_s"]) == 2
    assert min(e["single_min_bits"], e["batched_min_bits"], e["mambo_min_bits"]) > 18
    assert e["mambo_vs_single_cpu"] == e["single_cpu_s"] / e["mambo_cpu_s"]
