#include "ckks/encryptor.h"

#include <algorithm>
#include <cmath>

#include "ckks/errors.h"
#include "ckks/gaussian.h"
#include "ckks/keygen.h"

namespace hemlp {

namespace {
void check_hash(const Context& ctx, uint64_t h, const char* what) {
  if (h != ctx.hash64())
    fail(ErrorKind::ContextMismatch, std::string(what) +
                                         " was made under different encryption parameters than this context; "
                                         "use the context (parameter set) it was created with");
}
// An empty ciphertext carrying the plaintext's metadata, encrypted under key pair `key_id`.
Ciphertext shell_for(const Plaintext& pt, uint64_t key_id) {
  Ciphertext ct;
  copy_metadata(ct, pt);
  ct.key_id = key_id;
  ct.is_complex = pt.is_complex;
  return ct;
}
}  // namespace

Ciphertext Encryptor::encrypt(const Plaintext& pt, const PublicKey& pk) const {
  check_hash(ctx_, pt.param_hash, "the plaintext");
  check_hash(ctx_, pk.param_hash, "the public key");
  const size_t n = ctx_.n();
  const int limbs = pt.level + 1;
  Prng prng(os_seed());
  auto v = sample_ternary(prng, n);
  Poly vn = small_to_ntt_q(ctx_, v, limbs);
  Poly e0 = small_to_ntt_q(ctx_, sample_gaussian(prng, n), limbs);
  Poly e1 = small_to_ntt_q(ctx_, sample_gaussian(prng, n), limbs);
  Ciphertext ct = shell_for(pt, pk.key_id);
  ct.polys.assign(2, Poly((size_t)limbs * n));
#pragma omp parallel for schedule(static)
  for (int k = 0; k < limbs; ++k) {
    const Modulus& q = ctx_.modulus(k);
    const size_t o = (size_t)k * n;
    for (size_t i = 0; i < n; ++i) {
      u64 c0 = q.mul(vn[o + i], pk.b[o + i]);
      c0 = ring::add_mod(c0, e0[o + i], q.q);
      ct.polys[0][o + i] = ring::add_mod(c0, pt.data[o + i], q.q);
      ct.polys[1][o + i] = ring::add_mod(q.mul(vn[o + i], pk.a[o + i]), e1[o + i], q.q);
    }
  }
  return ct;
}

Ciphertext Encryptor::encrypt(const Plaintext& pt, const SecretKey& sk) const {
  check_hash(ctx_, pt.param_hash, "the plaintext");
  check_hash(ctx_, sk.param_hash, "the secret key");
  const size_t n = ctx_.n();
  const int limbs = pt.level + 1;
  Prng prng(os_seed());
  Ciphertext ct = shell_for(pt, sk.key_id);
  ct.seed = os_seed();
  ct.seeded = true;
  Poly a = uniform_from_seed(ctx_, ct.seed, limbs, false, 0);
  Poly e = small_to_ntt_q(ctx_, sample_gaussian(prng, n), limbs);
  ct.polys.assign(2, Poly());
  ct.polys[0].resize((size_t)limbs * n);
#pragma omp parallel for schedule(static)
  for (int k = 0; k < limbs; ++k) {
    const Modulus& q = ctx_.modulus(k);
    const size_t o = (size_t)k * n;
    for (size_t i = 0; i < n; ++i) {
      u64 c0 = ring::sub_mod(e[o + i], q.mul(a[o + i], sk.ntt_qp[o + i]), q.q);
      ct.polys[0][o + i] = ring::add_mod(c0, pt.data[o + i], q.q);
    }
  }
  ct.polys[1] = std::move(a);
  return ct;
}

uint64_t fresh_noise_bound(const Params& params) {
  const double n = (double)params.n(), sigma = params.spec().sigma;
  return (uint64_t)std::ceil(6.0 * sigma * std::sqrt(4.0 * n / 3.0 + 1.0));
}

void add_decrypt_noise(const Context& ctx, Poly& data, int limbs, const DecryptNoise& noise) {
  if (noise.mode == DecryptNoise::Mode::None) return;
  if (noise.sigma < 1) fail(ErrorKind::Parameter, "decryption noise: sigma must be >= 1 unless the mode is none");
  const size_t n = ctx.n();
  std::vector<int64_t> z(n);
  sample_exact_gaussian(noise.sigma, z.data(), n);
#pragma omp parallel for schedule(static)
  for (int k = 0; k < limbs; ++k) {
    const u64 q = ctx.modulus(k).q;
    std::vector<u64> limb(n);
    for (size_t i = 0; i < n; ++i) {
      const int64_t v = z[i];
      const u64 r = (u64)(v < 0 ? -v : v) % q;
      limb[i] = v < 0 && r ? q - r : r;
    }
    ctx.ntt(k).forward(limb.data());
    u64* d = data.data() + (size_t)k * n;
    for (size_t i = 0; i < n; ++i) d[i] = ring::add_mod(d[i], limb[i], q);
  }
  std::fill(z.begin(), z.end(), 0);  // the noise is as sensitive as the message it hides
}

Plaintext Encryptor::decrypt(const Ciphertext& ct, const SecretKey& sk, const DecryptNoise& noise) const {
  check_hash(ctx_, ct.param_hash, "the ciphertext");
  check_hash(ctx_, sk.param_hash, "the secret key");
  if (ct.key_id && ct.key_id != sk.key_id)
    fail(ErrorKind::KeyMismatch,
         "this ciphertext was encrypted under another key pair than this secret key; decrypt with the secret "
         "key whose public/evaluation keys produced it");
  const size_t n = ctx_.n();
  const int limbs = ct.level + 1;
  Plaintext pt;
  copy_metadata(pt, ct);
  pt.is_complex = ct.is_complex;
  pt.data.resize((size_t)limbs * n);
#pragma omp parallel for schedule(static)
  for (int k = 0; k < limbs; ++k) {
    const Modulus& q = ctx_.modulus(k);
    const size_t o = (size_t)k * n;
    for (size_t i = 0; i < n; ++i) {
      const u64 s = sk.ntt_qp[o + i];
      u64 acc = ct.polys.back()[o + i];  // Horner: ((c2 s + c1) s + c0)
      for (int j = (int)ct.size() - 2; j >= 0; --j) acc = ring::add_mod(q.mul(acc, s), ct.polys[j][o + i], q.q);
      pt.data[o + i] = acc;
    }
  }
  add_decrypt_noise(ctx_, pt.data, limbs, noise);
  return pt;
}

}  // namespace hemlp
