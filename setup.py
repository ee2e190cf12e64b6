"""Build hemlp: the Python package plus the C++ core compiled into ``hemlp._core``.

BLAS (CBLAS headers + library) and OpenSSL's libcrypto are found with pkg-config (Debian: libopenblas-dev,
libssl-dev, pkg-config); HEMLP_BLAS=<pkg-config name> picks another BLAS (e.g. "blis", "cblas").

Environment knobs (all optional):
  HEMLP_NATIVE=1      add -march=native (off by default so wheels stay portable)
  HEMLP_BUILD_JOBS=N  parallel compile jobs (default 2)
  HEMLP_BLAS=name     the pkg-config package of the BLAS to link (default: openblas, then cblas, then blas)
"""
import glob
import os
import shutil
import subprocess

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension, build_ext
from setuptools import find_packages, setup

ParallelCompile("HEMLP_BUILD_JOBS", default=2).install()

sources = sorted(glob.glob("csrc/**/*.cpp", recursive=True))
cflags = ["-O3", "-fopenmp", "-Wall", "-Wextra", "-Wno-unused-parameter"]
if os.environ.get("HEMLP_NATIVE") == "1":
    cflags.append("-march=native")



def pkg_config(names, what: str, fix: str) -> dict:
    """Compiler / linker flags of the first pkg-config package in `names` that exists (SystemExit naming the fix
    when none does)."""
    if shutil.which("pkg-config") is None:
        raise SystemExit(f"hemlp: pkg-config is needed to find {what}: sudo apt-get install pkg-config {fix}")
    for name in names:
        r = subprocess.run(["pkg-config", "--cflags", "--libs", name], capture_output=True, text=True)
        if r.returncode == 0:
            flags = r.stdout.split()
            return dict(include_dirs=[f[2:] for f in flags if f.startswith("-I")],
                        library_dirs=[f[2:] for f in flags if f.startswith("-L")],
                        libraries=[f[2:] for f in flags if f.startswith("-l")])
    raise SystemExit(f"hemlp: pkg-config finds no {what} (tried {', '.join(names)}): sudo apt-get install {fix}")


# HEMLP_NO_EXT=1: install the Python package only (the Makefile builds the
# extension in place with `setup.py build_ext --inplace`, which is incremental).
ext_modules = []
if os.environ.get("HEMLP_NO_EXT") != "1":
    blas_names = [os.environ["HEMLP_BLAS"]] if os.environ.get("HEMLP_BLAS") else ["openblas", "cblas", "blas"]
    blas = pkg_config(blas_names, "BLAS library", "libopenblas-dev")
    crypto = pkg_config(["libcrypto"], "OpenSSL libcrypto", "libssl-dev")
    ext_modules.append(Pybind11Extension(
        "hemlp._core",
        sources,
        include_dirs=["csrc"] + blas["include_dirs"] + crypto["include_dirs"],
        library_dirs=blas["library_dirs"] + crypto["library_dirs"],
        libraries=crypto["libraries"] + blas["libraries"],
        extra_compile_args=cflags,
        extra_link_args=["-fopenmp"],
        cxx_std=17,
    ))

setup(
    name="hemlp",
    version="0.1.0",
    description="Privacy-preserving ML inference on RNS-CKKS encrypted matrices",
    # hemlp/models and hemlp/datasets are symbolic links to the top-level models/ and datasets/ folders; the sdist
    # also carries the C++ headers, the Makefile, docs, tests, examples and scripts (MANIFEST.in)
    # hemlp/bench holds only __main__.py (`python -m hemlp.bench`; the benchmarks are hemlp.apps.bench)
    packages=find_packages(include=["hemlp", "hemlp.*"]) + ["hemlp.bench"],
    package_data={"hemlp.compiler": ["composite_sign.json"],   # the composite sign polynomials, fitted once
                  "hemlp.planner": ["cost_tables/*.json"]},    # the planner's cost tables (scripts/cost_tables.py)
    ext_modules=ext_modules,
    cmdclass={"build_ext": build_ext},
    python_requires=">=3.10",
    install_requires=["numpy>=1.24"],
    extras_require={
        "dev": ["pytest>=7", "pytest-timeout", "pybind11>=2.11", "threadpoolctl>=3"],
        "ray": ["ray[default,serve]>=2.9"],   # Ray Core for batch jobs, Ray Serve for `hemlp serve`
        "boot": ["mpmath>=1.3"],   # bootstrapping's EvalMod coefficients (hemlp.bootstrap.evalmod)
        "fuzz": ["atheris>=2.3"],  # make fuzz / tests/fuzz: coverage-guided fuzzing of the Python-level loaders
        "ml": ["torch==2.14.1", "torchvision==0.29.2", "onnx", "mlxtend", "wandb", "tqdm", "rich", "matplotlib"],
    },
    entry_points={"console_scripts": ["hemlp=hemlp.apps.cli:main"]},
)
