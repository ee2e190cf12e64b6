// Placeholder registration for the PCMM bindings (filled by the pcmm work).
#include <pybind11/pybind11.h>
namespace py = pybind11;
void bind_pcmm(py::module_& m) { (void)m; }
