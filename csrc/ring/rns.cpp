#include "ring/rns.h"

#include <algorithm>

#include "ring/simd.h"

namespace hemlp::ring {

namespace {
// moduli the AVX2 double-precision kernels take (avx2::FpMod)
bool fp_small(uint64_t q) { return q < (uint64_t(1) << 46); }
}  // namespace

BaseConverter::BaseConverter(std::vector<Modulus> from, std::vector<Modulus> to, bool centred)
    : from_(std::move(from)), to_(std::move(to)), centred_(centred) {
  const size_t k = from_.size();
  qhat_inv_.resize(k);
  qhat_inv_p_.resize(k);
  for (size_t i = 0; i < k; ++i) {
    const uint64_t qi = from_[i].q;
    uint64_t prod = 1;  // qhat_i mod q_i
    for (size_t l = 0; l < k; ++l)
      if (l != i) prod = from_[i].mul(prod, from_[l].q % qi);
    qhat_inv_[i] = inv_mod(prod, qi);
    qhat_inv_p_[i] = shoup_precompute(qhat_inv_[i], qi);
  }
  qhat_mod_p_.resize(to_.size() * k);
  qhat_mod_p_shoup_.resize(to_.size() * k);
  for (size_t j = 0; j < to_.size(); ++j) {
    const Modulus& p = to_[j];
    for (size_t i = 0; i < k; ++i) {
      uint64_t prod = 1;
      for (size_t l = 0; l < k; ++l)
        if (l != i) prod = p.mul(prod, from_[l].q % p.q);
      qhat_mod_p_[j * k + i] = prod;
      qhat_mod_p_shoup_[j * k + i] = shoup_precompute(prod, p.q);
    }
    uint64_t qb = 1;
    for (size_t l = 0; l < k; ++l) qb = p.mul(qb, from_[l].q % p.q);
    for (size_t c = 0; c <= k; ++c) qb_mod_p_.push_back(p.mul(c, qb));
  }
  fp_src_.assign(2 * k, 0.0);
  for (size_t i = 0; i < k; ++i)
    if (fp_small(from_[i].q))
      fp_src_[2 * i] = (double)qhat_inv_[i], fp_src_[2 * i + 1] = fp_src_[2 * i] / (double)from_[i].q;
  fp_dst_.assign(4 * to_.size() * k, 0.0);
  fp_target_.assign(to_.size(), 0);
  // |sum| / p: the centred lift's correction (<= |B| p), one term per small source, two per large one
  double terms = (double)k;
  for (size_t i = 0; i < k; ++i) terms += fp_small(from_[i].q) ? 0.5625 : 2 * 0.5625;
  for (size_t j = 0; j < to_.size(); ++j) {
    const Modulus& p = to_[j];
    fp_target_[j] = fp_small(p.q) && terms * (double)p.q < 0x1p50;
    for (size_t i = 0; i < k; ++i) {
      const uint64_t c = qhat_mod_p_[j * k + i], c32 = p.mul(c, ((u128)1 << 32) % p.q);
      double* f = fp_dst_.data() + 4 * (j * k + i);
      f[0] = (double)c, f[1] = f[0] / (double)p.q, f[2] = (double)c32, f[3] = f[2] / (double)p.q;
    }
  }
}

#if HEMLP_HAVE_AVX512_KERNELS
namespace {
// One block of `len` (a multiple of 8) coefficients; see BaseConverter::convert for the scalar twin.
HEMLP_AVX512_FN void convert_block_avx512(const uint64_t* const* in, uint64_t* const* out, size_t c0, size_t len,
                                          const std::vector<Modulus>& from, const std::vector<Modulus>& to,
                                          const uint64_t* qhat_inv, const uint64_t* qhat_inv_p,
                                          const uint64_t* qhat_mod_p, const uint64_t* qhat_mod_p_shoup,
                                          const uint64_t* qb_mod_p, bool centred, const std::vector<int>* targets,
                                          size_t nt, uint64_t* y, uint64_t* lifted, size_t stride) {
  using namespace avx512;
  const size_t k = from.size();
  if (centred)
    for (size_t c = 0; c < len; c += 8) _mm512_storeu_si512(lifted + c, _mm512_setzero_si512());
  for (size_t i = 0; i < k; ++i) {
    const __m512i q = _mm512_set1_epi64((long long)from[i].q), half = _mm512_set1_epi64((long long)(from[i].q >> 1));
    const __m512i w = _mm512_set1_epi64((long long)qhat_inv[i]), wp = _mm512_set1_epi64((long long)qhat_inv_p[i]);
    const __m512i one = _mm512_set1_epi64(1);
    const uint64_t* src = in[i] + c0;
    uint64_t* yi = y + i * stride;
    for (size_t c = 0; c < len; c += 8) {
      const __m512i v = reduce_once(mul_shoup_lazy(_mm512_loadu_si512(src + c), w, wp, q), q);
      _mm512_storeu_si512(yi + c, v);
      if (centred) {
        const __mmask8 gt = _mm512_cmpgt_epu64_mask(v, half);
        const __m512i l = _mm512_loadu_si512(lifted + c);
        _mm512_storeu_si512(lifted + c, _mm512_mask_add_epi64(l, gt, l, one));
      }
    }
  }
  constexpr size_t kMaxFrom = 16;
  __m512i W[kMaxFrom], Wp[kMaxFrom];
  for (size_t t = 0; t < nt; ++t) {
    const size_t j = targets ? (size_t)(*targets)[t] : t;
    const uint64_t pv = to[j].q;
    const __m512i p = _mm512_set1_epi64((long long)pv), two_p = _mm512_set1_epi64((long long)(2 * pv));
    for (size_t i = 0; i < k; ++i) {
      W[i] = _mm512_set1_epi64((long long)qhat_mod_p[j * k + i]);
      Wp[i] = _mm512_set1_epi64((long long)qhat_mod_p_shoup[j * k + i]);
    }
    const long long* tbl = (const long long*)(qb_mod_p + j * (k + 1));
    uint64_t* dst = out[t] + c0;
    for (size_t c = 0; c < len; c += 8) {
      __m512i acc = mul_shoup_lazy(_mm512_loadu_si512(y + c), W[0], Wp[0], p);  // [0, 2p)
      for (size_t i = 1; i < k; ++i)
        acc = reduce_once(_mm512_add_epi64(acc, mul_shoup_lazy(_mm512_loadu_si512(y + i * stride + c), W[i], Wp[i], p)),
                          two_p);
      __m512i r = reduce_once(acc, p);
      if (centred) {
        const __m512i sub = _mm512_i64gather_epi64(_mm512_loadu_si512(lifted + c), tbl, 8);
        const __m512i d = _mm512_sub_epi64(r, sub);
        r = _mm512_min_epu64(d, _mm512_add_epi64(d, p));
      }
      _mm512_storeu_si512(dst + c, r);
    }
  }
}
}  // namespace
#endif

#if HEMLP_HAVE_AVX2_KERNELS
namespace {
// AVX2 twin of convert_block_avx512 (4 lanes; `len` a multiple of 4). Moduli below 2^46 run in double
// precision (avx2::FpMod; tables fp_src / fp_dst / fp_target, see rns.h): y_i of a small source from one
// FMA product, and a small target's sum of signed representatives less lifted Q_B (one FMA, no table
// gather; < 2^50 in all, checked at construction) rounded once to [0, p); a source >= 2^46 enters a small
// target's sum as y_lo c + y_hi (c 2^32 mod p).
// The others keep the integer Shoup products. Every output is the canonical residue: bit-identical.
HEMLP_AVX2_FN void convert_block_avx2(const uint64_t* const* in, uint64_t* const* out, size_t c0, size_t len,
                                      const std::vector<Modulus>& from, const std::vector<Modulus>& to,
                                      const uint64_t* qhat_inv, const uint64_t* qhat_inv_p,
                                      const uint64_t* qhat_mod_p, const uint64_t* qhat_mod_p_shoup,
                                      const uint64_t* qb_mod_p, bool centred, const std::vector<int>* targets,
                                      size_t nt, uint64_t* y, uint64_t* lifted, size_t stride, const double* fp_src,
                                      const double* fp_dst, const char* fp_target, double* yd, double* yh) {
  using namespace avx2;
  const size_t k = from.size();
  bool any_fp = false;
  for (size_t t = 0; t < nt; ++t) any_fp |= fp_target[targets ? (size_t)(*targets)[t] : t] != 0;
  if (centred)
    for (size_t c = 0; c < len; c += 4) store(lifted + c, _mm256_setzero_si256());
  const __m256i m32 = set1(0xffffffffULL);
  for (size_t i = 0; i < k; ++i) {
    const uint64_t qv = from[i].q;
    const __m256i q = set1(qv), half = set1(qv >> 1);
    const __m256i w = set1(qhat_inv[i]), wp = set1(qhat_inv_p[i]);
    const FpMod F(qv);
    const bool small = fp_small(qv);
    const __m256d fw = _mm256_set1_pd(fp_src[2 * i]), fwq = _mm256_set1_pd(fp_src[2 * i + 1]);
    const uint64_t* src = in[i] + c0;
    uint64_t* yi = y + i * stride;
    double *ydi = yd + i * stride, *yhi = yh + i * stride;
    for (size_t c = 0; c < len; c += 4) {
      const __m256i v = small ? F.to_u64(F.mul(F.from_u64(load(src + c)), fw, fwq))
                              : avx2::reduce_once(avx2::mul_shoup_lazy(load(src + c), w, wp, q), q);
      store(yi + c, v);
      if (any_fp) {  // the doubles the small targets read: y itself, or its 32-bit halves
        if (small) {
          _mm256_storeu_pd(ydi + c, F.from_u64(v));
        } else {
          _mm256_storeu_pd(ydi + c, F.from_u64(_mm256_and_si256(v, m32)));
          _mm256_storeu_pd(yhi + c, F.from_u64(_mm256_srli_epi64(v, 32)));
        }
      }
      if (centred)  // values < 2^61: the signed compare is exact; its all-ones mask is -1
        store(lifted + c, _mm256_sub_epi64(load(lifted + c), _mm256_cmpgt_epi64(v, half)));
    }
  }
  constexpr size_t kMaxFrom = 16;
  __m256i W[kMaxFrom], Wp[kMaxFrom];
  __m256d FW[kMaxFrom], FWq[kMaxFrom], FH[kMaxFrom], FHq[kMaxFrom];
  for (size_t t = 0; t < nt; ++t) {
    const size_t j = targets ? (size_t)(*targets)[t] : t;
    const uint64_t pv = to[j].q;
    const long long* tbl = (const long long*)(qb_mod_p + j * (k + 1));
    uint64_t* dst = out[t] + c0;
    if (fp_target[j]) {
      const FpMod F(pv);
      const __m256d QB = _mm256_set1_pd((double)qb_mod_p[j * (k + 1) + 1]);
      for (size_t i = 0; i < k; ++i) {
        const double* f = fp_dst + 4 * (j * k + i);
        FW[i] = _mm256_set1_pd(f[0]), FWq[i] = _mm256_set1_pd(f[1]);
        FH[i] = _mm256_set1_pd(f[2]), FHq[i] = _mm256_set1_pd(f[3]);
      }
      for (size_t c = 0; c < len; c += 4) {
        __m256d acc = _mm256_setzero_pd();
        for (size_t i = 0; i < k; ++i) {
          acc = _mm256_add_pd(acc, F.mul(_mm256_loadu_pd(yd + i * stride + c), FW[i], FWq[i]));
          if (!fp_small(from[i].q))
            acc = _mm256_add_pd(acc, F.mul(_mm256_loadu_pd(yh + i * stride + c), FH[i], FHq[i]));
        }
        // minus lifted Q_B: lifted <= |B| and Q_B mod p < 2^46, so the product is exact and so is the FMA
        if (centred) acc = _mm256_fnmadd_pd(F.from_u64(load(lifted + c)), QB, acc);
        store(dst + c, F.to_u64(acc));
      }
      continue;
    }
    const __m256i p = set1(pv), two_p = set1(2 * pv);
    for (size_t i = 0; i < k; ++i) {
      W[i] = set1(qhat_mod_p[j * k + i]);
      Wp[i] = set1(qhat_mod_p_shoup[j * k + i]);
    }
    for (size_t c = 0; c < len; c += 4) {
      __m256i acc = avx2::mul_shoup_lazy(load(y + c), W[0], Wp[0], p);  // [0, 2p)
      for (size_t i = 1; i < k; ++i)
        acc = avx2::reduce_once(_mm256_add_epi64(acc, avx2::mul_shoup_lazy(load(y + i * stride + c), W[i], Wp[i], p)),
                                two_p);
      __m256i r = avx2::reduce_once(acc, p);
      if (centred) {
        const __m256i sub = _mm256_i64gather_epi64(tbl, load(lifted + c), 8);
        // r - sub mod p; both < 2^61, so the signed compare is exact
        r = _mm256_add_epi64(_mm256_sub_epi64(r, sub), _mm256_and_si256(p, _mm256_cmpgt_epi64(sub, r)));
      }
      store(dst + c, r);
    }
  }
}
}  // namespace
#endif

void BaseConverter::convert(const uint64_t* const* in, uint64_t* const* out, size_t n,
                            const std::vector<int>* targets) const {
  const size_t nt = targets ? targets->size() : to_.size();
  const size_t k = from_.size();
  constexpr size_t kBlock = 256;  // keep y (k x block) in L1/L2
#if HEMLP_HAVE_AVX512_KERNELS
  if (simd_avx512() && n % 8 == 0 && k <= 16) {
#pragma omp parallel
    {
      std::vector<uint64_t> y(k * kBlock), lifted(kBlock);
#pragma omp for schedule(static)
      for (size_t c0 = 0; c0 < n; c0 += kBlock)
        convert_block_avx512(in, out, c0, std::min(kBlock, n - c0), from_, to_, qhat_inv_.data(),
                             qhat_inv_p_.data(), qhat_mod_p_.data(), qhat_mod_p_shoup_.data(), qb_mod_p_.data(),
                             centred_, targets, nt, y.data(), lifted.data(), kBlock);
    }
    return;
  }
#endif
#if HEMLP_HAVE_AVX2_KERNELS
  if (simd_avx2() && n % 4 == 0 && k <= 16) {
#pragma omp parallel
    {
      std::vector<uint64_t> y(k * kBlock), lifted(kBlock);
      std::vector<double> yd(k * kBlock), yh(k * kBlock);
#pragma omp for schedule(static)
      for (size_t c0 = 0; c0 < n; c0 += kBlock)
        convert_block_avx2(in, out, c0, std::min(kBlock, n - c0), from_, to_, qhat_inv_.data(), qhat_inv_p_.data(),
                           qhat_mod_p_.data(), qhat_mod_p_shoup_.data(), qb_mod_p_.data(), centred_, targets, nt,
                           y.data(), lifted.data(), kBlock, fp_src_.data(), fp_dst_.data(), fp_target_.data(),
                           yd.data(), yh.data());
    }
    return;
  }
#endif
#pragma omp parallel
  {
  std::vector<uint64_t> y(k * kBlock);
  std::vector<uint32_t> lifted(kBlock);  // centred: how many y_i were lifted to y_i - q_i
#pragma omp for schedule(static)
  for (size_t c0 = 0; c0 < n; c0 += kBlock) {
    const size_t len = std::min(kBlock, n - c0);
    if (centred_) std::fill(lifted.begin(), lifted.begin() + len, 0);
    for (size_t i = 0; i < k; ++i) {
      const uint64_t qi = from_[i].q, w = qhat_inv_[i], wp = qhat_inv_p_[i], half = qi >> 1;
      const uint64_t* src = in[i] + c0;
      uint64_t* yi = y.data() + i * kBlock;
      for (size_t c = 0; c < len; ++c) yi[c] = mul_shoup(src[c], w, wp, qi);
      if (centred_)
        for (size_t c = 0; c < len; ++c) lifted[c] += yi[c] > half;
    }
    for (size_t t = 0; t < nt; ++t) {
      const size_t j = targets ? (size_t)(*targets)[t] : t;
      const Modulus& p = to_[j];
      const uint64_t* coef = qhat_mod_p_.data() + j * k;
      const uint64_t* coefp = qhat_mod_p_shoup_.data() + j * k;
      const uint64_t two_p = 2 * p.q;
      uint64_t* dst = out[t] + c0;
      for (size_t c = 0; c < len; ++c) {
        // Shoup products with the fixed constants (any 64-bit y works), kept in [0, 2p)
        uint64_t acc = 0;
        for (size_t i = 0; i < k; ++i) {
          acc += mul_shoup_lazy(y[i * kBlock + c], coef[i], coefp[i], p.q);
          acc = acc >= two_p ? acc - two_p : acc;
        }
        uint64_t r = acc >= p.q ? acc - p.q : acc;
        // (y_i - q_i) qhat_i = y_i qhat_i - Q_B: subtract Q_B once per lifted term
        if (centred_) r = sub_mod(r, qb_mod_p_[j * (k + 1) + lifted[c]], p.q);
        dst[c] = r;
      }
    }
  }
  }
}

}  // namespace hemlp::ring
