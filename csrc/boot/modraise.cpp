#include "boot/modraise.h"

#include <openssl/crypto.h>

#include <cmath>
#include <string>

#include "ckks/errors.h"
#include "ckks/keygen.h"
#include "ckks/keyswitch.h"

namespace hemlp {

namespace {

constexpr double kMaxEncapsulationBits = 121.0;  // Lattigo / ePrint 2022/024: h = 32 is 128-bit up to 121 bits

void check_level0(const Context& ctx, const Ciphertext& ct, const char* op) {
  if (ct.param_hash != ctx.hash64())
    fail(ErrorKind::ContextMismatch, std::string(op) + ": the ciphertext belongs to another parameter set");
  if (ct.level != 0)
    fail(ErrorKind::Level, std::string(op) + " needs a ciphertext at level 0 (ScaleDown first); got level " +
                               std::to_string(ct.level));
  if (ct.size() != 2)
    fail(ErrorKind::Shape, std::string(op) + " needs a relinearised (2-polynomial) ciphertext");
}

// Copies limb 0 (NTT over q0) of p and returns it in coefficient form.
Poly coeffs_q0(const Context& ctx, const Poly& p) {
  Poly c(p.begin(), p.begin() + ctx.n());
  ctx.ntt(0).inverse(c.data());
  return c;
}

}  // namespace

EncapsulationKeys encapsulation_keys(const Context& ctx, const SecretKey& sk, int hamming_weight, int level) {
  const size_t n = ctx.n();
  const int L = ctx.max_level(), K = ctx.num_p();
  if (sk.param_hash != ctx.hash64())
    fail(ErrorKind::ContextMismatch, "encapsulation keys: the secret key belongs to another parameter set");
  const int lv = level < 0 ? L : level;
  if (lv > L) fail(ErrorKind::Parameter, "encapsulation keys: level " + std::to_string(lv) + " above the top " +
                                             std::to_string(L));
  if (hamming_weight < 1 || (size_t)hamming_weight > n)
    fail(ErrorKind::Parameter, "encapsulation keys: the sparse secret's Hamming weight must be in [1, N]");
  const double bits = std::log2((double)ctx.modulus(0).q) + std::log2((double)ctx.modulus(ctx.p_index(0)).q);
  if (ctx.params().is_128_bit_secure() && bits > kMaxEncapsulationBits + 1e-9)
    fail(ErrorKind::Insecure, "encapsulation key modulus q0*p0 has " + std::to_string(bits) +
                                  " bits; the sparse secret (h = 32) is 128-bit only up to 121 bits: use smaller "
                                  "q0 / p0 (e.g. 60 + 61 bits)");

  Prng prng(os_seed());
  EncapsulationKeys keys;
  keys.param_hash = ctx.hash64();
  keys.key_id = sk.key_id;
  keys.sparse_id = prng.u64() | 1;
  keys.hamming_weight = hamming_weight;
  keys.level = lv;

  std::vector<int8_t> sp = sample_ternary_hw(prng, n, (size_t)hamming_weight);
  Poly sp_qp = small_to_ntt_qp(ctx, sp, lv);  // limb k: modulus qp_index(lv, k)

  // 1-digit sparse -> dense key over Q_lv ∪ P: B = -A s + e + P s' (P s' only on the q limbs; P ≡ 0 mod P).
  const int total = lv + 1 + K;
  keys.big_a = uniform_from_seed(ctx, os_seed(), total, true, lv);
  {
    Poly e = small_to_ntt_qp(ctx, sample_gaussian(prng, n), lv);
    keys.big_b.resize(keys.big_a.size());
#pragma omp parallel for schedule(static)
    for (int k = 0; k < total; ++k) {
      const int m = ctx.qp_index(lv, k);
      const Modulus& q = ctx.modulus(m);
      const size_t o = (size_t)k * n, so = (size_t)m * n;  // sk.ntt_qp is indexed by modulus (top level)
      const u64 pf = m <= L ? ctx.p_mod_q(m) : 0;
      for (size_t i = 0; i < n; ++i) {
        u64 v = ring::sub_mod(e[o + i], q.mul(keys.big_a[o + i], sk.ntt_qp[so + i]), q.q);
        if (k <= lv) v = ring::add_mod(v, q.mul(pf, sp_qp[o + i]), q.q);
        keys.big_b[o + i] = v;
      }
    }
  }
  // dense -> sparse key over {q0, p0}: b = -a s' + e + p0 s.
  {
    const int mods[2] = {0, ctx.p_index(0)};
    const int sp_limb[2] = {0, lv + 1};  // where q0 and p0 sit in sp_qp
    const u64 p0_mod_q0 = ctx.modulus(mods[1]).q % ctx.modulus(0).q;
    keys.small_a.resize(2 * n);
    keys.small_b.resize(2 * n);
    Prng arng(os_seed());
    std::vector<int8_t> e = sample_gaussian(prng, n);
    for (int k = 0; k < 2; ++k) {
      const Modulus& q = ctx.modulus(mods[k]);
      u64* a = keys.small_a.data() + (size_t)k * n;
      u64* b = keys.small_b.data() + (size_t)k * n;
      arng.uniform_mod(q.q, a, n);
      for (size_t i = 0; i < n; ++i) b[i] = e[i] >= 0 ? (u64)e[i] : q.q - (u64)(-e[i]);
      ctx.ntt(mods[k]).forward(b);
      const u64* s_ntt = sk.ntt_qp.data() + (size_t)mods[k] * n;
      const u64* spk = sp_qp.data() + (size_t)sp_limb[k] * n;
      for (size_t i = 0; i < n; ++i) {
        u64 v = ring::sub_mod(b[i], q.mul(a[i], spk[i]), q.q);
        if (k == 0) v = ring::add_mod(v, q.mul(p0_mod_q0, s_ntt[i]), q.q);  // p0 s ≡ 0 mod p0
        b[i] = v;
      }
    }
    OPENSSL_cleanse(e.data(), e.size());
  }
  OPENSSL_cleanse(sp.data(), sp.size());
  OPENSSL_cleanse(sp_qp.data(), sp_qp.size() * sizeof(u64));
  return keys;
}

Ciphertext dense_to_sparse(const Context& ctx, const Ciphertext& ct, const EncapsulationKeys& keys) {
  check_level0(ctx, ct, "dense_to_sparse");
  if (keys.param_hash != ctx.hash64())
    fail(ErrorKind::ContextMismatch, "dense_to_sparse: the encapsulation keys belong to another parameter set");
  if (ct.key_id != keys.key_id)
    fail(ErrorKind::KeyMismatch, "dense_to_sparse: the ciphertext was not made under the key pair of these "
                                 "encapsulation keys");
  const size_t n = ctx.n();
  const Modulus& q0 = ctx.modulus(0);
  const int pidx = ctx.p_index(0);
  const Modulus& p0 = ctx.modulus(pidx);
  // c1 centred-lifted to p0: a single prime is its own digit, so this is the exact ModUp.
  Poly c1q = coeffs_q0(ctx, ct.polys[1]);
  Poly c1p(n);
  for (size_t i = 0; i < n; ++i) c1p[i] = ring::centred_mod(c1q[i], q0.q, p0.q);
  ctx.ntt(pidx).forward(c1p.data());
  const u64* c1q_ntt = ct.polys[1].data();
  // u = c1 * (b, a) over {q0, p0}; k = (u_q0 - [u_p0]_centred) * p0^-1 mod q0.
  const u64 p0inv = ring::inv_mod(p0.q % q0.q, q0.q);
  Poly k[2];
  const Poly* key[2] = {&keys.small_b, &keys.small_a};
  for (int j = 0; j < 2; ++j) {
    Poly uq(n), up(n);
    const u64* kq = key[j]->data();
    const u64* kp = key[j]->data() + n;
    for (size_t i = 0; i < n; ++i) {
      uq[i] = q0.mul(c1q_ntt[i], kq[i]);
      up[i] = p0.mul(c1p[i], kp[i]);
    }
    ctx.ntt(0).inverse(uq.data());
    ctx.ntt(pidx).inverse(up.data());
    for (size_t i = 0; i < n; ++i)
      uq[i] = q0.mul(ring::sub_mod(uq[i], ring::centred_mod(up[i], p0.q, q0.q), q0.q), p0inv);
    ctx.ntt(0).forward(uq.data());
    k[j] = std::move(uq);
  }
  Ciphertext out;
  copy_metadata(out, ct);
  out.is_complex = ct.is_complex;
  out.key_id = keys.sparse_id;
  out.polys.resize(2);
  out.polys[0].resize(n);
  for (size_t i = 0; i < n; ++i) out.polys[0][i] = ring::add_mod(ct.polys[0][i], k[0][i], q0.q);
  out.polys[1] = std::move(k[1]);
  return out;
}

Ciphertext mod_raise(const Context& ctx, const Ciphertext& ct, const EncapsulationKeys& keys, int target) {
  check_level0(ctx, ct, "mod_raise");
  if (keys.param_hash != ctx.hash64())
    fail(ErrorKind::ContextMismatch, "mod_raise: the encapsulation keys belong to another parameter set");
  if (ct.key_id != keys.sparse_id)
    fail(ErrorKind::KeyMismatch, "mod_raise takes the output of dense_to_sparse made with the same encapsulation "
                                 "keys (a ciphertext under their sparse secret)");
  if (target < 0 || target > keys.level)
    fail(ErrorKind::Level, "mod_raise: target level " + std::to_string(target) + " outside [0, " +
                               std::to_string(keys.level) + "] (the encapsulation keys were made for level " +
                               std::to_string(keys.level) + ")");
  const size_t n = ctx.n();
  const int K = ctx.num_p(), total = target + 1 + K;
  const u64 q0 = ctx.modulus(0).q;
  const Poly c0 = coeffs_q0(ctx, ct.polys[0]);
  const Poly c1 = coeffs_q0(ctx, ct.polys[1]);
  // centred lifts: c0 over Q_target, c1 over Q_target ∪ P (the single digit of the fused switch)
  Poly c0r((size_t)(target + 1) * n), c1r((size_t)total * n);
#pragma omp parallel for schedule(static)
  for (int k = 0; k < total; ++k) {
    const int m = ctx.qp_index(target, k);
    const u64 qm = ctx.modulus(m).q;
    u64* d1 = c1r.data() + (size_t)k * n;
    for (size_t i = 0; i < n; ++i) d1[i] = ring::centred_mod(c1[i], q0, qm);
    ctx.ntt(m).forward(d1);
    if (k <= target) {
      u64* d0 = c0r.data() + (size_t)k * n;
      for (size_t i = 0; i < n; ++i) d0[i] = ring::centred_mod(c0[i], q0, qm);
      ctx.ntt(m).forward(d0);
    }
  }
  // u = c1 * (B, A) over Q_target ∪ P (key limb for modulus m: k if m <= target, else its P position)
  Poly u0((size_t)total * n), u1((size_t)total * n);
#pragma omp parallel for schedule(static)
  for (int k = 0; k < total; ++k) {
    const int m = ctx.qp_index(target, k);
    const Modulus& q = ctx.modulus(m);
    const int kk = k <= target ? k : keys.level + 1 + (k - target - 1);
    const u64* d = c1r.data() + (size_t)k * n;
    const u64* B = keys.big_b.data() + (size_t)kk * n;
    const u64* A = keys.big_a.data() + (size_t)kk * n;
    u64* o0 = u0.data() + (size_t)k * n;
    u64* o1 = u1.data() + (size_t)k * n;
    for (size_t i = 0; i < n; ++i) {
      o0[i] = q.mul(d[i], B[i]);
      o1[i] = q.mul(d[i], A[i]);
    }
  }
  Ciphertext out;
  copy_metadata(out, ct);
  out.is_complex = ct.is_complex;
  out.key_id = keys.key_id;
  out.level = target;
  out.polys.resize(2);
  moddown_many(ctx, target, {&u0, &u1}, {&out.polys[0], &out.polys[1]}, {c0r.data(), nullptr});
  return out;
}

size_t encapsulation_key_bytes(const EncapsulationKeys& keys) {
  return (keys.small_a.size() + keys.small_b.size() + keys.big_a.size() + keys.big_b.size()) * sizeof(u64);
}

}  // namespace hemlp
