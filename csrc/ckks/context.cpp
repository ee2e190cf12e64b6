#include "ckks/context.h"

#include <cmath>
#include <string>

#include "ckks/errors.h"
#include "ring/galois.h"

namespace hemlp {

namespace {
void enforce(const Params& params, const SecurityPolicy& policy) {
  if (policy.min_bits != 0 && policy.min_bits != 128)
    fail(ErrorKind::Parameter, "security policy: min_bits must be 128 (the HE standard's certified level) or 0 "
                               "(insecure test sets), got " + std::to_string(policy.min_bits));
  if (policy.min_bits == 0 || params.is_128_bit_secure()) return;
  std::string why;
  if (params.max_log_qp_128() < 0) why = "N = 2^" + std::to_string(params.log_n()) + " is not covered by the HE-standard table";
  else if (params.spec().secret_hw != 0) why = "the secret is sparse (the table assumes uniform ternary)";
  else if (params.spec().sigma < 3.2) why = "the error's sigma is below 3.2";
  else
    why = "log QP = " + std::to_string((int)std::ceil(params.log_qp())) + " bits exceeds the bound " +
          std::to_string(params.max_log_qp_128()) + " for N = 2^" + std::to_string(params.log_n());
  fail(ErrorKind::Insecure, "parameter set '" + params.spec().name + "' is below the 128-bit security this client "
                            "requires: " + why + ". Use a 128-bit preset (ckks.Params.presets()); only tests may "
                            "lower the policy");
}
}  // namespace

Context::Context(const Params& params, SecurityPolicy policy) : params_(params), policy_(policy), n_(params.n()) {
  enforce(params_, policy_);
  for (auto q : params_.q()) moduli_.emplace_back(q);
  for (auto p : params_.p()) moduli_.emplace_back(p);
  ntt_.resize(moduli_.size());
#pragma omp parallel for schedule(dynamic)
  for (int i = 0; i < (int)moduli_.size(); ++i)
    ntt_[i] = std::make_unique<ring::NTTTables>(moduli_[i].q, params_.log_n());
  const int L = max_level(), K = num_p();
  std::vector<Modulus> qs(moduli_.begin(), moduli_.begin() + L + 1);
  std::vector<Modulus> ps(moduli_.begin() + L + 1, moduli_.end());
  moddown_ = std::make_unique<ring::BaseConverter>(ps, qs, true);
  p_inv_.resize(L + 1);
  p_mod_q_.resize(L + 1);
  for (int i = 0; i <= L; ++i) {
    u64 prod = 1;
    for (int j = 0; j < K; ++j) prod = moduli_[i].mul(prod, ps[j].q % moduli_[i].q);
    p_mod_q_[i] = prod;
    p_inv_[i] = ring::inv_mod(prod, moduli_[i].q);
  }
  q_inv_.resize(L + 1);
  for (int l = 1; l <= L; ++l) {
    q_inv_[l].resize(l);
    for (int i = 0; i < l; ++i) q_inv_[l][i] = ring::inv_mod(moduli_[l].q % moduli_[i].q, moduli_[i].q);
  }
}

// dynamic: limbs differ in cost (AVX2: q_0 and P run the integer kernels, the rest double precision)
void Context::ntt_limbs(u64* data, int level, int limbs, bool ext) const {
#pragma omp parallel for schedule(dynamic, 1)
  for (int k = 0; k < limbs; ++k) ntt(ext ? qp_index(level, k) : k).forward(data + (size_t)k * n_);
}

void Context::intt_limbs(u64* data, int level, int limbs, bool ext) const {
#pragma omp parallel for schedule(dynamic, 1)
  for (int k = 0; k < limbs; ++k) ntt(ext ? qp_index(level, k) : k).inverse(data + (size_t)k * n_);
}

const ring::BaseConverter& Context::modup_converter(int start, int count) const {
  std::lock_guard<std::mutex> lock(cache_mu_);
  auto key = std::make_pair(start, count);
  auto it = modup_.find(key);
  if (it != modup_.end()) return *it->second;
  std::vector<Modulus> from(moduli_.begin() + start, moduli_.begin() + start + count);
  auto conv = std::make_unique<ring::BaseConverter>(from, moduli_, true);  // to every modulus; callers pick
  auto& ref = *conv;
  modup_.emplace(key, std::move(conv));
  return ref;
}

const ring::BaseConverter& Context::rescale_down_converter(int level) const {
  std::lock_guard<std::mutex> lock(cache_mu_);
  auto it = rescale_down_.find(level);
  if (it != rescale_down_.end()) return *it->second;
  std::vector<Modulus> from{moduli_[level]};
  from.insert(from.end(), moduli_.begin() + max_level() + 1, moduli_.end());
  auto conv = std::make_unique<ring::BaseConverter>(from, moduli_, true);
  auto& ref = *conv;
  rescale_down_.emplace(level, std::move(conv));
  return ref;
}

const std::vector<uint32_t>& Context::galois_permutation(uint64_t g) const {
  std::lock_guard<std::mutex> lock(cache_mu_);
  auto it = galois_.find(g);
  if (it != galois_.end()) return it->second;
  return galois_.emplace(g, ring::galois_ntt_permutation(g, log_n())).first->second;
}

}  // namespace hemlp
