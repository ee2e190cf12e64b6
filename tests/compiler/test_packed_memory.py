"""Layout (P)'s server memory (#33 item 4, #30): the plan's estimate (hemlp.planner.resources, before any key
exists) against the peak RSS of real runs in fresh processes, within 1.5x and never below; the diagonal cache sized
to server_memory and kept by the run; a plan that does not fit even without a cache refused before any key exists.
scripts/packed_memory.py measures the same runs phase by phase and term by term."""
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import hemlp
from hemlp.apps.bench.estimates import SERVER
from hemlp.errors import ResourceError
from hemlp.layouts.boot_choice import boot_key_bytes
from hemlp.layouts.packed import CACHE_OPTION, MAX_CACHED_DIAGONAL_BYTES, PackedRunner
from hemlp.planner.resources import server_memory

from .conftest import mlp

#: the server making its own keys (no import): keygen, the layout's encryption, prepare, one run, its peak RSS
KEYGEN_SERVER = r"""
import json, sys, warnings
warnings.simplefilter("ignore")
import numpy as np
import hemlp
from hemlp.runtime.artifacts import EncryptedBatch
hemlp.set_num_threads(1)
d = sys.argv[1]
cm = hemlp.load(d + "/model", allow_insecure=True)
sk, ek = cm.keygen()
x = np.load(d + "/x.npy")
ct = EncryptedBatch(cm.model_id, cm.layout_impl.encrypt(cm.context, x, sk, cm.top_level), len(x), cm.input_shape,
                    "input")
del sk
cm.prepare()
cm.run(ct, ek)
print(json.dumps(dict(peak_rss=next(int(ln.split()[1]) * 1024 for ln in open("/proc/self/status")
                                    if ln.startswith("VmHWM:")))))
"""


def _packed_memory_script():
    """scripts/packed_memory.py, whose ConvNet (convs with ReLUs, then a linear layer: at test-N12-boot it
    bootstraps) these cases measure, as the script's table does."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "scripts" / "packed_memory.py"
    spec = importlib.util.spec_from_file_location("packed_memory", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ConvNet = _packed_memory_script().ConvNet


X = np.random.default_rng(0).uniform(-1, 1, (8, 3, 16, 16))


def compile_packed(bootstrap: bool, **kw):
    """The ConvNet planned in layout (P) for one image: 4 convs bootstrapped at test-N12-boot, or 2 convs within the
    levels of test-N12-d18."""
    opts = dict(preset="test-N12-boot", bootstrap=True) if bootstrap else dict(preset="test-N12-d18")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return hemlp.compile(ConvNet(convs=4 if bootstrap else 2), X, batch_size=1, layout="packed",
                             allow_insecure=True, activation_degree=7, **opts, **kw)


def peak_rss(tmp_path, cm, keys_in_process: bool) -> int:
    """The peak RSS of a fresh server process running one image: keys imported from the client's file (SERVER, as
    python -m hemlp.bench estimates runs it), or made in the process (KEYGEN_SERVER)."""
    cm.save(tmp_path / "model")
    np.save(tmp_path / "x.npy", X[:1])
    if not keys_in_process:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sk, ek = cm.keygen()
            ek.save(tmp_path / "eval.keys", cm.context)
            cm.encrypt(X[:1], sk).save(tmp_path / "x.ct")
            del sk, ek
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-c", KEYGEN_SERVER if keys_in_process else SERVER, str(tmp_path)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])["peak_rss"]


@pytest.mark.parametrize("bootstrap, keys_in_process", [(False, False), (True, False), (True, True)],
                         ids=["conv-N12", "conv-boot-N12", "conv-boot-N12-keygen"])
def test_the_estimate_is_within_1_5x_of_the_measured_peak_and_not_below(tmp_path, bootstrap, keys_in_process):
    """A server importing the keys has two peaks, importing them (the file and the keys) and running, and the plan's
    is the larger. A server making its own keys (import_keys=False) never imports them: its peak is the run's."""
    cm = compile_packed(bootstrap, import_keys=not keys_in_process)
    res = cm.plan.resources
    if keys_in_process:
        assert res.server_memory_bytes == res.run_memory_bytes > res.import_memory_bytes
    else:
        assert res.server_memory_bytes == max(res.import_memory_bytes, res.run_memory_bytes)
    rss = peak_rss(tmp_path, cm, keys_in_process)
    assert rss <= res.server_memory_bytes <= 1.5 * rss, (res.server_memory_bytes, rss)



#: a fresh server importing the keys alone: its resident memory after the model and context, then its peak while
#: EvalKeys.load runs
IMPORT_SERVER = r"""
import json, sys, warnings
warnings.simplefilter("ignore")
import hemlp
def status(k):
    return next(int(ln.split()[1]) * 1024 for ln in open("/proc/self/status") if ln.startswith(k + ":"))
d = sys.argv[1]
cm = hemlp.load(d + "/model", allow_insecure=True)
cm.context.native
base = status("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
ek = cm.load_eval_keys(d + "/eval.keys")
print(json.dumps(dict(base=base, peak=status("VmHWM"))))
"""


