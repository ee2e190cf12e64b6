// Bindings for batched bootstrapping (boot/msrlwe_convert, boot/ms_lintrans): argument conversion only.
#include <pybind11/complex.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>

#include "bindings/convert.h"
#include "bindings/engine.h"
#include "boot/ms_lintrans.h"
#include "boot/msrlwe_convert.h"
#include "bindings/lintrans_counts.h"
#include "ckks/errors.h"
#include "ckks/keygen.h"

namespace py = pybind11;
using namespace hemlp;

namespace {

// A NativeLinearTransform kept with the Engine whose context it references (diagonals over Q_l ∪ P).
struct BoundBatchTransform {
  std::shared_ptr<Engine> engine;
  std::unique_ptr<NativeLinearTransform> lt;
};

// A read-only (limbs, N) numpy view of a key polynomial; `owner` (the Python key object) is kept alive by it.
py::array poly_view(const u64* p, size_t words, size_t limbs, size_t n, py::handle owner) {
  if (words != limbs * n) fail(ErrorKind::Parameter, "key export: a polynomial's size does not match its level");
  py::array a(py::dtype::of<uint64_t>(), {limbs, n}, {n * sizeof(uint64_t), sizeof(uint64_t)}, p, owner);
  py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return a;
}

py::array poly_view(const Poly& p, size_t limbs, size_t n, py::handle owner) {
  return poly_view(p.data(), p.size(), limbs, n, owner);
}

py::list poly_views(const KeyPolys& ps, size_t limbs, size_t n, py::handle owner) {
  py::list out;
  for (size_t t = 0; t < ps.size(); ++t) out.append(poly_view(ps.data(t), ps.words(t), limbs, n, owner));
  return out;
}

std::vector<PolyView> views_of(const std::vector<bind::U64Arr>& arrays) {
  std::vector<PolyView> v;
  for (auto& a : arrays) v.push_back(bind::view_of(a));
  return v;
}

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
      .def_property_readonly("nbytes", [](const BatchConversionKeys& k) { return batch_conversion_key_bytes(k); })
      // as serialised: the uniform parts (big_a, small_alpha, the back keys' a-halves) are seeds
      .def_property_readonly("serialised_nbytes", [](const BatchConversionKeys& k) {
        size_t s = 0;
        for (auto& p : k.small_beta) s += p.size();
        for (auto& p : k.big_b) s += p.size();
        for (auto& sw : k.back) s += sw.b.total_words();
        return s * sizeof(uint64_t);
      });
  m.def("batch_conversion_keys", [](const Engine& e, const SecretKey& sk, const MultiSecretKey& msk, int h, int level,
                                    int back_level, bool seeded) {
    BatchConversionKeys k = batch_conversion_keys(e.ctx, sk, msk, h, level, back_level);
    if (seeded)
      for (auto& b : k.back) drop_expanded_a(e.ctx, b);
    return k;
  }, py::arg("engine"), py::arg("sk"), py::arg("msk"), py::arg("h"), py::arg("level"), py::arg("back_level"),
     py::arg("seeded") = false, py::call_guard<py::gil_scoped_release>());
  // Serialisation (hemlp.bootstrap.batch_keys_io): the fields as numpy views of the key memory (no copy) and
  // seeds; the back keys as (b arrays, a seeds) pairs.
  m.def("export_batch_conversion_keys", [](const Engine& e, py::object obj) {
    const BatchConversionKeys& k = obj.cast<const BatchConversionKeys&>();
    if (k.param_hash != e.ctx.hash64()) fail(ErrorKind::ContextMismatch, "batch conversion keys of another context");
    if (k.small_alpha_seeds.size() != k.small_alpha.size())
      fail(ErrorKind::Parameter, "batch conversion keys without seeds cannot be serialised");
    const size_t n = e.ctx.n(), big = (size_t)k.level + 1 + e.ctx.num_p();
    py::list sas, sb, bb, back;
    for (auto& s : k.small_alpha_seeds) sas.append(bind::from_seed(s));
    for (auto& p : k.small_beta) sb.append(poly_view(p, 2, n, obj));
    for (auto& p : k.big_b) bb.append(poly_view(p, big, n, obj));
    for (auto& sw : k.back) {
      py::list seeds;
      const size_t limbs = (size_t)sw.level + 1 + e.ctx.num_p();
      py::list bs = poly_views(sw.b, limbs, n, obj);
      for (auto& s : sw.a_seeds) seeds.append(bind::from_seed(s));
      back.append(py::make_tuple(bs, seeds));
    }
    py::dict meta;
    meta["key_id"] = k.key_id;
    meta["ms_key_id"] = k.ms_key_id;
    meta["sparse_id"] = k.sparse_id;
    meta["k"] = k.k;
    meta["hamming_weight"] = k.hamming_weight;
    meta["level"] = k.level;
    meta["back_level"] = k.back_level;
    return py::make_tuple(meta, sas, sb, bind::from_seed(k.big_a_seed), bb, back);
  });
  m.def("import_batch_conversion_keys", [](const Engine& e, uint64_t key_id, uint64_t ms_key_id, uint64_t sparse_id,
                                           int k, int h, int level, int back_level, py::list small_alpha_seeds,
                                           py::list small_beta, py::bytes big_a_seed, py::list big_b, py::list back,
                                           bool seeded) {
    BatchConversionRecord r;
    r.key_id = key_id;
    r.ms_key_id = ms_key_id;
    r.sparse_id = sparse_id;
    r.k = k;
    r.hamming_weight = h;
    r.level = level;
    r.back_level = back_level;
    for (auto s : small_alpha_seeds) r.small_alpha_seeds.push_back(bind::to_seed(s.cast<py::bytes>()));
    r.big_a_seed = bind::to_seed(big_a_seed);
    std::vector<bind::U64Arr> sb, bb;  // kept alive while the views are read
    for (auto a : small_beta) sb.push_back(a.cast<bind::U64Arr>());
    for (auto a : big_b) bb.push_back(a.cast<bind::U64Arr>());
    r.small_beta = views_of(sb);
    r.big_b = views_of(bb);
    std::vector<std::vector<bind::U64Arr>> backs;
    std::vector<std::vector<Seed>> back_seeds;
    std::vector<SwitchKey> keys;  // back keys given as native keys (a shared key file's, borrowed: not imported)
    for (auto item : back) {
      if (py::isinstance<SwitchKey>(item)) {
        keys.push_back(item.cast<const SwitchKey&>());
        continue;
      }
      py::tuple t = item.cast<py::tuple>();
      if (t.size() != 2) fail(ErrorKind::Serialization, "batch conversion keys: malformed back key");
      backs.emplace_back();
      back_seeds.emplace_back();
      for (auto a : t[0].cast<py::list>()) backs.back().push_back(a.cast<bind::U64Arr>());
      for (auto s : t[1].cast<py::list>()) back_seeds.back().push_back(bind::to_seed(s.cast<py::bytes>()));
    }
    if (!keys.empty() && !backs.empty())
      fail(ErrorKind::Serialization, "batch conversion keys: back keys are either all native keys or all arrays");
    py::gil_scoped_release nogil;
    for (size_t j = 0; j < backs.size(); ++j) {
      keys.push_back(import_switch_key(e.ctx, views_of(backs[j]), back_seeds[j], key_id, 0, back_level, seeded));
    }
    return import_batch_conversion_keys(e.ctx, r, std::move(keys));
  });
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
  m.def("ms_retag", [](const Engine& e, const MsCiphertext& ct, double scale, int slots, Encoding encoding) {
    if (ct.param_hash != e.ctx.hash64()) fail(ErrorKind::ContextMismatch, "ms_retag: foreign ciphertext");
    // an integer converts to any value of the enum
    if (!(scale > 0) || (encoding != Encoding::Slot && encoding != Encoding::Coeff))
      fail(ErrorKind::Parameter, "ms_retag: bad scale or encoding");
    MsCiphertext out = ct;
    out.scale = scale;
    out.slots = slots;
    out.encoding = encoding;
    return out;
  });
  py::class_<MsGaloisKeys>(m, "MsGaloisKeys")
      .def_readonly("param_hash", &MsGaloisKeys::param_hash)
      .def_readonly("ms_key_id", &MsGaloisKeys::ms_key_id)
      .def_readonly("k", &MsGaloisKeys::k)
      .def_property_readonly("nbytes", [](const MsGaloisKeys& k) { return ms_galois_key_bytes(k); })
      .def_property_readonly("serialised_nbytes", [](const MsGaloisKeys& k) {
        size_t s = 0;
        for (const auto& kv : k.keys)
          for (const auto& bj : kv.second.beta) s += bj.total_words();
        return s * sizeof(uint64_t);
      })
      .def_property_readonly("seeded", [](const MsGaloisKeys& k) {
        for (const auto& kv : k.keys)
          if (!kv.second.alpha.empty()) return false;
        return true;
      })
      .def_property_readonly("levels", [](const MsGaloisKeys& k) {
        std::map<uint64_t, int> out;
        for (const auto& [g, key] : k.keys) out[g] = key.level;
        return out;
      });
  m.def("ms_galois_keys", [](const Engine& e, const MultiSecretKey& msk,
                             const std::vector<std::pair<uint64_t, int>>& elements, int seed_max_level) {
    return ms_galois_keys(e.ctx, msk, elements, seed_max_level);
  }, py::arg("engine"), py::arg("msk"), py::arg("elements"), py::arg("seed_max_level") = -1,
     py::call_guard<py::gil_scoped_release>());
  m.def("seed_ms_galois_keys", [](const Engine& e, MsGaloisKeys& k, int seed_max_level) {
    if (k.param_hash != e.ctx.hash64()) fail(ErrorKind::ContextMismatch, "batched Galois keys of another context");
    seed_ms_galois_keys(e.ctx, k, seed_max_level);
  });
  // [(element, level, [alpha seeds], [[beta_j digit arrays]])]: numpy views of the key memory (no copy)
  m.def("export_ms_galois_keys", [](const Engine& e, py::object obj) {
    const MsGaloisKeys& k = obj.cast<const MsGaloisKeys&>();
    if (k.param_hash != e.ctx.hash64()) fail(ErrorKind::ContextMismatch, "batched Galois keys of another context");
    const size_t n = e.ctx.n();
    py::list out;
    for (const auto& [g, key] : k.keys) {
      const size_t limbs = (size_t)key.level + 1 + e.ctx.num_p();
      py::list seeds, beta;
      for (auto& s : key.alpha_seeds) seeds.append(bind::from_seed(s));
      for (auto& bj : key.beta) beta.append(poly_views(bj, limbs, n, obj));
      out.append(py::make_tuple(g, key.level, seeds, beta));
    }
    return out;
  });
  m.def("import_ms_galois_keys", [](const Engine& e, uint64_t ms_key_id, int k, py::list records, int seed_max_level) {
    std::vector<MsKeyRecord> recs;
    std::vector<bind::U64Arr> keep;  // the (maybe converted) arrays, alive while the views are read
    size_t count = 0;
    for (auto item : records) {
      py::tuple t = item.cast<py::tuple>();
      if (t.size() != 4) fail(ErrorKind::Serialization, "batched Galois keys: malformed key record");
      for (auto bj : t[3].cast<py::list>()) count += py::len(bj);
    }
    keep.reserve(count);  // no reallocation: the views below point into these arrays
    for (auto item : records) {
      py::tuple t = item.cast<py::tuple>();
      MsKeyRecord r;
      r.galois = t[0].cast<uint64_t>();
      r.level = t[1].cast<int>();
      for (auto s : t[2].cast<py::list>()) r.alpha_seeds.push_back(bind::to_seed(s.cast<py::bytes>()));
      for (auto bj : t[3].cast<py::list>()) {
        r.beta.emplace_back();
        for (auto a : bj.cast<py::list>()) {
          keep.push_back(a.cast<bind::U64Arr>());
          r.beta.back().push_back(bind::view_of(keep.back()));
        }
      }
      recs.push_back(std::move(r));
    }
    py::gil_scoped_release nogil;
    return import_ms_galois_keys(e.ctx, ms_key_id, k, recs, seed_max_level);
  });
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
