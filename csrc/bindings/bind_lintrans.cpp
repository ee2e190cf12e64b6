// hemlp._core.LinearTransform: the native BSGS linear transform (boot/lintrans.h). Argument conversion only.
#include <pybind11/complex.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>

#include "bindings/convert.h"
#include "bindings/engine.h"
#include "boot/lintrans.h"
#include "bindings/lintrans_counts.h"
#include "ckks/errors.h"

namespace py = pybind11;
using namespace hemlp;
using hemlp::bind::poly_to_array;
using hemlp::bind::U64Arr;

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
      // (giant, baby, diagonals, is_complex): the BSGS structure and the encoded diagonals ((limbs, N) arrays in
      // group order), for a backend that runs the transform elsewhere (hemlp.gpu)
      .def("layout", [](const BoundLinearTransform& t) {
        const auto lay = t.lt->layout();
        const size_t n = t.engine->ctx.n();
        py::list diags;
        for (const auto& p : *lay.diagonals) diags.append(poly_to_array(p, p.size() / n, n));
        return py::make_tuple(lay.giant, lay.baby, diags, lay.is_complex);
      })
      .def_static("from_encoded", [](std::shared_ptr<Engine> e, int slots, int level, double scale,
                                     std::vector<int64_t> giant, std::vector<std::vector<int64_t>> baby,
                                     std::vector<U64Arr> diagonals, bool qp, bool is_complex) {
        std::vector<Poly> enc;
        for (const auto& a : diagonals) enc.emplace_back(a.data(), a.data() + a.size());
        auto lt = std::make_unique<NativeLinearTransform>(e->ctx, slots, level, scale, std::move(giant),
                                                          std::move(baby), std::move(enc), qp, is_complex);
        return BoundLinearTransform{std::move(e), std::move(lt)};
      }, py::arg("engine"), py::arg("slots"), py::arg("level"), py::arg("scale"), py::arg("giant"), py::arg("baby"),
         py::arg("diagonals"), py::arg("qp") = true, py::arg("is_complex") = false)
      .def_property_readonly("level", [](const BoundLinearTransform& t) { return t.lt->level(); })
      .def_property_readonly("slots", [](const BoundLinearTransform& t) { return t.lt->slots(); })
      .def_property_readonly("qp", [](const BoundLinearTransform& t) { return t.lt->qp(); })
      .def_property_readonly("scale", [](const BoundLinearTransform& t) { return t.lt->scale(); })
      .def_property_readonly("nbytes", [](const BoundLinearTransform& t) { return t.lt->nbytes(); })
      .def_property_readonly("steps", [](const BoundLinearTransform& t) { return t.lt->steps(); });
}
