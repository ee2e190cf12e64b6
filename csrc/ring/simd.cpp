#include "ring/simd.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "ckks/errors.h"

namespace hemlp::ring {

namespace {

bool cpu_has(SimdPath p) {
  if (p == SimdPath::Scalar) return true;
#if HEMLP_HAVE_AVX512_KERNELS
  __builtin_cpu_init();
  if (p == SimdPath::Avx2)
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2");
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

bool env_on(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

SimdPath detect() {
  const bool no512 = env_on("HEMLP_DISABLE_AVX512");
  const char* forced = std::getenv("HEMLP_SIMD");
  if (forced && *forced) {
    SimdPath p;
    if (!std::strcmp(forced, "scalar")) p = SimdPath::Scalar;
    else if (!std::strcmp(forced, "avx2")) p = SimdPath::Avx2;
    else if (!std::strcmp(forced, "avx512")) p = SimdPath::Avx512;
    else
      fail(ErrorKind::Parameter, std::string("HEMLP_SIMD=") + forced +
                                     " is not a SIMD path: use scalar, avx2 or avx512 (this CPU has: " +
                                     simd_available() + "), or unset it for the best available");
    if (!cpu_has(p))
      fail(ErrorKind::Parameter, std::string("HEMLP_SIMD=") + forced + " but this CPU (or build) lacks it; "
                                     "available: " + simd_available() + "; unset HEMLP_SIMD for the best available");
    if (p == SimdPath::Avx512 && no512)
      fail(ErrorKind::Parameter, "HEMLP_SIMD=avx512 contradicts HEMLP_DISABLE_AVX512; unset one of them");
    return p;
  }
  if (!no512 && cpu_has(SimdPath::Avx512)) return SimdPath::Avx512;
  if (cpu_has(SimdPath::Avx2)) return SimdPath::Avx2;
  return SimdPath::Scalar;
}

}  // namespace

SimdPath simd_path() {
  static const SimdPath p = detect();  // a throwing detect() is retried (and throws) at the next call
  return p;
}

const char* simd_path_name(SimdPath p) {
  switch (p) {
    case SimdPath::Avx512: return "avx512";
    case SimdPath::Avx2: return "avx2";
    default: return "scalar";
  }
}

const char* simd_available() {
  static const std::string s = std::string(cpu_has(SimdPath::Avx512) ? "avx512, " : "") +
                               (cpu_has(SimdPath::Avx2) ? "avx2, " : "") + "scalar";
  return s.c_str();
}

}  // namespace hemlp::ring
