// CKKS parameters: ring degree, the modulus chain Q = q_0 ... q_L, the special
// modulus P for hybrid key switching, digit size alpha, default scale.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hemlp {

struct ParamsSpec {
  std::string name;
  int log_n = 0;
  std::vector<int> q_bits;   // bit sizes of q_0 (bottom) ... q_L (top)
  std::vector<int> p_bits;   // bit sizes of the special primes
  int alpha = 1;             // q-primes per key-switching digit
  double log_scale = 40;     // default scale 2^log_scale
  int secret_hw = 0;         // 0: uniform ternary; > 0: fixed Hamming weight
  double sigma = 3.2;
};

class Params {
 public:
  // Generates the primes deterministically from the spec. Throws hemlp::Error(Parameter)
  // on inconsistent specs; security is checked by Context, not here.
  explicit Params(const ParamsSpec& spec);

  const ParamsSpec& spec() const { return spec_; }
  int log_n() const { return spec_.log_n; }
  size_t n() const { return size_t(1) << spec_.log_n; }
  int max_level() const { return (int)q_.size() - 1; }
  const std::vector<uint64_t>& q() const { return q_; }
  const std::vector<uint64_t>& p() const { return p_; }
  int alpha() const { return spec_.alpha; }
  int num_digits(int level) const { return (level + 1 + spec_.alpha - 1) / spec_.alpha; }
  double log_qp() const;           // exact, from the primes
  double log_q() const;
  int max_log_qp_128() const;      // table bound, -1 if not covered
  bool is_128_bit_secure() const;
  std::string describe() const;    // canonical text; hashed into the parameter id
  std::string hash_hex() const;    // SHA-256 of describe()
  uint64_t hash64() const { return hash64_; }

 private:
  ParamsSpec spec_;
  std::vector<uint64_t> q_, p_;
  uint64_t hash64_ = 0;
};

}  // namespace hemlp
