// Exact modular GEMM over OpenBLAS DGEMM; see modgemm.h for the method and the exactness argument.
#include "pcmm/modgemm.h"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "ring/simd.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace hemlp::pcmm {
namespace {

using u128 = unsigned __int128;

int bitlen(uint64_t x) { return x ? 64 - __builtin_clzll(x) : 0; }
size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

// Scratch per panel is bounded so huge n does not allocate T copies of X; 64 MiB keeps DGEMM calls
// wide (>= a few hundred columns for d = 4096) while staying far below typical memory.
constexpr size_t kPanelBytes = size_t(64) << 20;
// Lazy int64 accumulation of K-blocks: each block is < 2^53 in magnitude and a folded value is < 2^61,
// so 511 blocks on top of a fold, plus the last block, stay below 2^61 + 512 * 2^53 < 2^63.
constexpr size_t kFoldEvery = 511;
// Parallel regions cost a few microseconds; below this many element-ops run them on one thread.
constexpr size_t kOmpMinWork = size_t(1) << 15;

// Shoup multiplication by a fixed p < q: for ANY a < 2^64, a*p - floor(a*pq/2^64)*q lies in [0, 2q).
struct Shoup {
  uint64_t p, pq;
};
Shoup make_shoup(uint64_t p, uint64_t q) { return {p, static_cast<uint64_t>((u128(p) << 64) / q)}; }
inline uint64_t mul_shoup_lazy(uint64_t a, Shoup m, uint64_t q) {
  const uint64_t hi = static_cast<uint64_t>((u128(a) * m.pq) >> 64);
  return a * m.p - hi * q;
}

// Maps a signed value to an unsigned one congruent mod q: v < 0 becomes v + 2^64 - (2^64 mod q),
// which is < 2^64 and >= 2^63 - q > 0.
inline uint64_t signed_to_unsigned_mod(int64_t v, uint64_t r64) {
  return static_cast<uint64_t>(v) - (r64 & static_cast<uint64_t>(v >> 63));
}

// int64 -> double for |d| < 2^51 with an integer add, which vectorises where cvtsi2sd does not:
// the bits of 1.5*2^52 + d are those of 1.5*2^52 plus d.
constexpr int64_t kMagicBits = 0x4338000000000000LL;
constexpr double kMagic = 6755399441055744.0;  // 1.5 * 2^52
inline double small_to_double(int64_t biased_bits) {  // biased_bits = d + kMagicBits
  double r;
  std::memcpy(&r, &biased_bits, sizeof r);
  return r - kMagic;
}

struct Scratch {
  std::unique_ptr<double[]> xd, cd;
  std::unique_ptr<int64_t[]> acc;
  size_t xd_cap = 0, cd_cap = 0, acc_cap = 0;
};
template <class V>
V* ensure(std::unique_ptr<V[]>& p, size_t& cap, size_t n) {
  if (n > cap) {
    p.reset();  // free first: peak memory is what hurts with large panels
    p.reset(new V[n]);
    cap = n;
  }
  return p.get();
}

// Process-wide pool: a call leases one Scratch and returns it, so concurrent calls never share buffers
// and a steady stream of calls reuses the same memory (no per-call allocation).
class ScratchPool {
 public:
  std::unique_ptr<Scratch> acquire() {
    std::lock_guard<std::mutex> lk(mu_);
    if (free_.empty()) return std::make_unique<Scratch>();
    auto s = std::move(free_.back());
    free_.pop_back();
    return s;
  }
  void release(std::unique_ptr<Scratch> s) {
    std::lock_guard<std::mutex> lk(mu_);
    free_.push_back(std::move(s));
  }
  void clear() {
    std::lock_guard<std::mutex> lk(mu_);
    free_.clear();
  }

