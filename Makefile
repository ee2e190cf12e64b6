# hemlp: every target installs what it needs on a fresh Debian machine, then runs.
SHELL := /bin/bash
PYTHON_BOOT ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.hemlp-installed

.PHONY: all sysdeps venv build test test-slow demo bench clean

all: build

# Debian build dependencies (BLAS, OpenSSL); only attempted as root and only when missing.
sysdeps:
	@if [ ! -e /usr/include/openssl/evp.h ] || [ ! -e /usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libopenblas-dev libssl-dev g++ >/dev/null; \
	  else echo "hemlp needs libopenblas-dev and libssl-dev: sudo apt-get install libopenblas-dev libssl-dev"; exit 1; fi; fi

$(STAMP): setup.py pyproject.toml | sysdeps
	test -x $(PY) || $(PYTHON_BOOT) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q numpy pybind11 setuptools wheel
	HEMLP_NO_EXT=1 $(PY) -m pip install -q --no-build-isolation -e '.[dev,ml,ray]'
	touch $(STAMP)

venv: $(STAMP)

# Incremental rebuild of the C++ extension in place (ccache used when present).
build: $(STAMP)
	CC="$$(command -v ccache >/dev/null && echo 'ccache gcc' || echo gcc)" \
	CXX="$$(command -v ccache >/dev/null && echo 'ccache g++' || echo g++)" \
	$(PY) setup.py -q build_ext --inplace 2>&1 | grep -v -E '^(running|copying)' || true
	@$(PY) -c "import hemlp._core" || (echo "hemlp._core failed to build"; exit 1)

test: build
	$(PY) -m pytest -q -p no:cacheprovider tests

test-slow: build
	$(PY) -m pytest -q -p no:cacheprovider -m slow tests

demo: build
	$(VENV)/bin/hemlp demo --model mlp

bench: build
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(PY) -m hemlp.bench core --preset N14-d6 --json bench/core_N14.json

clean:
	rm -rf build hemlp/_core*.so
