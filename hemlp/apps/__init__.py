"""Applications on top of the library: the ``hemlp`` command line (cli), the demo (demo), the benchmarks (bench).

Entry points: the ``hemlp`` console script (hemlp.apps.cli:main), ``python -m hemlp.bench SUBCOMMAND``
(hemlp/bench/__main__.py runs hemlp.apps.bench.__main__, which dispatches to hemlp.apps.bench.<SUBCOMMAND>) and
``python -m hemlp.apps.demo``. Nothing in the library imports this package.
"""
