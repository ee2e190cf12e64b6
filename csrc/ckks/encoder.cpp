#include "ckks/encoder.h"

#include <cmath>
#include <string>

#include "ckks/errors.h"
#include "ring/ntt.h"

namespace hemlp {

namespace {
void bit_reverse_inplace(std::vector<cplx>& v) {
  const size_t n = v.size();
  for (size_t i = 1, j = 0; i < n; ++i) {
    size_t bit = n >> 1;
    for (; j & bit; bit >>= 1) j ^= bit;
    j ^= bit;
    if (i < j) std::swap(v[i], v[j]);
  }
}

bool is_pow2(long x) { return x > 0 && (x & (x - 1)) == 0; }
}  // namespace

Encoder::Encoder(const Context& ctx) : ctx_(ctx) {
  const size_t m = 2 * ctx.n();
  roots_.resize(m + 1);
  for (size_t k = 0; k <= m; ++k) {
    long double ang = 2.0L * 3.14159265358979323846264338327950288L * (long double)k / (long double)m;
    roots_[k] = cplx((double)cosl(ang), (double)sinl(ang));
  }
  rot_group_.resize(ctx.n() / 2);
  uint64_t g = 1;
  for (auto& r : rot_group_) { r = g; g = (g * 5) % m; }
}

void Encoder::special_fft(std::vector<cplx>& v) const {
  const size_t n = v.size(), m = 2 * ctx_.n();
  bit_reverse_inplace(v);
  for (size_t len = 2; len <= n; len <<= 1) {
    const size_t lenh = len >> 1, lenq = len << 2, stride = m / lenq;
    for (size_t i = 0; i < n; i += len)
      for (size_t j = 0; j < lenh; ++j) {
        const size_t idx = (rot_group_[j] & (lenq - 1)) * stride;  // lenq: a power of two
        cplx u = v[i + j], w = v[i + j + lenh] * roots_[idx];
        v[i + j] = u + w;
        v[i + j + lenh] = u - w;
      }
  }
}

void Encoder::special_ifft(std::vector<cplx>& v) const {
  const size_t n = v.size(), m = 2 * ctx_.n();
  for (size_t len = n; len >= 2; len >>= 1) {
    const size_t lenh = len >> 1, lenq = len << 2, stride = m / lenq;
    for (size_t i = 0; i < n; i += len)
      for (size_t j = 0; j < lenh; ++j) {
        const size_t idx = (lenq - (rot_group_[j] & (lenq - 1))) * stride;  // lenq: a power of two
        cplx u = v[i + j] + v[i + j + lenh];
        cplx w = (v[i + j] - v[i + j + lenh]) * roots_[idx];
        v[i + j] = u;
        v[i + j + lenh] = w;
      }
  }
  bit_reverse_inplace(v);
  const double inv = 1.0 / (double)n;
  for (auto& x : v) x *= inv;
}

void Encoder::from_integers(const std::vector<long double>& m, Plaintext& pt) const {
  const size_t n = ctx_.n();
  const int limbs = pt.level + 1;
  long double mx = 0;
  for (auto x : m) {
    if (!std::isfinite((double)x)) fail(ErrorKind::Encoding, "cannot encode NaN or infinity");
    mx = std::max(mx, fabsl(x));
  }
  double log_q = 0;
  for (int i = 0; i < limbs; ++i) log_q += std::log2((double)ctx_.modulus(i).q);
  if (mx > 0 && std::log2((double)mx) >= log_q - 1)
    fail(ErrorKind::Encoding,
         "values too large for the scale: the largest encoded coefficient is 2^" +
             std::to_string(std::log2((double)mx)) + " but the modulus at level " + std::to_string(pt.level) +
             " is 2^" + std::to_string(log_q) + "; lower the scale or normalise the inputs");
  pt.data.assign((size_t)limbs * n, 0);
  const bool small = mx < 9.0e18L;  // fits in int64
  // small: each coefficient's magnitude and sign once (the long double conversion is slow), then per limb a division
  // only for magnitudes >= q (rare at the usual scales) and a branch-free negation
  std::vector<uint64_t> mag(small ? n : 0);
  std::vector<uint8_t> negative(small ? n : 0);
  if (small)
    for (size_t c = 0; c < n; ++c) {
      const int64_t v = (int64_t)m[c];
      negative[c] = v < 0;
      mag[c] = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    }
#pragma omp parallel for schedule(static)
  for (int i = 0; i < limbs; ++i) {
    const uint64_t q = ctx_.modulus(i).q;
    uint64_t* dst = pt.data.data() + (size_t)i * n;
    for (size_t c = 0; c < n; ++c) {
      if (small) {
        const uint64_t r = mag[c] < q ? mag[c] : mag[c] % q;
        const uint64_t neg = (uint64_t)0 - (uint64_t)(negative[c] & (r != 0));
        dst[c] = r ^ ((r ^ (q - r)) & neg);  // -r mod q for a negative coefficient
      } else {
        long double r = fmodl(m[c], (long double)q);  // exact
        if (r < 0) r += (long double)q;
        dst[c] = (uint64_t)r;
      }
    }
    ctx_.ntt(i).forward(dst);
  }
}

Plaintext Encoder::encode(const std::vector<cplx>& z, int slots, double scale, int level, bool is_complex) const {
  const size_t n = ctx_.n();
  if (!is_pow2(slots) || (size_t)slots > n / 2)
    fail(ErrorKind::Encoding, "slots must be a power of two <= N/2 = " + std::to_string(n / 2));
  if (z.size() > (size_t)slots)
    fail(ErrorKind::Encoding, "too many values: " + std::to_string(z.size()) + " > " + std::to_string(slots) +
                                  " slots; split the data over several ciphertexts");
  if (!(scale > 0) || !std::isfinite(scale)) fail(ErrorKind::Encoding, "scale must be positive and finite");
  if (level < 0 || level > ctx_.max_level())
    fail(ErrorKind::Level, "level " + std::to_string(level) + " outside [0, " + std::to_string(ctx_.max_level()) + "]");
  std::vector<cplx> w(slots, cplx(0, 0));
  for (size_t i = 0; i < z.size(); ++i) w[i] = z[i];
  special_ifft(w);
  const size_t gap = (n / 2) / slots;
  std::vector<long double> m(n, 0.0L);
  for (int i = 0; i < slots; ++i) {
    m[i * gap] = roundl((long double)w[i].real() * (long double)scale);
    m[n / 2 + i * gap] = roundl((long double)w[i].imag() * (long double)scale);
  }
  Plaintext pt;
  pt.param_hash = ctx_.hash64();
  pt.level = level;
  pt.scale = scale;
  pt.slots = slots;
  pt.encoding = Encoding::Slot;
  pt.is_complex = is_complex;
  from_integers(m, pt);
  return pt;
}

Plaintext Encoder::encode_coeff(const std::vector<double>& x, double scale, int level) const {
  const size_t n = ctx_.n();
  if (x.size() > n)
    fail(ErrorKind::Encoding, "too many values for coefficient encoding: " + std::to_string(x.size()) + " > N = " +
                                  std::to_string(n));
  if (!(scale > 0) || !std::isfinite(scale)) fail(ErrorKind::Encoding, "scale must be positive and finite");
  if (level < 0 || level > ctx_.max_level()) fail(ErrorKind::Level, "level outside the modulus chain");
  std::vector<long double> m(n, 0.0L);
  for (size_t i = 0; i < x.size(); ++i) m[i] = roundl((long double)x[i] * (long double)scale);
  Plaintext pt;
  pt.param_hash = ctx_.hash64();
  pt.level = level;
  pt.scale = scale;
  pt.slots = (int)n;
  pt.encoding = Encoding::Coeff;
  from_integers(m, pt);
  return pt;
}

std::vector<long double> Encoder::coefficients(const Plaintext& pt) const {
  const size_t n = ctx_.n();
  const int L = pt.level;
  Poly data = pt.data;
  ctx_.intt_limbs(data.data(), L, L + 1, false);
  // Balanced mixed-radix (Garner) digits give the centred lift exactly.
  std::vector<u64> inv_prefix(L + 1, 1);  // [q_0 ... q_{i-1}]^-1 mod q_i
  for (int i = 1; i <= L; ++i) {
    const Modulus& qi = ctx_.modulus(i);
    u64 prod = 1;
    for (int k = 0; k < i; ++k) prod = qi.mul(prod, ctx_.modulus(k).q % qi.q);
    inv_prefix[i] = ring::inv_mod(prod, qi.q);
  }
  std::vector<long double> out(n);
  const long double inv_scale = 1.0L / (long double)pt.scale;
#pragma omp parallel
  {
    std::vector<int64_t> d(L + 1);
#pragma omp for schedule(static)
    for (long c = 0; c < (long)n; ++c) {
      for (int i = 0; i <= L; ++i) {
        const Modulus& qi = ctx_.modulus(i);
        u64 s = 0;  // sum_{k<i} d_k * q_0..q_{k-1} mod q_i, by Horner from the top
        for (int k = i - 1; k >= 0; --k) {
          s = qi.mul(s, ctx_.modulus(k).q % qi.q);
          int64_t dk = d[k] % (int64_t)qi.q;
          s = ring::add_mod(s, (u64)(dk < 0 ? dk + (int64_t)qi.q : dk), qi.q);
        }
        u64 x = data[(size_t)i * n + c];
        u64 di = qi.mul(ring::sub_mod(x, s, qi.q), inv_prefix[i]);
        d[i] = di > qi.q / 2 ? (int64_t)di - (int64_t)qi.q : (int64_t)di;
      }
      long double v = 0;
      for (int k = L; k >= 0; --k) v = v * (long double)ctx_.modulus(k).q + (long double)d[k];
      out[c] = v * inv_scale;
    }
  }
  return out;
}

std::vector<cplx> Encoder::decode(const Plaintext& pt) const {
  if (pt.encoding != Encoding::Slot)
    fail(ErrorKind::Encoding, "this plaintext is coefficient-encoded; decode it with decode_coeff");
  const size_t n = ctx_.n();
  auto m = coefficients(pt);
  const size_t gap = (n / 2) / pt.slots;
  std::vector<cplx> w(pt.slots);
  for (int i = 0; i < pt.slots; ++i) w[i] = cplx((double)m[i * gap], (double)m[n / 2 + i * gap]);
  special_fft(w);
  return w;
}

std::vector<double> Encoder::decode_coeff(const Plaintext& pt) const {
  auto m = coefficients(pt);
  return std::vector<double>(m.begin(), m.end());
}

}  // namespace hemlp
