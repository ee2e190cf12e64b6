"""Resumable batch jobs: outputs exactly once, failures reported, restarts skip finished items."""
import errno
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from hemlp import pcmm
from hemlp.errors import InsecureParametersError
from hemlp.runtime import jobs as batch
from tests.conftest import make_ctx
from tests.runtime import faults

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Five CtMatrix inputs, one corrupted file, weights and bias."""
    d = tmp_path_factory.mktemp("batch")
    ctx = make_ctx("test-N10")
    sk, _ = ctx.keygen()
    rng = np.random.default_rng(3)
    (d / "in").mkdir()
    Ms = {}
    for i in range(5):
        Ms[f"x{i}.ct"] = rng.uniform(-1, 1, (4, 20))
        pcmm.encrypt_matrix(ctx, Ms[f"x{i}.ct"], sk, level=2).save(d / "in" / f"x{i}.ct")
    good = (d / "in" / "x0.ct").read_bytes()
    (d / "in" / "x9_corrupt.ct").write_bytes(good[: len(good) // 2])  # truncated mid-file
    W, b = rng.normal(size=(3, 4)), rng.normal(size=3)
    np.save(d / "W.npy", W)
    np.save(d / "b.npy", b)
    return dict(dir=d, ctx=ctx, sk=sk, Ms=Ms, W=W, b=b)


def job(data, **kw):
    return batch.WeightsJob.from_files(data["dir"] / "W.npy", bias=data["dir"] / "b.npy", preset="test-N10",
                                       allow_insecure=True, **kw)


def check_outputs(data, out: Path, names):
    files = sorted(p.name for p in out.iterdir())
    assert files == sorted(list(names) + [batch.MANIFEST]), "every item exactly once, no temp files"
    ctx = data["ctx"]
    for n in names:
        C = pcmm.CtMatrix.load(data["dir"] / "in" / n, ctx)
        want = pcmm.pcmm(data["W"], C, bias=data["b"]).to_bytes()
        assert (out / n).read_bytes() == want  # PCMM is deterministic: byte-identical to in-process


GOOD = [f"x{i}.ct" for i in range(5)]


@pytest.fixture(scope="module")
def ray_local(tmp_path_factory):
    """One local Ray for this module; workers die once when the returned marker file is deleted."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()
    marker = tmp_path_factory.mktemp("fault") / "died"
    marker.write_text("armed only when deleted")
    faults.ray_init(marker)
    yield marker
    ray.shutdown()


def test_ray_job_reports_corrupted_item_and_resumes(data, tmp_path, ray_local):
    inputs = batch.list_inputs(data["dir"] / "in")
    out = tmp_path / "out"
    res = batch.run_batch(job(data), inputs, out, retries=1, progress=False)
    assert sorted(res.done) == GOOD and list(res.failed) == ["x9_corrupt.ct"]
    assert "SerializationError" in res.failed["x9_corrupt.ct"] and "truncated" in res.failed["x9_corrupt.ct"]
    check_outputs(data, out, GOOD)
    m = json.loads((out / batch.MANIFEST).read_text())["items"]
    assert m["x9_corrupt.ct"]["status"] == "failed" and m["x9_corrupt.ct"]["attempts"] == 1  # deterministic
    assert all(m[n]["status"] == "done" for n in GOOD)
    # a second run skips the finished items and retries (then reports) the failed one again
    res2 = batch.run_batch(job(data), inputs, out, retries=0, executor="local", progress=False)
    assert sorted(res2.skipped) == GOOD and res2.done == [] and list(res2.failed) == ["x9_corrupt.ct"]


def test_ray_worker_killed_mid_job(data, tmp_path, ray_local):
    inputs = batch.list_inputs(data["dir"] / "in", "x[0-4].ct")
    ray_local.unlink()  # the next task's worker os._exit()s; Ray re-runs the (pure) task elsewhere
    res = batch.run_batch(job(data), inputs, tmp_path / "out", retries=0, progress=False)
    assert ray_local.exists(), "no worker died: the fault was not injected"
    assert sorted(res.done) == GOOD and not res.failed
    check_outputs(data, tmp_path / "out", GOOD)


