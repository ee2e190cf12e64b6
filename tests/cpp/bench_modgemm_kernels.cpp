// Standalone timing of the modular GEMM's per-element loops (digit split, int64 accumulation and
// fold, recombination) on the active SIMD path (HEMLP_SIMD=scalar|avx2|avx512), without the DGEMM.
// Includes modgemm.cpp to reach its internal kernels. Build:
//   g++ -std=c++17 -O3 -Wall -Wextra -Wno-unknown-pragmas -I csrc -I /usr/include/x86_64-linux-gnu/openblas-pthread
//       tests/cpp/bench_modgemm_kernels.cpp csrc/ring/simd.cpp -lopenblas -o /tmp/bmk
//   for p in scalar avx2 avx512; do HEMLP_SIMD=$p /tmp/bmk; done
// Times are thread CPU time (less sensitive to other processes), best of R, ns per element.
#include <time.h>

#include <cstdio>
#include <functional>
#include <random>

#include "../../csrc/pcmm/modgemm.cpp"

using namespace hemlp::pcmm;

namespace {
double cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}
double best_ns(const std::function<void()>& f, size_t elems, int inner = 50, int reps = 30) {
  double best = 1e30;
  f();
  for (int r = 0; r < reps; ++r) {
    const double t0 = cpu_s();
    for (int k = 0; k < inner; ++k) f();
    best = std::min(best, (cpu_s() - t0) / inner);
  }
  return best * 1e9 / elems;
}
}  // namespace

int main() {
  const uint64_t q = (uint64_t(1) << 50) - 27;  // odd; the loops do not need a prime
  const size_t m = kChunk;
  std::mt19937_64 g(3);
  std::vector<uint64_t> x(m), sum(m, 0);
  std::vector<double> c(m), xd(4 * m);
  std::vector<int64_t> acc(m);
  for (auto& v : x) v = g() % q;
  for (auto& v : c) v = (double)((int64_t)(g() >> 11) - (int64_t(1) << 52));  // |c| < 2^53
  for (auto& v : acc) v = (int64_t)(g() >> 3) - (int64_t(1) << 60);
  const int w = 17, T = 3;
  SplitParams sp;
  sp.q = q; sp.halfq = q >> 1; sp.w = w; sp.T = T; sp.plane = m; sp.hw = uint64_t(1) << (w - 1);
  sp.maskw = (uint64_t(1) << w) - 1;
  uint64_t H = 0;
  for (int t = 0; t + 1 < T; ++t) H += sp.hw << (w * t);
  sp.ctop = uint64_t(1) << std::max(0, 50 - 1 - w * (T - 1));
  sp.off = H + (sp.ctop << (w * (T - 1)));
  const uint64_t p = (uint64_t(1) << 40) % q;
  const Shoup ps = make_shoup(p, q), one = make_shoup(1, q);
  const double pr = (double)((long double)p / (long double)q);
  const uint64_t r64 = (uint64_t)(((unsigned __int128)1 << 64) % q);
  const char* names[] = {"scalar", "avx2", "avx512"};
  std::printf("path %s (modgemm kernels %s), ns per element, 50-bit q\n",
              hemlp::ring::simd_path_name(hemlp::ring::simd_path()), names[(int)kernel_path()]);
  std::printf("  split_chunk (T=3)    %6.2f\n", best_ns([&] { split_chunk(x.data(), m, xd.data(), sp); }, m));
  std::printf("  accumulate_row       %6.2f\n", best_ns([&] { accumulate_row(c.data(), acc.data() , m, true); }, m));
  std::vector<int64_t> a2(acc);
  std::printf("  fold_row             %6.2f\n", best_ns([&] { a2 = acc; fold_row(a2.data(), m, one, q, r64); }, m));
  std::printf("  reduce_term_fast     %6.2f\n", best_ns([&] { reduce_term_fast(c.data(), m, p, pr, q, sum.data()); }, m));
  for (auto& v : acc) v >>= 2;  // |a + c| < 2^63
  std::printf("  reduce_term_acc      %6.2f\n",
              best_ns([&] { reduce_term_acc(c.data(), acc.data(), m, ps, q, r64, sum.data()); }, m));
  return 0;
}
