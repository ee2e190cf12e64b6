#include "ring/galois.h"

#include "ring/modarith.h"
#include "ring/ntt.h"

namespace hemlp::ring {

std::vector<uint32_t> galois_ntt_permutation(uint64_t g, int log_n) {
  const uint64_t n = 1ULL << log_n, m = 2 * n;
  std::vector<uint32_t> perm(n);
  for (uint64_t j = 0; j < n; ++j) {
    uint64_t e = 2 * bit_reverse((uint32_t)j, log_n) + 1;
    uint64_t ge = (g * e) % m;
    perm[j] = bit_reverse((uint32_t)((ge - 1) / 2), log_n);
  }
  return perm;
}

void galois_coeff(const uint64_t* in, uint64_t* out, uint64_t g, int log_n, uint64_t q) {
  const uint64_t n = 1ULL << log_n, mask = 2 * n - 1;
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t idx = (i * g) & mask;
    if (idx < n) out[idx] = in[i];
    else out[idx - n] = neg_mod(in[i], q);
  }
}

uint64_t galois_element_rotation(int64_t steps, int log_n) {
  const uint64_t m = 2ULL << log_n;
  const uint64_t order = m >> 2;  // 5 has order N/2 mod 2N
  int64_t s = steps % (int64_t)order;
  if (s < 0) s += order;
  return pow_mod(5, (uint64_t)s, m);
}

}  // namespace hemlp::ring
