// libFuzzer target: opening node-local shared key files (csrc/ckks/shared_key_file.h) that are truncated, extended,
// mutated or made up, under AddressSanitizer + UndefinedBehaviorSanitizer.
//
// The header's SHA-256 stops almost every mutation at the door, so the harness can reseal it (and fix the size
// field) after mutating: the record, seed and section checks behind it then meet the mutations, as they would meet
// a file a buggy or hostile writer produced. Input: one byte of flags, then the body. Flags & 3: 0 = XOR (u16
// offset, u8 value) pairs into a valid file of every record kind (header, records, seeds, meta), 1 = truncate or
// extend that file to a u32 size, 2 / 3 = the body is the whole file. Bit 2: set the size field to the file's size;
// bit 3: reseal the header hash; bit 4: expect the file's key id. Every key, batched key and array an open file
// yields must lie inside its mapping (checked word by word at both ends); a hemlp::Error is the expected outcome of
// a bad file, anything else aborts.
#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "ckks/context.h"
#include "ckks/errors.h"
#include "ckks/keygen.h"
#include "ckks/shared_key_file.h"
#include "fuzz_context.h"
#include "fuzz_input.h"

using namespace hemlp;

namespace {

// the header fields the harness repairs (csrc/ckks/shared_key_file.cpp, FileHeader)
constexpr size_t kHeader = 256, kDataOffset = 96, kFileBytes = 104, kHeaderHash = 144;
constexpr uint64_t kKeyId = 7;

using hemlp_fuzz::tiny_context;

std::string scratch_path() { return "/tmp/hemlp_fuzz_shared_keys." + std::to_string(::getpid()); }

std::vector<uint8_t> read_all(const std::string& path) {
  std::vector<uint8_t> out;
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    uint8_t buf[4096];
    size_t got;
    while ((got = std::fread(buf, 1, sizeof buf, f)) > 0) out.insert(out.end(), buf, buf + got);
    std::fclose(f);
  }
  return out;
}

void write_all(const std::string& path, const std::vector<uint8_t>& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) std::abort();
  std::fclose(f);
}

KeyPolys zeros(size_t digits, size_t words) { return KeyPolys(std::vector<Poly>(digits, Poly(words, 1))); }

// One file holding a relinearisation key (a held), a seeded rotation key, a batched key of 2 parts and an array.
const std::vector<uint8_t>& valid_file() {
  static const std::vector<uint8_t> bytes = [] {
    const Context& ctx = tiny_context();
    const int L = ctx.max_level(), K = ctx.num_p();
    auto key = [&](uint64_t galois, int level, bool seeded) {
      const size_t digits = (size_t)ctx.params().num_digits(level), rows = (size_t)(level + 1 + K);
      SwitchKey k;
      k.param_hash = ctx.hash64();
      k.key_id = kKeyId;
      k.galois = galois;
      k.level = level;
      k.b = zeros(digits, rows * ctx.n());
      if (!seeded) k.a = zeros(digits, rows * ctx.n());
      k.a_seeds.assign(digits, Seed{});
      if (seeded) k.a_offsets.assign(digits, std::vector<uint64_t>(rows * kSeedSegments, 3));
      return k;
    };
    static const SwitchKey relin = key(0, L, false), rot = key(3, 1, true);
    const size_t digits = (size_t)ctx.params().num_digits(0), rows = (size_t)(1 + K);
    static const std::vector<KeyPolys> parts = {zeros(digits, rows * ctx.n()), zeros(digits, rows * ctx.n())};
    static const KeyPolys no_a;
    static const std::vector<Seed> seeds(digits);
    static const std::vector<std::vector<uint64_t>> offsets(digits, std::vector<uint64_t>(rows * kSeedSegments));
    static const std::vector<u64> array(2 * ctx.n(), 5);
    SharedKeyWriter w(ctx, kKeyId);
    w.add_switch_key(1, relin);
    w.add_switch_key(2, rot);
    w.add_multi_key(9, 11, 5, 0, parts, no_a, seeds, offsets);
    w.add_array(6, array.data(), 2);
    const std::string path = scratch_path() + ".valid";
    w.write(path, "{\"meta\": true}");
    std::vector<uint8_t> b = read_all(path);
    ::unlink(path.c_str());
    return b;
  }();
  return bytes;
}

