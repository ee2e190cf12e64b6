// Canonical-embedding encoder: slot j <-> zeta^(5^j), zeta = exp(2 pi i / 2N), with
// sparse packing (n slots placed at stride N/(2n)), plus plain coefficient encoding.
#pragma once
#include <cstddef>
#include <complex>
#include <vector>

#include "ckks/objects.h"

namespace hemlp {

using cplx = std::complex<double>;

class Encoder {
 public:
  explicit Encoder(const Context& ctx);

  // z has at most `slots` values (padded with zeros); slots is a power of two <= N/2.
  Plaintext encode(const std::vector<cplx>& z, int slots, double scale, int level, bool is_complex) const;
  Plaintext encode_coeff(const std::vector<double>& x, double scale, int level) const;
  // Exact CRT of the plaintext (balanced Garner), returned as long double coefficients
  // divided by the scale.
  std::vector<long double> coefficients(const Plaintext& pt) const;
  std::vector<cplx> decode(const Plaintext& pt) const;
  std::vector<double> decode_coeff(const Plaintext& pt) const;

  // The special FFTs (exposed for tests): w (n values) -> slots, and the inverse.
  void special_fft(std::vector<cplx>& v) const;
  void special_ifft(std::vector<cplx>& v) const;

 private:
  void from_integers(const std::vector<long double>& m, Plaintext& pt) const;
  const Context& ctx_;
  std::vector<cplx> roots_;      // zeta^k, k in [0, 2N]
  std::vector<uint64_t> rot_group_;
};

}  // namespace hemlp
