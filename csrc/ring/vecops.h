// Element-wise kernels on one limb (n coefficients, modulus q < 2^62, inputs in [0, q)), used by
// the evaluator and key switching. Each has a portable scalar body and AVX2 / AVX-512 ones chosen at
// run time (ring/simd.h); all give identical results. Output pointers may alias inputs.
#pragma once
#include <cstddef>
#include <cstdint>

#include "ring/modarith.h"

namespace hemlp::ring {

// dst = (a - b) * w mod q, w < q with Shoup companion wp; plus add_to (mod q) when add_to != nullptr.
void sub_mul_shoup_vec(const uint64_t* a, const uint64_t* b, uint64_t w, uint64_t wp, uint64_t q,
                       const uint64_t* add_to, uint64_t* dst, size_t n);
// dst = a + b mod q
void add_vec(const uint64_t* a, const uint64_t* b, uint64_t q, uint64_t* dst, size_t n);
// dst = a + b * w mod q (w < q, Shoup companion wp)
void add_mul_shoup_vec(const uint64_t* a, const uint64_t* b, uint64_t w, uint64_t wp, uint64_t q, uint64_t* dst,
                       size_t n);
// dst = centred lift of x (residues mod `from`) reduced mod p: x <= from/2 stays x, x > from/2 stands for
// x - from; both reduced mod p with a Shoup product (no division). from, p < 2^62, x < from.
void centred_lift_vec(const uint64_t* x, uint64_t from, uint64_t p, uint64_t* dst, size_t n);
// dst[i] = src[perm[i]] (dst must not alias src)
void permute_vec(const uint64_t* src, const uint32_t* perm, uint64_t* dst, size_t n);
// CKKS tensor product of (a0, a1) and (b0, b1): d0 = a0 b0, d1 = a0 b1 + a1 b0, d2 = a1 b1 (mod q)
void tensor_vec(const uint64_t* a0, const uint64_t* a1, const uint64_t* b0, const uint64_t* b1, const Modulus& q,
                uint64_t* d0, uint64_t* d1, uint64_t* d2, size_t n);

}  // namespace hemlp::ring
