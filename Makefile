# hemlp: every target installs what it needs on a fresh Debian machine, then runs.
SHELL := /bin/bash
PYTHON_BOOT ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.hemlp-installed

.PHONY: all sysdeps venv build test test-cpp test-slow test-readme demo bench clean fuzz fuzz-build fuzz-sysdeps cuda gpu-check

all: build

# Debian build dependencies (compiler, pkg-config, BLAS, OpenSSL); only attempted as root and only when missing.
# setup.py and tests/cpp find BLAS and libcrypto with pkg-config (HEMLP_BLAS=<name> picks another BLAS).
SYSDEPS := g++ pkg-config libopenblas-dev libssl-dev python3 python3-venv
sysdeps:
	@if ! command -v g++ >/dev/null || ! command -v pkg-config >/dev/null || ! pkg-config --exists libcrypto \
	    || ! pkg-config --exists $${HEMLP_BLAS:-openblas} || ! $(PYTHON_BOOT) -c "import venv, ensurepip" 2>/dev/null; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(SYSDEPS) >/dev/null; \
	  else echo "hemlp needs: sudo apt-get install $(SYSDEPS)"; exit 1; fi; fi

$(STAMP): setup.py pyproject.toml | sysdeps
	test -x $(PY) || $(PYTHON_BOOT) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q numpy pybind11 setuptools wheel
	HEMLP_NO_EXT=1 $(PY) -m pip install -q --no-build-isolation -e '.[dev,ml,ray,fuzz]'
	touch $(STAMP)

venv: $(STAMP)

# Incremental rebuild of the C++ extension in place (ccache used when present).
build: $(STAMP)
	CC="$$(command -v ccache >/dev/null && echo 'ccache gcc' || echo gcc)" \
	CXX="$$(command -v ccache >/dev/null && echo 'ccache g++' || echo g++)" \
	$(PY) setup.py -q build_ext --inplace 2>&1 | grep -v -E '^(running|copying)' || true
	@$(PY) -c "import hemlp._core" || (echo "hemlp._core failed to build"; exit 1)

# The whole suite, the C++ tests of tests/cpp included (tests/cpp/test_cpp.py builds and runs them), and a short
# native fuzz of every C++ import path under ASan + UBSan (tests/fuzz/test_fuzz.py builds the targets with clang:
# fuzz-sysdeps installs it as root; otherwise it prints the apt command and those two tests skip).
test: FUZZ_OPTIONAL := 1
test: build fuzz-sysdeps
	$(PY) -m pytest -q -p no:cacheprovider tests

test-cpp: build
	$(PY) -m pytest -q -p no:cacheprovider tests/cpp

test-slow: build
	$(PY) -m pytest -q -p no:cacheprovider -m slow tests

# The README's shell commands as printed, in fresh venvs made from a clean copy of this checkout (slow: installs
# the project with its extras twice and builds the C++ core; part of test-slow too). Prints each command's seconds.
test-readme: build
	$(PY) -m pytest -q -s -p no:cacheprovider -m slow tests/ux/test_readme_commands.py

demo: build
	$(VENV)/bin/hemlp demo --model mlp

bench: build
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-PASSIVE} $(PY) -m hemlp.bench core --preset N14-d6 --json bench/core_N14.json

# The CUDA backend (hemlp.gpu): build/cuda/libhemlp_cuda.so with nvcc and cuBLAS; never part of the CPU build.
cuda:
	scripts/build_cuda.sh

# On a GPU machine: build, bit-exact tests against the CPU core's digests, benchmark (docs/gpu.md).
gpu-check:
	scripts/gpu_check.sh

# Fuzzing (#21): the native import paths with libFuzzer + AddressSanitizer + UndefinedBehaviorSanitizer (clang),
# then every Python-level deserialiser with Atheris (coverage-guided, seeded with real files of every kind).
# FUZZ_RUNS executions per target (the slow suite's 100 000 by default; `make fuzz FUZZ_RUNS=2000` for a smoke run).
FUZZ_RUNS ?= 100000
FUZZ_CXX ?= $(shell command -v clang++ || command -v clang++-14 || echo clang++)
FUZZ_DIR := build/fuzz
FUZZ_FLAGS := -std=c++17 -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined \
	-Wall -Wextra -Wno-unused-parameter -Wno-unknown-pragmas -Wno-unknown-warning-option -Icsrc -Itests/fuzz/cpp
FUZZ_LIB_SRCS := $(wildcard csrc/ckks/*.cpp csrc/ring/*.cpp)
FUZZ_LIB_OBJS := $(patsubst csrc/%.cpp,$(FUZZ_DIR)/obj/%.o,$(FUZZ_LIB_SRCS))
FUZZ_TARGETS := fuzz_import fuzz_params fuzz_shared_keys

# clang with libFuzzer and the sanitizer runtimes (Debian ships those in libclang-rt-dev, apart from clang): only
# attempted as root and only when a probe does not link; FUZZ_OPTIONAL=1 (set by `make test`) only warns when not root.
FUZZ_PKGS := clang libclang-rt-dev
FUZZ_PKGS_14 := clang-14 libclang-rt-14-dev
FUZZ_PROBE = mkdir -p $(FUZZ_DIR) && printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return 0; }\n' \
	| $(FUZZ_CXX) -x c++ -fsanitize=fuzzer,address,undefined -o $(FUZZ_DIR)/.probe - >/dev/null 2>&1
fuzz-sysdeps: | sysdeps
	@if ! { $(FUZZ_PROBE); }; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(FUZZ_PKGS) >/dev/null \
	    || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(FUZZ_PKGS_14) >/dev/null; }; \
	  else echo "hemlp's native fuzzing needs clang with libFuzzer: sudo apt-get install $(FUZZ_PKGS)"; $(if $(FUZZ_OPTIONAL),,exit 1;) fi; fi

# the headers too: a changed struct layout (e.g. ckks/context.h) must not link against stale objects
$(FUZZ_DIR)/obj/%.o: csrc/%.cpp $(wildcard csrc/ckks/*.h csrc/ring/*.h)
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link $$(pkg-config --cflags libcrypto) -c $< -o $@

$(FUZZ_DIR)/%: tests/fuzz/cpp/%.cpp tests/fuzz/cpp/fuzz_input.h $(FUZZ_LIB_OBJS)
	$(FUZZ_CXX) $(FUZZ_FLAGS) -fsanitize=fuzzer $< $(FUZZ_LIB_OBJS) $$(pkg-config --libs libcrypto) -o $@

fuzz-build: fuzz-sysdeps
	$(MAKE) $(addprefix $(FUZZ_DIR)/,$(FUZZ_TARGETS))

fuzz: fuzz-build build
	@set -o pipefail; for t in $(FUZZ_TARGETS); do mkdir -p $(FUZZ_DIR)/corpus-$$t; \
	  ASAN_OPTIONS=detect_leaks=1 $(FUZZ_DIR)/$$t -runs=$(FUZZ_RUNS) -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
	    -artifact_prefix=$(FUZZ_DIR)/$$t- $(FUZZ_DIR)/corpus-$$t 2>&1 | grep -E '^(Done|==|SUMMARY)' || exit 1; done
	$(PY) -m tests.fuzz.run --runs $(FUZZ_RUNS)

clean:
	rm -rf build hemlp/_core*.so
