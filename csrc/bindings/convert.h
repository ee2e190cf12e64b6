// Argument conversion shared by the binding files: polynomials <-> numpy (with validation of
// shapes and residues on import) and 32-byte seeds <-> Python bytes.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstring>
#include <string>

#include "ckks/context.h"
#include "ckks/errors.h"
#include "ckks/sampler.h"

namespace hemlp::bind {

namespace py = pybind11;
using U64Arr = py::array_t<uint64_t, py::array::c_style | py::array::forcecast>;

inline U64Arr poly_to_array(const Poly& p, size_t limbs, size_t n) {
  U64Arr out({limbs, n});
  std::memcpy(out.mutable_data(), p.data(), limbs * n * sizeof(uint64_t));
  return out;
}

// Validated import: shape (limbs, N) and every residue below its modulus.
inline Poly array_to_poly(const Context& ctx, const U64Arr& a, int level, bool ext, const char* what) {
  const size_t n = ctx.n();
  const size_t limbs = (size_t)level + 1 + (ext ? ctx.num_p() : 0);
  if (a.ndim() != 2 || (size_t)a.shape(0) != limbs || (size_t)a.shape(1) != n)
    fail(ErrorKind::Serialization, std::string(what) + ": expected a (" + std::to_string(limbs) + ", " +
                                       std::to_string(n) + ") array of residues; the data is truncated or "
                                                           "belongs to other parameters");
  Poly p(a.data(), a.data() + limbs * n);
  for (size_t k = 0; k < limbs; ++k) {
    const uint64_t q = ctx.modulus(ext ? ctx.qp_index(level, (int)k) : (int)k).q;
    const uint64_t* d = p.data() + k * n;
    for (size_t i = 0; i < n; ++i)
      if (d[i] >= q) fail(ErrorKind::Serialization, std::string(what) + ": residue out of range; the data is corrupted");
  }
  return p;
}

// Validates the metadata of an imported ciphertext-like object (`what` names it in errors).
inline void check_imported_metadata(const Context& ctx, int level, double scale, int slots, int encoding,
                                    const char* what) {
  const std::string w(what);
  if (level < 0 || level > ctx.max_level())
    fail(ErrorKind::Serialization, w + ": level outside this context's modulus chain");
  if (!(scale > 0)) fail(ErrorKind::Serialization, w + ": invalid scale");
  if (encoding != 0 && encoding != 1) fail(ErrorKind::Serialization, w + ": invalid encoding");
  const size_t n = ctx.n();
  if (encoding == 0 && (slots <= 0 || (slots & (slots - 1)) || (size_t)slots > n / 2))
    fail(ErrorKind::Serialization, w + ": invalid slot count");
  if (encoding == 1 && (size_t)slots != n) fail(ErrorKind::Serialization, w + ": invalid slot count");
}

// The metadata fields of an imported ciphertext-like object (validated by check_imported_metadata first).
template <class Ct>
void set_imported_metadata(Ct& c, const Context& ctx, uint64_t key_id, int level, double scale, int slots,
                           int encoding) {
  c.param_hash = ctx.hash64();
  c.key_id = key_id;
  c.level = level;
  c.scale = scale;
  c.slots = slots;
  c.encoding = (Encoding)encoding;
}

inline Seed to_seed(const py::bytes& b) {
  std::string s = b;
  if (s.size() != 32) fail(ErrorKind::Serialization, "seed must be 32 bytes");
  Seed seed;
  std::memcpy(seed.data(), s.data(), 32);
  return seed;
}

inline py::bytes from_seed(const Seed& s) { return py::bytes(reinterpret_cast<const char*>(s.data()), s.size()); }

}  // namespace hemlp::bind
