"""Smoke tests of ``python -m hemlp.bench`` and ``scripts/bench_peers.py``.

The fast tests use the insecure ``test-N12`` preset; anything that needs the peers' venvs
(OpenFHE under Python 3.10, TenSEAL) is marked ``slow``.
"""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
OPS = ["ntt", "encode", "encode_level0", "encrypt", "decrypt", "mul", "rotate", "rotate_hoisted8", "mul_plain_add",
       "rescale", "touch_256mib"]
PRECISION = ["mult_bits", "rotate_bits"]


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def _run(args, timeout=600, drop=()):
    env = {k: v for k, v in _env().items() if k not in drop}
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _ckks_present():
    return (REPO / "hemlp" / "fhe" / "context.py").exists()


needs_ckks = pytest.mark.skipif(not _ckks_present(),
                                reason="hemlp.fhe not written yet (RNS-CKKS core in progress)")


def _bits(v):
    return math.inf if v == "inf" else float(v)


def test_dispatch_lists_core():
    r = _run(["-m", "hemlp.bench", "--help"])
    assert r.returncode == 0, r.stderr
    assert "core" in r.stdout
    r = _run(["-m", "hemlp.bench", "no-such-bench"])
    assert r.returncode == 2 and "unknown subcommand" in r.stderr


def test_report_json_envelope(tmp_path):
    sys.path.insert(0, str(REPO))
    from hemlp.apps.bench import measure, report

    m = measure(lambda: sum(range(100)), repeats=3)
    assert m["repeats"] == 3 and len(m["samples"]) == 3 and m["median_s"] > 0
    path = tmp_path / "sub" / "r.json"
    report.write_json(path, "unit", {"x": float("inf"), "m": m})
    doc = json.loads(path.read_text())
    assert doc["schema"].startswith("hemlp-bench/") and doc["subcommand"] == "unit"
    assert doc["x"] == "inf"
    mach = doc["machine"]
    for key in ("cpu", "python", "blas", "date", "git", "env"):
        assert key in mach
    assert mach["cpu"]["logical_cores"] >= 1
    env = report.benchmark_env({"OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_L2_SIZE": "512", "A": "1"})
    assert env == {"A": "1"}
    # paths inside the checkout are written relative to it: no work folder of this machine in the JSON
    lib = str(report.REPO_ROOT / ".venv" / "lib" / "libx.so")
    report.write_json(path, "unit", {"library": lib, "system": "/usr/lib/libopenblas.so", "note": f"looked for {lib}"})
    doc = json.loads(path.read_text())
    assert doc["library"] == ".venv/lib/libx.so" and doc["note"] == "looked for .venv/lib/libx.so"
    assert doc["system"] == "/usr/lib/libopenblas.so"
    assert str(report.REPO_ROOT) not in path.read_text()
    # and those in the temporary folder (libraries unpacked there on a lent machine) as $TMPDIR/...
    report.write_json(path, "unit", {"library": str(report.TMP_ROOT / "deps" / "libopenblas.so")})
    assert json.loads(path.read_text())["library"] == "$TMPDIR/deps/libopenblas.so"


@needs_ckks
def test_core_smoke(tmp_path):
    out = tmp_path / "core.json"
    r = _run(["-m", "hemlp.bench", "core", "--preset", "test-N12", "--repeats", "1",
              "--threads", "1", "--json", str(out), "--allow-insecure"], drop=("OMP_WAIT_POLICY",))
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    doc = json.loads(out.read_text())
    assert doc["subcommand"] == "core"
    assert doc["machine"]["env"]["OMP_WAIT_POLICY"] == "PASSIVE"  # the benchmarks' default, as the CLI's
    assert doc["machine"]["cpu"]["model"]
    (res,) = doc["results"]
    assert res["threads"] == 1
    for op in OPS:
        rec = res["ops"][op]
        assert rec["median_s"] > 0, op
        assert all(s > 0 for s in rec["samples"]), op
        assert rec["cpu_median_s"] > 0, op     # the planner's unit costs read the one-thread CPU times
    for key in PRECISION:
        assert _bits(res["precision"][key]) > 10, (key, res["precision"])
    assert res["ntt_roundtrip_ok"] is True
    # the table names every op
    for label in ("NTT (one limb)", "ct x ct + relin + rescale", "8 hoisted rotations"):
        assert label in r.stdout


@needs_ckks
def test_core_refuses_insecure_without_flag(tmp_path):
    r = _run(["-m", "hemlp.bench", "core", "--preset", "test-N12", "--repeats", "1",
              "--threads", "1", "--json", str(tmp_path / "x.json")])
    assert r.returncode != 0
    assert not (tmp_path / "x.json").exists()


