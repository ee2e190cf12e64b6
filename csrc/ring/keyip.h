// Vector kernel of the key-switch inner product (ckks/keyswitch.cpp): one output limb,
//   o0[i] = sum_t x_t[i'] * kb_t[i] mod q,   o1[i] = sum_t x_t[i'] * ka_t[i] mod q,   i in [i0, i1),
// with i' = perm[i] when perm is given, else i. The 128-bit sums are reduced once, to the same value
// the scalar __int128 + Barrett code gives (bit-identical on every SIMD path).
#pragma once
#include <cstddef>
#include <cstdint>

#include "ring/modarith.h"

namespace hemlp::ring {

constexpr int kKeyIpMaxDigits = 32;

// Runs the AVX-512 or AVX2 kernel and returns true when the active SIMD path has one for these
// sizes ((i1 - i0) and i0 multiples of 8, beta <= kKeyIpMaxDigits); returns false (nothing written)
// when the caller must run its scalar loop.
bool key_inner_product_limb_simd(const uint64_t* const* x, const uint64_t* const* kb, const uint64_t* const* ka,
                                 int beta, const uint32_t* perm, size_t i0, size_t i1, uint64_t q, uint64_t* o0,
                                 uint64_t* o1);

}  // namespace hemlp::ring
