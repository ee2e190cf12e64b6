#include "ckks/params.h"

#include <openssl/sha.h>

#include <cmath>
#include <map>
#include <sstream>

#include "ckks/errors.h"
#include "ckks/security.h"
#include "ring/primes.h"

namespace hemlp {

Params::Params(const ParamsSpec& spec) : spec_(spec) {
  if (spec.log_n < 4 || spec.log_n > 17)
    fail(ErrorKind::Parameter, "log_n must be in [4, 17], got " + std::to_string(spec.log_n));
  if (spec.q_bits.empty()) fail(ErrorKind::Parameter, "the modulus chain q_bits is empty");
  if (spec.p_bits.empty()) fail(ErrorKind::Parameter, "p_bits is empty: hybrid key switching needs at least one special prime");
  if (spec.alpha < 1 || spec.alpha > (int)spec.q_bits.size())
    fail(ErrorKind::Parameter, "alpha (primes per key-switching digit) must be in [1, len(q_bits)]");
  if (spec.sigma < 3.2)
    fail(ErrorKind::Insecure, "error standard deviation below 3.2 is not covered by the HE standard; use sigma = 3.2");
  if (spec.sigma != 3.2)  // the error sampler's CDT is built for 3.2: any other value would be hashed but ignored
    fail(ErrorKind::Parameter, "only sigma = 3.2 is implemented (the error sampler's table); got " +
                                   std::to_string(spec.sigma));
  for (int b : spec.q_bits)
    if (b < spec.log_n + 2 || b > 61) fail(ErrorKind::Parameter, "q prime sizes must be in [log_n + 2, 61] bits");
  for (int b : spec.p_bits)
    if (b < spec.log_n + 2 || b > 61) fail(ErrorKind::Parameter, "p prime sizes must be in [log_n + 2, 61] bits");
  // Generate primes per bit size, P first (largest), alternating around 2^bits.
  std::map<int, std::vector<uint64_t>> pool;
  std::map<int, size_t> need;
  for (int b : spec.q_bits) need[b]++;
  for (int b : spec.p_bits) need[b]++;
  std::vector<uint64_t> used;
  for (auto& [bits, count] : need) {
    try {
      pool[bits] = ring::ntt_primes(bits, spec.log_n, (int)count, used);
    } catch (const std::exception& e) {
      fail(ErrorKind::Parameter, std::string("cannot generate primes: ") + e.what());
    }
    used.insert(used.end(), pool[bits].begin(), pool[bits].end());
  }
  // P takes the first primes of each size, Q the rest, so Q's scaling primes alternate.
  std::map<int, size_t> next;
  for (int b : spec.p_bits) p_.push_back(pool[b][next[b]++]);
  for (int b : spec.q_bits) q_.push_back(pool[b][next[b]++]);
  std::string h = hash_hex();
  hash64_ = std::stoull(h.substr(0, 16), nullptr, 16);
}

double Params::log_q() const {
  double s = 0;
  for (auto q : q_) s += std::log2((double)q);
  return s;
}

double Params::log_qp() const {
  double s = log_q();
  for (auto p : p_) s += std::log2((double)p);
  return s;
}

int Params::max_log_qp_128() const { return hemlp::max_log_qp_128(spec_.log_n); }

bool Params::is_128_bit_secure() const {
  int bound = max_log_qp_128();
  return bound > 0 && spec_.secret_hw == 0 && spec_.sigma >= 3.2 && log_qp() <= bound;
}

std::string Params::describe() const {
  std::ostringstream o;
  o << "hemlp-ckks-v1;logN=" << spec_.log_n << ";q=";
  for (auto q : q_) o << q << ",";
  o << ";p=";
  for (auto p : p_) o << p << ",";
  o << ";alpha=" << spec_.alpha << ";logscale=" << spec_.log_scale << ";hw=" << spec_.secret_hw
    << ";sigma=" << spec_.sigma;
  return o.str();
}

std::string Params::hash_hex() const {
  std::string d = describe();
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(d.data()), d.size(), md);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : md) { out += hex[c >> 4]; out += hex[c & 15]; }
  return out;
}

}  // namespace hemlp
