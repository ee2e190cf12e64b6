"""Shared by the serving tests: two small compiled models (insecure test preset) saved as server and client
artefacts, and one Ray Serve deployment with two replicas for the tests that need it (started once: Ray's start
is the slow part)."""
import socket
import warnings

import numpy as np
import pytest

import hemlp
from hemlp.serving import ModelService


def compile_mlp(seed, classes=3):
    import torch

    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, classes)).eval()
    x = np.random.default_rng(seed).normal(size=(300, 16))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return hemlp.compile(m, x[:1], calibration=x, batch_size=4, allow_insecure=True, preset="test-N12-d18"), x


@pytest.fixture(scope="package")
def served(tmp_path_factory):
    """(the compiled model, inputs, a directory with its server/ and client/ artefacts, another model)."""
    pytest.importorskip("torch")
    d = tmp_path_factory.mktemp("serve")
    cm, x = compile_mlp(0)
    cm.save(d / "server")
    cm.save(d / "client", client=True)
    other, _ = compile_mlp(1, classes=4)
    return cm, x, d, other


def make_service(d, **kw):
    return ModelService(d / "server", allow_insecure=True, **kw)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="package")
def ray_serve_urls(served):
    """The served model on Ray Serve, two replicas, a local Ray of 2 CPUs: (the URL of Ray's HTTP proxy, the
    replicas' shared direct port); shut down after the package's tests."""
    pytest.importorskip("ray.serve")
    import ray
    from ray import serve as ray_serve

    from hemlp.serving.ray_serve import serve

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    direct = free_port()
    try:
        yield (serve(served[2] / "server", port=free_port(), replicas=2, allow_insecure=True, blocking=False,
                     direct_port=direct), f"http://127.0.0.1:{direct}")
    finally:
        ray_serve.shutdown()
        ray.shutdown()


@pytest.fixture(scope="package")
def ray_serve_url(ray_serve_urls):
    """The Ray Serve deployment's URL through Ray's HTTP proxy."""
    return ray_serve_urls[0]
