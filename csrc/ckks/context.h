// Context: the parameters plus every precomputation the operations need (NTT tables,
// RNS converters for ModUp/ModDown/rescale, Galois permutations). Immutable after
// construction except for thread-safe lazily built caches and the scratch-buffer pool.
#pragma once
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "ckks/params.h"
#include "ckks/scratch.h"
#include "ring/modarith.h"
#include "ring/ntt.h"
#include "ring/rns.h"

namespace hemlp {

using ring::Modulus;
using ring::u128;
using u64 = uint64_t;

// Polynomial in RNS form: limb k occupies [k*N, (k+1)*N). Which modulus each limb uses is
// given by the caller's "limb map" (see Context::qp_index).
using Poly = std::vector<u64>;

// The security level the party that builds a context accepts: decided by the client, enforced here so that no
// wrapper or server-published parameter set can skip it. min_bits = 128 (default) refuses any parameter set
// outside the 128-bit HE-standard bound (uniform ternary secret, sigma >= 3.2, log QP including P);
// min_bits = 0 accepts anything (insecure test sets only). The standard's tables certify 128 bits only.
struct SecurityPolicy {
  int min_bits = 128;
};

class Context {
 public:
  // Throws ErrorKind::Insecure when `params` do not meet `policy`.
  explicit Context(const Params& params, SecurityPolicy policy = SecurityPolicy{});

  const Params& params() const { return params_; }
  const SecurityPolicy& policy() const { return policy_; }
  size_t n() const { return n_; }
  int log_n() const { return params_.log_n(); }
  int max_level() const { return params_.max_level(); }
  int num_p() const { return (int)params_.p().size(); }
  int alpha() const { return params_.alpha(); }
  uint64_t hash64() const { return params_.hash64(); }

  // Moduli are indexed q_0..q_L then p_0..p_{K-1}.
  const Modulus& modulus(int idx) const { return moduli_[idx]; }
  const ring::NTTTables& ntt(int idx) const { return *ntt_[idx]; }
  int p_index(int j) const { return max_level() + 1 + j; }
  // Modulus index of limb k of a polynomial over Q_level ∪ P.
  int qp_index(int level, int k) const { return k <= level ? k : p_index(k - level - 1); }

  // In-place (inverse) NTT of `limbs` limbs whose modulus indices are given by `idx(k)`.
  void ntt_limbs(u64* data, int level, int limbs, bool ext) const;
  void intt_limbs(u64* data, int level, int limbs, bool ext) const;

  // Converter from the moduli [start, start+count) (q indices) to all of Q_L ∪ P.
  const ring::BaseConverter& modup_converter(int start, int count) const;
  // Converter from {q_level} ∪ P to all moduli (the fused ModDown + rescale divides by P q_level).
  const ring::BaseConverter& rescale_down_converter(int level) const;
  // Converter from P to Q_L.
  const ring::BaseConverter& moddown_converter() const { return *moddown_; }
  u64 p_inv_mod_q(int i) const { return p_inv_[i]; }            // [P^-1]_{q_i}
  u64 p_mod_q(int i) const { return p_mod_q_[i]; }              // [P]_{q_i}
  u64 q_inv_mod_q(int l, int i) const { return q_inv_[l][i]; }  // [q_l^-1]_{q_i}, i < l

  const std::vector<uint32_t>& galois_permutation(uint64_t g) const;

  // Temporaries of key switching, rotation and rescale, reused across operations (thread-safe; see scratch.h).
  ScratchPool& scratch() const { return scratch_; }

 private:
  Params params_;
  SecurityPolicy policy_;
  size_t n_;
  std::vector<Modulus> moduli_;
  std::vector<std::unique_ptr<ring::NTTTables>> ntt_;
  std::unique_ptr<ring::BaseConverter> moddown_;
  std::vector<u64> p_inv_, p_mod_q_;
  std::vector<std::vector<u64>> q_inv_;
  mutable std::mutex cache_mu_;
  mutable std::map<std::pair<int, int>, std::unique_ptr<ring::BaseConverter>> modup_;
  mutable std::map<int, std::unique_ptr<ring::BaseConverter>> rescale_down_;
  mutable std::map<uint64_t, std::vector<uint32_t>> galois_;
  mutable ScratchPool scratch_;
};

}  // namespace hemlp
