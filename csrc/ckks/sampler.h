// Randomness. Seeds come from getrandom(2); a seed is expanded with AES-256-CTR
// (OpenSSL EVP). Uniform values mod q by rejection (no modulo bias), ternary by
// rejection from bytes, the error distribution by a CDT table for a discrete
// Gaussian with sigma = 3.2 cut at 6 sigma.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace hemlp {

using Seed = std::array<uint8_t, 32>;

Seed os_seed();  // 32 bytes from getrandom(2)

class Prng {
 public:
  explicit Prng(const Seed& seed);
  // The same keystream positioned byte_offset bytes in (what Prng(seed) yields after byte_offset bytes): CTR mode
  // starts at block byte_offset / 16, so a segment of a long stream is drawn without the bytes before it.
  Prng(const Seed& seed, uint64_t byte_offset);
  ~Prng();
  Prng(const Prng&) = delete;
  Prng& operator=(const Prng&) = delete;

  void bytes(uint8_t* out, size_t len);
  uint64_t u64();
  // Bytes of the keystream consumed so far (from its start, counting a seek's offset).
  uint64_t position() const { return base_ + pos_; }
  uint64_t uniform_mod(uint64_t q);                // uniform in [0, q)
  void uniform_mod(uint64_t q, uint64_t* out, size_t n);
  int ternary();                                   // uniform in {-1, 0, 1}
  int gaussian();                                  // discrete Gaussian, sigma 3.2, |x| <= 19

 private:
  void refill();
  void* ctx_;  // EVP_CIPHER_CTX*
  std::array<uint8_t, 4096> buf_{};
  size_t pos_ = 4096;
  // keystream offset of buf_[0]; before the first refill buf_ counts as the 4096 bytes before the start (wrapping),
  // so position() = base_ + pos_ = 0
  uint64_t base_ = 0 - (uint64_t)4096;
};

// Secret/error vectors (signed small integers).
std::vector<int8_t> sample_ternary(Prng& prng, size_t n);
std::vector<int8_t> sample_ternary_hw(Prng& prng, size_t n, size_t hamming_weight);
std::vector<int8_t> sample_gaussian(Prng& prng, size_t n);

}  // namespace hemlp
