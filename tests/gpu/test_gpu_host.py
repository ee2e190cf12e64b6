"""The CUDA backend's host side, on any machine: loading, device discovery and their errors, the device spec."""
import pytest

from hemlp.errors import DeviceError
from hemlp.gpu import golden, library
from hemlp.gpu.device import CudaEvaluator, DeviceSpec


def test_device_info_never_raises_and_says_why():
    info = library.device_info()
    assert set(info) >= {"available", "reason", "count"}
    if not info["available"]:
        assert info["reason"] and ("build_cuda.sh" in info["reason"] or "no CUDA device" in info["reason"]
                                   or "CUDA" in info["reason"])


def test_evaluator_without_a_device_is_a_typed_error():
    if library.device_info()["available"]:
        pytest.skip("a CUDA device is present: the error path is not reachable here")
    spec = DeviceSpec.from_dict(golden.load_table()["specs"]["test-N12"])
    with pytest.raises(DeviceError, match="build_cuda.sh|CUDA|device"):
        CudaEvaluator(spec)


def test_missing_library_names_the_build_command(monkeypatch, tmp_path):
    monkeypatch.setenv("HEMLP_CUDA_LIB", str(tmp_path / "libhemlp_cuda.so"))
    monkeypatch.setattr(library, "candidate_paths", lambda: [tmp_path / "libhemlp_cuda.so"])
    monkeypatch.setattr(library, "_state", {})
    with pytest.raises(DeviceError, match="scripts/build_cuda.sh"):
        library.library()
    assert library.device_info()["available"] is False


def test_a_library_that_does_not_load_is_a_typed_error(monkeypatch, tmp_path):
    bad = tmp_path / "libhemlp_cuda.so"
    bad.write_bytes(b"not an ELF file")
    monkeypatch.setattr(library, "candidate_paths", lambda: [bad])
    monkeypatch.setattr(library, "_state", {})
    with pytest.raises(DeviceError, match="does not load"):
        library.library()


def test_spec_round_trip_and_digits():
    ctx = golden.cpu_context("N16-boot")
    spec = DeviceSpec.from_context(ctx)
    assert DeviceSpec.from_dict(spec.to_dict()) == spec
    assert spec.n == ctx.N and spec.max_level == ctx.max_level
    for level in (0, 5, 6, 13, ctx.max_level):
        assert spec.num_digits(level) == ctx.params.native.num_digits(level)
    assert [spec.qp_index(3, k) for k in range(4 + len(spec.p))] == [0, 1, 2, 3] + [len(spec.q) + j
                                                                                    for j in range(len(spec.p))]


def test_galois_elements_match_the_core():
    ctx = golden.cpu_context("test-N12")
    spec = DeviceSpec.from_context(ctx)
    for step in (1, -1, 7, -300, 2047, 2048):
        assert golden.galois_element(spec, step) == ctx.native.galois_element(step)


def test_the_gpu_package_and_its_check_need_no_cpu_core():
    """scripts/gpu_check.sh runs on GPU machines without the CPU core: hemlp.gpu (golden and bench gpu included)
    must import without loading hemlp._core."""
    import subprocess
    import sys

    code = ("import sys, hemlp.gpu, hemlp.gpu.golden, hemlp.apps.bench.gpu; "
            "assert 'hemlp._core' not in sys.modules, 'hemlp._core was imported'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_constant_residues_match_the_core():
    """const_residues (exact rational rounding, half away from zero) equals Evaluator::const_residues, ties and
    products beyond 2^64 included."""
    import numpy as np

    from hemlp import _core
    from hemlp.gpu.device import const_residues

    ctx = golden.cpu_context("N16-boot")
    qs = [ctx.modulus(i) for i in range(ctx.max_level + 1)]
    rng = np.random.default_rng(5)
    values = [(0.5, 1.0), (-0.5, 1.0), (2.5, 1.0), (-1.5, 4.0), (0.0, 2.0 ** 40), (1e-30, 2.0 ** 40),
              (-0.7316421875123, 2.0 ** 52), (3.0e5, 2.0 ** 80), (-123.456, 2.0 ** 100)]
    values += [(float(c), float(2.0 ** s)) for c, s in zip(rng.normal(0, 100, 20), rng.integers(0, 120, 20))]
    for c, scale in values:
        want = [int(v) for v in _core.const_residues(ctx.native, c, scale, ctx.max_level)]
        assert const_residues(c, scale, qs) == want, (c, scale)


def test_bench_gpu_bootstrap_row_survives_a_crashing_child(tmp_path):
    """The GPU bootstrap row runs in a subprocess: a CPU core that segfaults on the GPU machine (as one built with the
    lent image's own compiler did) costs that row, named, and not the benchmark run."""
    import sys

    from hemlp.apps.bench.gpu import bootstrap

    crash = [sys.executable, "-c", "import ctypes; ctypes.string_at(0)"]
    rec = bootstrap(3, str(tmp_path), cmd=crash)
    assert rec["error"].startswith("killed by signal 11")
    fails = [sys.executable, "-c", "import sys; sys.exit('no device')"]
    assert bootstrap(3, str(tmp_path), cmd=fails)["error"].startswith("exit status 1: no device")
    out = str(tmp_path / "gpu_bootstrap.json")
    ok = [sys.executable, "-c", f"import json; json.dump({{'median_s': 0.3}}, open({out!r}, 'w'))"]
    assert bootstrap(3, str(tmp_path), cmd=ok) == {"median_s": 0.3}
