// A plaintext integer matrix U prepared on the device for exact modular GEMMs (modgemm.cu).
#pragma once
#include <cublas_v2.h>

#include <cstddef>
#include <cstdint>

#include "cuda/gpu_context.cuh"

namespace hemlp::cuda {

class GemmPlan {
 public:
  // U: d1 x d2 row-major on the host, |U_ij| <= 2^bU (checked), bU <= 40.
  GemmPlan(const GpuContext& c, const int64_t* U, size_t d1, size_t d2, int bU);
  // C (d1 x ncols, row-major) = mult * U X mod q, X d2 x ncols row-major residues in [0, q) (device). C must not
  // overlap X.
  void apply(const GpuContext& c, cublasHandle_t h, const u64* X, size_t ncols, u64 q, u64 mult, u64* C) const;
  size_t rows() const { return d1_; }
  size_t cols() const { return d2_; }

 private:
  size_t d1_, d2_, kb_ = 0, nblk_ = 0;
  int bU_, w_ = 0;
  DeviceBuffer u_;  // U as doubles, row-major d1 x d2
};

}  // namespace hemlp::cuda
