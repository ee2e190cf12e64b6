#include "pcmm/pcmm.h"

#include <cmath>
#include <exception>
#include <string>

#ifdef _OPENMP
#include <omp.h>
#else
inline int omp_get_max_threads() { return 1; }
#endif

#include "ckks/errors.h"
#include "ckks/evaluator.h"

extern "C" void openblas_set_num_threads(int);

namespace hemlp::pcmm {

std::vector<Ciphertext> pcmm_rlwe(const Context& ctx, const ModGemmPlan& plan,
                                  const std::vector<const Ciphertext*>& inputs, size_t chunks, int64_t K,
                                  double out_scale_factor, bool rescale, const std::vector<double>& bias) {
  const size_t d2 = plan.cols(), n = ctx.n();
  if (chunks == 0 || inputs.size() != d2 * chunks)
    fail(ErrorKind::Shape, "pcmm: the weight matrix has " + std::to_string(d2) + " columns but the encrypted "
                           "matrix has " + std::to_string(chunks ? inputs.size() / chunks : 0) + " rows");
  const Ciphertext* ref = nullptr;
  for (auto* c : inputs)
    if (c) { ref = c; break; }
  if (!ref) fail(ErrorKind::Shape, "pcmm: the encrypted matrix has no ciphertexts (all rows are padding)");
  for (auto* c : inputs) {
    if (!c) continue;
    if (c->param_hash != ctx.hash64())
      fail(ErrorKind::ContextMismatch, "pcmm: a ciphertext belongs to another parameter set");
    if (c->size() != 2) fail(ErrorKind::Parameter, "pcmm: relinearise the ciphertexts first");
    if (c->level != ref->level || !scales_match(c->scale, ref->scale) || c->slots != ref->slots ||
        c->encoding != ref->encoding || (c->key_id && ref->key_id && c->key_id != ref->key_id))
      fail(ErrorKind::Level, "pcmm: all rows of the encrypted matrix must share level, scale, encoding and key");
  }
  std::vector<InputRow> rows(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i]) rows[i] = InputRow{{inputs[i]->polys[0].data(), inputs[i]->polys[1].data()}, {n, n}};
  return pcmm_rlwe_rows(ctx, plan, rows, *ref, chunks, K, out_scale_factor, rescale, bias);
}

