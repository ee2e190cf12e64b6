// NTT-friendly primes q = 1 (mod 2N) and primitive 2N-th roots of unity.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace hemlp::ring {

bool is_prime(uint64_t n);  // deterministic Miller-Rabin for 64-bit n

// `count` distinct primes q = 1 mod 2N with bit length `bits`, alternating above and
// below 2^bits (Lattigo-style) so that their product stays close to 2^(bits*count).
// Primes in `exclude` are skipped.
std::vector<uint64_t> ntt_primes(int bits, int log_n, int count,
                                 const std::vector<uint64_t>& exclude = {});

// Smallest primitive 2N-th root of unity mod q (psi^N = -1).
uint64_t minimal_primitive_root_2n(uint64_t q, int log_n);

}  // namespace hemlp::ring
