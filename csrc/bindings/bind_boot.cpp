// Bindings for bootstrapping's native steps (hemlp.bootstrap.modraise builds on these).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings/engine.h"
#include "boot/modraise.h"
#include "ckks/errors.h"

namespace py = pybind11;

void bind_boot(py::module_& m) {
  using namespace hemlp;
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
  m.def("dense_to_sparse", [](const Engine& e, const Ciphertext& ct, const EncapsulationKeys& k) {
    return dense_to_sparse(e.ctx, ct, k);
  }, py::call_guard<py::gil_scoped_release>());
  m.def("mod_raise", [](const Engine& e, const Ciphertext& ct, const EncapsulationKeys& k, int target) {
    return mod_raise(e.ctx, ct, k, target);
  }, py::call_guard<py::gil_scoped_release>());
}
