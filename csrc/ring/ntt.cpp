#include "ring/ntt.h"

#include <algorithm>

#include "ring/primes.h"
#include "ring/simd.h"

namespace hemlp::ring {

NTTTables::NTTTables(uint64_t q, int log_n) : q_(q), log_n_(log_n), n_(size_t(1) << log_n) {
  psi_ = minimal_primitive_root_2n(q, log_n);
  const uint64_t psi_inv = inv_mod(psi_, q);
  w_.resize(n_); wp_.resize(n_); iw_.resize(n_); iwp_.resize(n_);
  uint64_t p = 1, pi = 1;
  std::vector<uint64_t> pw(n_), ipw(n_);
  for (size_t i = 0; i < n_; ++i) {
    pw[i] = p; ipw[i] = pi;
    p = (uint64_t)((u128)p * psi_ % q);
    pi = (uint64_t)((u128)pi * psi_inv % q);
  }
  for (size_t i = 0; i < n_; ++i) {
    uint32_t r = bit_reverse((uint32_t)i, log_n);
    w_[i] = pw[r]; wp_[i] = shoup_precompute(w_[i], q);
    iw_[i] = ipw[r]; iwp_[i] = shoup_precompute(iw_[i], q);
  }
  n_inv_ = inv_mod(n_ % q, q);
  n_inv_p_ = shoup_precompute(n_inv_, q);
  // last inverse stage fused with the scaling by N^-1: its twiddle times N^-1
  iw1n_ = n_ > 1 ? (uint64_t)((u128)iw_[1] * n_inv_ % q) : n_inv_;
  iw1n_p_ = shoup_precompute(iw1n_, q);
  simd_ = log_n >= 4 ? (int)simd_path() : 0;
  // AVX2 / AVX-512 with q < 2^46: the double-precision kernels (exactness argument at forward_avx2_fp)
  fp_ = simd_ != (int)SimdPath::Scalar && q < (uint64_t(1) << 46) && log_n <= 17;
  if (fp_) {
    fw_.resize(n_); fwq_.resize(n_); fiw_.resize(n_); fiwq_.resize(n_);
    const double qd = (double)q;
    for (size_t i = 0; i < n_; ++i) {
      fw_[i] = (double)w_[i], fwq_[i] = fw_[i] / qd;
      fiw_[i] = (double)iw_[i], fiwq_[i] = fiw_[i] / qd;
    }
    fninv_[0] = (double)n_inv_, fninv_[1] = fninv_[0] / qd;
    fw1n_[0] = (double)iw1n_, fw1n_[1] = fw1n_[0] / qd;
    // the integer kernels never run this table (the path is fixed per process): same memory as before
    std::vector<uint64_t>().swap(w_), std::vector<uint64_t>().swap(wp_);
    std::vector<uint64_t>().swap(iw_), std::vector<uint64_t>().swap(iwp_);
  }
}

#if HEMLP_HAVE_AVX512_KERNELS
namespace {

using namespace avx512;

#define HEMLP_IDX(a, b, c, d, e, f, g, h) _mm512_setr_epi64(a, b, c, d, e, f, g, h)

// Harvey CT butterfly: X in [0, 4q) -> [0, 2q); returns X + T, X - T + 2q (both < 4q).
HEMLP_AVX512_FN inline void ct_bfly(__m512i& X, __m512i& Y, __m512i W, __m512i Wp, __m512i q, __m512i two_q) {
  X = reduce_once(X, two_q);
  const __m512i T = mul_shoup_lazy(Y, W, Wp, q);
  Y = _mm512_sub_epi64(_mm512_add_epi64(X, two_q), T);
  X = _mm512_add_epi64(X, T);
}

// GS butterfly: X, Y in [0, 2q) -> X + Y (reduced to [0, 2q)), (X - Y + 2q) W in [0, 2q).
HEMLP_AVX512_FN inline void gs_bfly(__m512i& X, __m512i& Y, __m512i W, __m512i Wp, __m512i q, __m512i two_q) {
  const __m512i D = _mm512_sub_epi64(_mm512_add_epi64(X, two_q), Y);
  X = reduce_once(_mm512_add_epi64(X, Y), two_q);
  Y = mul_shoup_lazy(D, W, Wp, q);
}

HEMLP_AVX512_FN void forward_avx512(uint64_t* a, size_t n, uint64_t qv, const uint64_t* w, const uint64_t* wp) {
  const __m512i q = _mm512_set1_epi64((long long)qv), two_q = _mm512_set1_epi64((long long)(2 * qv));
  size_t t = n;
  for (size_t m = 1; m < n / 8; m <<= 1) {  // stages with half-block t >= 8
    t >>= 1;
    for (size_t i = 0; i < m; ++i) {
      const __m512i W = _mm512_set1_epi64((long long)w[m + i]), Wp = _mm512_set1_epi64((long long)wp[m + i]);
      uint64_t* x = a + 2 * i * t;
      uint64_t* y = x + t;
      for (size_t j = 0; j < t; j += 8) {
        __m512i X = _mm512_loadu_si512(x + j), Y = _mm512_loadu_si512(y + j);
        ct_bfly(X, Y, W, Wp, q, two_q);
        _mm512_storeu_si512(x + j, X);
        _mm512_storeu_si512(y + j, Y);
      }
    }
  }
  // the last three stages (t = 4, 2, 1) inside each 16-coefficient chunk, in registers,
  // followed by the reduction of the output to [0, q)
  const __m512i i4x = HEMLP_IDX(0, 1, 2, 3, 8, 9, 10, 11), i4y = HEMLP_IDX(4, 5, 6, 7, 12, 13, 14, 15);
  const __m512i i2x = HEMLP_IDX(0, 1, 8, 9, 4, 5, 12, 13), i2y = HEMLP_IDX(2, 3, 10, 11, 6, 7, 14, 15);
  const __m512i i1x = HEMLP_IDX(0, 8, 2, 10, 4, 12, 6, 14), i1y = HEMLP_IDX(1, 9, 3, 11, 5, 13, 7, 15);
  const __m512i o0 = HEMLP_IDX(0, 8, 1, 9, 2, 10, 3, 11), o1 = HEMLP_IDX(4, 12, 5, 13, 6, 14, 7, 15);
  const __m512i w4 = HEMLP_IDX(0, 0, 0, 0, 1, 1, 1, 1), w2 = HEMLP_IDX(0, 0, 1, 1, 2, 2, 3, 3);
  const uint64_t *w4p = w + n / 8, *wp4p = wp + n / 8;
  const uint64_t *w2p = w + n / 4, *wp2p = wp + n / 4;
  const uint64_t *w1p = w + n / 2, *wp1p = wp + n / 2;
  for (size_t c = 0; c < n; c += 16) {
    const __m512i v0 = _mm512_loadu_si512(a + c), v1 = _mm512_loadu_si512(a + c + 8);
    __m512i X = _mm512_permutex2var_epi64(v0, i4x, v1), Y = _mm512_permutex2var_epi64(v0, i4y, v1);
    ct_bfly(X, Y, _mm512_permutexvar_epi64(w4, _mm512_castsi128_si512(_mm_loadu_si128((const __m128i*)(w4p + c / 8)))),
            _mm512_permutexvar_epi64(w4, _mm512_castsi128_si512(_mm_loadu_si128((const __m128i*)(wp4p + c / 8)))),
            q, two_q);
    __m512i X2 = _mm512_permutex2var_epi64(X, i2x, Y), Y2 = _mm512_permutex2var_epi64(X, i2y, Y);
    ct_bfly(X2, Y2,
            _mm512_permutexvar_epi64(w2, _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)(w2p + c / 4)))),
            _mm512_permutexvar_epi64(w2, _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)(wp2p + c / 4)))),
            q, two_q);
    __m512i X1 = _mm512_permutex2var_epi64(X2, i1x, Y2), Y1 = _mm512_permutex2var_epi64(X2, i1y, Y2);
    ct_bfly(X1, Y1, _mm512_loadu_si512(w1p + c / 2), _mm512_loadu_si512(wp1p + c / 2), q, two_q);
    X1 = reduce_once(reduce_once(X1, two_q), q);
    Y1 = reduce_once(reduce_once(Y1, two_q), q);
    _mm512_storeu_si512(a + c, _mm512_permutex2var_epi64(X1, o0, Y1));
    _mm512_storeu_si512(a + c + 8, _mm512_permutex2var_epi64(X1, o1, Y1));
  }
}

