#!/usr/bin/env bash
# Builds hemlp's CUDA backend, build/cuda/libhemlp_cuda.so (loaded by hemlp.gpu), from csrc/cuda/*.cu.
# Needs nvcc (CUDA 12.8+ or 13; `pip install nvidia-cuda-nvcc nvidia-cuda-runtime nvidia-cublas` gives one) and cuBLAS.
# The CPU build (setup.py) never needs this. Usage: scripts/build_cuda.sh [--check]  (--check: compile only, no link)
# Environment: NVCC (the compiler), HEMLP_CUDA_ARCH (default sm_90), HEMLP_CUDA_OUT (output path).
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC="${NVCC:-$(command -v nvcc || true)}"
for cand in /usr/local/cuda/bin/nvcc /opt/cudapip/nvidia/cu13/bin/nvcc; do
  [ -n "$NVCC" ] && break
  [ -x "$cand" ] && NVCC="$cand"
done
if [ -z "$NVCC" ]; then
  echo "build_cuda: no nvcc found (install the CUDA toolkit or: pip install nvidia-cuda-nvcc nvidia-cuda-runtime nvidia-cublas)" >&2
  exit 2
fi
CUDA_HOME="$(cd "$(dirname "$NVCC")/.." && pwd)"
ARCH="${HEMLP_CUDA_ARCH:-sm_90}"
OUT="${HEMLP_CUDA_OUT:-build/cuda/libhemlp_cuda.so}"
mkdir -p "$(dirname "$OUT")" build/cuda/obj
# cuBLAS: the toolkit's, else a pip wheel's (nvidia-cublas), else the one PyTorch ships
LIBDIR=""
for d in "$CUDA_HOME/lib64" "$CUDA_HOME/lib" "$CUDA_HOME/targets/x86_64-linux/lib" \
         $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, s, "lib") for p in nvidia.__path__ for s in ("cu13", "cublas")))' 2>/dev/null || true); do
  if ls "$d"/libcublas.so* >/dev/null 2>&1; then LIBDIR="$d"; break; fi
done
INC=(-Icsrc -I"$CUDA_HOME/include")
[ -n "$LIBDIR" ] && [ -d "$LIBDIR/../include" ] && INC+=(-I"$LIBDIR/../include")
FLAGS=(-std=c++17 -O3 -arch="$ARCH" -Xcompiler -fPIC,-Wall,-Wextra,-Wno-unused-parameter --expt-relaxed-constexpr)
objs=()
for src in csrc/cuda/*.cu; do
  obj="build/cuda/obj/$(basename "${src%.cu}").o"
  "$NVCC" "${FLAGS[@]}" "${INC[@]}" -c "$src" -o "$obj"
  objs+=("$obj")
done
[ "${1:-}" = "--check" ] && { echo "build_cuda: compiled ${#objs[@]} files with $NVCC ($ARCH)"; exit 0; }
if [ -z "$LIBDIR" ]; then echo "build_cuda: cuBLAS not found next to $NVCC or in the nvidia Python packages" >&2; exit 2; fi
CUBLAS="-lcublas"
[ -e "$LIBDIR/libcublas.so" ] || CUBLAS="-l:$(basename "$(ls "$LIBDIR"/libcublas.so.* | head -1)")"
"$NVCC" -shared -arch="$ARCH" -o "$OUT" "${objs[@]}" -L"$LIBDIR" $CUBLAS -cudart static -Xlinker -rpath,"$LIBDIR"
echo "build_cuda: $OUT ($("$NVCC" --version | tail -1); $ARCH; cuBLAS from $LIBDIR)"
