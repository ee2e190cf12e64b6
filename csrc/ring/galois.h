// Galois automorphisms X -> X^g (g odd, mod 2N) on polynomials in NTT or coefficient form.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace hemlp::ring {

// out[j] = in[perm[j]] in the bit-reversed NTT domain (see ntt.h):
// perm[j] = brv(((g * (2 brv(j) + 1)) mod 2N - 1) / 2).
std::vector<uint32_t> galois_ntt_permutation(uint64_t g, int log_n);

// Coefficient form: a(X) -> a(X^g) mod (X^N + 1, q).
void galois_coeff(const uint64_t* in, uint64_t* out, uint64_t g, int log_n, uint64_t q);

// Galois element of a left slot rotation by `steps` (generator 5) and of conjugation.
uint64_t galois_element_rotation(int64_t steps, int log_n);
inline uint64_t galois_element_conjugation(int log_n) { return (2ULL << log_n) - 1; }

}  // namespace hemlp::ring
