// The C interface (hemlp_cuda.h): argument and size checks, exceptions to error codes, and the homomorphic
// operations composed from the device kernels in the same order as the CPU evaluator (ckks/evaluator.cpp).
#include <cublas_v2.h>

#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "cuda/hemlp_cuda.h"
#include "cuda/boot_steps.cuh"
#include "cuda/kernels.cuh"
#include "cuda/lintrans.cuh"
#include "cuda/mlwe.cuh"
#include "cuda/modgemm.cuh"

using namespace hemlp::cuda;

namespace {

thread_local std::string g_error;

struct Ctx {
  std::unique_ptr<GpuContext> gc;
  cublasHandle_t blas = nullptr;
  ~Ctx() {
    if (blas) cublasDestroy(blas);
  }
};

struct Buf {
  DeviceBuffer mem;
};

int fail(int code, const std::string& msg) {
  g_error = msg;
  return code;
}

template <class F>
int guarded(F&& f) {
  try {
    f();
    g_error.clear();
    return 0;
  } catch (const std::invalid_argument& e) {
    return fail(1, e.what());
  } catch (const CudaError& e) {
    const std::string m = e.what();
    return fail(m.find("cudaErrorMemoryAllocation") != std::string::npos ? 3 : 2, m);
  } catch (const std::bad_alloc&) {
    return fail(3, "out of host memory");
  } catch (const std::exception& e) {
    return fail(4, e.what());
  }
}

Ctx* C(void* p) {
  if (!p) throw std::invalid_argument("null context");
  return static_cast<Ctx*>(p);
}
const GpuContext& G(void* p) { return *C(p)->gc; }

// The device pointer of a buffer holding at least `words` words.
u64* P(const void* b, size_t words, const char* what) {
  if (!b) throw std::invalid_argument(std::string(what) + ": null buffer");
  const Buf* buf = static_cast<const Buf*>(b);
  if (buf->mem.words() < words)
    throw std::invalid_argument(std::string(what) + ": buffer of " + std::to_string(buf->mem.words()) +
                                " words, needs " + std::to_string(words));
  return buf->mem.data();
}

void check_level(const GpuContext& g, int level, int min_level, const char* what) {
  if (level < min_level || level > g.max_level())
    throw std::invalid_argument(std::string(what) + ": level " + std::to_string(level) + " outside [" +
                                std::to_string(min_level) + ", " + std::to_string(g.max_level()) + "]");
}

size_t poly_words(const GpuContext& g, int level) { return (size_t)(level + 1) * g.n(); }

const DeviceSwitchKey& K(const void* k, int level, const char* what) {
  if (!k) throw std::invalid_argument(std::string(what) + ": null key");
  const auto& key = *static_cast<const DeviceSwitchKey*>(k);
  if (level > key.level)
    throw std::invalid_argument(std::string(what) + ": the ciphertext is at level " + std::to_string(level) +
                                " but the key was generated for levels <= " + std::to_string(key.level));
  return key;
}

}  // namespace

extern "C" {

const char* hg_last_error(void) { return g_error.c_str(); }

int hg_device_info(int* count, char* name, int name_len, size_t* total_memory) {
  return guarded([&] {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      cudaGetLastError();  // clear the sticky "no device" state
      n = 0;
    }
    *count = n;
    if (name && name_len > 0) name[0] = 0;
    if (total_memory) *total_memory = 0;
    if (n > 0) {
      cudaDeviceProp prop;
      HG_CHECK(cudaGetDeviceProperties(&prop, 0));
      if (name && name_len > 0) {
        std::strncpy(name, prop.name, (size_t)name_len - 1);
        name[name_len - 1] = 0;
      }
      if (total_memory) *total_memory = prop.totalGlobalMem;
    }
  });
}

int hg_mem_info(size_t* free_bytes, size_t* total_bytes) {
  return guarded([&] { HG_CHECK(cudaMemGetInfo(free_bytes, total_bytes)); });
}

int hg_context_create(int log_n, int num_q, int num_p, int alpha, const uint64_t* moduli, const uint64_t* psi,
                      int device, void** ctx) {
  return guarded([&] {
    if (!moduli || !psi || !ctx) throw std::invalid_argument("null argument");
    auto c = std::make_unique<Ctx>();
    c->gc = std::make_unique<GpuContext>(log_n, num_q, num_p, alpha, moduli, psi, device);
    *ctx = c.release();
  });
}

void hg_context_destroy(void* ctx) { delete static_cast<Ctx*>(ctx); }

