// A plaintext integer matrix U prepared on the device for exact modular GEMMs (modgemm.cu), on one of two engines:
// fp64 DGEMMs of U by digits of X, or int8 tensor-core GEMMs of digits of U by digits of X.
#pragma once
#include <cublas_v2.h>

#include <cstddef>
#include <cstdint>

#include "cuda/gpu_context.cuh"

namespace hemlp::cuda {

enum class GemmEngine : int { Fp64 = 0, Int8 = 1 };

class GemmPlan {
 public:
  // U: d1 x d2 row-major on the host, |U_ij| <= 2^bU (checked), bU <= 40.
  GemmPlan(const GpuContext& c, const int64_t* U, size_t d1, size_t d2, int bU, GemmEngine engine = GemmEngine::Fp64);
  // C (d1 x ncols, row-major) = mult * U X mod q, X d2 x ncols row-major residues in [0, q) (device). C must not
  // overlap X.
  void apply(const GpuContext& c, cublasHandle_t h, const u64* X, size_t ncols, u64 q, u64 mult, u64* C) const;
  size_t rows() const { return d1_; }
  size_t cols() const { return d2_; }
  GemmEngine engine() const { return engine_; }

 private:
  void apply_int8(const GpuContext& c, cublasHandle_t h, const u64* X, size_t ncols, u64 q, u64 mult, u64* C) const;
  size_t d1_, d2_, kb_ = 0, nblk_ = 0;
  int bU_, w_ = 0;
  GemmEngine engine_;
  int tu_ = 0;      // int8: balanced base-256 digits of U
  size_t ldu_ = 0;  // int8: the digit rows' stride, d2 rounded up to 16 (tensor-core alignment)
  DeviceBuffer u_;  // fp64: U as doubles, row-major d1 x d2; int8: tu_ stacked digit matrices, (tu_ d1) x ldu_
};

}  // namespace hemlp::cuda
