"""Bootstrapped layout (P) plans on Ray (issue #18 item 2): compile(..., layout="packed", bootstrap=True) run with
runtime="ray" as the request's sample groups, one task each, and as a batch job of request files (RayItems), both
bit-identical to runtime="local". The model and its keys (bootstrapping keys included) are put in the object store
once per run and decoded once per worker process, in place from the store. test-N10-boot only (seconds)."""
import warnings

import numpy as np
import pytest

ray = pytest.importorskip("ray")
torch = pytest.importorskip("torch")

import hemlp  # noqa: E402
from hemlp.runtime import jobs  # noqa: E402
from hemlp.runtime.artifacts import EvalKeys  # noqa: E402
from hemlp.runtime.ray.requests import ModelShipment  # noqa: E402


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # insecure test presets, calibration on few samples
        yield


def mlp():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(64, 16), torch.nn.SiLU(), torch.nn.Linear(16, 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, 3))


@pytest.fixture(scope="module")
def boot_packed():
    """64 features in 512 slots: 8 samples per group, a batch of 32 = 4 groups; 2 bootstrap points."""
    rng = np.random.default_rng(11)
    cal = rng.uniform(-1, 1, (64, 64))
    x = rng.uniform(-0.9, 0.9, (32, 64)) + rng.uniform(-0.1, 0.2, 64)    # asymmetric per feature
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cm = hemlp.compile(mlp(), cal, batch_size=32, bootstrap=True, allow_insecure=True, activation_degree=3,
                           layout="packed", preset="test-N10-boot")
        sk, ek = cm.keygen()
    return cm, x, sk, ek


def same(a, b) -> bool:
    A, B = a.ctm, b.ctm
    return A.shape == B.shape and len(A.cts) == len(B.cts) and all(
        p.to_bytes() == q.to_bytes() for p, q in zip(A.cts, B.cts))


def test_bootstrapped_packed_groups_bit_identical(local_ray, boot_packed):
    cm, x, sk, ek = boot_packed
    prog = cm.layout_impl.program
    assert cm.layout == "packed" and prog.b == 8 and prog.groups == 4
    assert sum(s.op == "bootstrap" for s in cm.steps) >= 2 and ek.bootstrap_keys is not None
    ct = cm.encrypt(x, sk)
    ref = cm.run(ct, ek)
    st: dict = {}
    out = cm.run(ct, ek, runtime="ray", num_workers=2, stats=st)
    assert same(ref, out)                          # ciphertext bytes, not only the decryption
    assert st["groups"] == 4 and len(st["tasks"]) == 4
    assert 1 <= len(st["processes"]) <= 2          # SPREAD over the two workers (2 when both have started)
    # the keys (bootstrapping keys included) are shipped in the one object put per run, decoded once per process
    assert st["shipment_bytes"] > len(EvalKeys(cm.model_id, ek.relin_key, ek.galois_keys).to_bytes())
    loads = sum(t["model_loaded"] for t in st["tasks"])
    assert 1 <= loads <= len(st["processes"])
    assert set(out.layer_seconds) == set(ref.layer_seconds)
    y, sim = cm.decrypt(out, sk), cm.simulate(x)
    assert np.array_equal(y.argmax(1), sim.argmax(1)) and np.max(np.abs(y - sim)) < 2.0 ** -12

    # a second request with the same model and keys: a process that has them loaded does not load them again
    st2: dict = {}
    out2 = cm.run(cm.encrypt(x[::-1].copy(), sk), ek, runtime="ray", num_workers=2, stats=st2)
    warm = set(st["processes"])
    assert not any(t["model_loaded"] for t in st2["tasks"] if t["pid"] in warm)
    assert np.max(np.abs(cm.decrypt(out2, sk) - sim[::-1])) < 2.0 ** -12


def test_shipment_keys_read_in_place_from_the_store(local_ray, boot_packed):
    """The keys travel as one uint8 array that Ray keeps out of band: a worker's copy is a read-only view of the
    store (zero-copy), and the shipment it loads gives the same keys."""
    cm, _, _, ek = boot_packed
    ship = ModelShipment.of(cm, hemlp.load, ek)
    assert bytes(ship.keys) == ek.to_bytes(cm.context)

    @ray.remote
    def probe(holder):
        s = ray.get(holder[0])
        compiled, keys = s.load()
        return (not s.keys.flags.writeable, keys.to_bytes(compiled.context) == bytes(s.keys),
                keys.bootstrap_keys is not None)

    in_store, equal, has_boot = ray.get(probe.remote([ray.put(ship)]))
    assert in_store and equal and has_boot
    assert ship.light().keys.size == 0 and ship.light().digest == ship.digest


