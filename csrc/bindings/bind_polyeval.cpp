// Constant fast paths and native polynomial evaluation (csrc/boot/polyeval.h); module-level functions that
// take the context's Engine, like the PCMM entry points.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <vector>

#include "bindings/engine.h"
#include "boot/polyeval.h"

namespace py = pybind11;
using namespace hemlp;

void bind_polyeval(py::module_& m) {
  m.def(
      "mul_const",
      [](const Engine& e, const Ciphertext& a, double c, double const_scale) {
        return e.eval.mul_const(a, c, const_scale);
      },
      py::arg("engine"), py::arg("ct"), py::arg("c"), py::arg("const_scale"), py::call_guard<py::gil_scoped_release>(),
      "ct * round(c * const_scale) (exact integer, no encoding); the scale becomes ct.scale * const_scale.");
  m.def(
      "add_const_exact", [](const Engine& e, const Ciphertext& a, double c) { return e.eval.add_const_exact(a, c); },
      py::arg("engine"), py::arg("ct"), py::arg("c"), py::call_guard<py::gil_scoped_release>(),
      "ct + c in every slot, round(c * ct.scale) computed exactly at any scale.");
  m.def(
      "const_residues",
      [](const Engine& e, double c, double scale, int level) { return e.eval.const_residues(c, scale, level); },
      py::arg("engine"), py::arg("c"), py::arg("scale"), py::arg("level"),
      "round(c * scale) mod q_k for k = 0..level (exact), for oracle tests.");
  m.def(
      "poly_depth", [](int degree) { return boot::poly_depth(degree); }, py::arg("degree"));
  m.def(
      "poly_evaluate",
      [](const Engine& e, const Ciphertext& x, const std::vector<double>& coeffs, int basis, const SwitchKey* rlk,
         double scale, int level) {
        boot::PolyEvalStats st;
        Ciphertext out;
        {
          py::gil_scoped_release nogil;
          out = boot::evaluate_polynomial(e.ctx, e.eval, x, coeffs, (boot::PolyBasis)basis, rlk, scale, level, &st);
        }
        py::dict stats;
        stats["ct_mul"] = st.ct_mul;
        stats["const_mul"] = st.const_mul;
        stats["rescale"] = st.rescale;
        return py::make_tuple(out, stats);
      },
      py::arg("engine"), py::arg("ct"), py::arg("coeffs"), py::arg("basis"), py::arg("relin_key"), py::arg("scale"),
      py::arg("level"),
      "(p(ct), stats): basis 0 = Chebyshev, 1 = power; level -1 = ct.level - poly_depth(deg); exact scale.");
}