template <class T>
T field(const std::vector<uint8_t>& b, size_t at) {
  T v{};
  std::memcpy(&v, b.data() + at, sizeof v);
  return v;
}

void reseal(std::vector<uint8_t>& b) {
  const uint64_t data_offset = field<uint64_t>(b, kDataOffset);
  if (data_offset < kHeader || data_offset > b.size()) return;
  std::memset(b.data() + kHeaderHash, 0, 32);
  unsigned char md[32];
  unsigned int len = 0;
  EVP_Digest(b.data(), data_offset, md, &len, EVP_sha256(), nullptr);
  std::memcpy(b.data() + kHeaderHash, md, 32);
}

void inside(const SharedKeyFile& f, const u64* p, size_t words) {
  const uint8_t* base = f.mapping()->data();
  const uint8_t* lo = reinterpret_cast<const uint8_t*>(p);
  if (words == 0 || lo < base || lo + words * sizeof(u64) > base + f.size()) {
    std::fprintf(stderr, "a key polynomial outside its mapping\n");
    std::abort();
  }
  volatile u64 sink = p[0] ^ p[words - 1];
  (void)sink;
}

void check_polys(const SharedKeyFile& f, const KeyPolys& ps) {
  for (size_t t = 0; t < ps.size(); ++t) inside(f, ps.data(t), ps.words(t));
}

template <class F>
void attempt(F fn) {
  try {
    fn();
  } catch (const Error&) {
  }
}

void one(const uint8_t* data, size_t size) {
  hemlp_fuzz::Input in(data, size);
  const uint8_t flags = in.take<uint8_t>();
  std::vector<uint8_t> b = valid_file();
  if ((flags & 3) == 0) {
    const size_t span = std::min(b.size(), (size_t)field<uint64_t>(b, kDataOffset) + 64);
    while (in.left() >= 3) {
      const uint16_t at = in.take<uint16_t>();
      b[at % span] ^= in.take<uint8_t>();
    }
  } else if ((flags & 3) == 1) {
    b.resize(in.take<uint32_t>() % (2 * b.size() + 1));
  } else {
    b.assign(data + 1, data + size);
  }
  if ((flags & 4) && b.size() >= kHeader) {
    const uint64_t n = b.size();
    std::memcpy(b.data() + kFileBytes, &n, sizeof n);
  }
  if ((flags & 8) && b.size() >= kHeader) reseal(b);
  const std::string path = scratch_path();
  write_all(path, b);
  std::shared_ptr<SharedKeyFile> f = SharedKeyFile::open(tiny_context(), path, (flags & 16) ? kKeyId : 0);
  ::unlink(path.c_str());
  for (uint32_t g = 0; g < 16; ++g) {
    if (!f->has_group(g)) continue;
    attempt([&] {
      for (const SwitchKey& k : f->switch_keys(g)) {
        check_polys(*f, k.b);
        check_polys(*f, k.a);
      }
    });
    attempt([&] { f->galois_keys(g); });
    attempt([&] {
      for (const SharedKeyRecord& r : f->multi_keys(g)) {
        for (const KeyPolys& bj : r.b) check_polys(*f, bj);
        check_polys(*f, r.a);
      }
    });
    attempt([&] {
      for (const auto& [p, rows] : f->arrays(g)) inside(*f, p, rows * f->n());
    });
  }
  if (flags & 32) attempt([&] { f->verify(); });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    one(data, size);
  } catch (const hemlp::Error&) {
    // the typed refusal a bad file must get
  } catch (const std::exception& e) {
    std::fprintf(stderr, "untyped exception from opening a shared key file: %s\n", e.what());
    std::abort();
  }
  ::unlink(scratch_path().c_str());
  return 0;
}