 private:
  std::mutex mu_;
  std::vector<std::unique_ptr<Scratch>> free_;
};
ScratchPool& pool() {
  static ScratchPool p;
  return p;
}
struct Lease {
  std::unique_ptr<Scratch> s = pool().acquire();
  ~Lease() { pool().release(std::move(s)); }
};

// Hot loops have a portable body (HEMLP_LOOP, always inlined) instantiated three times: for
// x86-64-v4 (AVX-512: the compiler vectorises the int64 <-> double conversions with vcvttpd2qq and
// the 64-bit products with vpmullq), for x86-64-v3 (AVX2) and for the baseline. AVX2 has neither
// instruction, so the loops that need them have hand-written AVX2 kernels (namespace avx2k below);
// the loops with Shoup products (128-bit in the portable body, which the compiler cannot vectorise)
// have hand-written kernels on both paths (avx2k, avx512k). The path follows ring::simd_path() (HEMLP_SIMD), so every path can be tested here.
#if HEMLP_HAVE_AVX2_KERNELS
#define HEMLP_LOOP inline __attribute__((always_inline))
#define HEMLP_V4_FN __attribute__((target("arch=x86-64-v4")))
#define HEMLP_V3_FN __attribute__((target("arch=x86-64-v3")))
#else
#define HEMLP_LOOP inline
#endif

enum class Kern { Base, Avx2, Avx512 };
Kern kernel_path() {
  static const Kern k = [] {
#if HEMLP_HAVE_AVX2_KERNELS
    __builtin_cpu_init();
    if (ring::simd_avx512() && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw"))
      return Kern::Avx512;
    if (ring::simd_avx2() || ring::simd_avx512()) return Kern::Avx2;  // AVX-512 without VL/BW: its AVX2 kernels
#endif
    return Kern::Base;
  }();
  return k;
}

constexpr size_t kChunk = 256;  // columns per inner step: the digit temporaries stay in L1

// Digit extraction without signed shifts: y = x' + H + C*2^(w(T-1)) >= 0, with H = sum_{t<T-1}
// 2^(w-1) 2^(wt) (biases every lower digit into [0, 2^w)) and C*2^(w(T-1)) >= 2^(qbits-1) > -x'.
// Then d_t = ((y >> wt) & (2^w-1)) - 2^(w-1) for t < T-1 and the top digit is (y >> w(T-1)) - C;
// these are exactly the greedy balanced digits. y < 3*2^60 fits a uint64.
struct SplitParams {
  uint64_t q, halfq, off, maskw, hw, ctop;
  int w, T;
  size_t plane;  // distance between digit planes in the output row
};

// Splits m <= kChunk residues into T digit planes; returns true if some residue is >= q.
HEMLP_LOOP bool split_chunk_body(const uint64_t* xr, size_t m, double* out, const SplitParams& sp) {
  uint64_t y[kChunk];
  uint64_t over = 0;
  const uint64_t q = sp.q, halfq = sp.halfq, off = sp.off;
  for (size_t j = 0; j < m; ++j) {
    const uint64_t x = xr[j];
    over |= static_cast<uint64_t>(x >= q);
    y[j] = x - (x > halfq ? q : 0) + off;  // wraps through x - q < 0 back into range
  }
  for (int t = 0; t < sp.T; ++t) {
    double* o = out + size_t(t) * sp.plane;
    const int sh = sp.w * t;
    const bool top = t == sp.T - 1;
    const uint64_t mk = top ? ~uint64_t(0) : sp.maskw;
    const int64_t bias = static_cast<int64_t>(top ? sp.ctop : sp.hw);
    if (sp.w <= 51) {  // |digit| <= 2^50: the magic-constant conversion is exact
      const int64_t add = kMagicBits - bias;
      for (size_t j = 0; j < m; ++j) o[j] = small_to_double(static_cast<int64_t>((y[j] >> sh) & mk) + add);
    } else {
      for (size_t j = 0; j < m; ++j) o[j] = static_cast<double>(static_cast<int64_t>((y[j] >> sh) & mk) - bias);
    }
  }
  return over != 0;
}

// int64 accumulation of one K-block's exact DGEMM output (|c| < 2^53).
HEMLP_LOOP void accumulate_row_body(const double* c, int64_t* a, size_t m, bool first) {
  if (first) {
    for (size_t j = 0; j < m; ++j) a[j] = static_cast<int64_t>(c[j]);
  } else {
    for (size_t j = 0; j < m; ++j) a[j] += static_cast<int64_t>(c[j]);
  }
}

// sum[j] = (sum[j] + c[j] * p) mod q for exact integers |c[j]| < 2^53, p < q < 2^61, sum in [0, q).
// The quotient is estimated in floating point: pr = p/q to within 2^-53 relative, so
// |c*p/q - trunc(c*pr)| < 2^53 * 2^-52.9 + 1 < 3.01, and r = c*p - qt*q (exact mod 2^64, computed with
// wrapping uint64 arithmetic) satisfies |r| < 3.01q < 2^63; r + 4q lies in (0, 7.01q) < 2^64.
// Vectorises (vpmullq, vcvttpd2qq) where a 64x64->128 Shoup product cannot.
HEMLP_LOOP void reduce_term_fast_body(const double* c, size_t m, uint64_t p, double pr, uint64_t q, uint64_t* sum) {
  const uint64_t q2 = 2 * q, q4 = 4 * q;
  for (size_t j = 0; j < m; ++j) {
    const double v = c[j];
    const uint64_t qt = static_cast<uint64_t>(static_cast<int64_t>(v * pr));
    const uint64_t vi = static_cast<uint64_t>(static_cast<int64_t>(v));
    uint64_t x = vi * p - qt * q + q4;
    x = x >= q4 ? x - q4 : x;
    x = x >= q2 ? x - q2 : x;
    x = x >= q ? x - q : x;
    const uint64_t s = sum[j] + x;
    sum[j] = s >= q ? s - q : s;
  }
}

// Same for K-blocked sums v = a[j] + c[j] (|v| < 2^63), with a Shoup product (any 64-bit operand).
HEMLP_LOOP void reduce_term_acc_body(const double* c, const int64_t* a, size_t m, Shoup ps, uint64_t q,
                                     uint64_t r64, uint64_t* sum) {
  for (size_t j = 0; j < m; ++j) {
    const int64_t v = a[j] + static_cast<int64_t>(c[j]);
    uint64_t x = mul_shoup_lazy(signed_to_unsigned_mod(v, r64), ps, q);
    x = x >= q ? x - q : x;
    const uint64_t s = sum[j] + x;
    sum[j] = s >= q ? s - q : s;
  }
}

// Folds a lazily accumulated int64 row into [0, q): a[j] = a[j] mod q (as a non-negative int64).
HEMLP_LOOP void fold_row_body(int64_t* a, size_t m, Shoup one, uint64_t q, uint64_t r64) {
  for (size_t j = 0; j < m; ++j) {
    const uint64_t v = mul_shoup_lazy(signed_to_unsigned_mod(a[j], r64), one, q);
    a[j] = static_cast<int64_t>(v >= q ? v - q : v);
  }
}

#if HEMLP_HAVE_AVX2_KERNELS
namespace avx2k {
using namespace ring::avx2;
using ring::avx2::mul_shoup_lazy;  // not the scalar one of this file
using ring::avx2::reduce_once;

// Exact conversion of integer-valued doubles |v| < 2^53 to int64 (AVX2 has no vcvttpd2qq):
// v = hi 2^32 + lo with hi = floor(v 2^-32), |hi| <= 2^21, lo in [0, 2^32), both exact; each is
// then converted by the magic-constant trick (exact below 2^51).
HEMLP_AVX2_FN inline __m256i exact_to_i64(__m256d v) {
  const __m256d M = _mm256_set1_pd(kMagic);
  const __m256i Mi = _mm256_castpd_si256(M);
  const __m256d hi = _mm256_floor_pd(_mm256_mul_pd(v, _mm256_set1_pd(0x1p-32)));
  const __m256d lo = _mm256_fnmadd_pd(hi, _mm256_set1_pd(0x1p32), v);
  const __m256i hi_i = _mm256_sub_epi64(_mm256_castpd_si256(_mm256_add_pd(hi, M)), Mi);
  const __m256i lo_i = _mm256_sub_epi64(_mm256_castpd_si256(_mm256_add_pd(lo, M)), Mi);
  return _mm256_add_epi64(_mm256_slli_epi64(hi_i, 32), lo_i);
}

// signed_to_unsigned_mod, 4 lanes (v >> 63 as a compare: AVX2 has no 64-bit arithmetic shift).
HEMLP_AVX2_FN inline __m256i to_unsigned_mod(__m256i v, __m256i r64) {
  return _mm256_sub_epi64(v, _mm256_and_si256(r64, _mm256_cmpgt_epi64(_mm256_setzero_si256(), v)));
}

HEMLP_AVX2_FN void accumulate_row(const double* c, int64_t* a, size_t m, bool first) {
  size_t j = 0;
  for (; j + 4 <= m; j += 4) {
    __m256i v = exact_to_i64(_mm256_loadu_pd(c + j));
    if (!first) v = _mm256_add_epi64(v, load(reinterpret_cast<const uint64_t*>(a + j)));
    store(reinterpret_cast<uint64_t*>(a + j), v);
  }
  accumulate_row_body(c + j, a + j, m - j, first);
}

HEMLP_AVX2_FN void reduce_term_fast(const double* c, size_t m, uint64_t p, double pr, uint64_t qv, uint64_t* sum) {
  const __m256i P = set1(p), q = set1(qv), q2 = set1(2 * qv), q4 = set1(4 * qv);
  const __m256d Pr = _mm256_set1_pd(pr);
  size_t j = 0;
  for (; j + 4 <= m; j += 4) {
    const __m256d v = _mm256_loadu_pd(c + j);
    // trunc(v pr) as the scalar static_cast does; |v pr| < 2^53 so the conversion is exact
    const __m256i qt = exact_to_i64(_mm256_round_pd(_mm256_mul_pd(v, Pr), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC));
    __m256i x = _mm256_add_epi64(_mm256_sub_epi64(mullo64(exact_to_i64(v), P), mullo64(qt, q)), q4);  // (0, 7.01q)
    x = reduce_once(reduce_once(reduce_once(x, q4), q2), q);
    store(sum + j, reduce_once(_mm256_add_epi64(load(sum + j), x), q));
  }
  reduce_term_fast_body(c + j, m - j, p, pr, qv, sum + j);
}

HEMLP_AVX2_FN void reduce_term_acc(const double* c, const int64_t* a, size_t m, Shoup ps, uint64_t qv, uint64_t r64,
                                   uint64_t* sum) {
  const __m256i W = set1(ps.p), Wp = set1(ps.pq), q = set1(qv), R = set1(r64);
  size_t j = 0;
  for (; j + 4 <= m; j += 4) {
    const __m256i v = _mm256_add_epi64(load(reinterpret_cast<const uint64_t*>(a + j)), exact_to_i64(_mm256_loadu_pd(c + j)));
    const __m256i x = reduce_once(mul_shoup_lazy(to_unsigned_mod(v, R), W, Wp, q), q);
    store(sum + j, reduce_once(_mm256_add_epi64(load(sum + j), x), q));
  }
  reduce_term_acc_body(c + j, a + j, m - j, ps, qv, r64, sum + j);
}

HEMLP_AVX2_FN void fold_row(int64_t* a, size_t m, Shoup one, uint64_t qv, uint64_t r64) {
  const __m256i W = set1(one.p), Wp = set1(one.pq), q = set1(qv), R = set1(r64);
  size_t j = 0;
  for (; j + 4 <= m; j += 4) {
    uint64_t* aj = reinterpret_cast<uint64_t*>(a + j);
    store(aj, reduce_once(mul_shoup_lazy(to_unsigned_mod(load(aj), R), W, Wp, q), q));
  }
  fold_row_body(a + j, m - j, one, qv, r64);
}
}  // namespace avx2k

// AVX-512 twins of avx2k::reduce_term_acc / fold_row (vcvttpd2qq and vpmullq exist here).
namespace avx512k {
using ring::avx512::mul_shoup_lazy;
using ring::avx512::reduce_once;
HEMLP_AVX512_FN inline __m512i to_unsigned_mod(__m512i v, __m512i r64) {
  return _mm512_sub_epi64(v, _mm512_and_si512(r64, _mm512_srai_epi64(v, 63)));
}
HEMLP_AVX512_FN void reduce_term_acc(const double* c, const int64_t* a, size_t m, Shoup ps, uint64_t qv,
                                     uint64_t r64, uint64_t* sum) {
  const __m512i W = _mm512_set1_epi64((long long)ps.p), Wp = _mm512_set1_epi64((long long)ps.pq);
  const __m512i q = _mm512_set1_epi64((long long)qv), R = _mm512_set1_epi64((long long)r64);
  size_t j = 0;
  for (; j + 8 <= m; j += 8) {
    const __m512i v = _mm512_add_epi64(_mm512_loadu_si512(a + j), _mm512_cvttpd_epi64(_mm512_loadu_pd(c + j)));
    const __m512i x = reduce_once(mul_shoup_lazy(to_unsigned_mod(v, R), W, Wp, q), q);
    _mm512_storeu_si512(sum + j, reduce_once(_mm512_add_epi64(_mm512_loadu_si512(sum + j), x), q));
  }
  reduce_term_acc_body(c + j, a + j, m - j, ps, qv, r64, sum + j);
}
HEMLP_AVX512_FN void fold_row(int64_t* a, size_t m, Shoup one, uint64_t qv, uint64_t r64) {
  const __m512i W = _mm512_set1_epi64((long long)one.p), Wp = _mm512_set1_epi64((long long)one.pq);
  const __m512i q = _mm512_set1_epi64((long long)qv), R = _mm512_set1_epi64((long long)r64);
  size_t j = 0;
  for (; j + 8 <= m; j += 8)
    _mm512_storeu_si512(a + j, reduce_once(mul_shoup_lazy(to_unsigned_mod(_mm512_loadu_si512(a + j), R), W, Wp, q), q));
  fold_row_body(a + j, m - j, one, qv, r64);
}
}  // namespace avx512k

HEMLP_V4_FN bool split_chunk_v4(const uint64_t* xr, size_t m, double* out, const SplitParams& sp) {
  return split_chunk_body(xr, m, out, sp);
}
HEMLP_V3_FN bool split_chunk_v3(const uint64_t* xr, size_t m, double* out, const SplitParams& sp) {
  return split_chunk_body(xr, m, out, sp);
}
HEMLP_V4_FN void accumulate_row_v4(const double* c, int64_t* a, size_t m, bool first) {
  accumulate_row_body(c, a, m, first);
}
HEMLP_V4_FN void reduce_term_fast_v4(const double* c, size_t m, uint64_t p, double pr, uint64_t q, uint64_t* sum) {
  reduce_term_fast_body(c, m, p, pr, q, sum);
}
#endif

// Dispatchers: the kernels of the active SIMD path (see kernel_path()).
bool split_chunk(const uint64_t* xr, size_t m, double* out, const SplitParams& sp) {
#if HEMLP_HAVE_AVX2_KERNELS
  if (kernel_path() == Kern::Avx512) return split_chunk_v4(xr, m, out, sp);
  if (kernel_path() == Kern::Avx2) return split_chunk_v3(xr, m, out, sp);
#endif
  return split_chunk_body(xr, m, out, sp);
}
void accumulate_row(const double* c, int64_t* a, size_t m, bool first) {
#if HEMLP_HAVE_AVX2_KERNELS
  if (kernel_path() == Kern::Avx512) return accumulate_row_v4(c, a, m, first);
  if (kernel_path() == Kern::Avx2) return avx2k::accumulate_row(c, a, m, first);
#endif
  accumulate_row_body(c, a, m, first);
}
void reduce_term_fast(const double* c, size_t m, uint64_t p, double pr, uint64_t q, uint64_t* sum) {
#if HEMLP_HAVE_AVX2_KERNELS
  if (kernel_path() == Kern::Avx512) return reduce_term_fast_v4(c, m, p, pr, q, sum);
  if (kernel_path() == Kern::Avx2) return avx2k::reduce_term_fast(c, m, p, pr, q, sum);
#endif
  reduce_term_fast_body(c, m, p, pr, q, sum);
}
void reduce_term_acc(const double* c, const int64_t* a, size_t m, Shoup ps, uint64_t q, uint64_t r64,
                     uint64_t* sum) {
#if HEMLP_HAVE_AVX2_KERNELS
  if (kernel_path() == Kern::Avx512) return avx512k::reduce_term_acc(c, a, m, ps, q, r64, sum);
  if (kernel_path() == Kern::Avx2) return avx2k::reduce_term_acc(c, a, m, ps, q, r64, sum);
#endif
  reduce_term_acc_body(c, a, m, ps, q, r64, sum);
}
void fold_row(int64_t* a, size_t m, Shoup one, uint64_t q, uint64_t r64) {
#if HEMLP_HAVE_AVX2_KERNELS
  if (kernel_path() == Kern::Avx512) return avx512k::fold_row(a, m, one, q, r64);
  if (kernel_path() == Kern::Avx2) return avx2k::fold_row(a, m, one, q, r64);
#endif
  fold_row_body(a, m, one, q, r64);
}

void check_bU(int bU) {
  if (bU < 0 || bU > kMaxUBits)
    throw std::invalid_argument("modgemm: bU must be in [0, " + std::to_string(kMaxUBits) + "], got " +
                                std::to_string(bU));
}

// Largest exact K-block for digit bounds 2^ub, 2^bx: kb * 2^(ub+bx) < 2^53, i.e. kb <= 2^(53-ub-bx) - 1.
size_t max_kb(int ub, int bx) {
  const int e = 53 - ub - bx;
  if (e < 1) return 0;
  if (e >= 63) return std::numeric_limits<size_t>::max();
  return (size_t(1) << e) - 1;
}

}  // namespace

void check_modulus(uint64_t q) {
  if (q < 3 || (q & 1) == 0 || q >= (uint64_t(1) << kMaxModulusBits))
    throw std::invalid_argument("modgemm: q must be odd with 3 <= q < 2^61, got " + std::to_string(q));
}

ModGemmConfig check_modgemm_config(size_t d2, int bU, uint64_t q, ModGemmConfig cfg) {
  check_modulus(q);
  check_bU(bU);
  if (d2 == 0) throw std::invalid_argument("modgemm: d2 must be >= 1");
  const int qbits = bitlen(q);
  if (cfg.w < 1) throw std::invalid_argument("modgemm: w must be >= 1, got " + std::to_string(cfg.w));
  if (cfg.u < 0) throw std::invalid_argument("modgemm: u must be >= 0, got " + std::to_string(cfg.u));
  // Digits wider than the value are pointless and would loosen the digit bound used below.
  const int w = std::min(cfg.w, qbits);
  const int u = cfg.u == 0 ? bU + 1 : std::min(cfg.u, bU + 1);
  const int T = static_cast<int>(ceil_div(size_t(qbits), size_t(w)));
  const int TU = static_cast<int>(ceil_div(size_t(bU) + 1, size_t(u)));
  // Balanced digits need w >= 2 (the top-digit bound |d| <= 2^(w-1) uses it).
  if (T > 1 && w < 2) throw std::invalid_argument("modgemm: w must be >= 2 when X is split");
  if (TU > 1 && u < 2) throw std::invalid_argument("modgemm: u must be >= 2 when U is split");
  if (cfg.T != 0 && cfg.T != T)
    throw std::invalid_argument("modgemm: T must equal ceil(bitlen(q)/w) = " + std::to_string(T));
  if (cfg.TU != 0 && cfg.TU != TU)
    throw std::invalid_argument("modgemm: TU must equal ceil((bU+1)/u) = " + std::to_string(TU));
  const int ub = u - 1, bx = w - 1;  // |U digit| <= 2^ub, |X digit| <= 2^bx
  const size_t kbmax = max_kb(ub, bx);
  if (kbmax == 0)
    throw std::invalid_argument("modgemm: inexact split: 2^(u-1) * 2^(w-1) = 2^" + std::to_string(ub + bx) +
                                " must be < 2^53 (even kb = 1 is inexact); use smaller digits");
  size_t kb = cfg.kb == 0 ? std::min(kbmax, d2) : cfg.kb;
  if (kb > kbmax)
    throw std::invalid_argument("modgemm: inexact split: kb * 2^(u-1) * 2^(w-1) = " + std::to_string(kb) +
                                " * 2^" + std::to_string(ub + bx) + " must be < 2^53 (kb <= " +
                                std::to_string(kbmax) + ")");
  kb = std::min(kb, d2);
  const size_t nblk = ceil_div(d2, kb);
  kb = ceil_div(d2, nblk);  // balance the blocks; never larger than the validated kb
  // Re-check the invariant on the final numbers: this is the line that keeps results exact.
  if (static_cast<long double>(kb) * std::ldexp(1.0L, ub + bx) >= std::ldexp(1.0L, 53))
    throw std::logic_error("modgemm: internal exactness check failed");
  ModGemmConfig out;
  out.w = w;
  out.T = T;
  out.u = u;
  out.TU = TU;
  out.kb = kb;
  out.nblk = nblk;
  return out;
}

ModGemmConfig choose_modgemm_config(size_t d2, int bU, uint64_t q) {
  check_modulus(q);
  check_bU(bU);
  if (d2 == 0) throw std::invalid_argument("modgemm: d2 must be >= 1");
  const int qbits = bitlen(q);
  ModGemmConfig best;
  double best_cost = std::numeric_limits<double>::infinity();
  for (int TU = 1; TU <= bU + 1; ++TU) {
    const int u = static_cast<int>(ceil_div(size_t(bU) + 1, size_t(TU)));
    if (TU > 1 && u < 2) break;
    if (ceil_div(size_t(bU) + 1, size_t(u)) != size_t(TU)) continue;  // same u as a smaller TU
    for (int T = 1; T <= qbits; ++T) {
      const int w = static_cast<int>(ceil_div(size_t(qbits), size_t(T)));
      if (T > 1 && w < 2) break;
      if (ceil_div(size_t(qbits), size_t(w)) != size_t(T)) continue;
      const size_t kbmax = std::min(max_kb(u - 1, w - 1), d2);
      if (kbmax == 0) continue;
      const size_t nblk = ceil_div(d2, kbmax);
      const size_t kb = ceil_div(d2, nblk);
      // Units: one multiply-add inside DGEMM. Small K-blocks run DGEMM below peak (32/kb), each extra
      // block costs an int64 conversion pass (~24 MAC-equivalents per output digit), and each output
      // digit costs one modular reduction plus its share of the split (~64).
      const double cost = double(T) * TU *
                          (double(d2) * (1.0 + 32.0 / double(kb)) + 24.0 * double(nblk - 1) + 64.0);
      if (cost < best_cost) {
        best_cost = cost;
        best.w = w;
        best.u = u;
        best.kb = kb;
      }
    }
  }
  if (best.w == 0) throw std::logic_error("modgemm: no exact split found");  // unreachable: w=u=2 works
  return check_modgemm_config(d2, bU, q, best);
}

ModGemmPlan::ModGemmPlan(const int64_t* U, size_t d1, size_t d2, int bU) : d1_(d1), d2_(d2), bU_(bU) {
  if (d1 == 0 || d2 == 0)
    throw std::invalid_argument("ModGemmPlan: U must be non-empty, got " + std::to_string(d1) + " x " +
                                std::to_string(d2));
  if (d1 > size_t(INT_MAX) || d2 > size_t(INT_MAX))
    throw std::invalid_argument("ModGemmPlan: dimensions must fit a BLAS int");
  if (U == nullptr) throw std::invalid_argument("ModGemmPlan: U is null");
  check_bU(bU);
  const uint64_t bound = uint64_t(1) << bU;
  U_.assign(U, U + d1 * d2);
  for (size_t i = 0; i < U_.size(); ++i) {
    const int64_t v = U_[i];
    // |v| computed in unsigned so INT64_MIN does not overflow.
    const uint64_t mag = v < 0 ? uint64_t(0) - uint64_t(v) : uint64_t(v);
    if (mag > bound)
      throw std::invalid_argument("ModGemmPlan: |U[" + std::to_string(i / d2) + "][" + std::to_string(i % d2) +
                                  "]| = " + std::to_string(mag) + " exceeds 2^bU = 2^" + std::to_string(bU));
  }
}

std::shared_ptr<const std::vector<double>> ModGemmPlan::split_u(int u, int TU) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = usplit_.find(u);
  if (it != usplit_.end()) return it->second;
  auto out = std::make_shared<std::vector<double>>(size_t(TU) * d1_ * d2_);
  const size_t plane = d1_ * d2_;
  const int64_t h = TU > 1 ? int64_t(1) << (u - 1) : 0;
  const uint64_t mask = TU > 1 ? (uint64_t(1) << u) - 1 : 0;
  for (size_t idx = 0; idx < plane; ++idx) {
    int64_t v = U_[idx];
    for (int s = 0; s + 1 < TU; ++s) {
      // Balanced digit d = v mod 2^u in [-2^(u-1), 2^(u-1)); v - d is divisible by 2^u exactly.
      const int64_t d = static_cast<int64_t>((static_cast<uint64_t>(v) + uint64_t(h)) & mask) - h;
      (*out)[size_t(s) * plane + idx] = static_cast<double>(d);
      v = (v - d) >> u;
    }
    // Top digit: |v| <= 2^(u-1) since u*TU >= bU+1 (see modgemm.h); verified, not assumed.
    if (TU > 1 && (v > (int64_t(1) << (u - 1)) || v < -(int64_t(1) << (u - 1))))
      throw std::logic_error("ModGemmPlan: U digit out of range");
    (*out)[size_t(TU - 1) * plane + idx] = static_cast<double>(v);
  }
  usplit_.emplace(u, out);
  return out;
}

