#include "ring/vecops.h"

#include "ring/simd.h"

namespace hemlp::ring {

#if HEMLP_HAVE_AVX512_KERNELS
namespace {
using namespace avx512;

// x mod q for the 128-bit value hi 2^64 + lo: hi [2^64]_q + lo with two Shoup products.
struct Wide {
  __m512i q, two_q, c, cp, one, onep;
  HEMLP_AVX512_FN explicit Wide(uint64_t qv) {
    const uint64_t cv = (uint64_t)(((u128)1 << 64) % qv);
    q = _mm512_set1_epi64((long long)qv);
    two_q = _mm512_set1_epi64((long long)(2 * qv));
    c = _mm512_set1_epi64((long long)cv);
    cp = _mm512_set1_epi64((long long)shoup_precompute(cv, qv));
    one = _mm512_set1_epi64(1);
    onep = _mm512_set1_epi64((long long)shoup_precompute(1, qv));
  }
  HEMLP_AVX512_FN __m512i reduce(__m512i hi, __m512i lo) const {
    const __m512i r = _mm512_add_epi64(mul_shoup_lazy(hi, c, cp, q), mul_shoup_lazy(lo, one, onep, q));
    return reduce_once(reduce_once(r, two_q), q);
  }
};

HEMLP_AVX512_FN void sub_mul_shoup_avx512(const uint64_t* a, const uint64_t* b, uint64_t w, uint64_t wp,
                                          uint64_t qv, const uint64_t* add_to, uint64_t* dst, size_t n) {
  const __m512i q = _mm512_set1_epi64((long long)qv), W = _mm512_set1_epi64((long long)w),
                Wp = _mm512_set1_epi64((long long)wp);
  for (size_t i = 0; i < n; i += 8) {
    const __m512i d = _mm512_sub_epi64(_mm512_add_epi64(_mm512_loadu_si512(a + i), q), _mm512_loadu_si512(b + i));
    __m512i r = reduce_once(mul_shoup_lazy(d, W, Wp, q), q);
    if (add_to) r = reduce_once(_mm512_add_epi64(r, _mm512_loadu_si512(add_to + i)), q);
    _mm512_storeu_si512(dst + i, r);
  }
}

HEMLP_AVX512_FN void add_avx512(const uint64_t* a, const uint64_t* b, uint64_t qv, uint64_t* dst, size_t n) {
  const __m512i q = _mm512_set1_epi64((long long)qv);
  for (size_t i = 0; i < n; i += 8)
    _mm512_storeu_si512(dst + i,
                        reduce_once(_mm512_add_epi64(_mm512_loadu_si512(a + i), _mm512_loadu_si512(b + i)), q));
}

HEMLP_AVX512_FN void add_mul_shoup_avx512(const uint64_t* a, const uint64_t* b, uint64_t w, uint64_t wp,
                                          uint64_t qv, uint64_t* dst, size_t n) {
  const __m512i q = _mm512_set1_epi64((long long)qv), W = _mm512_set1_epi64((long long)w),
                Wp = _mm512_set1_epi64((long long)wp);
  for (size_t i = 0; i < n; i += 8) {
    const __m512i t = reduce_once(mul_shoup_lazy(_mm512_loadu_si512(b + i), W, Wp, q), q);
    _mm512_storeu_si512(dst + i, reduce_once(_mm512_add_epi64(_mm512_loadu_si512(a + i), t), q));
  }
}

// x mod p for any 64-bit x: a Shoup product by 1 lands in [0, 2p), one conditional subtraction.
HEMLP_AVX512_FN void centred_lift_avx512(const uint64_t* x, uint64_t from, uint64_t pv, uint64_t* dst, size_t n) {
  const __m512i p = _mm512_set1_epi64((long long)pv), F = _mm512_set1_epi64((long long)from),
                half = _mm512_set1_epi64((long long)(from >> 1)), one = _mm512_set1_epi64(1),
                onep = _mm512_set1_epi64((long long)shoup_precompute(1, pv));
  for (size_t i = 0; i < n; i += 8) {
    const __m512i v = _mm512_loadu_si512(x + i);
    const __mmask8 neg = _mm512_cmpgt_epu64_mask(v, half);
    const __m512i m = _mm512_mask_sub_epi64(v, neg, F, v);  // |centred value|
    const __m512i r = reduce_once(mul_shoup_lazy(m, one, onep, p), p);
    // -r mod p: p - r in (0, p], and p itself maps to 0
    _mm512_storeu_si512(dst + i, _mm512_mask_mov_epi64(r, neg, reduce_once(_mm512_sub_epi64(p, r), p)));
  }
}

// q < 2^46: in double precision (avx512::FpMod8), as tensor_avx2_fp below
HEMLP_AVX512_FN void tensor_avx512_fp(const uint64_t* a0, const uint64_t* a1, const uint64_t* b0, const uint64_t* b1,
                                      uint64_t qv, uint64_t* d0, uint64_t* d1, uint64_t* d2, size_t n) {
  const FpMod8 F(qv);
  for (size_t i = 0; i < n; i += 8) {
    const __m512d A0 = F.from_u64(_mm512_loadu_si512(a0 + i)), A1 = F.from_u64(_mm512_loadu_si512(a1 + i));
    const __m512d B0 = F.from_u64(_mm512_loadu_si512(b0 + i)), B1 = F.from_u64(_mm512_loadu_si512(b1 + i));
    _mm512_storeu_si512(d0 + i, F.to_u64(F.mul_var(A0, B0)));
    _mm512_storeu_si512(d1 + i, F.to_u64(_mm512_add_pd(F.mul_var(A0, B1), F.mul_var(A1, B0))));
    _mm512_storeu_si512(d2 + i, F.to_u64(F.mul_var(A1, B1)));
  }
}

HEMLP_AVX512_FN void tensor_avx512(const uint64_t* a0, const uint64_t* a1, const uint64_t* b0, const uint64_t* b1,
                                   uint64_t qv, uint64_t* d0, uint64_t* d1, uint64_t* d2, size_t n) {
  if (qv < (uint64_t(1) << 46)) return tensor_avx512_fp(a0, a1, b0, b1, qv, d0, d1, d2, n);
  const Wide W(qv);
  for (size_t i = 0; i < n; i += 8) {
    const __m512i A0 = _mm512_loadu_si512(a0 + i), A1 = _mm512_loadu_si512(a1 + i);
    const __m512i B0 = _mm512_loadu_si512(b0 + i), B1 = _mm512_loadu_si512(b1 + i);
    const __m512i A0h = _mm512_srli_epi64(A0, 32), A1h = _mm512_srli_epi64(A1, 32);
    __m512i l0, h0, l1, h1, l2, h2, l3, h3;
    mul_wide(A0, A0h, B0, l0, h0);
    mul_wide(A0, A0h, B1, l1, h1);
    mul_wide(A1, A1h, B0, l2, h2);
    mul_wide(A1, A1h, B1, l3, h3);
    const __m512i lm = _mm512_add_epi64(l1, l2);
    const __m512i hm = _mm512_add_epi64(_mm512_mask_add_epi64(h1, _mm512_cmplt_epu64_mask(lm, l1), h1, W.one), h2);
    _mm512_storeu_si512(d0 + i, W.reduce(h0, l0));
    _mm512_storeu_si512(d1 + i, W.reduce(hm, lm));
    _mm512_storeu_si512(d2 + i, W.reduce(h3, l3));
  }
}
}  // namespace
#define HEMLP_SIMD_OK(n) (simd_avx512() && (n) % 8 == 0)
#endif

#if HEMLP_HAVE_AVX2_KERNELS
namespace {
using namespace avx2;

// x mod q for the 128-bit value hi 2^64 + lo: hi [2^64]_q + lo with two Shoup products (as Wide above).
struct Wide2 {
  __m256i q, two_q, c, cp, one, onep;
  HEMLP_AVX2_FN explicit Wide2(uint64_t qv) {
    const uint64_t cv = (uint64_t)(((u128)1 << 64) % qv);
    q = set1(qv);
    two_q = set1(2 * qv);
    c = set1(cv);
    cp = set1(shoup_precompute(cv, qv));
    one = set1(1);
    onep = set1(shoup_precompute(1, qv));
  }
  HEMLP_AVX2_FN __m256i reduce(__m256i hi, __m256i lo) const {
    const __m256i r = _mm256_add_epi64(avx2::mul_shoup_lazy(hi, c, cp, q), avx2::mul_shoup_lazy(lo, one, onep, q));
    return avx2::reduce_once(avx2::reduce_once(r, two_q), q);
  }
};

// q < 2^46: the element-wise ops in double precision (avx2::FpMod; signed intermediates, one rounding to
// [0, q) at the end: the canonical residues the integer code gives)
bool fp_small(uint64_t q) { return q < (uint64_t(1) << 46); }

HEMLP_AVX2_FN void sub_mul_shoup_avx2_fp(const uint64_t* a, const uint64_t* b, uint64_t w, uint64_t qv,
                                         const uint64_t* add_to, uint64_t* dst, size_t n) {
  const FpMod F(qv);
  const __m256d W = _mm256_set1_pd((double)w), Wq = _mm256_set1_pd((double)w / (double)qv);
  for (size_t i = 0; i < n; i += 4) {
    __m256d r = F.mul(_mm256_sub_pd(F.from_u64(load(a + i)), F.from_u64(load(b + i))), W, Wq);
    if (add_to) r = _mm256_add_pd(r, F.from_u64(load(add_to + i)));
    store(dst + i, F.to_u64(r));
  }
}

HEMLP_AVX2_FN void sub_mul_shoup_avx2(const uint64_t* a, const uint64_t* b, uint64_t w, uint64_t wp, uint64_t qv,
                                      const uint64_t* add_to, uint64_t* dst, size_t n) {
  if (fp_small(qv)) return sub_mul_shoup_avx2_fp(a, b, w, qv, add_to, dst, n);
  const __m256i q = set1(qv), W = set1(w), Wp = set1(wp);
  for (size_t i = 0; i < n; i += 4) {
    const __m256i d = _mm256_sub_epi64(_mm256_add_epi64(load(a + i), q), load(b + i));
    __m256i r = avx2::reduce_once(avx2::mul_shoup_lazy(d, W, Wp, q), q);
    if (add_to) r = avx2::reduce_once(_mm256_add_epi64(r, load(add_to + i)), q);
    store(dst + i, r);
  }
}

HEMLP_AVX2_FN void add_avx2(const uint64_t* a, const uint64_t* b, uint64_t qv, uint64_t* dst, size_t n) {
  const __m256i q = set1(qv);
  for (size_t i = 0; i < n; i += 4) store(dst + i, avx2::reduce_once(_mm256_add_epi64(load(a + i), load(b + i)), q));
}

HEMLP_AVX2_FN void add_mul_shoup_avx2(const uint64_t* a, const uint64_t* b, uint64_t w, uint64_t wp, uint64_t qv,
                                      uint64_t* dst, size_t n) {
  if (fp_small(qv)) {
    const FpMod F(qv);
    const __m256d W = _mm256_set1_pd((double)w), Wq = _mm256_set1_pd((double)w / (double)qv);
    for (size_t i = 0; i < n; i += 4)
      store(dst + i, F.to_u64(_mm256_add_pd(F.from_u64(load(a + i)), F.mul(F.from_u64(load(b + i)), W, Wq))));
    return;
  }
  const __m256i q = set1(qv), W = set1(w), Wp = set1(wp);
  for (size_t i = 0; i < n; i += 4) {
    const __m256i t = avx2::reduce_once(avx2::mul_shoup_lazy(load(b + i), W, Wp, q), q);
    store(dst + i, avx2::reduce_once(_mm256_add_epi64(load(a + i), t), q));
  }
}

HEMLP_AVX2_FN void centred_lift_avx2(const uint64_t* x, uint64_t from, uint64_t pv, uint64_t* dst, size_t n) {
  if (fp_small(pv) && from < (uint64_t(1) << 50)) {  // the centred value |v| <= from / 2 < 2^49, reduced once
    const FpMod Fp(pv);
    const __m256i half = set1(from >> 1);
    const __m256d fromd = _mm256_set1_pd((double)from);
    for (size_t i = 0; i < n; i += 4) {
      const __m256i v = load(x + i);
      const __m256d neg = _mm256_castsi256_pd(_mm256_cmpgt_epi64(v, half));  // v < 2^50: the signed compare is exact
      store(dst + i, Fp.to_u64(_mm256_sub_pd(Fp.from_u64(v), _mm256_and_pd(neg, fromd))));
    }
    return;
  }
  const __m256i p = set1(pv), F = set1(from), half = set1(from >> 1), one = set1(1),
                onep = set1(shoup_precompute(1, pv));
  for (size_t i = 0; i < n; i += 4) {
    const __m256i v = load(x + i);
    const __m256i neg = cmplt_epu64(half, v);  // all-ones where v > from/2
    const __m256i m = _mm256_blendv_epi8(v, _mm256_sub_epi64(F, v), neg);
    const __m256i r = avx2::reduce_once(avx2::mul_shoup_lazy(m, one, onep, p), p);
    store(dst + i, _mm256_blendv_epi8(r, avx2::reduce_once(_mm256_sub_epi64(p, r), p), neg));
  }
}

// q < 2^46: in double precision (avx2::FpMod), each product a signed representative, d1's two summed
// before the one rounding to [0, q); the canonical residues, as the 128-bit reductions below give.
HEMLP_AVX2_FN void tensor_avx2_fp(const uint64_t* a0, const uint64_t* a1, const uint64_t* b0, const uint64_t* b1,
                                  uint64_t qv, uint64_t* d0, uint64_t* d1, uint64_t* d2, size_t n) {
  const FpMod F(qv);
  for (size_t i = 0; i < n; i += 4) {
    const __m256d A0 = F.from_u64(load(a0 + i)), A1 = F.from_u64(load(a1 + i));
    const __m256d B0 = F.from_u64(load(b0 + i)), B1 = F.from_u64(load(b1 + i));
    store(d0 + i, F.to_u64(F.mul_var(A0, B0)));
    store(d1 + i, F.to_u64(_mm256_add_pd(F.mul_var(A0, B1), F.mul_var(A1, B0))));
    store(d2 + i, F.to_u64(F.mul_var(A1, B1)));
  }
}

HEMLP_AVX2_FN void tensor_avx2(const uint64_t* a0, const uint64_t* a1, const uint64_t* b0, const uint64_t* b1,
                               uint64_t qv, uint64_t* d0, uint64_t* d1, uint64_t* d2, size_t n) {
  if (qv < (uint64_t(1) << 46)) return tensor_avx2_fp(a0, a1, b0, b1, qv, d0, d1, d2, n);
  const Wide2 W(qv);
  for (size_t i = 0; i < n; i += 4) {
    const __m256i A0 = load(a0 + i), A1 = load(a1 + i), B0 = load(b0 + i), B1 = load(b1 + i);
    const __m256i A0h = _mm256_srli_epi64(A0, 32), A1h = _mm256_srli_epi64(A1, 32);
    __m256i l0, h0, l1, h1, l2, h2, l3, h3;
    avx2::mul_wide(A0, A0h, B0, l0, h0);
    avx2::mul_wide(A0, A0h, B1, l1, h1);
    avx2::mul_wide(A1, A1h, B0, l2, h2);
    avx2::mul_wide(A1, A1h, B1, l3, h3);
    const __m256i lm = _mm256_add_epi64(l1, l2);
    // carry of the low-word sum: the all-ones compare mask is -1, so subtracting it adds 1
    const __m256i hm = _mm256_add_epi64(_mm256_sub_epi64(h1, cmplt_epu64(lm, l1)), h2);
    store(d0 + i, W.reduce(h0, l0));
    store(d1 + i, W.reduce(hm, lm));
    store(d2 + i, W.reduce(h3, l3));
  }
}
}  // namespace
#define HEMLP_AVX2_OK(n) (simd_avx2() && (n) % 4 == 0)
#endif

void sub_mul_shoup_vec(const uint64_t* a, const uint64_t* b, uint64_t w, uint64_t wp, uint64_t q,
                       const uint64_t* add_to, uint64_t* dst, size_t n) {
#if HEMLP_HAVE_AVX512_KERNELS
  if (HEMLP_SIMD_OK(n)) return sub_mul_shoup_avx512(a, b, w, wp, q, add_to, dst, n);
#endif
#if HEMLP_HAVE_AVX2_KERNELS
  if (HEMLP_AVX2_OK(n)) return sub_mul_shoup_avx2(a, b, w, wp, q, add_to, dst, n);
#endif
  for (size_t i = 0; i < n; ++i) {
    const uint64_t r = mul_shoup(sub_mod(a[i], b[i], q), w, wp, q);
    dst[i] = add_to ? add_mod(r, add_to[i], q) : r;
  }
}

void add_vec(const uint64_t* a, const uint64_t* b, uint64_t q, uint64_t* dst, size_t n) {
#if HEMLP_HAVE_AVX512_KERNELS
  if (HEMLP_SIMD_OK(n)) return add_avx512(a, b, q, dst, n);
#endif
#if HEMLP_HAVE_AVX2_KERNELS
  if (HEMLP_AVX2_OK(n)) return add_avx2(a, b, q, dst, n);
#endif
  for (size_t i = 0; i < n; ++i) dst[i] = add_mod(a[i], b[i], q);
}

void add_mul_shoup_vec(const uint64_t* a, const uint64_t* b, uint64_t w, uint64_t wp, uint64_t q, uint64_t* dst,
                       size_t n) {
#if HEMLP_HAVE_AVX512_KERNELS
  if (HEMLP_SIMD_OK(n)) return add_mul_shoup_avx512(a, b, w, wp, q, dst, n);
#endif
#if HEMLP_HAVE_AVX2_KERNELS
  if (HEMLP_AVX2_OK(n)) return add_mul_shoup_avx2(a, b, w, wp, q, dst, n);
#endif
  for (size_t i = 0; i < n; ++i) dst[i] = add_mod(a[i], mul_shoup(b[i], w, wp, q), q);
}

void centred_lift_vec(const uint64_t* x, uint64_t from, uint64_t p, uint64_t* dst, size_t n) {
#if HEMLP_HAVE_AVX512_KERNELS
  if (HEMLP_SIMD_OK(n)) return centred_lift_avx512(x, from, p, dst, n);
#endif
#if HEMLP_HAVE_AVX2_KERNELS
  if (HEMLP_AVX2_OK(n)) return centred_lift_avx2(x, from, p, dst, n);
#endif
  const uint64_t half = from >> 1, onep = shoup_precompute(1, p);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t v = x[i];
    const bool neg = v > half;
    const uint64_t r = mul_shoup(neg ? from - v : v, 1, onep, p);
    dst[i] = neg && r ? p - r : r;
  }
}

