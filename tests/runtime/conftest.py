"""Fixtures shared by the Ray runtime tests."""
import pytest


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray of 2 CPUs for one test module (a module may define its own, e.g. with fault injection)."""
    ray = pytest.importorskip("ray")
    from hemlp.runtime.ray import session
    from hemlp.runtime.ray.session import LOCAL_SYSTEM_CONFIG

    session.shutdown_local()     # a local Ray an earlier test had hemlp start
    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             _system_config=LOCAL_SYSTEM_CONFIG)
    yield
    ray.shutdown()
