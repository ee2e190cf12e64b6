// Bindings for PCMM on ciphertext stacks (hemlp.linalg builds on these).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings/engine.h"
#include "pcmm/pcmm.h"

namespace py = pybind11;

void bind_linalg(py::module_& m) {
  m.def("pcmm_rlwe",
        [](const hemlp::Engine& e, const hemlp::pcmm::ModGemmPlan& plan,
           std::vector<const hemlp::Ciphertext*> inputs, size_t chunks, int64_t K, double factor) {
          py::gil_scoped_release r;
          return hemlp::pcmm::pcmm_rlwe(e.ctx, plan, inputs, chunks, K, factor);
        },
        py::arg("engine"), py::arg("plan"), py::arg("inputs"), py::arg("chunks"), py::arg("K"), py::arg("factor"));
}