def test_the_key_import_term_is_within_1_5x_of_the_measured_import_and_not_below(tmp_path):
    """Importing a bootstrapped plan's keys (relinearisation, rotation and single bootstrapping keys from the
    client's file) costs the server at most the estimate's key_import term over what it held before, and not less
    than two thirds of it."""
    cm = compile_packed(True)
    mem = server_memory(cm.layout_impl, cm.plan.resources.boot_key_bytes)
    cm.save(tmp_path / "model")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sk, ek = cm.keygen()
        ek.save(tmp_path / "eval.keys", cm.context)
        del sk, ek
    p = subprocess.run([sys.executable, "-c", IMPORT_SERVER, str(tmp_path)], capture_output=True, text=True,
                       env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    measured = r["peak"] - r["base"]
    assert measured <= mem.key_import <= 1.5 * measured, (mem.key_import, measured)

#: six 512-wide dense layers in layout (P): every layer's 512 diagonals share the rotation keys, so the encoded
#: diagonals outgrow the keys' import (without a budget ~0.5 GB of each at test-N12-d18)
DEEP = dict(dims=(512,) * 6 + (10,))
X_DEEP = np.random.default_rng(1).uniform(-1, 1, (8, 512))


def fitted(budget):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return hemlp.compile(mlp(**DEEP), X_DEEP, batch_size=1, layout="packed", preset="test-N12-d18",
                             allow_insecure=True, server_memory=budget)


def test_the_diagonal_cache_follows_server_memory_and_the_run_keeps_that_much(tmp_path):
    free = fitted(None)
    lay = free.layout_impl
    full = lay.prepared_bytes()
    assert CACHE_OPTION not in free.options and lay.uncached_diagonals() == 0
    mem = server_memory(lay)
    floor = mem.running - mem.prepared          # the run without a cache
    assert floor < mem.importing < floor + full
    for budget in (mem.importing, (mem.importing + floor + full) // 2):
        cm = fitted(budget)
        lay = cm.layout_impl
        keep = budget - floor                   # what the keys, the input and the working set leave
        assert cm.options[CACHE_OPTION] == keep < full
        res = cm.plan.resources
        assert 0 < lay.prepared_bytes() == res.prepared_bytes <= keep and lay.uncached_diagonals() > 0
        assert res.run_memory_bytes <= budget and res.server_memory_bytes == max(res.import_memory_bytes,
                                                                                 res.run_memory_bytes) <= budget
        # the saved plan keeps the size, and a run keeps exactly the diagonals the estimate counts
        cm.save(tmp_path / str(budget))
        again = hemlp.load(tmp_path / str(budget), allow_insecure=True)
        impl = again.layout_impl
        assert again.options[CACHE_OPTION] == keep and impl.prepared_bytes() == lay.prepared_bytes()
        runner = impl.runner(again.context, lambda ctx: PackedRunner(ctx, impl.program, impl.cache_bytes))
        runner.prepare()
        assert runner.cached_bytes == lay.prepared_bytes()
    # room for every diagonal: the default (at most MAX_CACHED_DIAGONAL_BYTES), nothing stored
    assert CACHE_OPTION not in fitted(floor + MAX_CACHED_DIAGONAL_BYTES).options


def test_a_plan_that_does_not_fit_without_a_cache_is_refused_before_any_key():
    """Refused with the terms the need is made of (the cache at 0) and the fixes, before any key or ciphertext."""
    mem = server_memory(fitted(None).layout_impl)
    floor = mem.running - mem.prepared
    with pytest.raises(ResourceError, match=r"GiB of server memory \(estimated before any key or ciphertext exists: "
                                            r"importing the keys ~.*kept by prepare\(\) ~0 GiB.*"
                                            r"server_memory=<bytes>"):
        fitted(floor - 2 ** 20)
    # bootstrapped: the larger of the two peaks, refused naming both
    boot = compile_packed(True, server_memory=None)
    res = boot.plan.resources
    assert boot_key_bytes(boot.layout_impl) == res.boot_key_bytes > 0
    assert res.server_memory_bytes == max(res.import_memory_bytes, res.run_memory_bytes)
    floor = max(res.import_memory_bytes, res.run_memory_bytes - res.prepared_bytes)
    with pytest.raises(ResourceError, match=r"importing the keys ~.*, running ~"):
        compile_packed(True, server_memory=floor - 2 ** 20)
    # a server process that makes its own keys imports nothing: its peak is the run's
    own = compile_packed(True, server_memory=None, import_keys=False).plan.resources
    assert own.server_memory_bytes == own.run_memory_bytes and own.import_memory_bytes < res.import_memory_bytes
    assert compile_packed(True, server_memory=own.run_memory_bytes, import_keys=False).plan.resources \
        .server_memory_bytes <= own.run_memory_bytes
