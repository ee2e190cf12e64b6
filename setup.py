"""Build hemlp: the Python package plus the C++ core compiled into ``hemlp._core``.

Environment knobs (all optional):
  HEMLP_NATIVE=1      add -march=native (off by default so wheels stay portable)
  HEMLP_BUILD_JOBS=N  parallel compile jobs (default 2)
"""
import glob
import os

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension, build_ext
from setuptools import find_packages, setup

ParallelCompile("HEMLP_BUILD_JOBS", default=2).install()

sources = sorted(glob.glob("csrc/**/*.cpp", recursive=True))
cflags = ["-O3", "-fopenmp", "-Wall", "-Wextra", "-Wno-unused-parameter"]
if os.environ.get("HEMLP_NATIVE") == "1":
    cflags.append("-march=native")

# HEMLP_NO_EXT=1: install the Python package only (the Makefile builds the
# extension in place with `setup.py build_ext --inplace`, which is incremental).
ext_modules = []
ext = Pybind11Extension(
    "hemlp._core",
    sources,
    include_dirs=["csrc", "/usr/include/x86_64-linux-gnu/openblas-pthread"],
    libraries=["crypto", "openblas"],
    extra_compile_args=cflags,
    extra_link_args=["-fopenmp"],
    cxx_std=17,
)
if os.environ.get("HEMLP_NO_EXT") != "1":
    ext_modules.append(ext)

setup(
    name="hemlp",
    version="0.1.0",
    description="Privacy-preserving ML inference on RNS-CKKS encrypted matrices",
    packages=find_packages(include=["hemlp", "hemlp.*"]) + ["hemlp.models", "hemlp.datasets"],
    package_dir={"hemlp.models": "models", "hemlp.datasets": "datasets"},
    ext_modules=ext_modules,
    cmdclass={"build_ext": build_ext},
    python_requires=">=3.10",
    install_requires=["numpy>=1.24"],
    extras_require={
        "dev": ["pytest>=7", "pytest-timeout", "pybind11>=2.11", "threadpoolctl>=3"],
        "ray": ["ray[default]>=2.9"],
        "ml": ["torch==2.14.1", "torchvision==0.29.2", "onnx", "mlxtend", "wandb", "tqdm", "rich", "matplotlib"],
    },
    entry_points={"console_scripts": ["hemlp=hemlp.cli:main"]},
)
