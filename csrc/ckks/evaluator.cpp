#include "ckks/evaluator.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <string>

#include "ckks/errors.h"
#include "ckks/keyswitch.h"
#include "ring/vecops.h"

namespace hemlp {

bool scales_match(double a, double b) { return std::fabs(a - b) <= std::ldexp(std::max(a, b), -32); }

namespace {
std::string fmt_scale(double s) { return "2^" + std::to_string(std::log2(s)); }
}  // namespace

void Evaluator::check_compatible(const Ciphertext& a, const Ciphertext& b, const char* op) const {
  if (a.param_hash != ctx_.hash64() || b.param_hash != ctx_.hash64())
    fail(ErrorKind::ContextMismatch, std::string(op) + ": a ciphertext comes from another parameter set; "
                                                       "load or encrypt it under this context");
  if (a.key_id && b.key_id && a.key_id != b.key_id)
    fail(ErrorKind::KeyMismatch, std::string(op) + ": the ciphertexts are encrypted under different key pairs");
  if (a.level != b.level)
    fail(ErrorKind::Level, std::string(op) + ": operands are at levels " + std::to_string(a.level) + " and " +
                               std::to_string(b.level) + "; bring them to the same level first "
                                                         "(drop_level)");
  if (a.slots != b.slots || a.encoding != b.encoding)
    fail(ErrorKind::Encoding, std::string(op) + ": operands have different slot counts or encodings");
}

void Evaluator::check_plain(const Ciphertext& a, const Plaintext& p, bool scale_must_match, const char* op) const {
  if (a.param_hash != ctx_.hash64() || p.param_hash != ctx_.hash64())
    fail(ErrorKind::ContextMismatch, std::string(op) + ": operand from another parameter set");
  if (a.level != p.level)
    fail(ErrorKind::Level, std::string(op) + ": ciphertext at level " + std::to_string(a.level) +
                               " but plaintext encoded at level " + std::to_string(p.level) +
                               "; encode the plaintext at the ciphertext's level");
  if (a.slots != p.slots || a.encoding != p.encoding)
    fail(ErrorKind::Encoding, std::string(op) + ": ciphertext and plaintext have different slot counts or encodings");
  if (scale_must_match && !scales_match(a.scale, p.scale))
    fail(ErrorKind::Scale, std::string(op) + ": ciphertext scale " + fmt_scale(a.scale) + " != plaintext scale " +
                               fmt_scale(p.scale) + "; encode the plaintext at the ciphertext's scale");
}

void Evaluator::check_size2(const Ciphertext& a, const char* op) {
  if (a.size() != 2)
    fail(ErrorKind::Parameter, std::string(op) + " needs a relinearised ciphertext (2 polynomials); "
                                                 "relinearize it first");
}

void Evaluator::accumulate(Ciphertext& r, const Ciphertext& b, bool subtract, const char* op) const {
  check_compatible(r, b, op);
  if (!scales_match(r.scale, b.scale))
    fail(ErrorKind::Scale, std::string(op) + ": scales differ (" + fmt_scale(r.scale) + " vs " + fmt_scale(b.scale) +
                               "); bring one operand to the other's scale (set_scale, one level) or keep "
                               "plaintext factors encoded at the prime being rescaled");
  const size_t n = ctx_.n();
  const size_t common = std::min(r.size(), b.size());
  for (size_t j = r.size(); j < b.size(); ++j) r.polys.push_back(b.polys[j]);   // b's extra parts, negated below
  r.seeded = false;
  r.is_complex = r.is_complex || b.is_complex;
  const int level = r.level;
  for (size_t j = 0; j < r.size(); ++j) {
    const bool own = j < common;                    // r's part combined with b's, or a part only one side has
    if (!own && (!subtract || j >= b.size())) continue;   // r's own extra part: unchanged; b's copied one: negated
#pragma omp parallel for schedule(static)
    for (int k = 0; k <= level; ++k) {
      const u64 q = ctx_.modulus(k).q;
      u64* d = r.polys[j].data() + (size_t)k * n;
      const u64* s = b.polys[j].data() + (size_t)k * n;
      if (!own)
        for (size_t i = 0; i < n; ++i) d[i] = ring::neg_mod(d[i], q);
      else if (subtract)
        for (size_t i = 0; i < n; ++i) d[i] = ring::sub_mod(d[i], s[i], q);
      else
        for (size_t i = 0; i < n; ++i) d[i] = ring::add_mod(d[i], s[i], q);
    }
  }
}

Ciphertext Evaluator::add(const Ciphertext& a, const Ciphertext& b) const {
  Ciphertext r = a.size() >= b.size() ? a : b;   // the larger operand's copy: the other is added into it
  accumulate(r, a.size() >= b.size() ? b : a, false, "add");
  return r;
}

void Evaluator::add_inplace(Ciphertext& a, const Ciphertext& b) const { accumulate(a, b, false, "add_inplace"); }

void Evaluator::negate_inplace(Ciphertext& a) const {
  const size_t n = ctx_.n();
  a.seeded = false;
  for (auto& p : a.polys)
    for (int k = 0; k <= a.level; ++k) {
      const u64 q = ctx_.modulus(k).q;
      for (size_t i = 0; i < n; ++i) p[(size_t)k * n + i] = ring::neg_mod(p[(size_t)k * n + i], q);
    }
}

Ciphertext Evaluator::negate(const Ciphertext& a) const {
  Ciphertext r = a;
  negate_inplace(r);
  return r;
}

Ciphertext Evaluator::sub(const Ciphertext& a, const Ciphertext& b) const {
  Ciphertext r = a;        // one copy: b is subtracted into it (was a + negate(b), two full copies)
  accumulate(r, b, true, "sub");
  return r;
}

void Evaluator::sub_inplace(Ciphertext& a, const Ciphertext& b) const { accumulate(a, b, true, "sub_inplace"); }

Ciphertext Evaluator::add_plain(const Ciphertext& a, const Plaintext& p) const {
  check_plain(a, p, true, "add_plain");
  const size_t n = ctx_.n();
  Ciphertext r = a;
  r.is_complex = a.is_complex || p.is_complex;
  for (int k = 0; k <= a.level; ++k) {
    const u64 q = ctx_.modulus(k).q;
    for (size_t i = 0; i < n; ++i)
      r.polys[0][(size_t)k * n + i] = ring::add_mod(r.polys[0][(size_t)k * n + i], p.data[(size_t)k * n + i], q);
  }
  return r;
}

Ciphertext Evaluator::sub_plain(const Ciphertext& a, const Plaintext& p) const {
  Plaintext neg = p;
  const size_t n = ctx_.n();
  for (int k = 0; k <= p.level; ++k)
    for (size_t i = 0; i < n; ++i)
      neg.data[(size_t)k * n + i] = ring::neg_mod(neg.data[(size_t)k * n + i], ctx_.modulus(k).q);
  return add_plain(a, neg);
}

void Evaluator::mul_plain_into(Ciphertext& r, const Plaintext& p) const {
  const size_t n = ctx_.n();
  r.seeded = false;
  r.scale = r.scale * p.scale;
  r.is_complex = r.is_complex || p.is_complex;
  for (auto& poly : r.polys)
#pragma omp parallel for schedule(static)
    for (int k = 0; k <= r.level; ++k) {
      const Modulus& q = ctx_.modulus(k);
      u64* d = poly.data() + (size_t)k * n;
      const u64* s = p.data.data() + (size_t)k * n;
      for (size_t i = 0; i < n; ++i) d[i] = q.mul(d[i], s[i]);
    }
}

Ciphertext Evaluator::mul_plain(const Ciphertext& a, const Plaintext& p) const {
  check_plain(a, p, false, "mul_plain");
  Ciphertext r = a;
  mul_plain_into(r, p);
  return r;
}

void Evaluator::mul_plain_inplace(Ciphertext& a, const Plaintext& p) const {
  check_plain(a, p, false, "mul_plain_inplace");
  mul_plain_into(a, p);
}

void Evaluator::mul_integer_poly(u64* p, size_t stride, int level, int64_t c) const {
  const size_t n = ctx_.n();
  for (int k = 0; k <= level; ++k) {
    const u64 q = ctx_.modulus(k).q;
    int64_t m = c % (int64_t)q;
    const u64 w = m < 0 ? (u64)(m + (int64_t)q) : (u64)m, wp = ring::shoup_precompute(w, q);
    u64* d = p + (size_t)k * stride;
    for (size_t i = 0; i < n; ++i) d[i] = ring::mul_shoup(d[i], w, wp, q);
  }
}

Ciphertext Evaluator::mul_integer(const Ciphertext& a, int64_t c) const {
  Ciphertext r = a;
  r.seeded = false;
  for (auto& poly : r.polys) mul_integer_poly(poly.data(), ctx_.n(), a.level, c);
  return r;
}

Ciphertext Evaluator::mul(const Ciphertext& a, const Ciphertext& b, const SwitchKey* rlk) const {
  check_compatible(a, b, "mul");
  check_size2(a, "mul");
  check_size2(b, "mul");
  if (a.encoding != Encoding::Slot)
    fail(ErrorKind::Encoding, "mul: ciphertext x ciphertext products need slot encoding (coefficient-encoded "
                              "data multiplies as polynomials, not element-wise)");
  const size_t n = ctx_.n();
  const int limbs = a.level + 1;
  Ciphertext r;
  copy_metadata(r, a);
  r.key_id = a.key_id ? a.key_id : b.key_id;
  r.scale = a.scale * b.scale;
  r.is_complex = a.is_complex || b.is_complex;
  r.polys.assign(3, Poly((size_t)limbs * n));
#pragma omp parallel for schedule(static)
  for (int k = 0; k < limbs; ++k) {
    const size_t o = (size_t)k * n;
    ring::tensor_vec(a.polys[0].data() + o, a.polys[1].data() + o, b.polys[0].data() + o, b.polys[1].data() + o,
                     ctx_.modulus(k), r.polys[0].data() + o, r.polys[1].data() + o, r.polys[2].data() + o, n);
  }
  return rlk ? relinearize(r, *rlk) : r;
}

Ciphertext Evaluator::relinearize(const Ciphertext& a, const SwitchKey& rlk) const {
  if (a.size() == 2) return a;
  if (a.size() != 3) fail(ErrorKind::Parameter, "relinearize: ciphertext must have 2 or 3 polynomials");
  if (rlk.param_hash != ctx_.hash64())
    fail(ErrorKind::ContextMismatch, "relinearize: the relinearisation key belongs to another parameter set");
  if (rlk.galois != 0) fail(ErrorKind::KeyMismatch, "relinearize: this is a rotation key, not a relinearisation key");
  if (a.key_id && rlk.key_id != a.key_id)
    fail(ErrorKind::KeyMismatch, "relinearize: the relinearisation key was generated from another secret key "
                                 "than this ciphertext's");
  check_key_level(rlk, a.level, "relinearize");
  const size_t n = ctx_.n();
  Poly k0, k1;
  key_switch(ctx_, a.polys[2].data(), a.level, rlk, k0, k1);
  Ciphertext r = a;
  r.polys.resize(2);
#pragma omp parallel for schedule(static)
  for (int k = 0; k <= a.level; ++k) {
    const u64 q = ctx_.modulus(k).q;
    const size_t o = (size_t)k * n;
    ring::add_vec(r.polys[0].data() + o, k0.data() + o, q, r.polys[0].data() + o, n);
    ring::add_vec(r.polys[1].data() + o, k1.data() + o, q, r.polys[1].data() + o, n);
  }
  return r;
}

std::vector<Ciphertext> Evaluator::mul_relin_rescale_many(const std::vector<const Ciphertext*>& a,
                                                          const std::vector<const Ciphertext*>& b,
                                                          const SwitchKey& rlk) const {
  if (a.size() != b.size())
    fail(ErrorKind::Shape, "mul_relin_rescale_many: " + std::to_string(a.size()) + " left and " +
                               std::to_string(b.size()) + " right operands");
  for (size_t i = 0; i < a.size(); ++i)
    if (!a[i] || !b[i]) fail(ErrorKind::Shape, "mul_relin_rescale_many: an operand is missing (null)");
  std::vector<Ciphertext> out(a.size());
  std::exception_ptr err;
#pragma omp parallel for schedule(dynamic)
  for (long i = 0; i < (long)a.size(); ++i) {  // inner loops run serially (nested regions)
    try {
      out[i] = mul_relin_rescale(*a[i], *b[i], rlk);
    } catch (...) {  // exceptions must not leave an OpenMP region; the first one is rethrown
#pragma omp critical(hemlp_eval_many_error)
      if (!err) err = std::current_exception();
    }
  }
  if (err) std::rethrow_exception(err);
  return out;
}

Ciphertext Evaluator::mul_relin_rescale(const Ciphertext& a, const Ciphertext& b, const SwitchKey& rlk) const {
  if (a.level == 0)
    fail(ErrorKind::Level, "mul: the ciphertexts are at level 0, no modulus left for the rescale; choose a "
                           "parameter set with more levels (a deeper preset) or bootstrap");
  Ciphertext t = mul(a, b, nullptr);  // (d0, d1, d2) at level l, all checks done
  if (rlk.param_hash != ctx_.hash64())
    fail(ErrorKind::ContextMismatch, "relinearize: the relinearisation key belongs to another parameter set");
  if (rlk.galois != 0) fail(ErrorKind::KeyMismatch, "relinearize: this is a rotation key, not a relinearisation key");
  if (t.key_id && rlk.key_id != t.key_id)
    fail(ErrorKind::KeyMismatch, "relinearize: the relinearisation key was generated from another secret key "
                                 "than this ciphertext's");
  check_key_level(rlk, t.level, "mul (relinearisation)");
  const size_t n = ctx_.n();
  const int l = t.level;
  ModUpDigits d = modup(ctx_, t.polys[2].data(), l);
  ScratchBuf u[2];
  key_inner_product(ctx_, d, rlk, nullptr, u[0], u[1]);
  Ciphertext r;
  copy_metadata(r, t);
  r.key_id = t.key_id;
  r.level = l - 1;
  r.scale = t.scale / (double)ctx_.modulus(l).q;
  r.is_complex = t.is_complex;
  r.polys.resize(2);  // moddown_rescale sizes them
  // v_j = P d_j + u_j over Q_l ∪ P (P d_j vanishes on the P limbs); both j in each parallel loop
#pragma omp parallel for schedule(static)
  for (int job = 0; job < 2 * (l + 1); ++job) {
    const int j = job / (l + 1), i = job % (l + 1);
    const Modulus& q = ctx_.modulus(i);
    const u64 pm = ctx_.p_mod_q(i), pmp = ring::shoup_precompute(pm, q.q);
    u64* vi = u[j].data() + (size_t)i * n;
    ring::add_mul_shoup_vec(vi, t.polys[j].data() + (size_t)i * n, pm, pmp, q.q, vi, n);
  }
  // round(v_j / (P q_l)): ModDown fused with the rescale, rounded exactly in the q_l step (a single
  // uncentred base conversion from {q_l} ∪ P added up to (|P| + 1)/2 at the output scale: 0.8 bit)
  const u64* const in[2] = {u[0].data(), u[1].data()};
  Poly* outp[2] = {&r.polys[0], &r.polys[1]};
  moddown_rescale(ctx_, l, in, outp);
  return r;
}

void Evaluator::check_rescalable(const Ciphertext& a, const char* op) {
  if (a.level == 0)
    fail(ErrorKind::Level, std::string(op) + ": the ciphertext is at level 0, no modulus left to divide by; choose "
                                             "a parameter set with more levels (a deeper preset) or bootstrap");
}

Ciphertext Evaluator::rescale(const Ciphertext& a) const {
  check_rescalable(a, "rescale");
  const size_t n = ctx_.n();
  const int l = a.level;
  const u64 ql = ctx_.modulus(l).q;
  Ciphertext r;
  copy_metadata(r, a);
  r.key_id = a.key_id;
  r.level = l - 1;
  r.scale = a.scale / (double)ql;
  r.is_complex = a.is_complex;
  r.polys.resize(a.size());
  for (size_t j = 0; j < a.size(); ++j) {
    r.polys[j].resize((size_t)l * n);
    rescale_poly(a.polys[j].data(), n, l, r.polys[j].data(), n);
  }
  return r;
}

void Evaluator::rescale_inplace(Ciphertext& a) const {
  check_rescalable(a, "rescale_inplace");
  const size_t n = ctx_.n();
  const int l = a.level;
  for (auto& p : a.polys) {
    rescale_poly(p.data(), n, l, p.data(), n);
    p.resize((size_t)l * n);  // keeps the capacity: no reallocation
  }
  a.level = l - 1;
  a.scale = a.scale / (double)ctx_.modulus(l).q;
  a.seeded = false;  // as rescale's new ciphertext
  a.seed = Seed{};
}

void Evaluator::rescale_poly(const u64* in, size_t in_stride, int l, u64* out, size_t out_stride) const {
  const size_t n = ctx_.n();
  const u64 ql = ctx_.modulus(l).q;
  ScratchBuf last(ctx_.scratch(), n);
  std::copy(in + (size_t)l * in_stride, in + (size_t)l * in_stride + n, last.data());
  ctx_.ntt(l).inverse(last.data());
  // t_i = NTT(lift(last)) is formed in the output limb, or in a scratch buffer when the output is the input
  // (in place: out limb i is read as in limb i after t_i is formed)
  const bool in_place = in == out;
  ScratchBuf tmp = in_place ? ScratchBuf(ctx_.scratch(), (size_t)l * n) : ScratchBuf();
#pragma omp parallel for schedule(static)
  for (int i = 0; i < l; ++i) {
    const u64 qi = ctx_.modulus(i).q;
    u64* t = in_place ? tmp.data() + (size_t)i * n : out + (size_t)i * out_stride;
    ring::centred_lift_vec(last.data(), ql, qi, t, n);
    ctx_.ntt(i).forward(t);
    const u64 w = ctx_.q_inv_mod_q(l, i), wp = ring::shoup_precompute(w, qi);
    ring::sub_mul_shoup_vec(in + (size_t)i * in_stride, t, w, wp, qi, nullptr, out + (size_t)i * out_stride, n);
  }
}

void Evaluator::rescale_many(std::vector<Ciphertext>& cts) const {
  for (auto& c : cts) check_rescalable(c, "rescale");  // the typed level error before any work
#pragma omp parallel for schedule(dynamic)
  for (long i = 0; i < (long)cts.size(); ++i) cts[i] = rescale(cts[i]);  // inner loops run serially
}

Ciphertext Evaluator::add_const(const Ciphertext& a, double c) const {
  if (a.encoding != Encoding::Slot)
    fail(ErrorKind::Encoding, "add_const: a constant in every slot needs slot encoding; add an encoded "
                              "plaintext to coefficient-encoded data");
  if (!std::isfinite(c)) fail(ErrorKind::Encoding, "cannot add NaN or infinity");
  Ciphertext r = a;
  r.seeded = false;
  add_const_poly(r.polys[0].data(), ctx_.n(), a.level, c, a.scale);
  return r;
}

void Evaluator::add_const_poly(u64* p, size_t stride, int level, double c, double scale) const {
  const long double v = roundl((long double)c * (long double)scale);
  const size_t n = ctx_.n();
  for (int k = 0; k <= level; ++k) {
    const u64 q = ctx_.modulus(k).q;
    long double m = fmodl(v, (long double)q);
    if (m < 0) m += (long double)q;
    const u64 w = (u64)m;  // the NTT of a constant polynomial is that constant everywhere
    u64* d = p + (size_t)k * stride;
    for (size_t i = 0; i < n; ++i) d[i] = ring::add_mod(d[i], w, q);
  }
}

Ciphertext Evaluator::drop_to_level(const Ciphertext& a, int level) const {
  if (level < 0 || level > a.level)
    fail(ErrorKind::Level, "drop_level: target level " + std::to_string(level) + " must be in [0, " +
                               std::to_string(a.level) + "] (levels can only go down)");
  // only the kept limbs are copied (copying the whole ciphertext and truncating read and wrote the dropped ones too)
  Ciphertext r;
  copy_metadata(r, a);
  r.key_id = a.key_id;
  r.is_complex = a.is_complex;
  r.level = level;
  r.seeded = false;
  const size_t len = (size_t)(level + 1) * ctx_.n();
  r.polys.reserve(a.polys.size());
  for (const auto& p : a.polys) r.polys.emplace_back(p.begin(), p.begin() + (std::ptrdiff_t)len);
  return r;
}

const SwitchKey& Evaluator::find_key(const GaloisKeys& keys, uint64_t g, const Ciphertext& a) const {
  if (keys.param_hash != ctx_.hash64())
    fail(ErrorKind::ContextMismatch, "the Galois keys belong to another parameter set");
  if (a.key_id && keys.key_id != a.key_id)
    fail(ErrorKind::KeyMismatch, "the Galois keys were generated from another secret key than this ciphertext's");
  auto it = keys.keys.find(g);
  if (it == keys.keys.end())
    fail(ErrorKind::MissingKey, "no key for Galois element " + std::to_string(g) +
                                    "; generate the rotation keys for this step (rotation_keys; conjugation_key for a "
                                    "conjugation)");
  check_key_level(it->second, a.level, "rotate");
  return it->second;
}

const SwitchKey* Evaluator::check_galois(const Ciphertext& a, uint64_t g, const GaloisKeys& keys,
                                         const char* op) const {
  check_size2(a, op);
  if (a.encoding != Encoding::Slot)
    fail(ErrorKind::Encoding, std::string(op) + ": rotations act on slot-encoded ciphertexts only");
  return g == 1 ? nullptr : &find_key(keys, g, a);
}

void Evaluator::galois_into(const Ciphertext& a, uint64_t g, const SwitchKey& key, Poly& out0, Poly& out1) const {
  // Permute (c0, c1) first, so the key switch reads its digits sequentially; the ModDown of the b-part adds the
  // permuted c0 in the same pass. Every temporary comes from the scratch pool and out0 / out1 are written last, so
  // they may be a's own parts (in place).
  const size_t n = ctx_.n(), len = (size_t)(a.level + 1) * n;
  const auto& perm = ctx_.galois_permutation(g);
  ScratchBuf c0(ctx_.scratch(), len), c1(ctx_.scratch(), len);
#pragma omp parallel for schedule(static)  // (limb, part) jobs: an even count for 2 threads
  for (int job = 0; job < 2 * (a.level + 1); ++job) {
    const size_t o = (size_t)(job / 2) * n;
    const auto& src = a.polys[job % 2];
    ring::permute_vec(src.data() + o, perm.data(), (job % 2 ? c1.data() : c0.data()) + o, n);
  }
  ModUpDigits d = modup(ctx_, c1.data(), a.level);
  ScratchBuf u0, u1;
  key_inner_product(ctx_, d, key, nullptr, u0, u1);
  moddown_many_raw(ctx_, a.level, {u0.data(), u1.data()}, {&out0, &out1}, {c0.data(), nullptr});
}

Ciphertext Evaluator::apply_galois(const Ciphertext& a, uint64_t g, const GaloisKeys& keys) const {
  const SwitchKey* key = check_galois(a, g, keys, "rotate");
  if (key == nullptr) return a;
  Ciphertext c;
  copy_metadata(c, a);
  c.key_id = a.key_id;
  c.is_complex = a.is_complex;
  c.seeded = false;
  c.polys.resize(2);
  galois_into(a, g, *key, c.polys[0], c.polys[1]);
  return c;
}

void Evaluator::apply_galois_inplace(Ciphertext& a, uint64_t g, const GaloisKeys& keys) const {
  const SwitchKey* key = check_galois(a, g, keys, "rotate_inplace");
  if (key == nullptr) return;  // the identity (apply_galois returns a copy of a, seed included)
  galois_into(a, g, *key, a.polys[0], a.polys[1]);
  a.seeded = false;
  a.seed = Seed{};
}

std::vector<Ciphertext> Evaluator::apply_galois_hoisted(const Ciphertext& a, const std::vector<uint64_t>& gs,
                                                        const GaloisKeys& keys) const {
  std::vector<const SwitchKey*> ks;
  check_galois(a, 1, keys, "rotate");  // the operand's checks (size 2, slot encoding)
  for (auto g : gs) ks.push_back(g == 1 ? nullptr : &find_key(keys, g, a));
  const size_t n = ctx_.n();
  ModUpDigits digits = modup(ctx_, a.polys[1].data(), a.level);  // shared by every rotation
  std::vector<Ciphertext> out;
  ScratchBuf u0, u1;  // reused by every rotation
  for (size_t r = 0; r < gs.size(); ++r) {
    Ciphertext c = a;
    c.seeded = false;
    if (gs[r] == 1) { out.push_back(std::move(c)); continue; }
    const auto& perm = ctx_.galois_permutation(gs[r]);
    key_inner_product(ctx_, digits, *ks[r], &perm, u0, u1);
#pragma omp parallel for schedule(static)
    for (int k = 0; k <= a.level; ++k) {
      const size_t o = (size_t)k * n;
      ring::permute_vec(a.polys[0].data() + o, perm.data(), c.polys[0].data() + o, n);
    }
    moddown_many_raw(ctx_, a.level, {u0.data(), u1.data()}, {&c.polys[0], &c.polys[1]}, {c.polys[0].data(), nullptr});
    out.push_back(std::move(c));
  }
  return out;
}

// ---- constant fast paths

std::vector<u64> Evaluator::const_residues(double c, double scale, int level) const {
  if (!std::isfinite(c)) fail(ErrorKind::Encoding, "cannot use NaN or infinity as a constant");
  if (!std::isfinite(scale) || !(scale > 0))
    fail(ErrorKind::Encoding, "constant scale must be positive and finite, got " + std::to_string(scale));
  if (level < 0 || level > ctx_.max_level())
    fail(ErrorKind::Level, "constant: level " + std::to_string(level) + " outside this context's chain");
  std::vector<u64> w((size_t)level + 1, 0);
  if (c == 0) return w;
  // c = mc 2^ec and scale = ms 2^es with 53-bit integer mantissas: the product is mc ms 2^(ec + es) exactly
  int ec = 0, es = 0;
  const int64_t mc = (int64_t)std::ldexp(std::frexp(c, &ec), 53);
  const int64_t ms = (int64_t)std::ldexp(std::frexp(scale, &es), 53);
  const int e = ec + es - 106;
  const bool neg = mc < 0;
  u128 mag = (u128)(uint64_t)(neg ? -mc : mc) * (u128)(uint64_t)ms;  // < 2^106
  if (e < 0) {  // round(mag / 2^-e), half away from zero
    if (-e > 107) return w;  // mag / 2^-e < 2^-1: rounds to 0
    mag = (mag + ((u128)1 << (-e - 1))) >> (-e);
  }
  for (int k = 0; k <= level; ++k) {
    const u64 q = ctx_.modulus(k).q;
    u64 r = (u64)(mag % q);
    if (e > 0) r = (u64)((u128)r * ring::pow_mod(2 % q, (u64)e, q) % q);  // times 2^e mod q
    w[k] = neg ? ring::neg_mod(r, q) : r;
  }
  return w;
}

Ciphertext Evaluator::mul_const(const Ciphertext& a, double c, double const_scale) const {
  const std::vector<u64> w = const_residues(c, const_scale, a.level);
  const size_t n = ctx_.n();
  Ciphertext r = a;
  r.seeded = false;
  r.scale = a.scale * const_scale;
  for (auto& poly : r.polys)
#pragma omp parallel for schedule(static)
    for (int k = 0; k <= a.level; ++k) {
      const u64 q = ctx_.modulus(k).q, wp = ring::shoup_precompute(w[k], q);
      u64* d = poly.data() + (size_t)k * n;
      for (size_t i = 0; i < n; ++i) d[i] = ring::mul_shoup(d[i], w[k], wp, q);
    }
  return r;
}

Ciphertext Evaluator::add_const_exact(const Ciphertext& a, double c) const {
  if (a.encoding != Encoding::Slot)
    fail(ErrorKind::Encoding, "add_const: a constant in every slot needs slot encoding; add an encoded "
                              "plaintext to coefficient-encoded data");
  const std::vector<u64> w = const_residues(c, a.scale, a.level);
  const size_t n = ctx_.n();
  Ciphertext r = a;
  r.seeded = false;
  for (int k = 0; k <= a.level; ++k) {
    const u64 q = ctx_.modulus(k).q;
    u64* d = r.polys[0].data() + (size_t)k * n;
    for (size_t i = 0; i < n; ++i) d[i] = ring::add_mod(d[i], w[k], q);
  }
  return r;
}

}  // namespace hemlp