@pytest.mark.slow
def test_bench_peers_core(tmp_path):
    """Creates the peers' venvs on first use (~1 min), then runs OpenFHE, TenSEAL and hemlp."""
    out = tmp_path / "peers.json"
    peers = "hemlp,openfhe,tenseal" if _ckks_present() else "openfhe,tenseal"
    r = _run([str(REPO / "scripts" / "bench_peers.py"), "core", "--logn", "14", "--threads", "1",
              "--repeats", "1", "--peers", peers, "--json", str(out)], timeout=3600)
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    doc = json.loads(out.read_text())
    (run,) = doc["runs"]
    for name in peers.split(","):
        res = run["peers"][name]
        if "error" in res:  # a peer that cannot be installed must say why, never fake a number
            assert res["error"], name
            continue
        for op in OPS:
            assert res["ops"][op]["median_s"] > 0, (name, op)
        for key in PRECISION:
            assert _bits(res["precision"][key]) > 10, (name, key)
    if "hemlp" in peers and "error" not in run["peers"]["hemlp"]:
        for peer in ("openfhe", "tenseal"):
            if "error" not in run["peers"][peer]:
                assert run["ratios_hemlp_over_peer"][peer]["mul"] > 0


@pytest.mark.slow
def test_bench_peers_boot_smoke(tmp_path):
    """bench_peers.py boot end to end at N = 2^12 (hemlp's insecure test chain, OpenFHE's HEStd_NotSet): both
    peers report time, CPU time, levels left (OpenFHE's checked by squarings) and precision, or say why not."""
    out = tmp_path / "peers_boot.json"
    r = _run([str(REPO / "scripts" / "bench_peers.py"), "boot", "--logn", "12", "--preset", "test-N12-boot",
              "--insecure", "--threads", "1", "--json", str(out)], timeout=3600)
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    doc = json.loads(out.read_text())
    assert doc["subcommand"] == "peers-boot" and doc["hemlp"]["levels_left"] == 3
    (h,) = doc["hemlp"]["results"]
    assert h["bootstrap"]["median_s"] > 0 and h["bootstrap"]["cpu_median_s"] > 0 and h["max_bits"] > 20
    if doc["openfhe"] is None:  # a peer that cannot be installed must say why, never fake a number
        assert doc["openfhe_error"]
        return
    o = doc["openfhe"]
    assert o["levels_left"] >= 1 and o["results"][0]["max_bits"] > 10 and o["peak_rss_gib"] > 0
    (ratio,) = doc["ratios"]
    assert ratio["ratio"] == pytest.approx(h["bootstrap"]["median_s"] / o["results"][0]["bootstrap"]["median_s"])
    assert "hemlp/OpenFHE" in r.stdout


@pytest.mark.parametrize("nodes", [1, 2])
def test_ray_mlp_smoke(tmp_path, nodes):
    """bench ray --model mlp end to end on a tiny insecure chain: every mode bit-identical, the object-store bytes
    equal to the model, and the back-to-back Ray runs recorded; --nodes 2: Ray as two raylets, PCMMs on a grid
    across them."""
    pytest.importorskip("ray")
    out = tmp_path / "ray.json"
    r = _run(["-m", "hemlp.bench", "ray", "--model", "mlp", "--preset", "test-N12", "--allow-insecure",
              "--dims", "16,8,4", "--batch", "64", "--repeats", "1", "--warmup", "0", "--back-to-back", "2",
              "--json", str(out)] + (["--nodes", "2", "--grids", "1x1x1x2"] if nodes == 2 else []))
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    doc = json.loads(out.read_text())
    assert {x["label"] for x in doc["results"]} >= {"local, 1 thread(s)", "Ray, 2 worker(s)"}
    assert all(x["bit_identical"] for x in doc["results"])
    for x in doc["results"]:
        for g in x.get("groups", {}).values():
            assert g["bytes_vs_model"] == pytest.approx(1.0)
    assert len(doc["back_to_back"]) == 2 and all(b["seconds"] > b["input_put_s"] > 0 for b in doc["back_to_back"])
    assert doc["summary"]["back_to_back_s"] > 0 and "one right after the other" in r.stdout
    assert doc["nodes"] == nodes
    if nodes == 2:  # the part split over the two raylets: each PCMM a wave of 2 tasks
        two = next(x for x in doc["results"] if x["label"] == "Ray, 2 worker(s)")
        assert any(g["grid"] == [1, 1, 1, 2] and g["tasks"] == 2 for g in two["groups"].values())