void ModGemmPlan::apply(const uint64_t* const* Xrows, size_t n, uint64_t q, uint64_t* C, size_t ldc) const {
  apply(Xrows, n, q, C, ldc, config(q));
}

void ModGemmPlan::apply(const uint64_t* const* Xrows, size_t n, uint64_t q, uint64_t* C, size_t ldc,
                        const ModGemmConfig& cfg) const {
  if (n == 0) {
    check_config(q, cfg);
    return;
  }
  if (C == nullptr) throw std::invalid_argument("modgemm: null X or C");
  if (ldc < n) throw std::invalid_argument("modgemm: ldc < n");
  std::vector<uint64_t*> rows(d1_);
  for (size_t i = 0; i < d1_; ++i) rows[i] = C + i * ldc;
  apply_rows(Xrows, n, q, rows.data(), 1, cfg);
}

void ModGemmPlan::apply_rows(const uint64_t* const* Xrows, size_t n, uint64_t q, uint64_t* const* Crows,
                             uint64_t mult, const ModGemmConfig& cfg_in) const {
  const ModGemmConfig cfg = check_config(q, cfg_in);
  if (n == 0) return;
  if (Xrows == nullptr || Crows == nullptr) throw std::invalid_argument("modgemm: null X or C");
  if (mult >= q) throw std::invalid_argument("modgemm: the multiplier must be reduced mod q");
  for (size_t i = 0; i < d1_; ++i)
    if (Crows[i] == nullptr) throw std::invalid_argument("modgemm: C row " + std::to_string(i) + " is null");
  for (size_t k = 0; k < d2_; ++k)
    if (Xrows[k] == nullptr) throw std::invalid_argument("modgemm: X row " + std::to_string(k) + " is null");

  const int T = cfg.T, TU = cfg.TU, w = cfg.w, u = cfg.u;
  const int qbits = bitlen(q);
  const size_t d1 = d1_, d2 = d2_, M = size_t(TU) * d1, kb = cfg.kb, nblk = cfg.nblk;
  const auto Ud = split_u(u, TU);

  // Column panel: [X_0 | X_1 | ... | X_{T-1}] digit planes side by side, jn columns each.
  const size_t per_col = sizeof(double) * (d2 * T + M * T * (nblk > 1 ? 2 : 1));
  size_t nb = std::max<size_t>(16, kPanelBytes / per_col);
  if (nb >= n) {
    nb = n;
  } else {
    nb = ceil_div(n, ceil_div(n, nb));   // equal panels
    nb = std::min(n, ceil_div(nb, 8) * 8);  // 64-byte aligned panel starts in C and X
  }
  if (size_t(T) * nb > size_t(INT_MAX) || M > size_t(INT_MAX))
    throw std::invalid_argument("modgemm: problem too large for a BLAS int");

  Lease lease;
  Scratch& sc = *lease.s;
  double* xd = ensure(sc.xd, sc.xd_cap, d2 * T * nb);
  double* cd = ensure(sc.cd, sc.cd_cap, M * T * nb);
  int64_t* acc = nblk > 1 ? ensure(sc.acc, sc.acc_cap, M * T * nb) : nullptr;

  SplitParams sp;
  sp.q = q;
  sp.halfq = q >> 1;
  sp.w = w;
  sp.T = T;
  sp.plane = 0;  // set per panel
  sp.hw = uint64_t(1) << (w - 1);
  sp.maskw = T > 1 ? (uint64_t(1) << w) - 1 : ~uint64_t(0);
  const int top_shift = w * (T - 1);
  uint64_t H = 0;
  for (int t = 0; t + 1 < T; ++t) H += sp.hw << (w * t);
  sp.ctop = uint64_t(1) << std::max(0, qbits - 1 - top_shift);
  sp.off = H + (sp.ctop << top_shift);

  // Recombination constants 2^(u s + w t) mod q (Shoup form and p/q as a double).
  const size_t nterm = size_t(T) * TU;
  std::vector<Shoup> P(nterm);
  std::vector<double> Pr(nterm);
  for (int s = 0; s < TU; ++s)
    for (int t = 0; t < T; ++t) {
      uint64_t p = mult;  // mult * 2^(us+wt) mod q
      for (int e = 0; e < u * s + w * t; ++e) p = (p << 1) >= q ? (p << 1) - q : (p << 1);
      P[size_t(s) * T + t] = make_shoup(p, q);
      Pr[size_t(s) * T + t] = static_cast<double>(static_cast<long double>(p) / static_cast<long double>(q));
    }
  const uint64_t r64 = static_cast<uint64_t>((u128(1) << 64) % q);
  const Shoup one = make_shoup(1, q);
  const double* Ubase = Ud->data();

  // Split row k of the panel starting at j0 into T digit planes [X_0 | ... | X_{T-1}] of jn columns.
  auto split_row = [&](size_t k, size_t j0, size_t jn) {
    SplitParams spp = sp;
    spp.plane = jn;
    bool bad = false;
    double* out = xd + k * size_t(T) * jn;
    for (size_t jb = 0; jb < jn; jb += kChunk)
      bad |= split_chunk(Xrows[k] + j0 + jb, std::min(kChunk, jn - jb), out + jb, spp);
    return bad;
  };
  // C[i][j0+j] = sum_{s,t} (exact digit-product sum) * 2^(us+wt) mod q.
  auto reduce_row = [&](size_t i, size_t j0, size_t jn) {
    const size_t ldx = size_t(T) * jn;
    for (size_t jb = 0; jb < jn; jb += kChunk) {
      const size_t m = std::min(kChunk, jn - jb);
      uint64_t* cr = Crows[i] + j0 + jb;
      std::fill(cr, cr + m, uint64_t(0));  // the output row doubles as the accumulator
      for (int s = 0; s < TU; ++s)
        for (int t = 0; t < T; ++t) {
          const size_t idx = size_t(s) * T + t;
          const size_t o = (size_t(s) * d1 + i) * ldx + size_t(t) * jn + jb;
          if (nblk == 1)
            reduce_term_fast(cd + o, m, P[idx].p, Pr[idx], q, cr);
          else
            reduce_term_acc(cd + o, acc + o, m, P[idx], q, r64, cr);
        }
    }
  };
  auto throw_bad = [](int row) {
    throw std::invalid_argument("modgemm: X row " + std::to_string(row) + " holds a residue >= q");
  };

  // Parallel regions are few and dynamically scheduled: each one ends in a join that waits for every
  // thread, which is costly when BLAS worker threads (or other processes) still occupy the cores.
  // So the reduction of panel p and the split of panel p+1 share one region, between the DGEMMs.
  {
    const size_t jn = std::min(nb, n);
    int bad_row = -1;
#pragma omp parallel for schedule(dynamic, 4) if (d2 * T * jn >= kOmpMinWork) reduction(max : bad_row)
    for (long long kk = 0; kk < static_cast<long long>(d2); ++kk)
      if (split_row(static_cast<size_t>(kk), 0, jn)) bad_row = std::max(bad_row, static_cast<int>(std::min<long long>(kk, INT_MAX)));
    if (bad_row >= 0) throw_bad(bad_row);
  }
  for (size_t j0 = 0; j0 < n; j0 += nb) {
    const size_t jn = std::min(nb, n - j0);
    const size_t ldx = size_t(T) * jn;

    // One DGEMM per K-block; exact int64 accumulation between blocks.
    size_t since_fold = 0;
    for (size_t b = 0; b < nblk; ++b) {
      const size_t k0 = b * kb, kl = std::min(kb, d2 - k0);
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(M), static_cast<int>(ldx),
                  static_cast<int>(kl), 1.0, Ubase + k0, static_cast<int>(d2), xd + k0 * ldx,
                  static_cast<int>(ldx), 0.0, cd, static_cast<int>(ldx));
      if (b + 1 == nblk) break;
      // Fold into [0, q) before the lazy int64 sum could overflow (see kFoldEvery).
      const bool first = b == 0, fold = ++since_fold == kFoldEvery;
      if (fold) since_fold = 0;
#pragma omp parallel for schedule(dynamic, 4) if (M * ldx >= kOmpMinWork)
      for (long long rr = 0; rr < static_cast<long long>(M); ++rr) {
        int64_t* a = acc + static_cast<size_t>(rr) * ldx;
        accumulate_row(cd + static_cast<size_t>(rr) * ldx, a, ldx, first);
        if (fold) fold_row(a, ldx, one, q, r64);
      }
    }

    // Reduce this panel (rows [0, d1)) and split the next one (rows [d1, d1 + d2)) in one region.
    // The next split only overwrites xd, which no DGEMM reads any more.
    const size_t j1 = j0 + jn, jn1 = j1 < n ? std::min(nb, n - j1) : 0;
    const size_t items = d1 + (jn1 ? d2 : 0);
    int bad_row = -1;
#pragma omp parallel for schedule(dynamic, 4) if ((M + d2) * ldx >= kOmpMinWork) reduction(max : bad_row)
    for (long long it = 0; it < static_cast<long long>(items); ++it) {
      const size_t r = static_cast<size_t>(it);
      if (r < d1)
        reduce_row(r, j0, jn);
      else if (split_row(r - d1, j1, jn1))
        bad_row = std::max(bad_row, static_cast<int>(std::min<size_t>(r - d1, INT_MAX)));
    }
    if (bad_row >= 0) throw_bad(bad_row);
  }
}

