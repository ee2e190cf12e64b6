#include "ckks/keygen.h"

#include <algorithm>
#include <string>

#include "ckks/errors.h"

namespace hemlp {

Poly small_to_ntt_q(const Context& ctx, const std::vector<int8_t>& coeffs, int limbs) {
  const size_t n = ctx.n();
  Poly out((size_t)limbs * n);
#pragma omp parallel for schedule(static)
  for (int k = 0; k < limbs; ++k) {
    const u64 q = ctx.modulus(k).q;
    u64* d = out.data() + (size_t)k * n;
    for (size_t i = 0; i < n; ++i) d[i] = coeffs[i] >= 0 ? (u64)coeffs[i] : q - (u64)(-coeffs[i]);
    ctx.ntt(k).forward(d);
  }
  return out;
}

Poly small_to_ntt_qp(const Context& ctx, const std::vector<int8_t>& coeffs, int level) {
  const size_t n = ctx.n();
  const int total = level + 1 + ctx.num_p();
  Poly out((size_t)total * n);
#pragma omp parallel for schedule(static)
  for (int k = 0; k < total; ++k) {
    const int m = ctx.qp_index(level, k);
    const u64 q = ctx.modulus(m).q;
    u64* d = out.data() + (size_t)k * n;
    for (size_t i = 0; i < n; ++i) d[i] = coeffs[i] >= 0 ? (u64)coeffs[i] : q - (u64)(-coeffs[i]);
    ctx.ntt(m).forward(d);
  }
  return out;
}

Poly small_to_ntt_qp(const Context& ctx, const std::vector<int8_t>& coeffs) {
  return small_to_ntt_qp(ctx, coeffs, ctx.max_level());  // at level L, limb k is modulus k
}

void uniform_from_seed_into(const Context& ctx, const Seed& seed, int limbs, bool ext, int level, u64* out) {
  // Uniform in the NTT domain is uniform in the coefficient domain (the NTT is a bijection).
  const size_t n = ctx.n();
  Prng prng(seed);
  for (int k = 0; k < limbs; ++k)
    prng.uniform_mod(ctx.modulus(ext ? ctx.qp_index(level, k) : k).q, out + (size_t)k * n, n);
}

std::vector<uint64_t> seed_segment_offsets(const Context& ctx, const Seed& seed, int limbs, bool ext, int level,
                                           u64* out) {
  const size_t n = ctx.n(), seg = n / kSeedSegments;
  if (seg * kSeedSegments != n) fail(ErrorKind::Parameter, "seeded segments: N must be a multiple of 4");
  std::vector<uint64_t> off((size_t)limbs * kSeedSegments);
  std::vector<u64> scratch(out ? 0 : seg);
  Prng prng(seed);
  for (int k = 0; k < limbs; ++k) {
    const u64 q = ctx.modulus(ext ? ctx.qp_index(level, k) : k).q;
    for (int s = 0; s < kSeedSegments; ++s) {
      off[(size_t)k * kSeedSegments + s] = prng.position();
      prng.uniform_mod(q, out ? out + (size_t)k * n + (size_t)s * seg : scratch.data(), seg);
    }
  }
  return off;
}

void uniform_segment_from_seed(const Seed& seed, uint64_t offset, u64 q, u64* out, size_t len) {
  Prng prng(seed, offset);
  prng.uniform_mod(q, out, len);
}

Poly uniform_from_seed(const Context& ctx, const Seed& seed, int limbs, bool ext, int level) {
  // Each limb is drawn into a cache-resident buffer and appended to the reserved output: the output's memory is
  // written once (a zero-initialised Poly would be written twice, and fresh pages cost the most; imported seeded
  // ciphertexts expand one such polynomial each).
  const size_t n = ctx.n();
  Poly out;
  out.reserve((size_t)limbs * n);
  std::vector<u64> limb(n);
  Prng prng(seed);
  for (int k = 0; k < limbs; ++k) {
    prng.uniform_mod(ctx.modulus(ext ? ctx.qp_index(level, k) : k).q, limb.data(), n);
    out.insert(out.end(), limb.begin(), limb.end());
  }
  return out;
}

void drop_expanded_a(const Context& ctx, SwitchKey& key) {
  key.b.check_owned("seeding a switching key");  // a key file's key stays as written, whichever half it maps
  std::vector<Poly>& a = key.a.owned("seeding a switching key");
  if (key.a_seeds.size() < a.size()) return;  // imported without seeds: keep the only copy
  std::vector<Poly>().swap(a);
  if (ctx.n() % kSeedSegments) return;
  const int total = key.level + 1 + ctx.num_p();
  key.a_offsets.clear();
  for (const Seed& s : key.a_seeds) key.a_offsets.push_back(seed_segment_offsets(ctx, s, total, true, key.level));
}

SecretKey KeyGenerator::secret_key() const {
  Prng prng(os_seed());
  SecretKey sk;
  sk.param_hash = ctx_.hash64();
  sk.key_id = Prng(os_seed()).u64() | 1;  // public tag, never 0: from its own seed, never from the secret's stream
  if (ctx_.params().spec().secret_hw > 0)
    sk.coeffs = sample_ternary_hw(prng, ctx_.n(), (size_t)ctx_.params().spec().secret_hw);
  else
    sk.coeffs = sample_ternary(prng, ctx_.n());
  sk.ntt_qp = small_to_ntt_qp(ctx_, sk.coeffs);
  return sk;
}

PublicKey KeyGenerator::public_key(const SecretKey& sk) const {
  const size_t n = ctx_.n();
  const int limbs = ctx_.max_level() + 1;
  Prng prng(os_seed());
  PublicKey pk;
  pk.param_hash = ctx_.hash64();
  pk.key_id = sk.key_id;
  pk.a = uniform_from_seed(ctx_, os_seed(), limbs, false, 0);
  Poly e = small_to_ntt_q(ctx_, sample_gaussian(prng, n), limbs);
  pk.b.resize(pk.a.size());
#pragma omp parallel for schedule(static)
  for (int k = 0; k < limbs; ++k) {
    const Modulus& q = ctx_.modulus(k);
    const size_t o = (size_t)k * n;
    for (size_t i = 0; i < n; ++i)
      pk.b[o + i] = ring::sub_mod(e[o + i], q.mul(pk.a[o + i], sk.ntt_qp[o + i]), q.q);
  }
  return pk;
}

int KeyGenerator::key_level(int level) const {
  const int L = ctx_.max_level();
  if (level == -1) return L;
  if (level < 0 || level > L)
    fail(ErrorKind::Parameter, "key level " + std::to_string(level) + " is outside this context's modulus chain "
                               "[0, " + std::to_string(L) + "]; pass a level in that range (or none for the top level)");
  return level;
}

SwitchKey KeyGenerator::switch_key(const SecretKey& sk, const Poly& sp, int level) const {
  const size_t n = ctx_.n();
  const int lv = key_level(level), total = lv + 1 + ctx_.num_p(), alpha = ctx_.alpha();
  const int digits = ctx_.params().num_digits(lv);
  Prng prng(os_seed());
  SwitchKey key;
  key.param_hash = ctx_.hash64();
  key.key_id = sk.key_id;
  key.level = lv;
  std::vector<Poly>& kb = key.b.owned("key generation");
  std::vector<Poly>& ka = key.a.owned("key generation");
  for (int t = 0; t < digits; ++t) {
    Seed seed = os_seed();
    Poly a = uniform_from_seed(ctx_, seed, total, true, lv);
    Poly e = small_to_ntt_qp(ctx_, sample_gaussian(prng, n), lv);
    Poly b(a.size());
    const int lo = t * alpha, hi = std::min(lv + 1, lo + alpha);
#pragma omp parallel for schedule(static)
    for (int k = 0; k < total; ++k) {
      const int m = ctx_.qp_index(lv, k);  // key limb k -> modulus m; sk and s' are indexed by modulus
      const Modulus& q = ctx_.modulus(m);
      const size_t o = (size_t)k * n, so = (size_t)m * n;
      // P * Qtilde_t is P mod q_m on the digit's primes and 0 on every other prime (and mod P).
      const bool in_digit = m >= lo && m < hi;
      const u64 pf = in_digit ? ctx_.p_mod_q(m) : 0;
      for (size_t i = 0; i < n; ++i) {
        u64 v = ring::sub_mod(e[o + i], q.mul(a[o + i], sk.ntt_qp[so + i]), q.q);
        if (in_digit) v = ring::add_mod(v, q.mul(pf, sp[so + i]), q.q);
        b[o + i] = v;
      }
    }
    kb.push_back(std::move(b));
    ka.push_back(std::move(a));
    key.a_seeds.push_back(seed);
  }
  return key;
}

SwitchKey KeyGenerator::relin_key(const SecretKey& sk, int level) const {
  const size_t n = ctx_.n();
  Poly s2(sk.ntt_qp.size());
  const int total = ctx_.max_level() + 1 + ctx_.num_p();
  for (int k = 0; k < total; ++k) {
    const Modulus& q = ctx_.modulus(k);
    for (size_t i = 0; i < n; ++i) s2[(size_t)k * n + i] = q.mul(sk.ntt_qp[(size_t)k * n + i], sk.ntt_qp[(size_t)k * n + i]);
  }
  SwitchKey key = switch_key(sk, s2, level);
  wipe(s2);
  key.galois = 0;
  return key;
}

SwitchKey KeyGenerator::galois_key(const SecretKey& sk, uint64_t galois, int level) const {
  const size_t n = ctx_.n();
  if (galois % 2 == 0 || galois >= 2 * n) fail(ErrorKind::Parameter, "Galois element must be odd and < 2N");
  const auto& perm = ctx_.galois_permutation(galois);
  const int total = ctx_.max_level() + 1 + ctx_.num_p();
  Poly sg(sk.ntt_qp.size());
  for (int k = 0; k < total; ++k)
    for (size_t i = 0; i < n; ++i) sg[(size_t)k * n + i] = sk.ntt_qp[(size_t)k * n + perm[i]];
  SwitchKey key = switch_key(sk, sg, level);
  wipe(sg);
  key.galois = galois;
  return key;
}

}  // namespace hemlp
