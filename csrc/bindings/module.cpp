// hemlp._core: argument conversion only; all logic lives in ring/, ckks/, pcmm/.
#include <omp.h>
#include <pybind11/pybind11.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "ckks/errors.h"

namespace py = pybind11;

extern "C" void openblas_set_num_threads(int);

void bind_ring(py::module_& m);
void bind_ckks(py::module_& m);
void bind_blocks(py::module_& m);
void bind_pcmm(py::module_& m);
void bind_linalg(py::module_& m);
void bind_msrlwe(py::module_& m);
void bind_mlwe(py::module_& m);
void bind_ms_conversion(py::module_& m);
void bind_boot(py::module_& m);
void bind_lintrans(py::module_& m);
void bind_polyeval(py::module_& m);
void bind_batch_boot(py::module_& m);
void bind_shared_keys(py::module_& m);
void bind_plain(py::module_& m);

PYBIND11_MODULE(_core, m) {
  m.doc() = "hemlp native core (RNS-CKKS, exact modular GEMM)";
#ifdef __GLIBC__
  // Every homomorphic op allocates MB-sized polynomials. glibc serves those with fresh mmaps
  // and returns them on free, so each op paid thousands of page faults (a ct x ct tensor
  // product went from ~3 ms to ~1 ms at N=2^14 without them). Serve blocks < 64 MB from the
  // heap and keep up to 256 MB of freed memory for reuse.
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const hemlp::Error& e) {
      static const char* names[] = {"ParameterError",   "InsecureParametersError", "ContextMismatchError",
                                    "KeyMismatchError", "MissingKeyError",         "LevelError",
                                    "ScaleMismatchError", "EncodingError",         "ShapeError",
                                    "SerializationError", "ReadOnlyKeyError"};
      py::object cls = py::module_::import("hemlp.errors").attr(names[(int)e.kind()]);
      PyErr_SetString(cls.ptr(), e.what());
    }
  });
  m.def("set_num_threads", [](int n) {
    if (n < 1) throw std::invalid_argument("number of threads must be >= 1");
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
  });
  m.def("get_num_threads", []() { return omp_get_max_threads(); });
  auto ring = m.def_submodule("ring", "ring-level primitives, exposed for oracle tests");
  bind_ring(ring);
  bind_ckks(m);
  bind_blocks(m);
  bind_pcmm(m);
  bind_linalg(m);
  bind_msrlwe(m);
  bind_mlwe(m);
  bind_ms_conversion(m);
  bind_boot(m);
  bind_lintrans(m);
  bind_polyeval(m);
  bind_batch_boot(m);
  bind_shared_keys(m);
  bind_plain(m);
}
