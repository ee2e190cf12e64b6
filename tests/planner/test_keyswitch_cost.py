"""The planner's key-switch unit count (hemlp.planner.keyswitch_cost): its values by hand, its properties, and the
committed measurement it was checked against (bench/keyswitch_levels_xeon.json, python -m hemlp.bench keyswitch)."""
import json
from pathlib import Path

import pytest

from hemlp import fhe
from hemlp.planner.keyswitch_cost import hoisted_units, keyswitch_per_limb, keyswitch_units, op_units

ROOT = Path(__file__).resolve().parents[2]


def test_units_by_hand():
    n14, n16 = fhe.Params.preset("N14-d6"), fhe.Params.preset("N16-boot")
    # N14-d6, fresh level 6: 7 limbs, K = 2 special primes, digits of 2: beta 4, E 9; NTTs at 14/16 of N = 2^16's
    assert keyswitch_units(n14, 6) == pytest.approx(14 / 16 * (4 * 9 + 2 * 2 + 2 * 7))
    # N16-boot, level 0: one limb, K = 6, one digit over E = 7 limbs
    assert keyswitch_units(n16, 0) == pytest.approx(1 * 7 + 2 * 6 + 2 * 1)
    assert keyswitch_units(n16, 12) == pytest.approx(3 * 19 + 2 * 6 + 2 * 13)
    assert hoisted_units(n16, 0, 8) == pytest.approx(2 * 6 + 2 * 1 + 7 / 8)
    assert keyswitch_per_limb(n16, 12) == pytest.approx(keyswitch_units(n16, 12) / 13)
    # the unit each op is priced in: the one place that says so (the planner's formulas and the benchmarks' model)
    assert op_units(n16, 12, "rotate") == op_units(n16, 12, "ct_mul") == keyswitch_units(n16, 12)
    assert op_units(n16, 12, "rotate_hoisted", 8) == hoisted_units(n16, 12, 8)
    assert op_units(n16, 12, "pt_mul") == op_units(n16, 12, "rescale") == op_units(n16, 12, "encrypt") == 13


def test_schema_2_conversion_is_the_n14_d6_fresh_level():
    """cost_model converts /2 profiles with N14-d6's shape written out (the planner does not build presets): it
    must be the preset's, at its fresh level, for the conversion to be exact."""
    from hemlp.planner.cost_model import v2_keyswitch_factors

    n14 = fhe.Params.preset("N14-d6")
    assert n14.max_level == 6
    f = v2_keyswitch_factors()
    assert f["rotate"] == f["ct_mul"] == pytest.approx(7 / keyswitch_units(n14, 6), rel=1e-15)
    assert f["rotate_hoisted"] == pytest.approx(7 / hoisted_units(n14, 6, 8), rel=1e-15)


def test_special_primes_make_low_levels_dear():
    """Per limb, a key switch at level 0 costs several times one at the top: the special primes' part does not
    shrink with the level (the limb count alone priced it 4x too cheap at N16-boot)."""
    n16 = fhe.Params.preset("N16-boot")
    assert keyswitch_per_limb(n16, 0) > 2.5 * keyswitch_per_limb(n16, 12)
    assert all(keyswitch_units(n16, lv) < keyswitch_units(n16, lv + 1) for lv in range(n16.max_level))


@pytest.mark.parametrize("preset", ["N14-d6", "N16-boot", "N15-d10"])
def test_hoisting_shares_modup(preset):
    p = fhe.Params.preset(preset)
    for lv in (0, p.max_level // 2, p.max_level):
        assert hoisted_units(p, lv, 1) == pytest.approx(keyswitch_units(p, lv))     # one alone is a rotation
        groups = [hoisted_units(p, lv, g) for g in (1, 2, 8, 64)]
        assert groups == sorted(groups, reverse=True) and groups[-1] < keyswitch_units(p, lv)


def test_committed_measurement_supports_the_model():
    """The run the model was checked with (python -m hemlp.bench keyswitch): calibrated on N14-d6's fresh level as
    the planner is, it predicts the key switches at every level of N14-d6 and N16-boot within 0.7-1.2x, where the
    limb count was off by up to 4.7x (a level-0 hoisted rotation at N16-boot)."""
    doc = json.loads((ROOT / "bench" / "keyswitch_levels_xeon.json").read_text())
    assert doc["subcommand"] == "keyswitch" and not doc["quick"]
    assert doc["calibrated_on"] == {"preset": "N14-d6", "level": 6}
    rows = [r for r in doc["rows"] if r["op"] != "pt_mul"]        # pt_mul: limbs in both models
    assert {r["preset"] for r in rows} == {"N14-d6", "N16-boot"} and len(rows) >= 40
    ks = [r["predicted_over_measured"]["keyswitch"] for r in rows]
    limbs = [r["predicted_over_measured"]["limbs"] for r in rows]
    assert 0.7 <= min(ks) and max(ks) <= 1.2
    assert min(limbs) < 0.25
