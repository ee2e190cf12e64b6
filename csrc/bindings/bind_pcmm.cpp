// Python bindings for the exact modular GEMM (csrc/pcmm/modgemm.h). Every argument is validated here or
// in the C++ layer (std::invalid_argument, translated to ValueError); bad input never reaches BLAS.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "pcmm/modgemm.h"

namespace py = pybind11;
using hemlp::pcmm::ModGemmConfig;
using hemlp::pcmm::ModGemmPlan;

namespace {

using I64 = py::array_t<int64_t, py::array::c_style>;
using U64 = py::array_t<uint64_t, py::array::c_style>;

[[noreturn]] void fail(const std::string& msg) { throw py::value_error(msg); }

std::string shape_str(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + (a.ndim() == 1 ? ",)" : ")");
}
std::string dtype_str(const py::array& a) { return py::str(a.dtype()).cast<std::string>(); }

// A Python integer (or anything with __index__, e.g. numpy integers) in [lo, hi]; bool is rejected.
int64_t as_int(py::handle h, const char* name, int64_t lo, int64_t hi) {
  if (PyBool_Check(h.ptr()) || !PyIndex_Check(h.ptr()))
    fail(std::string(name) + " must be an integer, got " + py::str(py::type::of(h)).cast<std::string>());
  py::int_ v = py::reinterpret_steal<py::int_>(PyNumber_Index(h.ptr()));
  if (!v) throw py::error_already_set();
  if (v < py::int_(lo) || v > py::int_(hi))
    fail(std::string(name) + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
         py::str(v).cast<std::string>());
  return v.cast<int64_t>();
}

uint64_t as_modulus(py::handle h) {
  if (PyBool_Check(h.ptr()) || !PyIndex_Check(h.ptr()))
    fail("q must be an integer, got " + py::str(py::type::of(h)).cast<std::string>());
  py::int_ v = py::reinterpret_steal<py::int_>(PyNumber_Index(h.ptr()));
  if (!v) throw py::error_already_set();
  const py::int_ limit(uint64_t(1) << hemlp::pcmm::kMaxModulusBits);
  if (v < py::int_(3) || v >= limit)
    fail("q must be an odd modulus with 3 <= q < 2^61, got " + py::str(v).cast<std::string>());
  const uint64_t q = v.cast<uint64_t>();
  if ((q & 1) == 0) fail("q must be odd (an NTT prime), got " + std::to_string(q));
  return q;
}

I64 as_U(py::handle h) {
  if (!py::isinstance<py::array>(h)) fail("U must be a numpy.ndarray of dtype int64");
  auto a = py::reinterpret_borrow<py::array>(h);
  if (!py::isinstance<py::array_t<int64_t>>(a)) fail("U must have dtype int64, got " + dtype_str(a));
  if (a.ndim() != 2) fail("U must be 2-D (d1, d2), got shape " + shape_str(a));
  if (a.shape(0) < 1 || a.shape(1) < 1) fail("U must be non-empty, got shape " + shape_str(a));
  return I64::ensure(a);  // dtype already matches: at most a layout copy
}

// X as row pointers: any uint64 matrix whose rows are contiguous (a row-strided view, e.g. one polynomial part
// of a block of ciphertexts in Ray's object store, is read in place); other layouts are copied once. X may also be
// a list or tuple of such matrices with the same column count, stacked along the rows: one GEMM reduces over rows
// held in several blocks (the row blocks of a previous layer's output) without gathering them into one array.
struct XRows {
  std::vector<py::array> keep;  // own or reference the data for the call
  std::vector<const uint64_t*> rows;
  size_t n = 0;
};

void add_rows(XRows& x, py::handle h, const std::string& what, bool first) {
  if (!py::isinstance<py::array>(h)) fail(what + " must be a numpy.ndarray of dtype uint64");
  auto a = py::reinterpret_borrow<py::array>(h);
  if (!py::isinstance<py::array_t<uint64_t>>(a))
    fail(what + " must have dtype uint64 (residues in [0, q)), got " + dtype_str(a));
  if (a.ndim() != 2) fail(what + " must be 2-D (rows, n), got shape " + shape_str(a));
  const size_t n = static_cast<size_t>(a.shape(1));
  if (first) x.n = n;
  else if (n != x.n)
    fail(what + " has " + std::to_string(n) + " columns but the first block has " + std::to_string(x.n) +
         " (row blocks of X must share their column count)");
  const bool rows_contiguous = (a.shape(1) <= 1 || a.strides(1) == 8) && a.strides(0) % 8 == 0;
  py::array kept = rows_contiguous ? a : py::array(U64::ensure(a));
  const auto* base = static_cast<const uint64_t*>(kept.data());
  const py::ssize_t ld = rows_contiguous ? a.strides(0) / 8 : static_cast<py::ssize_t>(n);
  for (py::ssize_t k = 0; k < a.shape(0); ++k) x.rows.push_back(base + k * ld);
  x.keep.push_back(std::move(kept));
}

XRows as_X(py::handle h, size_t d2, const char* what) {
  XRows x;
  if (py::isinstance<py::list>(h) || py::isinstance<py::tuple>(h)) {
    auto seq = py::reinterpret_borrow<py::sequence>(h);
    if (seq.size() == 0) fail(std::string(what) + " is an empty list of row blocks");
    for (size_t i = 0; i < seq.size(); ++i)
      add_rows(x, seq[i], std::string(what) + "[" + std::to_string(i) + "]", i == 0);
  } else {
    add_rows(x, h, what, true);
  }
  if (x.rows.size() != d2)
    fail(std::string(what) + " has " + std::to_string(x.rows.size()) + " rows but U has " + std::to_string(d2) +
         " columns (shapes must be U (d1, d2), X (d2, n))");
  return x;
}

void check_residues(const XRows& X, uint64_t q) {
  for (size_t k = 0; k < X.rows.size(); ++k)
    for (size_t j = 0; j < X.n; ++j)
      if (X.rows[k][j] >= q)
        fail("X[" + std::to_string(k) + ", " + std::to_string(j) + "] = " + std::to_string(X.rows[k][j]) +
             " is not a residue mod q = " + std::to_string(q));
}

// Smallest b >= 0 with max|U| <= 2^b.
int infer_bU(const I64& U) {
  const int64_t* d = U.data();
  uint64_t mx = 0;
  for (py::ssize_t i = 0; i < U.size(); ++i) {
    const uint64_t mag = d[i] < 0 ? uint64_t(0) - uint64_t(d[i]) : uint64_t(d[i]);
    mx = std::max(mx, mag);
  }
  if (mx > (uint64_t(1) << hemlp::pcmm::kMaxUBits)) fail("U entries must satisfy |U| <= 2^62");
  int b = 0;
  while ((uint64_t(1) << b) < mx) ++b;
  return b;
}

int get_bU(py::handle bU, const I64& U) {
  return bU.is_none() ? infer_bU(U) : static_cast<int>(as_int(bU, "bU", 0, hemlp::pcmm::kMaxUBits));
}

// Explicit split overrides (None = automatic); returns false when everything is automatic.
bool overrides(const ModGemmPlan& plan, uint64_t q, py::handle w, py::handle u, py::handle kb, ModGemmConfig& cfg) {
  if (w.is_none() && u.is_none() && kb.is_none()) return false;
  cfg = plan.config(q);
  if (!w.is_none() || !u.is_none()) cfg.kb = 0;  // new digit sizes: largest exact block unless given
  if (!w.is_none()) {
    cfg.w = static_cast<int>(as_int(w, "w", 1, 64));
    cfg.T = 0;
  }
  if (!u.is_none()) {
    cfg.u = static_cast<int>(as_int(u, "u", 1, 64));
    cfg.TU = 0;
  }
  if (!kb.is_none()) cfg.kb = static_cast<size_t>(as_int(kb, "kb", 1, INT64_MAX));
  cfg = plan.check_config(q, cfg);  // throws ValueError (invalid_argument) on an inexact choice
  return true;
}

// C = U X mod q into a new (d1, n) array, or into `out_obj`: a writable uint64 (d1, n) array whose rows are
// contiguous (e.g. one limb of a limb-major block: the Ray runtime's GEMM writes its output in place).
py::array run(const ModGemmPlan& plan, const XRows& X, uint64_t q, const ModGemmConfig* cfg,
              py::handle out_obj = py::none()) {
  const size_t d1 = plan.rows(), n = X.n;
  py::array C;
  size_t ldc = n;
  if (out_obj.is_none()) {
    C = U64({static_cast<py::ssize_t>(d1), static_cast<py::ssize_t>(n)});
  } else {
    if (!py::isinstance<py::array_t<uint64_t>>(out_obj)) fail("out must be a numpy.ndarray of dtype uint64");
    C = py::reinterpret_borrow<py::array>(out_obj);
    if (C.ndim() != 2 || static_cast<size_t>(C.shape(0)) != d1 || static_cast<size_t>(C.shape(1)) != n)
      fail("out must have shape (" + std::to_string(d1) + ", " + std::to_string(n) + "), got " + shape_str(C));
    if (!C.writeable()) fail("out must be writable");
    if ((n > 1 && C.strides(1) != 8) || C.strides(0) % 8 != 0 || (d1 > 1 && size_t(C.strides(0)) < 8 * n))
      fail("out must have contiguous, non-overlapping rows (a C-contiguous array or a row-strided view)");
    ldc = d1 > 1 ? static_cast<size_t>(C.strides(0)) / 8 : n;
    // Output panels are written while later input panels are still read: out must not alias X.
    const auto* o0 = static_cast<const uint64_t*>(C.data());
    const uint64_t* o1 = o0 + (d1 - 1) * ldc + n;
    for (const uint64_t* r : X.rows)
      if (r < o1 && o0 < r + n) fail("out must not overlap X");
  }
  if (n == 0) return C;
  auto* out = static_cast<uint64_t*>(C.mutable_data());
  {
    py::gil_scoped_release nogil;  // pure C++ from here; the arrays are kept alive by the caller
    if (cfg)
      plan.apply(X.rows.data(), n, q, out, ldc, *cfg);
    else
      plan.apply(X.rows.data(), n, q, out, ldc);
  }
  return C;
}

py::dict config_dict(const ModGemmConfig& c) {
  py::dict d;
  d["w"] = c.w;
  d["T"] = c.T;
  d["u"] = c.u;
  d["TU"] = c.TU;
  d["kb"] = c.kb;
  d["nblk"] = c.nblk;
  return d;
}

}  // namespace

