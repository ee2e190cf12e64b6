"""Progress of long work (run, encrypt, keygen, prepare, batch jobs) on stderr.

    with progress("run", total=12, verbose=None) as bar:
        bar.update(1, "conv1")

verbose=True shows it, False hides it, None (the default everywhere) shows it only when stderr is a terminal and
the process is not a test (pytest sets PYTEST_CURRENT_TEST) and HEMLP_QUIET is not set. The bar is tqdm's when
tqdm is installed (the "ml" extra), else one plain line per update, rewritten in place: progress never needs an
optional dependency.
"""
from __future__ import annotations

import os
import sys
import time

__all__ = ["progress", "Progress", "enabled", "StepTimings"]


def enabled(verbose: bool | None) -> bool:
    if verbose is not None:
        return bool(verbose)
    if os.environ.get("HEMLP_QUIET") or os.environ.get("PYTEST_CURRENT_TEST"):
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):   # closed or replaced stderr
        return False


class Progress:
    """A progress bar over `total` units (None: unknown), silent when not enabled."""

    def __init__(self, desc: str, total: int | None = None, verbose: bool | None = None, unit: str = "step",
                 initial: int = 0):
        self.desc, self.total, self.unit, self.n = desc, total, unit, int(initial)
        self.on = enabled(verbose)
        self.t0 = time.perf_counter()
        self._bar = None
        self._last = 0.0
        if self.on:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:
                self._bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, file=sys.stderr, leave=False,
                                 mininterval=0.5, dynamic_ncols=True)

    def update(self, n: int = 1, label: str | None = None) -> None:
        self.n += n
        if not self.on:
            return
        if self._bar is not None:
            if label:
                self._bar.set_postfix_str(label, refresh=False)
            self._bar.update(n)
            return
        now = time.perf_counter()
        if now - self._last >= 0.5 or (self.total is not None and self.n >= self.total):
            self._last = now
            of = f"/{self.total}" if self.total is not None else ""
            sys.stderr.write(f"\r{self.desc}: {self.n}{of} {self.unit}s {now - self.t0:.1f} s"
                             + (f" ({label})" if label else "") + "\033[K")
            sys.stderr.flush()

    def close(self) -> None:
        if not self.on:
            return
        if self._bar is not None:
            self._bar.close()
        else:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
        self.on = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def progress(desc: str, total: int | None = None, verbose: bool | None = None, unit: str = "step",
             initial: int = 0) -> Progress:
    return Progress(desc, total, verbose, unit, initial)


class StepTimings(dict):
    """The ``timings`` dict a layout's run() fills with each step's seconds, advancing a progress bar as it does
    (so every layout reports per-layer progress without knowing about progress bars)."""

    def __init__(self, bar: Progress):
        super().__init__()
        self.bar = bar

    def __setitem__(self, step, seconds):
        new = step not in self
        super().__setitem__(step, seconds)
        self.bar.update(1 if new else 0, str(step))
