#include "boot/polyeval.h"

#include <cmath>
#include <map>
#include <string>
#include <utility>

#include "ckks/errors.h"
#include "ckks/keyswitch.h"
#include "ring/vecops.h"

namespace hemlp::boot {

int poly_depth(int degree) {
  int d = 0;
  while (degree > 0) ++d, degree >>= 1;  // bit length = ceil(log2(degree + 1))
  return d;
}

namespace {

// Derived target scales below this leave fewer than ~10 bits above the rescale noise: refuse them.
constexpr double kMinTargetScale = 65536.0;  // 2^16

std::string log2s(double s) { return "2^" + std::to_string(std::log2(s)); }

int ceil_log2(int n) {  // n >= 1
  int d = 0;
  while ((1 << d) < n) ++d;
  return d;
}

std::vector<double> trimmed(const std::vector<double>& c) {
  size_t n = c.size();
  while (n > 1 && c[n - 1] == 0) --n;
  return std::vector<double>(c.begin(), c.begin() + (long)std::max<size_t>(n, 1));
}

class Runner {
 public:
  Runner(const Context& ctx, const Evaluator& ev, const SwitchKey* rlk, PolyBasis basis, Ciphertext x, int baby)
      : ctx_(ctx), ev_(ev), rlk_(rlk), basis_(basis), top_(x.level), baby_(baby) {
    pw_.emplace(1, std::move(x));
  }

  // Ciphertext of p at exactly (level, scale); `constant` holds p when it has degree 0 (then false).
  bool eval(const std::vector<double>& coeffs, int level, double scale, Ciphertext& out, double& constant) {
    const std::vector<double> c = trimmed(coeffs);
    const int deg = (int)c.size() - 1;
    if (deg == 0) {
      constant = c[0];
      return false;
    }
    check_target(scale, level);
    bool direct = true;
    for (int i = 1; i <= deg && direct; ++i)
      if (c[i] != 0)
        direct = level_of(i) >= level + 1 && (i <= baby_ || (i & (i - 1)) == 0 || pw_.count(i));
    if (direct) {
      out = linear_combination(c, level, scale);
      constant = 0;
      return true;
    }
    int m = 1;
    while (2 * m <= deg) m *= 2;
    std::vector<double> low, high;
    split(c, m, low, high);
    const Ciphertext& tm = power(m);
    const int lv = level + 1;
    if (tm.level < lv)
      fail(ErrorKind::Level, "polynomial evaluation: T_" + std::to_string(m) + " is at level " +
                                 std::to_string(tm.level) + ", below the level " + std::to_string(lv) +
                                 " it is needed at: not enough levels for this degree");
    Ciphertext dropped;
    const Ciphertext& tm_d = at_level(tm, lv, dropped);
    const double h_scale = scale * (double)ctx_.modulus(lv).q / tm_d.scale;
    Ciphertext h;
    double h_const = 0;
    Ciphertext prod;
    if (eval(high, lv, h_scale, h, h_const)) {
      prod = ev_.mul_relin_rescale(h, tm_d, *rlk_);
      ++stats.ct_mul;
    } else {  // H is a constant: c T_m
      check_target(h_scale, lv);
      prod = ev_.rescale(ev_.mul_const(tm_d, h_const, h_scale));
      ++stats.const_mul, ++stats.rescale;
    }
    retag(prod, scale);
    Ciphertext l;
    double l_const = 0;
    out = eval(low, level, scale, l, l_const) ? ev_.add(prod, l) : std::move(prod);
    if (l_const != 0) out = ev_.add_const_exact(out, l_const);
    constant = 0;
    return true;
  }

  PolyEvalStats stats;

 private:
  // c itself when it is at `level`, else c dropped to it in tmp: no copy of a ciphertext already at the level.
  const Ciphertext& at_level(const Ciphertext& c, int level, Ciphertext& tmp) const {
    if (c.level == level) return c;
    tmp = ev_.drop_to_level(c, level);
    return tmp;
  }

  // The level power(n) lands on: top - ceil(log2 n) (one product per doubling).
  int level_of(int n) const { return top_ - ceil_log2(n); }

  void check_target(double scale, int level) const {
    if (!(scale >= kMinTargetScale) || !std::isfinite(scale))
      fail(ErrorKind::Scale, "polynomial evaluation: a derived target scale at level " + std::to_string(level) +
                                 " is " + log2s(scale) + ", too small to hold the result above the noise. The "
                                 "input scale " + log2s(pw_.at(1).scale) + " is too far above the prime q_" +
                                 std::to_string(top_) + " = " + log2s((double)ctx_.modulus(top_).q) +
                                 " (power scales grow as s^n / q^(n-1)); bring the input to a scale <= q_level, "
                                 "or ask for a larger target scale");
  }

