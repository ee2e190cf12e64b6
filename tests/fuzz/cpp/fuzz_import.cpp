// libFuzzer target: the native validated import of every serialised object (csrc/ckks/import.h) on hostile
// shapes, levels, metadata, seeds and residues, under AddressSanitizer + UndefinedBehaviorSanitizer.
//
// The context is tiny (fuzz_context.h), so that the fuzzer reaches the deep paths (NTT of a secret, seed
// expansion). Input: one byte picks the object kind, one byte of flags (bit 0: reduce the residues mod their
// primes, so the import gets past the range check; bit 3: ciphertexts through the batch import), then the fields,
// then the residues as 64-bit words, split into polynomials of `rows` rows. A hemlp::Error is the expected outcome
// of a bad input; any other exception aborts (a finding), as do sanitizer reports.
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <exception>
#include <vector>

#include "ckks/context.h"
#include "ckks/errors.h"
#include "ckks/import.h"
#include "fuzz_context.h"
#include "fuzz_input.h"

using namespace hemlp;

namespace {

using hemlp_fuzz::tiny_context;

// The residues as `count` polynomials of `rows` rows each (the columns: whatever the words give).
std::vector<PolyView> split(const Context& ctx, std::vector<uint64_t>& w, size_t count, size_t rows, bool reduce) {
  std::vector<PolyView> out;
  if (count == 0) return out;
  const size_t per = w.size() / count;
  for (size_t i = 0; i < count; ++i) {
    uint64_t* p = w.data() + i * per;
    const size_t cols = rows == 0 ? 0 : per / rows;
    if (reduce && cols > 0)
      for (size_t r = 0; r < rows; ++r) {
        // limb r's prime when the shape is right (Q then P in order); otherwise any prime of the chain
        const int idx = (int)(r % (size_t)(ctx.max_level() + 1 + ctx.num_p()));
        const uint64_t q = ctx.modulus(idx).q;
        for (size_t c = 0; c < cols; ++c) p[r * cols + c] %= q;
      }
    out.push_back(PolyView{per == 0 ? nullptr : p, rows, cols});
  }
  return out;
}

Seed seed_from(hemlp_fuzz::Input& in) {
  Seed s{};
  for (auto& b : s) b = in.take<uint8_t>();
  return s;
}

void one(const uint8_t* data, size_t size) {
  const Context& ctx = tiny_context();
  hemlp_fuzz::Input in(data, size);
  const uint8_t kind = in.take<uint8_t>() % 5;
  const uint8_t flags = in.take<uint8_t>();
  const bool reduce = flags & 1;
  switch (kind) {
    case 0: {  // ciphertext
      const int level = in.take<int8_t>();
      const double scale = in.take<double>();
      const int slots = in.take<int32_t>();
      const int encoding = in.take<int8_t>();
      const size_t count = in.take<uint8_t>() % 5;
      const bool seeded = flags & 2;
      Seed s = seed_from(in);
      const size_t rows = in.take<uint8_t>() % 8;
      auto w = in.words();
      auto polys = split(ctx, w, count, rows, reduce);
      if (flags & 8) {  // the batch import (encrypted matrices and batch files): this record, then a copy one level down
        CiphertextRecord r;
        r.polys = polys;
        r.level = level;
        r.scale = scale;
        r.slots = slots;
        r.encoding = encoding;
        r.is_complex = flags & 4;
        r.key_id = 7;
        r.seeded = seeded;
        r.seed = s;
        CiphertextRecord lower = r;
        lower.level = level - 1;
        (void)import_ciphertexts(ctx, {r, lower});
      } else {
        (void)import_ciphertext(ctx, polys, level, scale, slots, encoding, flags & 4, 7, seeded ? &s : nullptr);
      }
      break;
    }
    case 1: {  // secret key
      std::vector<int8_t> c;
      while (in.left() > 0) {
        int8_t v = in.take<int8_t>();
        c.push_back(reduce ? (int8_t)(((v % 3) + 3) % 3 - 1) : v);
      }
      (void)import_secret_key(ctx, c.empty() ? nullptr : c.data(), c.size(), 7);
      break;
    }
    case 2: {  // public key
      const size_t rows = in.take<uint8_t>() % 8;
      auto w = in.words();
      auto polys = split(ctx, w, 2, rows, reduce);
      (void)import_public_key(ctx, polys[0], polys[1], 7);
      break;
    }
    case 3: {  // switching key (relinearisation, rotation, ModPack)
      const int level = in.take<int8_t>();
      const uint64_t galois = in.take<uint16_t>();
      const size_t digits = in.take<uint8_t>() % 6;
      const size_t nseeds = in.take<uint8_t>() % 6;
      std::vector<Seed> seeds;
      for (size_t i = 0; i < nseeds; ++i) seeds.push_back(seed_from(in));
      const size_t rows = in.take<uint8_t>() % 8;
      auto w = in.words();
      auto bs = split(ctx, w, digits, rows, reduce);
      (void)import_switch_key(ctx, bs, seeds, 7, galois, level);
      break;
    }
    default: {  // metadata of a ciphertext-like object (MSRLWE rows, PCMM inputs)
      const int level = in.take<int32_t>();
      const double scale = in.take<double>();
      const int slots = in.take<int32_t>();
      const int encoding = in.take<int32_t>();
      check_imported_metadata(ctx, level, scale, slots, encoding, "fuzz");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    one(data, size);
  } catch (const hemlp::Error&) {
    // the typed refusal a bad input must get
  } catch (const std::exception& e) {
    std::fprintf(stderr, "untyped exception from the native import: %s\n", e.what());
    std::abort();
  }
  return 0;
}