void permute_vec(const uint64_t* src, const uint32_t* perm, uint64_t* dst, size_t n) {
  // scalar on purpose: AVX-512 gathers measured slower than scalar loads here
  for (size_t i = 0; i < n; ++i) dst[i] = src[perm[i]];
}

void tensor_vec(const uint64_t* a0, const uint64_t* a1, const uint64_t* b0, const uint64_t* b1, const Modulus& q,
                uint64_t* d0, uint64_t* d1, uint64_t* d2, size_t n) {
#if HEMLP_HAVE_AVX512_KERNELS
  if (HEMLP_SIMD_OK(n)) return tensor_avx512(a0, a1, b0, b1, q.q, d0, d1, d2, n);
#endif
#if HEMLP_HAVE_AVX2_KERNELS
  if (HEMLP_AVX2_OK(n)) return tensor_avx2(a0, a1, b0, b1, q.q, d0, d1, d2, n);
#endif
  for (size_t i = 0; i < n; ++i) {
    const uint64_t x0 = a0[i], x1 = a1[i], y0 = b0[i], y1 = b1[i];
    d0[i] = q.mul(x0, y0);
    d1[i] = q.reduce128((u128)x0 * y1 + (u128)x1 * y0);
    d2[i] = q.mul(x1, y1);
  }
}

}  // namespace hemlp::ring
