// Key generation: uniform ternary secret, public key, relinearisation and Galois keys.
#pragma once
#include <cstddef>
#include <vector>

#include "ckks/objects.h"

namespace hemlp {

class KeyGenerator {
 public:
  explicit KeyGenerator(const Context& ctx) : ctx_(ctx) {}
  SecretKey secret_key() const;
  PublicKey public_key(const SecretKey& sk) const;
  // `level`: the highest ciphertext level the key will switch (-1: the top level L); the key
  // then holds only Q_level ∪ P and num_digits(level) digits.
  SwitchKey relin_key(const SecretKey& sk, int level = -1) const;
  SwitchKey galois_key(const SecretKey& sk, uint64_t galois, int level = -1) const;
  // Key switching from an arbitrary secret s' (given over Q_L ∪ P in NTT form) to sk.
  SwitchKey switch_key(const SecretKey& sk, const Poly& s_prime_qp, int level = -1) const;
  // -1 -> L; otherwise must be in [0, L] (ErrorKind::Parameter).
  int key_level(int level) const;

 private:
  const Context& ctx_;
};

// The secret as an NTT polynomial over Q_L ∪ P from small signed coefficients.
Poly small_to_ntt_qp(const Context& ctx, const std::vector<int8_t>& coeffs);
// Same over Q_level ∪ P (limb k has modulus qp_index(level, k)).
Poly small_to_ntt_qp(const Context& ctx, const std::vector<int8_t>& coeffs, int level);
// Same over the first `limbs` q-primes only.
Poly small_to_ntt_q(const Context& ctx, const std::vector<int8_t>& coeffs, int limbs);
// Uniform polynomial over Q_L ∪ P in NTT form, expanded from a seed.
Poly uniform_from_seed(const Context& ctx, const Seed& seed, int limbs, bool ext, int level);
// The same stream written to out (limbs * n words).
void uniform_from_seed_into(const Context& ctx, const Seed& seed, int limbs, bool ext, int level, u64* out);
// Segments per limb whose keystream offsets seed_segment_offsets records: with them each (limb, segment) of
// n / kSeedSegments coefficients of a seeded uniform polynomial is drawn on its own (uniform_segment_from_seed), so a
// key switch can expand a seeded a-part inside its (limb, quarter) jobs, in cache and spread over the threads,
// instead of whole digits into memory first (a digit is one sequential stream: 5 digits split 3:2 over 2 threads).
constexpr int kSeedSegments = 4;
// [limb * kSeedSegments + s]: the byte offset in seed's keystream where segment s of limb `limb` of
// uniform_from_seed(ctx, seed, limbs, ext, level) starts (n must be a multiple of kSeedSegments). out (limbs * n
// words, may be null): also receives the polynomial (uniform_from_seed_into's, in the same pass).
std::vector<uint64_t> seed_segment_offsets(const Context& ctx, const Seed& seed, int limbs, bool ext, int level,
                                           u64* out = nullptr);
// len values uniform mod q from seed's keystream at byte `offset` (one entry of seed_segment_offsets): equal to the
// polynomial's coefficients of that segment.
void uniform_segment_from_seed(const Seed& seed, uint64_t offset, u64 q, u64* out, size_t len);
// A seeded key: drop the expanded a-halves (key_inner_product expands them from a_seeds on use). Halves the
// key's memory for about one AES-CTR pass over a per use. No-op for a key without seeds.
void drop_expanded_a(const Context& ctx, SwitchKey& key);

}  // namespace hemlp
