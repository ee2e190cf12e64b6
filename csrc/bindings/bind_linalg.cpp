// Bindings for PCMM on ciphertext stacks (hemlp.linalg builds on these).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings/engine.h"
#include "ckks/errors.h"
#include "pcmm/pcmm.h"
// after the ckks headers: its templates name hemlp::Encoding
#include "bindings/convert.h"

namespace py = pybind11;

void bind_linalg(py::module_& m) {
  m.def("pcmm_rlwe",
        [](const hemlp::Engine& e, const hemlp::pcmm::ModGemmPlan& plan,
           std::vector<const hemlp::Ciphertext*> inputs, size_t chunks, int64_t K, double factor, bool rescale,
           std::vector<double> bias) {
          py::gil_scoped_release r;
          return hemlp::pcmm::pcmm_rlwe(e.ctx, plan, inputs, chunks, K, factor, rescale, bias);
        },
        py::arg("engine"), py::arg("plan"), py::arg("inputs"), py::arg("chunks"), py::arg("K"), py::arg("factor"),
        py::arg("rescale") = false, py::arg("bias") = std::vector<double>{});
  m.def(
      "pcmm_rlwe_rows",
      [](const hemlp::Engine& e, const hemlp::pcmm::ModGemmPlan& plan, std::vector<py::object> part0,
         std::vector<py::object> part1, size_t chunks, int64_t K, double factor, bool rescale, std::vector<double> bias,
         int level, double scale, int slots, hemlp::Encoding encoding, bool is_complex, uint64_t key_id) {
        using hemlp::ErrorKind;
        using hemlp::fail;
        hemlp::bind::check_imported_metadata(e.ctx, level, scale, slots, (int)encoding, "pcmm input rows");
        if (part0.size() != part1.size())
          fail(ErrorKind::Shape, "pcmm input rows: part 0 and part 1 lists differ in length");
        const size_t n = e.ctx.n();
        std::vector<hemlp::pcmm::InputRow> rows(part0.size());
        for (size_t i = 0; i < rows.size(); ++i) {
          for (int p = 0; p < 2; ++p) {
            const py::object& o = p == 0 ? part0[i] : part1[i];
            if (o.is_none()) continue;
            if (!py::isinstance<py::array_t<uint64_t>>(o))
              fail(ErrorKind::Shape, "pcmm input rows: each row part must be a uint64 array (limbs, N) or None");
            auto a = py::reinterpret_borrow<py::array>(o);
            if (a.ndim() != 2 || a.shape(0) != level + 1 || static_cast<size_t>(a.shape(1)) != n ||
                (n > 1 && a.strides(1) != 8) || a.strides(0) % 8)
              fail(ErrorKind::Shape, "pcmm input rows: row " + std::to_string(i) + " must be (" +
                                         std::to_string(level + 1) + ", " + std::to_string(n) +
                                         ") uint64 with contiguous rows of N residues");
            rows[i].part[p] = static_cast<const uint64_t*>(a.data());
            rows[i].limb_stride[p] = static_cast<size_t>(a.strides(0) / 8);
          }
        }
        hemlp::Ciphertext meta;
        hemlp::bind::set_imported_metadata(meta, e.ctx, key_id, level, scale, slots, (int)encoding);
        meta.is_complex = is_complex;
        py::gil_scoped_release r;
        return hemlp::pcmm::pcmm_rlwe_rows(e.ctx, plan, rows, meta, chunks, K, factor, rescale, bias);
      },
      py::arg("engine"), py::arg("plan"), py::arg("part0"), py::arg("part1"), py::arg("chunks"), py::arg("K"),
      py::arg("factor"), py::arg("rescale"), py::arg("bias"), py::arg("level"), py::arg("scale"), py::arg("slots"),
      py::arg("encoding"), py::arg("is_complex"), py::arg("key_id"),
      "pcmm_rlwe over rows given as (limbs, N) uint64 views of each part (None = a zero row), e.g. read-only\n"
      "object-store arrays: the same arithmetic and threads as pcmm_rlwe, no copy of the input.");
  m.def("pcmm_epilogue_part",
        [](const hemlp::Engine& e, py::array Y, int level, int64_t K, int part, double scale,
           std::vector<double> bias) {
          using U64 = py::array_t<uint64_t, py::array::c_style>;
          const size_t n = e.ctx.n();
          if (!py::isinstance<U64>(Y) || !(Y.flags() & py::array::c_style) || !Y.writeable())
            throw py::value_error("pcmm_epilogue_part: Y must be a writable C-contiguous uint64 array "
                                  "(limbs, polynomials, N)");
          if (Y.ndim() != 3 || static_cast<size_t>(Y.shape(2)) != n)
            throw py::value_error("pcmm_epilogue_part: Y must have shape (limbs, polynomials, N=" +
                                  std::to_string(n) + ")");
          if (level < 1 || level > e.ctx.max_level() || Y.shape(0) != level + 1)
            throw py::value_error("pcmm_epilogue_part: Y has " + std::to_string(Y.shape(0)) +
                                  " limbs, expected level + 1 = " + std::to_string(level + 1) +
                                  " with 1 <= level <= " + std::to_string(e.ctx.max_level()));
          const size_t count = static_cast<size_t>(Y.shape(1));
          U64 out({static_cast<py::ssize_t>(level), static_cast<py::ssize_t>(count), static_cast<py::ssize_t>(n)});
          auto* in = static_cast<uint64_t*>(Y.mutable_data());
          uint64_t* o = out.mutable_data();
          {
            py::gil_scoped_release r;
            hemlp::pcmm::pcmm_epilogue_part(e.ctx, in, count, level, K, part, scale, bias, o);
          }
          return out;
        },
        py::arg("engine"), py::arg("Y"), py::arg("level"), py::arg("K"), py::arg("part"), py::arg("scale"),
        py::arg("bias") = std::vector<double>{},
        "x K (in place), rescale and (part 0) a constant bias per polynomial, on one part of many ciphertexts\n"
        "held limb-major (limbs, polynomials, N); returns (limbs - 1, polynomials, N). Bit-identical to the\n"
        "epilogue of pcmm_rlwe / Evaluator rescale and add_const on whole ciphertexts.");
}

