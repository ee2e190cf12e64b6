// C++ test of csrc/ckks/scratch.cpp (the key-switching scratch pool), built and run by tests/cpp/test_cpp.py.
// Prints the failed checks and "N passed, N failed"; exits non-zero on any failure.
// SOURCES: csrc/ckks/scratch.cpp
#include <cstdio>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ckks/scratch.h"

using namespace hemlp;

namespace {

int g_pass = 0, g_fail = 0;
void check(bool ok, const std::string& what) {
  (ok ? g_pass : g_fail)++;
  if (!ok) std::printf("FAIL %s\n", what.c_str());
}

constexpr size_t kWord = sizeof(uint64_t);

void test_reuse() {
  ScratchPool pool;
  const uint64_t* first = nullptr;
  {
    ScratchBuf a(pool, 1000);
    check(a.size() == 1000, "a buffer has the requested size");
    for (size_t i = 0; i < a.size(); ++i) a[i] = i;  // every entry writable
    first = a.data();
  }
  check(pool.retained_buffers() == 1, "a released buffer is kept");
  check(pool.retained_bytes() >= 1000 * kWord, "its bytes are counted");
  {
    ScratchBuf b(pool, 800);  // fits in the kept one: no allocation
    check(b.data() == first && b.size() == 800, "the next request reuses the released buffer");
    check(pool.retained_buffers() == 0, "a buffer in use is not in the pool");
  }
  {
    ScratchBuf c(pool, 5000);  // too large for the kept one: a new buffer, the small one stays pooled
    check(c.data() != first && pool.retained_buffers() == 1, "a larger request allocates and leaves the small one");
  }
  check(pool.retained_buffers() == 2, "both are kept after release");
  {
    ScratchBuf d(pool, 900);
    check(d.data() == first, "the smallest buffer that fits is chosen");
  }
}

void test_bounds() {
  ScratchPool pool(2500 * kWord);
  {
    ScratchBuf a(pool, 1000), b(pool, 1000), c(pool, 2000);  // released c, b, a
  }
  check(pool.retained_bytes() <= 2500 * kWord, "the byte bound holds");
  check(pool.retained_buffers() == 1 && pool.retained_bytes() >= 2000 * kWord,
        "the smallest buffers are freed first (a large one serves any request)");
  pool.set_max_bytes(0);
  check(pool.retained_buffers() == 0 && pool.retained_bytes() == 0, "a zero bound frees everything");
  {
    ScratchBuf a(pool, 10);
  }
  check(pool.retained_buffers() == 0, "with a zero bound nothing is kept");
  pool.set_max_bytes(ScratchPool::kDefaultMaxBytes);
  {
    std::vector<ScratchBuf> many;
    for (size_t i = 0; i < ScratchPool::kMaxBuffers + 10; ++i) many.emplace_back(pool, 4);
  }
  check(pool.retained_buffers() == ScratchPool::kMaxBuffers, "the buffer-count bound holds");
  pool.clear();
  check(pool.retained_buffers() == 0 && pool.retained_bytes() == 0, "clear frees everything");
}

void test_moves() {
  ScratchPool pool;
  ScratchBuf a(pool, 100);
  const uint64_t* p = a.data();
  ScratchBuf b(std::move(a));
  check(b.data() == p && b.size() == 100, "a move keeps the buffer");
  ScratchBuf c(pool, 50);
  c = std::move(b);  // c's own buffer returns to the pool
  check(c.data() == p && pool.retained_buffers() == 1, "move assignment releases the overwritten buffer");
  ScratchBuf empty;
  check(empty.size() == 0, "a default buffer is empty");
  pool.clear();
  std::vector<ScratchBuf> v;
  v.emplace_back(pool, 10);
  v.emplace_back(pool, 20);
  v.emplace_back(pool, 30);  // vector growth moves them: each still returns once
  v.clear();
  check(pool.retained_buffers() == 3, "every moved buffer returns exactly once");
}

void test_threads() {
  // Equal sizes: any pooled buffer serves any request, so a new one is made only when the pool is empty,
  // and the pool never holds more buffers than the 4 threads x 2 held at once.
  ScratchPool pool;
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&pool] {
      for (int i = 0; i < 2000; ++i) {
        ScratchBuf a(pool, 128), b(pool, 128);
        a[0] = b[0] = (uint64_t)i;
      }
    });
  for (auto& t : ts) t.join();
  check(pool.retained_buffers() <= 8 && pool.retained_buffers() >= 2,
        "concurrent use of one size keeps at most the buffers in use at once");
  // Mixed sizes: a small pooled buffer cannot serve a larger request, so the count may grow, but only to the bounds.
  ScratchPool mixed(size_t(64) << 10);
  ts.clear();
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&mixed, t] {
      for (int i = 0; i < 2000; ++i) {
        ScratchBuf a(mixed, 64 + (size_t)((i * 7 + t) % 50)), b(mixed, 128);
        a[0] = b[0] = (uint64_t)i;
      }
    });
  for (auto& t : ts) t.join();
  check(mixed.retained_buffers() <= ScratchPool::kMaxBuffers && mixed.retained_bytes() <= (size_t(64) << 10),
        "concurrent use of mixed sizes stays within the pool's bounds");
}

}  // namespace

int main() {
  test_reuse();
  test_bounds();
  test_moves();
  test_threads();
  std::printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
