"""``python -m hemlp.bench zoo``: a timed-out model keeps its row (timed out, with the stage it was in), ``--append``
merges invocations into one file, and the file is written after every row."""
import json
import os
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest

from hemlp.apps.bench import zoo

REPO = Path(__file__).resolve().parents[3]


def test_timed_out_row_names_the_stage():
    row = zoo._timed_out("resnet18", "onnx", 60, b"ZOO-STAGE export\nnoise\nZOO-STAGE compile\n")
    assert row["timed_out"] and row["timeout_s"] == 60 and row["stage"] == "compile"
    assert row["error"] == "timed out after 60 s, in stage: compile"
    assert zoo._timed_out("resnet18", "torch", 60, None)["stage"] == "loading"      # killed before any stage
    assert zoo._timed_out("resnet18", "torch", 60, "ZOO-STAGE simulate (compiled in 9 s)")["stage"].startswith("simul")


def test_a_child_killed_keeps_its_row_with_the_signal():
    from subprocess import CompletedProcess

    out = CompletedProcess([], -9, "ZOO-STAGE torch\nZOO-STAGE simulate (compiled in 9 s)\n", "")
    row = zoo._died("mobilenet_v1", "torch", out)
    assert row["stage"] == "simulate (compiled in 9 s)" and "timed_out" not in row
    assert row["error"].startswith("killed by signal 9 (SIGKILL: out of memory, if nothing else killed it), in stage: "
                                   "simulate")
    row = zoo._died("lenet5", "onnx", CompletedProcess([], 1, "", "Traceback ...\nValueError: x"))
    assert row["stage"] == "loading" and row["error"].startswith("exit status 1, in stage: loading; stderr: Trace")


def test_merge_replaces_same_model_and_frontend_in_place():
    kept = [dict(model="a", frontend="torch", v=1), dict(model="a", frontend="onnx", v=1),
            dict(model="b", frontend="torch", v=1)]
    rows = [dict(model="a", frontend="onnx", v=2), dict(model="c", frontend="torch", v=2)]
    assert zoo._merge(kept, rows) == [kept[0], rows[0], kept[2], rows[1]]
    assert zoo._merge([], rows) == rows


def test_append_refuses_a_file_of_another_preset(tmp_path):
    f = tmp_path / "z.json"
    machine = dict(cpu=dict(model="AMD EPYC", logical_cores=2), simd=dict(path="avx2"), date="2026-11-28")
    f.write_text(json.dumps(dict(subcommand="zoo", preset="N16-boot", machine=machine,
                                 rows=[dict(model="a", frontend="torch"),
                                       dict(model="b", frontend="torch", machine=dict(cpu="Xeon"))])))
    # a row keeps the machine it names; one from before rows named theirs gets the file's (the run that wrote it)
    assert zoo._kept_rows(Namespace(json=str(f), preset="N16-boot")) == [
        dict(model="a", frontend="torch", machine=dict(cpu="AMD EPYC", simd_path="avx2", logical_cores=2,
                                                       date="2026-11-28")),
        dict(model="b", frontend="torch", machine=dict(cpu="Xeon"))]
    assert zoo._kept_rows(Namespace(json=str(tmp_path / "absent.json"), preset="N16-boot")) == []
    with pytest.raises(SystemExit, match="not a zoo table at preset test-N12-boot"):
        zoo._kept_rows(Namespace(json=str(f), preset="test-N12-boot"))


def test_timeouts_are_rows_and_append_merges_invocations(tmp_path):
    """Children given 1 s are stopped while loading: each still leaves its row, and two invocations one file."""
    out = tmp_path / "zoo.json"
    env = dict(os.environ, PYTHONPATH=str(REPO))

    def bench(frontend):
        return subprocess.run([sys.executable, "-m", "hemlp.bench", "zoo", "--data-root", str(tmp_path / "none"),
                               "--models", "lenet5", "--frontends", frontend, "--timeout", "1", "--preset",
                               "test-N12-boot", "--json", str(out), "--append"], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=300)

    r = bench("torch")
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    assert "timed out after 1 s" in r.stdout
    r = bench("onnx")
    assert r.returncode == 1
    doc = json.loads(out.read_text())
    assert doc["subcommand"] == "zoo" and doc["preset"] == "test-N12-boot"
    assert [(x["model"], x["frontend"]) for x in doc["rows"]] == [("lenet5", "torch"), ("lenet5", "onnx")]
    for x in doc["rows"]:
        assert x["timed_out"] and x["timeout_s"] == 1 and x["error"].startswith("timed out after 1 s, in stage: ")
        assert x["settings"]["timeout_s"] == 1 and x["settings"]["test"] == 1017
        assert x["settings"]["layout"] == "auto" and x["settings"]["simulate"] == "layout"
    r = bench("torch")                                  # the same model and frontend again: replaced, not doubled
    assert [(x["model"], x["frontend"]) for x in json.loads(out.read_text())["rows"]] == \
        [("lenet5", "torch"), ("lenet5", "onnx")]

