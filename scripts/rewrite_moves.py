"""Rewrite hemlp import paths after the package moves listed in MOVES.txt (issue #15), for the branches that merge
after them: ``python scripts/rewrite_moves.py [--moves MOVES.txt] FILE...`` (Python, Markdown, Makefile, ...).

What it rewrites, for every line ``old.module -> new.module`` of MOVES.txt:
- ``from P import a, b as c`` where P.a moved: split into one import per destination package (``from hemlp import
  ckks, linalg`` -> ``from hemlp import linalg`` + ``from hemlp.fhe import ckks``); a module renamed without an alias
  (polyeval -> polynomial) has its uses ``polyeval.`` renamed in that file;
- dotted paths anywhere (imports, strings, docstrings, monkeypatch targets): ``hemlp.ckks`` -> ``hemlp.fhe.ckks``;
- file paths: ``hemlp/ckks.py`` -> ``hemlp/fhe/ckks.py``, ``tests/core/`` -> ``tests/fhe/``.
Idempotent (a new path never matches an old one; checked on the whole tree). Review the diff: depth-based paths (``Path(__file__).parents[k]``)
of moved files are not touched.
"""
from __future__ import annotations

import argparse
import re
from pathlib import Path


def read_moves(path: Path) -> tuple[dict[str, str], set[str]]:
    """{old: new} and the old names marked [imports-only] (rewritten in imports and dotted submodule paths, not in
    command lines such as ``python -m hemlp.bench``)."""
    moves, imports_only = {}, set()
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "->" not in line:
            continue
        old, rest = (s.strip() for s in line.split("->", 1))
        moves[old] = rest.split()[0]
        if "[imports-only]" in rest:
            imports_only.add(old)
    return moves, imports_only


def _split(dotted: str) -> tuple[str, str]:
    pkg, _, name = dotted.rpartition(".")
    return pkg, name


class Rewriter:
    def __init__(self, moves: dict[str, str], imports_only: set[str] = frozenset()):
        self.moves = dict(sorted(moves.items(), key=lambda kv: -len(kv[0])))   # longest first
        self.from_map = {_split(o): _split(n) for o, n in self.moves.items()}
        self.from_re = re.compile(
            r"^(?P<ind>[ \t]*)from (?P<pkg>[\w.]+) import (?P<names>[^(\n#]+?)(?P<tail>[ \t]*(#.*)?)$", re.M)
        self.dotted = [(re.compile(rf"(?<![\w.]){re.escape(o)}" + (r"(?=\.\w|\s+import\b)" if o in imports_only
                                                                   else r"\b(?!\.py)")), n)
                       for o, n in self.moves.items()]
        self.paths = []
        for o, n in self.moves.items():
            po, pn = o.replace(".", "/"), n.replace(".", "/")
            self.paths.append((re.compile(rf"(?<![\w./]){re.escape(po)}\.py\b"), pn + ".py"))
            keep = r"(?!__main__)" if o in imports_only else ""     # hemlp/bench/__main__.py stays
            self.paths.append((re.compile(rf"(?<![\w./]){re.escape(po)}/{keep}"), pn + "/"))

    def _module(self, dotted: str) -> str:
        """Where a (possibly moved) package now lives: hemlp.bench -> hemlp.apps.bench."""
        for old, new in self.moves.items():
            if dotted == old or dotted.startswith(old + "."):
                return new + dotted[len(old):]
        return dotted

    def _from(self, m: re.Match, renames: dict[str, str]) -> str:
        pkg, groups = m["pkg"], {}
        for item in m["names"].split(","):
            item = item.strip()
            if not item:
                continue
            name, _, alias = (s.strip() for s in item.partition(" as "))
            npkg, nname = self.from_map.get((pkg, name), (self._module(pkg), name))
            if nname != name and not alias:
                renames[name] = nname
            groups.setdefault(npkg, []).append(nname + (f" as {alias}" if alias else ""))
        if list(groups) == [pkg]:
            return m.group(0)
        return "\n".join(f"{m['ind']}from {p} import {', '.join(ns)}" + (m["tail"] if i == 0 else "")
                         for i, (p, ns) in enumerate(sorted(groups.items())))

    def __call__(self, text: str) -> str:
        renames: dict[str, str] = {}
        text = self.from_re.sub(lambda m: self._from(m, renames), text)
        for old, new in renames.items():
            text = re.sub(rf"(?<![\w.]){old}\.", f"{new}.", text)
        for pat, rep in self.dotted + self.paths:
            text = pat.sub(rep, text)
        return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--moves", type=Path, default=Path(__file__).resolve().parent.parent / "MOVES.txt")
    ap.add_argument("files", nargs="+", type=Path)
    args = ap.parse_args(argv)
    rw = Rewriter(*read_moves(args.moves))
    for f in args.files:
        if f.resolve() in (Path(__file__).resolve(), args.moves.resolve()):
            continue                                                  # their examples name the old paths
        try:
            text = f.read_text()
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
            continue
        new = rw(text)
        if new != text:
            f.write_text(new)
            print(f"rewrote {f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
