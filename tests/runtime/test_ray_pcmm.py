"""ray_pcmm: bit-identical to pcmm.pcmm on every grid, on two raylets, through a worker crash."""
import os
import socket

import numpy as np
import pytest

from tests.conftest import make_ctx

ray = pytest.importorskip("ray")

from hemlp import pcmm    # noqa: E402
from hemlp.runtime import ray as rr  # noqa: E402
from hemlp.runtime.ray import cost, session  # noqa: E402
from tests.runtime import faults  # noqa: E402


@pytest.fixture(scope="module")
def setup():
    ctx = make_ctx("test-N10")
    sk, _ = ctx.keygen()
    rng = np.random.default_rng(7)
    M = rng.uniform(-1, 1, (6, 1100))  # 2 slot chunks per row
    C = pcmm.encrypt_matrix(ctx, M, sk, level=2)
    U, b = rng.normal(size=(5, 6)), rng.normal(size=5)
    return ctx, sk, M, C, U, b


def same(A, B) -> bool:
    return A.shape == B.shape and A.chunks == B.chunks and all(
        a.to_bytes() == b.to_bytes() for a, b in zip(A.cts, B.cts, strict=True))


class TestLocal:
    """One local Ray for these tests; its workers carry the fault-injection marker (present = no fault)."""

    @pytest.fixture(scope="class")
    @classmethod
    def session(cls, tmp_path_factory):
        if ray.is_initialized():
            ray.shutdown()
        marker = tmp_path_factory.mktemp("fault") / "died"
        marker.write_text("armed only when deleted")
        faults.ray_init(marker)
        yield marker
        ray.shutdown()

    @pytest.mark.parametrize("grid", [None, (1, 1, 1), (2, 1, 1), (1, 2, 1), (1, 1, 2), (2, 2, 3), (5, 2, 6)])
    def test_bit_identical_grids(self, session, setup, grid):
        ctx, sk, M, C, U, b = setup
        st = {}
        got = rr.ray_pcmm(U, C, grid=grid, bias=b, stats=st)
        assert same(got, pcmm.pcmm(U, C, bias=b))
        pm, pn, pk = st["grid"]
        assert st["tasks"] == (C.level + 1) * pm * pn * (2 * pk - 1)  # leaves + tree adds
        assert st["moved_bytes"]["inputs"] == st["w3d_bytes"]["inputs"]

    def test_default_grid_is_the_planner_grid(self, session, setup):
        ctx, sk, M, C, U, b = setup
        st = {}
        rr.ray_pcmm(U, C, num_workers=2, stats=st)
        assert st["grid"] == cost.pcmm_grid(5, C.chunks, 6, 2).dims

    def test_coefficient_encoding_and_weight_bits(self, session, setup):
        ctx, sk, M, C, U, b = setup
        Cc = pcmm.encrypt_matrix(ctx, M[:, :700], sk, encoding="coeff", level=3)
        got = rr.ray_pcmm(U, Cc, grid=(2, 1, 2), weight_bits=12)
        assert same(got, pcmm.pcmm(U, Cc, weight_bits=12))
        err = pcmm.decrypt_matrix(ctx, got, sk) - U @ M[:, :700]
        assert np.max(np.abs(err)) < 1e-2

    @pytest.mark.parametrize("grid", [None, (2, 4, 1), (1, 2, 3)])
    def test_msrlwe_bit_identical(self, session, setup, grid):
        ctx, sk, M, C, U, b = setup
        msk = pcmm.multi_secret_key(ctx, 3)
        Cm = pcmm.encrypt_matrix(ctx, np.tile(M[:, :512], (1, 3)), msk, level=2)
        st = {}
        got = rr.ray_pcmm(U, Cm, grid=grid, bias=b, stats=st)
        assert got.format == "msrlwe" and same(got, pcmm.pcmm(U, Cm, bias=b))
        assert st["tasks"] == 3 * st["grid"][0] * st["grid"][1] * (2 * st["grid"][2] - 1)

    @pytest.mark.parametrize("grid", [(1, 1, 1), (2, 3, 2)])
    def test_gather_bit_identical(self, session, setup, grid):
        ctx, sk, M, C, U, b = setup
        index = np.array([[0, 5, -1], [1, -1, 2], [3, 3, 4], [-1, 0, 1]])  # padding and repeated rows
        Ug = U[:, :4]
        got = rr.ray_pcmm_gather(Ug, C, index, grid=grid, bias=b)
        assert got.shape == (15, C.shape[1]) and same(got, pcmm.pcmm_gather(Ug, C, index, bias=b))

    def test_worker_killed_mid_product(self, session, setup):
        ctx, sk, M, C, U, b = setup
        session.unlink()  # the first task to run now creates the marker and os._exit()s its worker
        got = rr.ray_pcmm(U, C, grid=(2, 1, 2), bias=b)
        assert session.exists(), "no worker died: the fault was not injected"
        assert same(got, pcmm.pcmm(U, C, bias=b))

    def test_errors(self, session, setup):
        ctx, sk, M, C, U, b = setup
        from hemlp.errors import LevelError, ShapeError

        with pytest.raises(ShapeError, match="columns must equal"):
            rr.ray_pcmm(U[:, :4], C)
        with pytest.raises(ShapeError, match="splits more"):
            rr.ray_pcmm(U, C, grid=(6, 1, 1))
        C0 = pcmm.encrypt_matrix(ctx, M[:2], sk, level=0)
        with pytest.raises(LevelError):
            rr.ray_pcmm(U[:, :2], C0)


