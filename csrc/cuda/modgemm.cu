// Exact modular GEMM on the GPU: C = mult * U X mod q over cuBLAS DGEMMs, the error-free digit split of
// pcmm/modgemm.h. X's centred residues are split into T balanced w-bit digits; U (small signed integers) is not
// split; a K-block of kb rows keeps every partial sum an integer below 2^52 in magnitude, so the DGEMM is exact
// whatever order cuBLAS sums in. C = sum_t (C_t mod q) 2^(w t) mod q is the canonical residue: the same words
// the CPU core computes.
//
// The int8 engine (hemlp/gpu/int8_gemm.py is its exact numpy model, tested on the CPU) splits U too: U and X's
// centred residues into balanced base-256 digits in [-128, 127], TU and TX of them. One cublasGemmEx per K-block and
// column chunk multiplies the TU stacked digit matrices of U by the TX stacked digit matrices of X with int32 sums
// on the tensor cores; a K-block of at most 2^16 rows keeps each sum within 2^30 (|digit product| <= 2^14), exact in
// any order. The partial products of one weight 256^j are summed in 64 bits, reduced mod q and scaled by
// mult 256^j mod q.
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>

#include "cuda/kernels.cuh"
#include "cuda/modgemm.cuh"

namespace hemlp::cuda {

namespace {

constexpr int kMaxDigits = 16;

// mult 2^(bits j) mod q and its Shoup companion for j < count: the weights digit products are recombined with
struct PowTable {
  u64 w[2 * kMaxDigits], wp[2 * kMaxDigits];
};

PowTable pow2_table(u64 mult, int bits, int count, u64 q) {
  PowTable pow{};
  unsigned __int128 v = mult % q;
  for (int j = 0; j < count; ++j) {
    pow.w[j] = (u64)v;
    pow.wp[j] = shoup_companion(pow.w[j], q);
    for (int s = 0; s < bits; ++s) v = (v << 1) % q;
  }
  return pow;
}

// Takes the lowest balanced w-bit digit (in [-2^(w-1), 2^(w-1))) off v: v becomes (v - d) / 2^w
__host__ __device__ inline long long take_digit(long long& v, int w) {
  long long d = v & ((1LL << w) - 1);
  if (d >= (1LL << (w - 1))) d -= (1LL << w);
  v = (v - d) >> w;
  return d;
}

// digits[t][r][c] of the centred residues X[r][c], r < rows, as doubles
__global__ void split_kernel(const u64* X, size_t count, u64 q, int w, int T, double* digits) {
  const size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= count) return;
  const u64 x = X[e];
  long long v = x > (q >> 1) ? -(long long)(q - x) : (long long)x;
  for (int t = 0; t < T - 1; ++t) digits[(size_t)t * count + e] = (double)take_digit(v, w);
  digits[(size_t)(T - 1) * count + e] = (double)v;
}

// acc (+)= sum_t ([C_t] mod q) * pow.w[t] mod q; C_t exact integers in double
__global__ void reduce_kernel(const double* C, size_t count, int T, u64 q, PowTable pow, u64* acc,
                              int accumulate) {
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

constexpr size_t kInt8MaxBlock = size_t(1) << 16;  // K-block rows: |int32 sum| <= 2^16 * 2^14 = 2^30
constexpr size_t kInt8Align = 16;                   // tensor-core GEMM dimensions and strides
constexpr size_t kInt8ChunkBytes = size_t(256) << 20;  // the int32 products of one column chunk

// The fewest balanced base-256 digits for magnitudes <= bound (hemlp/gpu/int8_gemm.py: balanced_digit_count)
int balanced_digit_count(unsigned long long bound) {
  int t = 1;
  while (bound > 127) bound = (bound + 128) >> 8, ++t;
  return t;
}

size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

// digits[t][k][c] (k < kbp rows, c < ncp columns of the chunk, row stride TX * ncp) of the centred residues
// X[k0 + k][c0 + c]; zero outside the kb x nc block (the padding the aligned GEMM reads)
__global__ void split_int8_kernel(const u64* X, size_t ncols, size_t kb, size_t nc, size_t kbp, size_t ncp, u64 q,
                                  int T, int8_t* digits) {
  const size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= kbp * ncp) return;
  const size_t k = e / ncp, col = e % ncp;
  int8_t* row = digits + k * (size_t)T * ncp + col;
  if (k >= kb || col >= nc) {
    for (int t = 0; t < T; ++t) row[(size_t)t * ncp] = 0;
    return;
  }
  const u64 x = X[k * ncols + col];
  long long v = x > (q >> 1) ? -(long long)(q - x) : (long long)x;
  for (int t = 0; t < T - 1; ++t) row[(size_t)t * ncp] = (int8_t)take_digit(v, 8);
  row[(size_t)(T - 1) * ncp] = (int8_t)v;
}

// C[r][c0 + c] (+)= sum_j ((sum_{s+t=j} P_st[r][c]) mod q) mult 256^j mod q, P_st = prod[(s d1 + r) ldp + t ncp + c]
__global__ void reduce_int8_kernel(const int32_t* prod, size_t d1, size_t nc, size_t ncp, int TU, int TX, u64 q,
                                   PowTable pow, u64* C, size_t ncols, int accumulate) {
  const size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= d1 * nc) return;
  const size_t r = e / nc, col = e % nc, ldp = (size_t)TX * ncp;
  u64* out = C + r * ncols + col;
  u64 acc = accumulate ? *out : 0;
  for (int j = 0; j < TU + TX - 1; ++j) {
    long long g = 0;
    for (int s = max(0, j - TX + 1); s <= min(TU - 1, j); ++s)
      g += prod[((size_t)s * d1 + r) * ldp + (size_t)(j - s) * ncp + col];
    const long long m = g % (long long)q;
    acc = add_mod(acc, mul_shoup(m < 0 ? (u64)(m + (long long)q) : (u64)m, pow.w[j], pow.wp[j], q), q);
  }
  *out = acc;
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

GemmPlan::GemmPlan(const GpuContext& c, const int64_t* U, size_t d1, size_t d2, int bU, GemmEngine engine)
    : d1_(d1), d2_(d2), bU_(bU), engine_(engine) {
  if (!U || d1 == 0 || d2 == 0) throw std::invalid_argument("modgemm: U must be a non-empty matrix");
  if (bU < 0 || bU > 40) throw std::invalid_argument("modgemm: |U| <= 2^bU needs 0 <= bU <= 40 on the GPU");
  if (engine != GemmEngine::Fp64 && engine != GemmEngine::Int8)
    throw std::invalid_argument("modgemm: the engine must be 0 (fp64) or 1 (int8)");
  const long long lim = 1LL << bU;
  for (size_t i = 0; i < d1 * d2; ++i)
    if (U[i] > lim || U[i] < -lim) throw std::invalid_argument("modgemm: an entry of U exceeds 2^bU in magnitude");
  if (engine == GemmEngine::Int8) {
    if (d1 > (size_t)INT32_MAX / 16 || d2 > (size_t)INT32_MAX / 2)
      throw std::invalid_argument("modgemm: U too large for the int8 engine's 32-bit GEMM dimensions");
    // equal K-blocks of a multiple of 16 rows: each block's digits of U start 16-byte aligned, and the last block's
    // padded rows stay within the zero columns of its row
    nblk_ = (d2 + kInt8MaxBlock - 1) / kInt8MaxBlock;
    kb_ = round_up((d2 + nblk_ - 1) / nblk_, kInt8Align);
    nblk_ = (d2 + kb_ - 1) / kb_;
    tu_ = balanced_digit_count((unsigned long long)lim);
    ldu_ = round_up(d2, kInt8Align);
    // the digits on the host (a plan is made once per weight matrix), zero in the padding columns
    std::vector<int8_t> digits((size_t)tu_ * d1 * ldu_, 0);
    for (size_t r = 0; r < d1; ++r)
      for (size_t k = 0; k < d2; ++k) {
        long long v = U[r * d2 + k];
        for (int t = 0; t < tu_ - 1; ++t) digits[((size_t)t * d1 + r) * ldu_ + k] = (int8_t)take_digit(v, 8);
        digits[((size_t)(tu_ - 1) * d1 + r) * ldu_ + k] = (int8_t)v;  // in [-128, 127]: tu_ digits hold 2^bU
      }
    u_ = to_device(digits, c.stream());
    c.sync();
    return;
  }
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
  if (engine_ == GemmEngine::Int8) return apply_int8(c, h, X, ncols, q, mult, C);
  int qbits = 0;
  while (qbits < 64 && (q >> qbits)) ++qbits;
  const int T = (qbits + w_ - 1) / w_;
  if (T > kMaxDigits) throw std::invalid_argument("modgemm: too many digits");
  const PowTable pow = pow2_table(mult, w_, T, q);
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

void GemmPlan::apply_int8(const GpuContext& c, cublasHandle_t h, const u64* X, size_t ncols, u64 q, u64 mult,
                          u64* C) const {
  if (ncols == 0) return;
  const int TX = balanced_digit_count((q - 1) / 2), TU = tu_;
  if (TU + TX - 1 > 2 * kMaxDigits) throw std::invalid_argument("modgemm: too many int8 digits");
  const PowTable pow = pow2_table(mult, 8, TU + TX - 1, q);
  // column chunks whose int32 products stay within kInt8ChunkBytes (at least one aligned group of columns)
  const size_t per_col = (size_t)TU * d1_ * TX * sizeof(int32_t);
  const size_t chunk = std::max(kInt8Align, kInt8ChunkBytes / per_col / kInt8Align * kInt8Align);
  const size_t ncc = std::min(chunk, round_up(ncols, kInt8Align));
  const size_t kbp_max = round_up(kb_, kInt8Align);
  if ((size_t)TX * ncc > (size_t)INT32_MAX || (size_t)TU * d1_ > (size_t)INT32_MAX)
    throw std::invalid_argument("modgemm: the int8 GEMM's dimensions exceed 32 bits");
  DeviceBuffer digits = c.alloc((kbp_max * TX * ncc + 7) / 8), prod = c.alloc((per_col * ncc + 7) / 8);
  check_cublas(cublasSetStream(h, c.stream()), "cublasSetStream");
  const int32_t one = 1, zero = 0;
  for (size_t c0 = 0; c0 < ncols; c0 += ncc) {
    const size_t nc = std::min(ncc, ncols - c0), ncp = round_up(nc, kInt8Align);
    for (size_t b = 0; b < nblk_; ++b) {
      const size_t k0 = b * kb_, kb = std::min(kb_, d2_ - k0), kbp = round_up(kb, kInt8Align);
      split_int8_kernel<<<(unsigned)((kbp * ncp + kThreads - 1) / kThreads), kThreads, 0, c.stream()>>>(
          X + k0 * ncols + c0, ncols, kb, nc, kbp, ncp, q, TX, digits.as<int8_t>());
      HG_LAUNCHED("modgemm int8 (split)");
      // row-major P ((TU d1) x (TX ncp)) = Ud[:, k0:k0+kbp] Xd: column-major P^T = Xd^T Ud^T. U's digits past d2 are
      // zero, so the padded rows of the last block add nothing
      check_cublas(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)(TX * ncp), (int)(TU * d1_), (int)kbp, &one,
                                digits.as<int8_t>(), CUDA_R_8I, (int)(TX * ncp), u_.as<int8_t>() + k0, CUDA_R_8I,
                                (int)ldu_, &zero, prod.as<int32_t>(), CUDA_R_32I, (int)(TX * ncp),
                                CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT),
                   "cublasGemmEx (int8)");
      reduce_int8_kernel<<<(unsigned)((d1_ * nc + kThreads - 1) / kThreads), kThreads, 0, c.stream()>>>(
          prod.as<int32_t>(), d1_, nc, ncp, TU, TX, q, pow, C + c0, ncols, b > 0 ? 1 : 0);
      HG_LAUNCHED("modgemm int8 (reduce)");
    }
  }
}

}  // namespace hemlp::cuda