  // Floating-point products/quotients of scales are a few ulps off the exact target; re-tag only those.
  static void retag(Ciphertext& c, double scale) {
    if (std::fabs(c.scale / scale - 1.0) > 1e-9)
      fail(ErrorKind::Scale, "polynomial evaluation: internal scale drift " + log2s(c.scale) + " vs " +
                                 log2s(scale));
    c.scale = scale;
  }

  // p = L + B_m H with deg L < m.
  void split(const std::vector<double>& c, int m, std::vector<double>& low, std::vector<double>& high) const {
    const int deg = (int)c.size() - 1;
    low.assign(c.begin(), c.begin() + m);
    high.assign((size_t)(deg - m + 1), 0.0);
    if (basis_ == PolyBasis::Power) {
      for (int i = m; i <= deg; ++i) high[i - m] = c[i];
      return;
    }
    high[0] = c[m];
    for (int i = m + 1; i <= deg; ++i) {  // T_i = 2 T_m T_(i-m) - T_(2m-i)
      high[i - m] += 2.0 * c[i];
      low[2 * m - i] -= c[i];
    }
  }

  const Ciphertext& power(int n) {
    auto it = pw_.find(n);
    if (it != pw_.end()) return it->second;
    int a = 1;
    while (2 * a < n) a *= 2;  // largest power of two below n
    const int b = n - a;
    const Ciphertext& ta = power(a);
    const Ciphertext& tb = power(b);
    const int l = std::min(ta.level, tb.level);
    if (l < 1)
      fail(ErrorKind::Level, "polynomial evaluation: power " + std::to_string(n) + " needs a level below 0: not "
                                                                                    "enough levels for this degree");
    Ciphertext a_tmp, b_tmp;
    const Ciphertext* A = &at_level(ta, l, a_tmp);
    const Ciphertext& B = at_level(tb, l, b_tmp);
    // keep the product's scale near q_(l-1): an exact integer factor k on one operand (noise and scale grow
    // alike, so nothing is lost, and the rescale's rounding becomes relatively smaller)
    const double ql = (double)ctx_.modulus(l).q, qn = (double)ctx_.modulus(l - 1).q;
    const double natural = A->scale * B.scale / ql;
    double k = 1;
    if (natural < qn / 2) k = std::min(std::floor(qn / natural), 1152921504606846976.0 /* 2^60: 2k fits int64 */);
    const int64_t factor = (int64_t)k * (basis_ == PolyBasis::Chebyshev ? 2 : 1);
    if (factor != 1) {
      Ciphertext m = ev_.mul_integer(*A, factor);
      m.scale *= k;  // the 2 of 2 T_a T_b is part of the value
      a_tmp = std::move(m);
      A = &a_tmp;
    }
    const int c = basis_ == PolyBasis::Chebyshev ? a - b : 0;
    Ciphertext p;
    if (c == 0) {
      p = ev_.mul_relin_rescale(*A, B, *rlk_);
      if (basis_ == PolyBasis::Chebyshev) p = ev_.add_const_exact(p, -1.0);
    } else {  // 2 T_a T_b - T_c: T_c joins the product before its rescale (one rounding, as in hemlp/he/polynomial.py)
      p = ev_.mul(*A, B, rlk_);
      Ciphertext c_tmp;
      const Ciphertext& tcd = at_level(power(c), l, c_tmp);
      Ciphertext corr = ev_.mul_const(tcd, 1.0, p.scale / tcd.scale);
      ++stats.const_mul;
      retag(corr, p.scale);
      p = ev_.rescale(ev_.sub(p, corr));
    }
    ++stats.ct_mul;
    return pw_.emplace(n, std::move(p)).first->second;
  }