HEMLP_AVX512_FN void inverse_avx512(uint64_t* a, size_t n, uint64_t qv, const uint64_t* iw, const uint64_t* iwp,
                                    uint64_t ninv, uint64_t ninvp, uint64_t w1n, uint64_t w1np) {
  const __m512i q = _mm512_set1_epi64((long long)qv), two_q = _mm512_set1_epi64((long long)(2 * qv));
  // the first three stages (t = 1, 2, 4) inside each 16-coefficient chunk
  const __m512i i1x = HEMLP_IDX(0, 2, 4, 6, 8, 10, 12, 14), i1y = HEMLP_IDX(1, 3, 5, 7, 9, 11, 13, 15);
  const __m512i i2x = HEMLP_IDX(0, 8, 2, 10, 4, 12, 6, 14), i2y = HEMLP_IDX(1, 9, 3, 11, 5, 13, 7, 15);
  const __m512i i4x = HEMLP_IDX(0, 1, 8, 9, 4, 5, 12, 13), i4y = HEMLP_IDX(2, 3, 10, 11, 6, 7, 14, 15);
  const __m512i o0 = HEMLP_IDX(0, 1, 2, 3, 8, 9, 10, 11), o1 = HEMLP_IDX(4, 5, 6, 7, 12, 13, 14, 15);
  const __m512i w4 = HEMLP_IDX(0, 0, 0, 0, 1, 1, 1, 1), w2 = HEMLP_IDX(0, 0, 1, 1, 2, 2, 3, 3);
  const uint64_t *w1p = iw + n / 2, *wp1p = iwp + n / 2;
  const uint64_t *w2p = iw + n / 4, *wp2p = iwp + n / 4;
  const uint64_t *w4p = iw + n / 8, *wp4p = iwp + n / 8;
  for (size_t c = 0; c < n; c += 16) {
    const __m512i v0 = _mm512_loadu_si512(a + c), v1 = _mm512_loadu_si512(a + c + 8);
    __m512i X = _mm512_permutex2var_epi64(v0, i1x, v1), Y = _mm512_permutex2var_epi64(v0, i1y, v1);
    gs_bfly(X, Y, _mm512_loadu_si512(w1p + c / 2), _mm512_loadu_si512(wp1p + c / 2), q, two_q);
    __m512i X2 = _mm512_permutex2var_epi64(X, i2x, Y), Y2 = _mm512_permutex2var_epi64(X, i2y, Y);
    gs_bfly(X2, Y2,
            _mm512_permutexvar_epi64(w2, _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)(w2p + c / 4)))),
            _mm512_permutexvar_epi64(w2, _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)(wp2p + c / 4)))),
            q, two_q);
    __m512i X4 = _mm512_permutex2var_epi64(X2, i4x, Y2), Y4 = _mm512_permutex2var_epi64(X2, i4y, Y2);
    gs_bfly(X4, Y4, _mm512_permutexvar_epi64(w4, _mm512_castsi128_si512(_mm_loadu_si128((const __m128i*)(w4p + c / 8)))),
            _mm512_permutexvar_epi64(w4, _mm512_castsi128_si512(_mm_loadu_si128((const __m128i*)(wp4p + c / 8)))),
            q, two_q);
    _mm512_storeu_si512(a + c, _mm512_permutex2var_epi64(X4, o0, Y4));
    _mm512_storeu_si512(a + c + 8, _mm512_permutex2var_epi64(X4, o1, Y4));
  }
  size_t t = 8;
  for (size_t h = n / 16; h > 1; h >>= 1) {  // stages with t >= 8, except the last
    for (size_t i = 0; i < h; ++i) {
      const __m512i W = _mm512_set1_epi64((long long)iw[h + i]), Wp = _mm512_set1_epi64((long long)iwp[h + i]);
      uint64_t* x = a + 2 * i * t;
      uint64_t* y = x + t;
      for (size_t j = 0; j < t; j += 8) {
        __m512i X = _mm512_loadu_si512(x + j), Y = _mm512_loadu_si512(y + j);
        gs_bfly(X, Y, W, Wp, q, two_q);
        _mm512_storeu_si512(x + j, X);
        _mm512_storeu_si512(y + j, Y);
      }
    }
    t <<= 1;
  }
  // last stage (t = n/2) fused with the scaling by N^-1; output in [0, q)
  const __m512i Ni = _mm512_set1_epi64((long long)ninv), Nip = _mm512_set1_epi64((long long)ninvp);
  const __m512i W = _mm512_set1_epi64((long long)w1n), Wp = _mm512_set1_epi64((long long)w1np);
  uint64_t* x = a;
  uint64_t* y = a + t;
  for (size_t j = 0; j < t; j += 8) {
    const __m512i X = _mm512_loadu_si512(x + j), Y = _mm512_loadu_si512(y + j);
    const __m512i S = _mm512_add_epi64(X, Y), D = _mm512_sub_epi64(_mm512_add_epi64(X, two_q), Y);
    _mm512_storeu_si512(x + j, reduce_once(mul_shoup_lazy(S, Ni, Nip, q), q));
    _mm512_storeu_si512(y + j, reduce_once(mul_shoup_lazy(D, W, Wp, q), q));
  }
}

