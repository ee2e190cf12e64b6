// Standalone per-kernel timing of the ring kernels on the active SIMD path (HEMLP_SIMD=scalar|avx2|avx512),
// used to decide, kernel by kernel, whether the AVX2 version beats the scalar __int128 code. Build:
//   g++ -std=c++17 -O3 -Wall -Wextra -I csrc tests/cpp/bench_kernels.cpp csrc/ring/{ntt,primes,rns,vecops,keyip,simd}.cpp
//       -o /tmp/bench_kernels && for p in scalar avx2 avx512; do HEMLP_SIMD=$p /tmp/bench_kernels; done
// One thread; prints the best-of-R time per call in microseconds at N = 2^14.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "ring/keyip.h"
#include "ring/ntt.h"
#include "ring/primes.h"
#include "ring/rns.h"
#include "ring/simd.h"
#include "ring/vecops.h"

using namespace hemlp::ring;

namespace {
double best_us(const std::function<void()>& f, int inner = 20, int reps = 25) {
  double best = 1e30;
  f();
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < inner; ++k) f();
    const auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double, std::micro>(t1 - t0).count() / inner);
  }
  return best;
}
std::vector<uint64_t> rand_vec(size_t n, uint64_t q, std::mt19937_64& g) {
  std::vector<uint64_t> v(n);
  for (auto& x : v) x = g() % q;
  return v;
}
}  // namespace

int main() {
  const int log_n = 14;
  const size_t n = size_t(1) << log_n;
  std::mt19937_64 g(1);
  const auto qs = ntt_primes(50, log_n, 8);
  const uint64_t q = qs[0];
  const Modulus mq(q);
  NTTTables t(q, log_n);
  auto a = rand_vec(n, q, g), b = rand_vec(n, q, g), c = rand_vec(n, q, g), d = rand_vec(n, q, g);
  std::vector<uint64_t> o0(n), o1(n), o2(n);
  const uint64_t w = g() % q, wp = shoup_precompute(w, q);
  std::printf("path %s, N = 2^%d, 50-bit q, one thread (us per call)\n", simd_path_name(simd_path()), log_n);
  std::printf("  ntt_forward          %8.1f\n", best_us([&] { t.forward(a.data()); }));
  std::printf("  ntt_inverse          %8.1f\n", best_us([&] { t.inverse(a.data()); }));
  std::printf("  add_vec              %8.1f\n", best_us([&] { add_vec(a.data(), b.data(), q, o0.data(), n); }));
  std::printf("  sub_mul_shoup_vec    %8.1f\n",
              best_us([&] { sub_mul_shoup_vec(a.data(), b.data(), w, wp, q, c.data(), o0.data(), n); }));
  std::printf("  add_mul_shoup_vec    %8.1f\n",
              best_us([&] { add_mul_shoup_vec(a.data(), b.data(), w, wp, q, o0.data(), n); }));
  std::printf("  tensor_vec           %8.1f\n", best_us([&] {
                tensor_vec(a.data(), b.data(), c.data(), d.data(), mq, o0.data(), o1.data(), o2.data(), n);
              }));
  // base conversion 3 -> 4 primes (a ModUp digit of the N14 presets), centred
  std::vector<Modulus> from, to;
  for (int i = 0; i < 3; ++i) from.emplace_back(qs[i]);
  for (int i = 3; i < 7; ++i) to.emplace_back(qs[i]);
  BaseConverter bc(from, to, true);
  std::vector<std::vector<uint64_t>> in(3), out(4, std::vector<uint64_t>(n));
  for (int i = 0; i < 3; ++i) in[i] = rand_vec(n, qs[i], g);
  const uint64_t* ip[3] = {in[0].data(), in[1].data(), in[2].data()};
  uint64_t* op[4] = {out[0].data(), out[1].data(), out[2].data(), out[3].data()};
  std::printf("  base_convert 3->4    %8.1f\n", best_us([&] { bc.convert(ip, op, n); }));
  // key inner product of one limb, 3 digits, with and without a permutation
  const int beta = 3;
  std::vector<std::vector<uint64_t>> xs(beta), kb(beta), ka(beta);
  std::vector<const uint64_t*> xp(beta), kbp(beta), kap(beta);
  for (int i = 0; i < beta; ++i) {
    xs[i] = rand_vec(n, q, g), kb[i] = rand_vec(n, q, g), ka[i] = rand_vec(n, q, g);
    xp[i] = xs[i].data(), kbp[i] = kb[i].data(), kap[i] = ka[i].data();
  }
  std::vector<uint32_t> perm(n);
  for (size_t i = 0; i < n; ++i) perm[i] = (uint32_t)((i * 5 + 3) % n);
  for (const uint32_t* pm : {(const uint32_t*)nullptr, (const uint32_t*)perm.data()}) {
    const double us = best_us([&] {
      if (!key_inner_product_limb_simd(xp.data(), kbp.data(), kap.data(), beta, pm, 0, n, q, o0.data(), o1.data())) {
        // the scalar loop of ckks/keyswitch.cpp (key_inner_product), for comparison
        constexpr size_t kB = 512;
        unsigned __int128 acc0[kB], acc1[kB];
        for (size_t c0 = 0; c0 < n; c0 += kB) {
          for (int tt = 0; tt < beta; ++tt)
            for (size_t i = 0; i < kB; ++i) {
              const uint64_t xv = pm ? xp[tt][pm[c0 + i]] : xp[tt][c0 + i];
              const unsigned __int128 p0 = (unsigned __int128)xv * kbp[tt][c0 + i];
              const unsigned __int128 p1 = (unsigned __int128)xv * kap[tt][c0 + i];
              acc0[i] = tt ? acc0[i] + p0 : p0;
              acc1[i] = tt ? acc1[i] + p1 : p1;
            }
          for (size_t i = 0; i < kB; ++i) o0[c0 + i] = mq.reduce128(acc0[i]), o1[c0 + i] = mq.reduce128(acc1[i]);
        }
      }
    });
    std::printf("  key_ip %s  %8.1f\n", pm ? "(perm)       " : "             ", us);
  }
  return 0;
}
