"""RunOptions / RayOptions: one typed object for run()'s options, equivalent to keywords, with a default, a description
and a check per field; the model travels to the Ray workers as an explicit argument, never inside the options."""
import dataclasses
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import hemlp  # noqa: E402
from hemlp.errors import OptionError, ParameterError  # noqa: E402
from hemlp.run_options import RayOptions, RunOptions  # noqa: E402
from tests.compiler.conftest import mlp  # noqa: E402


def test_every_option_has_a_default_and_a_description():
    for cls in (RunOptions, RayOptions):
        assert all(f.metadata.get("doc") for f in dataclasses.fields(cls))
        assert set(cls.defaults()) == set(cls.names())
    text = RunOptions.help()
    for name in RunOptions.names():
        assert f"{name} (default " in text
    for name in RayOptions.names():           # the Ray options are listed too, under ray.
        assert f"\n  ray.{name} (default None): " in text
    assert RunOptions() == RunOptions.of() and RunOptions().ray == RayOptions() and RayOptions().named() == []
    assert hemlp.RunOptions is RunOptions and hemlp.RayOptions is RayOptions
    assert "model" not in RunOptions.names() + RayOptions.names()      # data are run()'s arguments


def test_overrides_go_to_their_object():
    o = RunOptions.of(runtime="ray", threads=2, num_workers=2, grid=(1, 1, 2), stats={})
    assert (o.runtime, o.threads) == ("ray", 2) and o.ray.named() == ["num_workers", "grid", "stats"]
    base = RunOptions(runtime="ray", ray=RayOptions(num_workers=2, threads_per_task=2))
    o = RunOptions.of(base, threads_per_task=1, verbose=False)
    assert o.ray == RayOptions(num_workers=2, threads_per_task=1) and o.verbose is False
    assert base.ray.threads_per_task == 2                               # frozen: merged() copies
    o = RunOptions.of(base, ray=RayOptions(address="auto"), cts_per_task=4)   # ray= first, then its fields
    assert o.ray == RayOptions(address="auto", cts_per_task=4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        base.runtime = "local"


@pytest.mark.parametrize("kw,err,match", [
    (dict(runtime="gpu"), ParameterError, "runtime='gpu': 'local'"),
    (dict(threads=0), ParameterError, "threads=0"),
    (dict(verbose="yes"), ParameterError, "verbose='yes'"),
    (dict(runtime="ray", threads_per_task=0), ParameterError, "threads_per_task=0: an int >= 1"),
    (dict(runtime="ray", num_workers=True), ParameterError, "num_workers=True"),
    (dict(runtime="ray", cts_per_task=2.5), ParameterError, "cts_per_task=2.5"),
    (dict(runtime="ray", grid="1x1x2"), ParameterError, "grid='1x1x2'"),
    (dict(runtime="ray", stats=[]), ParameterError, "stats=\\[\\]"),
    (dict(runtime="ray", address=""), ParameterError, "address=''"),
    (dict(grid=(1, 1, 1)), OptionError, "grid is an option of runtime='ray'"),
    (dict(address="auto", num_workers=2), OptionError, "address, num_workers are options of runtime='ray'"),
    (dict(layuot="packed"), OptionError, r"unknown option\(s\) \['layuot'\]"),
    (dict(model=object()), OptionError, r"unknown option\(s\) \['model'\]"),
    (dict(ray={"grid": (1, 1, 1)}), OptionError, "a hemlp.RayOptions"),
])
def test_validate_names_the_option_and_the_fix(kw, err, match):
    with pytest.raises(err, match=match):
        RunOptions.of(**kw)


def test_option_errors_are_type_errors_too():
    """A misplaced or unknown option is a TypeError, as an unexpected keyword was before RunOptions; a bad value a
    ValueError (both typed: hemlp.errors)."""
    assert issubclass(OptionError, TypeError) and issubclass(OptionError, ParameterError)
    with pytest.raises(OptionError, match="hemlp.RunOptions, got str"):
        RunOptions.of("ray")
    with pytest.raises(OptionError, match="hemlp.RunOptions, got dict"):
        RunOptions.of({"runtime": "ray"})


@pytest.fixture(scope="module")
def small():
    x = np.random.default_rng(3).uniform(-1, 1, size=(8, 12))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")        # the insecure test preset, calibration on few samples
        cm = hemlp.compile(mlp(dims=(12, 8, 4)), x, batch_size=8, allow_insecure=True, layout="batch")
        sk, ek = cm.keygen()
        ct = cm.encrypt(x, sk)
    return cm, ct, ek


def _bytes(out) -> list:
    return [c.to_bytes() for c in out.ctm.cts]


def test_keyword_calls_equal_options_calls_bit_for_bit(small):
    cm, ct, ek = small
    ref = _bytes(cm.run(ct, ek, threads=1, verbose=False))
    for out in (cm.run(ct, ek, RunOptions(threads=1, verbose=False)),
                cm.run(ct, ek, options=RunOptions(threads=1), verbose=False),
                cm.run(ct, ek, runtime="local", threads=1, weights=None),
                cm.run(ct, ek)):
        assert _bytes(out) == ref


def test_run_refuses_bad_options_before_any_work(small):
    cm, ct, ek = small
    with pytest.raises(ParameterError, match="runtime"):
        cm.run(ct, ek, runtime="gpu")
    with pytest.raises(TypeError, match="grid"):                        # a Ray option with runtime='local'
        cm.run(ct, ek, grid=(1, 1, 1))
    with pytest.raises(ValueError, match="address"):
        cm.run(ct, ek, options=RunOptions(ray=RayOptions(address="127.0.0.1:1")))
    with pytest.raises(OptionError, match="RunOptions, got str"):       # the old positional runtime
        cm.run(ct, ek, "ray")
