#!/usr/bin/env bash
# The GPU device check: on a machine with an NVIDIA GPU, build the CUDA backend, run the bit-exact tests against
# the CPU core's digests, then the GPU benchmark (with DESILO FHE in the same run when its wheel is importable).
# It needs neither the CPU core build nor a network: nvcc, cuBLAS, numpy, pytest (and torch for the fp64 GEMM
# baseline). Usage: scripts/gpu_check.sh [OUTPUT_DIR]   (default: $OUT or build/gpu_check)
# Writes OUTPUT_DIR/tests.log, OUTPUT_DIR/gpu_bench.json and OUTPUT_DIR/gpu_bench.log (and sanitizer.log with
# HEMLP_GPU_SANITIZE=1).
set -uo pipefail
cd "$(dirname "$0")/.."
DEST="${1:-${OUT:-build/gpu_check}}"
mkdir -p "$DEST"
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee "$DEST/gpu.txt"
# wheels carried in .whl/ (the benchmark peer) go to a private prefix, never into the machine's site-packages
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/hemlp-site .whl/*.whl \
    && export PYTHONPATH="/tmp/hemlp-site${PYTHONPATH:+:$PYTHONPATH}"
fi
scripts/build_cuda.sh || { echo "gpu_check: the CUDA build failed"; exit 1; }
# the CPU core too, when its build dependencies were carried as .deb files (scripts/gpu_core_deps.sh fetch): the live
# tests against it and the GPU bootstrap (its plans and keys come from the core) run only where it imports
if ! python3 -c "import hemlp._core" 2>/dev/null && ls .debs/*.deb >/dev/null 2>&1; then
  scripts/gpu_core_deps.sh build > "$DEST/core_build.log" 2>&1; tail -5 "$DEST/core_build.log"
  prefix="${HEMLP_DEPS_PREFIX:-/tmp/hemlp-deps}/usr/lib/x86_64-linux-gnu"
  export LD_LIBRARY_PATH="$prefix:$prefix/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# a core that crashes at its first call would take the whole test file and the benchmark down with it: set it aside
# (the live tests and the GPU bootstrap then skip, saying the core is missing) and say so
if python3 -c "import hemlp._core" 2>/dev/null && ! python3 -c "from hemlp import fhe; fhe.Params.preset('test-N12')" \
    > "$DEST/core_probe.log" 2>&1; then
  mkdir -p build/core_crashed && mv hemlp/_core*.so build/core_crashed/
  echo "gpu_check: the CPU core crashes here (see $DEST/core_probe.log); set aside in build/core_crashed"
fi
export HEMLP_NVCC_VERSION="$(${NVCC:-nvcc} --version 2>/dev/null | tail -1)"
echo "gpu_check: built in $(( $(date +%s) - t0 )) s"
python3 -m pytest -q -p no:cacheprovider --noconftest -rs tests/gpu/test_gpu_bit_exact.py 2>&1 | tee "$DEST/tests.log"
tests_rc=${PIPESTATUS[0]}
echo "gpu_check: tests rc=$tests_rc after $(( $(date +%s) - t0 )) s"
# HEMLP_GPU_SANITIZE=1: the small-ring cases again under compute-sanitizer's memcheck (out-of-bounds and
# misaligned accesses, uninitialised-free errors)
if [ "${HEMLP_GPU_SANITIZE:-0}" = 1 ] && command -v compute-sanitizer >/dev/null; then
  timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 \
    python3 -m pytest -q -p no:cacheprovider --noconftest -k "test-N12" tests/gpu/test_gpu_bit_exact.py 2>&1 \
    | tail -15 | tee "$DEST/sanitizer.log"
  echo "gpu_check: memcheck rc=${PIPESTATUS[0]}"
fi
# the CIFAR-10 ResNet-20 encrypted on the GPU (compiled.run(..., runtime="cuda")), when its prepared folder was carried
# (scripts/gpu_resnet20.py prepare) and HEMLP_GPU_RESNET_IMAGES names how many images to run
if [ -d .gpu_resnet ] && [ "${HEMLP_GPU_RESNET_IMAGES:-0}" != 0 ]; then
  timeout "${HEMLP_GPU_RESNET_TIMEOUT:-300}" python3 scripts/gpu_resnet20.py run --dir .gpu_resnet \
    --images "$HEMLP_GPU_RESNET_IMAGES" --json "$DEST/resnet20_gpu.json" 2>&1 | tail -25 | tee "$DEST/resnet20_gpu.log"
  echo "gpu_check: resnet20 rc=${PIPESTATUS[0]} after $(( $(date +%s) - t0 )) s"
fi
# HEMLP_GPU_SKIP_BENCH=1: build and test only (the caller runs the benchmark later, on a quiet GPU)
if [ "${HEMLP_GPU_SKIP_BENCH:-0}" = 1 ]; then
  echo "gpu_check: benchmark skipped (HEMLP_GPU_SKIP_BENCH=1)"; [ "$tests_rc" = 0 ]; exit
fi
python3 -m hemlp.bench gpu --json "$DEST/gpu_bench.json" ${HEMLP_GPU_BENCH_ARGS:-} 2>&1 | tee "$DEST/gpu_bench.log"
bench_rc=${PIPESTATUS[0]}
echo "gpu_check: bench rc=$bench_rc; total $(( $(date +%s) - t0 )) s"
[ "$tests_rc" = 0 ] && [ "$bench_rc" = 0 ]
