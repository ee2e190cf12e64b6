"""``python -m hemlp.bench SUBCOMMAND [options]``: the documented command line of the benchmarks (docs, the commands
recorded in bench/*.json). The benchmarks live in hemlp.apps.bench; ``python -m hemlp.apps.bench`` is the same."""
import sys

from hemlp.apps.bench.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
