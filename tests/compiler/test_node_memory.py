"""Memory-aware planning over nodes (issue #30 item 1): compile(..., nodes=, node_memory=) estimates each node's peak
(keys once per node, ciphertext shards, encoded weights, working set) for a batch split over the nodes, prints it
with the split, and refuses a job that cannot fit a node with a typed ResourceError naming the fixes, before any key
or ciphertext exists. The one-node estimate is checked against the measured peak RSS of a real encrypted run."""
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

import hemlp
from hemlp.errors import ParameterError, ResourceError
from hemlp.layouts.boot_choice import boot_key_bytes, server_bytes
from hemlp.layouts.batch_bootstrap import boot_batch_size
from hemlp.model import node_options
from hemlp.apps.bench.estimates import SERVER
from hemlp.planner.resources import check_nodes, estimate_nodes, estimate_resources, server_memory
from hemlp.runtime import shards, streamed

from .conftest import SmallCNN, mlp

GIB = 2 ** 30
X = np.random.default_rng(0).uniform(-1, 1, (16, 64))


def wide(batch=8192, **kw):
    """A layout (A) MLP whose memory is its ciphertexts: 64-256-256-10 at test-N12-d6, 4 chunks of 2048 slots."""
    return hemlp.compile(mlp(dims=(64, 256, 256, 10)), X, batch_size=batch, allow_insecure=True, layout="batch",
                         **kw)


def test_options_are_checked_and_auto_reads_this_machine_without_ray():
    for bad in (0, -2, True, 1.5, "all"):
        with pytest.raises(ParameterError, match="nodes"):
            wide(batch=8, nodes=bad)
    for bad in (-1, 0, True, "24GB", float("inf")):
        with pytest.raises(ParameterError, match="node_memory"):
            wide(batch=8, node_memory=bad)
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        pytest.skip("a Ray is connected in this process: 'auto' reads it")
    assert node_options("auto", "auto", 123) == (1, hemlp.layouts.usable_memory_bytes())
    assert node_options(3, None, 123) == (3, 123) and node_options(2, 5e9, None) == (2, 5_000_000_000)


def test_one_node_is_the_server_estimate_and_the_walk_is_in_process_streaming():
    cm = wide(nodes=1, node_memory=64 * GIB)
    lay = cm.layout_impl
    est = cm.plan.info["nodes"]
    assert est["nodes"] == 1 and est["peak_bytes"] == server_bytes(lay)
    # the node walk is streamed.peak_bytes on one node, with and without chains run by blocks
    for stream in (None, streamed.DEFAULT_STREAM_BYTES, 2 ** 20):
        assert (shards.node_peak(lay.steps, lay.params.N, lay.chunks, 1, stream)["peak"]
                == streamed.peak_bytes(lay.steps, lay.params.N, lay.chunks, stream))


def test_per_node_peak_decreases_with_nodes_and_keys_count_once_per_node():
    cm = wide()
    lay = cm.layout_impl
    res = estimate_resources(lay)
    ests = [estimate_nodes(lay, k) for k in (1, 2, 4, 8, 16)]
    peaks = [e.peak_bytes for e in ests]
    assert all(a > b for a, b in zip(peaks, peaks[1:])), peaks
    for e in ests:
        # every node holds (and imports) the keys whole: the same bytes on every node whatever the split
        assert e.key_bytes == server_memory(lay).keys > 0 and e.import_bytes == server_memory(lay).key_import
        assert e.peak_bytes == e.base_bytes + max(e.import_bytes,
                                                  e.key_bytes + e.weight_bytes + e.shard_bytes + e.working_bytes)
    # 4 chunks: up to 4 nodes split whole chunks (no ciphertext moves); beyond, rows of each chunk
    assert "4 group(s) of the 4 chunk(s)" in ests[2].split and "PCMMs" not in ests[2].split
    assert "rows over 2 nodes" in ests[3].split and {m["split"] for m in ests[3].splits} <= {"gather", "reduce",
                                                                                             "streamed"}
    # the shards do halve from 1 to 2 nodes (2 chunks each)
    assert ests[1].shard_bytes * 2 == ests[0].shard_bytes
    # a plan with bootstrapping keys: every node holds them too
    rng = np.random.default_rng(11)
    torch.manual_seed(3)
    net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.SiLU(), torch.nn.Linear(8, 8), torch.nn.Tanh(),
                              torch.nn.Linear(8, 3))
    cb = hemlp.compile(net, rng.uniform(-1, 1, (48, 6)), batch_size=32, bootstrap=True, mambo=False,
                       batch_bootstrap=False, layout="batch", allow_insecure=True, activation_degree=3, nodes=2)
    boot = boot_key_bytes(cb.layout_impl)
    assert boot > 0 and cb.plan.info["nodes"]["key_bytes"] == server_memory(cb.layout_impl).keys + boot


