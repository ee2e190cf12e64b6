#include "ring/keyip.h"

#include <algorithm>

#include "ring/simd.h"

namespace hemlp::ring {

namespace {
// With a permutation, the digits are gathered block by block into a buffer with scalar loads
// (vector gathers measured slower than scalar loads here).
constexpr size_t kBlock = 256;

// the double-precision kernels' domain: q < 2^46 and the sum of beta terms of |.| <= 0.531 q below 2^50
[[maybe_unused]] bool kip_fp_ok(uint64_t q, int beta) {
  return q < (uint64_t(1) << 46) && (double)beta * 0.54 * (double)q < 0x1p50;
}

#if HEMLP_HAVE_AVX512_KERNELS
// 128-bit sums kept as (hi, lo) words; the reduction hi * [2^64]_q + lo mod q uses two Shoup
// products, so the result equals the scalar Barrett one.
HEMLP_AVX512_FN void kip_limb_avx512(const uint64_t* const* x, const uint64_t* const* kb, const uint64_t* const* ka,
                                     int beta, const uint32_t* perm, size_t i0, size_t i1, uint64_t qv, uint64_t* o0,
                                     uint64_t* o1) {
  using namespace avx512;
  const uint64_t c = (uint64_t)(((u128)1 << 64) % qv);
  const __m512i q = _mm512_set1_epi64((long long)qv), two_q = _mm512_set1_epi64((long long)(2 * qv));
  const __m512i C = _mm512_set1_epi64((long long)c), Cp = _mm512_set1_epi64((long long)shoup_precompute(c, qv));
  const __m512i one = _mm512_set1_epi64(1), onep = _mm512_set1_epi64((long long)shoup_precompute(1, qv));
  uint64_t buf[kKeyIpMaxDigits * kBlock];
  for (size_t i = i0; i < i1; i += 8) {
    const size_t bi = (i - i0) % kBlock;
    if (perm && bi == 0) {
      const size_t len = std::min(kBlock, i1 - i);
      for (int t = 0; t < beta; ++t)
        for (size_t c = 0; c < len; ++c) buf[t * kBlock + c] = x[t][perm[i + c]];
    }
    __m512i lo0 = _mm512_setzero_si512(), hi0 = lo0, lo1 = lo0, hi1 = lo0;
    for (int t = 0; t < beta; ++t) {
      const __m512i X = _mm512_loadu_si512(perm ? buf + t * kBlock + bi : x[t] + i);
      const __m512i Xh = _mm512_srli_epi64(X, 32);
      __m512i pl, ph;
      mul_wide(X, Xh, _mm512_loadu_si512(kb[t] + i), pl, ph);
      lo0 = _mm512_add_epi64(lo0, pl);
      hi0 = _mm512_add_epi64(_mm512_mask_add_epi64(hi0, _mm512_cmplt_epu64_mask(lo0, pl), hi0, one), ph);
      mul_wide(X, Xh, _mm512_loadu_si512(ka[t] + i), pl, ph);
      lo1 = _mm512_add_epi64(lo1, pl);
      hi1 = _mm512_add_epi64(_mm512_mask_add_epi64(hi1, _mm512_cmplt_epu64_mask(lo1, pl), hi1, one), ph);
    }
    const __m512i r0 = _mm512_add_epi64(mul_shoup_lazy(hi0, C, Cp, q), mul_shoup_lazy(lo0, one, onep, q));
    const __m512i r1 = _mm512_add_epi64(mul_shoup_lazy(hi1, C, Cp, q), mul_shoup_lazy(lo1, one, onep, q));
    _mm512_storeu_si512(o0 + i, reduce_once(reduce_once(r0, two_q), q));
    _mm512_storeu_si512(o1 + i, reduce_once(reduce_once(r1, two_q), q));
  }
}

// Limbs of primes below 2^46 in double precision (avx512::FpMod8; see kip_limb_avx2_fp below).
HEMLP_AVX512_FN void kip_limb_avx512_fp(const uint64_t* const* x, const uint64_t* const* kb,
                                        const uint64_t* const* ka, int beta, const uint32_t* perm, size_t i0,
                                        size_t i1, uint64_t qv, uint64_t* o0, uint64_t* o1) {
  using namespace avx512;
  const FpMod8 F(qv);
  uint64_t buf[kKeyIpMaxDigits * kBlock];
  for (size_t i = i0; i < i1; i += 8) {
    const size_t bi = (i - i0) % kBlock;
    if (perm && bi == 0) {
      const size_t len = std::min(kBlock, i1 - i);
      for (int t = 0; t < beta; ++t)
        for (size_t c = 0; c < len; ++c) buf[t * kBlock + c] = x[t][perm[i + c]];
    }
    __m512d s0 = _mm512_setzero_pd(), s1 = s0;
    for (int t = 0; t < beta; ++t) {
      const __m512d X = F.from_u64(_mm512_loadu_si512(perm ? buf + t * kBlock + bi : x[t] + i));
      s0 = _mm512_add_pd(s0, F.mul_var(X, F.from_u64(_mm512_loadu_si512(kb[t] + i))));
      s1 = _mm512_add_pd(s1, F.mul_var(X, F.from_u64(_mm512_loadu_si512(ka[t] + i))));
    }
    _mm512_storeu_si512(o0 + i, F.to_u64(s0));
    _mm512_storeu_si512(o1 + i, F.to_u64(s1));
  }
}
#endif

#if HEMLP_HAVE_AVX2_KERNELS
// AVX2 version of kip_limb_avx512 (4 lanes). Without unsigned compares a carry costs four ops, so
// the 128-bit sums are kept carry-free in three accumulators instead: with the 32x32 products
// ll, lh, hl, hh of each term, A = sum(ll_hi + lh_lo + hl_lo) < 96 * 2^32, B = sum(ll_lo) < 32 * 2^32
// and H = sum(hh + lh_hi + hl_hi); the sum is H 2^64 + A 2^32 + B (its high word < 2^64).
HEMLP_AVX2_FN void kip_limb_avx2(const uint64_t* const* x, const uint64_t* const* kb, const uint64_t* const* ka,
                                 int beta, const uint32_t* perm, size_t i0, size_t i1, uint64_t qv, uint64_t* o0,
                                 uint64_t* o1) {
  using namespace avx2;
  const uint64_t c = (uint64_t)(((u128)1 << 64) % qv);
  const __m256i q = set1(qv), two_q = set1(2 * qv);
  const __m256i C = set1(c), Cp = set1(shoup_precompute(c, qv));
  const __m256i one = set1(1), onep = set1(shoup_precompute(1, qv));
  const __m256i m32 = set1(0xffffffffULL);
  uint64_t buf[kKeyIpMaxDigits * kBlock];
  struct Acc {
    __m256i A, B, H;
  };
  const auto add_term = [&](Acc& s, __m256i X, __m256i Xh, __m256i K) HEMLP_AVX2_FN {
    const __m256i Kh = _mm256_srli_epi64(K, 32);
    const __m256i ll = _mm256_mul_epu32(X, K), lh = _mm256_mul_epu32(X, Kh);
    const __m256i hl = _mm256_mul_epu32(Xh, K), hh = _mm256_mul_epu32(Xh, Kh);
    s.A = _mm256_add_epi64(s.A, _mm256_add_epi64(_mm256_srli_epi64(ll, 32),
                                                 _mm256_add_epi64(_mm256_and_si256(lh, m32), _mm256_and_si256(hl, m32))));
    s.B = _mm256_add_epi64(s.B, _mm256_and_si256(ll, m32));
    s.H = _mm256_add_epi64(s.H, _mm256_add_epi64(hh, _mm256_add_epi64(_mm256_srli_epi64(lh, 32), _mm256_srli_epi64(hl, 32))));
  };
  const auto finish = [&](const Acc& s) HEMLP_AVX2_FN {
    const __m256i A2 = _mm256_add_epi64(s.A, _mm256_srli_epi64(s.B, 32));
    const __m256i lo = _mm256_or_si256(_mm256_slli_epi64(A2, 32), _mm256_and_si256(s.B, m32));
    const __m256i hi = _mm256_add_epi64(s.H, _mm256_srli_epi64(A2, 32));
    const __m256i r = _mm256_add_epi64(avx2::mul_shoup_lazy(hi, C, Cp, q), avx2::mul_shoup_lazy(lo, one, onep, q));
    return avx2::reduce_once(avx2::reduce_once(r, two_q), q);
  };
  for (size_t i = i0; i < i1; i += 4) {
    const size_t bi = (i - i0) % kBlock;
    if (perm && bi == 0) {
      const size_t len = std::min(kBlock, i1 - i);
      for (int t = 0; t < beta; ++t)
        for (size_t c = 0; c < len; ++c) buf[t * kBlock + c] = x[t][perm[i + c]];
    }
    const __m256i z = _mm256_setzero_si256();
    Acc s0{z, z, z}, s1{z, z, z};
    for (int t = 0; t < beta; ++t) {
      const __m256i X = load(perm ? buf + t * kBlock + bi : x[t] + i);
      const __m256i Xh = _mm256_srli_epi64(X, 32);
      add_term(s0, X, Xh, load(kb[t] + i));
      add_term(s1, X, Xh, load(ka[t] + i));
    }
    store(o0 + i, finish(s0));
    store(o1 + i, finish(s1));
  }
}

// Limbs of primes below 2^46 in double precision (avx2::FpMod): each term x k mod q is a signed
// representative in [-0.531 q, 0.531 q] (6 ops against 4 vpmuludq and ~10 more for the 128-bit sum,
// and the final 128-bit reduction of two Shoup products becomes one rounding); the sum of beta terms
// stays below 2^50 (kip_fp_ok) and is mapped to [0, q): the canonical residue, as the other paths.
HEMLP_AVX2_FN void kip_limb_avx2_fp(const uint64_t* const* x, const uint64_t* const* kb, const uint64_t* const* ka,
                                    int beta, const uint32_t* perm, size_t i0, size_t i1, uint64_t qv, uint64_t* o0,
                                    uint64_t* o1) {
  using namespace avx2;
  const FpMod F(qv);
  uint64_t buf[kKeyIpMaxDigits * kBlock];
  for (size_t i = i0; i < i1; i += 4) {
    const size_t bi = (i - i0) % kBlock;
    if (perm && bi == 0) {
      const size_t len = std::min(kBlock, i1 - i);
      for (int t = 0; t < beta; ++t)
        for (size_t c = 0; c < len; ++c) buf[t * kBlock + c] = x[t][perm[i + c]];
    }
    __m256d s0 = _mm256_setzero_pd(), s1 = s0;
    for (int t = 0; t < beta; ++t) {
      const __m256d X = F.from_u64(load(perm ? buf + t * kBlock + bi : x[t] + i));
      s0 = _mm256_add_pd(s0, F.mul_var(X, F.from_u64(load(kb[t] + i))));
      s1 = _mm256_add_pd(s1, F.mul_var(X, F.from_u64(load(ka[t] + i))));
    }
    store(o0 + i, F.to_u64(s0));
    store(o1 + i, F.to_u64(s1));
  }
}
#endif
}  // namespace

bool key_inner_product_limb_simd(const uint64_t* const* x, const uint64_t* const* kb, const uint64_t* const* ka,
                                 int beta, const uint32_t* perm, size_t i0, size_t i1, uint64_t q, uint64_t* o0,
                                 uint64_t* o1) {
  if (beta < 1 || beta > kKeyIpMaxDigits || i0 % 8 != 0 || (i1 - i0) % 8 != 0) return false;
#if HEMLP_HAVE_AVX512_KERNELS
  if (simd_avx512()) {
    if (kip_fp_ok(q, beta))
      kip_limb_avx512_fp(x, kb, ka, beta, perm, i0, i1, q, o0, o1);
    else
      kip_limb_avx512(x, kb, ka, beta, perm, i0, i1, q, o0, o1);
    return true;
  }
#endif
#if HEMLP_HAVE_AVX2_KERNELS
  if (simd_avx2()) {
    if (kip_fp_ok(q, beta))
      kip_limb_avx2_fp(x, kb, ka, beta, perm, i0, i1, q, o0, o1);
    else
      kip_limb_avx2(x, kb, ka, beta, perm, i0, i1, q, o0, o1);
    return true;
  }
#endif
  return false;
}

}  // namespace hemlp::ring