int hg_sync(void* ctx) { return guarded([&] { G(ctx).sync(); }); }

int hg_buffer_alloc(void* ctx, size_t words, void** buf) {
  return guarded([&] {
    auto b = std::make_unique<Buf>();
    b->mem = G(ctx).alloc(words);
    *buf = b.release();
  });
}

void hg_buffer_free(void* buf) { delete static_cast<Buf*>(buf); }

int hg_upload(void* ctx, void* buf, size_t offset, const uint64_t* host, size_t words) {
  return guarded([&] {
    u64* d = P(buf, offset + words, "upload");
    HG_CHECK(cudaMemcpyAsync(d + offset, host, words * sizeof(u64), cudaMemcpyHostToDevice, G(ctx).stream()));
    G(ctx).sync();  // the host array may go as soon as this returns
  });
}

int hg_download(void* ctx, const void* buf, size_t offset, uint64_t* host, size_t words) {
  return guarded([&] {
    const u64* d = P(buf, offset + words, "download");
    HG_CHECK(cudaMemcpyAsync(host, d + offset, words * sizeof(u64), cudaMemcpyDeviceToHost, G(ctx).stream()));
    G(ctx).sync();
  });
}

int hg_copy(void* ctx, const void* src, void* dst, size_t words) {
  return guarded([&] {
    HG_CHECK(cudaMemcpyAsync(P(dst, words, "copy"), P(src, words, "copy"), words * sizeof(u64),
                             cudaMemcpyDeviceToDevice, G(ctx).stream()));
  });
}

int hg_copy_strided(void* ctx, const void* src, size_t src_off, size_t src_pitch, void* dst, size_t dst_off,
                    size_t dst_pitch, size_t width, size_t height) {
  return guarded([&] {
    if (height == 0 || width == 0) return;
    if (width > src_pitch || width > dst_pitch) throw std::invalid_argument("strided copy: width above a pitch");
    const u64* s = P(src, src_off + (height - 1) * src_pitch + width, "strided copy") + src_off;
    u64* d = P(dst, dst_off + (height - 1) * dst_pitch + width, "strided copy") + dst_off;
    HG_CHECK(cudaMemcpy2DAsync(d, dst_pitch * sizeof(u64), s, src_pitch * sizeof(u64), width * sizeof(u64), height,
                               cudaMemcpyDeviceToDevice, G(ctx).stream()));
  });
}

int hg_ntt(void* ctx, void* buf, int level, int ext, int inverse) {
  return guarded([&] {
    const GpuContext& g = G(ctx);
    check_level(g, level, 0, "NTT");
    const int limbs = level + 1 + (ext ? g.num_p() : 0);
    u64* d = P(buf, (size_t)limbs * g.n(), "NTT");
    if (inverse) ntt_inverse(g, d, limbs, g.limb_map(level, ext != 0), limbs);
    else ntt_forward(g, d, limbs, g.limb_map(level, ext != 0), limbs);
  });
}

#define HG_BINARY(name, fn, what)                                                      \
  int name(void* ctx, const void* a, const void* b, void* out, int level) {            \
    return guarded([&] {                                                               \
      const GpuContext& g = G(ctx);                                                    \
      check_level(g, level, 0, what);                                                  \
      const size_t w = poly_words(g, level);                                           \
      fn(g, P(a, w, what), P(b, w, what), P(out, w, what), level);                     \
    });                                                                                \
  }
HG_BINARY(hg_add, add_q, "add")
HG_BINARY(hg_sub, sub_q, "sub")
HG_BINARY(hg_mul, mul_q, "multiply")
#undef HG_BINARY

int hg_negate(void* ctx, const void* a, void* out, int level) {
  return guarded([&] {
    const GpuContext& g = G(ctx);
    check_level(g, level, 0, "negate");
    const size_t w = poly_words(g, level);
    negate_q(g, P(a, w, "negate"), P(out, w, "negate"), level);
  });
}

int hg_tensor(void* ctx, const void* a0, const void* a1, const void* b0, const void* b1, void* d0, void* d1, void* d2,
              int level) {
  return guarded([&] {
    const GpuContext& g = G(ctx);
    check_level(g, level, 0, "tensor");
    const size_t w = poly_words(g, level);
    tensor_q(g, P(a0, w, "tensor"), P(a1, w, "tensor"), P(b0, w, "tensor"), P(b1, w, "tensor"), P(d0, w, "tensor"),
             P(d1, w, "tensor"), P(d2, w, "tensor"), level);
  });
}

