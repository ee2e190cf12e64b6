"""What hemlp's options objects share (CompileOptions, RunOptions, RayOptions): frozen dataclasses whose fields each
carry a default and a one-line description (``help()`` lists them), replaced by name with ``merged()``."""
from __future__ import annotations

from dataclasses import MISSING, field, fields, replace

from hemlp.errors import OptionError

__all__ = ["Options", "option"]


def option(default, doc: str):
    """A field with its default and its description (what help() prints)."""
    return field(default=default, metadata={"doc": doc})


class Options:
    """Base of the options dataclasses: names, defaults, help, merged, as_dict."""

    @classmethod
    def names(cls) -> tuple:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def defaults(cls) -> dict:
        return {f.name: f.default for f in fields(cls) if f.default is not MISSING}

    @classmethod
    def help(cls) -> str:
        """Every field with its default and description, one a line."""
        return "\n".join(f"{f.name} (default {f.default!r}): {f.metadata['doc']}" for f in fields(cls))

    def merged(self, **overrides):
        """These options with some replaced; an unknown name is an OptionError (a TypeError) listing the valid
        ones."""
        bad = sorted(set(overrides) - set(self.names()))
        if bad:
            raise OptionError(f"unknown option(s) {bad}; valid options: {sorted(self.names())}")
        return replace(self, **overrides)

    def as_dict(self) -> dict:
        """{name: value}, values as given (not copied: a calibration set can be large, a stats dict is filled)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}