void bind_pcmm(py::module_& m) {
  m.def(
      "modgemm",
      [](py::object U_obj, py::object X_obj, py::object q_obj, py::object bU_obj, py::object w, py::object u,
         py::object kb) {
        const uint64_t q = as_modulus(q_obj);
        I64 U = as_U(U_obj);
        const int bU = get_bU(bU_obj, U);
        XRows X = as_X(X_obj, static_cast<size_t>(U.shape(1)), "X");
        ModGemmPlan plan(U.data(), static_cast<size_t>(U.shape(0)), static_cast<size_t>(U.shape(1)), bU);
        ModGemmConfig cfg;
        const bool explicit_cfg = overrides(plan, q, w, u, kb, cfg);
        return run(plan, X, q, explicit_cfg ? &cfg : nullptr);
      },
      py::arg("U"), py::arg("X"), py::arg("q"), py::arg("bU") = py::none(), py::kw_only(),
      py::arg("w") = py::none(), py::arg("u") = py::none(), py::arg("kb") = py::none(),
      "C = U @ X mod q, exactly, through FP64 DGEMM on balanced digits.\n\n"
      "U: int64[d1, d2] with |U| <= 2^bU (bU inferred from U when None); X: uint64[d2, n] residues in\n"
      "[0, q); q odd, 3 <= q < 2^61. Returns uint64[d1, n]. Keyword-only w (X digit bits), u (U digit\n"
      "bits) and kb (K-block) force a split; an inexact one raises ValueError.");
  m.def(
      "modgemm_ref",
      [](py::object U_obj, py::object X_obj, py::object q_obj) {
        const uint64_t q = as_modulus(q_obj);
        I64 U = as_U(U_obj);
        XRows X = as_X(X_obj, static_cast<size_t>(U.shape(1)), "X");
        check_residues(X, q);
        const size_t d1 = static_cast<size_t>(U.shape(0)), d2 = static_cast<size_t>(U.shape(1)), n = X.n;
        U64 C({static_cast<py::ssize_t>(d1), static_cast<py::ssize_t>(n)});
        if (n == 0) return C;
        const int64_t* Ud = U.data();
        uint64_t* out = C.mutable_data();
        {
          py::gil_scoped_release nogil;
          hemlp::pcmm::modgemm_ref(Ud, d1, d2, X.rows.data(), n, q, out, n);
        }
        return C;
      },
      py::arg("U"), py::arg("X"), py::arg("q"),
      "Reference C = U @ X mod q with exact __int128 accumulation (any int64 U).");
  m.def(
      "modgemm_limb_bits",
      [](py::object d2, py::object bU, py::object q) {
        return hemlp::pcmm::choose_modgemm_config(static_cast<size_t>(as_int(d2, "d2", 1, INT32_MAX)),
                                                  static_cast<int>(as_int(bU, "bU", 0, hemlp::pcmm::kMaxUBits)),
                                                  as_modulus(q))
            .w;
      },
      py::arg("d2"), py::arg("bU"), py::arg("q"), "X digit width w that modgemm picks for (d2, bU, q).");
  m.def(
      "modgemm_config",
      [](py::object d2_obj, py::object bU_obj, py::object q_obj, py::object w, py::object u, py::object kb) {
        const size_t d2 = static_cast<size_t>(as_int(d2_obj, "d2", 1, INT32_MAX));
        const int bU = static_cast<int>(as_int(bU_obj, "bU", 0, hemlp::pcmm::kMaxUBits));
        const uint64_t q = as_modulus(q_obj);
        ModGemmConfig c = hemlp::pcmm::choose_modgemm_config(d2, bU, q);
        if (!w.is_none() || !u.is_none()) c.kb = 0;
        if (!w.is_none()) c.w = static_cast<int>(as_int(w, "w", 1, 64)), c.T = 0;
        if (!u.is_none()) c.u = static_cast<int>(as_int(u, "u", 1, 64)), c.TU = 0;
        if (!kb.is_none()) c.kb = static_cast<size_t>(as_int(kb, "kb", 1, INT64_MAX));
        return config_dict(hemlp::pcmm::check_modgemm_config(d2, bU, q, c));
      },
      py::arg("d2"), py::arg("bU"), py::arg("q"), py::kw_only(), py::arg("w") = py::none(),
      py::arg("u") = py::none(), py::arg("kb") = py::none(),
      "The split modgemm uses (dict w, T, u, TU, kb, nblk); with overrides, validated like modgemm.");

  py::class_<ModGemmPlan>(m, "ModGemmPlan",
                          "Prepared plaintext matrix U for repeated exact U @ X mod q (any q, reusable).")
      .def(py::init([](py::object U_obj, py::object bU_obj) {
             I64 U = as_U(U_obj);
             const int bU = get_bU(bU_obj, U);
             return new ModGemmPlan(U.data(), static_cast<size_t>(U.shape(0)), static_cast<size_t>(U.shape(1)),
                                    bU);
           }),
           py::arg("U"), py::arg("bU") = py::none())
      .def(
          "apply",
          [](const ModGemmPlan& p, py::object X_obj, py::object q_obj, py::object w, py::object u, py::object kb,
             py::object out) {
            const uint64_t q = as_modulus(q_obj);
            XRows X = as_X(X_obj, p.cols(), "X");
            ModGemmConfig cfg;
            const bool explicit_cfg = overrides(p, q, w, u, kb, cfg);
            return run(p, X, q, explicit_cfg ? &cfg : nullptr, out);
          },
          py::arg("X"), py::arg("q"), py::kw_only(), py::arg("w") = py::none(), py::arg("u") = py::none(),
          py::arg("kb") = py::none(), py::arg("out") = py::none(),
          "U @ X mod q, exactly. X: uint64 (d2, n) with contiguous rows (row-strided views are read in place), or a\n"
          "list of such row blocks stacked along the rows (one GEMM over all of them, no gather). out: an optional\n"
          "writable (d1, n) uint64 array with contiguous rows that does not overlap X.")
      .def("config", [](const ModGemmPlan& p, py::object q) { return config_dict(p.config(as_modulus(q))); })
      .def("limb_bits", [](const ModGemmPlan& p, py::object q) { return p.limb_bits(as_modulus(q)); })
      .def_property_readonly("shape", [](const ModGemmPlan& p) { return py::make_tuple(p.rows(), p.cols()); })
      .def_property_readonly("bU", &ModGemmPlan::bU);
  m.def("modgemm_release_scratch", &hemlp::pcmm::modgemm_release_scratch,
        "Free the scratch buffers modgemm keeps for reuse between calls.");
}