// Double-precision twins of forward_avx512 / inverse_avx512 for q < 2^46 (NTTTables::fp_; the bounds
// are those of the AVX2 kernels forward_avx2_fp / inverse_avx2_fp below).
HEMLP_AVX512_FN inline void ct_fp8(const FpMod8& F, __m512d& X, __m512d& Y, __m512d W, __m512d Wq) {
  const __m512d T = F.mul(Y, W, Wq);
  Y = _mm512_sub_pd(X, T);
  X = _mm512_add_pd(X, T);
}

template <bool kReduce>
HEMLP_AVX512_FN inline void gs_fp8(const FpMod8& F, __m512d& X, __m512d& Y, __m512d W, __m512d Wq) {
  const __m512d D = _mm512_sub_pd(X, Y);
  X = _mm512_add_pd(X, Y);
  if (kReduce) X = F.reduce(X);
  Y = F.mul(D, W, Wq);
}

// (w[i] x4, w[i+1] x4) and (w[i] x2, ..., w[i+3] x2)
HEMLP_AVX512_FN inline __m512d quads_pd(const double* w, __m512i idx) {
  return _mm512_permutexvar_pd(idx, _mm512_castpd128_pd512(_mm_loadu_pd(w)));
}
HEMLP_AVX512_FN inline __m512d pairs8_pd(const double* w, __m512i idx) {
  return _mm512_permutexvar_pd(idx, _mm512_castpd256_pd512(_mm256_loadu_pd(w)));
}

HEMLP_AVX512_FN void forward_avx512_fp(uint64_t* a, size_t n, uint64_t qv, const double* w, const double* wq) {
  const FpMod8 F(qv);
  double* d = reinterpret_cast<double*>(a);
  size_t t = n;
  for (size_t m = 1; m < n / 8; m <<= 1) {  // stages with half-block t >= 8; the first converts its input
    t >>= 1;
    for (size_t i = 0; i < m; ++i) {
      const __m512d W = _mm512_set1_pd(w[m + i]), Wq = _mm512_set1_pd(wq[m + i]);
      double* x = d + 2 * i * t;
      double* y = x + t;
      for (size_t j = 0; j < t; j += 8) {
        __m512d X, Y;
        if (m == 1) {
          X = F.from_u64(_mm512_loadu_si512(a + j)), Y = F.from_u64(_mm512_loadu_si512(a + t + j));
        } else {
          X = _mm512_loadu_pd(x + j), Y = _mm512_loadu_pd(y + j);
        }
        ct_fp8(F, X, Y, W, Wq);
        _mm512_storeu_pd(x + j, X);
        _mm512_storeu_pd(y + j, Y);
      }
    }
  }
  const __m512i i4x = HEMLP_IDX(0, 1, 2, 3, 8, 9, 10, 11), i4y = HEMLP_IDX(4, 5, 6, 7, 12, 13, 14, 15);
  const __m512i i2x = HEMLP_IDX(0, 1, 8, 9, 4, 5, 12, 13), i2y = HEMLP_IDX(2, 3, 10, 11, 6, 7, 14, 15);
  const __m512i i1x = HEMLP_IDX(0, 8, 2, 10, 4, 12, 6, 14), i1y = HEMLP_IDX(1, 9, 3, 11, 5, 13, 7, 15);
  const __m512i o0 = HEMLP_IDX(0, 8, 1, 9, 2, 10, 3, 11), o1 = HEMLP_IDX(4, 12, 5, 13, 6, 14, 7, 15);
  const __m512i w4 = HEMLP_IDX(0, 0, 0, 0, 1, 1, 1, 1), w2 = HEMLP_IDX(0, 0, 1, 1, 2, 2, 3, 3);
  const double *w4p = w + n / 8, *wq4p = wq + n / 8;
  const double *w2p = w + n / 4, *wq2p = wq + n / 4;
  const double *w1p = w + n / 2, *wq1p = wq + n / 2;
  for (size_t c = 0; c < n; c += 16) {
    const __m512d v0 = _mm512_loadu_pd(d + c), v1 = _mm512_loadu_pd(d + c + 8);
    __m512d X = _mm512_permutex2var_pd(v0, i4x, v1), Y = _mm512_permutex2var_pd(v0, i4y, v1);
    ct_fp8(F, X, Y, quads_pd(w4p + c / 8, w4), quads_pd(wq4p + c / 8, w4));
    __m512d X2 = _mm512_permutex2var_pd(X, i2x, Y), Y2 = _mm512_permutex2var_pd(X, i2y, Y);
    ct_fp8(F, X2, Y2, pairs8_pd(w2p + c / 4, w2), pairs8_pd(wq2p + c / 4, w2));
    __m512d X1 = _mm512_permutex2var_pd(X2, i1x, Y2), Y1 = _mm512_permutex2var_pd(X2, i1y, Y2);
    ct_fp8(F, X1, Y1, _mm512_loadu_pd(w1p + c / 2), _mm512_loadu_pd(wq1p + c / 2));
    const __m512i Xi = F.to_u64(X1), Yi = F.to_u64(Y1);
    _mm512_storeu_si512(a + c, _mm512_permutex2var_epi64(Xi, o0, Yi));
    _mm512_storeu_si512(a + c + 8, _mm512_permutex2var_epi64(Xi, o1, Yi));
  }
}