def test_interrupted_then_resumed_exactly_once(data, tmp_path):
    inputs = batch.list_inputs(data["dir"] / "in", "x[0-4].ct")
    real = job(data)
    calls = []

    def flaky(blob):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt  # the operator's Ctrl-C (or a kill) in the middle of item 3
        return real.process(blob)

    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        batch.run_batch(batch.CallableJob(flaky, real.key), inputs, out, executor="local", progress=False)
    assert sorted(p.name for p in out.glob("x*.ct")) == ["x0.ct", "x1.ct"]
    # what a kill during a write leaves: a stale temp file, and an output the manifest does not know
    (out / f"{batch.TMP_TAG}x2.ct.999.dead").write_bytes(b"partial")
    (out / "x3.ct").write_bytes(b"half-written by a dead run")
    res = batch.run_batch(real, inputs, out, executor="local", progress=False)
    assert sorted(res.skipped) == ["x0.ct", "x1.ct"] and sorted(res.done) == ["x2.ct", "x3.ct", "x4.ct"]
    assert res.stale_removed == [f"{batch.TMP_TAG}x2.ct.999.dead"] and res.summary()["stale_removed"] == 1
    check_outputs(data, out, GOOD)


def test_resume_redoes_damaged_outputs(data, tmp_path):
    """Resume checks every finished output against the SHA-256 in the manifest: a truncated, an altered and a
    deleted output are redone (with a warning naming them), the intact ones skipped."""
    inputs = batch.list_inputs(data["dir"] / "in", "x[0-4].ct")
    out = tmp_path / "out"
    assert sorted(batch.run_batch(job(data), inputs, out, executor="local", progress=False).done) == GOOD
    blob = (out / "x1.ct").read_bytes()
    (out / "x1.ct").write_bytes(blob[: len(blob) - 100])            # truncated
    flipped = bytearray((out / "x3.ct").read_bytes())
    flipped[len(flipped) // 2] ^= 1                                    # one bit altered, same length
    (out / "x3.ct").write_bytes(bytes(flipped))
    (out / "x4.ct").unlink()                                           # gone
    with pytest.warns(batch.DamagedOutputWarning, match="x1.ct.*truncated"):
        res = batch.run_batch(job(data), inputs, out, executor="local", progress=False)
    assert sorted(res.done) == ["x1.ct", "x3.ct", "x4.ct"] and sorted(res.skipped) == ["x0.ct", "x2.ct"]
    assert sorted(res.redone) == ["x1.ct", "x3.ct", "x4.ct"] and "differs" in res.redone["x3.ct"]
    check_outputs(data, out, GOOD)
    with warnings.catch_warnings():
        warnings.simplefilter("error", batch.DamagedOutputWarning)  # intact now: no warning, nothing redone
        res = batch.run_batch(job(data), inputs, out, executor="local", progress=False)
    assert sorted(res.skipped) == GOOD and not res.redone


def test_second_job_on_the_same_directory_is_refused(data, tmp_path):
    """A job holds an flock on its output directory: a second job there (here started from inside the first
    one's item, so both run at once) gets BatchJobLockedError; after the first ends, the directory is free."""
    inputs = batch.list_inputs(data["dir"] / "in", "x[0-1].ct")
    out = tmp_path / "out"
    real = job(data)
    seen = []

    def nested(blob):
        if not seen:
            with pytest.raises(batch.BatchJobLockedError, match="another batch job is running"):
                batch.run_batch(real, inputs, out, executor="local", progress=False)
            seen.append("refused")
        return real.process(blob)

    res = batch.run_batch(batch.CallableJob(nested, real.key), inputs, out, executor="local", progress=False)
    assert seen == ["refused"] and sorted(res.done) == GOOD[:2]
    assert sorted(batch.run_batch(real, inputs, out, executor="local", progress=False).skipped) == GOOD[:2]


def test_second_process_on_the_same_directory_is_refused(data, tmp_path):
    """The same across processes (flock is per open file description): a child holding the lock blocks us."""
    import subprocess

    out = tmp_path / "out"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY);"
                               " fcntl.flock(fd, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(60)", str(out)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(batch.BatchJobLockedError):
            batch.run_batch(job(data), batch.list_inputs(data["dir"] / "in", "x0.ct"), out, executor="local",
                            progress=False)
    finally:
        holder.kill()
        holder.wait()
    assert batch.run_batch(job(data), batch.list_inputs(data["dir"] / "in", "x0.ct"), out, executor="local",
                           progress=False).done == ["x0.ct"]


@pytest.mark.parametrize("exc, calls", [(batch.ShapeError("the input has 5 rows, the weights want 4"), 1),
                                        (RuntimeError("worker lost"), 3)])
