"""#19 bullets 2 and 3: progress on long work (quiet in tests and off a terminal, verbose= / --quiet) and the batch
runtimes (in-process on every core; Ray reused within a process, skipped when nothing is left, shut down on
interrupt)."""
import os
import signal
import sys
import time
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import hemlp  # noqa: E402
from hemlp.runtime import jobs  # noqa: E402
from hemlp.runtime.inprocess import InProcessItems, usable_cores  # noqa: E402


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


class Square(torch.nn.Module):
    def forward(self, x):
        return x * x


@pytest.fixture(scope="module")
def small():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), Square(), torch.nn.Linear(8, 8), Square(),
                                torch.nn.Linear(8, 3)).eval()
    x = np.random.default_rng(2).uniform(-1, 1, (4, 16))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = hemlp.compile(model, x, batch_size=4, allow_insecure=True)
        sk, ek = cm.keygen()
        ct = cm.encrypt(x, sk)
    return cm, sk, ek, ct, x


def test_run_shows_per_layer_progress_only_when_asked(small, capfd, monkeypatch):
    cm, sk, ek, ct, x = small
    monkeypatch.setitem(sys.modules, "tqdm", None)       # the plain-line fallback: progress needs no extra
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    capfd.readouterr()
    quiet = cm.run(ct, ek)                                # verbose=None: off in tests (and off a terminal)
    assert capfd.readouterr().err == ""
    loud = cm.run(ct, ek, verbose=True)
    err = capfd.readouterr().err
    total = cm.layout_impl.progress_total()
    assert total == len(loud.layer_seconds) == 5 and f"run: {total}/{total} layers" in err
    assert type(loud.layer_seconds) is dict and set(loud.layer_seconds) == set(quiet.layer_seconds)
    np.testing.assert_allclose(cm.decrypt(loud, sk), cm.simulate(x), atol=1e-4)
    cm.keygen(verbose=True)
    cm.encrypt(x, sk, verbose=True)
    cm.prepare(verbose=True)
    err = capfd.readouterr().err
    assert "keygen" in err and "encrypt 4 samples" in err and "prepare" in err
    cm.keygen(verbose=False)
    cm.encrypt(x, sk, verbose=False)
    assert capfd.readouterr().err == ""


def test_progress_off_without_a_terminal(monkeypatch):
    from hemlp import progress

    monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    monkeypatch.delenv("HEMLP_QUIET", raising=False)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    assert not progress.enabled(None) and progress.enabled(True)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    assert progress.enabled(None) and not progress.enabled(False)
    monkeypatch.setenv("HEMLP_QUIET", "1")
    assert not progress.enabled(None)


def _model_job(tmp_path, small):
    cm, sk, ek, ct, x = small
    cm.save(tmp_path / "m")
    ek.save(tmp_path / "eval.keys")
    (tmp_path / "in").mkdir(exist_ok=True)
    for i in range(2):
        cm.encrypt(x * (1 - 0.2 * i), sk).save(tmp_path / "in" / f"b{i}.ct")
    return jobs.ModelJob.from_paths(tmp_path / "m", tmp_path / "eval.keys", allow_insecure=True)


def test_in_process_executor_uses_every_core_per_item(tmp_path, small):
    cm, sk, ek, ct, x = small
    job = _model_job(tmp_path, small)
    seen = []

    class Spy:
        key = job.key

        def process(self, data):
            seen.append(hemlp.get_num_threads())
            return job.process(data)

    hemlp.set_num_threads(1)
    res = jobs.run_batch(Spy(), jobs.list_inputs(tmp_path / "in"), tmp_path / "out", executor=InProcessItems())
    assert seen == [usable_cores()] * 2 and hemlp.get_num_threads() == 1   # every core per item, then restored
    assert sorted(res.done) == ["b0.ct", "b1.ct"]
    for i in range(2):
        y = cm.decrypt(cm.load_encrypted(tmp_path / "out" / f"b{i}.ct"), sk)
        np.testing.assert_allclose(y, cm.simulate(x * (1 - 0.2 * i)), atol=1e-4)
    with pytest.raises(ValueError):
        InProcessItems(0)