CNN_X = np.random.default_rng(0).normal(size=(16, 1, 8, 8))


def cnn(**kw):
    return hemlp.compile(SmallCNN(), CNN_X, batch_size=16, allow_insecure=True, **kw)


def test_auto_compares_layouts_by_each_nodes_peak():
    """Split over nodes, layout="auto" holds each layout's per-node peak to node_memory: at batch 16 the small CNN's
    layout (P) is the faster but holds its whole run on every node, layout (A) splits its feature rows over the
    nodes; with 4 nodes of a memory between the two peaks "auto" takes (A), which fits only when split, over (P),
    which fits no node (before, every layout was compared by time and (P) was refused afterwards)."""
    a = cnn(layout="batch", server_memory=None).layout_impl
    p = cnn(layout="packed", server_memory=None).layout_impl
    assert p.estimate() * (1 + hemlp.layouts.TIME_TIE) < a.estimate()      # (P) wins on time alone
    peak_a, peak_p = estimate_nodes(a, 4).peak_bytes, estimate_nodes(p, 4).peak_bytes
    assert peak_a < peak_p == estimate_nodes(p, 1).peak_bytes < estimate_nodes(a, 1).peak_bytes
    budget = (peak_a + peak_p) // 2
    assert cnn(server_memory=None).layout == "packed"
    cm = cnn(nodes=4, node_memory=budget)
    info = cm.plan.info
    assert cm.layout == "batch" and info["nodes"]["peak_bytes"] == peak_a <= budget
    assert info["layout_estimates"]["packed"].startswith("not possible: ~") and (
        "of memory on each of 4 node(s), above" in info["layout_estimates"]["packed"])
    # on one server of that memory neither fits; on one node of it the refusal names the layout that splits, with
    # the fewest nodes it fits on
    with pytest.raises(ResourceError, match="GiB of server memory"):
        cnn(server_memory=budget)
    with pytest.raises(ResourceError, match=r"on each of 1 node\(s\).*more nodes: nodes=\d") as exc:
        cnn(nodes=1, node_memory=budget)
    k = int(str(exc.value).split("nodes=")[1].split(" ")[0])
    assert 1 < k <= 4 and estimate_nodes(a, k).peak_bytes <= budget < estimate_nodes(a, k - 1).peak_bytes


