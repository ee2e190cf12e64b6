#include "ckks/keyswitch.h"

#include <algorithm>
#include <string>
#include <vector>

#include "ckks/errors.h"
#include "ckks/keygen.h"
#include "ring/keyip.h"
#include "ring/vecops.h"

namespace hemlp {

ModUpDigits modup(const Context& ctx, const u64* d_ntt, int level) {
  const size_t n = ctx.n();
  const int K = ctx.num_p(), E = level + 1 + K, alpha = ctx.alpha(), L = ctx.max_level();
  const int beta = (level + alpha) / alpha;
  ScratchBuf coeff(ctx.scratch(), (size_t)(level + 1) * n);
  std::copy(d_ntt, d_ntt + (size_t)(level + 1) * n, coeff.data());
  ctx.intt_limbs(coeff.data(), level, level + 1, false);
  ModUpDigits out;
  out.level = level;
  out.digits.reserve(beta);
  std::vector<std::pair<int, u64*>> jobs;  // (modulus index, limb) to bring to NTT form
  for (int t = 0; t < beta; ++t) {
    const int lo = t * alpha, cnt = std::min(alpha, level + 1 - lo);
    out.digits.emplace_back(ctx.scratch(), (size_t)E * n);  // every limb is written: copied (own limbs) or converted
    ScratchBuf& D = out.digits[t];
    std::vector<const u64*> in(cnt);
    for (int i = 0; i < cnt; ++i) {
      in[i] = coeff.data() + (size_t)(lo + i) * n;
      std::copy(d_ntt + (size_t)(lo + i) * n, d_ntt + (size_t)(lo + i + 1) * n, D.data() + (size_t)(lo + i) * n);
    }
    std::vector<int> targets, limbs;
    for (int k = 0; k < E; ++k) {
      if (k >= lo && k < lo + cnt) continue;
      limbs.push_back(k);
      targets.push_back(ctx.qp_index(level, k));
    }
    std::vector<u64*> outp(limbs.size());
    for (size_t i = 0; i < limbs.size(); ++i) outp[i] = D.data() + (size_t)limbs[i] * n;
    ctx.modup_converter(lo, cnt).convert(in.data(), outp.data(), n, &targets);
    for (size_t i = 0; i < limbs.size(); ++i) jobs.emplace_back(targets[i], outp[i]);
  }
  // the NTTs of every digit in one parallel loop (7 limbs per digit split badly over 2 threads); the
  // costlier integer-kernel primes first and jobs handed out dynamically (AVX2: 60/61-bit NTTs ~2.4x the rest)
  std::stable_partition(jobs.begin(), jobs.end(),
                        [&](const std::pair<int, u64*>& j) { return !ctx.ntt(j.first).double_precision(); });
#pragma omp parallel for schedule(dynamic, 1)
  for (int i = 0; i < (int)jobs.size(); ++i) ctx.ntt(jobs[i].first).forward(jobs[i].second);
  (void)L;
  return out;
}

void check_key_level(const SwitchKey& key, int level, const char* op) {
  if (level <= key.level) return;
  const std::string what = key.galois == 0 ? "relinearisation key" : "rotation key (Galois element " +
                                                                         std::to_string(key.galois) + ")";
  // names the operation, not one language's call syntax (the C++ and Python APIs both take a key level)
  const std::string fix = key.galois == 0 ? "relinearisation" : "rotation";
  fail(ErrorKind::Level, std::string(op) + ": the ciphertext is at level " + std::to_string(level) + " but the " +
                             what + " was generated for levels <= " + std::to_string(key.level) +
                             "; generate the keys with level >= " + std::to_string(level) + " (the level of " + fix +
                             "-key generation), or drop the ciphertext to level " + std::to_string(key.level) +
                             " first");
}

std::vector<const u64*> expand_seeded_parts(const Context& ctx, const std::vector<Seed>& seeds, int beta,
                                            int key_limbs, int key_level) {
  const size_t n = ctx.n();
  thread_local std::vector<ScratchPoly> expanded;
  if ((int)expanded.size() < beta) expanded.resize(beta);
  ScratchPoly* buf = expanded.data();  // worker threads must see this thread's buffers, not their own
  for (int t = 0; t < beta; ++t) buf[t].resize((size_t)key_limbs * n);
#pragma omp parallel for schedule(static)
  for (int t = 0; t < beta; ++t) uniform_from_seed_into(ctx, seeds[t], key_limbs, true, key_level, buf[t].data());
  std::vector<const u64*> parts(beta);
  for (int t = 0; t < beta; ++t) parts[t] = buf[t].data();
  return parts;
}

namespace {
// key_inner_product into u0, u1 of (d.level + 1 + K) limbs each, every entry written.
void key_inner_product_into(const Context& ctx, const ModUpDigits& d, const SwitchKey& key,
                            const std::vector<uint32_t>* perm, u64* u0, u64* u1) {
  const size_t n = ctx.n();
  const int level = d.level, K = ctx.num_p(), E = level + 1 + K;
  const int beta = (int)d.digits.size();
  check_key_level(key, level, "key switch");
  const size_t key_limbs = (size_t)key.level + 1 + K;
  const bool seeded = key.a.empty();
  if ((int)key.b.size() < beta || (int)(seeded ? key.a_seeds.size() : key.a.size()) < beta)
    fail(ErrorKind::Parameter, "key switch: the key has fewer digits than its level needs; it is corrupted");
  for (int t = 0; t < beta; ++t)
    if (key.b.words(t) != key_limbs * n || (!seeded && key.a.words(t) != key_limbs * n))
      fail(ErrorKind::Parameter, "key switch: the key's size does not match its level; it is corrupted");
  // a-halves: the key's own, or a seeded key's expanded from its seeds
  // jobs = (limb, quarter of the coefficients): E limbs alone split unevenly over 2 threads
  const int S = n % 32 == 0 ? kSeedSegments : 1;
  // a seeded key's a-halves are drawn inside each job (in cache, every thread busy) when their segment offsets are
  // known, else expanded whole first
  const bool in_job = seeded && S == kSeedSegments && (int)key.a_offsets.size() >= beta;
  std::vector<const u64*> ka(beta);
  if (seeded && !in_job) {
    ka = expand_seeded_parts(ctx, key.a_seeds, beta, (int)key_limbs, key.level);
  } else if (!seeded) {
    for (int t = 0; t < beta; ++t) ka[t] = key.a.data(t);
  }
  const uint32_t* pm = perm ? perm->data() : nullptr;
#pragma omp parallel for schedule(dynamic, 1) firstprivate(ka)  // limbs differ in cost (AVX2: double precision below 2^46)
  for (int job = 0; job < E * S; ++job) {
    const int k = job / S;
    const size_t i0 = n / S * (job % S), i1 = i0 + n / S;
    const int m = ctx.qp_index(level, k);
    const Modulus& q = ctx.modulus(m);
    // The key holds Q_{key.level} ∪ P: its q-limbs line up with ours, its P limbs start at key.level + 1.
    const size_t kk = k <= level ? (size_t)k : (size_t)(k - level + key.level);
    const size_t ko = kk * n, dof = (size_t)k * n;
    if (in_job) {  // this job's segment of every a_t; ka[t] + ko + i indexes it as the whole a_t would be
      thread_local ScratchPoly seg;
      const size_t len = i1 - i0;
      seg.resize((size_t)beta * len);
      for (int t = 0; t < beta; ++t) {
        u64* dst = seg.data() + (size_t)t * len;
        uniform_segment_from_seed(key.a_seeds[t], key.a_offsets[t][kk * S + job % S], q.q, dst, len);
        ka[t] = dst - i0 - ko;
      }
    }
    u64* __restrict o0 = u0 + dof;
    u64* __restrict o1 = u1 + dof;
    {  // AVX-512 / AVX2 kernel when the active SIMD path has one (ring/keyip.h)
      std::vector<const u64*> xs(beta), kbs(beta), kas(beta);
      for (int t = 0; t < beta; ++t) {
        xs[t] = d.digits[t].data() + dof;
        kbs[t] = key.b.data(t) + ko;
        kas[t] = ka[t] + ko;
      }
      if (ring::key_inner_product_limb_simd(xs.data(), kbs.data(), kas.data(), beta, pm, i0, i1, q.q, o0, o1))
        continue;
    }
    // beta < 64 products of < 2^122 each: the 128-bit sums cannot overflow. The first digit
    // initialises the accumulators, later digits add; one Barrett reduction per output.
    constexpr size_t kBlock = 512;
    u128 acc0[kBlock], acc1[kBlock];
    for (size_t c0 = i0; c0 < i1; c0 += kBlock) {
      const size_t len = std::min(kBlock, i1 - c0);
      for (int t = 0; t < beta; ++t) {
        const u64* __restrict x = d.digits[t].data() + dof;
        const u64* __restrict kb = key.b.data(t) + ko + c0;
        const u64* __restrict kat = ka[t] + ko + c0;
        if (pm) {
          const uint32_t* __restrict pp = pm + c0;
          if (t == 0)
            for (size_t i = 0; i < len; ++i) {
              const u64 xv = x[pp[i]];
              acc0[i] = (u128)xv * kb[i];
              acc1[i] = (u128)xv * kat[i];
            }
          else
            for (size_t i = 0; i < len; ++i) {
              const u64 xv = x[pp[i]];
              acc0[i] += (u128)xv * kb[i];
              acc1[i] += (u128)xv * kat[i];
            }
        } else {
          const u64* __restrict xs = x + c0;
          if (t == 0)
            for (size_t i = 0; i < len; ++i) {
              acc0[i] = (u128)xs[i] * kb[i];
              acc1[i] = (u128)xs[i] * kat[i];
            }
          else
            for (size_t i = 0; i < len; ++i) {
              acc0[i] += (u128)xs[i] * kb[i];
              acc1[i] += (u128)xs[i] * kat[i];
            }
        }
      }
      for (size_t i = 0; i < len; ++i) {
        o0[c0 + i] = q.reduce128(acc0[i]);
        o1[c0 + i] = q.reduce128(acc1[i]);
      }
    }
  }
}

}  // namespace

void key_inner_product(const Context& ctx, const ModUpDigits& d, const SwitchKey& key,
                       const std::vector<uint32_t>* perm, Poly& u0, Poly& u1) {
  const size_t len = (size_t)(d.level + 1 + ctx.num_p()) * ctx.n();
  u0.resize(len);
  u1.resize(len);
  key_inner_product_into(ctx, d, key, perm, u0.data(), u1.data());
}

void key_inner_product(const Context& ctx, const ModUpDigits& d, const SwitchKey& key,
                       const std::vector<uint32_t>* perm, ScratchBuf& u0, ScratchBuf& u1) {
  const size_t len = (size_t)(d.level + 1 + ctx.num_p()) * ctx.n();
  if (u0.size() != len) u0 = ScratchBuf(ctx.scratch(), len);
  if (u1.size() != len) u1 = ScratchBuf(ctx.scratch(), len);
  key_inner_product_into(ctx, d, key, perm, u0.data(), u1.data());
}

void moddown_many(const Context& ctx, int level, const std::vector<const Poly*>& us, const std::vector<Poly*>& outs,
                  const std::vector<const u64*>& add_to) {
  std::vector<const u64*> raw(us.size());
  for (size_t m = 0; m < us.size(); ++m) raw[m] = us[m]->data();
  moddown_many_raw(ctx, level, raw, outs, add_to);
}

void moddown_many_raw(const Context& ctx, int level, const std::vector<const u64*>& us, const std::vector<Poly*>& outs,
                      const std::vector<const u64*>& add_to) {
  const size_t n = ctx.n();
  const int K = ctx.num_p(), cnt = (int)us.size();
  // the P limbs of every input to coefficient form, in one parallel loop
  ScratchBuf pc(ctx.scratch(), (size_t)cnt * K * n);
  for (int m = 0; m < cnt; ++m)
    std::copy(us[m] + (size_t)(level + 1) * n, us[m] + (size_t)(level + 1 + K) * n, pc.data() + (size_t)m * K * n);
#pragma omp parallel for schedule(static)
  for (int j = 0; j < cnt * K; ++j) ctx.ntt(ctx.p_index(j % K)).inverse(pc.data() + (size_t)j * n);
  ScratchBuf conv(ctx.scratch(), (size_t)cnt * (level + 1) * n);
  std::vector<int> targets(level + 1);
  for (int i = 0; i <= level; ++i) targets[i] = i;
  for (int m = 0; m < cnt; ++m) {
    std::vector<const u64*> in(K);
    for (int j = 0; j < K; ++j) in[j] = pc.data() + (size_t)(m * K + j) * n;
    std::vector<u64*> outp(level + 1);
    for (int i = 0; i <= level; ++i) outp[i] = conv.data() + (size_t)(m * (level + 1) + i) * n;
    ctx.moddown_converter().convert(in.data(), outp.data(), n, &targets);
    outs[m]->resize((size_t)(level + 1) * n);
  }
#pragma omp parallel for schedule(dynamic, 1)  // q_0's limb costs more (AVX2: integer NTT)
  for (int job = 0; job < cnt * (level + 1); ++job) {
    const int m = job / (level + 1), i = job % (level + 1);
    const Modulus& q = ctx.modulus(i);
    u64* c = conv.data() + (size_t)job * n;
    ctx.ntt(i).forward(c);
    const u64 pinv = ctx.p_inv_mod_q(i), pinvp = ring::shoup_precompute(pinv, q.q);
    ring::sub_mul_shoup_vec(us[m] + (size_t)i * n, c, pinv, pinvp, q.q,
                            add_to[m] ? add_to[m] + (size_t)i * n : nullptr, outs[m]->data() + (size_t)i * n, n);
  }
}

// r_j = round(u_j / (P q_l)) over Q_{l-1}: the ModDown of a Q_l ∪ P accumulator fused with the rescale.
// y = (u - [u]_P) / P is formed on the q_l limb only, in coefficient form (the fast base conversion's
// error, a small multiple of P, is divided by q_l afterwards), then its centred residue is folded into
// the converted P part of every other limb: r_i = (u_i - NTT(conv_i + P·[y]_{q_l}))·(P q_l)^-1. Rounding
// is exact for the q_l step, as in a separate rescale, and it saves l + 1 NTTs per polynomial against
// ModDown then rescale. (A single base conversion from {q_l} ∪ P would be as cheap but adds an
// integer error of up to (|P| + 1)/2 at the output scale: measured 0.8 bit worse.)
void moddown_rescale(const Context& ctx, int l, const Poly* u[2], Poly* out[2]) {
  const u64* const raw[2] = {u[0]->data(), u[1]->data()};
  moddown_rescale(ctx, l, raw, out);
}

void moddown_rescale(const Context& ctx, int l, const u64* const u[2], Poly* out[2]) {
  const size_t n = ctx.n();
  const int K = ctx.num_p();
  // limbs P then q_l of both polynomials, to coefficient form
  ScratchBuf low(ctx.scratch(), (size_t)2 * (K + 1) * n);
  for (int j = 0; j < 2; ++j) {
    std::copy(u[j] + (size_t)(l + 1) * n, u[j] + (size_t)(l + 1 + K) * n, low.data() + (size_t)j * (K + 1) * n);
    std::copy(u[j] + (size_t)l * n, u[j] + (size_t)(l + 1) * n, low.data() + (size_t)(j * (K + 1) + K) * n);
  }
#pragma omp parallel for schedule(dynamic, 1)
  for (int job = 0; job < 2 * (K + 1); ++job) {
    const int m = job % (K + 1);
    ctx.ntt(m < K ? ctx.p_index(m) : l).inverse(low.data() + (size_t)job * n);
  }
  // conv_i = FBC_P(u) for i <= l, coefficient form; r_j limbs 0..l-1 hold conv_i, w_l the q_l one
  ScratchBuf wl(ctx.scratch(), (size_t)2 * n);
  std::vector<int> targets(l + 1);
  for (int i = 0; i <= l; ++i) targets[i] = i;
  for (int j = 0; j < 2; ++j) {
    out[j]->resize((size_t)l * n);
    std::vector<const u64*> in(K);
    for (int m = 0; m < K; ++m) in[m] = low.data() + (size_t)(j * (K + 1) + m) * n;
    std::vector<u64*> outp(l + 1);
    for (int i = 0; i < l; ++i) outp[i] = out[j]->data() + (size_t)i * n;
    outp[l] = wl.data() + (size_t)j * n;
    ctx.moddown_converter().convert(in.data(), outp.data(), n, &targets);
  }
  // y = (u_l - conv_l) · P^-1 mod q_l (coefficient form), in place of conv_l
  const Modulus& ql = ctx.modulus(l);
  const u64 pinv_l = ctx.p_inv_mod_q(l), pinv_lp = ring::shoup_precompute(pinv_l, ql.q);
  for (int j = 0; j < 2; ++j)
    ring::sub_mul_shoup_vec(low.data() + (size_t)(j * (K + 1) + K) * n, wl.data() + (size_t)j * n, pinv_l, pinv_lp,
                            ql.q, nullptr, wl.data() + (size_t)j * n, n);
  std::vector<u64> inv(l), invp(l);  // (P q_l)^-1 mod q_i
  for (int i = 0; i < l; ++i) {
    const Modulus& q = ctx.modulus(i);
    inv[i] = ring::inv_mod(q.mul(ctx.p_mod_q(i), ql.q % q.q), q.q);
    invp[i] = ring::shoup_precompute(inv[i], q.q);
  }
#pragma omp parallel for schedule(dynamic, 1)  // q_0's limb costs more (AVX2: integer NTT)
  for (int job = 0; job < 2 * l; ++job) {
    const int j = job / l, i = job % l;
    const u64 qi = ctx.modulus(i).q, pm = ctx.p_mod_q(i), pmp = ring::shoup_precompute(pm, qi);
    u64* r = out[j]->data() + (size_t)i * n;
    // r += P * (centred residue of y mod q_i), with the vector kernels of the active SIMD path
    thread_local std::vector<u64> lift;
    lift.resize(n);
    ring::centred_lift_vec(wl.data() + (size_t)j * n, ql.q, qi, lift.data(), n);
    ring::add_mul_shoup_vec(r, lift.data(), pm, pmp, qi, r, n);
    ctx.ntt(i).forward(r);
    ring::sub_mul_shoup_vec(u[j] + (size_t)i * n, r, inv[i], invp[i], qi, nullptr, r, n);
  }
}

void moddown(const Context& ctx, const Poly& u, int level, Poly& out, const u64* add_to) {
  moddown_many(ctx, level, {&u}, {&out}, {add_to});
}

void key_switch(const Context& ctx, const u64* d_ntt, int level, const SwitchKey& key, Poly& k0, Poly& k1) {
  ModUpDigits d = modup(ctx, d_ntt, level);
  ScratchBuf u0, u1;
  key_inner_product(ctx, d, key, nullptr, u0, u1);
  moddown_many_raw(ctx, level, {u0.data(), u1.data()}, {&k0, &k1}, {nullptr, nullptr});
}

}  // namespace hemlp
