// Negacyclic NTT over Z_q[X]/(X^N+1) with Harvey lazy butterflies.
// Forward: natural-order input, bit-reversed output, NTT(a)_j = a(psi^(2 brv(j) + 1)).
// Inverse: Gentleman-Sande, bit-reversed input, natural output, scaled by N^-1.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ring/modarith.h"

namespace hemlp::ring {

inline uint32_t bit_reverse(uint32_t x, int bits) {
  uint32_t r = 0;
  for (int i = 0; i < bits; ++i) { r = (r << 1) | (x & 1); x >>= 1; }
  return r;
}

class NTTTables {
 public:
  NTTTables(uint64_t q, int log_n);
  void forward(uint64_t* a) const;  // in place, input in [0, q), output in [0, q)
  void inverse(uint64_t* a) const;  // in place, input in [0, q), output in [0, q)
  uint64_t q() const { return q_; }
  uint64_t psi() const { return psi_; }
  int log_n() const { return log_n_; }
  // true when the double-precision kernels run this prime (AVX2: ~2.4x cheaper than the integer ones):
  // parallel loops over limbs start the others first
  bool double_precision() const { return fp_; }

 private:
  uint64_t q_, psi_;
  int log_n_;
  size_t n_;
  std::vector<uint64_t> w_, wp_;        // psi^brv(i)
  std::vector<uint64_t> iw_, iwp_;      // psi^-brv(i)
  uint64_t n_inv_, n_inv_p_;
  uint64_t iw1n_, iw1n_p_;  // psi^-brv(1) * N^-1 (last inverse stage fused with the scaling)
  int simd_ = 0;            // kernels: 0 scalar, 1 AVX2, 2 AVX-512 (ring::SimdPath, ring/simd.h)
  // AVX2 / AVX-512 double-precision kernels for primes below 2^46 (ntt.cpp): the twiddles as doubles and
  // their quotients w / q rounded to double; the integer tables above are then released
  bool fp_ = false;
  std::vector<double> fw_, fwq_, fiw_, fiwq_;
  double fninv_[2] = {0, 0}, fw1n_[2] = {0, 0};  // (N^-1, N^-1 / q), (iw1n_, iw1n_ / q) as doubles
};

}  // namespace hemlp::ring
