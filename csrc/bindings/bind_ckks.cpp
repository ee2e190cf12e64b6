#include <pybind11/complex.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "ckks/encoder.h"
#include "ckks/encryptor.h"
#include "ckks/errors.h"
#include "ckks/evaluator.h"
#include "ckks/keygen.h"
#include "bindings/convert.h"
#include "bindings/engine.h"
#include "ring/galois.h"

namespace py = pybind11;
using namespace hemlp;
using namespace hemlp::bind;

namespace {

std::vector<cplx> to_cplx(py::array_t<std::complex<double>, py::array::c_style | py::array::forcecast> z) {
  if (z.ndim() != 1) fail(ErrorKind::Shape, "values must be a 1-D array");
  return std::vector<cplx>(z.data(), z.data() + z.size());
}

}  // namespace

void bind_ckks(py::module_& m) {
  // The encodings and decryption-noise modes as enums (hemlp._core.Encoding.slot, DecryptMode.standard). Every
  // argument of these types still accepts the integers it took before (implicit conversion); the functions check the
  // value, since an integer converts to any value of the enum. Registered first: later defaults name them.
  py::enum_<Encoding>(m, "Encoding", py::arithmetic())
      .value("slot", Encoding::Slot)
      .value("coeff", Encoding::Coeff);
  py::implicitly_convertible<py::int_, Encoding>();
  py::enum_<DecryptNoise::Mode>(m, "DecryptMode", py::arithmetic())
      .value("none", DecryptNoise::Mode::None)
      .value("standard", DecryptNoise::Mode::Standard)
      .value("flood", DecryptNoise::Mode::Flood);
  py::implicitly_convertible<py::int_, DecryptNoise::Mode>();

  py::class_<ParamsSpec>(m, "ParamsSpec")
      .def(py::init<>())
      .def_readwrite("name", &ParamsSpec::name)
      .def_readwrite("log_n", &ParamsSpec::log_n)
      .def_readwrite("q_bits", &ParamsSpec::q_bits)
      .def_readwrite("p_bits", &ParamsSpec::p_bits)
      .def_readwrite("alpha", &ParamsSpec::alpha)
      .def_readwrite("log_scale", &ParamsSpec::log_scale)
      .def_readwrite("secret_hw", &ParamsSpec::secret_hw)
      .def_readwrite("sigma", &ParamsSpec::sigma);

  py::class_<Params>(m, "Params")
      .def(py::init<const ParamsSpec&>())
      .def_property_readonly("spec", &Params::spec)
      .def_property_readonly("log_n", &Params::log_n)
      .def_property_readonly("n", &Params::n)
      .def_property_readonly("max_level", &Params::max_level)
      .def_property_readonly("q", &Params::q)
      .def_property_readonly("p", &Params::p)
      .def_property_readonly("alpha", &Params::alpha)
      .def("num_digits", &Params::num_digits)
      .def_property_readonly("log_q", &Params::log_q)
      .def_property_readonly("log_qp", &Params::log_qp)
      .def_property_readonly("max_log_qp_128", &Params::max_log_qp_128)
      .def_property_readonly("is_128_bit_secure", &Params::is_128_bit_secure)
      .def_property_readonly("describe", &Params::describe)
      .def_property_readonly("hash_hex", &Params::hash_hex)
      .def_property_readonly("hash64", &Params::hash64)
      // what decryption's standard noise uses without a plan bound (a compiled plan prints it beside its own)
      .def_property_readonly("fresh_noise_bound", [](const Params& p) { return fresh_noise_bound(p); });

  py::class_<Plaintext>(m, "Plaintext")
      .def_readonly("level", &Plaintext::level)
      .def_readonly("scale", &Plaintext::scale)
      .def_readonly("slots", &Plaintext::slots)
      .def_property_readonly("encoding", [](const Plaintext& p) { return (int)p.encoding; })  // Encoding's value
      .def_readonly("is_complex", &Plaintext::is_complex)
      .def_readonly("param_hash", &Plaintext::param_hash)
      .def("poly", [](const Plaintext& p) { return poly_to_array(p.data, p.level + 1, p.data.size() / (p.level + 1)); });

  py::class_<Ciphertext>(m, "Ciphertext")
      .def_readonly("level", &Ciphertext::level)
      .def_readonly("scale", &Ciphertext::scale)
      .def_readonly("slots", &Ciphertext::slots)
      // Encoding's value, an int: serialised headers and the Ray runtime's metadata carry it as one
      .def_property_readonly("encoding", [](const Ciphertext& c) { return (int)c.encoding; })
      .def_readonly("is_complex", &Ciphertext::is_complex)
      .def_readonly("param_hash", &Ciphertext::param_hash)
      .def_readonly("key_id", &Ciphertext::key_id)
      .def_readonly("seeded", &Ciphertext::seeded)
      .def_property_readonly("seed", [](const Ciphertext& c) { return from_seed(c.seed); })
      .def_property_readonly("size", &Ciphertext::size)
      .def("poly", [](const Ciphertext& c, size_t j) {
        if (j >= c.size()) throw py::index_error("polynomial index out of range");
        const size_t n = c.polys[j].size() / (c.level + 1);
        return poly_to_array(c.polys[j], c.level + 1, n);
      })
      // A read-only (limbs, N) view of polynomial j, no copy: it keeps the ciphertext alive. Ray's put copies
      // such views straight into its object store (the driver's input export without a staging copy).
      .def("poly_view", [](py::object self, size_t j) {
        const Ciphertext& c = self.cast<const Ciphertext&>();
        if (j >= c.size()) throw py::index_error("polynomial index out of range");
        const py::ssize_t limbs = c.level + 1, n = static_cast<py::ssize_t>(c.polys[j].size()) / limbs;
        py::array_t<uint64_t> a({limbs, n}, {n * 8, py::ssize_t(8)}, c.polys[j].data(), self);
        a.attr("setflags")(py::arg("write") = false);
        return a;
      });

  py::class_<SecretKey>(m, "SecretKey")
      .def_readonly("param_hash", &SecretKey::param_hash)
      .def_readonly("key_id", &SecretKey::key_id)
      .def_property_readonly("coeffs", [](const SecretKey& s) {
        py::array_t<int8_t> a(s.coeffs.size());
        std::memcpy(a.mutable_data(), s.coeffs.data(), s.coeffs.size());
        return a;
      });
  py::class_<PublicKey>(m, "PublicKey")
      .def_readonly("param_hash", &PublicKey::param_hash)
      .def_readonly("key_id", &PublicKey::key_id);
  py::class_<SwitchKey>(m, "SwitchKey")
      .def_readonly("param_hash", &SwitchKey::param_hash)
      .def_readonly("key_id", &SwitchKey::key_id)
      .def_readonly("galois", &SwitchKey::galois)
      .def_readonly("level", &SwitchKey::level)
      .def_property_readonly("num_digits", [](const SwitchKey& k) { return k.b.size(); })
      .def_property_readonly("nbytes", [](const SwitchKey& k) {  // the b polynomials (a is a seed)
        return k.b.total_words() * sizeof(uint64_t);
      })
      .def_property_readonly("memory_bytes", [](const SwitchKey& k) {  // b and the a-halves held expanded
        return (k.b.total_words() + k.a.total_words()) * sizeof(uint64_t);
      })
      // borrowed read-only from a shared key file (hemlp.runtime.shared_keys): its pages are the machine's one copy
      .def_property_readonly("mapped", &SwitchKey::mapped);
  py::class_<GaloisKeys>(m, "GaloisKeys")
      .def(py::init<>())
      .def_readonly("param_hash", &GaloisKeys::param_hash)
      .def_readonly("key_id", &GaloisKeys::key_id)
      .def_property_readonly("elements", [](const GaloisKeys& g) {
        std::vector<uint64_t> v;
        for (auto& kv : g.keys) v.push_back(kv.first);
        return v;
      })
      // the highest ciphertext level every key of the set can switch (None when empty)
      .def_property_readonly("level", [](const GaloisKeys& g) -> py::object {
        if (g.keys.empty()) return py::none();
        int lv = g.keys.begin()->second.level;
        for (auto& kv : g.keys) lv = std::min(lv, kv.second.level);
        return py::int_(lv);
      })
      .def_property_readonly("levels", [](const GaloisKeys& g) {
        std::map<uint64_t, int> v;
        for (auto& kv : g.keys) v[kv.first] = kv.second.level;
        return v;
      })
      .def_property_readonly("nbytes", [](const GaloisKeys& g) {
        size_t s = 0;
        for (auto& kv : g.keys) s += kv.second.b.total_words();
        return s * sizeof(uint64_t);
      })
      .def_property_readonly("memory_bytes", [](const GaloisKeys& g) {  // b and the a-halves held expanded
        size_t s = 0;
        for (auto& kv : g.keys) s += kv.second.b.total_words() + kv.second.a.total_words();
        return s * sizeof(uint64_t);
      })
      .def("get", [](const GaloisKeys& g, uint64_t e) { return g.keys.at(e); })
      .def("merge", [](GaloisKeys& g, const GaloisKeys& o) {
        if (!g.keys.empty() && (g.param_hash != o.param_hash || g.key_id != o.key_id))
          fail(ErrorKind::KeyMismatch, "cannot merge Galois keys of different parameter sets or secret keys");
        g.param_hash = o.param_hash;
        g.key_id = o.key_id;
        for (auto& kv : o.keys) g.keys[kv.first] = kv.second;
      });

  py::class_<Engine, std::shared_ptr<Engine>>(m, "Engine")
      .def(py::init([](const Params& p, int min_security_bits) {
             return std::make_shared<Engine>(p, SecurityPolicy{min_security_bits});
           }), py::arg("params"), py::arg("min_security_bits") = 128, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("min_security_bits", [](const Engine& e) { return e.ctx.policy().min_bits; })
      .def_property_readonly("fresh_noise_bound", [](const Engine& e) { return fresh_noise_bound(e.ctx.params()); })
      .def_property_readonly("n", [](const Engine& e) { return e.ctx.n(); })
      .def_property_readonly("max_level", [](const Engine& e) { return e.ctx.max_level(); })
      .def("modulus", [](const Engine& e, int i) { return e.ctx.modulus(i).q; })
      // encoding
      .def("encode", [](const Engine& e, py::array_t<std::complex<double>, py::array::c_style | py::array::forcecast> z,
                        int slots, double scale, int level, bool is_complex) {
        auto v = to_cplx(z);
        py::gil_scoped_release r;
        return e.encoder.encode(v, slots, scale, level, is_complex);
      })
      .def("encode_coeff", [](const Engine& e, std::vector<double> x, double scale, int level) {
        py::gil_scoped_release r;
        return e.encoder.encode_coeff(x, scale, level);
      })
      .def("decode", [](const Engine& e, const Plaintext& p) {
        std::vector<cplx> v;
        {
          py::gil_scoped_release r;
          v = e.encoder.decode(p);
        }
        return py::array_t<std::complex<double>>(v.size(), v.data());
      })
      .def("decode_coeff", [](const Engine& e, const Plaintext& p) {
        std::vector<double> v;
        {
          py::gil_scoped_release r;
          v = e.encoder.decode_coeff(p);
        }
        return py::array_t<double>(v.size(), v.data());
      })
      .def("plaintext_coeffs", [](const Engine& e, const Plaintext& p) {
        auto c = e.encoder.coefficients(p);  // divided by the scale
        std::vector<double> v(c.begin(), c.end());
        return py::array_t<double>(v.size(), v.data());
      })
      .def("special_fft", [](const Engine& e, std::vector<cplx> v, bool inverse) {
        if (inverse) e.encoder.special_ifft(v);
        else e.encoder.special_fft(v);
        return v;
      })
      // keys
      .def("secret_key", [](const Engine& e) { return e.keygen.secret_key(); }, py::call_guard<py::gil_scoped_release>())
      .def("public_key", [](const Engine& e, const SecretKey& sk) { return e.keygen.public_key(sk); },
           py::call_guard<py::gil_scoped_release>())
      .def("relin_key", [](const Engine& e, const SecretKey& sk, int level) { return e.keygen.relin_key(sk, level); },
           py::arg("sk"), py::arg("level") = -1, py::call_guard<py::gil_scoped_release>())
      .def("galois_keys", [](const Engine& e, const SecretKey& sk, std::vector<uint64_t> elements, int level) {
        GaloisKeys g;
        g.param_hash = e.ctx.hash64();
        g.key_id = sk.key_id;
        e.keygen.key_level(level);  // a bad level fails even when there is no element
        for (auto el : elements)
          if (!g.keys.count(el)) g.keys.emplace(el, e.keygen.galois_key(sk, el, level));
        return g;
      }, py::arg("sk"), py::arg("elements"), py::arg("level") = -1, py::call_guard<py::gil_scoped_release>())
      .def("galois_element", [](const Engine& e, int64_t steps) { return ring::galois_element_rotation(steps, e.ctx.log_n()); })
      .def("conjugation_element", [](const Engine& e) { return ring::galois_element_conjugation(e.ctx.log_n()); })
      // encryption
      .def("encrypt_pk", [](const Engine& e, const Plaintext& p, const PublicKey& k) { return e.encryptor.encrypt(p, k); },
           py::call_guard<py::gil_scoped_release>())
      .def("encrypt_sk", [](const Engine& e, const Plaintext& p, const SecretKey& k) { return e.encryptor.encrypt(p, k); },
           py::call_guard<py::gil_scoped_release>())
      // mode: none (tests only), standard, flood (DecryptMode or 0 / 1 / 2); sigma = 0 with standard: the
      // fresh-encryption bound.
      .def("decrypt", [](const Engine& e, const Ciphertext& c, const SecretKey& k, DecryptNoise::Mode mode,
                         uint64_t sigma) { return e.encryptor.decrypt(c, k, decrypt_noise(e, mode, sigma)); },
           py::arg("ct"), py::arg("sk"), py::arg("mode") = DecryptNoise::Mode::Standard, py::arg("sigma") = 0,
           py::call_guard<py::gil_scoped_release>())
      // evaluation
      .def("add", [](const Engine& e, const Ciphertext& a, const Ciphertext& b) { return e.eval.add(a, b); }, py::call_guard<py::gil_scoped_release>())
      .def("sub", [](const Engine& e, const Ciphertext& a, const Ciphertext& b) { return e.eval.sub(a, b); }, py::call_guard<py::gil_scoped_release>())
      .def("negate", [](const Engine& e, const Ciphertext& a) { return e.eval.negate(a); }, py::call_guard<py::gil_scoped_release>())
      .def("add_inplace", [](const Engine& e, Ciphertext& a, const Ciphertext& b) { e.eval.add_inplace(a, b); }, py::call_guard<py::gil_scoped_release>())
      .def("sub_inplace", [](const Engine& e, Ciphertext& a, const Ciphertext& b) { e.eval.sub_inplace(a, b); }, py::call_guard<py::gil_scoped_release>())
      .def("negate_inplace", [](const Engine& e, Ciphertext& a) { e.eval.negate_inplace(a); }, py::call_guard<py::gil_scoped_release>())
      .def("add_plain", [](const Engine& e, const Ciphertext& a, const Plaintext& p) { return e.eval.add_plain(a, p); }, py::call_guard<py::gil_scoped_release>())
      .def("sub_plain", [](const Engine& e, const Ciphertext& a, const Plaintext& p) { return e.eval.sub_plain(a, p); }, py::call_guard<py::gil_scoped_release>())
      .def("mul_plain", [](const Engine& e, const Ciphertext& a, const Plaintext& p) { return e.eval.mul_plain(a, p); }, py::call_guard<py::gil_scoped_release>())
      .def("mul_plain_inplace", [](const Engine& e, Ciphertext& a, const Plaintext& p) { e.eval.mul_plain_inplace(a, p); }, py::call_guard<py::gil_scoped_release>())
      .def("mul_integer", [](const Engine& e, const Ciphertext& a, int64_t k) { return e.eval.mul_integer(a, k); }, py::call_guard<py::gil_scoped_release>())
      .def("mul", [](const Engine& e, const Ciphertext& a, const Ciphertext& b, const SwitchKey* rlk) { return e.eval.mul(a, b, rlk); },
           py::arg("a"), py::arg("b"), py::arg("rlk") = nullptr, py::call_guard<py::gil_scoped_release>())
      .def("mul_relin_rescale", [](const Engine& e, const Ciphertext& a, const Ciphertext& b, const SwitchKey& k) {
        return e.eval.mul_relin_rescale(a, b, k);
      }, py::call_guard<py::gil_scoped_release>())
      .def("mul_relin_rescale_many", [](const Engine& e, const std::vector<const Ciphertext*>& a,
                                        const std::vector<const Ciphertext*>& b, const SwitchKey& k) {
        return e.eval.mul_relin_rescale_many(a, b, k);
      }, py::call_guard<py::gil_scoped_release>())
      .def("relinearize", [](const Engine& e, const Ciphertext& a, const SwitchKey& k) { return e.eval.relinearize(a, k); }, py::call_guard<py::gil_scoped_release>())
      .def("rescale", [](const Engine& e, const Ciphertext& a) { return e.eval.rescale(a); }, py::call_guard<py::gil_scoped_release>())
      .def("rescale_inplace", [](const Engine& e, Ciphertext& a) { e.eval.rescale_inplace(a); }, py::call_guard<py::gil_scoped_release>())
      .def("drop_to_level", [](const Engine& e, const Ciphertext& a, int l) { return e.eval.drop_to_level(a, l); }, py::call_guard<py::gil_scoped_release>())
      .def("apply_galois", [](const Engine& e, const Ciphertext& a, uint64_t g, const GaloisKeys& k) { return e.eval.apply_galois(a, g, k); }, py::call_guard<py::gil_scoped_release>())
      .def("apply_galois_inplace", [](const Engine& e, Ciphertext& a, uint64_t g, const GaloisKeys& k) { e.eval.apply_galois_inplace(a, g, k); }, py::call_guard<py::gil_scoped_release>())
      // the key-switching scratch pool: (buffers, bytes) it retains; clear_scratch frees them (benchmarks, tests)
      .def("scratch_stats", [](const Engine& e) {
        return py::make_tuple(e.ctx.scratch().retained_buffers(), e.ctx.scratch().retained_bytes());
      })
      .def("clear_scratch", [](const Engine& e) { e.ctx.scratch().clear(); })
      .def_property("scratch_limit", [](const Engine& e) { return e.ctx.scratch().max_bytes(); },
                    [](const Engine& e, size_t b) { e.ctx.scratch().set_max_bytes(b); })
      .def("apply_galois_hoisted", [](const Engine& e, const Ciphertext& a, std::vector<uint64_t> gs, const GaloisKeys& k) {
        return e.eval.apply_galois_hoisted(a, gs, k);
      }, py::call_guard<py::gil_scoped_release>())
      .def("add_const", [](const Engine& e, const Ciphertext& a, double c) { return e.eval.add_const(a, c); }, py::call_guard<py::gil_scoped_release>())
      .def("with_scale", [](const Engine&, const Ciphertext& a, double s) { Ciphertext c = a; c.scale = s; return c; })
      // raw NTT of one limb (benchmarks and tests)
      .def("ntt_limb", [](const Engine& e, U64Arr a, int limb, bool inverse) {
        if (limb < 0 || limb > e.ctx.max_level() + e.ctx.num_p()) throw py::index_error("limb out of range");
        if (a.ndim() != 1 || (size_t)a.size() != e.ctx.n()) throw py::value_error("array must have N entries");
        const uint64_t q = e.ctx.modulus(limb).q;
        for (py::ssize_t i = 0; i < a.size(); ++i)
          if (a.data()[i] >= q) throw py::value_error("residue >= modulus");
        U64Arr out(a.size());
        std::copy(a.data(), a.data() + a.size(), out.mutable_data());
        {
          py::gil_scoped_release r;
          if (inverse) e.ctx.ntt(limb).inverse(out.mutable_data());
          else e.ctx.ntt(limb).forward(out.mutable_data());
        }
        return out;
      }, py::arg("a"), py::arg("limb") = 0, py::arg("inverse") = false)
      // export / validated import (serialisation is done in Python on top of these)
      .def("export_sk", [](const Engine& e, const SecretKey& k) { return poly_to_array(k.ntt_qp, e.ctx.max_level() + 1 + e.ctx.num_p(), e.ctx.n()); })
      .def("import_sk", [](const Engine& e, py::array_t<int8_t, py::array::c_style | py::array::forcecast> coeffs, uint64_t key_id) {
        return import_secret_key(e.ctx, coeffs.data(), (size_t)coeffs.size(), key_id);
      })
      .def("export_pk", [](const Engine& e, const PublicKey& k) {
        return py::make_tuple(poly_to_array(k.b, e.ctx.max_level() + 1, e.ctx.n()), poly_to_array(k.a, e.ctx.max_level() + 1, e.ctx.n()));
      })
      .def("import_pk", [](const Engine& e, U64Arr b, U64Arr a, uint64_t key_id) {
        return import_public_key(e.ctx, view_of(b), view_of(a), key_id);
      })
      .def("export_switch_key", [](const Engine& e, const SwitchKey& k) {
        py::list bs, seeds;
        const size_t limbs = (size_t)k.level + 1 + e.ctx.num_p();
        for (size_t t = 0; t < k.b.size(); ++t) bs.append(poly_to_array(k.b.data(t), k.b.words(t), limbs, e.ctx.n()));
        for (auto& s : k.a_seeds) seeds.append(from_seed(s));
        return py::make_tuple(bs, seeds);
      })
      // (b digits, a digits) with a seeded key's a-parts expanded: what a device that cannot run the seed
      // expansion needs (hemlp.gpu uploads these)
      .def("export_switch_key_expanded", [](const Engine& e, const SwitchKey& k) {
        py::list bs, as;
        const int limbs = k.level + 1 + e.ctx.num_p();
        for (size_t t = 0; t < k.b.size(); ++t)
          bs.append(poly_to_array(k.b.data(t), k.b.words(t), (size_t)limbs, e.ctx.n()));
        if (!k.a.empty()) {
          for (size_t t = 0; t < k.a.size(); ++t)
            as.append(poly_to_array(k.a.data(t), k.a.words(t), (size_t)limbs, e.ctx.n()));
        } else {
          for (auto& s : k.a_seeds) as.append(poly_to_array(uniform_from_seed(e.ctx, s, limbs, true, k.level), (size_t)limbs, e.ctx.n()));
        }
        return py::make_tuple(bs, as);
      })
      // A switching key from explicit (b, a) digits (each level + 1 + K limbs of N residues, checked): tests that
      // compare another backend against this core on keys of their own
      .def("switch_key_from_arrays", [](const Engine& e, std::vector<U64Arr> bs, std::vector<U64Arr> as,
                                        uint64_t galois, int level, uint64_t key_id) {
        if (level < 0 || level > e.ctx.max_level()) fail(ErrorKind::Level, "switch_key_from_arrays: level outside the chain");
        const int digits = e.ctx.params().num_digits(level), limbs = level + 1 + e.ctx.num_p();
        if ((int)bs.size() != digits || (int)as.size() != digits)
          fail(ErrorKind::Shape, "switch_key_from_arrays: a key for level " + std::to_string(level) + " has " +
                                     std::to_string(digits) + " digits");
        SwitchKey k;
        k.param_hash = e.ctx.hash64();
        k.key_id = key_id;
        k.galois = galois;
        k.level = level;
        const size_t n = e.ctx.n();
        for (int pass = 0; pass < 2; ++pass)
          for (const auto& arr : pass ? as : bs) {
            if (arr.ndim() != 2 || (int)arr.shape(0) != limbs || (size_t)arr.shape(1) != n)
              fail(ErrorKind::Shape, "switch_key_from_arrays: each digit is (level + 1 + K, N)");
            Poly p(arr.data(), arr.data() + (size_t)limbs * n);
            for (int r = 0; r < limbs; ++r) {
              const uint64_t q = e.ctx.modulus(e.ctx.qp_index(level, r)).q;
              for (size_t i = 0; i < n; ++i)
                if (p[(size_t)r * n + i] >= q) fail(ErrorKind::Parameter, "switch_key_from_arrays: residue >= modulus");
            }
            (pass ? k.a : k.b).owned("switch_key_from_arrays").push_back(std::move(p));
          }
        return k;
      })
      .def("import_switch_key", [](const Engine& e, py::list bs, py::list seeds, uint64_t key_id, uint64_t galois,
                                   int level, bool seeded) {
        std::vector<U64Arr> arrays;  // keep the (maybe converted) arrays alive while the views are read
        std::vector<PolyView> views;
        std::vector<Seed> sv;
        for (auto b : bs) arrays.push_back(b.cast<U64Arr>());
        for (auto& a : arrays) views.push_back(view_of(a));
        for (auto s : seeds) sv.push_back(to_seed(s.cast<py::bytes>()));
        return import_switch_key(e.ctx, views, sv, key_id, galois, level, seeded);
      }, py::arg("bs"), py::arg("seeds"), py::arg("key_id"), py::arg("galois"), py::arg("level"),
         py::arg("seeded") = false)
      .def("make_galois_keys", [](const Engine& e, std::vector<SwitchKey> keys, uint64_t key_id) {
        GaloisKeys g;
        g.param_hash = e.ctx.hash64();
        g.key_id = key_id;
        for (auto& k : keys) g.keys[k.galois] = std::move(k);  // `keys` is this call's own copy
        return g;
      })
      // records: (b arrays, seeds, Galois element, level) per key, read in place; each key is imported straight
      // into the set (never copied), seeded when its level <= seed_max_level
      .def("import_galois_keys", [](const Engine& e, py::list records, uint64_t key_id, int seed_max_level) {
        std::vector<std::vector<U64Arr>> arrays;  // keep the (maybe converted) arrays alive while the views are read
        std::vector<SwitchKeyRecord> recs;
        for (auto item : records) {
          auto t = item.cast<py::tuple>();
          if (t.size() != 4) throw py::value_error("import_galois_keys: a record has 4 fields");
          arrays.emplace_back();
          for (auto b : t[0].cast<py::list>()) arrays.back().push_back(b.cast<U64Arr>());
          SwitchKeyRecord r;
          for (auto& a : arrays.back()) r.bs.push_back(view_of(a));
          for (auto s : t[1].cast<py::list>()) r.seeds.push_back(to_seed(s.cast<py::bytes>()));
          r.galois = t[2].cast<uint64_t>();
          r.level = t[3].cast<int>();
          recs.push_back(std::move(r));
        }
        py::gil_scoped_release nogil;  // the copies, the residue checks and the seed expansions need no Python
        return import_galois_keys(e.ctx, recs, key_id, seed_max_level);
      }, py::arg("records"), py::arg("key_id"), py::arg("seed_max_level") = -1)
      .def("import_ciphertext", [](const Engine& e, py::list polys, int level, double scale, int slots, Encoding encoding,
                                   bool is_complex, uint64_t key_id, py::object seed) {
        std::vector<U64Arr> arrays;
        std::vector<PolyView> views;
        for (auto p : polys) arrays.push_back(p.cast<U64Arr>());
        for (auto& a : arrays) views.push_back(view_of(a));
        Seed s{};
        const bool seeded = !seed.is_none();
        if (seeded) s = to_seed(seed.cast<py::bytes>());
        py::gil_scoped_release r;  // the copy, the residue checks and the seed expansion need no Python
        return import_ciphertext(e.ctx, views, level, scale, slots, (int)encoding, is_complex, key_id, seeded ? &s : nullptr);
      })
      // many ciphertexts at once, in parallel on the native threads: records of (polys, level, scale, slots,
      // encoding, is_complex, key_id, seed or None), the arrays read in place (each copied once, when imported)
      .def("import_ciphertexts", [](const Engine& e, py::list records) {
        std::vector<U64Arr> arrays;  // keep the (maybe converted) arrays alive while the views are read
        std::vector<CiphertextRecord> recs;
        std::vector<size_t> first;   // index in `arrays` of each record's first polynomial
        for (auto item : records) {
          auto t = item.cast<py::tuple>();
          if (t.size() != 8) throw py::value_error("import_ciphertexts: a record has 8 fields");
          CiphertextRecord r;
          first.push_back(arrays.size());
          for (auto p : t[0].cast<py::list>()) arrays.push_back(p.cast<U64Arr>());
          r.level = t[1].cast<int>();
          r.scale = t[2].cast<double>();
          r.slots = t[3].cast<int>();
          r.encoding = t[4].cast<int>();
          r.is_complex = t[5].cast<bool>();
          r.key_id = t[6].cast<uint64_t>();
          r.seeded = !t[7].is_none();
          if (r.seeded) r.seed = to_seed(t[7].cast<py::bytes>());
          recs.push_back(std::move(r));
        }
        for (size_t i = 0; i < recs.size(); ++i) {
          const size_t end = i + 1 < recs.size() ? first[i + 1] : arrays.size();
          for (size_t j = first[i]; j < end; ++j) recs[i].polys.push_back(view_of(arrays[j]));
        }
        std::vector<Ciphertext> out;
        {
          py::gil_scoped_release r;
          out = import_ciphertexts(e.ctx, recs);
        }
        py::list result;
        for (auto& c : out) result.append(py::cast(std::move(c)));
        return result;
      });
}