int hg_rescale(void* ctx, const void* in, int level, void* out) {
  return guarded([&] {
    const GpuContext& g = G(ctx);
    check_level(g, level, 1, "rescale");
    rescale(g, P(in, poly_words(g, level), "rescale"), level, P(out, poly_words(g, level - 1), "rescale"));
  });
}

namespace {
// kind 0: out = in * w, 1: out = in + w, 2: out (the accumulator) += in * w
int scalar_op(void* ctx, const void* in, void* out, int level, const uint64_t* w, int kind) {
  return guarded([&] {
    const GpuContext& g = G(ctx);
    check_level(g, level, 0, "constant");
    if (!w) throw std::invalid_argument("null constants");
    std::vector<u64> tab(2 * (size_t)(level + 1));
    for (int k = 0; k <= level; ++k) {
      if (w[k] >= g.q(k)) throw std::invalid_argument("a constant's residue is not below its modulus");
      tab[2 * k] = w[k];
      tab[2 * k + 1] = shoup_companion(w[k], g.q(k));
    }
    DeviceBuffer d = to_device(tab, g.stream());  // pageable copy: tab may go once it returns
    const size_t words = poly_words(g, level);
    const u64* src = P(in, words, "constant");
    u64* dst = P(out, words, "constant");
    if (kind == 0) mul_scalar_q(g, src, d.data(), dst, level);
    else if (kind == 1) add_scalar_q(g, src, d.data(), dst, level);
    else add_mul_scalar_q(g, dst, src, d.data(), level);
  });
}
}  // namespace

int hg_mul_scalar(void* ctx, const void* in, void* out, int level, const uint64_t* w) {
  return scalar_op(ctx, in, out, level, w, 0);
}
int hg_add_scalar(void* ctx, const void* in, void* out, int level, const uint64_t* w) {
  return scalar_op(ctx, in, out, level, w, 1);
}
int hg_add_mul_scalar(void* ctx, void* acc, const void* term, int level, const uint64_t* w) {
  return scalar_op(ctx, term, acc, level, w, 2);
}

int hg_permute(void* ctx, const void* in, uint64_t galois, void* out, int level) {
  return guarded([&] {
    const GpuContext& g = G(ctx);
    check_level(g, level, 0, "automorphism");
    if (!(galois & 1) || galois >= 2 * g.n()) throw std::invalid_argument("automorphism: the Galois element must be odd and below 2N");
    const size_t w = poly_words(g, level);
    permute(g, P(in, w, "automorphism"), g.galois_permutation(galois), P(out, w, "automorphism"), level + 1);
  });
}

int hg_key_upload(void* ctx, int key_level, int beta, uint64_t galois, const uint64_t* b, const uint64_t* a,
                  void** key) {
  return guarded([&] {
    const GpuContext& g = G(ctx);
    check_level(g, key_level, 0, "key upload");
    if (beta != (key_level + g.alpha()) / g.alpha())
      throw std::invalid_argument("key upload: a key for level " + std::to_string(key_level) + " has " +
                                  std::to_string((key_level + g.alpha()) / g.alpha()) + " digits, got " +
                                  std::to_string(beta));
    if (!b || !a || !key) throw std::invalid_argument("key upload: null argument");
    auto k = std::make_unique<DeviceSwitchKey>();
    k->level = key_level, k->beta = beta, k->galois = galois;
    const size_t words = (size_t)beta * (key_level + 1 + g.num_p()) * g.n();
    k->b = g.alloc(words), k->a = g.alloc(words);
    HG_CHECK(cudaMemcpyAsync(k->b.data(), b, words * sizeof(u64), cudaMemcpyHostToDevice, g.stream()));
    HG_CHECK(cudaMemcpyAsync(k->a.data(), a, words * sizeof(u64), cudaMemcpyHostToDevice, g.stream()));
    g.sync();
    *key = k.release();
  });
}

void hg_key_free(void* key) { delete static_cast<DeviceSwitchKey*>(key); }

}  // extern "C"

