// Modular arithmetic on word-sized primes q < 2^61: Shoup multiplication for fixed
// operands (NTT twiddles, RNS constants) and Barrett reduction of 128-bit products.
#pragma once
#include <cstddef>
#include <cstdint>

namespace hemlp::ring {

using u64 = uint64_t;
using u128 = unsigned __int128;

inline u64 pow_mod(u64 a, u64 e, u64 q) {
  u64 r = 1 % q;
  a %= q;
  while (e) {
    if (e & 1) r = (u64)((u128)r * a % q);
    a = (u64)((u128)a * a % q);
    e >>= 1;
  }
  return r;
}

// q prime: a^(q-2).
inline u64 inv_mod(u64 a, u64 q) { return pow_mod(a, q - 2, q); }

inline u64 shoup_precompute(u64 w, u64 q) { return (u64)(((u128)w << 64) / q); }

// x*w mod q in [0, 2q) for any 64-bit x; wp = shoup_precompute(w, q).
inline u64 mul_shoup_lazy(u64 x, u64 w, u64 wp, u64 q) {
  u64 hi = (u64)(((u128)x * wp) >> 64);
  return x * w - hi * q;
}

inline u64 mul_shoup(u64 x, u64 w, u64 wp, u64 q) {
  u64 r = mul_shoup_lazy(x, w, wp, q);
  return r >= q ? r - q : r;
}

inline u64 add_mod(u64 a, u64 b, u64 q) {
  u64 s = a + b;
  return s >= q ? s - q : s;
}
inline u64 sub_mod(u64 a, u64 b, u64 q) { return a >= b ? a - b : a + q - b; }
inline u64 neg_mod(u64 a, u64 q) { return a ? q - a : 0; }

// A prime modulus with its Barrett constant floor(2^128 / q).
struct Modulus {
  u64 q = 0;
  u64 r_hi = 0, r_lo = 0;
  int bits = 0;

  Modulus() = default;
  explicit Modulus(u64 q_) : q(q_) {
    // floor(2^128 / q) = floor((2^128 - 1) / q) for q not a power of two.
    u128 all = ~(u128)0;
    u128 r = all / q;
    r_hi = (u64)(r >> 64);
    r_lo = (u64)r;
    bits = 64 - __builtin_clzll(q);
  }

  // x mod q for any x < 2^128 (q < 2^62).
  inline u64 reduce128(u128 x) const {
    u64 x0 = (u64)x, x1 = (u64)(x >> 64);
    u128 a = (u128)x0 * r_lo;
    u128 b = (u128)x0 * r_hi;
    u128 c = (u128)x1 * r_lo;
    u128 mid = (a >> 64) + (u64)b + (u64)c;
    u64 qhat = x1 * r_hi + (u64)(b >> 64) + (u64)(c >> 64) + (u64)(mid >> 64);
    u64 res = x0 - qhat * q;  // true value in [0, 4q)
    // branchless (conditional moves): a data-dependent loop here mispredicts on random data
    const u64 two_q = q << 1;
    res = res >= two_q ? res - two_q : res;
    return res >= q ? res - q : res;
  }
  inline u64 mul(u64 a, u64 b) const { return reduce128((u128)a * b); }
  inline u64 reduce(u64 x) const { return x % q; }
};

// Centred lift of x mod q, reduced mod p (both primes).
inline u64 centred_mod(u64 x, u64 q, u64 p) {
  if (x > (q >> 1)) {
    u64 d = q - x;  // value is -d
    d %= p;
    return d ? p - d : 0;
  }
  return x % p;
}

}  // namespace hemlp::ring
