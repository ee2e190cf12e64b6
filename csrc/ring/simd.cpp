#include "ring/simd.h"

#include <cstdlib>

namespace hemlp::ring {

namespace {
bool detect() {
  const char* env = std::getenv("HEMLP_DISABLE_AVX512");
  if (env && *env && !(env[0] == '0' && env[1] == '\0')) return false;
#if HEMLP_HAVE_AVX512_KERNELS
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}
}  // namespace

bool simd_avx512() {
  static const bool on = detect();
  return on;
}

}  // namespace hemlp::ring
