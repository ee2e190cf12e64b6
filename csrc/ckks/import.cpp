#include "ckks/import.h"

#include <cmath>
#include <exception>
#include <string>

#include "ckks/errors.h"
#include "ckks/keygen.h"

namespace hemlp {

Poly import_poly(const Context& ctx, PolyView a, int level, bool ext, const char* what) {
  if (level < 0 || level > ctx.max_level())
    fail(ErrorKind::Serialization, std::string(what) + ": level outside this context's modulus chain");
  const size_t n = ctx.n();
  const size_t limbs = (size_t)level + 1 + (ext ? ctx.num_p() : 0);
  if (a.data == nullptr || a.rows != limbs || a.cols != n)
    fail(ErrorKind::Serialization, std::string(what) + ": expected a (" + std::to_string(limbs) + ", " +
                                       std::to_string(n) + ") array of residues; the data is truncated or "
                                                           "belongs to other parameters");
  // one pass over the source: each limb is copied, then checked while it is still in cache (a memory-mapped
  // file is read once)
  Poly p;
  p.reserve(limbs * n);
  for (size_t k = 0; k < limbs; ++k) {
    const uint64_t q = ctx.modulus(ext ? ctx.qp_index(level, (int)k) : (int)k).q;
    p.insert(p.end(), a.data + k * n, a.data + (k + 1) * n);  // reserved: a plain copy, nothing zeroed first
    const uint64_t* d = p.data() + k * n;
    uint64_t bad = 0;
    for (size_t i = 0; i < n; ++i) bad |= (uint64_t)(d[i] >= q);
    if (bad) fail(ErrorKind::Serialization, std::string(what) + ": residue out of range; the data is corrupted");
  }
  return p;
}

void check_imported_metadata(const Context& ctx, int level, double scale, int slots, int encoding, const char* what) {
  const std::string w(what);
  if (level < 0 || level > ctx.max_level())
    fail(ErrorKind::Serialization, w + ": level outside this context's modulus chain");
  if (!(scale > 0) || !std::isfinite(scale)) fail(ErrorKind::Serialization, w + ": invalid scale");
  if (encoding != 0 && encoding != 1) fail(ErrorKind::Serialization, w + ": invalid encoding");
  const size_t n = ctx.n();
  if (encoding == 0 && (slots <= 0 || (slots & (slots - 1)) || (size_t)slots > n / 2))
    fail(ErrorKind::Serialization, w + ": invalid slot count");
  if (encoding == 1 && (slots <= 0 || (size_t)slots != n)) fail(ErrorKind::Serialization, w + ": invalid slot count");
}

SecretKey import_secret_key(const Context& ctx, const int8_t* coeffs, size_t count, uint64_t key_id) {
  if (coeffs == nullptr || count != ctx.n()) fail(ErrorKind::Serialization, "secret key: wrong number of coefficients");
  SecretKey sk;
  sk.param_hash = ctx.hash64();
  sk.key_id = key_id;
  sk.coeffs.assign(coeffs, coeffs + count);
  for (auto c : sk.coeffs)
    if (c < -1 || c > 1) fail(ErrorKind::Serialization, "secret key: coefficient outside {-1, 0, 1}; the data is corrupted");
  sk.ntt_qp = small_to_ntt_qp(ctx, sk.coeffs);
  return sk;
}

PublicKey import_public_key(const Context& ctx, PolyView b, PolyView a, uint64_t key_id) {
  PublicKey pk;
  pk.param_hash = ctx.hash64();
  pk.key_id = key_id;
  pk.b = import_poly(ctx, b, ctx.max_level(), false, "public key");
  pk.a = import_poly(ctx, a, ctx.max_level(), false, "public key");
  return pk;
}

SwitchKey import_switch_key(const Context& ctx, const std::vector<PolyView>& bs, const std::vector<Seed>& seeds,
                            uint64_t key_id, uint64_t galois, int level, bool seeded) {
  if (level < 0 || level > ctx.max_level())
    fail(ErrorKind::Serialization, "switching key: level " + std::to_string(level) + " outside this context's "
                                   "modulus chain [0, " + std::to_string(ctx.max_level()) + "]; the data is "
                                   "corrupted or belongs to other parameters");
  if (galois != 0 && (galois % 2 == 0 || galois >= 2 * ctx.n()))
    fail(ErrorKind::Serialization, "switching key: invalid Galois element; the data is corrupted");
  const int digits = ctx.params().num_digits(level);
  if ((int)bs.size() != digits || (int)seeds.size() != digits)
    fail(ErrorKind::Serialization, "switching key: " + std::to_string(bs.size()) + " digits, but a key for level " +
                                   std::to_string(level) + " has " + std::to_string(digits) +
                                   "; the data is corrupted");
  SwitchKey k;
  k.param_hash = ctx.hash64();
  k.key_id = key_id;
  k.galois = galois;
  k.level = level;
  const int total = level + 1 + ctx.num_p();
  std::vector<Poly>& kb = k.b.owned("switching key import");
  std::vector<Poly>& ka = k.a.owned("switching key import");
  for (int t = 0; t < digits; ++t) {
    if (bs[t].rows != (size_t)total)
      fail(ErrorKind::Serialization, "switching key: the header says level " + std::to_string(level) + " (" +
                                     std::to_string(total) + " limbs) but the data has " +
                                     std::to_string(bs[t].rows) + " limbs; the data is corrupted");
    kb.push_back(import_poly(ctx, bs[t], level, true, "switching key"));
    k.a_seeds.push_back(seeds[t]);
    if (!seeded) ka.push_back(uniform_from_seed(ctx, seeds[t], total, true, level));
  }
  if (seeded) drop_expanded_a(ctx, k);  // a is empty: this records the seeds' segment offsets
  return k;
}

GaloisKeys import_galois_keys(const Context& ctx, const std::vector<SwitchKeyRecord>& records, uint64_t key_id,
                              int seed_max_level) {
  const long count = (long)records.size();
  std::vector<SwitchKey> keys((size_t)count);
  std::vector<std::exception_ptr> errors((size_t)count);
#pragma omp parallel for schedule(dynamic, 1)
  for (long i = 0; i < count; ++i) {
    const SwitchKeyRecord& r = records[(size_t)i];
    try {  // no exception may leave an OpenMP region: kept, and the first rethrown after it
      keys[(size_t)i] = import_switch_key(ctx, r.bs, r.seeds, key_id, r.galois, r.level, r.level <= seed_max_level);
    } catch (...) {
      errors[(size_t)i] = std::current_exception();
    }
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  GaloisKeys g;
  g.param_hash = ctx.hash64();
  g.key_id = key_id;
  for (auto& k : keys) {
    const uint64_t el = k.galois;
    if (!g.keys.emplace(el, std::move(k)).second)
      fail(ErrorKind::Serialization, "Galois keys: an element is listed twice; the data is corrupted");
  }
  return g;
}

Ciphertext import_ciphertext(const Context& ctx, const std::vector<PolyView>& polys, int level, double scale,
                             int slots, int encoding, bool is_complex, uint64_t key_id, const Seed* seed) {
  check_imported_metadata(ctx, level, scale, slots, encoding, "ciphertext");
  if (polys.size() > 3) fail(ErrorKind::Serialization, "ciphertext: must have 2 or 3 polynomials");
  Ciphertext c;
  c.param_hash = ctx.hash64();
  c.key_id = key_id;
  c.level = level;
  c.scale = scale;
  c.slots = slots;
  c.encoding = (Encoding)encoding;
  c.is_complex = is_complex;
  for (const auto& p : polys) c.polys.push_back(import_poly(ctx, p, level, false, "ciphertext"));
  if (seed != nullptr) {
    if (c.polys.size() != 1) fail(ErrorKind::Serialization, "seeded ciphertext must carry c0 only");
    c.seed = *seed;
    c.seeded = true;
    c.polys.push_back(uniform_from_seed(ctx, c.seed, level + 1, false, 0));
  }
  if (c.polys.size() < 2 || c.polys.size() > 3) fail(ErrorKind::Serialization, "ciphertext: must have 2 or 3 polynomials");
  return c;
}

std::vector<Ciphertext> import_ciphertexts(const Context& ctx, const std::vector<CiphertextRecord>& records) {
  const long count = (long)records.size();
  std::vector<Ciphertext> out((size_t)count);
  std::vector<std::exception_ptr> errors((size_t)count);
#pragma omp parallel for schedule(dynamic, 1)
  for (long i = 0; i < count; ++i) {
    const CiphertextRecord& r = records[(size_t)i];
    try {  // no exception may leave an OpenMP region: kept, and the first rethrown after it
      out[(size_t)i] = import_ciphertext(ctx, r.polys, r.level, r.scale, r.slots, r.encoding, r.is_complex, r.key_id,
                                         r.seeded ? &r.seed : nullptr);
    } catch (...) {
      errors[(size_t)i] = std::current_exception();
    }
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return out;
}

}  // namespace hemlp
