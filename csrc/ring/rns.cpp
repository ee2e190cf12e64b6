#include "ring/rns.h"

#include <algorithm>

namespace hemlp::ring {

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
}

void BaseConverter::convert(const uint64_t* const* in, uint64_t* const* out, size_t n,
                            const std::vector<int>* targets) const {
  const size_t nt = targets ? targets->size() : to_.size();
  const size_t k = from_.size();
  constexpr size_t kBlock = 256;  // keep y (k x block) in L1/L2
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
