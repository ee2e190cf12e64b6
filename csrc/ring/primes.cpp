#include "ring/primes.h"

#include <algorithm>
#include <stdexcept>

#include "ring/modarith.h"

namespace hemlp::ring {

bool is_prime(uint64_t n) {
  if (n < 2) return false;
  for (uint64_t p : {2ULL, 3ULL, 5ULL, 7ULL, 11ULL, 13ULL, 17ULL, 19ULL, 23ULL, 29ULL, 31ULL, 37ULL}) {
    if (n % p == 0) return n == p;
  }
  uint64_t d = n - 1;
  int s = 0;
  while ((d & 1) == 0) { d >>= 1; ++s; }
  // This witness set is deterministic for all n < 2^64.
  for (uint64_t a : {2ULL, 325ULL, 9375ULL, 28178ULL, 450775ULL, 9780504ULL, 1795265022ULL}) {
    uint64_t x = pow_mod(a % n, d, n);
    if (a % n == 0 || x == 1 || x == n - 1) continue;
    bool composite = true;
    for (int r = 1; r < s; ++r) {
      x = (uint64_t)((u128)x * x % n);
      if (x == n - 1) { composite = false; break; }
    }
    if (composite) return false;
  }
  return true;
}

std::vector<uint64_t> ntt_primes(int bits, int log_n, int count, const std::vector<uint64_t>& exclude) {
  if (bits < log_n + 2 || bits > 61) throw std::invalid_argument("prime bit size must be in [logN+2, 61]");
  const uint64_t m = 2ULL << log_n;  // 2N
  const uint64_t center = 1ULL << bits;
  std::vector<uint64_t> out;
  uint64_t up = center + 1, down = center + 1 - m;  // both = 1 mod 2N
  bool take_up = false;                              // start below 2^bits: keeps bit length `bits`
  auto ok = [&](uint64_t q) {
    return is_prime(q) && std::find(exclude.begin(), exclude.end(), q) == exclude.end() &&
           std::find(out.begin(), out.end(), q) == out.end();
  };
  // Primes of 60+ bits are taken below 2^bits only, so every modulus stays < 2^61
  // (the exact-GEMM and lazy-NTT bounds assume it).
  const uint64_t lo_limit = 1ULL << (bits - 1);
  const uint64_t hi_limit = bits >= 60 ? center : center + (1ULL << (bits - 1));
  while ((int)out.size() < count) {
    if (down <= lo_limit && up >= hi_limit) throw std::runtime_error("not enough NTT-friendly primes of this size");
    if (take_up && up < hi_limit) {
      if (ok(up)) out.push_back(up);
      up += m;
    } else if (down > lo_limit) {
      if (ok(down)) out.push_back(down);
      down -= m;
    }
    take_up = !take_up;
  }
  return out;
}

uint64_t minimal_primitive_root_2n(uint64_t q, int log_n) {
  const uint64_t m = 2ULL << log_n;
  if ((q - 1) % m != 0) throw std::invalid_argument("q is not 1 mod 2N");
  // Find a generator-derived 2N-th root g^((q-1)/2N) with psi^N = -1, then take the
  // smallest among its odd powers (all primitive 2N-th roots) for reproducibility.
  uint64_t psi = 0;
  for (uint64_t g = 2; g < q; ++g) {
    uint64_t c = pow_mod(g, (q - 1) / m, q);
    if (pow_mod(c, m >> 1, q) == q - 1) { psi = c; break; }
  }
  if (!psi) throw std::runtime_error("no primitive 2N-th root found");
  uint64_t best = psi, sq = (uint64_t)((u128)psi * psi % q), cur = psi;
  for (uint64_t k = 1; k < m; k += 2) {
    if (cur < best) best = cur;
    cur = (uint64_t)((u128)cur * sq % q);
  }
  return best;
}

}  // namespace hemlp::ring