#include <cstring>

#include "bindings/convert.h"
#include "ckks/errors.h"
#include "pcmm/msrlwe.h"

namespace {
using namespace hemlp;
using namespace hemlp::bind;
using namespace hemlp::pcmm;

// Offline half of the precomputed path: K U A for a session's row seeds, kept native.
struct PrecomputedA {
  std::vector<Poly> polys;
  int level = 0;
  std::string session;
  int64_t K = 1;
};

}  // namespace

void bind_msrlwe(py::module_& m) {
  py::class_<MultiSecretKey>(m, "MultiSecretKey")
      .def_readonly("key_id", &MultiSecretKey::key_id)
      .def_readonly("param_hash", &MultiSecretKey::param_hash)
      .def_property_readonly("k", [](const MultiSecretKey& k) { return k.coeffs.size(); })
      .def_property_readonly("coeffs", [](const MultiSecretKey& k) {
        py::array_t<int8_t> a({k.coeffs.size(), k.coeffs.empty() ? (size_t)0 : k.coeffs[0].size()});
        for (size_t j = 0; j < k.coeffs.size(); ++j) std::memcpy(a.mutable_data() + j * k.coeffs[j].size(), k.coeffs[j].data(), k.coeffs[j].size());
        return a;
      });
  py::class_<MsCiphertext>(m, "MsCiphertext")
      .def_readonly("level", &MsCiphertext::level)
      .def_readonly("scale", &MsCiphertext::scale)
      .def_readonly("slots", &MsCiphertext::slots)
      .def_readonly("key_id", &MsCiphertext::key_id)
      .def_readonly("param_hash", &MsCiphertext::param_hash)
      .def_readonly("seeded", &MsCiphertext::seeded)
      .def_property_readonly("seed", [](const MsCiphertext& c) { return from_seed(c.seed); })
      .def_property_readonly("encoding", [](const MsCiphertext& c) { return (int)c.encoding; })  // Encoding's value
      .def_property_readonly("k", [](const MsCiphertext& c) { return c.b.size(); })
      .def("poly_a", [](const MsCiphertext& c) { return poly_to_array(c.a, c.level + 1, c.a.size() / (c.level + 1)); })
      .def("poly_b", [](const MsCiphertext& c, size_t j) {
        if (j >= c.b.size()) throw py::index_error("chunk out of range");
        return poly_to_array(c.b[j], c.level + 1, c.b[j].size() / (c.level + 1));
      });
  m.def("ms_secret_key", [](const Engine& e, int k) { return multi_secret_key(e.ctx, k); }, py::call_guard<py::gil_scoped_release>());
  m.def("ms_import_key", [](const Engine& e, py::array_t<int8_t, py::array::c_style | py::array::forcecast> c, uint64_t key_id) {
    if (c.ndim() != 2 || (size_t)c.shape(1) != e.ctx.n() || c.shape(0) < 1)
      fail(ErrorKind::Serialization, "multi-secret key: wrong shape");
    MultiSecretKey k;
    k.param_hash = e.ctx.hash64();
    k.key_id = key_id;
    for (py::ssize_t j = 0; j < c.shape(0); ++j) {
      std::vector<int8_t> v(c.data() + j * e.ctx.n(), c.data() + (j + 1) * e.ctx.n());
      for (auto x : v)
        if (x < -1 || x > 1) fail(ErrorKind::Serialization, "multi-secret key: coefficient outside {-1,0,1}");
      k.ntt_qp.push_back(small_to_ntt_qp(e.ctx, v));
      k.coeffs.push_back(std::move(v));
    }
    return k;
  });
  m.def("ms_row_seed", [](py::bytes session, uint64_t row) { return from_seed(row_seed(to_seed(session), row)); });
  m.def("ms_encrypt", [](const Engine& e, std::vector<Plaintext> pts, const MultiSecretKey& k, py::bytes seed) {
    Seed s = to_seed(seed);
    py::gil_scoped_release r;
    return ms_encrypt(e.ctx, pts, k, s);
  });
  m.def("ms_decrypt", [](const Engine& e, const MsCiphertext& c, const MultiSecretKey& k, DecryptNoise::Mode mode,
                         uint64_t sigma) {
    return ms_decrypt(e.ctx, c, k, decrypt_noise(e, mode, sigma));
  }, py::arg("engine"), py::arg("ct"), py::arg("key"), py::arg("mode") = DecryptNoise::Mode::Standard,
        py::arg("sigma") = 0, py::call_guard<py::gil_scoped_release>());
  m.def("ms_import", [](const Engine& e, U64Arr a, std::vector<U64Arr> bs, int level, double scale, int slots,
                        Encoding encoding, uint64_t key_id, py::object seed) {
    check_imported_metadata(e.ctx, level, scale, slots, (int)encoding, "MSRLWE row");
    if (bs.empty()) fail(ErrorKind::Serialization, "MSRLWE row: no chunks");
    MsCiphertext c;
    set_imported_metadata(c, e.ctx, key_id, level, scale, slots, (int)encoding);
    if (!seed.is_none()) {
      c.seed = to_seed(seed.cast<py::bytes>());
      c.seeded = true;
      c.a = ms_a_from_seed(e.ctx, c.seed, level);
    } else {
      c.a = array_to_poly(e.ctx, a, level, false, "MSRLWE row");
    }
    for (auto& b : bs) c.b.push_back(array_to_poly(e.ctx, b, level, false, "MSRLWE row"));
    return c;
  });
  py::class_<PrecomputedA>(m, "PrecomputedA")
      .def_readonly("level", &PrecomputedA::level)
      .def_readonly("K", &PrecomputedA::K)
      .def_property_readonly("session", [](const PrecomputedA& p) { return py::bytes(p.session); })
      .def_property_readonly("rows", [](const PrecomputedA& p) { return p.polys.size(); });
  m.def("pcmm_msrlwe", [](const Engine& e, const ModGemmPlan& plan, std::vector<const MsCiphertext*> rows, int64_t K,
                          double factor, const PrecomputedA* pre) {
    if (pre) {
      if (pre->K != K) fail(ErrorKind::Parameter, "precomputed U*A was made for another weight scaling");
      Seed session;
      std::memcpy(session.data(), pre->session.data(), 32);
      for (size_t i = 0; i < rows.size(); ++i) {
        const MsCiphertext* r = rows[i];
        if (r && (!r->seeded || r->level != pre->level || r->seed != row_seed(session, i)))
          fail(ErrorKind::Parameter, "precomputed U*A does not match these rows (level or row seeds); precompute it "
                                     "for this encryption session and level");
      }
    }
    py::gil_scoped_release r;
    return pcmm_msrlwe(e.ctx, plan, rows, K, factor, pre ? &pre->polys : nullptr);
  }, py::arg("engine"), py::arg("plan"), py::arg("rows"), py::arg("K"), py::arg("factor"), py::arg("precomputed") = nullptr);
  m.def("ms_precompute_a", [](const Engine& e, const ModGemmPlan& plan, py::bytes session, size_t rows, int level, int64_t K) {
    Seed s = to_seed(session);
    if (rows != plan.cols()) fail(ErrorKind::Shape, "precompute: the weight matrix's columns must equal the encrypted rows");
    if (level < 0 || level > e.ctx.max_level()) fail(ErrorKind::Level, "precompute: level out of range");
    py::gil_scoped_release r;
    std::vector<Poly> a;
    for (size_t i = 0; i < rows; ++i) a.push_back(ms_a_from_seed(e.ctx, row_seed(s, i), level));
    std::vector<const Poly*> ap;
    for (auto& p : a) ap.push_back(&p);
    PrecomputedA out;
    out.polys = pcmm_a_parts(e.ctx, plan, ap, level, K);
    out.level = level;
    out.session = std::string(reinterpret_cast<const char*>(s.data()), 32);
    out.K = K;
    return out;
  });
  m.def("ms_conversion_keys", [](const Engine& e, const SecretKey& sk, const MultiSecretKey& k) { return ms_conversion_keys(e.ctx, sk, k); },
        py::call_guard<py::gil_scoped_release>());
  m.def("ms_to_rlwe", [](const Engine& e, const MsCiphertext& c, const std::vector<SwitchKey>& keys) { return ms_to_rlwe(e.ctx, c, keys); },
        py::call_guard<py::gil_scoped_release>());
  m.def("ms_rescale", [](const Engine& e, const MsCiphertext& c) { return ms_rescale(e.ctx, c); }, py::call_guard<py::gil_scoped_release>());
  m.def("ms_add_plain", [](const Engine& e, const MsCiphertext& c, size_t j, const Plaintext& p) { return ms_add_plain(e.ctx, c, j, p); },
        py::call_guard<py::gil_scoped_release>());
}

