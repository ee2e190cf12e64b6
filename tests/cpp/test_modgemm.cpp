// C++ test of csrc/pcmm/modgemm.cpp, built and run by tests/cpp/test_cpp.py (so by `make test`). By hand:
//   g++ -std=c++17 -O3 -fopenmp -Wall -Wextra -I csrc $(pkg-config --cflags openblas)
//       tests/cpp/test_modgemm.cpp csrc/pcmm/modgemm.cpp csrc/ring/simd.cpp $(pkg-config --libs openblas) -o /tmp/t
//   && /tmp/t   (HEMLP_SIMD=scalar|avx2|avx512 /tmp/t runs one SIMD path)
// Prints the failed checks and "N passed, N failed"; exits non-zero on any failure. --no-timing skips the
// timing smoke at the end (not a check; the test suite passes it).
// SOURCES: csrc/pcmm/modgemm.cpp csrc/ring/simd.cpp
#include <chrono>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "pcmm/modgemm.h"

using namespace hemlp::pcmm;

namespace {

int g_pass = 0, g_fail = 0;
void check(bool ok, const std::string& what) {
  (ok ? g_pass : g_fail)++;
  if (!ok) std::printf("FAIL %s\n", what.c_str());
}

// Largest prime < 2^bits that is 1 mod 2^17 (NTT-friendly), found by trial division-free Miller-Rabin.
uint64_t mulmod(uint64_t a, uint64_t b, uint64_t m) { return (unsigned __int128)a * b % m; }
uint64_t powmod(uint64_t a, uint64_t e, uint64_t m) {
  uint64_t r = 1 % m;
  for (; e; e >>= 1, a = mulmod(a, a, m))
    if (e & 1) r = mulmod(r, a, m);
  return r;
}
bool is_prime(uint64_t n) {
  if (n < 2) return false;
  for (uint64_t p : {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37})
    if (n % p == 0) return n == p;
  uint64_t d = n - 1;
  int s = 0;
  while (!(d & 1)) d >>= 1, ++s;
  for (uint64_t a : {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37}) {
    uint64_t x = powmod(a, d, n);
    if (x == 1 || x == n - 1) continue;
    bool comp = true;
    for (int i = 1; i < s && comp; ++i) {
      x = mulmod(x, x, n);
      if (x == n - 1) comp = false;
    }
    if (comp) return false;
  }
  return true;
}
uint64_t ntt_prime(int bits) {
  const uint64_t step = uint64_t(1) << 17;
  for (uint64_t q = ((uint64_t(1) << bits) / step) * step + 1; q > step; q -= step)
    if (q < (uint64_t(1) << bits) && is_prime(q)) return q;
  throw std::runtime_error("no prime");
}

struct Case {
  size_t d1, d2, n;
  int bU;
  uint64_t q;
};

// mode 0 random, 1 adversarial (X = q-1, U = +-2^bU alternating sign pattern), 2 all +2^bU, 3 all -2^bU.
bool run_case(const Case& c, int mode, std::mt19937_64& rng, const ModGemmConfig* cfg = nullptr) {
  std::vector<int64_t> U(c.d1 * c.d2);
  std::vector<uint64_t> X(c.d2 * c.n);
  const int64_t B = int64_t(1) << c.bU;
  for (size_t i = 0; i < U.size(); ++i) {
    if (mode == 0) U[i] = int64_t(rng() % uint64_t(2 * B + 1)) - B;
    else if (mode == 1) U[i] = ((i * 7 + i / 3) % 3 == 0) ? -B : B;
    else U[i] = mode == 2 ? B : -B;
  }
  for (auto& x : X) x = mode == 0 ? rng() % c.q : c.q - 1;
  std::vector<const uint64_t*> rows(c.d2);
  for (size_t k = 0; k < c.d2; ++k) rows[k] = X.data() + k * c.n;
  std::vector<uint64_t> C1(c.d1 * c.n, 0), C2(c.d1 * c.n, 1);
  ModGemmPlan plan(U.data(), c.d1, c.d2, c.bU);
  if (cfg) plan.apply(rows.data(), c.n, c.q, C1.data(), c.n, *cfg);
  else plan.apply(rows.data(), c.n, c.q, C1.data(), c.n);
  modgemm_ref(U.data(), c.d1, c.d2, rows.data(), c.n, c.q, C2.data(), c.n);
  return C1 == C2;
}

template <class F>
bool throws_invalid(F f) {
  try {
    f();
  } catch (const std::invalid_argument&) {
    return true;
  } catch (...) {
    return false;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  const bool timing = !(argc > 1 && std::string(argv[1]) == "--no-timing");
  std::mt19937_64 rng(12345);
  const int bits_list[] = {30, 40, 50, 60, 61};
  for (int bits : bits_list) {
    const uint64_t q = ntt_prime(bits);
    for (int bU : {0, 8, 18, 30, 45, 62}) {
      for (Case c : {Case{7, 33, 5, bU, q}, Case{1, 1, 1, bU, q}, Case{16, 300, 40, bU, q}}) {
        for (int mode = 0; mode < 4; ++mode) {
          ModGemmConfig cfg = choose_modgemm_config(c.d2, bU, q);
          check(run_case(c, mode, rng),
                "bits=" + std::to_string(bits) + " bU=" + std::to_string(bU) + " d=" + std::to_string(c.d1) + "x" +
                    std::to_string(c.d2) + "x" + std::to_string(c.n) + " mode=" + std::to_string(mode) +
                    " w=" + std::to_string(cfg.w) + " T=" + std::to_string(cfg.T) + " TU=" + std::to_string(cfg.TU));
        }
      }
    }
  }
  // Large K (K-blocking with the default config for big bU) and forced small blocks.
  {
    const uint64_t q = ntt_prime(61);
    for (int mode = 0; mode < 4; ++mode) check(run_case({3, 8192, 9, 40, q}, mode, rng), "K=8192 bU=40");
    ModGemmConfig f;
    f.w = 20;
    f.kb = 100;
    for (int mode = 0; mode < 4; ++mode) check(run_case({5, 1000, 17, 18, q}, mode, rng, &f), "forced kb=100");
    // Many blocks to exercise the int64 fold (kFoldEvery = 511): kb = 1 over d2 = 1500.
    f.kb = 1;
    for (int mode = 0; mode < 4; ++mode) check(run_case({2, 1500, 3, 18, q}, mode, rng, &f), "forced kb=1 fold");
  }
  // Fuzz w, u, kb against the reference.
  {
    int fuzz_fail = 0;
    for (int it = 0; it < 300; ++it) {
      const int bits = 3 + int(rng() % 59);
      uint64_t q = (uint64_t(1) << (bits - 1)) + (rng() % (uint64_t(1) << (bits - 1)));
      q |= 1;
      if (q >= (uint64_t(1) << 61) || q < 3) continue;
      const int bU = int(rng() % 63);
      Case c{1 + rng() % 9, 1 + rng() % 200, 1 + rng() % 20, bU, q};
      ModGemmConfig f;
      f.w = 2 + int(rng() % 50);
      f.u = int(rng() % (bU + 2));
      if (f.u == 1) f.u = 2;
      f.kb = rng() % 3 == 0 ? 0 : 1 + rng() % 64;
      ModGemmConfig r;
      try {
        r = check_modgemm_config(c.d2, bU, q, f);
      } catch (const std::invalid_argument&) {
        continue;  // inexact choice rejected: exactly what must happen
      }
      if (!run_case(c, int(rng() % 4), rng, &r)) {
        ++fuzz_fail;
        std::printf("fuzz fail q=%llu bU=%d w=%d u=%d kb=%zu\n", (unsigned long long)q, bU, r.w, r.u, r.kb);
      }
    }
    check(fuzz_fail == 0, "fuzz w/u/kb");
  }
  // Precondition violations throw.
  {
    int64_t U[4] = {1, 2, 3, 4};
    check(throws_invalid([&] { ModGemmPlan(U, 2, 2, 1); }), "|U| > 2^bU");
    check(throws_invalid([&] { ModGemmPlan(U, 0, 2, 3); }), "d1 = 0");
    check(throws_invalid([&] { ModGemmPlan(U, 2, 2, 63); }), "bU = 63");
    ModGemmPlan p(U, 2, 2, 3);
    uint64_t X[4] = {1, 2, 3, 4}, C[4];
    const uint64_t* rows[2] = {X, X + 2};
    check(throws_invalid([&] { p.apply(rows, 2, 4, C, 2); }), "q even");
    check(throws_invalid([&] { p.apply(rows, 2, uint64_t(1) << 61 | 1, C, 2); }), "q >= 2^61");
    check(throws_invalid([&] { p.apply(rows, 2, 3, C, 2); }), "residue >= q");
    check(throws_invalid([&] { p.apply(rows, 2, 101, C, 1); }), "ldc < n");
    ModGemmConfig f;
    f.w = 51;  // 2^(u-1) * 2^(w-1) = 2^3 * 2^50 = 2^53: no K-block is exact
    check(throws_invalid([&] { p.apply(rows, 2, (uint64_t(1) << 60) - 93, C, 2, f); }), "inexact w");
    ModGemmPlan big(std::vector<int64_t>(1 << 16, 1).data(), 1, 1 << 16, 18);
    f.w = 23;
    f.u = 0;
    f.kb = 1 << 13;  // 2^13 * 2^18 * 2^22 = 2^53: must be rejected (strict bound)
    check(throws_invalid([&] { big.check_config((uint64_t(1) << 60) - 93, f); }), "kb at the 2^53 edge");
    f.kb = (1 << 13) - 1;
    check(!throws_invalid([&] { big.check_config((uint64_t(1) << 60) - 93, f); }), "kb just below the edge");
  }
  // Documented choices.
  {
    auto c60 = choose_modgemm_config(4096, 18, ntt_prime(60));
    std::printf("d2=4096 bU=18 q60: w=%d T=%d TU=%d kb=%zu nblk=%zu\n", c60.w, c60.T, c60.TU, c60.kb, c60.nblk);
    auto c31 = choose_modgemm_config(4096, 8, ntt_prime(31));
    std::printf("d2=4096 bU=8 q31: w=%d T=%d TU=%d kb=%zu nblk=%zu\n", c31.w, c31.T, c31.TU, c31.kb, c31.nblk);
    check(c31.T == 1, "q < 2^32, bU = 8: one DGEMM");
  }
  // Timing smoke (not a check).
  if (timing) {
    const uint64_t q = ntt_prime(60);
    const size_t d = 1024, n = 8192;
    std::vector<int64_t> U(d * d);
    std::vector<uint64_t> X(d * n), C(d * n);
    for (auto& v : U) v = int64_t(rng() % (1 << 19)) - (1 << 18);
    for (auto& x : X) x = rng() % q;
    std::vector<const uint64_t*> rows(d);
    for (size_t k = 0; k < d; ++k) rows[k] = X.data() + k * n;
    ModGemmPlan plan(U.data(), d, d, 18);
    for (int rep = 0; rep < 3; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      plan.apply(rows.data(), n, q, C.data(), n);
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("timing d=%zu n=%zu q60: %.3f s (%.1f GMAC-equiv/s)\n", d, n, s, double(d) * d * n / s * 1e-9);
    }
  }
  std::printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
