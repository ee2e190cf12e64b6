// Public- and secret-key encryption, decryption.
#pragma once
#include <cstddef>
#include "ckks/objects.h"

namespace hemlp {

// Noise added to the decrypted coefficients (IND-CPA-D; design: docs/design/decryption.md). Decryption
// returns m + e; whoever sees it and holds the ciphertext learns c1 s, hence s (Li–Micciancio). An exact
// integer Gaussian of standard deviation `sigma` (in coefficient units, i.e. scale units) is added to every
// coefficient inside decrypt, before decoding. The client sets sigma from a bound it trusts (its own plan),
// never from the ciphertext: a server that scales the error must meet noise scaled with it.
struct DecryptNoise {
  enum class Mode : int { None = 0, Standard = 1, Flood = 2 };
  Mode mode = Mode::Standard;
  uint64_t sigma = 0;  // integer >= 1 unless mode == None
};

// A high-probability bound on ||e||_inf of a fresh public-key encryption (6 standard deviations of
// v e + e0 + e1 s with ternary v, s of density 2/3): the default sigma of Standard mode.
uint64_t fresh_noise_bound(const Params& params);

// Adds the requested noise to a decrypted plaintext's first `limbs` limbs (NTT form); fresh OS randomness.
void add_decrypt_noise(const Context& ctx, Poly& data, int limbs, const DecryptNoise& noise);

class Encryptor {
 public:
  explicit Encryptor(const Context& ctx) : ctx_(ctx) {}
  Ciphertext encrypt(const Plaintext& pt, const PublicKey& pk) const;
  // Secret-key encryption; the a-part is expanded from a fresh public seed kept in the
  // ciphertext (so it serialises at half size until c1 changes).
  Ciphertext encrypt(const Plaintext& pt, const SecretKey& sk) const;
  // Decrypts and adds the noise `noise` asks for to every coefficient (None: exact, tests only).
  Plaintext decrypt(const Ciphertext& ct, const SecretKey& sk, const DecryptNoise& noise) const;

 private:
  const Context& ctx_;
};

}  // namespace hemlp
