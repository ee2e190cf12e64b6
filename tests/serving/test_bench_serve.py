"""``python -m hemlp.bench serve`` end to end at the insecure test preset, threading server only, a few requests:
the JSON holds every level of both APIs and the in-process baseline with its ratios, and the replay levels
(pre-encrypted requests, each answer checked against the in-process run) with their CPU per request."""
import argparse
import json

import pytest


def test_bench_serve_smoke(tmp_path, capsys):
    pytest.importorskip("torch")
    from hemlp.apps.bench import serve

    p = argparse.ArgumentParser()
    serve.add_arguments(p)
    out = tmp_path / "serve.json"
    args = p.parse_args(["--preset", "test-N12-d18", "--clients", "1,2", "--requests", "2", "--level-requests", "2",
                         "--local-block", "1", "--replay-clients", "1,2", "--replay-requests", "2", "--json", str(out)])
    assert serve.main(args) == 0
    doc = json.loads(out.read_text())
    assert doc["subcommand"] == "serve" and doc["security"] == "INSECURE" and doc["measured"]
    assert doc["in_process"]["requests"] == 5                  # one before each of the 4 levels, one at the end
    (server,) = doc["servers"]
    assert server["server"] == "threading" and server["server_native_threads"] == 1
    assert [(r["api"], r["clients"], r["requests"]) for r in server["rows"]] == [
        ("replay", 1, 2), ("replay", 2, 2), ("infer", 1, 2), ("infer", 2, 4), ("jobs", 1, 2), ("jobs", 2, 4)]
    for r in server["rows"]:
        assert r["p50_s"] <= r["p99_s"]
        if r["api"] == "replay":        # pre-encrypted requests, each answer the in-process run's bytes
            assert r["verified"] == r["requests"] and r["server_cpu_s_per_request"] > 0
            assert 0 < r["machine_cpu_busy"] <= 1 + 1e-6 and "overhead_p50" not in r
        else:
            assert r["overhead_p50"] == pytest.approx(r["p50_s"] / doc["in_process"]["p50_s"])
        if r["api"] != "replay" and r["clients"] == 1:         # each request paired with one in process
            assert len(r["in_process_paired_s"]) == r["requests"] and r["overhead_paired_p50"] > 0
    assert doc["in_process_run"]["requests"] == 4             # two replayed ciphertexts per client identity
    st = doc["stages_cpu"]
    assert st["upload_bytes"] > st["result_bytes"] > 0 and min(v for k, v in st.items() if k.endswith("_s")) >= 0
    assert "vs in-process" in capsys.readouterr().out
