"""#29 item 2: the planner's cost profile (hemlp.planner.cost_model) — versioned JSON that round-trips, typed errors
naming the file and the fix for a corrupted one, the choice of profile (pinned, calibrated for this machine, packaged
for its SIMD path, nearest packaged), the packaged tables equal to what scripts/cost_tables.py makes of bench/, a
calibrated profile used and named by the plan, and planning that opens no file of the checkout outside the package.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from hemlp.errors import ParameterError, SerializationError
from hemlp.planner import cost_model as cm
from hemlp.planner.cost_model import (SCHEMA, CostProfile, active_profile, load_profile, packaged_for,
                                      packaged_profile, reset_profile_cache, save_profile, user_profile_path)

REPO = Path(__file__).resolve().parents[2]

#: compile-only plan of the GELU MLP 784-1024x3-10 with bootstrapping at batch 32768 (the issue's example), printed
#: with the files the compile opened (an audit hook) after a marker line; run as a script from a temp directory
PLAN_SCRIPT = textwrap.dedent('''
    import os, sys, warnings
    import numpy as np
    import torch
    import hemlp

    torch.manual_seed(0)
    dims = [784, 1024, 1024, 1024, 10]
    layers = []
    for i in range(len(dims) - 1):
        layers.append(torch.nn.Linear(dims[i], dims[i + 1]))
        if i < len(dims) - 2:
            layers.append(torch.nn.GELU())
    net = torch.nn.Sequential(*layers).eval()
    x = np.random.default_rng(0).uniform(-1, 1, (64, 784))
    opened = []

    def hook(event, args):
        if event in ("open", "os.listdir", "os.scandir", "glob.glob") and args and isinstance(args[0], (str, bytes)):
            opened.append(os.path.abspath(os.fsdecode(args[0])))

    sys.addaudithook(hook)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = hemlp.compile(net, x, batch_size=32768, bootstrap=True, activation_degree=7, server_memory=None)
    print("\\n".join(l for l in str(compiled.plan).splitlines() if not l.startswith("# compiled in ")))
    print("=== hemlp", hemlp.__file__)
    print("\\n".join(sorted(set(opened))))
''')


def plan_in_subprocess(python, cwd: Path, env: dict) -> tuple[str, str, list]:
    """(plan text, hemlp.__file__, files opened while compiling) of PLAN_SCRIPT run by `python` in `cwd`."""
    script = cwd / "plan_gelu_mlp.py"
    script.write_text(PLAN_SCRIPT)
    p = subprocess.run([str(python), str(script)], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    plan, _, rest = p.stdout.partition("=== hemlp ")
    where, *opened = rest.splitlines()
    return plan, where, opened


@pytest.fixture
def fresh_profile():
    """The active profile is cached per process: forget it before and after a test that changes the environment."""
    reset_profile_cache()
    yield
    reset_profile_cache()


def test_profile_round_trips_through_json(tmp_path):
    p = packaged_profile("avx512")
    again = CostProfile.from_json(json.loads(json.dumps(p.to_json())), "memory")
    assert again == replace(p, source="")
    path = save_profile(replace(p, unit_costs=dict(p.unit_costs, rotate=1e-7)), tmp_path / "p.json")
    back = load_profile(path)
    assert back.unit_costs["rotate"] == 1e-7 and back.bootstrap == p.bootstrap and back.batch_runs == p.batch_runs
    assert back.batch_runs[0].rho and all(isinstance(k, int) for k in back.batch_runs[0].rho)


def test_a_schema_2_profile_is_read_with_its_key_switch_costs_converted(tmp_path):
    """Schema /2 priced rotations and ciphertext products per N x limbs of N14-d6's fresh ciphertext; /3 per
    key-switch unit. The conversion is exact (every /2 figure was measured there), so a /2 profile plans as the /3
    one made from the same measurements, and each converted figure says so."""
    p = packaged_profile("avx512")
    old = p.to_json()
    old["schema"] = cm.SCHEMA_V2
    factors = cm.v2_keyswitch_factors()
    assert set(factors) == {"rotate", "rotate_hoisted", "ct_mul"}
    for k, f in factors.items():
        old["unit_costs"][k]["seconds"] /= f
    path = tmp_path / "v2.json"
    path.write_text(json.dumps(old))
    back = load_profile(path)
    assert back.unit_costs == pytest.approx(p.unit_costs, rel=1e-12)
    assert all("schema /2" in back.unit_cost_sources[k] for k in factors)
    assert "schema /2" not in back.unit_cost_sources["pt_mul"]


def test_ring_factors_round_trip_and_price_only_their_ring(tmp_path):
    """A calibrated profile's ring factors (``hemlp calibrate --boot``) survive the file and multiply the unit costs
    the layouts price a plan of that ring degree with, and no other."""
    from hemlp.planner.layouts import unit_costs

    p = replace(packaged_profile("avx512"), ring_factors=(cm.RingFactors(65536, {"rotate": 1.25, "pt_mul": 1.5},
                                                                         "measured: test"),))
    back = load_profile(save_profile(p, tmp_path / "ring.json"))
    assert back.ring_factors == p.ring_factors
    at16, at14 = unit_costs(back, N=65536), unit_costs(back, N=16384)
    assert at14 == back.unit_costs == unit_costs(back)
    assert at16["rotate"] == pytest.approx(1.25 * back.unit_costs["rotate"])
    assert at16["pt_mul"] == pytest.approx(1.5 * back.unit_costs["pt_mul"])
    assert at16["ct_mul"] == back.unit_costs["ct_mul"]
    bad = json.loads((tmp_path / "ring.json").read_text())
    bad["ring_factors"][0]["factors"]["rotate"] = 0
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(SerializationError, match="ring_factors.rotate"):
        load_profile(tmp_path / "bad.json")


def test_ring_factors_recover_a_uniform_slowdown():
    """calibrate's ring factors: for levels whose measured seconds are f x the unit cost x the planner's units,
    the factor is f for each op, whatever the level."""
    from hemlp import fhe
    from hemlp.apps.bench.keyswitch import model_units
    from hemlp.apps.calibrate import RING_OPS, ring_factors

    costs = packaged_profile("avx512").unit_costs
    params = fhe.Params.preset("N16-boot")
    f = {"rotate": 1.3, "rotate_hoisted": 1.1, "ct_mul": 1.2, "pt_mul": 1.7, "encode": 1.4}
    rows = {lv: {op: f[op] * costs[op] * model_units(params, lv, op, "keyswitch", costs) for op in RING_OPS}
            for lv in (1, 6, 12)}
    ring = ring_factors("N16-boot", rows, costs, "test")
    assert ring.N == 65536 and ring.factors == pytest.approx(dict(f, encode_limb=1.4))
    assert "levels 1, 6, 12" in ring.source


@pytest.mark.parametrize("damage, words", [
    (lambda t: t[: len(t) // 2], "not JSON"),
    (lambda t: t.replace(f'"{SCHEMA}"', '"hemlp-cost-profile/1"'), "schema 'hemlp-cost-profile/1'"),
    (lambda t: t.replace('"encode_limb"', '"encode_residues"', 1), "missing 'encode_limb'"),
    (lambda t: t.replace('"rescale"', '"rescale_old"', 1), "missing 'rescale'"),
    (lambda t: json.dumps(dict(json.loads(t), simd_path="neon")), "simd_path 'neon'"),
    (lambda t: json.dumps({**json.loads(t), "unit_costs": {**json.loads(t)["unit_costs"],
                                                          "ct_mul": {"seconds": -1.0}}}), "ct_mul"),
])
def test_a_corrupted_profile_is_a_typed_error_naming_the_file_and_the_fix(tmp_path, damage, words):
    good = json.dumps(packaged_profile("avx512").to_json())
    path = tmp_path / "bad.json"
    path.write_text(damage(good))
    with pytest.raises(SerializationError) as e:
        load_profile(path)
    assert str(path) in str(e.value) and words in str(e.value) and "hemlp calibrate" in str(e.value)


def test_a_corrupted_calibrated_profile_is_not_skipped(tmp_path, monkeypatch, fresh_profile):
    """A broken profile in the user cache stops planning with the fix, instead of planning with other costs."""
    monkeypatch.setenv(cm.CACHE_ENV, str(tmp_path))
    monkeypatch.setenv(cm.PROFILE_ENV, "auto")
    path = user_profile_path("Test CPU 9000", "avx2")
    path.parent.mkdir(parents=True)
    path.write_text("{\"schema\": ")
    with pytest.raises(SerializationError, match="hemlp calibrate"):
        active_profile("avx2", "Test CPU 9000")
    monkeypatch.setenv(cm.PROFILE_ENV, str(tmp_path / "missing.json"))
    with pytest.raises(ParameterError, match="neither packaged:"):
        active_profile("avx2", "Test CPU 9000")


def test_which_profile_is_active(tmp_path, monkeypatch, fresh_profile):
    """Pinned by HEMLP_COST_PROFILE; else this machine's calibrated profile; else the packaged table of its SIMD
    path; else the nearest packaged one — the source says which."""
    monkeypatch.setenv(cm.CACHE_ENV, str(tmp_path))
    monkeypatch.setenv(cm.PROFILE_ENV, "auto")
    assert cm.packaged_paths() == ["avx512", "avx2"]
    avx2 = active_profile("avx2", "Test CPU 9000")
    assert avx2.simd_path == "avx2" and "packaged table avx2 (not calibrated on this Test CPU 9000" in avx2.source
    scalar = active_profile("scalar", "Test CPU 9000")
    assert scalar.simd_path == "avx2" and "nearest to this machine's SIMD path scalar" in scalar.source
    assert packaged_for("scalar") == packaged_profile("avx2")
    mine = replace(packaged_profile("avx2"), cpu_model="Test CPU 9000", created="2026-12-01T00:00:00+00:00",
                   unit_costs=dict(packaged_profile("avx2").unit_costs, rotate=1e-6))
    path = save_profile(mine, user_profile_path("Test CPU 9000", "avx2"))
    assert path.parent == tmp_path / "cost_profiles"
    reset_profile_cache()
    got = active_profile("avx2", "Test CPU 9000")
    assert got.unit_costs["rotate"] == 1e-6 and str(path) in got.source and "calibrated 2026-12-01" in got.source
    assert active_profile("avx512", "Test CPU 9000").simd_path == "avx512"       # another SIMD path: its table
    monkeypatch.setenv(cm.PROFILE_ENV, "packaged:avx512")
    assert active_profile("avx2", "Test CPU 9000").unit_costs == packaged_profile("avx512").unit_costs
    monkeypatch.setenv(cm.PROFILE_ENV, str(path))
    assert active_profile("avx512", "Other CPU").unit_costs["rotate"] == 1e-6
    monkeypatch.setenv(cm.PROFILE_ENV, "packaged:neon")
    with pytest.raises(ParameterError, match="no packaged cost table for SIMD path 'neon'"):
        active_profile("avx2", "Test CPU 9000")


def test_packaged_tables_are_what_the_bench_json_give():
    """scripts/cost_tables.py --check: the packaged tables are exactly what it derives from bench/ (rerun it after a
    new benchmark); every avx2 figure is labelled derived, every avx512 one measured but the encode's split (its
    core run predates the level-0 encode: split by another run's ratio, and labelled so)."""
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "cost_tables.py"), "--check"], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    fast, slow = packaged_profile("avx512"), packaged_profile("avx2")
    assert all(s.startswith(("measured", "= pcmm_mac")) for k, s in fast.unit_cost_sources.items()
               if k not in ("encode", "encode_limb"))
    assert all(fast.unit_cost_sources[k].startswith(("measured", "derived: bench/core_N14.json encode x"))
               for k in ("encode", "encode_limb"))
    assert all(s.startswith("derived") for s in slow.unit_cost_sources.values())
    assert all(m.source.startswith("measured") for m in fast.bootstrap)
    assert all(m.source.startswith("derived") for m in slow.bootstrap)
    assert all(r.derived for r in slow.batch_runs) and not any(r.derived for r in fast.batch_runs)
    assert all(slow.unit_costs[k] > fast.unit_costs[k] for k in ("rotate", "ct_mul", "pcmm_mac"))


