// PCMM in the MLWE format on the device (pcmm/mlwe.cpp's pcmm_mlwe, the same words): the inputs' coefficients
// decomposed into decimated rows, two exact modular GEMMs per limb, the rows re-interleaved (ModPack), and the k
// a-parts switched from s_v(X^k) to s with one ModDown per part.
#pragma once
#include <cublas_v2.h>

#include <cstdint>
#include <vector>

#include "cuda/kernels.cuh"
#include "cuda/modgemm.cuh"

namespace hemlp::cuda {

// c0s, c1s: the inputs' two polynomials (NTT form, level + 1 limbs each); keys: the k ModPack keys; K: the integer
// every product is multiplied by (any sign); out0s, out1s: d1 / k output polynomials each (level + 1 limbs).
void pcmm_mlwe(const GpuContext& c, cublasHandle_t h, const GemmPlan& plan, const std::vector<const u64*>& c0s,
               const std::vector<const u64*>& c1s, int level, int k, int64_t K,
               const std::vector<const DeviceSwitchKey*>& keys, const std::vector<u64*>& out0s,
               const std::vector<u64*>& out1s);

}  // namespace hemlp::cuda
