#include "boot/lintrans.h"

#include "boot/bsgs_groups.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "ckks/errors.h"
#include "ckks/evaluator.h"
#include "ckks/keyswitch.h"
#include "ring/galois.h"
#include "ring/simd.h"
#include "ring/vecops.h"

namespace hemlp {

namespace {

// Products of residues below 2^61 are < 2^122: 32 of them sum below 2^127, so the 128-bit
// accumulators are folded (reduced) every kFold terms.
constexpr int kFold = 32;

// o0 = sum_t d[t]·x[t], o1 = sum_t d[t]·y[t] (mod q) on [i0, i1): one reduction per output (per kFold terms).
void mac2_scalar(const u64* const* d, const u64* const* x, const u64* const* y, int terms, const Modulus& q,
                 size_t i0, size_t i1, u64* o0, u64* o1) {
  constexpr size_t kBlock = 256;
  u128 a0[kBlock], a1[kBlock];
  for (size_t c0 = i0; c0 < i1; c0 += kBlock) {
    const size_t len = std::min(kBlock, i1 - c0);
    for (int t = 0; t < terms; ++t) {
      const u64* __restrict dd = d[t] + c0;
      const u64* __restrict xx = x[t] + c0;
      const u64* __restrict yy = y[t] + c0;
      if (t == 0) {
        for (size_t i = 0; i < len; ++i) {
          a0[i] = (u128)dd[i] * xx[i];
          a1[i] = (u128)dd[i] * yy[i];
        }
        continue;
      }
      if (t % kFold == 0)
        for (size_t i = 0; i < len; ++i) {
          a0[i] = q.reduce128(a0[i]);
          a1[i] = q.reduce128(a1[i]);
        }
      for (size_t i = 0; i < len; ++i) {
        a0[i] += (u128)dd[i] * xx[i];
        a1[i] += (u128)dd[i] * yy[i];
      }
    }
    for (size_t i = 0; i < len; ++i) {
      o0[c0 + i] = q.reduce128(a0[i]);
      o1[c0 + i] = q.reduce128(a1[i]);
    }
  }
}

#if HEMLP_HAVE_AVX512_KERNELS
// hi·2^64 + lo mod q as hi·[2^64]_q + lo with two Shoup products, in [0, q).
HEMLP_AVX512_FN inline __m512i reduce_wide(__m512i hi, __m512i lo, __m512i C, __m512i Cp, __m512i one, __m512i onep,
                                           __m512i q, __m512i two_q) {
  using namespace ring::avx512;
  const __m512i r = _mm512_add_epi64(mul_shoup_lazy(hi, C, Cp, q), mul_shoup_lazy(lo, one, onep, q));
  return reduce_once(reduce_once(r, two_q), q);
}

// The same sums with 8 lanes: 128-bit sums kept as (hi, lo) words, reduced as hi·[2^64]_q + lo with
// two Shoup products (the result equals the scalar Barrett one).
HEMLP_AVX512_FN void mac2_avx512(const u64* const* d, const u64* const* x, const u64* const* y, int terms, u64 qv,
                                 size_t i0, size_t i1, u64* o0, u64* o1) {
  using namespace ring::avx512;
  const u64 cv = (u64)(((u128)1 << 64) % qv);
  const __m512i q = _mm512_set1_epi64((long long)qv), two_q = _mm512_set1_epi64((long long)(2 * qv));
  const __m512i C = _mm512_set1_epi64((long long)cv), Cp = _mm512_set1_epi64((long long)ring::shoup_precompute(cv, qv));
  const __m512i one = _mm512_set1_epi64(1), onep = _mm512_set1_epi64((long long)ring::shoup_precompute(1, qv));
  const __m512i zero = _mm512_setzero_si512();
  for (size_t i = i0; i < i1; i += 8) {
    __m512i lo0 = zero, hi0 = zero, lo1 = zero, hi1 = zero;
    for (int t = 0; t < terms; ++t) {
      if (t && t % kFold == 0) {
        lo0 = reduce_wide(hi0, lo0, C, Cp, one, onep, q, two_q);
        lo1 = reduce_wide(hi1, lo1, C, Cp, one, onep, q, two_q);
        hi0 = hi1 = zero;
      }
      const __m512i D = _mm512_loadu_si512(d[t] + i), Dh = _mm512_srli_epi64(D, 32);
      __m512i pl, ph;
      mul_wide(D, Dh, _mm512_loadu_si512(x[t] + i), pl, ph);
      lo0 = _mm512_add_epi64(lo0, pl);
      hi0 = _mm512_add_epi64(_mm512_mask_add_epi64(hi0, _mm512_cmplt_epu64_mask(lo0, pl), hi0, one), ph);
      mul_wide(D, Dh, _mm512_loadu_si512(y[t] + i), pl, ph);
      lo1 = _mm512_add_epi64(lo1, pl);
      hi1 = _mm512_add_epi64(_mm512_mask_add_epi64(hi1, _mm512_cmplt_epu64_mask(lo1, pl), hi1, one), ph);
    }
    _mm512_storeu_si512(o0 + i, reduce_wide(hi0, lo0, C, Cp, one, onep, q, two_q));
    _mm512_storeu_si512(o1 + i, reduce_wide(hi1, lo1, C, Cp, one, onep, q, two_q));
  }
}
#endif

void mac2(const u64* const* d, const u64* const* x, const u64* const* y, int terms, const Modulus& q, size_t i0,
          size_t i1, u64* o0, u64* o1) {
  if (terms == 0) {
    std::fill(o0 + i0, o0 + i1, 0);
    std::fill(o1 + i0, o1 + i1, 0);
    return;
  }
#if HEMLP_HAVE_AVX512_KERNELS
  if (ring::simd_avx512() && (i1 - i0) % 8 == 0) return mac2_avx512(d, x, y, terms, q.q, i0, i1, o0, o1);
#endif
  mac2_scalar(d, x, y, terms, q, i0, i1, o0, o1);
}

// x[i] = x[i] + src[perm[i]] (mod q): adds ψ(P·c0) to a lazily switched baby step.
void add_perm(u64* __restrict x, const u64* __restrict src, const uint32_t* __restrict perm, u64 q, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = ring::add_mod(x[i], src[perm[i]], q);
}

// (limb, quarter) jobs: a few limbs alone split unevenly over 2 threads.
inline int quarters(size_t n) { return n % 32 == 0 ? 4 : 1; }

}  // namespace

NativeLinearTransform::NativeLinearTransform(const Context& ctx, const Encoder& enc, int slots, int level,
                                             double scale, std::vector<int64_t> giant,
                                             std::vector<std::vector<int64_t>> baby,
                                             const std::vector<std::vector<cplx>>& diags, bool qp)
    : ctx_(ctx), slots_(slots), level_(level), scale_(scale), qp_(qp) {
  const size_t n = ctx.n();
  check_structure(ctx, slots, level, scale, giant, baby, diags.size());
  for (const auto& v : diags)
    if (v.size() != (size_t)slots)
      fail(ErrorKind::Shape, "linear transform: every diagonal needs exactly " + std::to_string(slots) + " values");
  build_bsgs_groups(giant, baby, baby_steps_, groups_);
  // encode every diagonal over Q_l (∪ P) (as Encoder::encode, but with the P limbs)
  const int E = level + 1 + (qp ? ctx.num_p() : 0);
  double log_q = 0;
  for (int i = 0; i <= level; ++i) log_q += std::log2((double)ctx.modulus(i).q);
  const size_t gap = (n / 2) / (size_t)slots;
  diag_.resize(diags.size());
  std::vector<double> log_max(diags.size(), 0.0);
  for (const auto& v : diags)
    for (const auto& z : v)
      if (!std::isfinite(z.real()) || !std::isfinite(z.imag()))
        fail(ErrorKind::Encoding, "linear transform: a diagonal holds NaN or infinity");
      else if (z.imag() != 0)
        is_complex_ = true;
#pragma omp parallel for schedule(dynamic)
  for (int t = 0; t < (int)diags.size(); ++t) {
    std::vector<cplx> w(diags[t]);
    enc.special_ifft(w);
    std::vector<long double> m(n, 0.0L);
    long double mx = 0;
    for (int i = 0; i < slots; ++i) {
      m[i * gap] = roundl((long double)w[i].real() * (long double)scale);
      m[n / 2 + i * gap] = roundl((long double)w[i].imag() * (long double)scale);
      mx = std::max({mx, fabsl(m[i * gap]), fabsl(m[n / 2 + i * gap])});
    }
    log_max[t] = mx > 0 ? std::log2((double)mx) : -1.0;
    if (log_max[t] >= log_q - 1) continue;  // reported after the loop
    Poly& p = diag_[t];
    p.resize((size_t)E * n);
    const bool small = mx < 9.0e18L;
    for (int k = 0; k < E; ++k) {
      const int mi = ctx.qp_index(level, k);
      const u64 q = ctx.modulus(mi).q;
      u64* dst = p.data() + (size_t)k * n;
      for (size_t c = 0; c < n; ++c) {
        if (small) {
          const int64_t r = (int64_t)m[c] % (int64_t)q;
          dst[c] = r < 0 ? (u64)(r + (int64_t)q) : (u64)r;
        } else {
          long double r = fmodl(m[c], (long double)q);
          if (r < 0) r += (long double)q;
          dst[c] = (u64)r;
        }
      }
      ctx.ntt(mi).forward(dst);
    }
  }
  for (size_t t = 0; t < diags.size(); ++t)
    if (log_max[t] >= log_q - 1)
      fail(ErrorKind::Encoding, "linear transform: diagonal " + std::to_string(t) + " is too large for scale 2^" +
                                    std::to_string(std::log2(scale)) + " at level " + std::to_string(level) +
                                    " (largest coefficient 2^" + std::to_string(log_max[t]) +
                                    "); scale the matrix down");
}

void NativeLinearTransform::check_structure(const Context& ctx, int slots, int level, double scale,
                                            const std::vector<int64_t>& giant,
                                            const std::vector<std::vector<int64_t>>& baby, size_t diagonals) {
  const size_t n = ctx.n();
  if (slots <= 0 || (slots & (slots - 1)) || (size_t)slots > n / 2)
    fail(ErrorKind::Shape, "linear transform: slots must be a power of two <= N/2 = " + std::to_string(n / 2));
  if (level < 0 || level > ctx.max_level())
    fail(ErrorKind::Level, "linear transform: level " + std::to_string(level) + " outside [0, " +
                               std::to_string(ctx.max_level()) + "]");
  if (!(scale > 0) || !std::isfinite(scale)) fail(ErrorKind::Encoding, "linear transform: invalid diagonal scale");
  if (giant.size() != baby.size() || giant.empty())
    fail(ErrorKind::Parameter, "linear transform: one list of baby steps per giant step, at least one group");
  size_t count = 0;
  for (const auto& bs : baby) count += bs.size();
  if (count != diagonals)
    fail(ErrorKind::Shape, "linear transform: " + std::to_string(diagonals) + " diagonals for " +
                               std::to_string(count) + " (giant, baby) pairs");
}

NativeLinearTransform::NativeLinearTransform(const Context& ctx, int slots, int level, double scale,
                                             std::vector<int64_t> giant, std::vector<std::vector<int64_t>> baby,
                                             std::vector<Poly> encoded, bool qp, bool is_complex)
    : ctx_(ctx), slots_(slots), level_(level), scale_(scale), qp_(qp), is_complex_(is_complex) {
  const size_t n = ctx.n();
  check_structure(ctx, slots, level, scale, giant, baby, encoded.size());
  const int E = level + 1 + (qp ? ctx.num_p() : 0);
  for (const auto& p : encoded) {
    if (p.size() != (size_t)E * n) fail(ErrorKind::Shape, "linear transform: an encoded diagonal has the wrong size");
    for (int k = 0; k < E; ++k) {
      const u64 q = ctx.modulus(ctx.qp_index(level, k)).q;
      for (size_t i = 0; i < n; ++i)
        if (p[(size_t)k * n + i] >= q) fail(ErrorKind::Parameter, "linear transform: a residue >= its modulus");
    }
  }
  build_bsgs_groups(giant, baby, baby_steps_, groups_);
  diag_ = std::move(encoded);
}

NativeLinearTransform::Layout NativeLinearTransform::layout() const {
  Layout out;
  for (const auto& g : groups_) {
    out.giant.push_back(g.giant);
    std::vector<int64_t> bs;
    for (int j : g.baby) bs.push_back(j < 0 ? 0 : baby_steps_[j]);
    out.baby.push_back(std::move(bs));
  }
  out.diagonals = &diag_;
  out.is_complex = is_complex_;
  return out;
}

size_t NativeLinearTransform::nbytes() const {
  size_t s = 0;
  for (const auto& p : diag_) s += p.size() * sizeof(u64);
  return s;
}

std::vector<int64_t> NativeLinearTransform::steps() const {
  std::vector<int64_t> s(baby_steps_);
  for (const auto& g : groups_)
    if (g.giant != 0) s.push_back(g.giant);
  std::sort(s.begin(), s.end());
  s.erase(std::unique(s.begin(), s.end()), s.end());
  return s;
}

const SwitchKey& NativeLinearTransform::key_for(const GaloisKeys& keys, int64_t step, const Ciphertext& ct) const {
  if (keys.param_hash != ctx_.hash64())
    fail(ErrorKind::ContextMismatch, "linear transform: the Galois keys belong to another parameter set");
  if (ct.key_id && keys.key_id != ct.key_id)
    fail(ErrorKind::KeyMismatch,
         "linear transform: the Galois keys were generated from another secret key than this ciphertext's");
  const uint64_t g = ring::galois_element_rotation(step, ctx_.log_n());
  auto it = keys.keys.find(g);
  if (it == keys.keys.end())
    fail(ErrorKind::MissingKey, "linear transform: no key for rotation step " + std::to_string(step) +
                                    " (Galois element " + std::to_string(g) +
                                    "); generate rotation keys (rotation_keys) for every step of the transform");
  check_key_level(it->second, ct.level, "linear transform");
  return it->second;
}

Ciphertext NativeLinearTransform::apply(const Ciphertext& ct, const GaloisKeys& keys, Hoisting h, bool rescale,
                                        LinTransCounts* counts) const {
  if (ct.param_hash != ctx_.hash64())
    fail(ErrorKind::ContextMismatch, "linear transform: the ciphertext belongs to another parameter set");
  Evaluator::check_size2(ct, "linear transform");
  if (ct.encoding != Encoding::Slot)
    fail(ErrorKind::Encoding, "linear transform: the ciphertext must be slot-encoded");
  if (ct.slots != slots_)
    fail(ErrorKind::Shape, "linear transform: the transform acts on " + std::to_string(slots_) +
                               " slots but the ciphertext has " + std::to_string(ct.slots));
  if (ct.level != level_)
    fail(ErrorKind::Level, "linear transform: the diagonals are encoded at level " + std::to_string(level_) +
                               " but the ciphertext is at level " + std::to_string(ct.level));
  if (rescale && level_ == 0)
    fail(ErrorKind::Level, "linear transform: the ciphertext is at level 0, no modulus left for the rescale; "
                           "bootstrap or start higher");
  if (h == Hoisting::Double && !qp_)
    fail(ErrorKind::Parameter, "linear transform: double hoisting needs the diagonals encoded over Q_l ∪ P; "
                               "these are encoded over Q_l only (single hoisting)");
  LinTransCounts local;
  LinTransCounts& c = counts ? *counts : local;
  c = LinTransCounts{};
  return h == Hoisting::Double ? apply_double(ct, keys, rescale, c) : apply_single(ct, keys, rescale, c);
}

namespace {

// Output metadata: the input's, with the product's scale (the rescale divides by q_level afterwards).
Ciphertext like(const Ciphertext& ct, double pt_scale, bool pt_complex) {
  Ciphertext r;
  copy_metadata(r, ct);
  r.key_id = ct.key_id;
  r.scale = ct.scale * pt_scale;
  r.is_complex = ct.is_complex || pt_complex;
  r.seeded = false;
  r.polys.resize(2);
  return r;
}

// Pointer tables of one giant group's products, per limb: limb k sums terms[k] products.
struct MacTable {
  int limbs = 0, width = 0;
  std::vector<const u64*> d, x, y;
  std::vector<int> terms;
  void reset(int limbs_, int width_) {
    limbs = limbs_;
    width = width_;
    d.assign((size_t)limbs * width, nullptr);
    x.assign(d.size(), nullptr);
    y.assign(d.size(), nullptr);
    terms.assign(limbs, 0);
  }
  void add(int k, const u64* dd, const u64* xx, const u64* yy) {
    const size_t at = (size_t)k * width + terms[k]++;
    d[at] = dd;
    x[at] = xx;
    y[at] = yy;
  }
  // o0/o1 (limbs × n) = the sums, in parallel over (limb, quarter)
  void run(const Context& ctx, int level, u64* o0, u64* o1) const {
    const size_t n = ctx.n();
    const int S = quarters(n);
#pragma omp parallel for schedule(static)
    for (int job = 0; job < limbs * S; ++job) {
      const int k = job / S;
      const size_t i0 = n / S * (job % S), i1 = i0 + n / S, o = (size_t)k * n;
      const size_t at = (size_t)k * width;
      mac2(d.data() + at, x.data() + at, y.data() + at, terms[k], ctx.modulus(ctx.qp_index(level, k)), i0, i1,
           o0 + o, o1 + o);
    }
  }
};

}  // namespace

Ciphertext NativeLinearTransform::apply_double(const Ciphertext& ct, const GaloisKeys& keys, bool rescale,
                                               LinTransCounts& cnt) const {
  const size_t n = ctx_.n();
  const int l = level_, K = ctx_.num_p(), E = l + 1 + K;
  // every key first: a missing one is reported before any work
  std::vector<const SwitchKey*> bkeys, gkeys;
  for (int64_t b : baby_steps_) bkeys.push_back(&key_for(keys, b, ct));
  for (const auto& g : groups_) gkeys.push_back(g.giant ? &key_for(keys, g.giant, ct) : nullptr);
  const u64* c0 = ct.polys[0].data();
  const u64* c1 = ct.polys[1].data();

  // P·ct over Q_l (its P limbs are zero): the unrotated baby step, and c0's share of every rotated one.
  bool use0 = false;
  for (const auto& g : groups_) use0 |= std::count(g.baby.begin(), g.baby.end(), -1) > 0;
  ScratchPoly P0((size_t)(l + 1) * n), P1;
  if (use0) P1.resize((size_t)(l + 1) * n);
#pragma omp parallel for schedule(static)
  for (int k = 0; k <= l; ++k) {
    const u64 q = ctx_.modulus(k).q, pm = ctx_.p_mod_q(k), pmp = ring::shoup_precompute(pm, q);
    const size_t o = (size_t)k * n;
    for (size_t i = 0; i < n; ++i) P0[o + i] = ring::mul_shoup(c0[o + i], pm, pmp, q);
    if (use0)
      for (size_t i = 0; i < n; ++i) P1[o + i] = ring::mul_shoup(c1[o + i], pm, pmp, q);
  }
  // Baby steps in Q_l ∪ P: X_b = P·rot_b(ct) + key-switch noise, no ModDown. One ModUp for all.
  const size_t nb = baby_steps_.size();
  std::vector<Poly> X0(nb), X1(nb);
  if (nb) {
    ModUpDigits digits = modup(ctx_, c1, l);
    ++cnt.modups;
    for (size_t j = 0; j < nb; ++j) {
      const auto& perm = ctx_.galois_permutation(ring::galois_element_rotation(baby_steps_[j], ctx_.log_n()));
      key_inner_product(ctx_, digits, *bkeys[j], &perm, X0[j], X1[j]);
      ++cnt.inner_products;
#pragma omp parallel for schedule(static)
      for (int k = 0; k <= l; ++k)
        add_perm(X0[j].data() + (size_t)k * n, P0.data() + (size_t)k * n, perm.data(), ctx_.modulus(k).q, n);
    }
  }

  Poly out0((size_t)E * n), out1((size_t)E * n);
  bool have_out = false;
  Poly acc0, acc1, a1, k0, k1;
  MacTable tab;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const Group& g = groups_[gi];
    tab.reset(E, (int)g.diag.size());
    for (size_t t = 0; t < g.diag.size(); ++t) {
      const u64* d = diag_[g.diag[t]].data();
      const int j = g.baby[t];
      for (int k = 0; k < E; ++k) {
        const size_t o = (size_t)k * n;
        if (j >= 0)
          tab.add(k, d + o, X0[j].data() + o, X1[j].data() + o);
        else if (k <= l)
          tab.add(k, d + o, P0.data() + o, P1.data() + o);
      }
    }
    cnt.pmults += (int)g.diag.size();
    if (g.giant == 0 && !have_out) {  // the unrotated group sums straight into the output
      tab.run(ctx_, l, out0.data(), out1.data());
      have_out = true;
      continue;
    }
    acc0.resize((size_t)E * n);
    acc1.resize((size_t)E * n);
    tab.run(ctx_, l, acc0.data(), acc1.data());
    const int S = quarters(n);
    if (g.giant == 0) {
#pragma omp parallel for schedule(static)
      for (int job = 0; job < E * S; ++job) {
        const int k = job / S;
        const size_t o = (size_t)k * n + n / S * (job % S);
        const u64 q = ctx_.modulus(ctx_.qp_index(l, k)).q;
        ring::add_vec(out0.data() + o, acc0.data() + o, q, out0.data() + o, n / S);
        ring::add_vec(out1.data() + o, acc1.data() + o, q, out1.data() + o, n / S);
      }
      continue;
    }
    // Giant step on (A0, A1) ≈ P·m_g: c1 down to Q_l, ModUp again, lazy key switch under ψ; c0 is
    // permuted in Q_l ∪ P. The sum stays ≈ P·ψ(m_g): the final ModDown divides it by P.
    moddown(ctx_, acc1, l, a1);
    ++cnt.moddowns;
    ModUpDigits dg = modup(ctx_, a1.data(), l);
    ++cnt.modups;
    const auto& perm = ctx_.galois_permutation(ring::galois_element_rotation(g.giant, ctx_.log_n()));
    key_inner_product(ctx_, dg, *gkeys[gi], &perm, k0, k1);
    ++cnt.inner_products;
    const bool first = !have_out;
#pragma omp parallel for schedule(static)
    for (int k = 0; k < E; ++k) {
      const u64 q = ctx_.modulus(ctx_.qp_index(l, k)).q;
      const size_t o = (size_t)k * n;
      const u64* __restrict a = acc0.data() + o;
      const uint32_t* __restrict pm = perm.data();
      u64* __restrict r0 = out0.data() + o;
      u64* __restrict r1 = out1.data() + o;
      const u64* __restrict s0 = k0.data() + o;
      const u64* __restrict s1 = k1.data() + o;
      if (first)
        for (size_t i = 0; i < n; ++i) {
          r0[i] = ring::add_mod(a[pm[i]], s0[i], q);
          r1[i] = s1[i];
        }
      else
        for (size_t i = 0; i < n; ++i) {
          r0[i] = ring::add_mod(r0[i], ring::add_mod(a[pm[i]], s0[i], q), q);
          r1[i] = ring::add_mod(r1[i], s1[i], q);
        }
    }
    have_out = true;
  }

