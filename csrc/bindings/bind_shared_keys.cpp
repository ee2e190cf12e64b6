// Bindings for node-local shared key files (ckks/shared_key_file.h; hemlp.runtime.shared_keys): argument conversion
// only.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <system_error>

#include "bindings/convert.h"
#include "bindings/engine.h"
#include "boot/ms_lintrans.h"
#include "boot/msrlwe_convert.h"
#include "ckks/errors.h"
#include "ckks/shared_key_file.h"

namespace py = pybind11;
using namespace hemlp;

void bind_shared_keys(py::module_& m) {
  // items: (group, key) pairs, key a SwitchKey, GaloisKeys (each key), MsGaloisKeys (each key), BatchConversionKeys
  // (its back keys) or a (rows, N) uint64 array; written in this order. OSError when the file cannot be written.
  m.def("write_shared_key_file", [](const Engine& e, const std::string& path, uint64_t key_id, py::bytes meta,
                                    py::list items) {
    SharedKeyWriter w(e.ctx, key_id);
    std::vector<bind::U64Arr> arrays;  // the (maybe converted) arrays, alive until written
    arrays.reserve(items.size());
    for (auto item : items) {
      py::tuple t = item.cast<py::tuple>();
      if (t.size() != 2) fail(ErrorKind::Parameter, "write_shared_key_file: items are (group, key) pairs");
      const uint32_t g = t[0].cast<uint32_t>();
      py::handle obj = t[1];
      if (py::isinstance<SwitchKey>(obj)) {
        w.add_switch_key(g, obj.cast<const SwitchKey&>());
      } else if (py::isinstance<GaloisKeys>(obj)) {
        for (const auto& kv : obj.cast<const GaloisKeys&>().keys) w.add_switch_key(g, kv.second);
      } else if (py::isinstance<MsGaloisKeys>(obj)) {
        add_ms_galois_keys(w, g, obj.cast<const MsGaloisKeys&>());
      } else if (py::isinstance<BatchConversionKeys>(obj)) {
        for (const SwitchKey& k : obj.cast<const BatchConversionKeys&>().back) w.add_switch_key(g, k);
      } else {
        arrays.push_back(obj.cast<bind::U64Arr>());
        const bind::U64Arr& a = arrays.back();
        if (a.ndim() != 2 || (size_t)a.shape(1) != e.ctx.n())
          fail(ErrorKind::Shape, "write_shared_key_file: an array must be (rows, N) residues");
        w.add_array(g, a.data(), (size_t)a.shape(0));
      }
    }
    const std::string m = meta;
    int err = 0;
    std::string what;
    {
      py::gil_scoped_release nogil;
      try {
        w.write(path, m);
      } catch (const std::system_error& ex) {
        err = ex.code().value();
        what = ex.what();
      }
    }
    if (err != 0) {  // OSError (its errno subclass: PermissionError, FileNotFoundError, ...) naming the file
      py::object exc = py::module_::import("builtins").attr("OSError")(err, what, path);
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
      throw py::error_already_set();
    }
  }, py::arg("engine"), py::arg("path"), py::arg("key_id"), py::arg("meta"), py::arg("items"));

  py::class_<SharedKeyFile, std::shared_ptr<SharedKeyFile>>(m, "SharedKeyFile")
      // key_id 0: any key pair
      .def_static("open", [](const Engine& e, const std::string& path, uint64_t key_id) {
        return SharedKeyFile::open(e.ctx, path, key_id);
      }, py::arg("engine"), py::arg("path"), py::arg("key_id") = 0, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("key_id", &SharedKeyFile::key_id)
      .def_property_readonly("meta", [](const SharedKeyFile& f) { return py::bytes(f.meta()); })
      .def_property_readonly("size", &SharedKeyFile::size)
      .def("verify", &SharedKeyFile::verify, py::call_guard<py::gil_scoped_release>())
      .def("has_group", &SharedKeyFile::has_group)
      .def("switch_keys", &SharedKeyFile::switch_keys)
      .def("galois_keys", &SharedKeyFile::galois_keys)
      .def("ms_galois_keys", [](const SharedKeyFile& f, const Engine& e, uint32_t g) {
        return ms_galois_keys_from_file(e.ctx, f, g);
      })
      // read-only (rows, N) views of the mapping (each keeps this file object, and so the mapping, alive)
      .def("arrays", [](py::object self, uint32_t g) {
        const SharedKeyFile& f = self.cast<const SharedKeyFile&>();
        py::list out;
        const size_t n = f.n();
        for (const auto& [data, rows] : f.arrays(g)) {
          py::array a(py::dtype::of<uint64_t>(), {rows, n}, {n * sizeof(uint64_t), sizeof(uint64_t)}, data, self);
          py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
          out.append(a);
        }
        return out;
      });
}
