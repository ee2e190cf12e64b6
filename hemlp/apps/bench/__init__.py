"""hemlp benchmarks: ``python -m hemlp.bench SUBCOMMAND ...``.

A subcommand is a module ``hemlp/apps/bench/<name>.py`` that defines::

    def add_arguments(parser: argparse.ArgumentParser) -> None: ...
    def main(args: argparse.Namespace) -> int: ...

and, optionally, ``HELP = "one line"`` (else its docstring's first line is used).  Nothing needs
registering: ``__main__`` finds every such module (``core`` today; ``pcmm``, ``infer``, ``ray``
later).  Shared helpers: :func:`measure` here, table/JSON/machine info in :mod:`hemlp.apps.bench.report`.
"""
from __future__ import annotations

import ast
import pkgutil
import statistics
import time
from contextlib import contextmanager
from pathlib import Path

#: modules in this package that are helpers, not subcommands
_NOT_SUBCOMMANDS = {"report", "__main__"}


def measure(fn, repeats: int, warmup: int = 1) -> dict:
    """Run ``fn`` ``warmup`` times untimed, then ``repeats`` times; return the median and samples.

    The result is the per-op record every subcommand writes to JSON:
    ``{"median_s", "min_s", "repeats", "samples", "cpu_median_s", "cpu_samples"}``; ``cpu_median_s`` is the median of the
    process's CPU seconds per call, which other processes on a shared machine change less than wall-clock time
    (the planner's unit costs take it from one-thread runs).
    """
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    for _ in range(warmup):
        fn()
    samples, cpu = [], []
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    # CPU seconds of the whole process (every thread): on a loaded machine the 1-thread CPU time is the robust figure
    return {"median_s": statistics.median(samples), "min_s": min(samples),
            "repeats": repeats, "samples": samples, "cpu_median_s": statistics.median(cpu), "cpu_samples": cpu}


@contextmanager
def one_thread():
    """The native core (and BLAS) at one thread inside the block, the caller's thread count restored after it:
    the planner's unit costs are one-thread figures."""
    import hemlp

    before = hemlp.get_num_threads()
    hemlp.set_num_threads(1)
    try:
        yield
    finally:
        hemlp.set_num_threads(before)


def int_list(s: str) -> list[int]:
    """A --threads style argument: comma-separated positive integers (SystemExit with the reason otherwise)."""
    try:
        vals = [int(v) for v in s.split(",") if v.strip()]
    except ValueError:
        raise SystemExit(f"expected comma-separated integers, got {s!r}") from None
    if not vals or any(v < 1 for v in vals):
        raise SystemExit(f"expected positive integers, got {s!r}")
    return vals


def subcommands() -> dict[str, str]:
    """``{name: one-line help}`` of every subcommand module, found without importing them."""
    here = Path(__file__).parent
    found = {}
    for mod in pkgutil.iter_modules([str(here)]):
        if mod.name in _NOT_SUBCOMMANDS or mod.name.startswith("_"):
            continue
        src_path = here / (mod.name + ".py")
        helptext = ""
        try:
            tree = ast.parse(src_path.read_text())
        except (OSError, SyntaxError):
            tree = None
        if tree is not None:
            names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
            if not {"add_arguments", "main"} <= names:
                continue
            for n in tree.body:
                if (isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "HELP" for t in n.targets)
                        and isinstance(n.value, ast.Constant)):
                    helptext = str(n.value.value)
            if not helptext:
                doc = ast.get_docstring(tree) or ""
                helptext = doc.strip().splitlines()[0] if doc.strip() else ""
        found[mod.name] = helptext
    return dict(sorted(found.items()))


def square_mlp(dims):
    """The benchmarks' MLP: Linear layers of widths `dims` with x² between them (seeded weights), in eval mode."""
    import torch

    from hemlp.models.layers import activation

    torch.manual_seed(0)
    layers = []
    for i in range(len(dims) - 1):
        layers.append(torch.nn.Linear(dims[i], dims[i + 1]))
        if i < len(dims) - 2:
            layers.append(activation("square"))
    return torch.nn.Sequential(*layers).eval()