def test_bootstrapped_packed_batch_job_bit_identical(local_ray, boot_packed, tmp_path):
    """`hemlp batch` / scripts/ray_batch_infer.py (RayItems, one request file per task) on a bootstrapped (P)
    model: every output file is byte-identical to the in-process run of the same request."""
    cm, x, sk, ek = boot_packed
    cm.save(tmp_path / "model")
    ek.save(tmp_path / "eval.keys", cm.context)
    (tmp_path / "in").mkdir()
    want = {}
    for i in range(3):
        ct = cm.encrypt(x[8 * i: 8 * i + 16], sk)        # 16 samples: 2 groups per request
        ct.save(tmp_path / "in" / f"r{i}.ct")
        want[f"r{i}.ct"] = cm.run(ct, ek).to_bytes()
    job = jobs.ModelJob.from_paths(tmp_path / "model", tmp_path / "eval.keys", allow_insecure=True)
    assert isinstance(job.keys, np.ndarray) and job.keys_sha
    outs = jobs.run_model_batch(tmp_path / "model", tmp_path / "eval.keys", jobs.list_inputs(tmp_path / "in"),
                                tmp_path / "out", progress=False, allow_insecure=True)
    assert sorted(p.name for p in outs) == sorted(want)
    for p in outs:
        assert p.read_bytes() == want[p.name]
    y = cm.decrypt(cm.load_encrypted(tmp_path / "out" / "r1.ct"), sk)
    assert np.max(np.abs(y - cm.simulate(x[8:24]))) < 2.0 ** -12


def test_workers_of_a_machine_map_one_copy_of_the_keys(local_ray, boot_packed, tmp_path):
    """RayOptions.shared_keys: the first worker to need a key set writes it to the machine's private folder, every
    worker maps it (one copy per machine); the same bits as in process."""
    cm, x, _, _ = boot_packed
    sk, ek = cm.keygen()            # a key set no worker has loaded yet
    folder = tmp_path / "keys"
    folder.mkdir(mode=0o700)
    ct = cm.encrypt(x, sk)
    st: dict = {}
    out = cm.run(ct, ek, runtime="ray", num_workers=2, shared_keys=str(folder), stats=st)
    assert same(cm.run(ct, ek), out)
    assert sum(t["model_loaded"] for t in st["tasks"]) >= 1
    files = sorted(folder.glob("*.keys"))
    assert len(files) == 1 and files[0].stat().st_size > ek.bootstrap_keys.memory_bytes // 2
    assert not files[0].stat().st_mode & 0o222             # read-only: replaced by rename, never rewritten


def test_batch_job_workers_map_one_copy_of_the_keys(local_ray, boot_packed, tmp_path):
    """`hemlp batch`'s ModelJob with shared_keys (as RayOptions.shared_keys): the first worker of the machine writes
    the job's evaluation keys (bootstrapping keys included) to the private folder, every worker maps that file; the
    outputs are byte-identical to a job whose workers decode their own copies (shared_keys=False) and to the
    in-process run. A value that is none of the policy's forms is a ValueError on the driver."""
    cm, x, _, _ = boot_packed
    sk, ek = cm.keygen()            # a key set no worker has loaded yet
    cm.save(tmp_path / "model")
    ek.save(tmp_path / "eval.keys", cm.context)
    (tmp_path / "in").mkdir()
    want = {}
    for i in range(2):
        ct = cm.encrypt(x[8 * i: 8 * i + 16], sk)
        ct.save(tmp_path / "in" / f"r{i}.ct")
        want[f"r{i}.ct"] = cm.run(ct, ek).to_bytes()
    folder = tmp_path / "keys"
    folder.mkdir(mode=0o700)
    inputs = jobs.list_inputs(tmp_path / "in")
    args = (tmp_path / "model", tmp_path / "eval.keys", inputs)
    shared = jobs.run_model_batch(*args, tmp_path / "shared", progress=False, allow_insecure=True,
                                  shared_keys=str(folder))
    private = jobs.run_model_batch(*args, tmp_path / "private", progress=False, allow_insecure=True,
                                   shared_keys=False)
    for a, b in zip(shared, private, strict=True):
        assert a.read_bytes() == b.read_bytes() == want[a.name]
    files = sorted(folder.glob("*.keys"))
    assert len(files) == 1 and files[0].stat().st_size > ek.bootstrap_keys.memory_bytes // 2
    assert not files[0].stat().st_mode & 0o222             # read-only: replaced by rename, never rewritten
    job = jobs.ModelJob.from_paths(tmp_path / "model", tmp_path / "eval.keys", allow_insecure=True,
                                   shared_keys=str(folder))
    assert job.key == jobs.ModelJob.from_paths(tmp_path / "model", tmp_path / "eval.keys", allow_insecure=True).key
    with pytest.raises(ValueError, match="shared_keys"):
        jobs.ModelJob.from_paths(tmp_path / "model", tmp_path / "eval.keys", allow_insecure=True, shared_keys=3)
