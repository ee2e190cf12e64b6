/* The C interface of hemlp's CUDA backend (libhemlp_cuda.so), loaded by hemlp.gpu with ctypes.
 *
 * Every function returns 0 on success and a nonzero code on failure, with the reason in hg_last_error() (per
 * thread): 1 invalid argument (a size, level or key that does not fit), 2 CUDA error (the call that failed and
 * CUDA's message), 3 out of device memory, 4 anything else. Handles are opaque; buffers hold 64-bit words,
 * polynomials limb-major (limb k at word k N). Operations are asynchronous on the context's stream; downloads
 * and hg_sync wait for them. A polynomial "at level l" has l + 1 limbs (moduli q_0..q_l). */
#ifndef HEMLP_CUDA_H
#define HEMLP_CUDA_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

const char* hg_last_error(void);
int hg_device_info(int* count, char* name, int name_len, size_t* total_memory);
int hg_mem_info(size_t* free_bytes, size_t* total_bytes);

/* moduli: q_0..q_{num_q-1} then p_0..p_{num_p-1}; psi: each modulus' primitive 2N-th root as the CPU core uses it */
int hg_context_create(int log_n, int num_q, int num_p, int alpha, const uint64_t* moduli, const uint64_t* psi,
                      int device, void** ctx);
void hg_context_destroy(void* ctx);
int hg_sync(void* ctx);

int hg_buffer_alloc(void* ctx, size_t words, void** buf);
void hg_buffer_free(void* buf);
int hg_upload(void* ctx, void* buf, size_t offset_words, const uint64_t* host, size_t words);
int hg_download(void* ctx, const void* buf, size_t offset_words, uint64_t* host, size_t words);
int hg_copy(void* ctx, const void* src, void* dst, size_t words); /* device to device */
/* height rows of width words: row r from src[src_off + r src_pitch] to dst[dst_off + r dst_pitch] (all in words) */
int hg_copy_strided(void* ctx, const void* src, size_t src_off, size_t src_pitch, void* dst, size_t dst_off,
                    size_t dst_pitch, size_t width, size_t height);

/* in place over level + 1 limbs (ext: level + 1 + K limbs over Q_level and P) */
int hg_ntt(void* ctx, void* buf, int level, int ext, int inverse);
int hg_add(void* ctx, const void* a, const void* b, void* out, int level);
int hg_sub(void* ctx, const void* a, const void* b, void* out, int level);
int hg_negate(void* ctx, const void* a, void* out, int level);
int hg_mul(void* ctx, const void* a, const void* b, void* out, int level); /* element-wise (mul_plain) */
int hg_tensor(void* ctx, const void* a0, const void* a1, const void* b0, const void* b1, void* d0, void* d1, void* d2,
              int level);
int hg_rescale(void* ctx, const void* in, int level, void* out); /* out: level limbs */
/* out[k] = in[k] * w[k] (mul) or in[k] + w[k] (add) mod q_k for one residue w[k] < q_k per limb (constants) */
int hg_mul_scalar(void* ctx, const void* in, void* out, int level, const uint64_t* w);
int hg_add_scalar(void* ctx, const void* in, void* out, int level, const uint64_t* w);
/* acc[k] += term[k] * w[k] over limbs 0..level (term may hold more limbs: its first level + 1 are read) */
int hg_add_mul_scalar(void* ctx, void* acc, const void* term, int level, const uint64_t* w);
int hg_permute(void* ctx, const void* in, uint64_t galois, void* out, int level);

/* b, a: beta digits of key_level + 1 + K limbs each, contiguous (the seeded a-parts expanded) */
int hg_key_upload(void* ctx, int key_level, int beta, uint64_t galois, const uint64_t* b, const uint64_t* a,
                  void** key);
void hg_key_free(void* key);
int hg_key_switch(void* ctx, const void* d, int level, const void* key, void* k0, void* k1);
int hg_relinearize(void* ctx, const void* d0, const void* d1, const void* d2, int level, const void* key, void* out0,
                   void* out1);
int hg_mul_relin_rescale(void* ctx, const void* a0, const void* a1, const void* b0, const void* b1, int level,
                         const void* key, void* out0, void* out1);
int hg_apply_galois(void* ctx, const void* c0, const void* c1, int level, const void* key, void* out0, void* out1);
int hg_apply_galois_hoisted(void* ctx, const void* c0, const void* c1, int level, int count, const void* const* keys,
                            void* const* out0, void* const* out1);

/* A BSGS linear transform (double hoisting): count diagonals over Q_level and P (level + 1 + K limbs each, NTT
 * form, group order); group g has giant step giants[g] and group_sizes[g] diagonals whose baby steps are the next
 * entries of babies (0: unrotated). hg_lintrans_steps lists the distinct nonzero baby steps in the order
 * hg_lintrans_apply wants their keys (count first with steps = NULL). */
int hg_lintrans_create(void* ctx, int level, const uint64_t* diags, int count, int groups, const int64_t* giants,
                       const int* group_sizes, const int64_t* babies, void** lt);
void hg_lintrans_free(void* lt);
int hg_lintrans_steps(const void* lt, int* count, int64_t* steps);
int hg_lintrans_apply(void* ctx, const void* lt, const void* c0, const void* c1, const void* const* baby_keys,
                      const void* const* giant_keys, int rescale, void* out0, void* out1);

/* Bootstrapping's bottom steps: encapsulation keys (small b, a: 2 limbs over q0, p0; big B, A: level + 1 + K limbs),
 * the switch s -> s' at level 0, ModRaise to `target` (<= the keys' level) under s; and out = in * X^k. */
int hg_encaps_upload(void* ctx, int level, const uint64_t* small_b, const uint64_t* small_a, const uint64_t* big_b,
                     const uint64_t* big_a, void** keys);
void hg_encaps_free(void* keys);
int hg_dense_to_sparse(void* ctx, const void* keys, const void* c0, const void* c1, void* out0, void* out1);
int hg_mod_raise(void* ctx, const void* keys, const void* c0, const void* c1, int target, void* out0, void* out1);
int hg_mul_monomial(void* ctx, const void* in, int level, uint64_t k, void* out);

/* Exact modular GEMM C = mult * U X mod q on cuBLAS (engine 0: DGEMMs, pcmm/modgemm.h's digit split; engine 1: int8
 * tensor-core GEMMs of balanced base-256 digits): U d1 x d2 signed (|U| <= 2^bU, row-major, host), X d2 x ncols
 * residues < q (device buffer, row-major), C d1 x ncols. */
int hg_gemm_plan_create(void* ctx, const int64_t* U, size_t d1, size_t d2, int bU, int engine, void** plan);
void hg_gemm_plan_free(void* plan);
int hg_gemm_apply(void* ctx, const void* plan, const void* X, size_t x_offset_words, size_t ncols, uint64_t q,
                  uint64_t mult, void* C, size_t c_offset_words);

/* PCMM in the MLWE format (pcmm/mlwe.h): count inputs (c0s[i], c1s[i], NTT form at level), U = the plan's d1 x d2
 * (d2 = k count, k | d1), the k ModPack keys; out0s, out1s: d1 / k polynomials at level (coefficient encoding). */
int hg_pcmm_mlwe(void* ctx, const void* plan, int count, const void* const* c0s, const void* const* c1s, int level,
                 int k, int64_t mult, const void* const* keys, int groups, void* const* out0s, void* const* out1s);

#ifdef __cplusplus
}
#endif
#endif