HEMLP_AVX512_FN void inverse_avx512_fp(uint64_t* a, size_t n, uint64_t qv, const double* iw, const double* iwq,
                                       const double* ninv, const double* w1n) {
  const FpMod8 F(qv);
  double* d = reinterpret_cast<double*>(a);
  const __m512i i1x = HEMLP_IDX(0, 2, 4, 6, 8, 10, 12, 14), i1y = HEMLP_IDX(1, 3, 5, 7, 9, 11, 13, 15);
  const __m512i i2x = HEMLP_IDX(0, 8, 2, 10, 4, 12, 6, 14), i2y = HEMLP_IDX(1, 9, 3, 11, 5, 13, 7, 15);
  const __m512i i4x = HEMLP_IDX(0, 1, 8, 9, 4, 5, 12, 13), i4y = HEMLP_IDX(2, 3, 10, 11, 6, 7, 14, 15);
  const __m512i o0 = HEMLP_IDX(0, 1, 2, 3, 8, 9, 10, 11), o1 = HEMLP_IDX(4, 5, 6, 7, 12, 13, 14, 15);
  const __m512i w4 = HEMLP_IDX(0, 0, 0, 0, 1, 1, 1, 1), w2 = HEMLP_IDX(0, 0, 1, 1, 2, 2, 3, 3);
  const double *w1p = iw + n / 2, *wq1p = iwq + n / 2;
  const double *w2p = iw + n / 4, *wq2p = iwq + n / 4;
  const double *w4p = iw + n / 8, *wq4p = iwq + n / 8;
  for (size_t c = 0; c < n; c += 16) {
    const __m512d v0 = F.from_u64(_mm512_loadu_si512(a + c)), v1 = F.from_u64(_mm512_loadu_si512(a + c + 8));
    __m512d X = _mm512_permutex2var_pd(v0, i1x, v1), Y = _mm512_permutex2var_pd(v0, i1y, v1);
    gs_fp8<false>(F, X, Y, _mm512_loadu_pd(w1p + c / 2), _mm512_loadu_pd(wq1p + c / 2));
    __m512d X2 = _mm512_permutex2var_pd(X, i2x, Y), Y2 = _mm512_permutex2var_pd(X, i2y, Y);
    gs_fp8<false>(F, X2, Y2, pairs8_pd(w2p + c / 4, w2), pairs8_pd(wq2p + c / 4, w2));
    __m512d X4 = _mm512_permutex2var_pd(X2, i4x, Y2), Y4 = _mm512_permutex2var_pd(X2, i4y, Y2);
    gs_fp8<false>(F, X4, Y4, quads_pd(w4p + c / 8, w4), quads_pd(wq4p + c / 8, w4));
    _mm512_storeu_pd(d + c, _mm512_permutex2var_pd(X4, o0, Y4));
    _mm512_storeu_pd(d + c + 8, _mm512_permutex2var_pd(X4, o1, Y4));
  }
  const double qd = (double)qv, lim = 562949953421312.0;  // 2^49, as inverse_avx2_fp
  double bound = 8 * qd;
  size_t t = 8;
  for (size_t h = n / 16; h > 1; h >>= 1) {
    const bool red = 2 * bound > lim;
    bound = red ? std::max(0.5 * qd + 1, 0.5625 * qd) : std::max(2 * bound, 0.5625 * qd);
    for (size_t i = 0; i < h; ++i) {
      const __m512d W = _mm512_set1_pd(iw[h + i]), Wq = _mm512_set1_pd(iwq[h + i]);
      double* x = d + 2 * i * t;
      double* y = x + t;
      for (size_t j = 0; j < t; j += 8) {
        __m512d X = _mm512_loadu_pd(x + j), Y = _mm512_loadu_pd(y + j);
        if (red)
          gs_fp8<true>(F, X, Y, W, Wq);
        else
          gs_fp8<false>(F, X, Y, W, Wq);
        _mm512_storeu_pd(x + j, X);
        _mm512_storeu_pd(y + j, Y);
      }
    }
    t <<= 1;
  }
  const __m512d Ni = _mm512_set1_pd(ninv[0]), Niq = _mm512_set1_pd(ninv[1]);
  const __m512d W = _mm512_set1_pd(w1n[0]), Wq = _mm512_set1_pd(w1n[1]);
  double* x = d;
  double* y = d + t;
  for (size_t j = 0; j < t; j += 8) {
    const __m512d X = _mm512_loadu_pd(x + j), Y = _mm512_loadu_pd(y + j);
    _mm512_storeu_si512(a + j, F.to_u64(F.mul(_mm512_add_pd(X, Y), Ni, Niq)));
    _mm512_storeu_si512(a + t + j, F.to_u64(F.mul(_mm512_sub_pd(X, Y), W, Wq)));
  }
}

