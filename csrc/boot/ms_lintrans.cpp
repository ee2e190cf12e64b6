#include "boot/ms_lintrans.h"

#include <algorithm>
#include <string>

#include "ckks/errors.h"
#include "ckks/evaluator.h"
#include "ckks/keygen.h"
#include "ckks/keyswitch.h"
#include "ring/galois.h"
#include "ring/keyip.h"

namespace hemlp {

// Read access to NativeLinearTransform's layout (declared a friend there).
struct MsLinearTransformAccess {
  static pcmm::MsCiphertext apply(const NativeLinearTransform& T, const pcmm::MsCiphertext& ct,
                                  const MsGaloisKeys& keys, bool rescale, LinTransCounts& cnt);
};

namespace {

constexpr int kFold = 32;  // products < 2^122: 32 of them sum below 2^127

const MsSwitchKey& find_key(const Context& ctx, const MsGaloisKeys& keys, uint64_t g, int level, const char* op) {
  auto it = keys.keys.find(g);
  if (it == keys.keys.end())
    fail(ErrorKind::MissingKey, std::string(op) + ": no batched (MSRLWE) Galois key for element " + std::to_string(g) +
                                    "; generate the batch bootstrapping keys with every step of the transform");
  if (it->second.level < level)
    fail(ErrorKind::Level, std::string(op) + ": the batched Galois key for element " + std::to_string(g) +
                               " was made for level " + std::to_string(it->second.level) + ", below the ciphertext's " +
                               std::to_string(level));
  (void)ctx;
  return it->second;
}

void check_ms(const Context& ctx, const pcmm::MsCiphertext& ct, const MsGaloisKeys& keys, const char* op) {
  if (ct.param_hash != ctx.hash64() || keys.param_hash != ctx.hash64())
    fail(ErrorKind::ContextMismatch, std::string(op) + ": the ciphertext or the keys belong to another parameter set");
  if (ct.key_id != keys.ms_key_id)
    fail(ErrorKind::KeyMismatch, std::string(op) + ": the batched Galois keys were made for another multi-secret key");
  if ((int)ct.b.size() != keys.k)
    fail(ErrorKind::Shape, std::string(op) + ": the ciphertext has " + std::to_string(ct.b.size()) +
                               " chunks, the keys were made for k = " + std::to_string(keys.k));
}

// outs[p] (Q_l ∪ P, NTT) = sum_t perm(d_t) · key_p[t], p = 0 (alpha), 1 + j (beta_j): the k + 1 inner
// products of one hoisted rotation, two at a time through the key-switch kernel.
void ms_inner_product(const Context& ctx, const ModUpDigits& d, const MsSwitchKey& key, const uint32_t* perm,
                      std::vector<Poly>& outs) {
  const size_t n = ctx.n();
  const int level = d.level, K = ctx.num_p(), E = level + 1 + K, beta = (int)d.digits.size();
  const int np = (int)key.beta.size() + 1;
  const bool seeded = key.alpha.empty();
  if ((int)(seeded ? key.alpha_seeds.size() : key.alpha.size()) < beta)
    fail(ErrorKind::Parameter, "batched key switch: the key has too few digits");
  outs.resize(np);
  for (auto& o : outs) o.resize((size_t)E * n);
  Poly spare((size_t)E * n);
  const int S = n % 32 == 0 ? kSeedSegments : 1;
  // the shared a-parts: the key's own; a seeded key's drawn from their seeds inside each (limb, quarter) job (in
  // cache, every thread busy) when its segment offsets are known, else expanded whole first
  const bool in_job = seeded && S == kSeedSegments && (int)key.alpha_offsets.size() >= beta;
  std::vector<const u64*> ka(beta);
  if (seeded && !in_job) {
    ka = expand_seeded_parts(ctx, key.alpha_seeds, beta, key.level + 1 + K, key.level);
  } else if (!seeded) {
    for (int t = 0; t < beta; ++t) ka[t] = key.alpha.data(t);
  }
#pragma omp parallel for schedule(static)
  for (int job = 0; job < E * S; ++job) {
    const int l = job / S;
    const size_t i0 = n / S * (job % S), i1 = i0 + n / S;
    const Modulus& q = ctx.modulus(ctx.qp_index(level, l));
    const int kl = l <= level ? l : l - level + key.level;  // the key's limb of the same modulus
    const size_t ko = (size_t)kl * n, dof = (size_t)l * n;
    std::vector<const u64*> xs(beta), k0(beta), k1(beta), ja(beta);
    for (int t = 0; t < beta; ++t) xs[t] = d.digits[t].data() + dof;
    if (in_job) {
      // this job's segment of every digit's alpha; ja[t] + ko + i indexes it as the whole part would be
      thread_local ScratchPoly seg;
      const size_t len = i1 - i0;
      seg.resize((size_t)beta * len);
      for (int t = 0; t < beta; ++t) {
        u64* dst = seg.data() + (size_t)t * len;
        uniform_segment_from_seed(key.alpha_seeds[t], key.alpha_offsets[t][(size_t)kl * S + job % S], q.q, dst, len);
        ja[t] = dst - i0 - ko;
      }
    } else {
      for (int t = 0; t < beta; ++t) ja[t] = ka[t];
    }
    auto kp = [&](int p, int t) -> const u64* { return p == 0 ? ja[t] : key.beta[p - 1].data(t); };
    for (int p = 0; p < np; p += 2) {
      const int p1 = p + 1 < np ? p + 1 : p;
      u64* o0 = outs[p].data() + dof;
      u64* o1 = (p1 == p ? spare.data() : outs[p1].data()) + dof;
      for (int t = 0; t < beta; ++t) {
        k0[t] = kp(p, t) + ko;
        k1[t] = kp(p1, t) + ko;
      }
      if (ring::key_inner_product_limb_simd(xs.data(), k0.data(), k1.data(), beta, perm, i0, i1, q.q, o0, o1))
        continue;
      for (size_t i = i0; i < i1; ++i) {
        const size_t src = perm ? perm[i] : i;
        u128 s0 = 0, s1 = 0;
        for (int t = 0; t < beta; ++t) {
          s0 += (u128)xs[t][src] * k0[t][i];
          s1 += (u128)xs[t][src] * k1[t][i];
        }
        o0[i] = q.reduce128(s0);
        o1[i] = q.reduce128(s1);
      }
    }
  }
}

// o[i] = sum_t d[t][i] · x[t][i] mod q on [i0, i1) (terms = 0: zeros).
void mac(const u64* const* d, const u64* const* x, int terms, const Modulus& q, size_t i0, size_t i1, u64* o) {
  constexpr size_t kBlock = 256;
  u128 acc[kBlock];
  for (size_t c = i0; c < i1; c += kBlock) {
    const size_t len = std::min(kBlock, i1 - c);
    std::fill(acc, acc + len, (u128)0);
    for (int t = 0; t < terms; ++t) {
      if (t && t % kFold == 0)
        for (size_t i = 0; i < len; ++i) acc[i] = q.reduce128(acc[i]);
      const u64* __restrict dd = d[t] + c;
      const u64* __restrict xx = x[t] + c;
      for (size_t i = 0; i < len; ++i) acc[i] += (u128)dd[i] * xx[i];
    }
    for (size_t i = 0; i < len; ++i) o[c + i] = q.reduce128(acc[i]);
  }
}

}  // namespace

MsGaloisKeys ms_galois_keys(const Context& ctx, const pcmm::MultiSecretKey& msk,
                            const std::vector<std::pair<uint64_t, int>>& elements, int seed_max_level) {
  if (msk.param_hash != ctx.hash64())
    fail(ErrorKind::ContextMismatch, "batched Galois keys: the multi-secret key belongs to another parameter set");
  const size_t n = ctx.n();
  const int L = ctx.max_level(), K = ctx.num_p(), alpha = ctx.alpha(), k = (int)msk.coeffs.size();
  MsGaloisKeys out;
  out.param_hash = ctx.hash64();
  out.ms_key_id = msk.key_id;
  out.k = k;
  Prng prng(os_seed());
  for (const auto& [g, level] : elements) {
    if (g % 2 == 0 || g >= 2 * n) fail(ErrorKind::Parameter, "batched Galois keys: element must be odd and < 2N");
    if (level < 0 || level > L) fail(ErrorKind::Parameter, "batched Galois keys: level outside the chain");
    if (out.keys.count(g)) fail(ErrorKind::Parameter, "batched Galois keys: an element is listed twice");
    const auto& perm = ctx.galois_permutation(g);
    const int total = level + 1 + K, digits = ctx.params().num_digits(level);
    MsSwitchKey key;
    key.galois = g;
    key.level = level;
    key.beta.resize(k);
    std::vector<Poly>& alpha_t = key.alpha.owned("batched key generation");
    for (int t = 0; t < digits; ++t) {
      key.alpha_seeds.push_back(os_seed());
      alpha_t.emplace_back((size_t)total * n);
      key.alpha_offsets.push_back(seed_segment_offsets(ctx, key.alpha_seeds.back(), total, true, level,
                                                       alpha_t.back().data()));
    }
    for (int j = 0; j < k; ++j) {
      const Poly& s = msk.ntt_qp[j];  // over Q_L ∪ P, indexed by modulus
      for (int t = 0; t < digits; ++t) {
        const int lo = t * alpha, hi = std::min(level + 1, lo + alpha);
        Poly e = small_to_ntt_qp(ctx, sample_gaussian(prng, n), level);
        Poly b((size_t)total * n);
#pragma omp parallel for schedule(static)
        for (int l = 0; l < total; ++l) {
          const int m = ctx.qp_index(level, l);
          const Modulus& q = ctx.modulus(m);
          const size_t o = (size_t)l * n, so = (size_t)m * n;
          const bool in_digit = m >= lo && m < hi;
          const u64 pf = in_digit ? ctx.p_mod_q(m) : 0;
          const u64* a = alpha_t[t].data() + o;
          for (size_t x = 0; x < n; ++x) {
            u64 v = ring::sub_mod(e[o + x], q.mul(a[x], s[so + x]), q.q);
            if (in_digit) v = ring::add_mod(v, q.mul(pf, s[so + perm[x]]), q.q);  // P Qtilde_t psi(s_j)
            b[o + x] = v;
          }
        }
        wipe(e);
        key.beta[j].owned("batched key generation").push_back(std::move(b));
      }
    }
    if (level <= seed_max_level)
      alpha_t.clear();
    else
      key.alpha_offsets.clear();
    out.keys.emplace(g, std::move(key));
  }
  return out;
}

void seed_ms_galois_keys(const Context& ctx, MsGaloisKeys& keys, int seed_max_level) {
  const char* op = "seeding batched Galois keys";
  for (const auto& kv : keys.keys) {  // all or nothing: a key file's set stays as written
    kv.second.alpha.check_owned(op);
    for (const KeyPolys& bj : kv.second.beta) bj.check_owned(op);
  }
  for (auto& kv : keys.keys) {
    MsSwitchKey& key = kv.second;
    std::vector<Poly>& alpha = key.alpha.owned(op);
    if (key.level <= seed_max_level && key.alpha_seeds.size() == alpha.size()) {
      std::vector<Poly>().swap(alpha);
      const int total = key.level + 1 + ctx.num_p();
      key.alpha_offsets.clear();
      for (const Seed& sd : key.alpha_seeds)
        key.alpha_offsets.push_back(seed_segment_offsets(ctx, sd, total, true, key.level));
    }
  }
}

MsGaloisKeys import_ms_galois_keys(const Context& ctx, uint64_t ms_key_id, int k,
                                   const std::vector<MsKeyRecord>& records, int seed_max_level) {
  const size_t n = ctx.n();
  if (k < 1) fail(ErrorKind::Serialization, "batched Galois keys: k must be >= 1; the data is corrupted");
  MsGaloisKeys out;
  out.param_hash = ctx.hash64();
  out.ms_key_id = ms_key_id;
  out.k = k;
  for (const MsKeyRecord& r : records) {
    if (r.galois % 2 == 0 || r.galois >= 2 * n)
      fail(ErrorKind::Serialization, "batched Galois keys: invalid Galois element; the data is corrupted");
    if (r.level < 0 || r.level > ctx.max_level())
      fail(ErrorKind::Serialization, "batched Galois keys: level " + std::to_string(r.level) + " outside this "
                                     "context's modulus chain; the data is corrupted or belongs to other parameters");
    if (out.keys.count(r.galois))
      fail(ErrorKind::Serialization, "batched Galois keys: an element is listed twice; the data is corrupted");
    const int digits = ctx.params().num_digits(r.level), total = r.level + 1 + ctx.num_p();
    if ((int)r.alpha_seeds.size() != digits || (int)r.beta.size() != k)
      fail(ErrorKind::Serialization, "batched Galois keys: a key for level " + std::to_string(r.level) + " has " +
                                     std::to_string(digits) + " digits and k = " + std::to_string(k) +
                                     " b-parts per digit; the data does not match (corrupted)");
    MsSwitchKey key;
    key.galois = r.galois;
    key.level = r.level;
    key.alpha_seeds = r.alpha_seeds;
    key.beta.resize(k);
    for (int j = 0; j < k; ++j) {
      if ((int)r.beta[j].size() != digits)
        fail(ErrorKind::Serialization, "batched Galois keys: wrong digit count; the data is corrupted");
      for (int t = 0; t < digits; ++t)
        key.beta[j].owned("batched key import").push_back(import_poly(ctx, r.beta[j][t], r.level, true,
                                                                      "batched Galois key"));
    }
    if (r.level > seed_max_level)
      for (int t = 0; t < digits; ++t)
        key.alpha.owned("batched key import").push_back(uniform_from_seed(ctx, key.alpha_seeds[t], total, true,
                                                                          r.level));
    else
      for (int t = 0; t < digits; ++t)
        key.alpha_offsets.push_back(seed_segment_offsets(ctx, key.alpha_seeds[t], total, true, r.level));
    out.keys.emplace(r.galois, std::move(key));
  }
  return out;
}

void add_ms_galois_keys(SharedKeyWriter& writer, uint32_t group, const MsGaloisKeys& keys) {
  for (const auto& [g, key] : keys.keys) {
    if ((int)key.beta.size() != keys.k) fail(ErrorKind::Parameter, "batched Galois keys: a key without k b-parts");
    writer.add_multi_key(group, keys.ms_key_id, g, key.level, key.beta, key.alpha, key.alpha_seeds, key.alpha_offsets);
  }
}

MsGaloisKeys ms_galois_keys_from_file(const Context& ctx, const SharedKeyFile& file, uint32_t group) {
  MsGaloisKeys out;
  out.param_hash = ctx.hash64();
  std::vector<SharedKeyRecord> records = file.multi_keys(group);
  out.ms_key_id = records.front().key_id;
  out.k = (int)records.front().b.size();
  for (SharedKeyRecord& r : records) {
    if (r.key_id != out.ms_key_id || (int)r.b.size() != out.k || r.galois == 0 || out.keys.count(r.galois))
      fail(ErrorKind::Serialization, "shared key file: its batched Galois keys mix multi-secret keys, batch sizes or "
                                     "elements; write it again from the uploaded evaluation keys");
    MsSwitchKey key;
    key.galois = r.galois;
    key.level = r.level;
    key.alpha = std::move(r.a);
    key.alpha_seeds = std::move(r.a_seeds);
    key.alpha_offsets = std::move(r.a_offsets);
    key.beta = std::move(r.b);
    out.keys.emplace(key.galois, std::move(key));
  }
  return out;
}

size_t ms_galois_key_bytes(const MsGaloisKeys& keys) {
  size_t s = 0;
  for (const auto& [g, k] : keys.keys) {
    s += k.alpha.total_words();
    for (const auto& bj : k.beta) s += bj.total_words();
  }
  return s * sizeof(u64);
}

void ms_moddown_into(const Context& ctx, int level, const std::vector<Poly>& u, const std::vector<Poly>& b_add,
                     pcmm::MsCiphertext& out) {
  const int k = (int)b_add.size();
  out.b.resize(k);
  std::vector<const Poly*> us;
  std::vector<Poly*> outs;
  std::vector<const u64*> add;
  for (int p = 0; p <= k; ++p) {
    us.push_back(&u[p]);
    outs.push_back(p == 0 ? &out.a : &out.b[p - 1]);
    add.push_back(p == 0 ? nullptr : b_add[p - 1].data());
  }
  moddown_many(ctx, level, us, outs, add);
}

pcmm::MsCiphertext ms_apply_galois(const Context& ctx, const pcmm::MsCiphertext& ct, const MsGaloisKeys& keys,
                                   uint64_t galois) {
  check_ms(ctx, ct, keys, "batched rotation");
  const MsSwitchKey& key = find_key(ctx, keys, galois, ct.level, "batched rotation");
  const size_t n = ctx.n();
  const int l = ct.level, k = (int)ct.b.size();
  const auto& perm = ctx.galois_permutation(galois);
  ModUpDigits d = modup(ctx, ct.a.data(), l);
  std::vector<Poly> u;
  ms_inner_product(ctx, d, key, perm.data(), u);
  pcmm::MsCiphertext out;
  copy_metadata(out, ct);
  out.key_id = ct.key_id;
  out.seeded = false;
  std::vector<Poly> pb(k, Poly((size_t)(l + 1) * n));
  for (int j = 0; j < k; ++j)
    for (int q = 0; q <= l; ++q)
      for (size_t x = 0; x < n; ++x) pb[j][(size_t)q * n + x] = ct.b[j][(size_t)q * n + perm[x]];
  ms_moddown_into(ctx, l, u, pb, out);
  return out;
}

pcmm::MsCiphertext ms_linear_transform(const NativeLinearTransform& T, const pcmm::MsCiphertext& ct,
                                       const MsGaloisKeys& keys, bool rescale, LinTransCounts* counts) {
  LinTransCounts local;
  LinTransCounts& c = counts ? *counts : local;
  c = LinTransCounts{};
  return MsLinearTransformAccess::apply(T, ct, keys, rescale, c);
}

pcmm::MsCiphertext MsLinearTransformAccess::apply(const NativeLinearTransform& T, const pcmm::MsCiphertext& ct,
                                                  const MsGaloisKeys& keys, bool rescale, LinTransCounts& cnt) {
  const Context& ctx = T.ctx_;
  check_ms(ctx, ct, keys, "batched linear transform");
  if (ct.encoding != Encoding::Slot)
    fail(ErrorKind::Encoding, "batched linear transform: the ciphertext must be slot-encoded");
  if (ct.slots != T.slots_)
    fail(ErrorKind::Shape, "batched linear transform: the transform acts on " + std::to_string(T.slots_) +
                               " slots but the ciphertext has " + std::to_string(ct.slots));
  if (ct.level != T.level_)
    fail(ErrorKind::Level, "batched linear transform: the diagonals are encoded at level " + std::to_string(T.level_) +
                               " but the ciphertext is at level " + std::to_string(ct.level));
  if (rescale && T.level_ == 0) fail(ErrorKind::Level, "batched linear transform: no modulus left for the rescale");
  if (!T.qp_)
    fail(ErrorKind::Parameter, "batched linear transform: the diagonals must be encoded over Q_l ∪ P (the qp encoding)");
  const size_t n = ctx.n();
  const int l = T.level_, K = ctx.num_p(), E = l + 1 + K, k = (int)ct.b.size(), np = k + 1;
  const int logn = ctx.log_n();
  std::vector<const MsSwitchKey*> bkeys, gkeys;
  for (int64_t b : T.baby_steps_)
    bkeys.push_back(&find_key(ctx, keys, ring::galois_element_rotation(b, logn), l, "batched linear transform"));
  for (const auto& g : T.groups_)
    gkeys.push_back(g.giant ? &find_key(ctx, keys, ring::galois_element_rotation(g.giant, logn), l,
                                        "batched linear transform")
                            : nullptr);
  auto in = [&](int p) -> const u64* { return p == 0 ? ct.a.data() : ct.b[p - 1].data(); };

  // P·(a; b_j) over Q_l: the unrotated baby step and b_j's share of every rotated one
  std::vector<Poly> Pin(np, Poly((size_t)(l + 1) * n));
#pragma omp parallel for schedule(static)
  for (int q = 0; q <= l; ++q) {
    const u64 qq = ctx.modulus(q).q, pm = ctx.p_mod_q(q), pmp = ring::shoup_precompute(pm, qq);
    const size_t o = (size_t)q * n;
    for (int p = 0; p < np; ++p)
      for (size_t i = 0; i < n; ++i) Pin[p][o + i] = ring::mul_shoup(in(p)[o + i], pm, pmp, qq);
  }
  // baby steps in Q_l ∪ P: one ModUp of the shared a for every step and every chunk
  const size_t nb = T.baby_steps_.size();
  std::vector<std::vector<Poly>> X(nb);
  if (nb) {
    ModUpDigits digits = modup(ctx, ct.a.data(), l);
    ++cnt.modups;
    for (size_t s = 0; s < nb; ++s) {
      const auto& perm = ctx.galois_permutation(ring::galois_element_rotation(T.baby_steps_[s], logn));
      ms_inner_product(ctx, digits, *bkeys[s], perm.data(), X[s]);
      cnt.inner_products += np;
#pragma omp parallel for schedule(static)
      for (int q = 0; q <= l; ++q) {
        const u64 qq = ctx.modulus(q).q;
        const size_t o = (size_t)q * n;
        for (int p = 1; p < np; ++p) {
          u64* x = X[s][p].data() + o;
          const u64* src = Pin[p].data() + o;
          for (size_t i = 0; i < n; ++i) x[i] = ring::add_mod(x[i], src[perm[i]], qq);
        }
      }
    }
  }

  std::vector<Poly> out(np, Poly((size_t)E * n, 0)), acc(np, Poly((size_t)E * n)), ks;
  Poly a1;
  const int S = n % 32 == 0 ? 4 : 1;
  for (size_t gi = 0; gi < T.groups_.size(); ++gi) {
    const auto& g = T.groups_[gi];
    const int terms = (int)g.diag.size();
#pragma omp parallel for schedule(static)
    for (int job = 0; job < E * S; ++job) {
      const int q = job / S;
      const size_t i0 = n / S * (job % S), i1 = i0 + n / S, o = (size_t)q * n;
      const Modulus& mod = ctx.modulus(ctx.qp_index(l, q));
      std::vector<const u64*> d(terms), x(terms);
      for (int p = 0; p < np; ++p) {
        int t2 = 0;
        for (int t = 0; t < terms; ++t) {
          const int b = g.baby[t];
          if (b < 0 && q > l) continue;  // P·in has no P limbs (they are zero)
          d[t2] = T.diag_[g.diag[t]].data() + o;
          x[t2] = (b >= 0 ? X[b][p].data() : Pin[p].data()) + o;
          ++t2;
        }
        mac(d.data(), x.data(), t2, mod, i0, i1, acc[p].data() + o);
      }
    }
    cnt.pmults += terms;
    if (g.giant == 0) {
#pragma omp parallel for schedule(static)
      for (int q = 0; q < E; ++q) {
        const u64 qq = ctx.modulus(ctx.qp_index(l, q)).q;
        const size_t o = (size_t)q * n;
        for (int p = 0; p < np; ++p)
          for (size_t i = 0; i < n; ++i) out[p][o + i] = ring::add_mod(out[p][o + i], acc[p][o + i], qq);
      }
      continue;
    }
    // giant step: a down to Q_l, ModUp again, k + 1 lazy key switches under psi; b_j permuted in Q_l ∪ P
    moddown(ctx, acc[0], l, a1);
    ++cnt.moddowns;
    ModUpDigits dg = modup(ctx, a1.data(), l);
    ++cnt.modups;
    const auto& perm = ctx.galois_permutation(ring::galois_element_rotation(g.giant, logn));
    ms_inner_product(ctx, dg, *gkeys[gi], perm.data(), ks);
    cnt.inner_products += np;
#pragma omp parallel for schedule(static)
    for (int q = 0; q < E; ++q) {
      const u64 qq = ctx.modulus(ctx.qp_index(l, q)).q;
      const size_t o = (size_t)q * n;
      const uint32_t* pm = perm.data();
      for (size_t i = 0; i < n; ++i) out[0][o + i] = ring::add_mod(out[0][o + i], ks[0][o + i], qq);
      for (int p = 1; p < np; ++p) {
        const u64* a = acc[p].data() + o;
        for (size_t i = 0; i < n; ++i)
          out[p][o + i] = ring::add_mod(out[p][o + i], ring::add_mod(a[pm[i]], ks[p][o + i], qq), qq);
      }
    }
  }

  // one ModDown per polynomial, then the rescale
  std::vector<Poly> down(np);
  std::vector<const Poly*> us;
  std::vector<Poly*> outs;
  for (int p = 0; p < np; ++p) {
    us.push_back(&out[p]);
    outs.push_back(&down[p]);
  }
  moddown_many(ctx, l, us, outs, std::vector<const u64*>(np, nullptr));
  cnt.moddowns += np;
  pcmm::MsCiphertext r;
  copy_metadata(r, ct);
  r.key_id = ct.key_id;
  r.seeded = false;
  r.scale = ct.scale * T.scale_;
  r.b.resize(k);
  if (rescale) {
    const Evaluator ev(ctx);
#pragma omp parallel for schedule(static)
    for (int p = 0; p < np; ++p) {
      Poly& dst = p == 0 ? r.a : r.b[p - 1];
      dst.resize((size_t)l * n);
      ev.rescale_poly(down[p].data(), n, l, dst.data(), n);
    }
    ++cnt.rescales;
    r.level = l - 1;
    r.scale = r.scale / (double)ctx.modulus(l).q;
  } else {
    r.a = std::move(down[0]);
    for (int j = 0; j < k; ++j) r.b[j] = std::move(down[1 + j]);
  }
  return r;
}

}  // namespace hemlp
