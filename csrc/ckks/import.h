// Validated import of serialised objects (the native half of every loader): shapes, levels, metadata and every
// residue are checked before an object exists, so hostile bytes raise hemlp::Error(Serialization) and never
// reach the arithmetic. Plain C++ (no Python): the bindings call these, and so do the libFuzzer targets
// (tests/fuzz/cpp) built with AddressSanitizer / UndefinedBehaviorSanitizer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ckks/context.h"
#include "ckks/objects.h"

namespace hemlp {

// A borrowed row-major (rows, cols) array of residues.
struct PolyView {
  const uint64_t* data = nullptr;
  size_t rows = 0, cols = 0;
};

// A polynomial over Q_level (∪ P when ext): shape (limbs, N) and every residue below its modulus.
Poly import_poly(const Context& ctx, PolyView a, int level, bool ext, const char* what);

// The metadata of a ciphertext-like object: level in the chain, finite positive scale, encoding, slot count.
void check_imported_metadata(const Context& ctx, int level, double scale, int slots, int encoding, const char* what);

SecretKey import_secret_key(const Context& ctx, const int8_t* coeffs, size_t count, uint64_t key_id);
PublicKey import_public_key(const Context& ctx, PolyView b, PolyView a, uint64_t key_id);
// One switching key for `level`: num_digits(level) b-halves over Q_level ∪ P, the a-halves from their seeds:
// expanded, or (seeded) kept as seeds only and expanded on use (drop_expanded_a's form, never expanded here).
SwitchKey import_switch_key(const Context& ctx, const std::vector<PolyView>& bs, const std::vector<Seed>& seeds,
                            uint64_t key_id, uint64_t galois, int level, bool seeded = false);

// One serialised switching key's fields, for import_galois_keys.
struct SwitchKeyRecord {
  std::vector<PolyView> bs;
  std::vector<Seed> seeds;
  uint64_t galois = 0;
  int level = 0;
};

// A set of Galois keys, each checked as import_switch_key checks it and moved into the set (in parallel over the
// keys); the keys for a level <= seed_max_level are imported seeded. An element listed twice is an error; when
// records are invalid, the error of the first one (in order) is thrown.
GaloisKeys import_galois_keys(const Context& ctx, const std::vector<SwitchKeyRecord>& records, uint64_t key_id,
                              int seed_max_level);
// A ciphertext: 2 or 3 polynomials, or c0 alone plus the seed of c1 (`seed` non-null).
Ciphertext import_ciphertext(const Context& ctx, const std::vector<PolyView>& polys, int level, double scale,
                             int slots, int encoding, bool is_complex, uint64_t key_id, const Seed* seed);

// One serialised ciphertext's fields, for import_ciphertexts.
struct CiphertextRecord {
  std::vector<PolyView> polys;
  int level = 0;
  double scale = 0;
  int slots = 0;
  int encoding = 0;
  bool is_complex = false;
  uint64_t key_id = 0;
  bool seeded = false;
  Seed seed{};
};

// Many ciphertexts (an encrypted matrix or batch file), each checked as import_ciphertext checks it, in parallel
// over the ciphertexts (the copies and the seed expansions are the work); when records are invalid, the error of
// the first one (in order) is thrown.
std::vector<Ciphertext> import_ciphertexts(const Context& ctx, const std::vector<CiphertextRecord>& records);

}  // namespace hemlp
