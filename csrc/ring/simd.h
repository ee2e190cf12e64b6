// Run-time SIMD dispatch. The build stays portable (no -march flag): kernels compiled for a wider
// instruction set carry HEMLP_AVX512_FN / HEMLP_AVX2_FN and are only called on the matching path.
// Three paths, every one bit-identical to the others:
//   avx512  AVX512F + AVX512DQ (8 lanes; vpmullq, vpminuq, masked adds)
//   avx2    AVX2 + FMA + BMI2 (4 lanes; 64x64 products built from 32x32 vpmuludq)
//   scalar  portable C++ with unsigned __int128
// The path is chosen once, at the first call of simd_path(): the best the CPU has, unless
//   HEMLP_SIMD=scalar|avx2|avx512   forces one (an unknown value, or a path this CPU lacks, is an
//                                   error at first use, ErrorKind::Parameter, naming the paths it has:
//                                   a benchmark must never run a path other than the one it asked for);
//   HEMLP_DISABLE_AVX512=1          (older switch, still honoured) caps the choice below AVX-512;
//                                   together with HEMLP_SIMD=avx512 it is an error.
#pragma once
#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__)
#define HEMLP_HAVE_AVX512_KERNELS 1
#define HEMLP_HAVE_AVX2_KERNELS 1
// GCC 12 reports its own _mm512_undefined_epi32() (self-initialised on purpose) as
// maybe-uninitialized when the intrinsics are inlined into target("avx512f") functions of a
// translation unit built without -mavx512f (GCC bug 105593); the warning is silenced for the
// intrinsics headers only (diagnostic state is by source location).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#define HEMLP_AVX512_FN __attribute__((target("avx512f,avx512dq")))
#define HEMLP_AVX2_FN __attribute__((target("avx2,fma,bmi2")))
#else
#define HEMLP_HAVE_AVX512_KERNELS 0
#define HEMLP_HAVE_AVX2_KERNELS 0
#endif

namespace hemlp::ring {

enum class SimdPath { Scalar = 0, Avx2 = 1, Avx512 = 2 };

// The active path (see the header comment); throws hemlp::Error (Parameter) on a bad HEMLP_SIMD.
SimdPath simd_path();
// "scalar", "avx2" or "avx512".
const char* simd_path_name(SimdPath p);
// Paths this CPU can run, best first (independent of the environment).
const char* simd_available();

inline bool simd_avx512() { return simd_path() == SimdPath::Avx512; }
inline bool simd_avx2() { return simd_path() == SimdPath::Avx2; }

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
  // carry-free partial sums (each < 2^64): t = lh + ll_hi, u = hl + t_lo
  const __m512i t = _mm512_add_epi64(lh, _mm512_srli_epi64(ll, 32));
  const __m512i u = _mm512_add_epi64(hl, _mm512_and_si512(t, lo32));
  return _mm512_add_epi64(_mm512_add_epi64(hh, _mm512_srli_epi64(t, 32)), _mm512_srli_epi64(u, 32));
}

