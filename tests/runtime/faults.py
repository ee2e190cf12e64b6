"""Worker deaths for the Ray tests, injected from outside the production code.

``ray_init(marker)`` starts a local Ray whose workers run ``install`` at start-up (Ray's
``worker_process_setup_hook``): it wraps the runtime's task functions in that worker so that, once the test deletes
the marker file, the first task to start re-creates it and kills its worker (``os._exit``), as an OOM kill or a
lost node would. Ray pickles module-level task functions by reference, so a worker runs the wrapped function it
finds in its own module. The hook is pickled by value (a function made here at call time), so the workers need
not import this test module.
"""
from __future__ import annotations

#: the environment variable naming the marker file in the workers
MARKER_ENV = "HEMLP_TEST_FAULT_MARKER"
#: every Ray task body of the runtime (module, function name)
TASKS = [("hemlp.runtime.ray.batch", "process_item"), ("hemlp.runtime.ray.pcmm", "_block_product"),
         ("hemlp.runtime.ray.pcmm", "_add_mod"), ("hemlp.runtime.ray.tasks", "elementwise_task"),
         ("hemlp.runtime.ray.tasks", "group_task")]


def make_hook(tasks):
    def install():
        import functools
        import importlib
        import os as _os  # the worker's own imports: the hook is pickled by value

        def die_once():
            marker = _os.environ.get(MARKER_ENV)
            if not marker:
                return
            try:
                fd = _os.open(marker, _os.O_CREAT | _os.O_EXCL | _os.O_WRONLY)
            except FileExistsError:
                return
            _os.write(fd, str(_os.getpid()).encode())
            _os.close(fd)
            _os._exit(17)  # a hard worker death

        for mod_name, fn_name in tasks:
            mod = importlib.import_module(mod_name)
            fn = getattr(mod, fn_name)

            @functools.wraps(fn)
            def wrapped(*a, __fn=fn, **kw):
                die_once()
                return __fn(*a, **kw)

            setattr(mod, fn_name, wrapped)

    return install


def ray_init(marker) -> None:
    """A local Ray (2 CPUs, never another Ray on the machine) whose workers die once when `marker` is deleted."""
    import ray

    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {MARKER_ENV: str(marker)}, "worker_process_setup_hook": make_hook(list(TASKS))})

