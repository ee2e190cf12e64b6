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
class BaseConverter {
 public:
  BaseConverter(std::vector<Modulus> from, std::vector<Modulus> to);
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
};

}  // namespace hemlp::ring