// Full 64x64 -> 128-bit products, lane-wise: lo and hi words; a_hi = a >> 32 (shared by callers).
HEMLP_AVX512_FN inline void mul_wide(__m512i a, __m512i a_hi, __m512i b, __m512i& lo, __m512i& hi) {
  const __m512i lo32 = _mm512_set1_epi64(0xffffffffLL);
  const __m512i b_hi = _mm512_srli_epi64(b, 32);
  const __m512i ll = _mm512_mul_epu32(a, b);
  const __m512i lh = _mm512_mul_epu32(a, b_hi);
  const __m512i hl = _mm512_mul_epu32(a_hi, b);
  const __m512i hh = _mm512_mul_epu32(a_hi, b_hi);
  const __m512i t = _mm512_add_epi64(lh, _mm512_srli_epi64(ll, 32));  // as in mulhi64
  const __m512i u = _mm512_add_epi64(hl, _mm512_and_si512(t, lo32));
  hi = _mm512_add_epi64(_mm512_add_epi64(hh, _mm512_srli_epi64(t, 32)), _mm512_srli_epi64(u, 32));
  lo = _mm512_or_si512(_mm512_and_si512(ll, lo32), _mm512_slli_epi64(u, 32));
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


// The AVX-512 twin of avx2::FpMod (below; the exactness argument is there): arithmetic mod q < 2^46 in
// double precision, 8 lanes.
struct FpMod8 {
  __m512d q, qinv, C;
  __m512i Ci, qi;
  HEMLP_AVX512_FN explicit FpMod8(uint64_t qv)
      : q(_mm512_set1_pd((double)qv)), qinv(_mm512_set1_pd(1.0 / (double)qv)), C(_mm512_set1_pd(6755399441055744.0)),
        Ci(_mm512_castpd_si512(C)), qi(_mm512_set1_epi64((long long)qv)) {}
  HEMLP_AVX512_FN __m512d mul(__m512d y, __m512d W, __m512d Wq) const {
    const __m512d h = _mm512_mul_pd(y, W);
    const __m512d l = _mm512_fmsub_pd(y, W, h);
    const __m512d b = _mm512_sub_pd(_mm512_fmadd_pd(y, Wq, C), C);
    return _mm512_add_pd(_mm512_fnmadd_pd(b, q, h), l);
  }
  HEMLP_AVX512_FN __m512d mul_var(__m512d x, __m512d k) const {
    const __m512d h = _mm512_mul_pd(x, k);
    const __m512d l = _mm512_fmsub_pd(x, k, h);
    const __m512d b = _mm512_sub_pd(_mm512_fmadd_pd(h, qinv, C), C);
    return _mm512_add_pd(_mm512_fnmadd_pd(b, q, h), l);
  }
  HEMLP_AVX512_FN __m512d reduce(__m512d v) const {
    const __m512d b = _mm512_sub_pd(_mm512_fmadd_pd(v, qinv, C), C);
    return _mm512_fnmadd_pd(b, q, v);
  }
  HEMLP_AVX512_FN __m512d from_u64(__m512i x) const {
    return _mm512_sub_pd(_mm512_castsi512_pd(_mm512_or_si512(x, Ci)), C);
  }
  HEMLP_AVX512_FN __m512i to_u64(__m512d v) const {
    const __m512d r = _mm512_add_pd(reduce(v), q);
    return reduce_once(_mm512_sub_epi64(_mm512_castpd_si512(_mm512_add_pd(r, C)), Ci), qi);
  }
};

}  // namespace avx512
#endif

