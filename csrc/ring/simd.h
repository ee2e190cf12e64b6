// Optional AVX-512 kernels (AVX512F + AVX512DQ), chosen at run time: the build stays portable
// (no -march flag); functions compiled for AVX-512 carry HEMLP_AVX512_FN and are only called
// when simd_avx512() is true. HEMLP_DISABLE_AVX512=1 in the environment forces the scalar code
// (read once, at the first call; the tests use it to check both paths give identical results).
#pragma once
#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__)
#define HEMLP_HAVE_AVX512_KERNELS 1
// GCC 12 reports its own _mm512_undefined_epi32() (self-initialised on purpose) as
// maybe-uninitialized when the intrinsics are inlined into target("avx512f") functions of a
// translation unit built without -mavx512f (GCC bug 105593); the warning is silenced for the
// intrinsics headers only (diagnostic state is by source location).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#define HEMLP_AVX512_FN __attribute__((target("avx512f,avx512dq")))
#else
#define HEMLP_HAVE_AVX512_KERNELS 0
#endif

namespace hemlp::ring {

// True when the CPU has AVX512F/DQ and HEMLP_DISABLE_AVX512 is not set to a non-empty, non-"0" value.
bool simd_avx512();

#if HEMLP_HAVE_AVX512_KERNELS
namespace avx512 {

// High 64 bits of the 64x64 products, lane-wise, from four 32x32 products.
HEMLP_AVX512_FN inline __m512i mulhi64(__m512i a, __m512i b) {
  const __m512i lo32 = _mm512_set1_epi64(0xffffffffLL);
  const __m512i a_hi = _mm512_srli_epi64(a, 32), b_hi = _mm512_srli_epi64(b, 32);
  const __m512i ll = _mm512_mul_epu32(a, b);
  const __m512i lh = _mm512_mul_epu32(a, b_hi);
  const __m512i hl = _mm512_mul_epu32(a_hi, b);
  const __m512i hh = _mm512_mul_epu32(a_hi, b_hi);
  __m512i mid = _mm512_add_epi64(_mm512_srli_epi64(ll, 32), _mm512_and_si512(lh, lo32));
  mid = _mm512_add_epi64(mid, _mm512_and_si512(hl, lo32));  // < 3 * 2^32
  __m512i hi = _mm512_add_epi64(hh, _mm512_srli_epi64(lh, 32));
  hi = _mm512_add_epi64(hi, _mm512_srli_epi64(hl, 32));
  return _mm512_add_epi64(hi, _mm512_srli_epi64(mid, 32));
}

// Full 64x64 -> 128-bit products, lane-wise: lo and hi words; a_hi = a >> 32 (shared by callers).
HEMLP_AVX512_FN inline void mul_wide(__m512i a, __m512i a_hi, __m512i b, __m512i& lo, __m512i& hi) {
  const __m512i lo32 = _mm512_set1_epi64(0xffffffffLL);
  const __m512i b_hi = _mm512_srli_epi64(b, 32);
  const __m512i ll = _mm512_mul_epu32(a, b);
  const __m512i lh = _mm512_mul_epu32(a, b_hi);
  const __m512i hl = _mm512_mul_epu32(a_hi, b);
  const __m512i hh = _mm512_mul_epu32(a_hi, b_hi);
  __m512i mid = _mm512_add_epi64(_mm512_srli_epi64(ll, 32), _mm512_and_si512(lh, lo32));
  mid = _mm512_add_epi64(mid, _mm512_and_si512(hl, lo32));
  hi = _mm512_add_epi64(_mm512_add_epi64(hh, _mm512_srli_epi64(lh, 32)),
                        _mm512_add_epi64(_mm512_srli_epi64(hl, 32), _mm512_srli_epi64(mid, 32)));
  lo = _mm512_or_si512(_mm512_and_si512(ll, lo32), _mm512_slli_epi64(mid, 32));
}

// x * w mod q in [0, 2q) for any 64-bit x (Shoup; wp = floor(w 2^64 / q)).
HEMLP_AVX512_FN inline __m512i mul_shoup_lazy(__m512i x, __m512i w, __m512i wp, __m512i q) {
  const __m512i h = mulhi64(x, wp);
  return _mm512_sub_epi64(_mm512_mullo_epi64(x, w), _mm512_mullo_epi64(h, q));
}

// x in [0, 2m) -> x mod m (unsigned min: x - m wraps to a huge value when x < m).
HEMLP_AVX512_FN inline __m512i reduce_once(__m512i x, __m512i m) {
  return _mm512_min_epu64(x, _mm512_sub_epi64(x, m));
}

}  // namespace avx512
#endif

}  // namespace hemlp::ring
