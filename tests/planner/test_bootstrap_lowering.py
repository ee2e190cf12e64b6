"""hemlp.planner.bootstrap_lowering: which pipeline runs each placed bootstrap (single CtS-first, S2C-first batched
with k, MaMBo), from a cost model given here explicitly (so the expected choices follow from the numbers, not from
whatever the bench JSONs hold) — both directions for batching and for MaMBo — and the typed errors of forced
choices; the measured ratios come from the cost profile, whose packaged table holds the bench JSON's runs."""
from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from hemlp.apps.calibrate import batch_run
from hemlp.errors import ParameterError, UnsupportedError
from hemlp.planner.bootstrap_lowering import (AUTO_MARGIN, STC_BOTTOM_FRACTION, PipelineCosts, batch_ratios,
                                              choose_pipelines)
from hemlp.planner.bootstrap_placement import BootstrapCost, LevelNode, place_bootstraps, place_bootstraps_exhaustive
from hemlp.planner.cost_model import packaged_profile

BENCH = Path(__file__).resolve().parents[2] / "bench"


def costs(rho=None, key_bytes=None, stc=2, per_boot=1.0):
    single = BootstrapCost(3, per_boot, per_boot, "given")
    return PipelineCosts(single, stc, dict(rho if rho is not None else {2: 0.8, 4: 0.7}), dict(key_bytes or {}), {},
                         "test numbers")


def chain(d2: int, d1: int = 16, per_limb: float = 1e-4):
    """input (d2 ciphertexts) -> 'up' PCMM d2 -> d1 -> 'deep' (depth 3 = all a bootstrap leaves) -> output: the only
    placement refreshes up's output right after the PCMM (up reads at 3, lands at 2 < 3)."""
    return [LevelNode("x", "input", (), 0, d2, per_limb),
            LevelNode("up", "op", ("x",), 1, d1, per_limb),
            LevelNode("deep", "op", ("up",), 3, d1, per_limb),
            LevelNode("y", "output", ("deep",), 0, d1, 0.0)]


def test_batched_cost_counts_calls_of_k_pairs():
    c = costs()
    b = c.s2c_boot(4)
    # 16 real ciphertexts -> 8 pairs -> 2 calls of 4; 9 -> 5 pairs -> 2 calls (the last one padded)
    assert b.bootstraps_for(16) == 2 and b.bootstraps_for(9) == 2 and b.bootstraps_for(8) == 1
    assert b.seconds_for(16) == pytest.approx(2 * 4 * 0.7)
    assert c.single.seconds_for(16) == pytest.approx(8.0)


def test_mambo_pays_after_an_expanding_layer():
    c = costs()
    low = choose_pipelines(chain(2), c, min_output_level=0, pcmm_inputs={"up": 2})
    assert (low.order, low.k) == ("s2c_first", 4)
    (ch,) = low.choices.values()
    assert ch.kind == "mambo" and ch.value == "up" and low.mambo_values == {"up"}
    t_stc = STC_BOTTOM_FRACTION * 1.0
    # MaMBo: 2 input StCs + the PCMM on 2 limbs + 2 calls of 4 pairs without their StCs
    assert ch.mambo_seconds == pytest.approx(2 * t_stc + 2 * 1e-4 + 2 * (4 * 0.7 - 4 * t_stc))
    # separate: the PCMM at its read level (1 in the frame: the input is encrypted as low as the chain allows;
    # + 2 shifted -> level 3, 4 limbs) + the batched refresh
    assert ch.batched_seconds == pytest.approx(4 * 1e-4 + 2 * 4 * 0.7)
    assert ch.mambo_seconds < ch.batched_seconds and ch.single_seconds == pytest.approx(8.0)
    assert "MaMBo pays" in ch.reason
    assert "batched k=4" in low.reason and "single (CtS-first)" in low.reason


def test_mambo_does_not_pay_when_every_input_row_needs_its_slot_to_coeff():
    low = choose_pipelines(chain(16), costs(), min_output_level=0, pcmm_inputs={"up": 16})
    (ch,) = low.choices.values()
    assert ch.kind == "batched" and not low.mambo_values
    assert ch.mambo_seconds > ch.batched_seconds and "does not pay" in ch.reason
    # forced, it runs anyway
    low = choose_pipelines(chain(16), costs(), min_output_level=0, pcmm_inputs={"up": 16}, mambo=True)
    (ch,) = low.choices.values()
    assert ch.kind == "mambo" and "forced" in ch.reason


