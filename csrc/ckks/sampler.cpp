#include "ckks/sampler.h"

#include <openssl/evp.h>
#include <sys/random.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace hemlp {

Seed os_seed() {
  Seed s{};
  size_t got = 0;
  while (got < s.size()) {
    ssize_t r = getrandom(s.data() + got, s.size() - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(std::string("getrandom failed: ") + std::strerror(errno));
    }
    got += (size_t)r;
  }
  return s;
}

Prng::Prng(const Seed& seed) {
  EVP_CIPHER_CTX* c = EVP_CIPHER_CTX_new();
  if (!c) throw std::runtime_error("EVP_CIPHER_CTX_new failed");
  static const uint8_t iv[16] = {0};  // fresh key per seed, so a zero counter start is fine
  if (EVP_EncryptInit_ex(c, EVP_aes_256_ctr(), nullptr, seed.data(), iv) != 1) {
    EVP_CIPHER_CTX_free(c);
    throw std::runtime_error("AES-256-CTR init failed");
  }
  ctx_ = c;
}

Prng::Prng(const Seed& seed, uint64_t byte_offset) {
  EVP_CIPHER_CTX* c = EVP_CIPHER_CTX_new();
  if (!c) throw std::runtime_error("EVP_CIPHER_CTX_new failed");
  uint8_t iv[16] = {0};  // the 128-bit big-endian block counter OpenSSL's CTR mode increments
  uint64_t block = byte_offset / 16;
  for (int i = 15; i >= 8; --i, block >>= 8) iv[i] = (uint8_t)(block & 0xff);
  if (EVP_EncryptInit_ex(c, EVP_aes_256_ctr(), nullptr, seed.data(), iv) != 1) {
    EVP_CIPHER_CTX_free(c);
    throw std::runtime_error("AES-256-CTR init failed");
  }
  ctx_ = c;
  base_ = byte_offset / 16 * 16 - buf_.size();  // refill() adds buf_.size(): buf_[0] sits at the block's start
  refill();
  pos_ = (size_t)(byte_offset % 16);
}

Prng::~Prng() {
  EVP_CIPHER_CTX_free(static_cast<EVP_CIPHER_CTX*>(ctx_));  // frees (and cleanses) the expanded AES key
  explicit_bzero(buf_.data(), buf_.size());                   // keystream bytes that drew secrets
}

void Prng::refill() {
  static const uint8_t zeros[4096] = {0};
  int outl = 0;
  if (EVP_EncryptUpdate(static_cast<EVP_CIPHER_CTX*>(ctx_), buf_.data(), &outl, zeros, (int)buf_.size()) != 1 ||
      outl != (int)buf_.size())
    throw std::runtime_error("AES-256-CTR keystream failed");
  base_ += buf_.size();
  pos_ = 0;
}

void Prng::bytes(uint8_t* out, size_t len) {
  while (len) {
    if (pos_ == buf_.size()) refill();
    size_t take = std::min(len, buf_.size() - pos_);
    std::memcpy(out, buf_.data() + pos_, take);
    pos_ += take; out += take; len -= take;
  }
}

uint64_t Prng::u64() {
  uint64_t v;
  bytes(reinterpret_cast<uint8_t*>(&v), 8);
  return v;
}

uint64_t Prng::uniform_mod(uint64_t q) {
  const int bits = 64 - __builtin_clzll(q);
  const uint64_t mask = bits == 64 ? ~0ULL : ((1ULL << bits) - 1);
  for (;;) {
    uint64_t v = u64() & mask;
    if (v < q) return v;
  }
}

void Prng::uniform_mod(uint64_t q, uint64_t* out, size_t n) {
  // The same stream as n calls of uniform_mod(q) (each candidate = the next 8 keystream bytes), read straight
  // from the buffer; a candidate that straddles a refill goes through u64() as before.
  const int bits = 64 - __builtin_clzll(q);
  const uint64_t mask = bits == 64 ? ~0ULL : ((1ULL << bits) - 1);
  size_t i = 0;
  while (i < n) {
    if (buf_.size() - pos_ < 8) {
      const uint64_t v = u64() & mask;
      if (v < q) out[i++] = v;
      continue;
    }
    const uint8_t* p = buf_.data() + pos_;
    const size_t avail = (buf_.size() - pos_) / 8;
    size_t k = 0;
    // branch-free: every candidate is stored, the index advances only past accepted ones (the acceptance rate is
    // about 1/2 for primes just above a power of two, so a branch on it mispredicts half the time)
    for (; k < avail && i < n; ++k) {
      uint64_t v;
      std::memcpy(&v, p + 8 * k, 8);
      v &= mask;
      out[i] = v;
      i += (size_t)(v < q);
    }
    pos_ += 8 * k;
  }
}

int Prng::ternary() {
  for (;;) {
    uint8_t b;
    bytes(&b, 1);
    if (b < 255) return (int)(b % 3) - 1;  // 255 = 3 * 85: reject the last value
  }
}

namespace {
// CDT of |x| for the discrete Gaussian D_{Z, sigma=3.2}, tail-cut at 19 (~6 sigma):
// cdt[k] = floor(2^63 * P(|X| <= k)), computed once in long double.
struct GaussianCdt {
  uint64_t cdt[20];
  GaussianCdt() {
    const long double s = 3.2L;
    long double w[20], total = 0;
    for (int k = 0; k < 20; ++k) {
      w[k] = expl(-(long double)k * k / (2 * s * s)) * (k ? 2 : 1);
      total += w[k];
    }
    long double acc = 0;
    for (int k = 0; k < 20; ++k) {
      acc += w[k] / total;
      long double v = acc * 9223372036854775808.0L;
      cdt[k] = v >= 9223372036854775807.0L ? 9223372036854775807ULL : (uint64_t)v;
    }
    cdt[19] = 9223372036854775807ULL;
  }
};
const GaussianCdt kCdt;
}  // namespace

int Prng::gaussian() {
  const uint64_t r = u64();
  const uint64_t u = r >> 1, sign = r & 1;
  int k = 0;
  for (int i = 0; i < 20; ++i) k += (u > kCdt.cdt[i]);  // full scan: no early exit on the value
  if (k > 19) k = 19;
  return sign ? -k : k;
}

std::vector<int8_t> sample_ternary(Prng& prng, size_t n) {
  std::vector<int8_t> v(n);
  for (auto& x : v) x = (int8_t)prng.ternary();
  return v;
}

std::vector<int8_t> sample_ternary_hw(Prng& prng, size_t n, size_t h) {
  if (h > n) throw std::invalid_argument("Hamming weight larger than N");
  std::vector<int8_t> v(n, 0);
  size_t placed = 0;
  while (placed < h) {
    size_t i = (size_t)prng.uniform_mod(n);
    if (v[i]) continue;
    v[i] = (prng.u64() & 1) ? 1 : -1;
    ++placed;
  }
  return v;
}

std::vector<int8_t> sample_gaussian(Prng& prng, size_t n) {
  std::vector<int8_t> v(n);
  for (auto& x : v) x = (int8_t)prng.gaussian();
  return v;
}

}  // namespace hemlp
