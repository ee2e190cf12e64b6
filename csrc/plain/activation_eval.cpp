#include "plain/activation_eval.h"

#include <algorithm>
#include <cmath>

#include "ring/simd.h"

// Bit-identity with the numpy recurrences needs every product and sum rounded on its own: GCC contracts a * b + c
// into a fused multiply-add inside AVX2 / AVX-512 functions (intrinsics included) unless told not to.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace hemlp::plain {
namespace {

// The loops below are written once and inlined into each path's function, which compiles them for its instruction
// set: without always_inline, GCC keeps one out-of-line copy built for the baseline ISA and every path calls it.
#if defined(__GNUC__)
#define HEMLP_PLAIN_INLINE inline __attribute__((always_inline))
#else
#define HEMLP_PLAIN_INLINE inline
#endif

// Elements evaluated side by side through all the coefficients: enough independent recurrences to hide the
// latency of each step, few enough that u2, b1 and b2 stay in registers.
constexpr size_t LANES = 32;

template <size_t W>
HEMLP_PLAIN_INLINE void clenshaw_block(const double* u, const double* c, size_t nc, double* out) {
  double u2[W], b1[W], b2[W];
  for (size_t j = 0; j < W; ++j) {
    u2[j] = u[j] * 2.0;
    b1[j] = c[nc - 1];
    b2[j] = 0.0;
  }
  for (size_t k = nc - 2; k >= 1; --k) {
    const double ck = c[k];
    for (size_t j = 0; j < W; ++j) {
      const double t = u2[j] * b1[j] - b2[j] + ck;
      b2[j] = b1[j];
      b1[j] = t;
    }
  }
  for (size_t j = 0; j < W; ++j) out[j] = u[j] * b1[j] - b2[j] + c[0];
}

// Whole blocks of LANES, then one element at a time.
HEMLP_PLAIN_INLINE void clenshaw_loop(const double* u, size_t n, const double* c, size_t nc, double* out) {
  size_t i = 0;
  for (; i + LANES <= n; i += LANES) clenshaw_block<LANES>(u + i, c, nc, out + i);
  for (; i < n; ++i) clenshaw_block<1>(u + i, c, nc, out + i);
}

#if HEMLP_HAVE_AVX2_KERNELS
HEMLP_AVX2_FN void clenshaw_avx2(const double* u, size_t n, const double* c, size_t nc, double* out) {
  clenshaw_loop(u, n, c, nc, out);
}
#endif

#if HEMLP_HAVE_AVX512_KERNELS
HEMLP_AVX512_FN void clenshaw_avx512(const double* u, size_t n, const double* c, size_t nc, double* out) {
  clenshaw_loop(u, n, c, nc, out);
}
#endif

template <class In, class Out>
HEMLP_PLAIN_INLINE bool lookup_loop(const double* t, size_t points, double lo, double scale, double gain,
                                    double dom_lo, double dom_hi, const In* x, size_t n, Out* out) {
  const double last = static_cast<double>(points - 1);
  bool beyond = false;
  for (size_t i = 0; i < n; ++i) {
    const double xv = static_cast<double>(x[i]);
    beyond |= !(xv >= dom_lo && xv <= dom_hi);
    double f = (xv - lo) * scale;
    double cell = std::floor(f);
    cell = std::min(std::max(cell, 0.0), last);
    f -= cell;
    // NaN cells (NaN inputs) read cell 0; the caller replaces their outputs
    const size_t k = cell == cell ? static_cast<size_t>(cell) : 0;
    const double y = t[k];
    const double d = (t[k + 1] - y) * f;
    out[i] = static_cast<Out>(gain * (y + d));
  }
  return beyond;
}

#if HEMLP_HAVE_AVX2_KERNELS
template <class In, class Out>
HEMLP_AVX2_FN bool lookup_avx2(const double* t, size_t points, double lo, double scale, double gain, double dom_lo,
                               double dom_hi, const In* x, size_t n, Out* out) {
  return lookup_loop(t, points, lo, scale, gain, dom_lo, dom_hi, x, n, out);
}
#endif

#if HEMLP_HAVE_AVX512_KERNELS
template <class In, class Out>
HEMLP_AVX512_FN bool lookup_avx512(const double* t, size_t points, double lo, double scale, double gain,
                                   double dom_lo, double dom_hi, const In* x, size_t n, Out* out) {
  return lookup_loop(t, points, lo, scale, gain, dom_lo, dom_hi, x, n, out);
}
#endif

}  // namespace

void chebval_clenshaw(const double* u, size_t n, const double* c, size_t nc, double* out) {
  switch (ring::simd_path()) {
#if HEMLP_HAVE_AVX512_KERNELS
    case ring::SimdPath::Avx512:
      return clenshaw_avx512(u, n, c, nc, out);
#endif
#if HEMLP_HAVE_AVX2_KERNELS
    case ring::SimdPath::Avx2:
      return clenshaw_avx2(u, n, c, nc, out);
#endif
    default:
      return clenshaw_loop(u, n, c, nc, out);
  }
}

template <class In, class Out>
bool table_lookup(const double* table, size_t points, double lo, double scale, double gain, double dom_lo,
                  double dom_hi, const In* x, size_t n, Out* out) {
  switch (ring::simd_path()) {
#if HEMLP_HAVE_AVX512_KERNELS
    case ring::SimdPath::Avx512:
      return lookup_avx512(table, points, lo, scale, gain, dom_lo, dom_hi, x, n, out);
#endif
#if HEMLP_HAVE_AVX2_KERNELS
    case ring::SimdPath::Avx2:
      return lookup_avx2(table, points, lo, scale, gain, dom_lo, dom_hi, x, n, out);
#endif
    default:
      return lookup_loop(table, points, lo, scale, gain, dom_lo, dom_hi, x, n, out);
  }
}

template bool table_lookup<float, float>(const double*, size_t, double, double, double, double, double,
                                         const float*, size_t, float*);
template bool table_lookup<float, double>(const double*, size_t, double, double, double, double, double,
                                          const float*, size_t, double*);
template bool table_lookup<double, float>(const double*, size_t, double, double, double, double, double,
                                          const double*, size_t, float*);
template bool table_lookup<double, double>(const double*, size_t, double, double, double, double, double,
                                           const double*, size_t, double*);

}  // namespace hemlp::plain
