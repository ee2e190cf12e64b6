// Bindings for batched bootstrapping (boot/msrlwe_convert, boot/ms_lintrans): argument conversion only.
#include <pybind11/complex.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>

#include "bindings/engine.h"
#include "boot/ms_lintrans.h"
#include "boot/msrlwe_convert.h"
#include "bindings/lintrans_counts.h"
#include "ckks/errors.h"

namespace py = pybind11;
using namespace hemlp;

namespace {

// A NativeLinearTransform kept with the Engine whose context it references (diagonals over Q_l ∪ P).
struct BoundBatchTransform {
  std::shared_ptr<Engine> engine;
  std::unique_ptr<NativeLinearTransform> lt;
};

}  // namespace

void bind_batch_boot(py::module_& m) {
  using pcmm::MsCiphertext;
  using pcmm::MultiSecretKey;
  py::class_<BatchConversionKeys>(m, "BatchConversionKeys")
      .def_readonly("param_hash", &BatchConversionKeys::param_hash)
      .def_readonly("key_id", &BatchConversionKeys::key_id)
      .def_readonly("ms_key_id", &BatchConversionKeys::ms_key_id)
      .def_readonly("sparse_id", &BatchConversionKeys::sparse_id)
      .def_readonly("k", &BatchConversionKeys::k)
      .def_readonly("hamming_weight", &BatchConversionKeys::hamming_weight)
      .def_readonly("level", &BatchConversionKeys::level)
      .def_readonly("back_level", &BatchConversionKeys::back_level)
      .def_property_readonly("nbytes", [](const BatchConversionKeys& k) { return batch_conversion_key_bytes(k); });
  m.def("batch_conversion_keys", [](const Engine& e, const SecretKey& sk, const MultiSecretKey& msk, int h, int level,
                                    int back_level) {
    return batch_conversion_keys(e.ctx, sk, msk, h, level, back_level);
  }, py::call_guard<py::gil_scoped_release>());
  m.def("rlwe_to_ms_sparse", [](const Engine& e, std::vector<const Ciphertext*> cts, const BatchConversionKeys& k) {
    return rlwe_to_ms_sparse(e.ctx, cts, k);
  }, py::call_guard<py::gil_scoped_release>());
  m.def("ms_mod_raise", [](const Engine& e, const MsCiphertext& ct, const BatchConversionKeys& k, int target) {
    return ms_mod_raise(e.ctx, ct, k, target);
  }, py::call_guard<py::gil_scoped_release>());
  m.def("ms_to_rlwe_back", [](const Engine& e, const MsCiphertext& ct, const BatchConversionKeys& k) {
    return ms_to_rlwe_back(e.ctx, ct, k);
  }, py::call_guard<py::gil_scoped_release>());
  // A copy with new metadata (exact re-tagging, as hemlp.he.reinterpret.retag for Ciphertext).
  m.def("ms_retag", [](const Engine& e, const MsCiphertext& ct, double scale, int slots, int encoding) {
    if (ct.param_hash != e.ctx.hash64()) fail(ErrorKind::ContextMismatch, "ms_retag: foreign ciphertext");
    if (!(scale > 0) || (encoding != 0 && encoding != 1)) fail(ErrorKind::Parameter, "ms_retag: bad scale or encoding");
    MsCiphertext out = ct;
    out.scale = scale;
    out.slots = slots;
    out.encoding = (Encoding)encoding;
    return out;
  });
  py::class_<MsGaloisKeys>(m, "MsGaloisKeys")
      .def_readonly("param_hash", &MsGaloisKeys::param_hash)
      .def_readonly("ms_key_id", &MsGaloisKeys::ms_key_id)
      .def_readonly("k", &MsGaloisKeys::k)
      .def_property_readonly("nbytes", [](const MsGaloisKeys& k) { return ms_galois_key_bytes(k); })
      .def_property_readonly("levels", [](const MsGaloisKeys& k) {
        std::map<uint64_t, int> out;
        for (const auto& [g, key] : k.keys) out[g] = key.level;
        return out;
      });
  m.def("ms_galois_keys", [](const Engine& e, const MultiSecretKey& msk,
                             const std::vector<std::pair<uint64_t, int>>& elements) {
    return ms_galois_keys(e.ctx, msk, elements);
  }, py::call_guard<py::gil_scoped_release>());
  m.def("ms_apply_galois", [](const Engine& e, const MsCiphertext& ct, const MsGaloisKeys& k, uint64_t g) {
    return ms_apply_galois(e.ctx, ct, k, g);
  }, py::call_guard<py::gil_scoped_release>());
  py::class_<BoundBatchTransform>(m, "BatchLinearTransform",
                                  "y_j = T·x_j for every chunk of an MSRLWE ciphertext (double hoisting, shared a)")
      .def(py::init([](std::shared_ptr<Engine> e, int slots, int level, double scale, std::vector<int64_t> giant,
                       std::vector<std::vector<int64_t>> baby,
                       py::array_t<std::complex<double>, py::array::c_style | py::array::forcecast> diags) {
             if (diags.ndim() != 2 || diags.shape(1) != slots)
               fail(ErrorKind::Shape, "batched linear transform: diagonals must be a (count, slots) complex array");
             std::vector<std::vector<cplx>> d((size_t)diags.shape(0));
             const cplx* p = diags.data();
             for (size_t i = 0; i < d.size(); ++i) d[i].assign(p + i * slots, p + (i + 1) * slots);
             py::gil_scoped_release nogil;
             auto lt = std::make_unique<NativeLinearTransform>(e->ctx, e->encoder, slots, level, scale,
                                                               std::move(giant), std::move(baby), d, true);
             return BoundBatchTransform{std::move(e), std::move(lt)};
           }))
      .def("apply", [](const BoundBatchTransform& t, const Engine& e, const MsCiphertext& ct, const MsGaloisKeys& k,
                       bool rescale) {
        if (e.ctx.hash64() != t.engine->ctx.hash64())
          fail(ErrorKind::ContextMismatch, "batched linear transform: encoded under another parameter set");
        LinTransCounts c;
        MsCiphertext r;
        {
          py::gil_scoped_release nogil;
          r = ms_linear_transform(*t.lt, ct, k, rescale, &c);
        }
        return py::make_tuple(std::move(r), lintrans_counts_dict(c));
      }, py::arg("engine"), py::arg("ct"), py::arg("keys"), py::arg("rescale") = true)
      .def_property_readonly("level", [](const BoundBatchTransform& t) { return t.lt->level(); })
      .def_property_readonly("nbytes", [](const BoundBatchTransform& t) { return t.lt->nbytes(); })
      .def_property_readonly("steps", [](const BoundBatchTransform& t) { return t.lt->steps(); });
}
