#include "ring/ntt.h"

#include "ring/primes.h"

namespace hemlp::ring {

NTTTables::NTTTables(uint64_t q, int log_n) : q_(q), log_n_(log_n), n_(size_t(1) << log_n) {
  psi_ = minimal_primitive_root_2n(q, log_n);
  const uint64_t psi_inv = inv_mod(psi_, q);
  w_.resize(n_); wp_.resize(n_); iw_.resize(n_); iwp_.resize(n_);
  uint64_t p = 1, pi = 1;
  std::vector<uint64_t> pw(n_), ipw(n_);
  for (size_t i = 0; i < n_; ++i) {
    pw[i] = p; ipw[i] = pi;
    p = (uint64_t)((u128)p * psi_ % q);
    pi = (uint64_t)((u128)pi * psi_inv % q);
  }
  for (size_t i = 0; i < n_; ++i) {
    uint32_t r = bit_reverse((uint32_t)i, log_n);
    w_[i] = pw[r]; wp_[i] = shoup_precompute(w_[i], q);
    iw_[i] = ipw[r]; iwp_[i] = shoup_precompute(iw_[i], q);
  }
  n_inv_ = inv_mod(n_ % q, q);
  n_inv_p_ = shoup_precompute(n_inv_, q);
}

void NTTTables::forward(uint64_t* a) const {
  const uint64_t q = q_, two_q = 2 * q;
  size_t t = n_;
  for (size_t m = 1; m < n_; m <<= 1) {
    t >>= 1;
    for (size_t i = 0; i < m; ++i) {
      const uint64_t W = w_[m + i], Wp = wp_[m + i];
      uint64_t* x = a + 2 * i * t;
      uint64_t* y = x + t;
      for (size_t j = 0; j < t; ++j) {
        uint64_t X = x[j];
        X = X >= two_q ? X - two_q : X;
        uint64_t T = mul_shoup_lazy(y[j], W, Wp, q);  // [0, 2q)
        x[j] = X + T;                                  // [0, 4q)
        y[j] = X - T + two_q;                          // [0, 4q)
      }
    }
  }
  for (size_t j = 0; j < n_; ++j) {
    uint64_t X = a[j];
    X = X >= two_q ? X - two_q : X;
    a[j] = X >= q ? X - q : X;
  }
}

void NTTTables::inverse(uint64_t* a) const {
  const uint64_t q = q_, two_q = 2 * q;
  size_t t = 1;
  for (size_t m = n_; m > 1; m >>= 1) {
    const size_t h = m >> 1;
    for (size_t i = 0; i < h; ++i) {
      const uint64_t W = iw_[h + i], Wp = iwp_[h + i];
      uint64_t* x = a + 2 * i * t;
      uint64_t* y = x + t;
      for (size_t j = 0; j < t; ++j) {
        uint64_t X = x[j], Y = y[j];  // both in [0, 2q)
        uint64_t U = X + Y;
        x[j] = U >= two_q ? U - two_q : U;
        y[j] = mul_shoup_lazy(X - Y + two_q, W, Wp, q);
      }
    }
    t <<= 1;
  }
  for (size_t j = 0; j < n_; ++j) a[j] = mul_shoup(a[j], n_inv_, n_inv_p_, q);
}

}  // namespace hemlp::ring