#if HEMLP_HAVE_AVX2_KERNELS
// AVX2 has no 64x64 multiply, no unsigned 64-bit compare or min and no 64-bit arithmetic shift:
// products come from 32x32 -> 64 vpmuludq, reductions select on the sign bit of x - m.
namespace avx2 {

HEMLP_AVX2_FN inline __m256i set1(uint64_t v) { return _mm256_set1_epi64x((long long)v); }
HEMLP_AVX2_FN inline __m256i load(const uint64_t* p) { return _mm256_loadu_si256((const __m256i*)p); }
HEMLP_AVX2_FN inline void store(uint64_t* p, __m256i v) { _mm256_storeu_si256((__m256i*)p, v); }

// High 64 bits of the 64x64 products, lane-wise, from four 32x32 products (exact).
HEMLP_AVX2_FN inline __m256i mulhi64(__m256i a, __m256i b) {
  const __m256i lo32 = _mm256_set1_epi64x(0xffffffffLL);
  const __m256i a_hi = _mm256_srli_epi64(a, 32), b_hi = _mm256_srli_epi64(b, 32);
  const __m256i ll = _mm256_mul_epu32(a, b);
  const __m256i lh = _mm256_mul_epu32(a, b_hi);
  const __m256i hl = _mm256_mul_epu32(a_hi, b);
  const __m256i hh = _mm256_mul_epu32(a_hi, b_hi);
  // carry-free partial sums (each < 2^64): t = lh + ll_hi, u = hl + t_lo
  const __m256i t = _mm256_add_epi64(lh, _mm256_srli_epi64(ll, 32));
  const __m256i u = _mm256_add_epi64(hl, _mm256_and_si256(t, lo32));
  return _mm256_add_epi64(_mm256_add_epi64(hh, _mm256_srli_epi64(t, 32)), _mm256_srli_epi64(u, 32));
}

// The two 32-bit halves of each 64-bit lane swapped.
HEMLP_AVX2_FN inline __m256i swap32(__m256i a) { return _mm256_shuffle_epi32(a, 0xB1); }

// Low 64 bits of the 64x64 products (what vpmullq gives on AVX-512): a_lo b_lo from vpmuludq plus
// the cross terms a_lo b_hi + a_hi b_lo, needed mod 2^32 only, from one vpmulld on swapped halves.
HEMLP_AVX2_FN inline __m256i mullo64(__m256i a, __m256i b) {
  const __m256i cross = _mm256_mullo_epi32(a, swap32(b));  // per lane: (a_lo b_hi, a_hi b_lo) mod 2^32
  const __m256i sum = _mm256_add_epi32(cross, _mm256_srli_epi64(cross, 32));
  return _mm256_add_epi64(_mm256_mul_epu32(a, b), _mm256_slli_epi64(sum, 32));
}

// Full 64x64 -> 128-bit products: lo and hi words; a_hi = a >> 32 (shared by callers).
HEMLP_AVX2_FN inline void mul_wide(__m256i a, __m256i a_hi, __m256i b, __m256i& lo, __m256i& hi) {
  const __m256i lo32 = _mm256_set1_epi64x(0xffffffffLL);
  const __m256i b_hi = _mm256_srli_epi64(b, 32);
  const __m256i ll = _mm256_mul_epu32(a, b);
  const __m256i lh = _mm256_mul_epu32(a, b_hi);
  const __m256i hl = _mm256_mul_epu32(a_hi, b);
  const __m256i hh = _mm256_mul_epu32(a_hi, b_hi);
  const __m256i t = _mm256_add_epi64(lh, _mm256_srli_epi64(ll, 32));  // as in mulhi64
  const __m256i u = _mm256_add_epi64(hl, _mm256_and_si256(t, lo32));
  hi = _mm256_add_epi64(_mm256_add_epi64(hh, _mm256_srli_epi64(t, 32)), _mm256_srli_epi64(u, 32));
  lo = _mm256_or_si256(_mm256_and_si256(ll, lo32), _mm256_slli_epi64(u, 32));
}

// x * w mod q in [0, 2q) for any 64-bit x (Shoup; wp = floor(w 2^64 / q)); same value as the scalar code.
// x w - h q mod 2^64 is assembled as one mullo64 pair sharing the cross-term fix-up.
HEMLP_AVX2_FN inline __m256i mul_shoup_lazy(__m256i x, __m256i w, __m256i wp, __m256i q) {
  const __m256i h = mulhi64(x, wp);
  const __m256i lo = _mm256_sub_epi64(_mm256_mul_epu32(x, w), _mm256_mul_epu32(h, q));
  const __m256i cross = _mm256_sub_epi32(_mm256_mullo_epi32(x, swap32(w)), _mm256_mullo_epi32(h, swap32(q)));
  const __m256i sum = _mm256_add_epi32(cross, _mm256_srli_epi64(cross, 32));  // low half: cross terms mod 2^32
  return _mm256_add_epi64(lo, _mm256_slli_epi64(sum, 32));
}

// x in [0, 2m) -> x mod m, for m <= 2^63: x - m is negative (sign bit set) exactly when x < m.
HEMLP_AVX2_FN inline __m256i reduce_once(__m256i x, __m256i m) {
  const __m256i d = _mm256_sub_epi64(x, m);
  return _mm256_castpd_si256(
      _mm256_blendv_pd(_mm256_castsi256_pd(d), _mm256_castsi256_pd(x), _mm256_castsi256_pd(d)));
}

// All-ones lanes where a < b (unsigned), from a signed compare of the sign-flipped values.
HEMLP_AVX2_FN inline __m256i cmplt_epu64(__m256i a, __m256i b) {
  const __m256i sign = _mm256_set1_epi64x((long long)0x8000000000000000ULL);
  return _mm256_cmpgt_epi64(_mm256_xor_si256(b, sign), _mm256_xor_si256(a, sign));
}

// Arithmetic mod q < 2^46 in double precision (FMA): AVX2 has no 64x64 multiply, so an integer
// Shoup product costs ~22 vector ops; with doubles a product mod q costs 6. Every value is an integer
// held exactly in a double (|v| <= 2^50); a product y w mod q by a fixed w is
//   h = fl(y w), l = y w - h (exact, one FMA), b = round(y w') with w' = fl(w / q) (one FMA on the
//   1.5 2^52 rounding constant C), T = (h - b q) + l, both steps exact (integers < 2^53).
// |y w / q - b| <= 1/2 + |y| 2^-54 <= 0.5625 for |y| <= 2^50, so T is the representative of y w in
// [-0.5625 q, 0.5625 q]. Results go back to [0, q) integers with to_u64: canonical, so the same bits
// as the integer kernels. Assumes the default MXCSR rounding (to nearest), as C++ and numpy leave it.
struct FpMod {
  __m256d q, qinv, C;
  __m256i Ci, qi;
  HEMLP_AVX2_FN explicit FpMod(uint64_t qv)
      : q(_mm256_set1_pd((double)qv)), qinv(_mm256_set1_pd(1.0 / (double)qv)), C(_mm256_set1_pd(6755399441055744.0)),
        Ci(_mm256_castpd_si256(C)), qi(set1(qv)) {}
  // y w mod q in [-0.5625 q, 0.5625 q] (W = w, Wq = w / q)
  HEMLP_AVX2_FN __m256d mul(__m256d y, __m256d W, __m256d Wq) const {
    const __m256d h = _mm256_mul_pd(y, W);
    const __m256d l = _mm256_fmsub_pd(y, W, h);
    const __m256d b = _mm256_sub_pd(_mm256_fmadd_pd(y, Wq, C), C);
    return _mm256_add_pd(_mm256_fnmadd_pd(b, q, h), l);
  }
  // x k mod q for variable x, k in [0, q): in [-0.531 q, 0.531 q] (h = fl(x k) < 2^92, so the
  // quotient estimate fl(h) / q is off by at most 2^-5 besides the rounding)
  HEMLP_AVX2_FN __m256d mul_var(__m256d x, __m256d k) const {
    const __m256d h = _mm256_mul_pd(x, k);
    const __m256d l = _mm256_fmsub_pd(x, k, h);
    const __m256d b = _mm256_sub_pd(_mm256_fmadd_pd(h, qinv, C), C);
    return _mm256_add_pd(_mm256_fnmadd_pd(b, q, h), l);
  }
  // v - round(v / q) q: |result| <= q / 2 + 1 for |v| <= 2^50
  HEMLP_AVX2_FN __m256d reduce(__m256d v) const {
    const __m256d b = _mm256_sub_pd(_mm256_fmadd_pd(v, qinv, C), C);
    return _mm256_fnmadd_pd(b, q, v);
  }
  // [0, q) residues (< 2^51) to doubles: 1.5 2^52 + x has the bits of C | x
  HEMLP_AVX2_FN __m256d from_u64(__m256i x) const {
    return _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(x, Ci)), C);
  }
  // |v| <= 2^50 to its residue in [0, q): r = v - round(v / q) q in (-q, q), r + q in [0, 2q) read back as an
  // integer through the rounding constant, one conditional subtraction
  HEMLP_AVX2_FN __m256i to_u64(__m256d v) const {
    const __m256d r = _mm256_add_pd(reduce(v), q);
    return avx2::reduce_once(_mm256_sub_epi64(_mm256_castpd_si256(_mm256_add_pd(r, C)), Ci), qi);
  }
};

}  // namespace avx2
#endif

}  // namespace hemlp::ring
