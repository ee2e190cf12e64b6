"""CompileOptions: one typed object for compile's options, equivalent to keywords, with a default, a description and
a check per field."""
import numpy as np
import pytest

import hemlp
from hemlp.compile_options import CompileOptions
from hemlp.errors import ParameterError
from hemlp.model import OPTIONS

from .conftest import SmallCNN

X = np.random.default_rng(0).normal(size=(8, 1, 8, 8))


def test_every_option_has_a_default_and_a_description():
    assert set(OPTIONS) == set(CompileOptions.names())
    text = CompileOptions.help()
    for name in CompileOptions.names():
        assert f"{name} (default " in text
    assert CompileOptions().named() == set()
    assert CompileOptions(target_agreement=0.9, calibration=X).named() == {"target_agreement", "calibration"}


def test_options_object_and_keywords_give_the_same_plan():
    a = hemlp.compile(SmallCNN(), X, options=CompileOptions(allow_insecure=True, activation_degree=7))
    b = hemlp.compile(SmallCNN(), X, allow_insecure=True, activation_degree=7)
    c = hemlp.compile(SmallCNN(), X, options=CompileOptions(allow_insecure=True), activation_degree=7)
    def plan(m):      # the compile time differs from run to run (the first compile also warms caches)
        return "\n".join(line for line in str(m.plan).splitlines() if "compiled in" not in line)

    assert plan(a) == plan(b) == plan(c)
    assert hemlp.CompileOptions is CompileOptions


def test_bad_options_are_named():
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['layuot'\]"):
        hemlp.compile(SmallCNN(), X, layuot="packed")
    with pytest.raises(TypeError, match="CompileOptions"):
        hemlp.compile(SmallCNN(), X, options={"allow_insecure": True})
    for kw, match in ((dict(workers=0), "workers=0"), (dict(weight_bits=1.5), "weight_bits"),
                      (dict(bootstrap="yes"), "bootstrap='yes': True or False"),
                      (dict(activation_guard=-1.0), "activation_guard")):
        with pytest.raises(ParameterError, match=match):
            CompileOptions(**kw).validate()