std::vector<Ciphertext> pcmm_rlwe_rows(const Context& ctx, const ModGemmPlan& plan,
                                       const std::vector<InputRow>& inputs, const Ciphertext& meta, size_t chunks,
                                       int64_t K, double out_scale_factor, bool rescale,
                                       const std::vector<double>& bias) {
  const size_t d1 = plan.rows(), d2 = plan.cols(), n = ctx.n();
  if (chunks == 0 || inputs.size() != d2 * chunks)
    fail(ErrorKind::Shape, "pcmm: the weight matrix has " + std::to_string(d2) + " columns but the encrypted "
                           "matrix has " + std::to_string(chunks ? inputs.size() / chunks : 0) + " rows");
  if (meta.param_hash != ctx.hash64())
    fail(ErrorKind::ContextMismatch, "pcmm: the encrypted matrix belongs to another parameter set");
  bool any = false;
  for (const auto& r : inputs) {
    if (!r.part[0] != !r.part[1]) fail(ErrorKind::Shape, "pcmm: an input row has one part only");
    any = any || r.part[0];
  }
  if (!any) fail(ErrorKind::Shape, "pcmm: the encrypted matrix has no ciphertexts (all rows are padding)");
  const Ciphertext* ref = &meta;
  const int level = ref->level, limbs = level + 1;
  if (rescale && level == 0)
    fail(ErrorKind::Level, "pcmm: the encrypted matrix is at level 0; a PCMM needs one level for its rescale");
  if (!bias.empty() && (bias.size() != d1 || ref->encoding != Encoding::Slot))
    fail(ErrorKind::Shape, "pcmm: the fused bias needs one value per output row and slot encoding");
  std::vector<Ciphertext> out(d1 * chunks);
  for (auto& o : out) {
    copy_metadata(o, *ref);
    o.key_id = ref->key_id;
    o.scale = ref->scale * out_scale_factor;
    o.is_complex = ref->is_complex;
    o.polys.assign(2, Poly((size_t)limbs * n));
  }
  const std::vector<u64> zeros(n, 0);
  // Work units (limb, chunk, part). With several threads and at least as many units, each thread runs whole
  // single-threaded GEMMs: two 1-thread GEMMs side by side scale ~1.9x on 2 cores where one 2-thread GEMM gets
  // ~1.4x (its split / reduce passes and DGEMM's panel synchronisation leave cores idle; bench/ray_mlp_N14.json).
  const size_t units = (size_t)limbs * chunks * 2;
  const int threads = omp_get_max_threads();
  const bool by_unit = threads > 1 && units >= (size_t)threads;
  // Each unit writes its d1 output rows straight into the ciphertexts, K folded into the GEMM's recombination.
  auto run_unit = [&](size_t u, std::vector<const uint64_t*>& rows, std::vector<u64*>& crows) {
    const int k = (int)(u / (chunks * 2)), part = (int)(u % 2);
    const size_t j = (u / 2) % chunks;
    const u64 q = ctx.modulus(k).q;
    int64_t km = K % (int64_t)q;
    const u64 w = km < 0 ? (u64)(km + (int64_t)q) : (u64)km;
    for (size_t i = 0; i < d2; ++i) {
      const InputRow& c = inputs[i * chunks + j];
      rows[i] = c.part[part] ? c.part[part] + (size_t)k * c.limb_stride[part] : zeros.data();
    }
    for (size_t r = 0; r < d1; ++r) crows[r] = out[r * chunks + j].polys[part].data() + (size_t)k * n;
    plan.apply_rows(rows.data(), n, q, crows.data(), w);
  };
  if (by_unit) {
    openblas_set_num_threads(1);  // DGEMM in the calling thread; restored below
    std::exception_ptr err;
#pragma omp parallel
    {
      std::vector<const uint64_t*> rows(d2);
      std::vector<u64*> crows(d1);
#pragma omp for schedule(dynamic, 1)
      for (long u = 0; u < (long)units; ++u) {
        try {
          run_unit((size_t)u, rows, crows);
        } catch (...) {  // exceptions must not leave an OpenMP region
#pragma omp critical(hemlp_pcmm_error)
          if (!err) err = std::current_exception();
        }
      }
    }
    openblas_set_num_threads(threads);
    if (err) std::rethrow_exception(err);
  } else {
    std::vector<const uint64_t*> rows(d2);
    std::vector<u64*> crows(d1);
    for (size_t u = 0; u < units; ++u) run_unit(u, rows, crows);
  }
  if (rescale) {
    Evaluator ev(ctx);
    ev.rescale_many(out);
    if (!bias.empty())
#pragma omp parallel for schedule(static)
      for (long i = 0; i < (long)out.size(); ++i) out[i] = ev.add_const(out[i], bias[i / chunks]);
  }
  return out;
}

void pcmm_epilogue_part(const Context& ctx, uint64_t* in, size_t count, int level, int64_t K, int part,
                        double scale, const std::vector<double>& bias, uint64_t* out) {
  if (level < 1)
    fail(ErrorKind::Level, "pcmm: the encrypted matrix is at level 0; a PCMM needs one level for its rescale");
  if (part != 0 && part != 1) fail(ErrorKind::Shape, "pcmm: a ciphertext part is 0 (c0) or 1 (c1)");
  if (!bias.empty() && bias.size() != count)
    fail(ErrorKind::Shape, "pcmm: the bias needs one value per polynomial");
  for (double b : bias)
    if (!std::isfinite(b)) fail(ErrorKind::Encoding, "cannot add NaN or infinity");
  const size_t n = ctx.n(), in_stride = count * n, out_stride = count * n;
  const double scale_out = scale / (double)ctx.modulus(level).q;  // as Evaluator::rescale
  const Evaluator ev(ctx);
#pragma omp parallel for schedule(dynamic)
  for (long i = 0; i < (long)count; ++i) {  // inner loops run serially (nested regions)
    uint64_t* p = in + (size_t)i * n;
    uint64_t* o = out + (size_t)i * n;
    if (K != 1) ev.mul_integer_poly(p, in_stride, level, K);
    ev.rescale_poly(p, in_stride, level, o, out_stride);
    if (part == 0 && !bias.empty()) ev.add_const_poly(o, out_stride, level - 1, bias[i], scale_out);
  }
}

}  // namespace hemlp::pcmm
