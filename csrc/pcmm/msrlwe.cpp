#include "pcmm/msrlwe.h"

#include <openssl/evp.h>

#include <cstring>
#include <stdexcept>
#include <string>

#include "ckks/errors.h"
#include "ckks/evaluator.h"
#include "ckks/keygen.h"
#include "ckks/keyswitch.h"

namespace hemlp::pcmm {

MultiSecretKey multi_secret_key(const Context& ctx, int k) {
  if (k < 1 || k > 1024) fail(ErrorKind::Parameter, "multi-secret key: k must be in [1, 1024]");
  Prng prng(os_seed());
  MultiSecretKey key;
  key.param_hash = ctx.hash64();
  key.key_id = prng.u64() | 1;
  for (int j = 0; j < k; ++j) {
    key.coeffs.push_back(sample_ternary(prng, ctx.n()));
    key.ntt_qp.push_back(small_to_ntt_qp(ctx, key.coeffs.back()));
  }
  return key;
}

Seed row_seed(const Seed& session, uint64_t row) {
  // One AES-256 block keyed by the session seed per half of the row seed: a PRF of the row index.
  Seed out{};
  EVP_CIPHER_CTX* c = EVP_CIPHER_CTX_new();
  if (!c) throw std::runtime_error("EVP_CIPHER_CTX_new failed");
  uint8_t in[32] = {0};
  std::memcpy(in, &row, 8);
  in[16] = 1;
  std::memcpy(in + 17, &row, 8);
  int len = 0;
  bool ok = EVP_EncryptInit_ex(c, EVP_aes_256_ecb(), nullptr, session.data(), nullptr) == 1 &&
            EVP_CIPHER_CTX_set_padding(c, 0) == 1 && EVP_EncryptUpdate(c, out.data(), &len, in, 32) == 1 && len == 32;
  EVP_CIPHER_CTX_free(c);
  if (!ok) throw std::runtime_error("AES row-seed derivation failed");
  return out;
}

Poly ms_a_from_seed(const Context& ctx, const Seed& seed, int level) {
  return uniform_from_seed(ctx, seed, level + 1, false, 0);
}

MsCiphertext ms_encrypt(const Context& ctx, const std::vector<Plaintext>& pts, const MultiSecretKey& key,
                        const Seed& a_seed) {
  if (pts.empty() || pts.size() != key.coeffs.size())
    fail(ErrorKind::Shape, "MSRLWE encryption needs one plaintext per secret of the multi-secret key (" +
                               std::to_string(key.coeffs.size()) + ")");
  if (key.param_hash != ctx.hash64()) fail(ErrorKind::ContextMismatch, "multi-secret key of another parameter set");
  const Plaintext& p0 = pts[0];
  for (auto& p : pts)
    if (p.level != p0.level || p.scale != p0.scale || p.slots != p0.slots || p.encoding != p0.encoding)
      fail(ErrorKind::Encoding, "MSRLWE chunks must share level, scale, slots and encoding");
  const size_t n = ctx.n();
  const int limbs = p0.level + 1;
  MsCiphertext ct;
  ct.param_hash = ctx.hash64();
  ct.key_id = key.key_id;
  ct.level = p0.level;
  ct.scale = p0.scale;
  ct.slots = p0.slots;
  ct.encoding = p0.encoding;
  ct.seed = a_seed;
  ct.seeded = true;
  ct.a = ms_a_from_seed(ctx, a_seed, p0.level);
  Prng prng(os_seed());
  for (size_t j = 0; j < pts.size(); ++j) {
    Poly e = small_to_ntt_q(ctx, sample_gaussian(prng, n), limbs);
    Poly b((size_t)limbs * n);
    for (int k = 0; k < limbs; ++k) {
      const Modulus& q = ctx.modulus(k);
      const size_t o = (size_t)k * n;
      for (size_t i = 0; i < n; ++i) {
        u64 v = ring::sub_mod(e[o + i], q.mul(ct.a[o + i], key.ntt_qp[j][o + i]), q.q);
        b[o + i] = ring::add_mod(v, pts[j].data[o + i], q.q);
      }
    }
    ct.b.push_back(std::move(b));
  }
  return ct;
}

std::vector<Plaintext> ms_decrypt(const Context& ctx, const MsCiphertext& ct, const MultiSecretKey& key,
                                  const DecryptNoise& noise) {
  if (ct.param_hash != ctx.hash64() || key.param_hash != ctx.hash64())
    fail(ErrorKind::ContextMismatch, "MSRLWE ciphertext or key of another parameter set");
  if (ct.key_id != key.key_id)
    fail(ErrorKind::KeyMismatch, "this MSRLWE matrix was encrypted under another multi-secret key");
  if (ct.b.size() != key.coeffs.size()) fail(ErrorKind::Shape, "chunk count does not match the multi-secret key");
  const size_t n = ctx.n();
  const int limbs = ct.level + 1;
  std::vector<Plaintext> out;
  for (size_t j = 0; j < ct.b.size(); ++j) {
    Plaintext p;
    copy_metadata(p, ct);
    p.data.resize((size_t)limbs * n);
    for (int k = 0; k < limbs; ++k) {
      const Modulus& q = ctx.modulus(k);
      const size_t o = (size_t)k * n;
      for (size_t i = 0; i < n; ++i) p.data[o + i] = ring::add_mod(ct.b[j][o + i], q.mul(ct.a[o + i], key.ntt_qp[j][o + i]), q.q);
    }
    add_decrypt_noise(ctx, p.data, limbs, noise);
    out.push_back(std::move(p));
  }
  return out;
}

namespace {
// out[r] (limbs 0..level) = K * sum_i U_ri rows[i], for polys given by pointer (nullptr = 0).
void gemm_polys(const Context& ctx, const ModGemmPlan& plan, const std::vector<const u64*>& rows, int level,
                int64_t K, const std::vector<u64*>& out) {
  const size_t n = ctx.n(), d1 = plan.rows(), d2 = plan.cols();
  const std::vector<u64> zeros(n, 0);
  std::vector<const uint64_t*> lr(d2);
  std::vector<u64*> cr(d1);
  for (int k = 0; k <= level; ++k) {
    const u64 q = ctx.modulus(k).q;
    int64_t km = K % (int64_t)q;
    const u64 w = km < 0 ? (u64)(km + (int64_t)q) : (u64)km;
    for (size_t i = 0; i < d2; ++i) lr[i] = rows[i] ? rows[i] + (size_t)k * n : zeros.data();
    for (size_t r = 0; r < d1; ++r) cr[r] = out[r] + (size_t)k * n;
    plan.apply_rows(lr.data(), n, q, cr.data(), w);  // K folded into the recombination
  }
}
}  // namespace

std::vector<Poly> pcmm_a_parts(const Context& ctx, const ModGemmPlan& plan, const std::vector<const Poly*>& a,
                               int level, int64_t K) {
  if (a.size() != plan.cols()) fail(ErrorKind::Shape, "precompute: one a-part per encrypted row is needed");
  std::vector<const u64*> rows;
  for (auto* p : a) {
    if (p && p->size() < (size_t)(level + 1) * ctx.n()) fail(ErrorKind::Level, "precompute: a-part below the level");
    rows.push_back(p ? p->data() : nullptr);
  }
  std::vector<Poly> out(plan.rows(), Poly((size_t)(level + 1) * ctx.n()));
  std::vector<u64*> outp;
  for (auto& p : out) outp.push_back(p.data());
  gemm_polys(ctx, plan, rows, level, K, outp);
  return out;
}

std::vector<MsCiphertext> pcmm_msrlwe(const Context& ctx, const ModGemmPlan& plan,
                                      const std::vector<const MsCiphertext*>& rows, int64_t K, double factor,
                                      const std::vector<Poly>* pre) {
  const size_t d1 = plan.rows(), d2 = plan.cols(), n = ctx.n();
  if (rows.size() != d2)
    fail(ErrorKind::Shape, "pcmm: the weight matrix has " + std::to_string(d2) + " columns but the encrypted matrix has " +
                               std::to_string(rows.size()) + " rows");
  const MsCiphertext* ref = nullptr;
  for (auto* r : rows)
    if (r) { ref = r; break; }
  if (!ref) fail(ErrorKind::Shape, "pcmm: no encrypted rows");
  for (auto* r : rows) {
    if (!r) continue;
    if (r->param_hash != ctx.hash64()) fail(ErrorKind::ContextMismatch, "pcmm: a row belongs to another parameter set");
    if (r->level != ref->level || !scales_match(r->scale, ref->scale) || r->b.size() != ref->b.size() ||
        r->slots != ref->slots || r->encoding != ref->encoding || r->key_id != ref->key_id)
      fail(ErrorKind::Level, "pcmm: all MSRLWE rows must share level, scale, chunk count, encoding and key");
  }
  const int level = ref->level;
  const size_t k = ref->b.size(), sz = (size_t)(level + 1) * n;
  std::vector<MsCiphertext> out(d1);
  for (auto& o : out) {
    copy_metadata(o, *ref);
    o.key_id = ref->key_id;
    o.scale = ref->scale * factor;
    o.a.resize(sz);
    o.b.assign(k, Poly(sz));
  }
  std::vector<const u64*> in(d2);
  std::vector<u64*> dst(d1);
  if (pre) {
    if (pre->size() != d1) fail(ErrorKind::Shape, "precomputed U*A has the wrong number of rows");
    for (size_t r = 0; r < d1; ++r) {
      if ((*pre)[r].size() < sz) fail(ErrorKind::Level, "precomputed U*A is below the matrix level");
      std::copy((*pre)[r].begin(), (*pre)[r].begin() + sz, out[r].a.begin());
    }
  } else {
    for (size_t i = 0; i < d2; ++i) in[i] = rows[i] ? rows[i]->a.data() : nullptr;
    for (size_t r = 0; r < d1; ++r) dst[r] = out[r].a.data();
    gemm_polys(ctx, plan, in, level, K, dst);
  }
  for (size_t j = 0; j < k; ++j) {
    for (size_t i = 0; i < d2; ++i) in[i] = rows[i] ? rows[i]->b[j].data() : nullptr;
    for (size_t r = 0; r < d1; ++r) dst[r] = out[r].b[j].data();
    gemm_polys(ctx, plan, in, level, K, dst);
  }
  return out;
}

std::vector<SwitchKey> ms_conversion_keys(const Context& ctx, const SecretKey& sk, const MultiSecretKey& key) {
  if (sk.param_hash != ctx.hash64() || key.param_hash != ctx.hash64())
    fail(ErrorKind::ContextMismatch, "conversion keys: keys of another parameter set");
  KeyGenerator kg(ctx);
  std::vector<SwitchKey> out;
  for (auto& sj : key.ntt_qp) {
    SwitchKey k = kg.switch_key(sk, sj);
    k.galois = 0;
    out.push_back(std::move(k));
  }
  return out;
}

std::vector<Ciphertext> ms_to_rlwe(const Context& ctx, const MsCiphertext& ct, const std::vector<SwitchKey>& keys) {
  if (keys.size() != ct.b.size())
    fail(ErrorKind::MissingKey, "MSRLWE -> RLWE needs one conversion key per chunk (" + std::to_string(ct.b.size()) +
                                    "); generate them from the secret key and the multi-secret key (conversion_keys)");
  for (auto& k : keys)
    if (k.param_hash != ctx.hash64()) fail(ErrorKind::ContextMismatch, "conversion key of another parameter set");
  const size_t n = ctx.n();
  ModUpDigits d = modup(ctx, ct.a.data(), ct.level);  // shared by all k chunks
  std::vector<Ciphertext> out;
  for (size_t j = 0; j < ct.b.size(); ++j) {
    Poly u0, u1, k0, k1;
    key_inner_product(ctx, d, keys[j], nullptr, u0, u1);
    moddown(ctx, u0, ct.level, k0);
    moddown(ctx, u1, ct.level, k1);
    Ciphertext c;
    copy_metadata(c, ct);
    c.key_id = keys[j].key_id;
    c.polys.assign(2, Poly());
    c.polys[0].resize(k0.size());
    for (int l = 0; l <= ct.level; ++l) {
      const u64 q = ctx.modulus(l).q;
      for (size_t i = 0; i < n; ++i) c.polys[0][(size_t)l * n + i] = ring::add_mod(ct.b[j][(size_t)l * n + i], k0[(size_t)l * n + i], q);
    }
    c.polys[1] = std::move(k1);
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace hemlp::pcmm

namespace hemlp::pcmm {

MsCiphertext ms_rescale(const Context& ctx, const MsCiphertext& ct) {
  Evaluator ev(ctx);
  Ciphertext tmp;
  copy_metadata(tmp, ct);
  tmp.polys = ct.b;
  tmp.polys.push_back(ct.a);
  Ciphertext r = ev.rescale(tmp);
  MsCiphertext out = ct;
  out.seeded = false;
  out.level = r.level;
  out.scale = r.scale;
  out.a = std::move(r.polys.back());
  r.polys.pop_back();
  out.b = std::move(r.polys);
  return out;
}

MsCiphertext ms_add_plain(const Context& ctx, const MsCiphertext& ct, size_t chunk, const Plaintext& pt) {
  if (chunk >= ct.b.size()) fail(ErrorKind::Shape, "chunk index out of range");
  if (pt.param_hash != ctx.hash64()) fail(ErrorKind::ContextMismatch, "plaintext of another parameter set");
  if (pt.level != ct.level || pt.slots != ct.slots || pt.encoding != ct.encoding || !scales_match(pt.scale, ct.scale))
    fail(ErrorKind::Scale, "plaintext must match the MSRLWE row's level, scale, slots and encoding");
  const size_t n = ctx.n();
  MsCiphertext out = ct;
  for (int l = 0; l <= ct.level; ++l) {
    const u64 q = ctx.modulus(l).q;
    for (size_t i = 0; i < n; ++i)
      out.b[chunk][(size_t)l * n + i] = ring::add_mod(out.b[chunk][(size_t)l * n + i], pt.data[(size_t)l * n + i], q);
  }
  return out;
}

}  // namespace hemlp::pcmm

namespace hemlp::pcmm {

MsConversionKey rlwe_to_ms_key(const Context& ctx, const SecretKey& sk, const MultiSecretKey& msk) {
  if (sk.param_hash != ctx.hash64() || msk.param_hash != ctx.hash64())
    fail(ErrorKind::ContextMismatch, "conversion key: keys of another parameter set");
  const size_t n = ctx.n();
  const int L = ctx.max_level(), total = L + 1 + ctx.num_p(), alpha = ctx.alpha();
  MsConversionKey key;
  key.param_hash = ctx.hash64();
  key.key_id = sk.key_id;
  key.ms_key_id = msk.key_id;
  key.k = (int)msk.coeffs.size();
  key.digits = ctx.params().num_digits(L);
  Prng prng(os_seed());
  for (int i = 0; i < key.k; ++i)
    for (int l = 0; l < key.digits; ++l) {
      Poly a = uniform_from_seed(ctx, os_seed(), total, true, L);
      const int lo = l * alpha, hi = std::min(L + 1, lo + alpha);
      for (int j = 0; j < key.k; ++j) {
        Poly e = small_to_ntt_qp(ctx, sample_gaussian(prng, n));
        Poly b(a.size());
#pragma omp parallel for schedule(static)
        for (int m = 0; m < total; ++m) {
          const Modulus& q = ctx.modulus(m);
          const size_t o = (size_t)m * n;
          const bool gadget = i == j && m >= lo && m < hi;  // P Qtilde_l s: P mod q on digit l only
          const u64 pf = gadget ? ctx.p_mod_q(m) : 0;
          for (size_t x = 0; x < n; ++x) {
            u64 v = ring::sub_mod(e[o + x], q.mul(a[o + x], msk.ntt_qp[j][o + x]), q.q);
            if (gadget) v = ring::add_mod(v, q.mul(pf, sk.ntt_qp[o + x]), q.q);
            b[o + x] = v;
          }
        }
        key.beta.push_back(std::move(b));
      }
      key.alpha.push_back(std::move(a));
    }
  return key;
}

MsCiphertext rlwe_to_ms(const Context& ctx, const std::vector<const Ciphertext*>& cts, const MsConversionKey& key) {
  if ((int)cts.size() != key.k)
    fail(ErrorKind::Shape, "RLWE -> MSRLWE: the conversion key takes exactly k = " + std::to_string(key.k) +
                               " ciphertexts per row");
  if (key.param_hash != ctx.hash64()) fail(ErrorKind::ContextMismatch, "conversion key of another parameter set");
  const Ciphertext& ref = *cts[0];
  for (auto* c : cts) {
    if (!c || c->param_hash != ctx.hash64()) fail(ErrorKind::ContextMismatch, "RLWE -> MSRLWE: foreign ciphertext");
    if (c->size() != 2 || c->level != ref.level || !scales_match(c->scale, ref.scale) || c->slots != ref.slots ||
        c->encoding != ref.encoding)
      fail(ErrorKind::Level, "RLWE -> MSRLWE: the k ciphertexts must share level, scale, slots and encoding");
    if (c->key_id && c->key_id != key.key_id)
      fail(ErrorKind::KeyMismatch, "RLWE -> MSRLWE: the conversion key was made from another secret key");
  }
  const size_t n = ctx.n();
  const int level = ref.level, k = key.k, E = level + 1 + ctx.num_p();
  Poly acc_a((size_t)E * n, 0);
  std::vector<Poly> acc_b(k, Poly((size_t)E * n, 0));
  for (int i = 0; i < k; ++i) {
    ModUpDigits d = modup(ctx, cts[i]->polys[1].data(), level);
    const int beta = (int)d.digits.size();
#pragma omp parallel for schedule(static)
    for (int e = 0; e < E; ++e) {
      const int m = ctx.qp_index(level, e);
      const Modulus& q = ctx.modulus(m);
      const size_t ko = (size_t)m * n, dof = (size_t)e * n;
      for (size_t x = 0; x < n; ++x) {
        u128 sa = 0;
        for (int l = 0; l < beta; ++l) sa += (u128)d.digits[l][dof + x] * key.alpha[(size_t)i * key.digits + l][ko + x];
        acc_a[dof + x] = ring::add_mod(acc_a[dof + x], q.reduce128(sa), q.q);
        for (int j = 0; j < k; ++j) {
          u128 sb = 0;
          for (int l = 0; l < beta; ++l)
            sb += (u128)d.digits[l][dof + x] * key.beta[((size_t)i * key.digits + l) * k + j][ko + x];
          acc_b[j][dof + x] = ring::add_mod(acc_b[j][dof + x], q.reduce128(sb), q.q);
        }
      }
    }
  }
  MsCiphertext out;
  copy_metadata(out, ref);
  out.key_id = key.ms_key_id;
  out.level = level;
  moddown(ctx, acc_a, level, out.a);
  for (int j = 0; j < k; ++j) {
    Poly bj;
    moddown(ctx, acc_b[j], level, bj);
    for (int l = 0; l <= level; ++l) {
      const u64 q = ctx.modulus(l).q;
      for (size_t x = 0; x < n; ++x)
        bj[(size_t)l * n + x] = ring::add_mod(bj[(size_t)l * n + x], cts[j]->polys[0][(size_t)l * n + x], q);
    }
    out.b.push_back(std::move(bj));
  }
  return out;
}

}  // namespace hemlp::pcmm