def test_deterministic_failures_are_not_retried(tmp_path, exc, calls):
    """A typed hemlp error gives the same result on every attempt: one attempt, recorded; an untyped failure
    uses the retries (here 2: three attempts)."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.ct").write_bytes(b"x")
    seen = []

    def fails(blob):
        seen.append(1)
        raise exc

    res = batch.run_batch(batch.CallableJob(fails, "always-fails"), batch.list_inputs(tmp_path / "in"),
                          tmp_path / "out", executor="local", retries=2, progress=False)
    assert len(seen) == calls and list(res.failed) == ["a.ct"] and type(exc).__name__ in res.failed["a.ct"]
    m = json.loads((tmp_path / "out" / batch.MANIFEST).read_text())["items"]
    assert m["a.ct"]["attempts"] == calls
    # a failure another attempt may pass (a lost worker or node) names the fix: rerun the job; a typed one does not
    assert (batch.RESUME_HINT in m["a.ct"]["error"]) == (calls > 1)
    with pytest.raises(batch.BatchItemsFailedError, match="1 of 1 items failed.*a.ct.*rerun the same job"):
        res.raise_failed()


def test_an_executor_that_stops_names_the_resume(data, tmp_path):
    """An executor that stops in the middle (here: the cluster connection lost after two items) ends the job with
    BatchJobInterruptedError naming the fix (its cause chained); running the same job again resumes it: the two
    finished items are skipped, the rest run, every output as in an uninterrupted run."""
    class LosesTheCluster:
        def run(self, job, todo, retries, read, done, failed):
            for k, path in enumerate(todo):
                if k == 2:
                    raise ConnectionError("lost the connection to the cluster's head")
                done(path, job.process(read(path)), 1)

    inputs = batch.list_inputs(data["dir"] / "in", "x[0-4].ct")
    out = tmp_path / "out"
    with pytest.raises(batch.BatchJobInterruptedError, match="3 of 5 items not run.*ConnectionError.*2 finished "
                       "outputs.*rerun the same job") as e:
        batch.run_batch(job(data), inputs, out, executor=LosesTheCluster(), progress=False)
    assert isinstance(e.value.__cause__, ConnectionError)
    res = batch.run_batch(job(data), inputs, out, executor="local", progress=False)
    assert sorted(res.skipped) == GOOD[:2] and sorted(res.done) == GOOD[2:]
    check_outputs(data, out, GOOD)


def test_any_executor_runs_the_same_job(data, tmp_path):
    """run_batch takes any object with run(job, todo, retries, read, done, failed): the manifest, the atomic
    outputs and the resumption are the job machinery's, whatever runs the items (here: last item first, and a
    corrupted input reported through failed())."""
    seen = []

    class LastFirst:
        def run(self, job, todo, retries, read, done, failed):
            for path in reversed(todo):
                seen.append(path.name)
                try:
                    out = job.process(read(path))
                except Exception as exc:  # noqa: BLE001
                    failed(path, exc, 1)
                else:
                    done(path, out, 1)

    inputs = batch.list_inputs(data["dir"] / "in")
    out = tmp_path / "out"
    res = batch.run_batch(job(data), inputs, out, executor=LastFirst(), progress=False)
    assert seen == [p.name for p in reversed(inputs)]
    assert sorted(res.done) == GOOD and list(res.failed) == ["x9_corrupt.ct"]
    m = json.loads((out / batch.MANIFEST).read_text())["items"]
    assert m["x9_corrupt.ct"]["status"] == "failed" and "SerializationError" in m["x9_corrupt.ct"]["error"]
    res2 = batch.run_batch(job(data), inputs, out, executor=batch.LocalItems(), retries=0, progress=False)
    assert sorted(res2.skipped) == GOOD and list(res2.failed) == ["x9_corrupt.ct"]  # only the failed item again
    check_outputs(data, out, GOOD)
    with pytest.raises(ValueError, match="executor"):
        batch.run_batch(job(data), inputs, out, executor="gpu", progress=False)


def test_limit_then_resume_and_job_mismatch(data, tmp_path):
    inputs = batch.list_inputs(data["dir"] / "in", "x[0-4].ct")
    out = tmp_path / "out"
    r1 = batch.run_batch(job(data), inputs, out, executor="local", progress=False, limit=2)
    r2 = batch.run_batch(job(data), inputs, out, executor="local", progress=False)
    assert len(r1.done) == 2 and sorted(r1.done + r2.done) == GOOD and sorted(r2.skipped) == sorted(r1.done)
    with pytest.raises(batch.BatchJobMismatchError, match="another job"):
        batch.run_batch(job(data, weight_bits=12), inputs, out, executor="local", progress=False)
    r3 = batch.run_batch(job(data, weight_bits=12), inputs, out, executor="local", progress=False, restart=True)
    assert sorted(r3.done) == GOOD


def test_output_errors_are_clear(data, tmp_path, monkeypatch):
    inputs = batch.list_inputs(data["dir"] / "in", "x[0-4].ct")
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    with pytest.raises(batch.BatchOutputError, match="cannot write to the output directory"):
        batch.run_batch(job(data), inputs, blocker / "out", executor="local", progress=False)
    out = tmp_path / "out"
    real_write = batch.write_atomic
    written = []

    def disk_fills_up(path, blob, tmp_prefix=""):
        if path.name.startswith("x"):
            if written:
                raise OSError(errno.ENOSPC, "No space left on device")
            written.append(path.name)
        real_write(path, blob, tmp_prefix)

    monkeypatch.setattr(batch, "write_atomic", disk_fills_up)
    with pytest.raises(batch.BatchOutputError, match="disk is full") as ei:
        batch.run_batch(job(data), inputs, out, executor="local", progress=False)
    assert ei.value.errno == errno.ENOSPC
    monkeypatch.setattr(batch, "write_atomic", real_write)
    res = batch.run_batch(job(data), inputs, out, executor="local", progress=False)
    assert res.skipped == written and len(res.done) == 4
    check_outputs(data, out, GOOD)


def test_manifest_file_inputs(data, tmp_path):
    (tmp_path / "list.txt").write_text("# inputs\n" + "\n".join(str(data["dir"] / "in" / n) for n in GOOD[:2]) + "\n")
    assert [p.name for p in batch.list_inputs(tmp_path / "list.txt")] == GOOD[:2]
    (tmp_path / "list.json").write_text(json.dumps({"inputs": [str(data["dir"] / "in" / "x0.ct")] * 2}))
    with pytest.raises(Exception, match="share file names"):
        batch.list_inputs(tmp_path / "list.json")


def test_script_weights_mode(data, tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import ray_batch_infer as script
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    out = tmp_path / "out"
    argv = [str(data["dir"] / "in"), "-o", str(out), "--weights", str(data["dir"] / "W.npy"), "--bias",
            str(data["dir"] / "b.npy"), "--preset", "test-N10", "--allow-insecure", "--local", "--no-progress",
            "--retries", "0", "--json", str(tmp_path / "s.json")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert script.main(argv) == 1  # one item failed: reported, not dropped
        text = capsys.readouterr().out
        assert "FAILED x9_corrupt.ct" in text and "5 done" in text
        assert json.loads((tmp_path / "s.json").read_text())["done"] == 5
        check_outputs(data, out, GOOD)
        assert script.main(argv[:-2] + ["--pattern", "x[0-4].ct"]) == 0  # resumed: nothing left to do
        assert "0 done, 5 already done, 0 failed" in capsys.readouterr().out


def test_model_mode_on_ray(tmp_path, monkeypatch, ray_local):
    torch = pytest.importorskip("torch")
    import hemlp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Linear(5, 3)).eval()
        x = np.random.default_rng(0).normal(size=(4, 6))
        cm = hemlp.compile(net, x, batch_size=4, allow_insecure=True)
        cm.save(tmp_path / "model")
        sk, ek = cm.keygen()
        ek.save(tmp_path / "eval.keys")
        (tmp_path / "in").mkdir()
        for i in range(2):
            cm.encrypt(x + i, sk).save(tmp_path / "in" / f"b{i}.ct")
        outs = batch.run_model_batch(tmp_path / "model", tmp_path / "eval.keys", batch.list_inputs(tmp_path / "in"),
                                     tmp_path / "out", progress=False, allow_insecure=True)
        for i, p in enumerate(outs):
            y = cm.decrypt(cm.load_encrypted(p), sk)
            assert np.max(np.abs(y - cm.simulate(x + i))) < 1e-5
    # the loader's policy, not the directory's: the same directory is refused without the caller's opt-in
    with pytest.raises(InsecureParametersError, match="below this client's 128-bit security policy"):
        batch.ModelJob.from_paths(tmp_path / "model", tmp_path / "eval.keys")
