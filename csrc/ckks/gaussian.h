// Exact discrete Gaussian over the integers for large sigma (decryption noise, IND-CPA-D).
//
// Canonne–Kamath–Steinke (NeurIPS 2020, "The Discrete Gaussian for Differential Privacy", Alg. 1–3):
// a discrete Laplace proposal with scale t = sigma + 1, accepted with probability exp(-(|y| - sigma^2/t)^2 / (2 sigma^2)).
// Every Bernoulli trial compares a uniform integer drawn by rejection with an exact rational, so the
// output follows N_Z(0, sigma^2) exactly (no floating point; the CDT sampler of sampler.h is only
// for sigma = 3.2). sigma is an integer in [1, 2^60]: a caller with a real sigma rounds up.
#pragma once
#include <cstddef>
#include <cstdint>

#include "ckks/sampler.h"

namespace hemlp {

class ExactGaussian {
 public:
  ExactGaussian(Prng& prng, uint64_t sigma);
  int64_t sample();
  uint64_t sigma() const { return sigma_; }

 private:
  Prng& prng_;
  uint64_t sigma_;
};

// out[i] ~ N_Z(0, sigma^2), independent, from a fresh OS-seeded stream.
void sample_exact_gaussian(uint64_t sigma, int64_t* out, size_t n);

}  // namespace hemlp