def test_the_suite_plans_with_the_packaged_avx512_table():
    """tests/conftest.py pins HEMLP_COST_PROFILE=packaged:avx512: plans do not depend on the machine running the
    suite (this one may run another SIMD path)."""
    from hemlp.planner.layouts import unit_costs

    assert os.environ.get(cm.PROFILE_ENV) == "packaged:avx512"
    assert active_profile().simd_path == "avx512"
    assert unit_costs() == packaged_profile("avx512").unit_costs


def test_a_calibrated_profile_is_used_and_named_by_the_plan(tmp_path, monkeypatch, fresh_profile):
    torch = pytest.importorskip("torch")
    import hemlp
    from hemlp import machine

    net = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.GELU(), torch.nn.Linear(8, 4)).eval()
    x = np.random.default_rng(0).uniform(-1, 1, (8, 16))

    def plan():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return hemlp.compile(net, x, batch_size=8, allow_insecure=True, preset="test-N12-boot", bootstrap=True,
                                 activation_degree=7, layout="batch").plan

    pinned = plan()
    base = packaged_profile("avx512")
    slower = replace(base, cpu_model=machine.cpu_model(), simd_path=machine.simd_path(),
                     created="2026-12-01T00:00:00+00:00", unit_costs={k: 2 * v for k, v in base.unit_costs.items()},
                     bootstrap=tuple(replace(m, seconds=2 * m.seconds, pair_seconds=2 * m.pair_seconds)
                                     for m in base.bootstrap))
    path = save_profile(slower, user_profile_path(machine.cpu_model(), machine.simd_path(), tmp_path))
    monkeypatch.setenv(cm.CACHE_ENV, str(tmp_path))
    monkeypatch.setenv(cm.PROFILE_ENV, "auto")
    reset_profile_cache()
    calibrated = plan()
    assert f"time estimates from the cost profile: calibrated 2026-12-01 for {machine.cpu_model()}" in str(calibrated)
    assert str(path) in str(calibrated) and str(path) not in str(pinned)
    assert "cost profile: packaged table avx512" in str(pinned)
    r0, r1 = pinned.resources, calibrated.resources
    assert r1.run_seconds == pytest.approx(2 * r0.run_seconds, rel=1e-6)
    assert r1.encrypt_seconds == pytest.approx(2 * r0.encrypt_seconds, rel=1e-6)


