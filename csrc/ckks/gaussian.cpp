#include "ckks/gaussian.h"

#include <array>

#include "ckks/errors.h"

namespace hemlp {
namespace {

// Unsigned 256-bit integers, just enough for the rationals of the acceptance test:
// numerators (|y| t - sigma^2)^2 and denominators 2 sigma^2 t^2 k reach 2^250 at sigma = 2^60.
struct U256 {
  std::array<uint64_t, 4> w{};  // little-endian words
};
using u128 = unsigned __int128;

U256 from_u128(u128 x) {
  U256 r;
  r.w[0] = (uint64_t)x;
  r.w[1] = (uint64_t)(x >> 64);
  return r;
}

U256 mul(const U256& a, uint64_t b) {
  U256 r;
  u128 carry = 0;
  for (int i = 0; i < 4; ++i) {
    const u128 p = (u128)a.w[i] * b + carry;
    r.w[i] = (uint64_t)p;
    carry = p >> 64;
  }
  if (carry) fail(ErrorKind::Parameter, "exact Gaussian: intermediate exceeds 256 bits (sigma too large)");
  return r;
}

U256 mul(const U256& a, const U256& b) {
  U256 r;
  for (int i = 0; i < 4; ++i) {
    if (!a.w[i]) continue;
    u128 carry = 0;
    for (int j = 0; i + j < 4; ++j) {
      const u128 p = (u128)a.w[i] * b.w[j] + r.w[i + j] + carry;
      r.w[i + j] = (uint64_t)p;
      carry = p >> 64;
    }
    if (carry) fail(ErrorKind::Parameter, "exact Gaussian: intermediate exceeds 256 bits (sigma too large)");
  }
  return r;
}

int cmp(const U256& a, const U256& b) {
  for (int i = 3; i >= 0; --i)
    if (a.w[i] != b.w[i]) return a.w[i] < b.w[i] ? -1 : 1;
  return 0;
}

U256 sub(const U256& a, const U256& b) {  // a >= b
  U256 r;
  uint64_t borrow = 0;
  for (int i = 0; i < 4; ++i) {
    const uint64_t bi = b.w[i] + borrow;
    borrow = (bi < borrow) || (a.w[i] < bi);
    r.w[i] = a.w[i] - bi;
  }
  return r;
}

int bit_length(const U256& a) {
  for (int i = 3; i >= 0; --i)
    if (a.w[i]) return 64 * i + 64 - __builtin_clzll(a.w[i]);
  return 0;
}

// Uniform in [0, m), m > 0, by rejection on bit_length(m) random bits (no modulo bias).
U256 uniform_below(Prng& prng, const U256& m) {
  const int bits = bit_length(m);
  for (;;) {
    U256 r;
    for (int i = 0; i * 64 < bits; ++i) {
      r.w[i] = prng.u64();
      const int top = bits - 64 * i;
      if (top < 64) r.w[i] &= (uint64_t(1) << top) - 1;
    }
    if (cmp(r, m) < 0) return r;
  }
}

// True with probability num / den (0 <= num <= den, den > 0), exactly.
bool bernoulli(Prng& prng, const U256& num, const U256& den) { return cmp(uniform_below(prng, den), num) < 0; }

// True with probability exp(-num / den), exactly (CKS20 Alg. 1: for gamma in [0, 1], the parity of the
// first k with a failed Bernoulli(gamma / k); for gamma > 1, one Bernoulli(exp(-1)) per unit of gamma).
bool bernoulli_exp(Prng& prng, U256 num, const U256& den) {
  const U256 one = from_u128(1);
  while (cmp(num, den) > 0) {
    if (!bernoulli_exp(prng, one, one)) return false;
    num = sub(num, den);
  }
  uint64_t k = 1;
  while (bernoulli(prng, num, mul(den, k))) ++k;
  return k & 1;
}

}  // namespace

ExactGaussian::ExactGaussian(Prng& prng, uint64_t sigma) : prng_(prng), sigma_(sigma) {
  if (sigma < 1 || sigma > (uint64_t(1) << 60))
    fail(ErrorKind::Parameter, "exact Gaussian: sigma must be an integer in [1, 2^60]");
}

int64_t ExactGaussian::sample() {
  const uint64_t s = sigma_, t = s + 1;
  const U256 T = from_u128(t), one = from_u128(1);
  const U256 s2 = from_u128((u128)s * s);
  const U256 den = mul(from_u128((u128)2 * s * s), mul(T, T));  // 2 sigma^2 t^2
  for (;;) {
    // Discrete Laplace with scale t (CKS20 Alg. 2): |y| = u + t v, u uniform in [0, t) accepted w.p.
    // exp(-u/t), v geometric with ratio exp(-1); a sign, and no double-counted zero.
    const uint64_t u = (uint64_t)uniform_below(prng_, T).w[0];
    if (!bernoulli_exp(prng_, from_u128(u), T)) continue;
    uint64_t v = 0;
    while (bernoulli_exp(prng_, one, one)) ++v;
    const u128 mag = (u128)u + (u128)t * v;
    const bool negative = prng_.u64() & 1;
    if (negative && mag == 0) continue;
    if (mag >> 62) continue;  // beyond 2^62 (probability < exp(-2^62 / t)): outside int64 use
    // Accept w.p. exp(-(|y| - sigma^2/t)^2 / (2 sigma^2)) = exp(-(|y| t - sigma^2)^2 / (2 sigma^2 t^2)).
    const U256 yt = mul(from_u128(mag), t);
    const U256 diff = cmp(yt, s2) >= 0 ? sub(yt, s2) : sub(s2, yt);
    if (bernoulli_exp(prng_, mul(diff, diff), den)) return negative ? -(int64_t)mag : (int64_t)mag;
  }
}

void sample_exact_gaussian(uint64_t sigma, int64_t* out, size_t n) {
  Prng prng(os_seed());
  ExactGaussian g(prng, sigma);
  for (size_t i = 0; i < n; ++i) out[i] = g.sample();
}

}  // namespace hemlp
