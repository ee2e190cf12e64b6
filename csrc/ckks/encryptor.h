// Public- and secret-key encryption, decryption.
#pragma once
#include <cstddef>
#include "ckks/objects.h"

namespace hemlp {

class Encryptor {
 public:
  explicit Encryptor(const Context& ctx) : ctx_(ctx) {}
  Ciphertext encrypt(const Plaintext& pt, const PublicKey& pk) const;
  // Secret-key encryption; the a-part is expanded from a fresh public seed kept in the
  // ciphertext (so it serialises at half size until c1 changes).
  Ciphertext encrypt(const Plaintext& pt, const SecretKey& sk) const;
  Plaintext decrypt(const Ciphertext& ct, const SecretKey& sk) const;

 private:
  const Context& ctx_;
};

}  // namespace hemlp