def test_two_raylets_both_used(setup):
    from ray.cluster_utils import Cluster

    ctx, sk, M, C, U, b = setup
    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        st = {}
        got = rr.ray_pcmm(U, C, address=cluster.address, num_workers=2, grid=(2, 2, 1), bias=b, stats=st)
        assert not ray.is_initialized(), "ray_pcmm must disconnect from a cluster it joined"
        assert same(got, pcmm.pcmm(U, C, bias=b))
        assert len(st["nodes"]) == 2, f"tasks ran on {st['nodes']} only"
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()


def test_unreachable_address_fails_fast(setup):
    ctx, sk, M, C, U, b = setup
    if ray.is_initialized():
        ray.shutdown()
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(rr.RuntimeUnavailableError, match=dead) as ei:
        rr.ray_pcmm(U, C, address=dead)
    assert isinstance(ei.value, ConnectionError) and "ray start --head" in str(ei.value)
    with socket.socket() as silent:  # accepts TCP but never speaks gRPC
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        addr = f"127.0.0.1:{silent.getsockname()[1]}"
        with pytest.raises(rr.RuntimeUnavailableError, match="not a Ray cluster"):
            with rr.ray_session(addr, timeout=1.0):
                pass
    assert not ray.is_initialized()


def test_importable_without_starting_ray():
    assert not hasattr(session, "maybe_die") and os.environ.get("HEMLP_RAY_FAULT_ONCE") is None  # no fault hook
    assert cost.pcmm_grid(64, 1, 64, 2).size == 2


def test_weight_term_is_plaintext_sized():
    """stats: eq. (5)'s weight term counts the int64 weight entries the tasks read, not H-sized ciphertexts."""
    if ray.is_initialized():
        ray.shutdown()
    ctx = make_ctx("test-N10")
    sk, _ = ctx.keygen()
    rng = np.random.default_rng(1)
    C = pcmm.encrypt_matrix(ctx, rng.uniform(-1, 1, (4, 300)), sk, level=1)
    U = rng.normal(size=(3, 4))
    st = {}
    with rr.ray_session(num_workers=2):
        got = rr.ray_pcmm(U, C, grid=(1, 2, 1) if C.chunks > 1 else (3, 1, 1), stats=st)
    assert same(got, pcmm.pcmm(U, C))
    pm, pn, pk = st["grid"]
    assert st["w3d_bytes"]["weights"] == st["moved_bytes"]["weights"] == pn * (C.level + 1) * U.size * 8
    assert st["w3d_literal_bytes"]["weights"] == pn * U.size * st["ciphertext_bytes"]
