// Word-sized modular arithmetic on the device (q < 2^62): the same Barrett and Shoup reductions as
// ring/modarith.h, written with __umul64hi. Every function returns the canonical residue in [0, q), so the
// device computes bit for bit what the CPU core computes.
#pragma once
#include <cstdint>

namespace hemlp::cuda {

using u64 = uint64_t;

// A prime with its Barrett constant floor(2^128 / q) (hi, lo words).
struct DevModulus {
  u64 q;
  u64 r_hi, r_lo;
};

// x mod q for the 128-bit x = (x1, x0), x < 2^128 and q < 2^62.
__device__ __forceinline__ u64 reduce128(u64 x1, u64 x0, const DevModulus& m) {
  const u64 a_hi = __umul64hi(x0, m.r_lo);
  const u64 b_lo = x0 * m.r_hi, b_hi = __umul64hi(x0, m.r_hi);
  const u64 c_lo = x1 * m.r_lo, c_hi = __umul64hi(x1, m.r_lo);
  u64 mid = a_hi + b_lo;
  u64 carry = mid < a_hi;
  mid += c_lo;
  carry += mid < c_lo;
  const u64 qhat = x1 * m.r_hi + b_hi + c_hi + carry;
  u64 r = x0 - qhat * m.q;  // the true remainder plus at most 3q
  const u64 two_q = m.q << 1;
  r = r >= two_q ? r - two_q : r;
  return r >= m.q ? r - m.q : r;
}

__device__ __forceinline__ u64 mul_mod(u64 a, u64 b, const DevModulus& m) {
  return reduce128(__umul64hi(a, b), a * b, m);
}

// 128-bit accumulator (hi, lo) += a * b
__device__ __forceinline__ void mac128(u64& hi, u64& lo, u64 a, u64 b) {
  const u64 p_lo = a * b, p_hi = __umul64hi(a, b);
  lo += p_lo;
  hi += p_hi + (lo < p_lo);
}

// x * w mod q for any 64-bit x, w < q with wp = floor(w 2^64 / q)
__device__ __forceinline__ u64 mul_shoup(u64 x, u64 w, u64 wp, u64 q) {
  const u64 r = x * w - __umul64hi(x, wp) * q;
  return r >= q ? r - q : r;
}

__device__ __forceinline__ u64 add_mod(u64 a, u64 b, u64 q) {
  const u64 s = a + b;
  return s >= q ? s - q : s;
}
__device__ __forceinline__ u64 sub_mod(u64 a, u64 b, u64 q) { return a >= b ? a - b : a + q - b; }
__device__ __forceinline__ u64 neg_mod(u64 a, u64 q) { return a ? q - a : 0; }

// ---- host-side companions: the constants the kernels take, computed on the CPU before upload

inline u64 mul_mod_host(u64 a, u64 b, u64 q) { return (u64)((unsigned __int128)a * b % q); }

inline u64 pow_mod_host(u64 a, u64 e, u64 q) {
  u64 r = 1 % q;
  a %= q;
  for (; e; e >>= 1, a = mul_mod_host(a, a, q))
    if (e & 1) r = mul_mod_host(r, a, q);
  return r;
}

// a^-1 mod q for a prime q (Fermat)
inline u64 inv_mod_host(u64 a, u64 q) { return pow_mod_host(a, q - 2, q); }

// floor(w 2^64 / q): the Shoup companion mul_shoup takes
inline u64 shoup_companion(u64 w, u64 q) { return (u64)(((unsigned __int128)w << 64) / q); }

// q with its Barrett constant floor(2^128 / q)
inline DevModulus make_modulus(u64 q) {
  const unsigned __int128 r = (~(unsigned __int128)0) / q;
  return DevModulus{q, (u64)(r >> 64), (u64)r};
}

// The centred lift of x (a residue mod `from`) reduced mod p: x <= from/2 stands for x, above for x - from.
__device__ __forceinline__ u64 centred_lift(u64 x, u64 from, const DevModulus& p) {
  if (x > (from >> 1)) {
    const u64 d = reduce128(0, from - x, p);
    return d ? p.q - d : 0;
  }
  return reduce128(0, x, p);
}

}  // namespace hemlp::cuda
