// Argument conversion shared by the binding files: polynomials <-> numpy (with validation of
// shapes and residues on import) and 32-byte seeds <-> Python bytes.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstring>
#include <string>

#include "ckks/context.h"
#include "ckks/errors.h"
#include "ckks/import.h"
#include "ckks/sampler.h"

namespace hemlp::bind {

namespace py = pybind11;
using U64Arr = py::array_t<uint64_t, py::array::c_style | py::array::forcecast>;

// A (limbs, N) copy of `words` residues at p (a key polynomial, owned or borrowed: ckks/key_polys.h).
inline U64Arr poly_to_array(const uint64_t* p, size_t words, size_t limbs, size_t n) {
  if (words != limbs * n) fail(ErrorKind::Parameter, "export: a polynomial's size does not match its level");
  U64Arr out({limbs, n});
  std::memcpy(out.mutable_data(), p, limbs * n * sizeof(uint64_t));
  return out;
}

inline U64Arr poly_to_array(const Poly& p, size_t limbs, size_t n) {
  U64Arr out({limbs, n});
  std::memcpy(out.mutable_data(), p.data(), limbs * n * sizeof(uint64_t));
  return out;
}

// A numpy array as a borrowed (rows, cols) view (rows = cols = 0 unless it is 2-D: import_poly then refuses it).
inline PolyView view_of(const U64Arr& a) {
  if (a.ndim() != 2) return PolyView{a.data(), 0, 0};
  return PolyView{a.data(), (size_t)a.shape(0), (size_t)a.shape(1)};
}

// Validated import: shape (limbs, N) and every residue below its modulus (hemlp::import_poly).
inline Poly array_to_poly(const Context& ctx, const U64Arr& a, int level, bool ext, const char* what) {
  return import_poly(ctx, view_of(a), level, ext, what);
}

using hemlp::check_imported_metadata;  // (hemlp/fhe/ckks/import.h; the binding files call it through this namespace)

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