def test_batching_pays_or_not_by_the_measured_ratio():
    # rho 0.7 at k = 4: 2 calls x 2.8 s < 8 paired single bootstraps -> batched
    low = choose_pipelines(chain(16), costs(), min_output_level=0, pcmm_inputs={}, mambo=False)
    assert (low.order, low.k) == ("s2c_first", 4)
    # rho 0.99 at k = 2: 4 calls x 1.98 s = 7.92 s: within the auto margin of 8 s -> the single family
    low = choose_pipelines(chain(16), costs({2: 0.99}), min_output_level=0, pcmm_inputs={}, mambo=False)
    assert low.order == "cts_first" and low.k == 1
    (ch,) = low.choices.values()
    assert ch.kind == "single" and ch.batched_seconds == pytest.approx(7.92) and ch.seconds == pytest.approx(8.0)
    assert 7.92 * (1 + AUTO_MARGIN) > 8.0
    # forced batching takes the batched family anyway
    low = choose_pipelines(chain(16), costs({2: 0.99}), min_output_level=0, pcmm_inputs={}, batch_bootstrap=True)
    assert (low.order, low.k) == ("s2c_first", 2)
    low = choose_pipelines(chain(16), costs(), min_output_level=0, pcmm_inputs={}, batch_bootstrap=2, mambo=False)
    assert low.k == 2 and next(iter(low.choices.values())).kind == "batched"