#include "pcmm/mlwe.h"

void bind_mlwe(py::module_& m) {
  m.def("modpack_keys", [](const hemlp::Engine& e, const hemlp::SecretKey& sk, int k, int level) {
    if (level < -1 || level > e.ctx.max_level())
      hemlp::fail(hemlp::ErrorKind::Parameter, "ModPack keys: level outside the modulus chain");
    return hemlp::pcmm::modpack_keys(e.ctx, sk, k, level);
  }, py::arg("engine"), py::arg("sk"), py::arg("k"), py::arg("level") = -1, py::call_guard<py::gil_scoped_release>());
  m.def("pcmm_mlwe", [](const hemlp::Engine& e, const hemlp::pcmm::ModGemmPlan& plan,
                        std::vector<const hemlp::Ciphertext*> inputs, int k, int64_t K, double factor,
                        const std::vector<hemlp::SwitchKey>& keys) {
    py::gil_scoped_release r;
    return hemlp::pcmm::pcmm_mlwe(e.ctx, plan, inputs, k, K, factor, keys);
  });
}

void bind_ms_conversion(py::module_& m) {
  using namespace hemlp;
  using namespace hemlp::pcmm;
  py::class_<MsConversionKey>(m, "MsConversionKey")
      .def_readonly("k", &MsConversionKey::k)
      .def_readonly("key_id", &MsConversionKey::key_id)
      .def_readonly("ms_key_id", &MsConversionKey::ms_key_id);
  m.def("rlwe_to_ms_key", [](const Engine& e, const SecretKey& sk, const MultiSecretKey& msk) {
    return rlwe_to_ms_key(e.ctx, sk, msk);
  }, py::call_guard<py::gil_scoped_release>());
  m.def("rlwe_to_ms", [](const Engine& e, std::vector<const Ciphertext*> cts, const MsConversionKey& key) {
    return rlwe_to_ms(e.ctx, cts, key);
  }, py::call_guard<py::gil_scoped_release>());
}
