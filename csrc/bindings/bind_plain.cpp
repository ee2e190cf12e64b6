// Plaintext kernels of the compiler (csrc/plain): activation polynomials by Clenshaw's recurrence and table
// lookups, on numpy arrays without copies.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "ckks/errors.h"
#include "plain/activation_eval.h"

namespace py = pybind11;
using hemlp::ErrorKind;
using hemlp::fail;

namespace {

using F64 = py::array_t<double, py::array::c_style>;
using F32 = py::array_t<float, py::array::c_style>;

// A C-contiguous float32 / float64 array (isinstance checks the dtype and the c_style flag; no conversion: a copy
// would hide a caller's wrong dtype).
bool is_f64(const py::array& a) { return py::isinstance<F64>(a); }
bool is_f32(const py::array& a) { return py::isinstance<F32>(a); }

template <class In, class Out>
bool lookup(const F64& table, size_t points, double lo, double scale, double gain, double dom_lo, double dom_hi,
            const py::array& x, py::array& out) {
  const In* xp = static_cast<const In*>(x.data());
  Out* op = static_cast<Out*>(out.mutable_data());
  const double* tp = table.data();
  const size_t n = static_cast<size_t>(x.size());
  py::gil_scoped_release nogil;
  return hemlp::plain::table_lookup<In, Out>(tp, points, lo, scale, gain, dom_lo, dom_hi, xp, n, op);
}

}  // namespace

void bind_plain(py::module_& m) {
  m.def(
      "chebval_clenshaw",
      [](const py::array& u, const F64& coeffs) {
        if (!is_f64(u)) fail(ErrorKind::Shape, "chebval_clenshaw: u must be a C-contiguous float64 array");
        if (coeffs.ndim() != 1 || coeffs.size() < 3)
          fail(ErrorKind::Shape, "chebval_clenshaw: coeffs must be one-dimensional with at least 3 values");
        py::array_t<double> out(u.size());
        const double* up = static_cast<const double*>(u.data());
        double* op = out.mutable_data();
        const double* cp = coeffs.data();
        const size_t n = static_cast<size_t>(u.size()), nc = static_cast<size_t>(coeffs.size());
        {
          py::gil_scoped_release nogil;
          hemlp::plain::chebval_clenshaw(up, n, cp, nc, op);
        }
        const std::vector<py::ssize_t> shape(u.shape(), u.shape() + u.ndim());
        return py::object(out.attr("reshape")(py::tuple(py::cast(shape))));
      },
      py::arg("u"), py::arg("coeffs"),
      "sum_k coeffs[k] T_k(u) by Clenshaw's recurrence, bit-identical to the numpy recurrence of\n"
      "hemlp.compiler.activations (no fused multiply-adds); u float64, C-contiguous.");
  m.def(
      "table_lookup",
      [](const F64& table, size_t points, double lo, double scale, double gain, double dom_lo, double dom_hi,
         const py::array& x, py::array& out) {
        if (table.ndim() != 1 || points < 1 || static_cast<size_t>(table.size()) != points + 1)
          fail(ErrorKind::Shape, "table_lookup: the table must hold points + 1 = " + std::to_string(points + 1) +
                                     " float64 nodes, got " + std::to_string(table.size()));
        if (out.size() != x.size() || !out.writeable())
          fail(ErrorKind::Shape, "table_lookup: out must be writable and hold as many values as x");
        const auto run = [&](auto in, auto res) {
          return lookup<decltype(in), decltype(res)>(table, points, lo, scale, gain, dom_lo, dom_hi, x, out);
        };
        if (is_f32(x) && is_f32(out)) return run(float{}, float{});
        if (is_f32(x) && is_f64(out)) return run(float{}, double{});
        if (is_f64(x) && is_f32(out)) return run(double{}, float{});
        if (is_f64(x) && is_f64(out)) return run(double{}, double{});
        fail(ErrorKind::Shape, "table_lookup: x and out must be C-contiguous float32 or float64 arrays");
      },
      py::arg("table"), py::arg("points"), py::arg("lo"), py::arg("scale"), py::arg("gain"), py::arg("dom_lo"),
      py::arg("dom_hi"), py::arg("x"), py::arg("out"),
      "out = gain * linear interpolation of table at (x - lo) * scale (hemlp.compiler.poly_table); True when some\n"
      "x is outside [dom_lo, dom_hi] or NaN (those outputs are the caller's to replace).");
}