def test_ray_is_not_started_when_every_item_is_done(tmp_path, small):
    ray = pytest.importorskip("ray")
    from hemlp.runtime.ray import RayItems

    if ray.is_initialized():
        ray.shutdown()
    job = _model_job(tmp_path, small)
    inputs = jobs.list_inputs(tmp_path / "in")
    jobs.run_batch(job, inputs, tmp_path / "out", executor="local", progress=False)
    t0 = time.perf_counter()
    res = jobs.run_batch(job, inputs, tmp_path / "out", executor=RayItems(num_workers=1), progress=False)
    assert sorted(res.skipped) == ["b0.ct", "b1.ct"] and not res.done
    assert not ray.is_initialized() and time.perf_counter() - t0 < 5


def test_ray_items_with_threads_per_item(tmp_path, small):
    """RayItems(threads=2): every item a task of 2 native threads holding 2 CPUs, the same output bytes as one thread
    in process."""
    pytest.importorskip("ray")
    from hemlp.runtime.ray import RayItems

    job = _model_job(tmp_path, small)
    inputs = jobs.list_inputs(tmp_path / "in")
    jobs.run_batch(job, inputs, tmp_path / "local", executor=InProcessItems(1), progress=False)
    res = jobs.run_batch(job, inputs, tmp_path / "ray", executor=RayItems(num_workers=2, threads=2), progress=False)
    assert sorted(res.done) == ["b0.ct", "b1.ct"]
    for name in res.done:
        assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "local" / name).read_bytes()
    with pytest.raises(ValueError, match="threads"):
        RayItems(threads=0)
    with pytest.raises(ValueError, match="largest node"):      # a task no node can hold: an error, not a hang
        jobs.run_batch(job, inputs, tmp_path / "ray3", executor=RayItems(num_workers=2, threads=3), progress=False)


def test_local_ray_is_reused_and_shut_down_on_sigterm(monkeypatch):
    ray = pytest.importorskip("ray")
    from hemlp.apps import cli
    from hemlp.runtime.ray import session

    if ray.is_initialized():
        ray.shutdown()
    try:
        with session.ray_session(num_workers=1):
            node = ray.get_runtime_context().get_node_id()
        assert ray.is_initialized() and session.local_session_cpus() == 1   # kept for the next call
        with session.ray_session(num_workers=1):
            assert ray.get_runtime_context().get_node_id() == node            # the same instance, not a new one
        with session.ray_session():                                           # no CPU count asked: reused too
            assert ray.get_runtime_context().get_node_id() == node

        def interrupted(args, ui):   # a batch command killed while Ray runs
            with session.ray_session(num_workers=1):
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(60)

        monkeypatch.setattr(cli, "cmd_batch", interrupted)
        rc = cli.main(["batch", "m", "-e", "k", "-i", "in", "-o", "out", "--runtime", "ray", "-q"])
        assert rc == 143 and not ray.is_initialized() and session.local_session_cpus() is None
        assert signal.getsignal(signal.SIGTERM) is not cli._terminated      # the handler is the command's only
    finally:
        session.shutdown_local()
        if ray.is_initialized():
            ray.shutdown()


def test_cli_batch_local_runtime_and_quiet(tmp_path, small):
    import subprocess
    from pathlib import Path

    _model_job(tmp_path, small)
    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(repo) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-c", "import sys; from hemlp.apps.cli import main; sys.exit(main())", "batch",
           str(tmp_path / "m"), "-e", str(tmp_path / "eval.keys"), "-i", str(tmp_path / "in"), "-o",
           str(tmp_path / "out"), "--insecure"]
    p = subprocess.run(cmd + ["--quiet"], capture_output=True, text=True, env=env, timeout=600)
    # --quiet: nothing on stderr but the test preset's security warning (hemlp warns on every use of it)
    own = [ln for ln in p.stderr.splitlines() if "INSECURE" not in ln and "Context(" not in ln]
    assert p.returncode == 0 and own == [] and "2 result(s)" in p.stdout
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0 and "in this process" in p.stderr and "resuming" in p.stderr
    p = subprocess.run(cmd + ["--runtime", "local", "--workers", "2"], capture_output=True, text=True, env=env)
    assert p.returncode == 2 and "--runtime ray" in p.stderr
