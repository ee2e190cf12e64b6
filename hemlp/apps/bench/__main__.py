"""``python -m hemlp.bench SUBCOMMAND [options]`` — dispatches to ``hemlp.apps.bench.<SUBCOMMAND>``.

Only the chosen subcommand's module is imported, so one subcommand that cannot load (e.g. its
optional dependency is missing) never breaks the others.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from hemlp.apps.bench import subcommands


def _top_parser(subs: dict[str, str]) -> argparse.ArgumentParser:
    lines = "\n".join(f"  {name:<10} {helptext}" for name, helptext in subs.items())
    return argparse.ArgumentParser(
        prog="python -m hemlp.bench",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="hemlp benchmarks. Each subcommand prints a table and writes JSON (--json).",
        epilog=f"subcommands:\n{lines}\n\n`python -m hemlp.bench SUBCOMMAND --help` for its options.",
        usage="python -m hemlp.bench SUBCOMMAND [options]",
    )


def main(argv=None) -> int:
    # Sleeping OpenMP waiters, as hemlp's CLI and `make bench` choose (hemlp.apps.cli.main): spinning ones made 2-thread
    # ops 2-5x slower than 1 thread whenever another process used a core. Before the native core loads; overridable.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    argv = list(sys.argv[1:] if argv is None else argv)
    subs = subcommands()
    top = _top_parser(subs)
    if not argv or argv[0] in ("-h", "--help"):
        top.print_help()
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in subs:
        top.print_usage(sys.stderr)
        print(f"python -m hemlp.bench: unknown subcommand {name!r}; available: "
              f"{', '.join(subs) or '(none)'}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"hemlp.apps.bench.{name}")
    parser = argparse.ArgumentParser(prog=f"python -m hemlp.bench {name}",
                                     description=subs[name] or None)
    module.add_arguments(parser)
    args = parser.parse_args(rest)
    rc = module.main(args)
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
