// RNS tools: fast base conversion (Bajard et al.), used by ModUp / ModDown / rescale.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ring/modarith.h"

namespace hemlp::ring {

// FBC from basis B = {q_i} to basis B' = {p_j}:
//   FBC(x)_p = sum_i [x_i * qhat_i^-1]_{q_i} * [qhat_i]_p  (mod p),   qhat_i = Q_B / q_i.
// The result is x + v*Q_B (mod p) with 0 <= v < |B|: exact up to a small multiple of Q_B.
// Centred (the default for key switching): each [x_i qhat_i^-1] is lifted to (-q_i/2, q_i/2],
// so the result is x_c + v*Q_B with x_c the centred representative of x and |v| <= |B|/2 + 1:
// ModDown then rounds instead of flooring and its error has mean zero and half the size.
class BaseConverter {
 public:
  BaseConverter(std::vector<Modulus> from, std::vector<Modulus> to, bool centred = false);
  // in: |B| limbs of n coefficients (coefficient form), in[i] -> limb i.
  // out: |B'| limbs. Pointers may be arbitrary (gathered limbs).
  // `targets` (optional) selects which target moduli to produce: out[t] receives target
  // targets[t]; without it out[j] receives target j for every j.
  void convert(const uint64_t* const* in, uint64_t* const* out, size_t n,
               const std::vector<int>* targets = nullptr) const;
  size_t from_size() const { return from_.size(); }
  size_t to_size() const { return to_.size(); }

 private:
  std::vector<Modulus> from_, to_;
  std::vector<uint64_t> qhat_inv_, qhat_inv_p_;  // per source limb, Shoup form
  std::vector<uint64_t> qhat_mod_p_;             // [j * |B| + i] = qhat_i mod p_j
  std::vector<uint64_t> qhat_mod_p_shoup_;       // Shoup companions of qhat_mod_p_
  std::vector<uint64_t> qb_mod_p_;               // [j * (|B|+1) + c] = c * Q_B mod p_j (centred lift)
  bool centred_ = false;
  // AVX2 double-precision kernels (avx2::FpMod, rns.cpp): for sources q_i < 2^46, (qhat_i^-1, its / q_i)
  // at [2i]; for targets p_j < 2^46 (fp_target_), [4 (j |B| + i) ..] = (c, c / p_j, c 2^32 mod p_j, its / p_j)
  // with c = qhat_i mod p_j (a source >= 2^46 enters as its two 32-bit halves)
  std::vector<double> fp_src_, fp_dst_;
  std::vector<char> fp_target_;
};

}  // namespace hemlp::ring