namespace {
// (out0, out1) = (add0, add1) + KeySwitch(d) over Q_level (add0 / add1 null: the key switch alone)
int switch_into(void* ctx, const void* d, int level, const void* key, void* out0, void* out1, const void* add0,
                const void* add1, const char* what) {
  return guarded([&] {
    const GpuContext& g = G(ctx);
    check_level(g, level, 0, what);
    const DeviceSwitchKey& k = K(key, level, what);
    const size_t w = poly_words(g, level), E = (size_t)(level + 1 + g.num_p()) * g.n();
    DeviceBuffer D = modup(g, P(d, w, what), level);
    DeviceBuffer u = g.alloc(2 * E);
    key_inner_product(g, D.data(), level, k, nullptr, u.data(), u.data() + E);
    moddown(g, u.data(), level, P(out0, w, what), add0 ? P(add0, w, what) : nullptr);
    moddown(g, u.data() + E, level, P(out1, w, what), add1 ? P(add1, w, what) : nullptr);
  });
}
}  // namespace

extern "C" {

int hg_key_switch(void* ctx, const void* d, int level, const void* key, void* k0, void* k1) {
  return switch_into(ctx, d, level, key, k0, k1, nullptr, nullptr, "key switch");
}

int hg_relinearize(void* ctx, const void* d0, const void* d1, const void* d2, int level, const void* key, void* out0,
                   void* out1) {
  return switch_into(ctx, d2, level, key, out0, out1, d0, d1, "relinearize");
}

int hg_mul_relin_rescale(void* ctx, const void* a0, const void* a1, const void* b0, const void* b1, int level,
                         const void* key, void* out0, void* out1) {
  return guarded([&] {
    const GpuContext& g = G(ctx);
    check_level(g, level, 1, "multiply (relinearise, rescale)");
    const DeviceSwitchKey& k = K(key, level, "multiply (relinearise, rescale)");
    const char* what = "multiply (relinearise, rescale)";
    const size_t w = poly_words(g, level), E = (size_t)(level + 1 + g.num_p()) * g.n();
    DeviceBuffer d = g.alloc(3 * w);
    tensor_q(g, P(a0, w, what), P(a1, w, what), P(b0, w, what), P(b1, w, what), d.data(), d.data() + w,
             d.data() + 2 * w, level);
    DeviceBuffer D = modup(g, d.data() + 2 * w, level);
    DeviceBuffer u = g.alloc(2 * E);
    key_inner_product(g, D.data(), level, k, nullptr, u.data(), u.data() + E);
    add_times_p(g, u.data(), d.data(), level);  // v_j = P d_j + u_j over Q_l (P d_j vanishes on P)
    add_times_p(g, u.data() + E, d.data() + w, level);
    const size_t wo = poly_words(g, level - 1);
    moddown_rescale(g, u.data(), level, P(out0, wo, what));
    moddown_rescale(g, u.data() + E, level, P(out1, wo, what));
  });
}

int hg_apply_galois(void* ctx, const void* c0, const void* c1, int level, const void* key, void* out0, void* out1) {
  return guarded([&] {
    const GpuContext& g = G(ctx);
    check_level(g, level, 0, "rotate");
    const DeviceSwitchKey& k = K(key, level, "rotate");
    if (!(k.galois & 1) || k.galois >= 2 * g.n()) throw std::invalid_argument("rotate: not a rotation key");
    const size_t w = poly_words(g, level), E = (size_t)(level + 1 + g.num_p()) * g.n();
    const uint32_t* perm = g.galois_permutation(k.galois);
    DeviceBuffer pc = g.alloc(2 * w);
    permute(g, P(c0, w, "rotate"), perm, pc.data(), level + 1);
    permute(g, P(c1, w, "rotate"), perm, pc.data() + w, level + 1);
    DeviceBuffer D = modup(g, pc.data() + w, level);
    DeviceBuffer u = g.alloc(2 * E);
    key_inner_product(g, D.data(), level, k, nullptr, u.data(), u.data() + E);
    moddown(g, u.data(), level, P(out0, w, "rotate"), pc.data());
    moddown(g, u.data() + E, level, P(out1, w, "rotate"), nullptr);
  });
}

int hg_apply_galois_hoisted(void* ctx, const void* c0, const void* c1, int level, int count, const void* const* keys,
                            void* const* out0, void* const* out1) {
  return guarded([&] {
    const GpuContext& g = G(ctx);
    check_level(g, level, 0, "rotate (hoisted)");
    if (count < 0 || (count > 0 && (!keys || !out0 || !out1))) throw std::invalid_argument("rotate (hoisted): bad lists");
    const size_t w = poly_words(g, level), E = (size_t)(level + 1 + g.num_p()) * g.n();
    std::vector<const DeviceSwitchKey*> ks;
    for (int r = 0; r < count; ++r) ks.push_back(&K(keys[r], level, "rotate (hoisted)"));
    const u64* a0 = P(c0, w, "rotate (hoisted)");
    DeviceBuffer D = modup(g, P(c1, w, "rotate (hoisted)"), level);  // shared by every rotation
    DeviceBuffer u = g.alloc(2 * E), pc0 = g.alloc(w);
    for (int r = 0; r < count; ++r) {
      const uint32_t* perm = g.galois_permutation(ks[r]->galois);
      key_inner_product(g, D.data(), level, *ks[r], perm, u.data(), u.data() + E);
      permute(g, a0, perm, pc0.data(), level + 1);
      moddown(g, u.data(), level, P(out0[r], w, "rotate (hoisted)"), pc0.data());
      moddown(g, u.data() + E, level, P(out1[r], w, "rotate (hoisted)"), nullptr);
    }
  });
}

int hg_lintrans_create(void* ctx, int level, const uint64_t* diags, int count, int groups, const int64_t* giants,
                       const int* group_sizes, const int64_t* babies, void** lt) {
  return guarded([&] {
    const GpuContext& g = G(ctx);
    check_level(g, level, 0, "linear transform");
    if (!diags || !giants || !group_sizes || !babies || !lt || groups < 1 || count < 1)
      throw std::invalid_argument("linear transform: null or empty argument");
    std::vector<int64_t> gv(giants, giants + groups);
    std::vector<std::vector<int64_t>> bv(groups);
    int at = 0;
    for (int i = 0; i < groups; ++i) {
      if (group_sizes[i] < 0 || at + group_sizes[i] > count) throw std::invalid_argument("linear transform: group sizes exceed the diagonals");
      bv[i].assign(babies + at, babies + at + group_sizes[i]);
      at += group_sizes[i];
    }
    *lt = new DeviceLinearTransform(g, level, diags, count, gv, bv);
  });
}

void hg_lintrans_free(void* lt) { delete static_cast<DeviceLinearTransform*>(lt); }

int hg_lintrans_steps(const void* lt, int* count, int64_t* steps) {
  return guarded([&] {
    if (!lt || !count) throw std::invalid_argument("null argument");
    const auto& s = static_cast<const DeviceLinearTransform*>(lt)->baby_steps();
    if (steps) std::copy(s.begin(), s.end(), steps);
    *count = (int)s.size();
  });
}

int hg_lintrans_apply(void* ctx, const void* lt, const void* c0, const void* c1, const void* const* baby_keys,
                      const void* const* giant_keys, int rescale, void* out0, void* out1) {
  return guarded([&] {
    const GpuContext& g = G(ctx);
    if (!lt) throw std::invalid_argument("linear transform: null transform");
    const auto& t = *static_cast<const DeviceLinearTransform*>(lt);
    const int l = t.level();
    if (rescale && l == 0) throw std::invalid_argument("linear transform: level 0, no modulus left for the rescale");
    const size_t w = poly_words(g, l), wo = poly_words(g, rescale ? l - 1 : l);
    std::vector<const DeviceSwitchKey*> bk, gk;
    for (size_t j = 0; j < t.baby_steps().size(); ++j)
      bk.push_back(static_cast<const DeviceSwitchKey*>(baby_keys ? baby_keys[j] : nullptr));
    const auto giants = t.giant_steps();
    for (size_t j = 0; j < giants.size(); ++j)
      gk.push_back(giants[j] && giant_keys ? static_cast<const DeviceSwitchKey*>(giant_keys[j]) : nullptr);
    t.apply(g, P(c0, w, "linear transform"), P(c1, w, "linear transform"), bk, gk, rescale != 0,
            P(out0, wo, "linear transform"), P(out1, wo, "linear transform"));
  });
}

int hg_encaps_upload(void* ctx, int level, const uint64_t* small_b, const uint64_t* small_a, const uint64_t* big_b,
                     const uint64_t* big_a, void** keys) {
  return guarded([&] {
    const GpuContext& g = G(ctx);
    check_level(g, level, 0, "encapsulation keys");
    if (!small_b || !small_a || !big_b || !big_a || !keys) throw std::invalid_argument("encapsulation keys: null argument");
    *keys = new DeviceEncapsulationKeys(g, level, small_b, small_a, big_b, big_a);
  });
}

void hg_encaps_free(void* keys) { delete static_cast<DeviceEncapsulationKeys*>(keys); }

int hg_dense_to_sparse(void* ctx, const void* keys, const void* c0, const void* c1, void* out0, void* out1) {
  return guarded([&] {
    const GpuContext& g = G(ctx);
    if (!keys) throw std::invalid_argument("dense_to_sparse: null keys");
    const size_t w = g.n();
    dense_to_sparse(g, *static_cast<const DeviceEncapsulationKeys*>(keys), P(c0, w, "dense_to_sparse"),
                    P(c1, w, "dense_to_sparse"), P(out0, w, "dense_to_sparse"), P(out1, w, "dense_to_sparse"));
  });
}

int hg_mod_raise(void* ctx, const void* keys, const void* c0, const void* c1, int target, void* out0, void* out1) {
  return guarded([&] {
    const GpuContext& g = G(ctx);
    if (!keys) throw std::invalid_argument("mod_raise: null keys");
    check_level(g, target, 0, "mod_raise");
    const size_t w = g.n(), wo = poly_words(g, target);
    mod_raise(g, *static_cast<const DeviceEncapsulationKeys*>(keys), P(c0, w, "mod_raise"), P(c1, w, "mod_raise"),
              target, P(out0, wo, "mod_raise"), P(out1, wo, "mod_raise"));
  });
}

int hg_mul_monomial(void* ctx, const void* in, int level, uint64_t k, void* out) {
  return guarded([&] {
    const GpuContext& g = G(ctx);
    check_level(g, level, 0, "monomial product");
    const size_t w = poly_words(g, level);
    if (in == out) throw std::invalid_argument("monomial product: in and out must differ");
    mul_monomial(g, P(in, w, "monomial product"), level, k, P(out, w, "monomial product"));
  });
}

int hg_gemm_plan_create(void* ctx, const int64_t* U, size_t d1, size_t d2, int bU, int engine, void** plan) {
  return guarded([&] {
    if (!plan) throw std::invalid_argument("null plan");
    *plan = new GemmPlan(G(ctx), U, d1, d2, bU, static_cast<GemmEngine>(engine));
  });
}

void hg_gemm_plan_free(void* plan) { delete static_cast<GemmPlan*>(plan); }

int hg_gemm_apply(void* ctx, const void* plan, const void* X, size_t x_off, size_t ncols, uint64_t q, uint64_t mult,
                  void* Cbuf, size_t c_off) {
  return guarded([&] {
    if (!plan) throw std::invalid_argument("null plan");
    Ctx* c = C(ctx);
    const GemmPlan& p = *static_cast<const GemmPlan*>(plan);
    if (!c->blas) {
      if (cublasCreate(&c->blas) != CUBLAS_STATUS_SUCCESS) throw CudaError("cublasCreate failed");
    }
    const u64* x = P(X, x_off + p.cols() * ncols, "modgemm") + x_off;
    u64* out = P(Cbuf, c_off + p.rows() * ncols, "modgemm") + c_off;
    p.apply(*c->gc, c->blas, x, ncols, q, mult, out);
  });
}

int hg_pcmm_mlwe(void* ctx, const void* plan, int count, const void* const* c0s, const void* const* c1s, int level,
                 int k, int64_t mult, const void* const* keys, int groups, void* const* out0s, void* const* out1s) {
  return guarded([&] {
    const char* what = "MLWE pcmm";
    if (!plan) throw std::invalid_argument("null plan");
    if (count < 1 || groups < 1 || k < 2) throw std::invalid_argument("MLWE pcmm: no inputs, outputs or k < 2");
    Ctx* c = C(ctx);
    const GpuContext& g = *c->gc;
    check_level(g, level, 0, what);
    const size_t w = poly_words(g, level);
    std::vector<const u64*> in0, in1;
    for (int i = 0; i < count; ++i) in0.push_back(P(c0s[i], w, what)), in1.push_back(P(c1s[i], w, what));
    std::vector<const DeviceSwitchKey*> ks;
    for (int v = 0; v < k; ++v) ks.push_back(&K(keys[v], level, what));
    std::vector<u64*> o0, o1;
    for (int j = 0; j < groups; ++j) o0.push_back(P(out0s[j], w, what)), o1.push_back(P(out1s[j], w, what));
    if (!c->blas && cublasCreate(&c->blas) != CUBLAS_STATUS_SUCCESS) throw CudaError("cublasCreate failed");
    pcmm_mlwe(g, c->blas, *static_cast<const GemmPlan*>(plan), in0, in1, level, k, mult, ks, o0, o1);
  });
}

}  // extern "C"