#undef HEMLP_IDX

}  // namespace
#endif

#if HEMLP_HAVE_AVX2_KERNELS
namespace {

using namespace avx2;

// Harvey CT butterfly, 4 lanes: X in [0, 4q) -> [0, 2q); returns X + T, X - T + 2q (both < 4q).
HEMLP_AVX2_FN inline void ct_bfly2(__m256i& X, __m256i& Y, __m256i W, __m256i Wp, __m256i q, __m256i two_q) {
  X = avx2::reduce_once(X, two_q);
  const __m256i T = avx2::mul_shoup_lazy(Y, W, Wp, q);
  Y = _mm256_sub_epi64(_mm256_add_epi64(X, two_q), T);
  X = _mm256_add_epi64(X, T);
}

// GS butterfly: X, Y in [0, 2q) -> X + Y (reduced to [0, 2q)), (X - Y + 2q) W in [0, 2q).
HEMLP_AVX2_FN inline void gs_bfly2(__m256i& X, __m256i& Y, __m256i W, __m256i Wp, __m256i q, __m256i two_q) {
  const __m256i D = _mm256_sub_epi64(_mm256_add_epi64(X, two_q), Y);
  X = avx2::reduce_once(_mm256_add_epi64(X, Y), two_q);
  Y = avx2::mul_shoup_lazy(D, W, Wp, q);
}

// (w[i], w[i], w[i+1], w[i+1])
HEMLP_AVX2_FN inline __m256i pairs(const uint64_t* w) {
  return _mm256_permute4x64_epi64(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i*)w)), 0x50);
}

HEMLP_AVX2_FN void forward_avx2(uint64_t* a, size_t n, uint64_t qv, const uint64_t* w, const uint64_t* wp) {
  const __m256i q = set1(qv), two_q = set1(2 * qv);
  size_t t = n;
  for (size_t m = 1; m < n / 8; m <<= 1) {  // stages with half-block t >= 8
    t >>= 1;
    for (size_t i = 0; i < m; ++i) {
      const __m256i W = set1(w[m + i]), Wp = set1(wp[m + i]);
      uint64_t* x = a + 2 * i * t;
      uint64_t* y = x + t;
      for (size_t j = 0; j < t; j += 4) {
        __m256i X = load(x + j), Y = load(y + j);
        ct_bfly2(X, Y, W, Wp, q, two_q);
        store(x + j, X);
        store(y + j, Y);
      }
    }
  }
  // the last three stages (t = 4, 2, 1) inside each 8-coefficient chunk, in registers,
  // followed by the reduction of the output to [0, q)
  const uint64_t *w4p = w + n / 8, *wp4p = wp + n / 8;
  const uint64_t *w2p = w + n / 4, *wp2p = wp + n / 4;
  const uint64_t *w1p = w + n / 2, *wp1p = wp + n / 2;
  for (size_t c = 0; c < n; c += 8) {
    __m256i X = load(a + c), Y = load(a + c + 4);  // t = 4: (a0..a3), (a4..a7)
    ct_bfly2(X, Y, set1(w4p[c / 8]), set1(wp4p[c / 8]), q, two_q);
    // t = 2: (a0 a1 a4 a5), (a2 a3 a6 a7)
    __m256i X2 = _mm256_permute2x128_si256(X, Y, 0x20), Y2 = _mm256_permute2x128_si256(X, Y, 0x31);
    ct_bfly2(X2, Y2, pairs(w2p + c / 4), pairs(wp2p + c / 4), q, two_q);
    // t = 1: (a0 a2 a4 a6), (a1 a3 a5 a7)
    __m256i X1 = _mm256_unpacklo_epi64(X2, Y2), Y1 = _mm256_unpackhi_epi64(X2, Y2);
    ct_bfly2(X1, Y1, load(w1p + c / 2), load(wp1p + c / 2), q, two_q);
    X1 = avx2::reduce_once(avx2::reduce_once(X1, two_q), q);
    Y1 = avx2::reduce_once(avx2::reduce_once(Y1, two_q), q);
    const __m256i lo = _mm256_unpacklo_epi64(X1, Y1), hi = _mm256_unpackhi_epi64(X1, Y1);  // (a0 a1 a4 a5), (a2 a3 a6 a7)
    store(a + c, _mm256_permute2x128_si256(lo, hi, 0x20));
    store(a + c + 4, _mm256_permute2x128_si256(lo, hi, 0x31));
  }
}

