// libFuzzer target: parameter sets from hostile bytes (what Params.from_bytes hands the core): ring degree,
// prime sizes and counts, digit size, scale, Hamming weight, sigma, then a Context under the strict (128-bit) or
// the test policy. A hemlp::Error is the expected refusal; any other exception aborts; the sanitizers watch the
// prime generation and the precomputation of NTT and base-conversion tables.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "ckks/context.h"
#include "ckks/errors.h"
#include "ckks/params.h"
#include "fuzz_input.h"

using namespace hemlp;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hemlp_fuzz::Input in(data, size);
  ParamsSpec s;
  s.name = "fuzz";
  s.log_n = in.take<int8_t>();
  // ring degrees above 2^12 cost more memory and time per input than they find: cap at 2^12 here (the bound
  // check itself, [4, 17], is exercised with any int8)
  if (s.log_n > 12 && s.log_n <= 17) s.log_n = 4 + s.log_n % 9;
  const int nq = in.take<uint8_t>() % 10;
  for (int i = 0; i < nq; ++i) s.q_bits.push_back(in.take<int8_t>());
  const int np = in.take<uint8_t>() % 4;
  for (int i = 0; i < np; ++i) s.p_bits.push_back(in.take<int8_t>());
  s.alpha = in.take<int8_t>();
  s.log_scale = in.take<double>();
  s.secret_hw = in.take<int16_t>();
  if (in.take<uint8_t>() & 1) s.sigma = in.take<double>();
  const int policy = in.take<uint8_t>() & 1 ? 0 : 128;
  try {
    Params p(s);
    (void)p.describe();
    (void)p.log_qp();
    Context ctx(p, SecurityPolicy{policy});
    (void)ctx.n();
  } catch (const hemlp::Error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "untyped exception from Params/Context: %s\n", e.what());
    std::abort();
  }
  return 0;
}