def test_a_key_budget_holds_auto_to_the_families_whose_keys_fit():
    gib = 2 ** 30
    c = replace(costs(key_bytes={2: 2 * gib, 4: 4 * gib}), single_key_bytes=gib)
    # k = 4 is the cheapest (test above) but its keys exceed the budget: k = 2, and the reason says why
    low = choose_pipelines(chain(16), c, min_output_level=0, pcmm_inputs={}, mambo=False, key_budget=3 * gib)
    assert (low.order, low.k) == ("s2c_first", 2)
    assert "batched k=4 (S2C-first)'s keys (4 GiB) exceed the key budget (3 GiB" in low.reason
    assert "batch_bootstrap" not in low.reason and "batched k=4 (S2C-first)" not in low.totals
    # no family fits: the smallest keys (the single family's 1 GiB), named as such
    low = choose_pipelines(chain(16), c, min_output_level=0, pcmm_inputs={}, mambo=False, key_budget=gib // 2)
    assert low.order == "cts_first" and "no family's keys fit the key budget (0.5 GiB" in low.reason
    # a budget every family fits changes nothing; a forced k is kept whatever its keys (the memory check refuses it)
    free = choose_pipelines(chain(16), c, min_output_level=0, pcmm_inputs={}, mambo=False)
    low = choose_pipelines(chain(16), c, min_output_level=0, pcmm_inputs={}, mambo=False, key_budget=8 * gib)
    assert (low.order, low.k, low.reason) == (free.order, free.k, free.reason)
    low = choose_pipelines(chain(16), c, min_output_level=0, pcmm_inputs={}, batch_bootstrap=4, mambo=False,
                           key_budget=gib)
    assert low.k == 4 and "key budget" not in low.reason


def test_the_s2c_frame_is_shifted_by_the_stc_depth():
    low = choose_pipelines(chain(16), costs(), min_output_level=0, pcmm_inputs={}, mambo=False)
    assert low.level_offset == 2
    (b,) = low.placement.bootstraps
    # frame levels (+2 on the ciphertexts): refreshed from the frame's 0, i.e. level stc_depth, the lowest the
    # S2C-first order takes (its SlotToCoeff runs below it), landing at 3 + 2
    assert b.level_before == 0 and b.level_after == 3


def test_dp_with_mambo_costs_equals_exhaustive_search():
    c = costs()
    nodes = [LevelNode("x", "input", (), 0, 2, 1e-3), LevelNode("a", "op", ("x",), 1, 8, 1e-3),
             LevelNode("b", "op", ("a",), 1, 8, 2e-3), LevelNode("u", "op", ("b",), 1, 16, 1e-3),
             LevelNode("v", "op", ("u",), 2, 16, 3e-3), LevelNode("w", "op", ("v",), 1, 4, 1e-3),
             LevelNode("y", "output", ("w",), 0, 4, 0.0)]
    shifted = [replace(n, limb_offset=2) for n in nodes]
    boot = c.s2c_boot(4)

    def fn(v, lv):
        n = next(x for x in shifted if x.name == v)
        if v in ("a", "u") and lv < 3:
            return min(boot.seconds_for(n.ciphertexts),
                       c.mambo_seconds(4, 2 if v == "a" else 8, n.ciphertexts, n.cost_per_limb) - n.cost(lv + 1))
        return boot.seconds_for(n.ciphertexts)

    dp = place_bootstraps(shifted, boot, boot_seconds=fn)
    ex = place_bootstraps_exhaustive(shifted, boot, boot_seconds=fn)
    assert dp.total == pytest.approx(ex.total)


def test_forced_choices_that_cannot_run_are_typed_errors():
    with pytest.raises(UnsupportedError, match="batch_bootstrap=True: no batch size fits"):
        choose_pipelines(chain(16), costs({}), min_output_level=0, pcmm_inputs={}, batch_bootstrap=True)
    with pytest.raises(UnsupportedError, match="batch_bootstrap=True: no batch size fits"):
        choose_pipelines(chain(16), costs(key_bytes={2: 40 * 2 ** 30, 4: 60 * 2 ** 30}), min_output_level=0,
                         pcmm_inputs={}, batch_bootstrap=True)
    with pytest.raises(ParameterError, match="keys take 40.0 GiB"):
        choose_pipelines(chain(16), costs(key_bytes={2: 40 * 2 ** 30}), min_output_level=0, pcmm_inputs={},
                         batch_bootstrap=2)
    with pytest.raises(UnsupportedError, match="mambo=True, but no bootstrap .* refreshes the output of a dense"):
        choose_pipelines(chain(16), costs(), min_output_level=0, pcmm_inputs={}, mambo=True)
    for bad in (dict(mambo="yes"), dict(mambo=1), dict(batch_bootstrap=1), dict(batch_bootstrap="4")):
        with pytest.raises(ParameterError, match="mambo=|batch_bootstrap="):
            choose_pipelines(chain(16), costs(), min_output_level=0, pcmm_inputs={}, **bad)


def test_ratios_are_the_mambo_benchmarks():
    """The packaged avx512 table (the suite's profile, tests/conftest.py) holds bench/mambo_N12_t1.json's ratios."""
    path = BENCH / "mambo_N12_t1.json"
    if not path.exists():
        pytest.skip("bench/mambo_N12_t1.json is not in this checkout")
    d = json.loads(path.read_text())
    single = d["stages"]["single_cpu_s_used"]
    rho, keys, bits, src = batch_ratios("test-N12-boot", 4096)
    assert "mambo_N12" in src
    assert keys.pop("single") == d["stages"]["single"]["key_bytes"]
    for b in d["stages"]["batches"]:
        assert rho[b["k"]] == pytest.approx(b["s2c_batch_cpu_s"] / (b["k"] * single))
        assert keys[b["k"]] == b["key_bytes"]
    # another preset of another ring size: the nearest ratios, without its key bytes
    rho10, keys10, _, src10 = batch_ratios("test-N10-boot", 1024)
    assert rho10 and not keys10 and "nearest ring size" in src10
    assert math.isfinite(sum(rho.values()))


def _mambo_record(date: str, single_cpu: float, batches: list) -> dict:
    return {"subcommand": "mambo", "preset": "N16-boot", "N": 65536, "threads": 2, "machine": {"date": date},
            "stages": {"single_cpu_s_used": single_cpu,
                       "single": {"bootstrap_cpu_s": single_cpu, "max_bits": 18.0, "key_bytes": 3 * 2 ** 30},
                       "batches": batches}}


def test_ratios_merge_every_run_of_the_preset_and_key_bytes_pick_the_budget():
    """bench/mambo_N16.json (k = 2) and bench/mambo_N16_k4.json (k = 4) both count: each k against the single
    bootstrap of its own run, a k measured twice from the newer run, the S2C-first key memory where recorded; the
    planner's batch sizes are then chosen by the key budget."""
    gib = 2 ** 30

    def batch(k, cpu, keys, s2c_keys=None):
        b = {"k": k, "s2c_batch_cpu_s": cpu, "key_bytes": keys, "s2c_min_max_bits": 17.5,
             "pcmm_bootstrap_min_max_bits": 17.0}
        if s2c_keys is not None:
            b["s2c_key_memory_bytes"] = s2c_keys
        return b

    runs = (batch_run(_mambo_record("2026-11-24T23:00:00+00:00", 10.0, [batch(2, 16.0, int(9.6 * gib)),
                                                                         batch(4, 36.0, 13 * gib)]), "mambo_N16.json"),
            batch_run(_mambo_record("2026-11-25T05:00:00+00:00", 8.0, [batch(4, 24.0, int(12.4 * gib),
                                                                                int(11.4 * gib))]), "mambo_N16_k4.json"))
    profile = replace(packaged_profile("avx512"), batch_runs=runs[::-1])    # the order of the runs does not matter
    rho, keys, bits, src = batch_ratios("N16-boot", 65536, profile)
    assert rho == pytest.approx({2: 16.0 / 20.0, 4: 24.0 / 32.0})          # k = 4 from the newer run, not 36 / 40
    assert keys[2] == int(9.6 * gib) and keys[4] == int(11.4 * gib)       # the S2C-first keys where recorded
    assert "mambo_N16.json" in src and "mambo_N16_k4.json" in src
    c = PipelineCosts.for_preset(type("P", (), {"name": "N16-boot", "N": 65536})(),
                                 BootstrapCost(3, 1.0, 1.0, "given"), 3, profile)
    assert c.batch_sizes(12 * gib) == [2, 4] and c.batch_sizes(10 * gib) == [2] and c.batch_sizes(9 * gib) == []
    assert c.ratio(4) == pytest.approx(0.75)
