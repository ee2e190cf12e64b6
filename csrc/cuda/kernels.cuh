// Launchers of the device kernels. Polynomials are limb-major (limb k at data + k N); a polynomial "at level l"
// has l + 1 limbs with moduli q_0..q_l, an extended one l + 1 + K limbs over Q_l ∪ P (GpuContext::qp_index).
// Everything runs asynchronously on the context's stream; no function synchronises.
#pragma once
#include <cstdint>

#include "cuda/gpu_context.cuh"

namespace hemlp::cuda {

constexpr int kThreads = 256;  // threads per block of the element-wise kernels

// One thread per coefficient (blockIdx.x) and one block row per limb (blockIdx.y).
inline dim3 grid_for(const GpuContext& c, int limbs) {
  return dim3((unsigned)((c.n() + kThreads - 1) / kThreads), (unsigned)limbs);
}

// In-place NTT / inverse NTT of `limbs` limbs; limb r uses modulus midx[r % period] (a device array).
void ntt_forward(const GpuContext& c, u64* data, int limbs, const int* midx, int period);
void ntt_inverse(const GpuContext& c, u64* data, int limbs, const int* midx, int period);

// Element-wise over the limbs 0..level (moduli q_0..q_level); outputs may alias inputs.
void add_q(const GpuContext& c, const u64* a, const u64* b, u64* out, int level);
void sub_q(const GpuContext& c, const u64* a, const u64* b, u64* out, int level);
void negate_q(const GpuContext& c, const u64* a, u64* out, int level);
void mul_q(const GpuContext& c, const u64* a, const u64* b, u64* out, int level);
// a += b over the level + 1 + K limbs of Q_level ∪ P (extended polynomials)
void add_qp(const GpuContext& c, u64* a, const u64* b, int level);
// out[k] = in[k] * w_k (w pairs (w_k, w'_k) on the device, Shoup form) / in[k] + w_k (w_k at w[2 k])
void mul_scalar_q(const GpuContext& c, const u64* in, const u64* w, u64* out, int level);
void add_scalar_q(const GpuContext& c, const u64* in, const u64* w, u64* out, int level);
// acc[k] += term[k] * w_k (w in Shoup pairs on the device)
void add_mul_scalar_q(const GpuContext& c, u64* acc, const u64* term, const u64* w, int level);
// d0 = a0 b0, d1 = a0 b1 + a1 b0, d2 = a1 b1
void tensor_q(const GpuContext& c, const u64* a0, const u64* a1, const u64* b0, const u64* b1, u64* d0, u64* d1,
              u64* d2, int level);
// out[k][i] = in[k][perm[i]] over `limbs` limbs (out must not alias in)
void permute(const GpuContext& c, const u64* in, const uint32_t* perm, u64* out, int limbs);

// Fast base conversion (centred, ring::BaseConverter): in = conv.k coefficient-form limbs (in + i * N);
// out limb r (out + r * N) receives target out_targets[r] of the converter, for r < nout (device int array).
void base_convert(const GpuContext& c, const DevConverter& conv, const u64* in, u64* out, const int* out_targets,
                  int nout);

// out = rescale of in (level + 1 limbs) by q_level: level limbs (in and out must not overlap).
void rescale(const GpuContext& c, const u64* in, int level, u64* out);

// A key-switching key on the device: digits b_t, a_t, each over Q_key_level ∪ P (key_level + 1 + K limbs).
struct DeviceSwitchKey {
  int level = 0, beta = 0;
  uint64_t galois = 0;
  DeviceBuffer b, a;  // beta digits each, contiguous
};

// The ModUp of d (level + 1 limbs, NTT form): beta digits of level + 1 + K limbs each, NTT form, contiguous.
DeviceBuffer modup(const GpuContext& c, const u64* d_ntt, int level);
// (u0, u1) = sum_t perm(digit_t) (b_t, a_t) over Q_level ∪ P; perm may be null.
void key_inner_product(const GpuContext& c, const u64* digits, int level, const DeviceSwitchKey& key,
                       const uint32_t* perm, u64* u0, u64* u1);
// out = round(u / P) over Q_level (+ add_to when not null; add_to may equal out).
void moddown(const GpuContext& c, const u64* u, int level, u64* out, const u64* add_to);
// out = round(u / (P q_level)) over Q_{level-1}, the fused ModDown and rescale (keyswitch.h moddown_rescale).
void moddown_rescale(const GpuContext& c, const u64* u, int level, u64* out);
// out[i] = a[i] + b[i] * w_i with w_i = [P]_{q_i}, over limbs 0..level
void add_times_p(const GpuContext& c, u64* a, const u64* b, int level);

}  // namespace hemlp::cuda