void modgemm_ref(const int64_t* U, size_t d1, size_t d2, const uint64_t* const* Xrows, size_t n,
                 uint64_t q, uint64_t* C, size_t ldc) {
  check_modulus(q);
  if (n == 0 || d1 == 0) return;
  if (U == nullptr || Xrows == nullptr || C == nullptr) throw std::invalid_argument("modgemm_ref: null pointer");
  if (ldc < n) throw std::invalid_argument("modgemm_ref: ldc < n");
  // Products of residues are < q^2 < 2^122, so 32 of them fit an unsigned __int128 before a reduction.
#pragma omp parallel for schedule(dynamic)
  for (long long ii = 0; ii < static_cast<long long>(d1); ++ii) {
    const size_t i = static_cast<size_t>(ii);
    std::vector<u128> acc(n, 0);
    int pending = 0;
    for (size_t k = 0; k < d2; ++k) {
      const int64_t v = U[i * d2 + k];
      int64_t r = v % static_cast<int64_t>(q);
      const uint64_t uk = static_cast<uint64_t>(r < 0 ? r + static_cast<int64_t>(q) : r);
      if (uk == 0) continue;
      const uint64_t* xr = Xrows[k];
      for (size_t j = 0; j < n; ++j) acc[j] += u128(uk) * xr[j];
      if (++pending == 31) {
        for (size_t j = 0; j < n; ++j) acc[j] %= q;
        pending = 0;
      }
    }
    for (size_t j = 0; j < n; ++j) C[i * ldc + j] = static_cast<uint64_t>(acc[j] % q);
  }
}

void modgemm_release_scratch() { pool().clear(); }

}  // namespace hemlp::pcmm
