// Plaintexts, ciphertexts and keys. Every object carries the parameter hash it was made
// under; ciphertexts and keys also carry the id of the key pair, so that mixing
// contexts or key pairs is detected instead of decrypting to garbage.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "ckks/context.h"
#include "ckks/key_polys.h"
#include "ckks/sampler.h"
#include "ckks/wipe.h"

namespace hemlp {

enum class Encoding : int { Slot = 0, Coeff = 1 };

// Copies what every ciphertext-like object shares (parameter set, level, scale, slots, encoding); callers set
// what differs between types or operations (key pair id, is_complex, a new level or scale).
template <class To, class From>
void copy_metadata(To& to, const From& from) {
  to.param_hash = from.param_hash;
  to.level = from.level;
  to.scale = from.scale;
  to.slots = from.slots;
  to.encoding = from.encoding;
}

struct Plaintext {
  uint64_t param_hash = 0;
  int level = 0;
  double scale = 1;
  int slots = 0;  // slot encoding: number of slots; coefficient encoding: N
  Encoding encoding = Encoding::Slot;
  bool is_complex = false;
  Poly data;  // (level+1) limbs, NTT form
};

struct Ciphertext {
  uint64_t param_hash = 0;
  uint64_t key_id = 0;
  int level = 0;
  double scale = 1;
  int slots = 0;
  Encoding encoding = Encoding::Slot;
  bool is_complex = false;
  std::vector<Poly> polys;  // c0, c1 (, c2 before relinearisation); (level+1) limbs each, NTT form
  bool seeded = false;      // c1 was expanded from `seed` (secret-key encryption) and is unchanged
  Seed seed{};
  size_t size() const { return polys.size(); }
};

struct SecretKey {
  uint64_t param_hash = 0;
  uint64_t key_id = 0;
  std::vector<int8_t> coeffs;  // ternary coefficients
  Poly ntt_qp;                 // NTT form over Q_L ∪ P (L+1+K limbs)

  SecretKey() = default;
  SecretKey(const SecretKey&) = default;
  SecretKey(SecretKey&&) = default;
  SecretKey& operator=(const SecretKey& o) { if (this != &o) { wipe(coeffs); wipe(ntt_qp); coeffs = o.coeffs; ntt_qp = o.ntt_qp; param_hash = o.param_hash; key_id = o.key_id; } return *this; }
  SecretKey& operator=(SecretKey&& o) noexcept { if (this != &o) { wipe(coeffs); wipe(ntt_qp); coeffs = std::move(o.coeffs); ntt_qp = std::move(o.ntt_qp); param_hash = o.param_hash; key_id = o.key_id; } return *this; }
  ~SecretKey() { wipe(coeffs); wipe(ntt_qp); }  // the secret never returns to the allocator readable
};

struct PublicKey {
  uint64_t param_hash = 0;
  uint64_t key_id = 0;
  Poly b, a;  // over Q_L, NTT form: b = -a s + e
};

// Hybrid (dnum) key-switching key from s' to s: for digit t,
//   b_t = -a_t s + e_t + P * Qtilde_t * s'  (mod Q_level P),  a_t uniform (from seed_t).
// A key for `level` switches ciphertexts at levels <= level only: it holds the limbs
// q_0..q_level then P (limb k has modulus qp_index(level, k)) and num_digits(level) digits,
// so a key used only low in the chain is smaller than a top-level one.
struct SwitchKey {
  uint64_t param_hash = 0;
  uint64_t key_id = 0;
  uint64_t galois = 0;  // 0 for relinearisation, else the Galois element
  int level = 0;        // set by key generation / import (top level L unless asked otherwise)
  // [t]: digit t over Q_level ∪ P; owned, or borrowed from a shared key file (ckks/key_polys.h). a is empty for a
  // seeded key.
  KeyPolys b, a;
  std::vector<Seed> a_seeds;
  // [t]: seed_segment_offsets of a_seeds[t] when a is dropped (a seeded key): key_inner_product draws each
  // (limb, quarter) of a_t in the job that uses it
  std::vector<std::vector<uint64_t>> a_offsets;
  bool mapped() const { return b.mapped() || a.mapped(); }
};

struct GaloisKeys {
  uint64_t param_hash = 0;
  uint64_t key_id = 0;
  std::map<uint64_t, SwitchKey> keys;  // by Galois element
};

}  // namespace hemlp
