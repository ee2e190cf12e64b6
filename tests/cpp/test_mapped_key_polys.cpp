// C++ test of csrc/ckks/mapped_file.cpp and csrc/ckks/key_polys.h (key polynomials borrowed from a read-only file
// mapping), built and run by tests/cpp/test_cpp.py. Prints the failed checks and "N passed, N failed"; exits
// non-zero on any failure.
// SOURCES: csrc/ckks/mapped_file.cpp
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "ckks/errors.h"
#include "ckks/key_polys.h"
#include "ckks/mapped_file.h"

using namespace hemlp;

namespace {

int g_pass = 0, g_fail = 0;
void check(bool ok, const std::string& what) {
  (ok ? g_pass : g_fail)++;
  if (!ok) std::printf("FAIL %s\n", what.c_str());
}

template <class F>
bool throws(ErrorKind kind, F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind() == kind;
  }
  return false;
}

std::string temp_file(const std::vector<u64>& words) {
  char name[] = "/tmp/hemlp_mapped_XXXXXX";
  const int fd = mkstemp(name);
  if (fd < 0) std::abort();
  const ssize_t want = (ssize_t)(words.size() * sizeof(u64));
  if (write(fd, words.data(), (size_t)want) != want) std::abort();
  close(fd);
  return name;
}

void test_owned() {
  KeyPolys p(std::vector<Poly>{Poly{1, 2, 3}, Poly{4, 5, 6}});
  check(!p.mapped() && p.size() == 2 && p.words(1) == 3 && p.data(1)[2] == 6, "owned polynomials are read in place");
  check(p.total_words() == 6, "total_words counts every digit");
  p.owned("test").push_back(Poly{7});
  check(p.size() == 3 && p.data(2)[0] == 7, "an owned set is writable");
  KeyPolys empty;
  check(empty.empty() && !empty.mapped() && empty.owner() == nullptr, "a default set is empty and owned");
}

void test_borrowed() {
  std::vector<u64> words(2048);
  for (size_t i = 0; i < words.size(); ++i) words[i] = i * 3 + 1;
  const std::string path = temp_file(words);
  std::weak_ptr<const MappedFile> watch;
  KeyPolys copy;
  {
    std::shared_ptr<const MappedFile> map = MappedFile::open(path, "test file");
    watch = map;
    check(map->size() == words.size() * sizeof(u64), "the whole file is mapped");
    const u64* base = reinterpret_cast<const u64*>(map->data());
    KeyPolys p(map, {base, base + 1024}, {1024, 1024});
    check(p.mapped() && p.size() == 2 && p.words(0) == 1024 && p.data(1)[5] == (1024 + 5) * 3 + 1,
          "borrowed polynomials read the file's words");
    check(throws(ErrorKind::ReadOnly, [&] { p.owned("test write"); }), "a borrowed set refuses writers");
    check(throws(ErrorKind::ReadOnly, [&] { p.check_owned("test write"); }), "check_owned refuses a borrowed set");
    try {
      p.owned("rotation key seeding");
    } catch (const Error& e) {
      check(std::string(e.what()).find("rotation key seeding: this key is memory-mapped read-only") == 0,
            "the error names the writer and why");
    }
    copy = p;  // a copy shares the pages and the mapping
    check(copy.data(0) == p.data(0), "a copy borrows the same pages");
  }
  unlink(path.c_str());
  check(!watch.expired() && copy.data(1)[1023] == 2047 * 3 + 1, "the mapping outlives its file and opener");
  copy = KeyPolys();
  check(watch.expired(), "the mapping goes with its last borrower");
  check(throws(ErrorKind::Parameter, [] { KeyPolys(nullptr, {nullptr}, {1}); }), "a borrowed set needs an owner");
}

void test_open_errors() {
  check(throws(ErrorKind::Serialization, [] { MappedFile::open("/nonexistent/hemlp/keys", "key file"); }),
        "a missing file is a Serialization error");
  const std::string path = temp_file({});
  auto map = MappedFile::open(path, "empty file");
  check(map->size() == 0 && map->data() == nullptr, "an empty file maps to nothing");
  unlink(path.c_str());
}

}  // namespace

int main() {
  test_owned();
  test_borrowed();
  test_open_errors();
  std::printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail == 0 ? 0 : 1;
}