def test_ray_boot_smoke(tmp_path):
    """bench ray_boot on a narrow bootstrapped MLP (test-N12-boot): in process and on 1 and 2 Ray workers, every
    output bit-identical, the bootstrap tasks' CPU seconds and the derived idle-core speed-up recorded."""
    pytest.importorskip("ray")
    pytest.importorskip("torch")
    out = tmp_path / "ray_boot.json"
    r = _run(["-m", "hemlp.bench", "ray_boot", "--width", "4", "--rounds", "1", "--repeats", "1", "--warmup", "0",
              "--json", str(out)])
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    doc = json.loads(out.read_text())
    assert [m["workers"] for m in doc["modes"]] == [None, 1, 2] and all(m["bit_identical"] for m in doc["modes"])
    assert doc["bootstraps"] == 2 * doc["bootstrap_steps"]          # 4 ciphertexts per step: 2 pairs
    ray2 = doc["modes"][2]
    assert ray2["task_cpu_s"] > 0 and ray2["processes"] >= 1 and ray2["bootstrap_steps_s"] > 0
    assert doc["speedup"]["derived_idle_2_cores"] == pytest.approx(2 * doc["speedup"]["task_cpu_ratio"])
    assert "1 -> 2 workers" in r.stdout


def test_ray_boot_packed_smoke(tmp_path, monkeypatch):
    """bench ray_boot --layout packed: a bootstrapped layout (P) request of 2 groups, each group a Ray task on 1 and
    2 workers, every output bit-identical to in process; scripts/bench_tables.py renders its table from the JSON."""
    pytest.importorskip("ray")
    pytest.importorskip("torch")
    out = tmp_path / "ray_boot_packed.json"
    r = _run(["-m", "hemlp.bench", "ray_boot", "--layout", "packed", "--features", "256", "--batch", "16",
              "--width", "4", "--rounds", "1", "--repeats", "1", "--warmup", "0", "--json", str(out)])
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    doc = json.loads(out.read_text())
    assert doc["layout"] == "packed" and doc["groups"] == 2 and doc["samples_per_group"] == 8
    assert [m["workers"] for m in doc["modes"]] == [None, 1, 2] and all(m["bit_identical"] for m in doc["modes"])
    assert doc["bootstraps"] == doc["groups"] * doc["bootstrap_steps"]    # one packed ciphertext per group and point
    ray2 = doc["modes"][2]
    assert ray2["task_cpu_s"] > 0 and 1 <= ray2["processes"] <= 2 and ray2["task_bootstrap_s"] > 0
    assert 1 <= ray2["keys_loaded"] <= ray2["processes"]      # model and keys loaded once per worker process
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import bench_tables
    finally:
        sys.path.remove(str(REPO / "scripts"))
    monkeypatch.setattr(bench_tables, "BENCH", tmp_path)
    text = bench_tables.ray_boot_packed("ray_boot_packed.json", "cmd")
    assert "2 groups of 8" in text and "| Ray, 2 worker(s) |" in text


def test_files_smoke(tmp_path):
    """bench files on a tiny insecure batch: every operation timed and the loaded batch equal to the saved one."""
    out = tmp_path / "files.json"
    r = _run(["-m", "hemlp.bench", "files", "--preset", "test-N12", "--allow-insecure", "--dims", "16,8,4",
              "--batch", "64", "--repeats", "1", "--json", str(out)])
    assert r.returncode == 0, f"stdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    doc = json.loads(out.read_text())
    assert doc["round_trip_equal"] and doc["ciphertexts"] == 16 and doc["bytes"] > 16 * 2 ** 12
    assert set(doc["ops"]) == {"to_bytes", "save", "from_bytes", "load"}
    assert all(v["median_s"] > 0 for v in doc["ops"].values())


def test_process_status_bytes_reads_this_process_memory():
    """The one reader of /proc/<pid>/status the benchmarks share: in a fresh process (a long-running one may reuse
    resident memory), a 64 MiB allocation shows in VmRSS and VmHWM; an unknown field or process is None, not an
    exception."""
    if not sys.platform.startswith("linux"):
        pytest.skip("reads Linux /proc")
    code = ("import json, numpy as np\n"
            "from hemlp.apps.bench.report import process_status_bytes as s\n"
            "before = s('VmRSS'); block = np.ones(64 * 2 ** 20 // 8); after = s('VmRSS')\n"
            "print(json.dumps([before, after, s('VmHWM'), s('NoSuchField'), s('VmRSS', pid=2 ** 22 + 1)]))\n")
    before, after, hwm, missing, other = json.loads(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert after - before > 48 * 2 ** 20 and hwm >= after
    assert missing is None and other is None
