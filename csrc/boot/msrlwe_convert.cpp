#include "boot/msrlwe_convert.h"

#include <openssl/crypto.h>

#include <cmath>
#include <string>

#include "boot/ms_lintrans.h"
#include "ckks/errors.h"
#include "ckks/keygen.h"
#include "ckks/keyswitch.h"

namespace hemlp {

namespace {

constexpr double kMaxSparseKeyBits = 121.0;  // as boot/modraise: h = 32 is claimed 128-bit up to 121 bits

// One small Gaussian polynomial as residues mod q0 and mod p0 (NTT form): the same integers in both
// limbs (independent errors per limb would CRT to a huge error mod q0·p0).
void gaussian_ntt2(const Context& ctx, Prng& prng, const int mods[2], u64* out) {
  const size_t n = ctx.n();
  std::vector<int8_t> e = sample_gaussian(prng, n);
  for (int t = 0; t < 2; ++t) {
    const u64 q = ctx.modulus(mods[t]).q;
    u64* o = out + (size_t)t * n;
    for (size_t i = 0; i < n; ++i) o[i] = e[i] >= 0 ? (u64)e[i] : q - (u64)(-e[i]);
    ctx.ntt(mods[t]).forward(o);
  }
  OPENSSL_cleanse(e.data(), e.size());
}

// A uniform polynomial over {q0, p0} (NTT form: uniform residues are uniform in either form) from its seed.
Poly small_uniform(const Context& ctx, const Seed& seed) {
  const size_t n = ctx.n();
  const int mods[2] = {0, ctx.p_index(0)};
  Poly a(2 * n);
  Prng arng(seed);
  for (int t = 0; t < 2; ++t) arng.uniform_mod(ctx.modulus(mods[t]).q, a.data() + (size_t)t * n, n);
  return a;
}

}  // namespace

BatchConversionKeys batch_conversion_keys(const Context& ctx, const SecretKey& sk, const pcmm::MultiSecretKey& msk,
                                          int hamming_weight, int level, int back_level) {
  const size_t n = ctx.n();
  const int L = ctx.max_level(), K = ctx.num_p();
  if (sk.param_hash != ctx.hash64() || msk.param_hash != ctx.hash64())
    fail(ErrorKind::ContextMismatch, "batch conversion keys: a key belongs to another parameter set");
  const int k = (int)msk.coeffs.size();
  if (k < 1) fail(ErrorKind::Parameter, "batch conversion keys: the multi-secret key has no secret");
  const int lv = level < 0 ? L : level;
  if (lv > L || lv < 0 || back_level < 0 || back_level > L)
    fail(ErrorKind::Parameter, "batch conversion keys: levels outside [0, " + std::to_string(L) + "]");
  if (hamming_weight < 1 || (size_t)hamming_weight > n)
    fail(ErrorKind::Parameter, "batch conversion keys: the sparse secrets' Hamming weight must be in [1, N]");
  const int p0i = ctx.p_index(0);
  const double bits = std::log2((double)ctx.modulus(0).q) + std::log2((double)ctx.modulus(p0i).q);
  if (ctx.params().is_128_bit_secure() && bits > kMaxSparseKeyBits + 1e-9)
    fail(ErrorKind::Insecure, "batch conversion keys: q0*p0 has " + std::to_string(bits) +
                                  " bits; sparse secrets (h = 32) are 128-bit only up to 121 bits");
  Prng prng(os_seed());
  BatchConversionKeys keys;
  keys.param_hash = ctx.hash64();
  keys.key_id = sk.key_id;
  keys.ms_key_id = msk.key_id;
  keys.sparse_id = prng.u64() | 1;
  keys.k = k;
  keys.hamming_weight = hamming_weight;
  keys.level = lv;
  keys.back_level = back_level;

  const int total = lv + 1 + K;
  keys.big_a_seed = os_seed();
  keys.big_a = uniform_from_seed(ctx, keys.big_a_seed, total, true, lv);
  const int mods[2] = {0, p0i};
  const int sp_limb[2] = {0, lv + 1};  // q0 and p0 in a Q_lv ∪ P polynomial
  const u64 p0_mod_q0 = ctx.modulus(p0i).q % ctx.modulus(0).q;
  for (int i = 0; i < k; ++i) {
    keys.small_alpha_seeds.push_back(os_seed());
    keys.small_alpha.push_back(small_uniform(ctx, keys.small_alpha_seeds.back()));
  }
  keys.small_beta.resize((size_t)k * k);
  for (int j = 0; j < k; ++j) {
    std::vector<int8_t> sp = sample_ternary_hw(prng, n, (size_t)hamming_weight);
    Poly sp_qp = small_to_ntt_qp(ctx, sp, lv);
    // B_j = -A s_j + e + P s'_j over Q_lv ∪ P (P s'_j only on the q limbs)
    Poly e = small_to_ntt_qp(ctx, sample_gaussian(prng, n), lv);
    Poly B(keys.big_a.size());
    const Poly& sj = msk.ntt_qp[j];
#pragma omp parallel for schedule(static)
    for (int l = 0; l < total; ++l) {
      const int m = ctx.qp_index(lv, l);
      const Modulus& q = ctx.modulus(m);
      const size_t o = (size_t)l * n, so = (size_t)m * n;
      const u64 pf = m <= L ? ctx.p_mod_q(m) : 0;
      for (size_t x = 0; x < n; ++x) {
        u64 v = ring::sub_mod(e[o + x], q.mul(keys.big_a[o + x], sj[so + x]), q.q);
        if (l <= lv) v = ring::add_mod(v, q.mul(pf, sp_qp[o + x]), q.q);
        B[o + x] = v;
      }
    }
    keys.big_b.push_back(std::move(B));
    wipe(e);
    // beta_{i,j} = -alpha_i s'_j + e + [i == j] p0 s over {q0, p0}
    for (int i = 0; i < k; ++i) {
      Poly b(2 * n);
      gaussian_ntt2(ctx, prng, mods, b.data());
      for (int t = 0; t < 2; ++t) {
        const Modulus& q = ctx.modulus(mods[t]);
        u64* bt = b.data() + (size_t)t * n;
        const u64* at = keys.small_alpha[i].data() + (size_t)t * n;
        const u64* spk = sp_qp.data() + (size_t)sp_limb[t] * n;
        const u64* s_ntt = sk.ntt_qp.data() + (size_t)mods[t] * n;
        for (size_t x = 0; x < n; ++x) {
          u64 v = ring::sub_mod(bt[x], q.mul(at[x], spk[x]), q.q);
          if (i == j && t == 0) v = ring::add_mod(v, q.mul(p0_mod_q0, s_ntt[x]), q.q);  // p0 s ≡ 0 mod p0
          bt[x] = v;
        }
      }
      keys.small_beta[(size_t)i * k + j] = std::move(b);
    }
    OPENSSL_cleanse(sp.data(), sp.size());
    wipe(sp_qp);
  }
  KeyGenerator kg(ctx);
  for (int j = 0; j < k; ++j) {
    SwitchKey s = kg.switch_key(sk, msk.ntt_qp[j], back_level);
    s.galois = 0;
    keys.back.push_back(std::move(s));
  }
  return keys;
}

pcmm::MsCiphertext rlwe_to_ms_sparse(const Context& ctx, const std::vector<const Ciphertext*>& cts,
                                     const BatchConversionKeys& keys) {
  if (keys.param_hash != ctx.hash64())
    fail(ErrorKind::ContextMismatch, "RLWE -> MSRLWE: the batch conversion keys belong to another parameter set");
  if ((int)cts.size() != keys.k)
    fail(ErrorKind::Shape, "RLWE -> MSRLWE: the batch conversion keys take exactly k = " + std::to_string(keys.k) +
                               " ciphertexts; got " + std::to_string(cts.size()));
  const Ciphertext& ref = *cts[0];
  for (const Ciphertext* c : cts) {
    if (c->param_hash != ctx.hash64())
      fail(ErrorKind::ContextMismatch, "RLWE -> MSRLWE: a ciphertext belongs to another parameter set");
    if (c->level != 0)
      fail(ErrorKind::Level, "RLWE -> MSRLWE runs at level 0 (ScaleDown first); a ciphertext is at level " +
                                 std::to_string(c->level));
    if (c->size() != 2) fail(ErrorKind::Shape, "RLWE -> MSRLWE needs relinearised (2-polynomial) ciphertexts");
    if (c->scale != ref.scale || c->slots != ref.slots || c->encoding != ref.encoding)
      fail(ErrorKind::Scale, "RLWE -> MSRLWE: the k ciphertexts must share scale, slots and encoding");
    if (c->key_id != keys.key_id)
      fail(ErrorKind::KeyMismatch, "RLWE -> MSRLWE: a ciphertext was not made under the key pair of these keys");
  }
  const size_t n = ctx.n();
  const int k = keys.k, p0i = ctx.p_index(0);
  const Modulus& q0 = ctx.modulus(0);
  const Modulus& p0 = ctx.modulus(p0i);
  // u[0] = sum_i c1^_i alpha_i, u[1 + j] = sum_i c1^_i beta_{i,j}, over {q0, p0}, NTT
  std::vector<Poly> u(k + 1, Poly(2 * n, 0));
  Poly c1p(n);
  for (int i = 0; i < k; ++i) {
    const u64* c1q = cts[i]->polys[1].data();
    std::copy(c1q, c1q + n, c1p.begin());
    ctx.ntt(0).inverse(c1p.data());
    for (size_t x = 0; x < n; ++x) c1p[x] = ring::centred_mod(c1p[x], q0.q, p0.q);
    ctx.ntt(p0i).forward(c1p.data());
#pragma omp parallel for schedule(static)
    for (int o = 0; o <= k; ++o) {
      const Poly& key = o == 0 ? keys.small_alpha[i] : keys.small_beta[(size_t)i * k + (o - 1)];
      u64* uq = u[o].data();
      u64* up = u[o].data() + n;
      for (size_t x = 0; x < n; ++x) {
        uq[x] = ring::add_mod(uq[x], q0.mul(c1q[x], key[x]), q0.q);
        up[x] = ring::add_mod(up[x], p0.mul(c1p[x], key[n + x]), p0.q);
      }
    }
  }
  // ModDown by p0: (u_q0 - [u_p0]_centred) p0^-1 mod q0
  const u64 p0inv = ring::inv_mod(p0.q % q0.q, q0.q);
  pcmm::MsCiphertext out;
  copy_metadata(out, ref);
  out.key_id = keys.sparse_id;
  out.level = 0;
  out.seeded = false;
  out.b.resize(k);
#pragma omp parallel for schedule(static)
  for (int o = 0; o <= k; ++o) {
    u64* uq = u[o].data();
    u64* up = u[o].data() + n;
    ctx.ntt(0).inverse(uq);
    ctx.ntt(p0i).inverse(up);
    for (size_t x = 0; x < n; ++x) uq[x] = q0.mul(ring::sub_mod(uq[x], ring::centred_mod(up[x], p0.q, q0.q), q0.q), p0inv);
    ctx.ntt(0).forward(uq);
    Poly r(uq, uq + n);
    if (o > 0) {
      const u64* c0 = cts[o - 1]->polys[0].data();
      for (size_t x = 0; x < n; ++x) r[x] = ring::add_mod(r[x], c0[x], q0.q);
      out.b[o - 1] = std::move(r);
    } else {
      out.a = std::move(r);
    }
  }
  return out;
}

pcmm::MsCiphertext ms_mod_raise(const Context& ctx, const pcmm::MsCiphertext& ct, const BatchConversionKeys& keys,
                                int target) {
  if (keys.param_hash != ctx.hash64() || ct.param_hash != ctx.hash64())
    fail(ErrorKind::ContextMismatch, "MSRLWE ModRaise: the ciphertext or the keys belong to another parameter set");
  if (ct.key_id != keys.sparse_id)
    fail(ErrorKind::KeyMismatch, "MSRLWE ModRaise takes the output of rlwe_to_ms_sparse made with the same batch "
                                 "conversion keys");
  if ((int)ct.b.size() != keys.k) fail(ErrorKind::Shape, "MSRLWE ModRaise: chunk count does not match the keys' k");
  if (ct.level != 0) fail(ErrorKind::Level, "MSRLWE ModRaise needs a level-0 ciphertext");
  if (target < 0 || target > keys.level)
    fail(ErrorKind::Level, "MSRLWE ModRaise: target level " + std::to_string(target) + " outside [0, " +
                               std::to_string(keys.level) + "] (the keys' level)");
  const size_t n = ctx.n();
  const int K = ctx.num_p(), total = target + 1 + K, k = keys.k;
  const u64 q0 = ctx.modulus(0).q;
  // coefficient forms mod q0: [0] = a*, [1 + j] = b*_j
  std::vector<Poly> c(k + 1);
#pragma omp parallel for schedule(static)
  for (int o = 0; o <= k; ++o) {
    const Poly& src = o == 0 ? ct.a : ct.b[o - 1];
    c[o].assign(src.begin(), src.begin() + n);
    ctx.ntt(0).inverse(c[o].data());
  }
  // centred lifts: a* over Q_target ∪ P (the single digit), b*_j over Q_target
  Poly ar((size_t)total * n);
  std::vector<Poly> br(k, Poly((size_t)(target + 1) * n));
#pragma omp parallel for schedule(static)
  for (int l = 0; l < total; ++l) {
    const int m = ctx.qp_index(target, l);
    const u64 qm = ctx.modulus(m).q;
    u64* d = ar.data() + (size_t)l * n;
    for (size_t x = 0; x < n; ++x) d[x] = ring::centred_mod(c[0][x], q0, qm);
    ctx.ntt(m).forward(d);
    if (l <= target)
      for (int j = 0; j < k; ++j) {
        u64* dj = br[j].data() + (size_t)l * n;
        for (size_t x = 0; x < n; ++x) dj[x] = ring::centred_mod(c[1 + j][x], q0, qm);
        ctx.ntt(m).forward(dj);
      }
  }
  // u_0 = a^ A, u_{1+j} = a^ B_j over Q_target ∪ P (key limb: l if a q limb, else its P position)
  std::vector<Poly> u(k + 1, Poly((size_t)total * n));
#pragma omp parallel for schedule(static)
  for (int l = 0; l < total; ++l) {
    const Modulus& q = ctx.modulus(ctx.qp_index(target, l));
    const size_t kk = (size_t)(l <= target ? l : keys.level + 1 + (l - target - 1)) * n, o = (size_t)l * n;
    const u64* d = ar.data() + o;
    for (int p = 0; p <= k; ++p) {
      const u64* key = (p == 0 ? keys.big_a : keys.big_b[p - 1]).data() + kk;
      u64* dst = u[p].data() + o;
      for (size_t x = 0; x < n; ++x) dst[x] = q.mul(d[x], key[x]);
    }
  }
  pcmm::MsCiphertext out;
  copy_metadata(out, ct);
  out.key_id = keys.ms_key_id;
  out.level = target;
  out.seeded = false;
  ms_moddown_into(ctx, target, u, br, out);
  return out;
}

std::vector<Ciphertext> ms_to_rlwe_back(const Context& ctx, const pcmm::MsCiphertext& ct,
                                        const BatchConversionKeys& keys) {
  if (keys.param_hash != ctx.hash64() || ct.param_hash != ctx.hash64())
    fail(ErrorKind::ContextMismatch, "MSRLWE -> RLWE: the ciphertext or the keys belong to another parameter set");
  if (ct.key_id != keys.ms_key_id)
    fail(ErrorKind::KeyMismatch, "MSRLWE -> RLWE: the ciphertext is not under these keys' multi-secret key");
  if ((int)ct.b.size() != keys.k) fail(ErrorKind::Shape, "MSRLWE -> RLWE: chunk count does not match the keys' k");
  if (ct.level > keys.back_level)
    fail(ErrorKind::Level, "MSRLWE -> RLWE: the ciphertext is at level " + std::to_string(ct.level) +
                               " above the conversion keys' level " + std::to_string(keys.back_level));
  std::vector<Ciphertext> out = pcmm::ms_to_rlwe(ctx, ct, keys.back);
  for (auto& c : out) c.key_id = keys.key_id;
  return out;
}

size_t batch_conversion_key_bytes(const BatchConversionKeys& keys) {
  size_t s = keys.big_a.size();
  for (auto& p : keys.small_alpha) s += p.size();
  for (auto& p : keys.small_beta) s += p.size();
  for (auto& p : keys.big_b) s += p.size();
  for (auto& k : keys.back) s += k.b.total_words() + k.a.total_words();
  return s * sizeof(u64);
}

BatchConversionKeys import_batch_conversion_keys(const Context& ctx, const BatchConversionRecord& r,
                                                 std::vector<SwitchKey> back) {
  const int L = ctx.max_level(), k = r.k;
  const size_t n = ctx.n();
  if (k < 1 || r.hamming_weight < 1 || (size_t)r.hamming_weight > n || r.level < 0 || r.level > L ||
      r.back_level < 0 || r.back_level > L)
    fail(ErrorKind::Serialization, "batch conversion keys: k, Hamming weight or levels out of range; the data is "
                                   "corrupted or belongs to other parameters");
  if ((int)r.small_alpha_seeds.size() != k || r.small_beta.size() != (size_t)k * k || (int)r.big_b.size() != k ||
      (int)back.size() != k)
    fail(ErrorKind::Serialization, "batch conversion keys: the key counts do not match k = " + std::to_string(k) +
                                   "; the data is corrupted");
  BatchConversionKeys keys;
  keys.param_hash = ctx.hash64();
  keys.key_id = r.key_id;
  keys.ms_key_id = r.ms_key_id;
  keys.sparse_id = r.sparse_id;
  keys.k = k;
  keys.hamming_weight = r.hamming_weight;
  keys.level = r.level;
  keys.back_level = r.back_level;
  const int mods[2] = {0, ctx.p_index(0)};
  keys.small_alpha_seeds = r.small_alpha_seeds;
  for (const Seed& s : r.small_alpha_seeds) keys.small_alpha.push_back(small_uniform(ctx, s));
  for (const PolyView& v : r.small_beta) {
    if (v.data == nullptr || v.rows != 2 || v.cols != n)
      fail(ErrorKind::Serialization, "batch conversion keys: a {q0, p0} key part must be a (2, N) array; the data "
                                     "is corrupted");
    Poly b(2 * n);
    for (int t = 0; t < 2; ++t) {
      const u64 q = ctx.modulus(mods[t]).q;
      u64 bad = 0;
      for (size_t x = 0; x < n; ++x) {
        const u64 c = v.data[(size_t)t * n + x];
        bad |= (u64)(c >= q);
        b[(size_t)t * n + x] = c;
      }
      if (bad) fail(ErrorKind::Serialization, "batch conversion keys: residue out of range; the data is corrupted");
    }
    keys.small_beta.push_back(std::move(b));
  }
  keys.big_a_seed = r.big_a_seed;
  keys.big_a = uniform_from_seed(ctx, r.big_a_seed, r.level + 1 + ctx.num_p(), true, r.level);
  for (const PolyView& v : r.big_b) keys.big_b.push_back(import_poly(ctx, v, r.level, true, "batch conversion key"));
  for (auto& s : back) {
    if (s.level != r.back_level || s.galois != 0 || s.key_id != r.key_id)
      fail(ErrorKind::Serialization, "batch conversion keys: a back-conversion key has the wrong level, element or "
                                     "key id; the data is corrupted");
  }
  keys.back = std::move(back);
  return keys;
}

}  // namespace hemlp