HEMLP_AVX2_FN void inverse_avx2(uint64_t* a, size_t n, uint64_t qv, const uint64_t* iw, const uint64_t* iwp,
                                uint64_t ninv, uint64_t ninvp, uint64_t w1n, uint64_t w1np) {
  const __m256i q = set1(qv), two_q = set1(2 * qv);
  // the first three stages (t = 1, 2, 4) inside each 8-coefficient chunk
  const uint64_t *w1p = iw + n / 2, *wp1p = iwp + n / 2;
  const uint64_t *w2p = iw + n / 4, *wp2p = iwp + n / 4;
  const uint64_t *w4p = iw + n / 8, *wp4p = iwp + n / 8;
  for (size_t c = 0; c < n; c += 8) {
    const __m256i v0 = load(a + c), v1 = load(a + c + 4);
    const __m256i lo = _mm256_permute2x128_si256(v0, v1, 0x20), hi = _mm256_permute2x128_si256(v0, v1, 0x31);
    __m256i X = _mm256_unpacklo_epi64(lo, hi), Y = _mm256_unpackhi_epi64(lo, hi);  // (a0 a2 a4 a6), (a1 a3 a5 a7)
    gs_bfly2(X, Y, load(w1p + c / 2), load(wp1p + c / 2), q, two_q);
    __m256i X2 = _mm256_unpacklo_epi64(X, Y), Y2 = _mm256_unpackhi_epi64(X, Y);  // (a0 a1 a4 a5), (a2 a3 a6 a7)
    gs_bfly2(X2, Y2, pairs(w2p + c / 4), pairs(wp2p + c / 4), q, two_q);
    __m256i X4 = _mm256_permute2x128_si256(X2, Y2, 0x20), Y4 = _mm256_permute2x128_si256(X2, Y2, 0x31);
    gs_bfly2(X4, Y4, set1(w4p[c / 8]), set1(wp4p[c / 8]), q, two_q);
    store(a + c, X4);
    store(a + c + 4, Y4);
  }
  size_t t = 8;
  for (size_t h = n / 16; h > 1; h >>= 1) {  // stages with t >= 8, except the last
    for (size_t i = 0; i < h; ++i) {
      const __m256i W = set1(iw[h + i]), Wp = set1(iwp[h + i]);
      uint64_t* x = a + 2 * i * t;
      uint64_t* y = x + t;
      for (size_t j = 0; j < t; j += 4) {
        __m256i X = load(x + j), Y = load(y + j);
        gs_bfly2(X, Y, W, Wp, q, two_q);
        store(x + j, X);
        store(y + j, Y);
      }
    }
    t <<= 1;
  }
  // last stage (t = n/2) fused with the scaling by N^-1; output in [0, q)
  const __m256i Ni = set1(ninv), Nip = set1(ninvp), W = set1(w1n), Wp = set1(w1np);
  uint64_t* x = a;
  uint64_t* y = a + t;
  for (size_t j = 0; j < t; j += 4) {
    const __m256i X = load(x + j), Y = load(y + j);
    const __m256i S = _mm256_add_epi64(X, Y), D = _mm256_sub_epi64(_mm256_add_epi64(X, two_q), Y);
    store(x + j, avx2::reduce_once(avx2::mul_shoup_lazy(S, Ni, Nip, q), q));
    store(y + j, avx2::reduce_once(avx2::mul_shoup_lazy(D, W, Wp, q), q));
  }
}

// ---- AVX2 double-precision kernels for q < 2^46 (NTTTables::fp_; arithmetic in avx2::FpMod) --------
// A twiddle product costs 6 FMA-unit ops instead of ~22 integer ones, and values need no reduction
// between forward stages: FpMod::mul gives the representative of y w in [-0.5625 q, 0.5625 q] for
// |y| <= 2^50, so every forward stage adds at most 0.5625 q to the bound and after log_n <= 17 stages
// |v| < q (1 + 0.5625 * 17) < 2^50 for q < 2^46. Inverse: sums double per stage and are brought back
// to |v| <= q/2 + 1 before they pass 2^49. The output is mapped to [0, q): the same integers as the
// scalar and integer SIMD kernels (canonical residues), bit for bit.
HEMLP_AVX2_FN inline __m256d bcast(const double* p) { return _mm256_broadcast_sd(p); }
// (w[i], w[i], w[i+1], w[i+1])
HEMLP_AVX2_FN inline __m256d pairs_pd(const double* w) {
  return _mm256_permute4x64_pd(_mm256_castpd128_pd256(_mm_loadu_pd(w)), 0x50);
}

// CT butterfly: X + T, X - T with T = Y W mod q (signed representatives, no reduction)
HEMLP_AVX2_FN inline void ct_fp(const FpMod& F, __m256d& X, __m256d& Y, __m256d W, __m256d Wq) {
  const __m256d T = F.mul(Y, W, Wq);
  Y = _mm256_sub_pd(X, T);
  X = _mm256_add_pd(X, T);
}

HEMLP_AVX2_FN void forward_avx2_fp(uint64_t* a, size_t n, uint64_t qv, const double* w, const double* wq) {
  const FpMod F(qv);
  double* d = reinterpret_cast<double*>(a);  // the limb holds doubles between the first and the last stage
  size_t t = n;
  for (size_t m = 1; m < n / 8; m <<= 1) {  // stages with half-block t >= 8; the first converts its input
    t >>= 1;
    for (size_t i = 0; i < m; ++i) {
      const __m256d W = bcast(w + m + i), Wq = bcast(wq + m + i);
      double* x = d + 2 * i * t;
      double* y = x + t;
      if (m == 1) {
        for (size_t j = 0; j < t; j += 4) {
          __m256d X = F.from_u64(load(a + j)), Y = F.from_u64(load(a + t + j));
          ct_fp(F, X, Y, W, Wq);
          _mm256_storeu_pd(x + j, X);
          _mm256_storeu_pd(y + j, Y);
        }
        continue;
      }
      for (size_t j = 0; j < t; j += 4) {
        __m256d X = _mm256_loadu_pd(x + j), Y = _mm256_loadu_pd(y + j);
        ct_fp(F, X, Y, W, Wq);
        _mm256_storeu_pd(x + j, X);
        _mm256_storeu_pd(y + j, Y);
      }
    }
  }
  // the last three stages (t = 4, 2, 1) inside each 8-coefficient chunk, in registers, then [0, q) integers
  const double *w4p = w + n / 8, *wq4p = wq + n / 8;
  const double *w2p = w + n / 4, *wq2p = wq + n / 4;
  const double *w1p = w + n / 2, *wq1p = wq + n / 2;
  for (size_t c = 0; c < n; c += 8) {
    __m256d X = _mm256_loadu_pd(d + c), Y = _mm256_loadu_pd(d + c + 4);
    ct_fp(F, X, Y, bcast(w4p + c / 8), bcast(wq4p + c / 8));
    __m256d X2 = _mm256_permute2f128_pd(X, Y, 0x20), Y2 = _mm256_permute2f128_pd(X, Y, 0x31);
    ct_fp(F, X2, Y2, pairs_pd(w2p + c / 4), pairs_pd(wq2p + c / 4));
    __m256d X1 = _mm256_unpacklo_pd(X2, Y2), Y1 = _mm256_unpackhi_pd(X2, Y2);
    ct_fp(F, X1, Y1, _mm256_loadu_pd(w1p + c / 2), _mm256_loadu_pd(wq1p + c / 2));
    const __m256i Xi = F.to_u64(X1), Yi = F.to_u64(Y1);
    const __m256i lo = _mm256_unpacklo_epi64(Xi, Yi), hi = _mm256_unpackhi_epi64(Xi, Yi);
    store(a + c, _mm256_permute2x128_si256(lo, hi, 0x20));
    store(a + c + 4, _mm256_permute2x128_si256(lo, hi, 0x31));
  }
}

