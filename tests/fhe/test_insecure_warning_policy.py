"""The insecure-parameters warning is loud without touching the host program's warning policy.

Importing hemlp installs no global warning filter (a library must not change its host's policy); the
InsecureParametersWarning is still shown for every insecure context, never deduplicated by Python's once-per-location
registry, and the user's own filters (``warnings.simplefilter``, ``-W``) still silence it.
"""
from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

from hemlp import fhe
from hemlp.errors import InsecureParametersWarning

REPO = Path(__file__).resolve().parents[2]

#: the modules that used to install "always" filters at import (hemlp.fhe.context, hemlp.compiler.calibration,
#: hemlp.compiler.activations) and the ones that import them
IMPORTS = ("hemlp", "hemlp.fhe", "hemlp.compiler.activations", "hemlp.compiler.calibration", "hemlp.runtime.local",
           "hemlp.model")

FILTERS_CHILD = """
import importlib, sys, warnings
import numpy  # numpy installs its own filters at import: not hemlp's doing
before = list(warnings.filters)
for name in sys.argv[1:]:
    importlib.import_module(name)
    added = [f for f in warnings.filters if f not in before]
    assert list(warnings.filters) == before, (name, added)
print("ok")
"""

DEFAULT_POLICY_CHILD = """
from hemlp import fhe
for _ in range(2):                # one source location: the default action would show it once
    fhe.Context("test-N12", allow_insecure=True)
"""


def _run(args, **kw):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("PYTHONWARNINGS", None)
    return subprocess.run([sys.executable, *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=300,
                          **kw)


def _insecure_count(records) -> int:
    return sum(issubclass(w.category, InsecureParametersWarning) for w in records)


def test_import_leaves_warning_filters_unchanged():
    r = _run(["-c", FILTERS_CHILD, *IMPORTS])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


def test_two_insecure_contexts_warn_twice_under_the_default_action():
    # "default" shows a warning once per source location; both contexts are made on one line
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("default")
        for _ in range(2):
            fhe.Context("test-N12", allow_insecure=True)
    assert _insecure_count(rec) == 2
    assert all(w.filename == __file__ for w in rec if issubclass(w.category, InsecureParametersWarning))


def test_fresh_interpreter_shows_the_warning_every_time():
    r = _run(["-c", DEFAULT_POLICY_CHILD])
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("InsecureParametersWarning") == 2, r.stderr


def test_user_ignore_filter_is_honoured():
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        warnings.simplefilter("ignore", InsecureParametersWarning)
        for _ in range(2):
            fhe.Context("test-N12", allow_insecure=True)
    assert _insecure_count(rec) == 0


def test_command_line_ignore_option_is_honoured():
    r = _run(["-W", "ignore::hemlp.errors.InsecureParametersWarning", "-c", DEFAULT_POLICY_CHILD])
    assert r.returncode == 0, r.stderr
    assert "InsecureParametersWarning" not in r.stderr, r.stderr


def test_error_filter_turns_it_into_an_exception():
    with warnings.catch_warnings():
        warnings.simplefilter("error", InsecureParametersWarning)
        try:
            fhe.Context("test-N12", allow_insecure=True)
        except InsecureParametersWarning:
            return
    raise AssertionError("an 'error' filter on InsecureParametersWarning did not raise")