  // sum_i c_i B_i at (level, scale): every term multiplied by the exact integer round(c_i S q / s_i) at
  // level + 1 and accumulated in place, the constant term added at scale S q, then one rescale.
  Ciphertext linear_combination(const std::vector<double>& c, int level, double scale) {
    const int lv = level + 1;
    const size_t n = ctx_.n();
    const double big = scale * (double)ctx_.modulus(lv).q;
    std::vector<const Ciphertext*> terms;
    std::vector<std::vector<u64>> w;
    for (int i = 1; i < (int)c.size(); ++i) {
      if (c[i] == 0) continue;
      const Ciphertext& t = power(i);
      terms.push_back(&t);
      w.push_back(ev_.const_residues(c[i], big / t.scale, lv));
      ++stats.const_mul;
    }
    const std::vector<u64> w0 = ev_.const_residues(c[0], big, lv);
    const Ciphertext& x = pw_.at(1);
    Ciphertext acc;
    copy_metadata(acc, x);
    acc.key_id = x.key_id;
    acc.is_complex = x.is_complex;
    acc.level = lv;
    acc.scale = big;
    acc.polys.assign(2, Poly((size_t)(lv + 1) * n, 0));
#pragma omp parallel for schedule(static)
    for (int job = 0; job < 2 * (lv + 1); ++job) {
      const int j = job / (lv + 1), k = job % (lv + 1);
      const u64 q = ctx_.modulus(k).q;
      u64* d = acc.polys[j].data() + (size_t)k * n;
      for (size_t t = 0; t < terms.size(); ++t) {
        const u64 wk = w[t][k];
        if (wk == 0) continue;
        ring::add_mul_shoup_vec(d, terms[t]->polys[j].data() + (size_t)k * n, wk, ring::shoup_precompute(wk, q), q,
                                d, n);
      }
      if (j == 0 && w0[k] != 0)
        for (size_t i = 0; i < n; ++i) d[i] = ring::add_mod(d[i], w0[k], q);
    }
    Ciphertext out = ev_.rescale(acc);
    ++stats.rescale;
    retag(out, scale);
    return out;
  }

  const Context& ctx_;
  const Evaluator& ev_;
  const SwitchKey* rlk_;  // null only for degree <= 1
  PolyBasis basis_;
  int top_, baby_;
  std::map<int, Ciphertext> pw_;  // node-based: references stay valid while powers are added
};

}  // namespace

Ciphertext evaluate_polynomial(const Context& ctx, const Evaluator& ev, const Ciphertext& x,
                               const std::vector<double>& coeffs, PolyBasis basis, const SwitchKey* rlk,
                               double target_scale, int target_level, PolyEvalStats* stats) {
  if (x.param_hash != ctx.hash64())
    fail(ErrorKind::ContextMismatch, "polynomial evaluation: the ciphertext belongs to another parameter set");
  Evaluator::check_size2(x, "polynomial evaluation");
  if (x.encoding != Encoding::Slot)
    fail(ErrorKind::Encoding, "polynomial evaluation acts on slot-encoded ciphertexts only");
  if (basis != PolyBasis::Chebyshev && basis != PolyBasis::Power)
    fail(ErrorKind::Parameter, "polynomial evaluation: basis must be Chebyshev (0) or power (1)");
  for (double v : coeffs)
    if (!std::isfinite(v)) fail(ErrorKind::Encoding, "polynomial evaluation: a coefficient is NaN or infinite");
  const std::vector<double> c = trimmed(coeffs.empty() ? std::vector<double>{0.0} : coeffs);
  const int deg = (int)c.size() - 1;
  if (deg == 0)
    fail(ErrorKind::Encoding, "a constant polynomial has no ciphertext to evaluate; add the constant instead");
  const int need = poly_depth(deg);
  const int top = x.level;
  if (target_level < 0) target_level = top - need;
  if (target_level < 0 || target_level > top - need)
    fail(ErrorKind::Level, "a degree-" + std::to_string(deg) + " polynomial needs " + std::to_string(need) +
                               " levels but the ciphertext is at level " + std::to_string(top) +
                               (target_level < 0 ? ": " + std::to_string(need - top) + " level(s) missing"
                                                 : " and the target level " + std::to_string(target_level) +
                                                       " is above " + std::to_string(top - need)));
  if (!std::isfinite(target_scale) || !(target_scale > 0))
    fail(ErrorKind::Scale, "polynomial evaluation: the target scale must be positive and finite");
  if (deg >= 2) {
    if (!rlk)
      fail(ErrorKind::MissingKey, "polynomial evaluation needs a relinearisation key (relin_key)");
    if (rlk->param_hash != ctx.hash64())
      fail(ErrorKind::ContextMismatch, "polynomial evaluation: the relinearisation key belongs to another "
                                       "parameter set");
    check_key_level(*rlk, top, "polynomial evaluation (relinearisation)");
  }
  // An input far below the top prime would shrink every power's scale: lift it by an exact integer first.
  Ciphertext x0 = x;
  const double q_top = (double)ctx.modulus(top).q;
  if (x.scale < q_top / 2) {
    const double k = std::min(std::floor(q_top / x.scale), 4611686018427387904.0 /* 2^62 */);
    x0 = ev.mul_integer(x, (int64_t)k);
    x0.scale = x.scale * k;
  }
  const int t = std::max(need, 1);
  Runner run(ctx, ev, rlk, basis, std::move(x0), 1 << ((t + 1) / 2));
  Ciphertext out;
  double constant = 0;
  run.eval(c, target_level, target_scale, out, constant);
  if (stats) *stats = run.stats;
  return out;
}

}  // namespace hemlp::boot
