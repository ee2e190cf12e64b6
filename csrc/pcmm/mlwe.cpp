#include "pcmm/mlwe.h"

#include <string>

#include "ckks/errors.h"
#include "ckks/evaluator.h"
#include "ckks/keygen.h"
#include "ckks/keyswitch.h"

namespace hemlp::pcmm {

std::vector<SwitchKey> modpack_keys(const Context& ctx, const SecretKey& sk, int k, int level) {
  const size_t n = ctx.n();
  if (k < 2 || (size_t)k > n || n % (size_t)k) fail(ErrorKind::Parameter, "ModPack keys: k must divide N and be >= 2");
  if (sk.param_hash != ctx.hash64()) fail(ErrorKind::ContextMismatch, "secret key of another parameter set");
  KeyGenerator kg(ctx);
  const size_t d3 = n / k;
  std::vector<SwitchKey> out;
  for (int v = 0; v < k; ++v) {
    std::vector<int8_t> sv(n, 0);  // s_v(X^k): coefficient t*k holds s[t*k + v]
    for (size_t t = 0; t < d3; ++t) sv[t * k] = sk.coeffs[t * k + v];
    SwitchKey key = kg.switch_key(sk, small_to_ntt_qp(ctx, sv), level);
    key.galois = 0;
    out.push_back(std::move(key));
  }
  return out;
}

std::vector<Ciphertext> pcmm_mlwe(const Context& ctx, const ModGemmPlan& plan,
                                  const std::vector<const Ciphertext*>& inputs, int k, int64_t K, double factor,
                                  const std::vector<SwitchKey>& keys) {
  const size_t n = ctx.n(), d1 = plan.rows(), d2 = plan.cols();
  if (k < 2 || n % (size_t)k) fail(ErrorKind::Parameter, "MLWE: k must divide N and be >= 2");
  const size_t d3 = n / k;
  if (d2 != inputs.size() * (size_t)k || d1 % (size_t)k)
    fail(ErrorKind::Shape, "MLWE pcmm: U must be (multiple of k) x (k * number of ciphertexts)");
  if (keys.size() != (size_t)k)
    fail(ErrorKind::MissingKey, "MLWE pcmm needs k = " + std::to_string(k) + " ModPack keys; make them with "
                                "linalg.modpack_keys(ctx, sk, k)");
  const Ciphertext& ref = *inputs.at(0);
  for (auto* c : inputs) {
    if (!c || c->param_hash != ctx.hash64()) fail(ErrorKind::ContextMismatch, "MLWE pcmm: missing or foreign ciphertext");
    if (c->encoding != Encoding::Coeff)
      fail(ErrorKind::Encoding, "MLWE (k > 1) needs coefficient-encoded rows: slot encoding does not commute with "
                                "the decimation; encrypt with encoding='coeff'");
    if (c->size() != 2 || c->level != ref.level || !scales_match(c->scale, ref.scale) || c->key_id != ref.key_id)
      fail(ErrorKind::Level, "MLWE pcmm: all ciphertexts must share level, scale and key");
  }
  for (auto& key : keys)
    if (key.param_hash != ctx.hash64() || (ref.key_id && key.key_id != ref.key_id))
      fail(ErrorKind::KeyMismatch, "ModPack keys belong to another secret key");
  const int level = ref.level, limbs = level + 1;
  const size_t groups = d1 / k, cts_in = inputs.size();
  // Coefficient form of every input.
  std::vector<Poly> c0(cts_in), c1(cts_in);
  for (size_t i = 0; i < cts_in; ++i) {
    c0[i] = inputs[i]->polys[0];
    c1[i] = inputs[i]->polys[1];
    ctx.intt_limbs(c0[i].data(), level, limbs, false);
    ctx.intt_limbs(c1[i].data(), level, limbs, false);
  }
  // Output parts in coefficient form, already re-interleaved (ModPack's b~ and a~_v).
  std::vector<Poly> bt(groups, Poly((size_t)limbs * n));
  std::vector<std::vector<Poly>> at(groups, std::vector<Poly>(k, Poly((size_t)limbs * n)));
  std::vector<u64> A(d2 * n), B(d2 * d3), CA(d1 * n), CB(d1 * d3);
  std::vector<const uint64_t*> ar(d2), br(d2);
  for (int l = 0; l < limbs; ++l) {
    const u64 q = ctx.modulus(l).q;
    // ModDecomp: row (i, w): b_w[t] = c0[t k + w];  a_w[v d3 + t] = c1[t k + w - v] (negacyclic wrap).
#pragma omp parallel for schedule(static)
    for (long i = 0; i < (long)cts_in; ++i) {
      const u64* p0 = c0[i].data() + (size_t)l * n;
      const u64* p1 = c1[i].data() + (size_t)l * n;
      for (int w = 0; w < k; ++w) {
        const size_t row = (size_t)i * k + w;
        u64* b = B.data() + row * d3;
        u64* a = A.data() + row * n;
        for (size_t t = 0; t < d3; ++t) b[t] = p0[t * k + w];
        for (int v = 0; v < k; ++v)
          for (size_t t = 0; t < d3; ++t) {
            const long j = (long)(t * k) + w - v;
            a[(size_t)v * d3 + t] = j >= 0 ? p1[j] : ring::neg_mod(p1[j + (long)n], q);
          }
      }
    }
    for (size_t r = 0; r < d2; ++r) { ar[r] = A.data() + r * n; br[r] = B.data() + r * d3; }
    plan.apply(ar.data(), n, q, CA.data(), n);
    plan.apply(br.data(), d3, q, CB.data(), d3);
    int64_t km = K % (int64_t)q;
    const u64 kw = km < 0 ? (u64)(km + (int64_t)q) : (u64)km, kwp = ring::shoup_precompute(kw, q);
    // ModPack interleave: output row r = k g + w goes to coefficient t k + w of group g.
#pragma omp parallel for schedule(static)
    for (long g = 0; g < (long)groups; ++g)
      for (int w = 0; w < k; ++w) {
        const size_t r = (size_t)g * k + w;
        u64* bd = bt[g].data() + (size_t)l * n;
        for (size_t t = 0; t < d3; ++t) bd[t * k + w] = ring::mul_shoup(CB[r * d3 + t], kw, kwp, q);
        for (int v = 0; v < k; ++v) {
          u64* ad = at[g][v].data() + (size_t)l * n;
          for (size_t t = 0; t < d3; ++t) ad[t * k + w] = ring::mul_shoup(CA[r * n + (size_t)v * d3 + t], kw, kwp, q);
        }
      }
  }
  // Key-switch each a~_v from s_v(X^k) to s; accumulate over Q_l P, one ModDown per part.
  std::vector<Ciphertext> out(groups);
  const int E = limbs + ctx.num_p();
  for (size_t g = 0; g < groups; ++g) {
    Poly acc0((size_t)E * n, 0), acc1((size_t)E * n, 0);
    for (int v = 0; v < k; ++v) {
      ctx.ntt_limbs(at[g][v].data(), level, limbs, false);
      ModUpDigits d = modup(ctx, at[g][v].data(), level);
      Poly u0, u1;
      key_inner_product(ctx, d, keys[v], nullptr, u0, u1);
#pragma omp parallel for schedule(static)
      for (int e = 0; e < E; ++e) {
        const u64 q = ctx.modulus(ctx.qp_index(level, e)).q;
        for (size_t x = 0; x < n; ++x) {
          const size_t o = (size_t)e * n + x;
          acc0[o] = ring::add_mod(acc0[o], u0[o], q);
          acc1[o] = ring::add_mod(acc1[o], u1[o], q);
        }
      }
    }
    Poly k0, k1;
    moddown(ctx, acc0, level, k0);
    moddown(ctx, acc1, level, k1);
    ctx.ntt_limbs(bt[g].data(), level, limbs, false);
    Ciphertext& o = out[g];
    copy_metadata(o, ref);
    o.key_id = ref.key_id;
    o.level = level;
    o.scale = ref.scale * factor;
    o.encoding = Encoding::Coeff;
    o.polys.assign(2, Poly());
    o.polys[0] = std::move(bt[g]);
    for (int l = 0; l < limbs; ++l) {
      const u64 q = ctx.modulus(l).q;
      for (size_t x = 0; x < n; ++x) {
        const size_t idx = (size_t)l * n + x;
        o.polys[0][idx] = ring::add_mod(o.polys[0][idx], k0[idx], q);
      }
    }
    o.polys[1] = std::move(k1);
  }
  return out;
}

}  // namespace hemlp::pcmm
