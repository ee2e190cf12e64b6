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
