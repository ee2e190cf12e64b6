"""Typed dataset errors (hemlp.datasets.errors)."""
from __future__ import annotations

from pathlib import Path

from hemlp.errors import HemlpError

__all__ = ["DatasetNotFoundError", "DatasetCorruptError"]


class DatasetNotFoundError(HemlpError, FileNotFoundError):
    """Dataset files are missing. hemlp never downloads at run time; the message lists the exact
    files expected, which of them are missing, and where to get them."""

    def __init__(self, name: str, root, expected, missing, how_to_get: str):
        self.name, self.root = name, Path(root)
        self.expected = [Path(p) for p in expected]
        self.missing = [Path(p) for p in missing]
        lines = [f"{name}: {len(self.missing)} of {len(self.expected)} expected files missing under {self.root}",
                 "expected files (missing ones marked):"]
        miss = set(self.missing)
        for p in self.expected:
            lines.append(f"  {'MISSING ' if p in miss else 'ok      '}{p}")
        lines.append(how_to_get)
        msg = "\n".join(lines)
        # keep FileNotFoundError's errno/filename slots meaningful for callers that inspect them
        super().__init__(2, msg, str(self.missing[0]) if self.missing else str(self.root))
        self.message = msg

    def __str__(self):
        return self.message


class DatasetCorruptError(HemlpError, ValueError):
    """Dataset files exist but are truncated, corrupted or not in the expected format."""