def test_the_server_peak_line_counts_the_bootstrapping_keys_as_the_check_does():
    """The plan's "server: peak memory" figure is the one compile checks against server_memory (the bootstrapping
    keys included, and the line says so): equal to boot_choice.server_bytes and to the one-node peak."""
    torch.manual_seed(3)
    net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.SiLU(), torch.nn.Linear(8, 8), torch.nn.Tanh(),
                              torch.nn.Linear(8, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cb = hemlp.compile(net, np.random.default_rng(11).uniform(-1, 1, (48, 6)), batch_size=32, bootstrap=True,
                           layout="batch", allow_insecure=True, activation_degree=3)
    lay, res = cb.layout_impl, cb.plan.resources
    boot = boot_key_bytes(lay)
    assert boot > 0 and res.boot_key_bytes == boot
    assert res.server_memory_bytes == server_bytes(lay) == estimate_nodes(lay, 1, boot).peak_bytes
    # the bootstrapping keys held while running, and imported (a larger peak than the run's here)
    assert res.run_memory_bytes == estimate_resources(lay).run_memory_bytes + boot
    assert res.import_memory_bytes > estimate_resources(lay).import_memory_bytes + boot
    line = next(ln for ln in str(cb.plan).splitlines() if "server: peak memory" in ln)
    assert "bootstrapping keys ~" in line and "included" in line
    # the plan's k forced: under batch_bootstrap="auto" a smaller k would be taken (test_boot_memory_fit.py)
    k = boot_batch_size(lay.steps)
    with pytest.raises(ResourceError, match="GiB of server memory"):
        hemlp.compile(net, np.random.default_rng(11).uniform(-1, 1, (48, 6)), batch_size=32, bootstrap=True,
                      layout="batch", allow_insecure=True, activation_degree=3,
                      server_memory=res.server_memory_bytes - boot // 2, batch_bootstrap=k if k > 1 else False)
    # a plan without bootstraps says nothing of them
    assert "bootstrapping keys" not in next(ln for ln in str(wide(batch=8).plan).splitlines()
                                            if "server: peak memory" in ln)


def test_cli_compile_takes_nodes_and_node_memory(tmp_path, capsys):
    """`hemlp compile --nodes N --node-memory BYTES`: the plan's per-node peak and split; a node memory too small is
    refused as a message naming the fixes (no traceback); bad values are messages too."""
    pytest.importorskip("onnx")
    from hemlp.apps.cli import main

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(mlp(dims=(64, 256, 256, 10)), (torch.zeros(1, 64),), str(tmp_path / "m.onnx"),
                          dynamo=False, input_names=["x"], dynamic_axes={"x": {0: "batch"}})
    np.save(tmp_path / "x.npy", X)
    base = ["compile", str(tmp_path / "m.onnx"), "--example", str(tmp_path / "x.npy"), "--batch-size", "8192",
            "--insecure", "--layout", "batch", "--json", "-q", "--force"]
    one = wide().plan.info["resources"]["server_memory_bytes"]
    budget = one // 2
    capsys.readouterr()
    assert main(base + ["-o", str(tmp_path / "a"), "--nodes", "4", "--node-memory", str(budget)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "on each of 4 node(s)" in out["plan"] and "split: ciphertext ranges: 4 group(s)" in out["plan"]
    assert out["nodes"]["nodes"] == 4 and out["nodes"]["peak_bytes"] <= budget
    got = hemlp.load(tmp_path / "a", allow_insecure=True).plan.info["nodes"]
    assert got["nodes"] == 4 and got["node_memory"] == budget and got["peak_bytes"] <= budget
    # units: 1 GiB per node
    assert main(base + ["-o", str(tmp_path / "b"), "--nodes", "2", "--node-memory", "1GiB"]) == 0
    assert hemlp.load(tmp_path / "b", allow_insecure=True).plan.info["nodes"]["node_memory"] == GIB
    capsys.readouterr()
    assert main(base + ["-o", str(tmp_path / "c"), "--nodes", "1", "--node-memory", str(budget)]) == 2
    err = json.loads(capsys.readouterr().out)
    assert err["error"] == "ResourceError" and "nodes=" in err["message"] and "smaller batch_size" in err["message"]
    for flag, bad in (("--nodes", "0"), ("--nodes", "two"), ("--node-memory", "24 parsecs"), ("--node-memory", "0")):
        assert main(base + ["-o", str(tmp_path / "d"), flag, bad]) == 2
        assert flag in json.loads(capsys.readouterr().out)["message"]


def test_a_job_that_cannot_fit_a_node_is_refused_naming_the_fixes_before_any_key():
    cm = wide(nodes=1, node_memory=64 * GIB)
    one = cm.plan.info["nodes"]["peak_bytes"]
    budget = one // 3
    with pytest.raises(ResourceError) as exc:
        wide(nodes=1, node_memory=budget)
    msg = str(exc.value)
    assert "on each of 1 node(s)" in msg and "before any key or ciphertext exists" in msg
    assert "smaller batch_size" in msg and "streaming" in msg
    k = int(msg.split("nodes=")[1].split(" ")[0])       # the fewest nodes that fit, named
    assert k > 1
    ok = wide(nodes=k, node_memory=budget)
    got = ok.plan.info["nodes"]
    assert got["nodes"] == k and got["peak_bytes"] <= budget < one
    text = str(ok.plan)
    assert f"per node: peak ~" in text and f"on each of {k} node(s)" in text and "split: ciphertext ranges" in text
    with pytest.raises(ResourceError):
        wide(nodes=k - 1, node_memory=budget)
    # the default (one node, node_memory=None) still checks the whole plan against server_memory and names nodes=
    with pytest.raises(ResourceError, match="nodes=<count>"):
        wide(server_memory=budget)


def test_the_issue_example_at_n16_boot_is_refused_on_one_24_gib_node_and_fits_on_enough():
    """The GELU MLP 784-1024-1024-1024-10 at batch 32 768, bootstrap=True (compiled, never run): one node of 24 GiB
    cannot hold it; the number of nodes the refusal names can, each node under its memory."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(784, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 1024),
                              torch.nn.GELU(), torch.nn.Linear(1024, 1024), torch.nn.GELU(),
                              torch.nn.Linear(1024, 10)).eval()
    x = np.random.default_rng(0).uniform(0, 1, (64, 784))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # degree 15 activations: deeper than N16-boot's levels, so the plan refreshes once (as the issue's does)
        cm = hemlp.compile(net, x, batch_size=32768, bootstrap=True, layout="batch", activation_degree=15,
                           server_memory=None, node_memory=None)
    lay = cm.layout_impl
    assert cm.preset == "N16-boot" and cm.plan.info["bootstrap"]["placements"]
    boot = boot_key_bytes(lay)
    assert boot > 10 * GIB                        # the batched (k = 4) bootstrapping keys
    one = estimate_nodes(lay, 1, boot)
    assert one.peak_bytes == server_bytes(lay) > 24 * GIB
    with pytest.raises(ResourceError, match=r"on each of 1 node\(s\).*nodes=\d+") as exc:
        check_nodes(lay, one, 24 * GIB, boot)
    k = int(str(exc.value).split("nodes=")[1].split(" ")[0])
    fit = estimate_nodes(lay, k, boot)
    assert fit.peak_bytes <= 24 * GIB and fit.key_bytes >= boot
    assert "rows over" in fit.split and all(m["split"] != "local" for m in fit.splits)


@pytest.mark.parametrize("batch", [4096, 8192])
def test_one_node_estimate_within_1_5x_of_the_measured_peak_rss(tmp_path, batch):
    """A real encrypted run in a fresh process (loads the model, keys and ciphertexts, runs one batch) at
    test-N12-d6: its peak RSS against the per-node estimate for one node, within 1.5x either way."""
    x = np.random.default_rng(1).uniform(-1, 1, (batch, 64))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = wide(batch=batch, nodes=1, node_memory=64 * GIB)
        est = cm.plan.info["nodes"]["peak_bytes"]        # before any key exists
        sk, ek = cm.keygen()
        cm.save(tmp_path / "model")
        ek.save(tmp_path / "eval.keys")
        cm.encrypt(x, sk).save(tmp_path / "x.ct")
        del sk, ek
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-c", SERVER, str(tmp_path)], capture_output=True, text=True, env=env,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    rss = json.loads(p.stdout.strip().splitlines()[-1])["peak_rss"]
    assert est / 1.5 <= rss <= est * 1.5, (est, rss)