def test_planning_opens_no_file_of_the_checkout_outside_the_package(tmp_path):
    """The GELU MLP with bootstrapping, planned in a fresh process from a temp directory: no file of the checkout
    outside hemlp/ is opened or listed (bench/ in particular), and the plan is the one this process makes."""
    pytest.importorskip("torch")
    env = dict(os.environ, HEMLP_CACHE_DIR=str(tmp_path / "cache"))
    plan, where, opened = plan_in_subprocess(sys.executable, tmp_path, env)
    assert Path(where).resolve().parent == REPO / "hemlp"
    outside = [f for f in opened if f.startswith(str(REPO) + os.sep) and not f.startswith(str(REPO / "hemlp") + os.sep)
               and not f.startswith(str(REPO / ".venv") + os.sep)]
    assert outside == [], outside
    assert any(f.endswith(os.path.join("cost_tables", "avx512.json")) for f in opened)
    assert "pipeline: batched k=4 (S2C-first)" in plan, plan
    assert "time estimates from the cost profile: packaged table avx512 (HEMLP_COST_PROFILE=packaged:avx512)" in plan


def test_hemlp_calibrate_is_the_command_line_one():
    import hemlp
    from hemlp.apps.calibrate import calibrate

    assert hemlp.calibrate is calibrate