// GS butterfly: X + Y (brought back to |v| <= q/2 + 1 when kReduce), (X - Y) W mod q
template <bool kReduce>
HEMLP_AVX2_FN inline void gs_fp(const FpMod& F, __m256d& X, __m256d& Y, __m256d W, __m256d Wq) {
  const __m256d D = _mm256_sub_pd(X, Y);
  X = _mm256_add_pd(X, Y);
  if (kReduce) X = F.reduce(X);
  Y = F.mul(D, W, Wq);
}

HEMLP_AVX2_FN void inverse_avx2_fp(uint64_t* a, size_t n, uint64_t qv, const double* iw, const double* iwq,
                                   const double* ninv, const double* w1n) {
  const FpMod F(qv);
  double* d = reinterpret_cast<double*>(a);
  // the first three stages (t = 1, 2, 4) inside each 8-coefficient chunk: inputs in [0, q), outputs < 8 q
  const double *w1p = iw + n / 2, *wq1p = iwq + n / 2;
  const double *w2p = iw + n / 4, *wq2p = iwq + n / 4;
  const double *w4p = iw + n / 8, *wq4p = iwq + n / 8;
  for (size_t c = 0; c < n; c += 8) {
    const __m256i v0 = load(a + c), v1 = load(a + c + 4);
    const __m256i lo = _mm256_permute2x128_si256(v0, v1, 0x20), hi = _mm256_permute2x128_si256(v0, v1, 0x31);
    __m256d X = F.from_u64(_mm256_unpacklo_epi64(lo, hi)), Y = F.from_u64(_mm256_unpackhi_epi64(lo, hi));
    gs_fp<false>(F, X, Y, _mm256_loadu_pd(w1p + c / 2), _mm256_loadu_pd(wq1p + c / 2));
    __m256d X2 = _mm256_unpacklo_pd(X, Y), Y2 = _mm256_unpackhi_pd(X, Y);
    gs_fp<false>(F, X2, Y2, pairs_pd(w2p + c / 4), pairs_pd(wq2p + c / 4));
    __m256d X4 = _mm256_permute2f128_pd(X2, Y2, 0x20), Y4 = _mm256_permute2f128_pd(X2, Y2, 0x31);
    gs_fp<false>(F, X4, Y4, bcast(w4p + c / 8), bcast(wq4p + c / 8));
    _mm256_storeu_pd(d + c, X4);
    _mm256_storeu_pd(d + c + 4, Y4);
  }
  // later stages: the sums are reduced in the stage whose doubled bound would pass 2^49
  const double qd = (double)qv, lim = 562949953421312.0;  // 2^49
  double bound = 8 * qd;
  size_t t = 8;
  for (size_t h = n / 16; h > 1; h >>= 1) {  // stages with t >= 8, except the last
    const bool red = 2 * bound > lim;
    bound = red ? std::max(0.5 * qd + 1, 0.5625 * qd) : std::max(2 * bound, 0.5625 * qd);
    for (size_t i = 0; i < h; ++i) {
      const __m256d W = bcast(iw + h + i), Wq = bcast(iwq + h + i);
      double* x = d + 2 * i * t;
      double* y = x + t;
      for (size_t j = 0; j < t; j += 4) {
        __m256d X = _mm256_loadu_pd(x + j), Y = _mm256_loadu_pd(y + j);
        if (red)
          gs_fp<true>(F, X, Y, W, Wq);
        else
          gs_fp<false>(F, X, Y, W, Wq);
        _mm256_storeu_pd(x + j, X);
        _mm256_storeu_pd(y + j, Y);
      }
    }
    t <<= 1;
  }
  // last stage (t = n/2) fused with the scaling by N^-1 (inputs <= 2^49: sums <= 2^50); output in [0, q)
  const __m256d Ni = bcast(ninv), Niq = bcast(ninv + 1), W = bcast(w1n), Wq = bcast(w1n + 1);
  double* x = d;
  double* y = d + t;
  for (size_t j = 0; j < t; j += 4) {
    const __m256d X = _mm256_loadu_pd(x + j), Y = _mm256_loadu_pd(y + j);
    store(a + j, F.to_u64(F.mul(_mm256_add_pd(X, Y), Ni, Niq)));
    store(a + t + j, F.to_u64(F.mul(_mm256_sub_pd(X, Y), W, Wq)));
  }
}

}  // namespace
#endif

