// Bootstrapping's bottom-of-the-chain steps (docs/design/bootstrap.md §1.3, steps 1-2):
//   dense_to_sparse: key switch s -> s' at level 0 over {q0, p0} (encapsulation, Bossuat-Troncoso-Hubaux);
//   mod_raise:       centred lift of (c0, c1) from q0 to Q_target, fused with the 1-digit s' -> s switch.
// The ephemeral sparse secret s' (ternary, Hamming weight h, fresh from the CSPRNG) lives only inside
// the two keys of EncapsulationKeys; it is wiped right after key generation and never leaves this file.
#pragma once
#include <cstddef>
#include <cstdint>

#include "ckks/objects.h"

namespace hemlp {

struct EncapsulationKeys {
  uint64_t param_hash = 0;
  uint64_t key_id = 0;         // the dense key pair (s) the keys come from and return to
  uint64_t sparse_id = 0;      // tag of ciphertexts under s' (never equal to a key pair id in practice)
  int hamming_weight = 0;      // h of s'
  int level = 0;               // the highest level mod_raise can raise to (the 1-digit key holds Q_level ∪ P)
  Poly small_b, small_a;       // over {q0, p0}, NTT form: b = -a s' + e + p0 s
  Poly big_b, big_a;           // over Q_level ∪ P, NTT form: B = -A s + e + P s'
};

// Keys for a bootstrapper raising to `level` (-1: the top). For 128-bit parameter sets, refuses
// (ErrorKind::Insecure) when log2(q0 p0) > 121: h = 32 is claimed 128-bit only up to 121 bits.
EncapsulationKeys encapsulation_keys(const Context& ctx, const SecretKey& sk, int hamming_weight, int level);

// ct at level 0 under s (key_id) -> the same plaintext under s' (tagged sparse_id), level 0.
Ciphertext dense_to_sparse(const Context& ctx, const Ciphertext& ct, const EncapsulationKeys& keys);

// ct at level 0 under s' -> level `target` (<= keys.level) under s. Decrypts to t = m + e + q0 I over Q_target,
// with I small (|I| <= (h+1)/2) because both polynomials are lifted centred.
Ciphertext mod_raise(const Context& ctx, const Ciphertext& ct, const EncapsulationKeys& keys, int target);

// Bytes the keys occupy in memory.
size_t encapsulation_key_bytes(const EncapsulationKeys& keys);

}  // namespace hemlp
