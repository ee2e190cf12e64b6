// The context the import and shared-key-file harnesses share: tiny (N = 16, three q primes, one P prime) so that a
// whole valid object fits in a few hundred bytes and the fuzzer reaches the deep paths.
#pragma once
#include "ckks/context.h"

namespace hemlp_fuzz {

inline const hemlp::Context& tiny_context() {
  static const hemlp::Params params([] {
    hemlp::ParamsSpec s;
    s.name = "fuzz-N16";
    s.log_n = 4;
    s.q_bits = {30, 25, 25};
    s.p_bits = {31};
    s.alpha = 2;
    return s;
  }());
  static const hemlp::Context ctx(params, hemlp::SecurityPolicy{0});
  return ctx;
}

}  // namespace hemlp_fuzz
