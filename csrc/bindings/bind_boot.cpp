// Bindings for bootstrapping's native steps (hemlp.bootstrap.modraise builds on these).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings/engine.h"
#include "boot/modraise.h"
#include "ckks/errors.h"
// after the ckks headers: its templates name hemlp::Encoding
#include "bindings/convert.h"

namespace py = pybind11;

void bind_boot(py::module_& m) {
  using namespace hemlp;
  using namespace hemlp::bind;
  // Public evaluation-key material only: the sparse secret was wiped when the keys were made.
  py::class_<EncapsulationKeys>(m, "EncapsulationKeys")
      .def_readonly("param_hash", &EncapsulationKeys::param_hash)
      .def_readonly("key_id", &EncapsulationKeys::key_id)
      .def_readonly("sparse_id", &EncapsulationKeys::sparse_id)
      .def_readonly("hamming_weight", &EncapsulationKeys::hamming_weight)
      .def_readonly("level", &EncapsulationKeys::level)
      .def_property_readonly("nbytes", [](const EncapsulationKeys& k) { return encapsulation_key_bytes(k); });
  m.def("encapsulation_keys", [](const Engine& e, const SecretKey& sk, int hamming_weight, int level) {
    return encapsulation_keys(e.ctx, sk, hamming_weight, level);
  }, py::arg("engine"), py::arg("sk"), py::arg("hamming_weight"), py::arg("level"),
     py::call_guard<py::gil_scoped_release>());
  // (small_b, small_a, big_b, big_a): (2, N) over {q0, p0} and (level + 1 + |P|, N) over Q_level ∪ P
  m.def("export_encapsulation_keys", [](const Engine& e, const EncapsulationKeys& k) {
    const size_t n = e.ctx.n(), big = (size_t)k.level + 1 + e.ctx.num_p();
    return py::make_tuple(poly_to_array(k.small_b, 2, n), poly_to_array(k.small_a, 2, n),
                          poly_to_array(k.big_b, big, n), poly_to_array(k.big_a, big, n));
  });
  m.def("import_encapsulation_keys", [](const Engine& e, const U64Arr& small_b, const U64Arr& small_a,
                                        const U64Arr& big_b, const U64Arr& big_a, uint64_t key_id, uint64_t sparse_id,
                                        int hamming_weight, int level) {
    const Context& ctx = e.ctx;
    const size_t n = ctx.n();
    if (level < 0 || level > ctx.max_level() || hamming_weight < 1 || (size_t)hamming_weight > n)
      fail(ErrorKind::Serialization, "encapsulation keys: level or Hamming weight out of range; the data is corrupted");
    EncapsulationKeys k;
    k.param_hash = ctx.hash64();
    k.key_id = key_id;
    k.sparse_id = sparse_id;
    k.hamming_weight = hamming_weight;
    k.level = level;
    k.big_b = array_to_poly(ctx, big_b, level, true, "encapsulation key B");
    k.big_a = array_to_poly(ctx, big_a, level, true, "encapsulation key A");
    const int mods[2] = {0, ctx.p_index(0)};
    for (const U64Arr* a : {&small_b, &small_a}) {
      if (a->ndim() != 2 || a->shape(0) != 2 || (size_t)a->shape(1) != n)
        fail(ErrorKind::Serialization, "encapsulation key over {q0, p0}: expected a (2, N) array; the data is corrupted");
      Poly p(a->data(), a->data() + 2 * n);
      for (int j = 0; j < 2; ++j)
        for (size_t i = 0; i < n; ++i)
          if (p[j * n + i] >= ctx.modulus(mods[j]).q)
            fail(ErrorKind::Serialization, "encapsulation key over {q0, p0}: residue out of range; the data is corrupted");
      (a == &small_b ? k.small_b : k.small_a) = std::move(p);
    }
    return k;
  });
  // One GaloisKeys holding each element's key made for its own level (elements: (galois, level) pairs), built
  // in place: merging per-level sets copies every key once per merge and leaves the heap fragmented.
  // seed_max_level: the keys made for a level <= it keep their a-halves as seeds only (expanded on use by the
  // key switch: half their memory); -1: none.
  m.def("galois_keys_at_levels", [](const Engine& e, const SecretKey& sk,
                                    const std::vector<std::pair<uint64_t, int>>& elements, int seed_max_level) {
    if (sk.param_hash != e.ctx.hash64())
      fail(ErrorKind::ContextMismatch, "galois_keys_at_levels: the secret key belongs to another parameter set");
    GaloisKeys g;
    g.param_hash = e.ctx.hash64();
    g.key_id = sk.key_id;
    for (const auto& [el, level] : elements) {
      e.keygen.key_level(level);
      if (g.keys.count(el)) fail(ErrorKind::Parameter, "galois_keys_at_levels: an element is listed twice");
      SwitchKey k = e.keygen.galois_key(sk, el, level);
      if (level <= seed_max_level) drop_expanded_a(e.ctx, k);
      g.keys.emplace(el, std::move(k));
    }
    return g;
  }, py::arg("engine"), py::arg("sk"), py::arg("elements"), py::arg("seed_max_level") = -1,
     py::call_guard<py::gil_scoped_release>());
  // Drop the expanded a-halves of the keys made for a level <= seed_max_level that have their seeds (e.g.
  // after import), in place.
  m.def("seed_galois_keys", [](const Engine& e, GaloisKeys& g, int seed_max_level) {
    if (g.param_hash != e.ctx.hash64()) fail(ErrorKind::ContextMismatch, "seed_galois_keys: keys of another context");
    for (const auto& kv : g.keys) {  // all or nothing: a key file's set stays as written
      kv.second.b.check_owned("seed_galois_keys");
      kv.second.a.check_owned("seed_galois_keys");
    }
    py::gil_scoped_release nogil;
    for (auto& kv : g.keys)
      if (kv.second.level <= seed_max_level) drop_expanded_a(e.ctx, kv.second);
  });
  m.def("dense_to_sparse", [](const Engine& e, const Ciphertext& ct, const EncapsulationKeys& k) {
    return dense_to_sparse(e.ctx, ct, k);
  }, py::call_guard<py::gil_scoped_release>());
  m.def("mod_raise", [](const Engine& e, const Ciphertext& ct, const EncapsulationKeys& k, int target) {
    return mod_raise(e.ctx, ct, k, target);
  }, py::call_guard<py::gil_scoped_release>());
}
