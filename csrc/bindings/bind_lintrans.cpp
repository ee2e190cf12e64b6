// hemlp._core.LinearTransform: the native BSGS linear transform (boot/lintrans.h). Argument conversion only.
#include <pybind11/complex.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>

#include "bindings/engine.h"
#include "boot/lintrans.h"
#include "bindings/lintrans_counts.h"
#include "ckks/errors.h"

namespace py = pybind11;
using namespace hemlp;

namespace {

// The transform keeps a reference to its Engine's context: the Python object holds the Engine alive.
struct BoundLinearTransform {
  std::shared_ptr<Engine> engine;
  std::unique_ptr<NativeLinearTransform> lt;
};

}  // namespace

void bind_lintrans(py::module_& m) {
  py::class_<BoundLinearTransform>(m, "LinearTransform",
                                   "y = T·x by BSGS with hoisted (single) or QP-domain (double) baby steps")
      .def(py::init([](std::shared_ptr<Engine> e, int slots, int level, double scale, std::vector<int64_t> giant,
                       std::vector<std::vector<int64_t>> baby,
                       py::array_t<std::complex<double>, py::array::c_style | py::array::forcecast> diags, bool qp) {
             if (diags.ndim() != 2 || diags.shape(1) != slots)
               fail(ErrorKind::Shape, "linear transform: diagonals must be a (count, slots) complex array");
             std::vector<std::vector<cplx>> d((size_t)diags.shape(0));
             const cplx* p = diags.data();
             for (size_t i = 0; i < d.size(); ++i) d[i].assign(p + i * slots, p + (i + 1) * slots);
             py::gil_scoped_release nogil;
             auto lt = std::make_unique<NativeLinearTransform>(e->ctx, e->encoder, slots, level, scale,
                                                               std::move(giant), std::move(baby), d, qp);
             return BoundLinearTransform{std::move(e), std::move(lt)};
           }),
           py::arg("engine"), py::arg("slots"), py::arg("level"), py::arg("scale"), py::arg("giant"),
           py::arg("baby"), py::arg("diagonals"), py::arg("qp") = true)
      .def(
          "apply",
          [](const BoundLinearTransform& t, const Engine& e, const Ciphertext& ct, const GaloisKeys& keys,
             int hoisting, bool rescale) {
            if (e.ctx.hash64() != t.engine->ctx.hash64())
              fail(ErrorKind::ContextMismatch, "linear transform: encoded under another parameter set");
            if (hoisting != 1 && hoisting != 2)
              fail(ErrorKind::Parameter, "linear transform: hoisting is 1 (single) or 2 (double)");
            LinTransCounts c;
            Ciphertext r;
            {
              py::gil_scoped_release nogil;
              r = t.lt->apply(ct, keys, (Hoisting)hoisting, rescale, &c);
            }
            return py::make_tuple(std::move(r), lintrans_counts_dict(c));
          },
          py::arg("engine"), py::arg("ct"), py::arg("keys"), py::arg("hoisting") = 2, py::arg("rescale") = true)
      .def_property_readonly("level", [](const BoundLinearTransform& t) { return t.lt->level(); })
      .def_property_readonly("slots", [](const BoundLinearTransform& t) { return t.lt->slots(); })
      .def_property_readonly("qp", [](const BoundLinearTransform& t) { return t.lt->qp(); })
      .def_property_readonly("scale", [](const BoundLinearTransform& t) { return t.lt->scale(); })
      .def_property_readonly("nbytes", [](const BoundLinearTransform& t) { return t.lt->nbytes(); })
      .def_property_readonly("steps", [](const BoundLinearTransform& t) { return t.lt->steps(); });
}