void NTTTables::forward(uint64_t* a) const {
#if HEMLP_HAVE_AVX512_KERNELS
  if (simd_ == (int)SimdPath::Avx512) {
    if (fp_) return forward_avx512_fp(a, n_, q_, fw_.data(), fwq_.data());
    return forward_avx512(a, n_, q_, w_.data(), wp_.data());
  }
#endif
#if HEMLP_HAVE_AVX2_KERNELS
  if (simd_ == (int)SimdPath::Avx2) {
    if (fp_) return forward_avx2_fp(a, n_, q_, fw_.data(), fwq_.data());
    return forward_avx2(a, n_, q_, w_.data(), wp_.data());
  }
#endif
  const uint64_t q = q_, two_q = 2 * q;
  size_t t = n_;
  size_t m = 1;
  for (; m < n_ / 4; m <<= 1) {  // stages with t >= 4: four butterflies per iteration
    t >>= 1;
    for (size_t i = 0; i < m; ++i) {
      const uint64_t W = w_[m + i], Wp = wp_[m + i];
      uint64_t* x = a + 2 * i * t;
      uint64_t* y = x + t;
      for (size_t j = 0; j < t; j += 4) {
#define HEMLP_BF(k)                                                   \
  {                                                                   \
    uint64_t X = x[j + k];                                            \
    X = X >= two_q ? X - two_q : X;                                   \
    const uint64_t T = mul_shoup_lazy(y[j + k], W, Wp, q);            \
    x[j + k] = X + T;                                                 \
    y[j + k] = X - T + two_q;                                         \
  }
        HEMLP_BF(0) HEMLP_BF(1) HEMLP_BF(2) HEMLP_BF(3)
#undef HEMLP_BF
      }
    }
  }
  // stage t = 2: two butterflies per block
  for (size_t i = 0; n_ >= 4 && i < m; ++i) {
    const uint64_t W = w_[m + i], Wp = wp_[m + i];
    uint64_t* x = a + 4 * i;
    for (int k = 0; k < 2; ++k) {
      uint64_t X = x[k];
      X = X >= two_q ? X - two_q : X;
      const uint64_t T = mul_shoup_lazy(x[k + 2], W, Wp, q);
      x[k] = X + T;
      x[k + 2] = X - T + two_q;
    }
  }
  // last stage (t = 1) with the reduction of the output to [0, q)
  m = n_ / 2;
  for (size_t i = 0; i < m; ++i) {
    uint64_t X = a[2 * i];
    X = X >= two_q ? X - two_q : X;
    const uint64_t T = mul_shoup_lazy(a[2 * i + 1], w_[m + i], wp_[m + i], q);
    uint64_t x = X + T, y = X - T + two_q;
    x = x >= two_q ? x - two_q : x;
    y = y >= two_q ? y - two_q : y;
    a[2 * i] = x >= q ? x - q : x;
    a[2 * i + 1] = y >= q ? y - q : y;
  }
}

void NTTTables::inverse(uint64_t* a) const {
#if HEMLP_HAVE_AVX512_KERNELS
  if (simd_ == (int)SimdPath::Avx512) {
    if (fp_) return inverse_avx512_fp(a, n_, q_, fiw_.data(), fiwq_.data(), fninv_, fw1n_);
    return inverse_avx512(a, n_, q_, iw_.data(), iwp_.data(), n_inv_, n_inv_p_, iw1n_, iw1n_p_);
  }
#endif
#if HEMLP_HAVE_AVX2_KERNELS
  if (simd_ == (int)SimdPath::Avx2) {
    if (fp_) return inverse_avx2_fp(a, n_, q_, fiw_.data(), fiwq_.data(), fninv_, fw1n_);
    return inverse_avx2(a, n_, q_, iw_.data(), iwp_.data(), n_inv_, n_inv_p_, iw1n_, iw1n_p_);
  }
#endif
  const uint64_t q = q_, two_q = 2 * q;
#define HEMLP_GS(xp, yp, W, Wp)                    \
  {                                                \
    const uint64_t X = (xp), Y = (yp);             \
    const uint64_t U = X + Y;                      \
    (xp) = U >= two_q ? U - two_q : U;             \
    (yp) = mul_shoup_lazy(X - Y + two_q, W, Wp, q); \
  }
  size_t t = 1;
  if (n_ >= 8) {
    // stage t = 1 (pairs), then t = 2 (blocks of 4)
    for (size_t i = 0, h = n_ / 2; i < h; ++i) HEMLP_GS(a[2 * i], a[2 * i + 1], iw_[h + i], iwp_[h + i])
    for (size_t i = 0, h = n_ / 4; i < h; ++i) {
      uint64_t* x = a + 4 * i;
      HEMLP_GS(x[0], x[2], iw_[h + i], iwp_[h + i])
      HEMLP_GS(x[1], x[3], iw_[h + i], iwp_[h + i])
    }
    t = 4;
  }
  for (size_t m = n_ / t; m > 2; m >>= 1) {  // remaining stages but the last, four butterflies per iteration
    const size_t h = m >> 1;
    for (size_t i = 0; i < h; ++i) {
      const uint64_t W = iw_[h + i], Wp = iwp_[h + i];
      uint64_t* x = a + 2 * i * t;
      uint64_t* y = x + t;
      if (t >= 4) {
        for (size_t j = 0; j < t; j += 4) {
          HEMLP_GS(x[j], y[j], W, Wp)
          HEMLP_GS(x[j + 1], y[j + 1], W, Wp)
          HEMLP_GS(x[j + 2], y[j + 2], W, Wp)
          HEMLP_GS(x[j + 3], y[j + 3], W, Wp)
        }
      } else {
        for (size_t j = 0; j < t; ++j) HEMLP_GS(x[j], y[j], W, Wp)
      }
    }
    t <<= 1;
  }
#undef HEMLP_GS
  // last stage (t = N/2) fused with the scaling by N^-1
  uint64_t* x = a;
  uint64_t* y = a + t;
  for (size_t j = 0; j < t; ++j) {
    const uint64_t X = x[j], Y = y[j];
    x[j] = mul_shoup(X + Y, n_inv_, n_inv_p_, q);
    y[j] = mul_shoup(X - Y + two_q, iw1n_, iw1n_p_, q);
  }
}

}  // namespace hemlp::ring