  Ciphertext r = like(ct, scale_, is_complex_);
  cnt.moddowns += 2;
  if (rescale) {
    const Poly* u[2] = {&out0, &out1};
    Poly* o[2] = {&r.polys[0], &r.polys[1]};
    moddown_rescale(ctx_, l, u, o);
    ++cnt.rescales;
    r.level = l - 1;
    r.scale = r.scale / (double)ctx_.modulus(l).q;
  } else {
    moddown_many(ctx_, l, {&out0, &out1}, {&r.polys[0], &r.polys[1]}, {nullptr, nullptr});
  }
  return r;
}

Ciphertext NativeLinearTransform::apply_single(const Ciphertext& ct, const GaloisKeys& keys, bool rescale,
                                               LinTransCounts& cnt) const {
  const size_t n = ctx_.n();
  const int l = level_, Q = l + 1;
  std::vector<const SwitchKey*> bkeys, gkeys;
  for (int64_t b : baby_steps_) bkeys.push_back(&key_for(keys, b, ct));
  for (const auto& g : groups_) gkeys.push_back(g.giant ? &key_for(keys, g.giant, ct) : nullptr);
  const u64* c0 = ct.polys[0].data();
  const u64* c1 = ct.polys[1].data();

  // Hoisted baby steps, each a full rotation over Q_l (as Evaluator::apply_galois_hoisted).
  const size_t nb = baby_steps_.size();
  std::vector<Poly> Y0(nb), Y1(nb);
  Poly u0, u1;
  if (nb) {
    ModUpDigits digits = modup(ctx_, c1, l);
    ++cnt.modups;
    for (size_t j = 0; j < nb; ++j) {
      const auto& perm = ctx_.galois_permutation(ring::galois_element_rotation(baby_steps_[j], ctx_.log_n()));
      key_inner_product(ctx_, digits, *bkeys[j], &perm, u0, u1);
      ++cnt.inner_products;
      Y0[j].resize((size_t)Q * n);
#pragma omp parallel for schedule(static)
      for (int k = 0; k <= l; ++k)
        ring::permute_vec(c0 + (size_t)k * n, perm.data(), Y0[j].data() + (size_t)k * n, n);
      moddown_many(ctx_, l, {&u0, &u1}, {&Y0[j], &Y1[j]}, {Y0[j].data(), nullptr});
      cnt.moddowns += 2;
    }
  }

  Poly out0((size_t)Q * n), out1((size_t)Q * n);
  bool have_out = false;
  Poly acc0((size_t)Q * n), acc1((size_t)Q * n), t0((size_t)Q * n), t1((size_t)Q * n), r1;
  MacTable tab;
  const int S = quarters(n);
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const Group& g = groups_[gi];
    tab.reset(Q, (int)g.diag.size());
    for (size_t t = 0; t < g.diag.size(); ++t) {
      const u64* d = diag_[g.diag[t]].data();
      const int j = g.baby[t];
      for (int k = 0; k < Q; ++k) {
        const size_t o = (size_t)k * n;
        tab.add(k, d + o, (j >= 0 ? Y0[j].data() : c0) + o, (j >= 0 ? Y1[j].data() : c1) + o);
      }
    }
    cnt.pmults += (int)g.diag.size();
    if (g.giant == 0 && !have_out) {
      tab.run(ctx_, l, out0.data(), out1.data());
      have_out = true;
      continue;
    }
    tab.run(ctx_, l, acc0.data(), acc1.data());
    const u64* add0 = acc0.data();
    const u64* add1 = acc1.data();
    if (g.giant != 0) {  // a full rotation: permute, ModUp, key switch, ModDown
      const auto& perm = ctx_.galois_permutation(ring::galois_element_rotation(g.giant, ctx_.log_n()));
#pragma omp parallel for schedule(static)
      for (int k = 0; k <= l; ++k) {
        ring::permute_vec(acc0.data() + (size_t)k * n, perm.data(), t0.data() + (size_t)k * n, n);
        ring::permute_vec(acc1.data() + (size_t)k * n, perm.data(), t1.data() + (size_t)k * n, n);
      }
      ModUpDigits dg = modup(ctx_, t1.data(), l);
      ++cnt.modups;
      key_inner_product(ctx_, dg, *gkeys[gi], nullptr, u0, u1);
      ++cnt.inner_products;
      moddown_many(ctx_, l, {&u0, &u1}, {&t0, &r1}, {t0.data(), nullptr});
      cnt.moddowns += 2;
      add0 = t0.data();
      add1 = r1.data();
    }
    const bool first = !have_out;
#pragma omp parallel for schedule(static)
    for (int job = 0; job < Q * S; ++job) {
      const int k = job / S;
      const size_t o = (size_t)k * n + n / S * (job % S);
      const u64 q = ctx_.modulus(k).q;
      if (first) {
        std::copy(add0 + o, add0 + o + n / S, out0.data() + o);
        std::copy(add1 + o, add1 + o + n / S, out1.data() + o);
      } else {
        ring::add_vec(out0.data() + o, add0 + o, q, out0.data() + o, n / S);
        ring::add_vec(out1.data() + o, add1 + o, q, out1.data() + o, n / S);
      }
    }
    have_out = true;
  }

  Ciphertext r = like(ct, scale_, is_complex_);
  if (rescale) {
    const Evaluator ev(ctx_);
    for (int j = 0; j < 2; ++j) {
      r.polys[j].resize((size_t)l * n);
      ev.rescale_poly((j ? out1 : out0).data(), n, l, r.polys[j].data(), n);
    }
    ++cnt.rescales;
    r.level = l - 1;
    r.scale = r.scale / (double)ctx_.modulus(l).q;
  } else {
    r.polys[0] = std::move(out0);
    r.polys[1] = std::move(out1);
  }
  return r;
}

}  // namespace hemlp
