// Exact modular GEMM on the GPU: C = mult * U X mod q over cuBLAS DGEMMs, the error-free digit split of
// pcmm/modgemm.h. X's centred residues are split into T balanced w-bit digits; U (small signed integers) is not
// split; a K-block of kb rows keeps every partial sum an integer below 2^52 in magnitude, so the DGEMM is exact
// whatever order cuBLAS sums in. C = sum_t (C_t mod q) 2^(w t) mod q is the canonical residue: the same words
// the CPU core computes.
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>

#include "cuda/kernels.cuh"
#include "cuda/modgemm.cuh"

namespace hemlp::cuda {

namespace {

constexpr int kMaxDigits = 16;

struct Pow2 {
  u64 w[kMaxDigits], wp[kMaxDigits];  // 2^(w t) * mult mod q and Shoup companions
};

// digits[t][r][c] of the centred residues X[r][c], r < rows, as doubles
__global__ void split_kernel(const u64* X, size_t count, u64 q, int w, int T, double* digits) {
  const size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= count) return;
  const u64 x = X[e];
  long long v = x > (q >> 1) ? -(long long)(q - x) : (long long)x;
  const long long half = 1LL << (w - 1), mask = (1LL << w) - 1;
  for (int t = 0; t < T - 1; ++t) {
    long long d = v & mask;  // in [0, 2^w)
    if (d >= half) d -= (1LL << w);
    digits[(size_t)t * count + e] = (double)d;
    v = (v - d) >> w;
  }
  digits[(size_t)(T - 1) * count + e] = (double)v;
}

// acc (+)= sum_t ([C_t] mod q) * pow.w[t] mod q; C_t exact integers in double
__global__ void reduce_kernel(const double* C, size_t count, int T, u64 q, Pow2 pow, u64* acc, int accumulate) {
  const size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= count) return;
  u64 r = accumulate ? acc[e] : 0;
  for (int t = 0; t < T; ++t) {
    const long long v = (long long)C[(size_t)t * count + e];
    const long long m = v % (long long)q;
    const u64 res = m < 0 ? (u64)(m + (long long)q) : (u64)m;
    r = add_mod(r, mul_shoup(res, pow.w[t], pow.wp[t], q), q);
  }
  acc[e] = r;
}

__global__ void to_double_kernel(const int64_t* U, size_t count, double* out) {
  const size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (e < count) out[e] = (double)U[e];
}

int ceil_log2(size_t x) {
  int c = 0;
  while (((size_t)1 << c) < x) ++c;
  return c;
}

void check_cublas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw CudaError(std::string(what) + ": cuBLAS status " + std::to_string((int)s));
}

}  // namespace

GemmPlan::GemmPlan(const GpuContext& c, const int64_t* U, size_t d1, size_t d2, int bU) : d1_(d1), d2_(d2), bU_(bU) {
  if (!U || d1 == 0 || d2 == 0) throw std::invalid_argument("modgemm: U must be a non-empty matrix");
  if (bU < 0 || bU > 40) throw std::invalid_argument("modgemm: |U| <= 2^bU needs 0 <= bU <= 40 on the GPU");
  const long long lim = 1LL << bU;
  for (size_t i = 0; i < d1 * d2; ++i)
    if (U[i] > lim || U[i] < -lim) throw std::invalid_argument("modgemm: an entry of U exceeds 2^bU in magnitude");
  // the largest K-block with at least 8-bit digits, then blocks of equal size
  int c_bits = ceil_log2(d2);
  while (52 - c_bits - bU < 8 && c_bits > 0) --c_bits;
  if (52 - c_bits - bU < 8) throw std::invalid_argument("modgemm: bU too large for exact DGEMM blocks");
  const size_t max_kb = (size_t)1 << c_bits;
  nblk_ = (d2 + max_kb - 1) / max_kb;
  kb_ = (d2 + nblk_ - 1) / nblk_;
  w_ = 52 - ceil_log2(kb_) - bU;
  DeviceBuffer tmp = c.alloc(d1 * d2);
  HG_CHECK(cudaMemcpyAsync(tmp.data(), U, d1 * d2 * sizeof(int64_t), cudaMemcpyHostToDevice, c.stream()));
  u_ = c.alloc(d1 * d2);
  to_double_kernel<<<(unsigned)((d1 * d2 + kThreads - 1) / kThreads), kThreads, 0, c.stream()>>>(
      (const int64_t*)tmp.data(), d1 * d2, (double*)u_.data());
  HG_LAUNCHED("modgemm (U to double)");
  c.sync();
}

void GemmPlan::apply(const GpuContext& c, cublasHandle_t h, const u64* X, size_t ncols, u64 q, u64 mult,
                     u64* C) const {
  if (q < 3 || !(q & 1) || q >= (u64(1) << 61)) throw std::invalid_argument("modgemm: q must be odd, 3 <= q < 2^61");
  int qbits = 0;
  while (qbits < 64 && (q >> qbits)) ++qbits;
  const int T = (qbits + w_ - 1) / w_;
  if (T > kMaxDigits) throw std::invalid_argument("modgemm: too many digits");
  Pow2 pow{};
  for (int t = 0; t < T; ++t) {
    // 2^(w t) * mult mod q
    unsigned __int128 v = mult % q;
    for (int s = 0; s < w_ * t; ++s) v = (v << 1) % q;
    pow.w[t] = (u64)v;
    pow.wp[t] = shoup_companion(pow.w[t], q);
  }
  const size_t count_x = kb_ * ncols, count_c = d1_ * ncols;
  DeviceBuffer digits = c.alloc((size_t)T * count_x), prod = c.alloc((size_t)T * count_c);
  check_cublas(cublasSetStream(h, c.stream()), "cublasSetStream");
  const double one = 1.0, zero = 0.0;
  for (size_t b = 0; b < nblk_; ++b) {
    const size_t k0 = b * kb_, kb = std::min(kb_, d2_ - k0);
    const size_t cx = kb * ncols;
    split_kernel<<<(unsigned)((cx + kThreads - 1) / kThreads), kThreads, 0, c.stream()>>>(
        X + k0 * ncols, cx, q, w_, T, (double*)digits.data());
    HG_LAUNCHED("modgemm (split)");
    // row-major C_t (d1 x n) = U[:, k0:k0+kb] X_t: column-major C_t^T = X_t^T U^T
    for (int t = 0; t < T; ++t)
      check_cublas(cublasDgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)ncols, (int)d1_, (int)kb, &one,
                               (const double*)digits.data() + (size_t)t * cx, (int)ncols,
                               (const double*)u_.data() + k0, (int)d2_, &zero,
                               (double*)prod.data() + (size_t)t * count_c, (int)ncols),
                   "cublasDgemm");
    reduce_kernel<<<(unsigned)((count_c + kThreads - 1) / kThreads), kThreads, 0, c.stream()>>>(
        (const double*)prod.data(), count_c, T, q, pow, C, b > 0 ? 1 : 0);
    HG_LAUNCHED("modgemm (reduce)");
  }
}

}  // namespace hemlp::cuda