def _core_run(encode: float, level0: float | None, fresh_level: int = 6) -> dict:
    """A one-thread core benchmark payload with the ops the unit costs need (seconds as CPU-time medians)."""
    ops = {k: {"median_s": 1e-3, "cpu_median_s": 1e-3} for k in ("rotate", "rotate_hoisted8", "mul", "encrypt",
                                                                 "mul_plain_add", "rescale", "touch_256mib")}
    ops["encode"] = {"median_s": encode, "cpu_median_s": encode}
    if level0 is not None:
        ops["encode_level0"] = {"median_s": level0, "cpu_median_s": level0}
    return {"preset": {"name": "N14-d6", "N": 2 ** 14},
            "results": [{"threads": 1, "levels": {"fresh": fresh_level}, "ops": ops}]}


PCMM_RUN = {"results": [{"format": "rlwe", "threads": 1, "d3_label": "N/2", "d": 64, "d3": 8192, "level": 3,
                         "pcmm_s": 0.5}]}


def test_an_encoding_is_priced_by_its_limbs_from_the_two_measured_levels():
    """The core benchmark encodes at the fresh level and at level 0: the unit costs reproduce both, and an
    encoding at any level in between costs the level-0 part plus its limbs' residues. A run without the level-0
    encode is refused unless a split is given, and a given split is labelled derived."""
    from hemlp.apps.calibrate import unit_costs_from_runs

    N, fresh, level0 = 2 ** 14, 9.6e-4, 5.4e-4
    c, how = unit_costs_from_runs(_core_run(fresh, level0), PCMM_RUN, "core.json", "pcmm.json")
    assert N * (c["encode"] + 7 * c["encode_limb"]) == pytest.approx(fresh)
    assert N * (c["encode"] + c["encode_limb"]) == pytest.approx(level0)
    assert c["encode_limb"] == pytest.approx((fresh - level0) / (6 * N))
    assert how["encode"].startswith("measured: core.json encode_level0")
    with pytest.raises(ValueError, match="encode_level0"):
        unit_costs_from_runs(_core_run(fresh, None), PCMM_RUN, "core.json", "pcmm.json")
    c2, how2 = unit_costs_from_runs(_core_run(fresh, None), PCMM_RUN, "core.json", "pcmm.json",
                                    encode_split=(level0 / fresh, "another run"))
    assert c2["encode"] == pytest.approx(c["encode"]) and c2["encode_limb"] == pytest.approx(c["encode_limb"])
    assert how2["encode"].startswith("derived: core.json encode x") and "another run" in how2["encode_limb"]
    # a disturbed run (level 0 no faster than the fresh level) gives no split: refused, not a negative cost
    with pytest.raises(ValueError, match="no positive split"):
        unit_costs_from_runs(_core_run(fresh, fresh * 1.01), PCMM_RUN, "core.json", "pcmm.json")


def test_calibrate_boot_presets_are_checked_before_any_measuring(monkeypatch):
    """`hemlp calibrate --boot`: a preset that does not bootstrap is named with the choices; one whose keys and
    transforms exceed the machine's available memory is refused with the fix, before minutes of measuring."""
    from hemlp.apps.calibrate import boot_measurement_bytes, calibrate, check_boot_presets
    from hemlp.errors import ResourceError
    from hemlp.planner import resources

    assert check_boot_presets(["test-N12-boot", "test-N10-boot", "test-N10-boot"]) == ["test-N10-boot"]
    with pytest.raises(ParameterError, match="N14-d6: not a bootstrapping preset; choose from N16-boot"):
        check_boot_presets(["N14-d6"])
    assert boot_measurement_bytes("N16-boot") > 20 * boot_measurement_bytes("test-N12-boot") > 0
    monkeypatch.setattr(resources, "available_memory_bytes", lambda: 2 ** 30)
    with pytest.raises(ResourceError, match=r"N16-boot: its single bootstrap needs ~\d+\.\d GiB .* 1\.0 GiB "
                                            r"available; free memory or leave N16-boot out"):
        calibrate(quick=True, output="/nonexistent/never-written.json", boot_presets=["N16-boot"])
