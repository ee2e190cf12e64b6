#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "ring/galois.h"
#include "ring/ntt.h"
#include "ring/primes.h"
#include "ring/rns.h"
#include "ring/simd.h"
#include "ring/vecops.h"

namespace py = pybind11;
using namespace hemlp::ring;
using Arr = py::array_t<uint64_t, py::array::c_style | py::array::forcecast>;

namespace {
void check_residues(const Arr& a, uint64_t q, const char* what) {
  auto r = a.unchecked();
  const uint64_t* d = a.data();
  for (py::ssize_t i = 0; i < a.size(); ++i)
    if (d[i] >= q) throw py::value_error(std::string(what) + ": residue >= modulus");
  (void)r;
}
}  // namespace

void bind_ring(py::module_& m) {
  m.def("is_prime", &is_prime);
  m.def("ntt_primes", &ntt_primes, py::arg("bits"), py::arg("log_n"), py::arg("count"),
        py::arg("exclude") = std::vector<uint64_t>{});
  m.def("primitive_root_2n", &minimal_primitive_root_2n);
  m.def("bit_reverse", &bit_reverse);
  m.def("ntt", [](Arr a, uint64_t q, int log_n, bool inverse) {
    if (a.ndim() != 1 || (size_t)a.size() != (size_t(1) << log_n)) throw py::value_error("array must have N entries");
    check_residues(a, q, "ntt");
    NTTTables t(q, log_n);
    Arr out(a.size());
    std::copy(a.data(), a.data() + a.size(), out.mutable_data());
    if (inverse) t.inverse(out.mutable_data());
    else t.forward(out.mutable_data());
    return out;
  }, py::arg("a"), py::arg("q"), py::arg("log_n"), py::arg("inverse") = false);
  m.def("base_convert", [](Arr x, std::vector<uint64_t> from, std::vector<uint64_t> to, bool centred) {
    if (x.ndim() != 2 || (size_t)x.shape(0) != from.size()) throw py::value_error("x must be (len(from), n)");
    const size_t n = x.shape(1);
    std::vector<Modulus> f, t;
    for (auto q : from) f.emplace_back(q);
    for (auto q : to) t.emplace_back(q);
    BaseConverter conv(f, t, centred);
    Arr out({to.size(), n});
    std::vector<const uint64_t*> in(from.size());
    std::vector<uint64_t*> o(to.size());
    for (size_t i = 0; i < from.size(); ++i) in[i] = x.data() + i * n;
    for (size_t j = 0; j < to.size(); ++j) o[j] = out.mutable_data() + j * n;
    conv.convert(in.data(), o.data(), n);
    return out;
  }, py::arg("x"), py::arg("from_moduli"), py::arg("to_moduli"), py::arg("centred") = false);
  m.def("centred_lift", [](Arr x, uint64_t from, uint64_t p) {
    if (x.ndim() != 1) throw py::value_error("centred_lift: x must be 1-D");
    if (from < 3 || p < 3 || from >= (uint64_t(1) << 62) || p >= (uint64_t(1) << 62))
      throw py::value_error("centred_lift: moduli must be in [3, 2^62)");
    check_residues(x, from, "centred_lift");
    Arr out(x.size());
    centred_lift_vec(x.data(), from, p, out.mutable_data(), (size_t)x.size());
    return out;
  }, py::arg("x"), py::arg("from_modulus"), py::arg("to_modulus"),
     "The centred lift of residues mod from_modulus (x > from/2 stands for x - from), reduced mod to_modulus.");
  m.def("galois_ntt_permutation", &galois_ntt_permutation);
  m.def("galois_element_rotation", &galois_element_rotation);
  m.def("galois_coeff", [](Arr a, uint64_t g, int log_n, uint64_t q) {
    if ((size_t)a.size() != (size_t(1) << log_n)) throw py::value_error("array must have N entries");
    Arr out(a.size());
    galois_coeff(a.data(), out.mutable_data(), g, log_n, q);
    return out;
  });
  // The SIMD kernels in use ("avx512", "avx2" or "scalar"; see ring/simd.h for HEMLP_SIMD).
  m.def("simd_path", [] { return std::string(simd_path_name(simd_path())); });
  m.def("simd_available", [] { return std::string(simd_available()); });
  m.def("mul_mod_barrett", [](uint64_t a, uint64_t b, uint64_t q) { return Modulus(q).mul(a, b); });
}
