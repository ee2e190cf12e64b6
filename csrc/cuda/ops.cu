// Element-wise kernels, base conversion and rescale on the device (the device twins of ring/vecops.h,
// ring/rns.h and Evaluator::rescale_poly).
#include <algorithm>

#include "cuda/kernels.cuh"

namespace hemlp::cuda {

namespace {



enum class Binary { Add, Sub, Mul };

template <Binary op>
__global__ void binary_q(const u64* a, const u64* b, u64* out, size_t n, const DevModulus* mods) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int k = blockIdx.y;
  const size_t o = (size_t)k * n + i;
  const DevModulus m = mods[k];
  if (op == Binary::Add) out[o] = add_mod(a[o], b[o], m.q);
  if (op == Binary::Sub) out[o] = sub_mod(a[o], b[o], m.q);
  if (op == Binary::Mul) out[o] = mul_mod(a[o], b[o], m);
}

__global__ void negate_kernel(const u64* a, u64* out, size_t n, const DevModulus* mods) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const size_t o = (size_t)blockIdx.y * n + i;
  out[o] = neg_mod(a[o], mods[blockIdx.y].q);
}

__global__ void tensor_kernel(const u64* a0, const u64* a1, const u64* b0, const u64* b1, u64* d0, u64* d1, u64* d2,
                              size_t n, const DevModulus* mods) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const size_t o = (size_t)blockIdx.y * n + i;
  const DevModulus m = mods[blockIdx.y];
  const u64 x0 = a0[o], x1 = a1[o], y0 = b0[o], y1 = b1[o];
  // a0 b1 + a1 b0 < 2^125: one reduction of the 128-bit sum
  u64 hi = 0, lo = 0;
  mac128(hi, lo, x0, y1);
  mac128(hi, lo, x1, y0);
  d0[o] = mul_mod(x0, y0, m);
  d1[o] = reduce128(hi, lo, m);
  d2[o] = mul_mod(x1, y1, m);
}

__global__ void permute_kernel(const u64* in, const uint32_t* perm, u64* out, size_t n) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const size_t o = (size_t)blockIdx.y * n;
  out[o + i] = in[o + perm[i]];
}

constexpr int kTargetsPerBlock = 8;

__global__ void base_convert_kernel(const u64* in, u64* out, size_t n, int k, int nout, const int* out_targets,
                                    const int* dst_idx, const DevModulus* mods, const u64* src_q, const u64* qinv,
                                    const u64* qinvp, const u64* qhat, const u64* qb) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  u64 y[kMaxSources];
  int lifted = 0;
#pragma unroll
  for (int s = 0; s < kMaxSources; ++s)
    if (s < k) {
      const u64 q = src_q[s];
      const u64 v = mul_shoup(in[(size_t)s * n + i], qinv[s], qinvp[s], q);
      y[s] = v;
      lifted += v > (q >> 1);
    }
  const int r1 = min(nout, (int)(blockIdx.y + 1) * kTargetsPerBlock);
  for (int r = blockIdx.y * kTargetsPerBlock; r < r1; ++r) {
    const int tt = out_targets[r];
    const DevModulus p = mods[dst_idx[tt]];
    u64 hi = 0, lo = 0;
#pragma unroll
    for (int s = 0; s < kMaxSources; ++s)
      if (s < k) mac128(hi, lo, y[s], qhat[(size_t)tt * k + s]);
    out[(size_t)r * n + i] = sub_mod(reduce128(hi, lo, p), qb[(size_t)tt * (k + 1) + lifted], p.q);
  }
}

// out[r] = centred lift of x (mod q_from) reduced mod q_r, r < limbs
__global__ void lift_kernel(const u64* x, u64 from, u64* out, size_t n, const DevModulus* mods) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[(size_t)blockIdx.y * n + i] = centred_lift(x[i], from, mods[blockIdx.y]);
}

// out[r] = (a[r] - b[r]) * w_r (+ add[r]) with (w_r, w'_r) = wtab[2 r], over limbs r; moduli q_r
__global__ void sub_mul_kernel(const u64* a, const u64* b, const u64* wtab, const u64* add, u64* out, size_t n,
                               const DevModulus* mods) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int r = blockIdx.y;
  const size_t o = (size_t)r * n + i;
  const u64 q = mods[r].q;
  u64 v = mul_shoup(sub_mod(a[o], b[o], q), wtab[2 * r], wtab[2 * r + 1], q);
  if (add) v = add_mod(v, add[o], q);
  out[o] = v;
}

// a[r] += b[r] * w_r with (w_r, w'_r) = wtab[2 r]
__global__ void add_mul_kernel(u64* a, const u64* b, const u64* wtab, size_t n, const DevModulus* mods) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int r = blockIdx.y;
  const size_t o = (size_t)r * n + i;
  const u64 q = mods[r].q;
  a[o] = add_mod(a[o], mul_shoup(b[o], wtab[2 * r], wtab[2 * r + 1], q), q);
}

__global__ void scalar_kernel(const u64* in, const u64* w, u64* out, size_t n, const DevModulus* mods, int mul) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int k = blockIdx.y;
  const size_t o = (size_t)k * n + i;
  const u64 q = mods[k].q;
  out[o] = mul ? mul_shoup(in[o], w[2 * k], w[2 * k + 1], q) : add_mod(in[o], w[2 * k], q);
}

__global__ void add_qp_kernel(u64* a, const u64* b, size_t n, const int* midx, const DevModulus* mods) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const size_t o = (size_t)blockIdx.y * n + i;
  a[o] = add_mod(a[o], b[o], mods[midx[blockIdx.y]].q);
}

}  // namespace

void add_qp(const GpuContext& c, u64* a, const u64* b, int level) {
  add_qp_kernel<<<grid_for(c, level + 1 + c.num_p()), kThreads, 0, c.stream()>>>(a, b, c.n(), c.limb_map(level, true),
                                                                                 c.dev_moduli());
  HG_LAUNCHED("add over Q and P");
}

void mul_scalar_q(const GpuContext& c, const u64* in, const u64* w, u64* out, int level) {
  scalar_kernel<<<grid_for(c, level + 1), kThreads, 0, c.stream()>>>(in, w, out, c.n(), c.dev_moduli(), 1);
  HG_LAUNCHED("multiply by a constant");
}
void add_mul_scalar_q(const GpuContext& c, u64* acc, const u64* term, const u64* w, int level) {
  add_mul_kernel<<<grid_for(c, level + 1), kThreads, 0, c.stream()>>>(acc, term, w, c.n(), c.dev_moduli());
  HG_LAUNCHED("add a constant multiple");
}
void add_scalar_q(const GpuContext& c, const u64* in, const u64* w, u64* out, int level) {
  scalar_kernel<<<grid_for(c, level + 1), kThreads, 0, c.stream()>>>(in, w, out, c.n(), c.dev_moduli(), 0);
  HG_LAUNCHED("add a constant");
}

void add_q(const GpuContext& c, const u64* a, const u64* b, u64* out, int level) {
  binary_q<Binary::Add><<<grid_for(c, level + 1), kThreads, 0, c.stream()>>>(a, b, out, c.n(), c.dev_moduli());
  HG_LAUNCHED("add");
}
void sub_q(const GpuContext& c, const u64* a, const u64* b, u64* out, int level) {
  binary_q<Binary::Sub><<<grid_for(c, level + 1), kThreads, 0, c.stream()>>>(a, b, out, c.n(), c.dev_moduli());
  HG_LAUNCHED("sub");
}
void mul_q(const GpuContext& c, const u64* a, const u64* b, u64* out, int level) {
  binary_q<Binary::Mul><<<grid_for(c, level + 1), kThreads, 0, c.stream()>>>(a, b, out, c.n(), c.dev_moduli());
  HG_LAUNCHED("multiply");
}
void negate_q(const GpuContext& c, const u64* a, u64* out, int level) {
  negate_kernel<<<grid_for(c, level + 1), kThreads, 0, c.stream()>>>(a, out, c.n(), c.dev_moduli());
  HG_LAUNCHED("negate");
}
void tensor_q(const GpuContext& c, const u64* a0, const u64* a1, const u64* b0, const u64* b1, u64* d0, u64* d1,
              u64* d2, int level) {
  tensor_kernel<<<grid_for(c, level + 1), kThreads, 0, c.stream()>>>(a0, a1, b0, b1, d0, d1, d2, c.n(),
                                                                      c.dev_moduli());
  HG_LAUNCHED("tensor product");
}
void permute(const GpuContext& c, const u64* in, const uint32_t* perm, u64* out, int limbs) {
  permute_kernel<<<grid_for(c, limbs), kThreads, 0, c.stream()>>>(in, perm, out, c.n());
  HG_LAUNCHED("automorphism");
}

void base_convert(const GpuContext& c, const DevConverter& conv, const u64* in, u64* out, const int* out_targets,
                  int nout) {
  if (nout <= 0) return;
  const dim3 grid((unsigned)((c.n() + kThreads - 1) / kThreads), (unsigned)((nout + kTargetsPerBlock - 1) / kTargetsPerBlock));
  base_convert_kernel<<<grid, kThreads, 0, c.stream()>>>(
      in, out, c.n(), conv.k, nout, out_targets, conv.dst_dev.as<int>(), c.dev_moduli(), conv.src_q.data(),
      conv.qhat_inv.data(), conv.qhat_inv_p.data(), conv.qhat_mod_p.data(), conv.qb_mod_p.data());
  HG_LAUNCHED("base conversion");
}

void add_times_p(const GpuContext& c, u64* a, const u64* b, int level) {
  add_mul_kernel<<<grid_for(c, level + 1), kThreads, 0, c.stream()>>>(a, b, c.dev_p_mod_q(), c.n(), c.dev_moduli());
  HG_LAUNCHED("add P times");
}

void rescale(const GpuContext& c, const u64* in, int l, u64* out) {
  const size_t n = c.n();
  DeviceBuffer last = c.alloc(n);
  HG_CHECK(cudaMemcpyAsync(last.data(), in + (size_t)l * n, n * sizeof(u64), cudaMemcpyDeviceToDevice, c.stream()));
  ntt_inverse(c, last.data(), 1, c.limb_map(l, false) + l, 1);
  lift_kernel<<<grid_for(c, l), kThreads, 0, c.stream()>>>(last.data(), c.q(l), out, n, c.dev_moduli());
  HG_LAUNCHED("rescale (lift)");
  ntt_forward(c, out, l, c.limb_map(l - 1, false), l);
  sub_mul_kernel<<<grid_for(c, l), kThreads, 0, c.stream()>>>(in, out, c.dev_q_inv_mod_q() + 2 * (size_t)l * c.num_q(),
                                                              nullptr, out, n, c.dev_moduli());
  HG_LAUNCHED("rescale");
}

DeviceBuffer modup(const GpuContext& c, const u64* d_ntt, int level) {
  const size_t n = c.n();
  const int K = c.num_p(), E = level + 1 + K, alpha = c.alpha();
  const int beta = (level + alpha) / alpha;
  DeviceBuffer coeff = c.alloc((size_t)(level + 1) * n);
  HG_CHECK(cudaMemcpyAsync(coeff.data(), d_ntt, (size_t)(level + 1) * n * sizeof(u64), cudaMemcpyDeviceToDevice,
                           c.stream()));
  ntt_inverse(c, coeff.data(), level + 1, c.limb_map(level, false), level + 1);
  DeviceBuffer D = c.alloc((size_t)beta * E * n);
  const int* ext = c.limb_map(level, true);  // the modup converters' targets are every modulus, in order
  for (int t = 0; t < beta; ++t) {
    const int lo = t * alpha, cnt = std::min(alpha, level + 1 - lo);
    u64* Dt = D.data() + (size_t)t * E * n;
    base_convert(c, c.modup_converter(lo, cnt), coeff.data() + (size_t)lo * n, Dt, ext, E);
    // the digit's own limbs: its coefficients, brought back by the NTT below to exactly the input's residues
    HG_CHECK(cudaMemcpyAsync(Dt + (size_t)lo * n, coeff.data() + (size_t)lo * n, (size_t)cnt * n * sizeof(u64),
                             cudaMemcpyDeviceToDevice, c.stream()));
  }
  ntt_forward(c, D.data(), beta * E, ext, E);
  return D;
}

namespace {
__global__ void kip_kernel(const u64* digits, const u64* kb, const u64* ka, const uint32_t* perm, u64* u0, u64* u1,
                           size_t n, int level, int key_level, int E, int K, int beta, const int* midx,
                           const DevModulus* mods) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int k = blockIdx.y;
  const DevModulus m = mods[midx[k]];
  const size_t kk = k <= level ? (size_t)k : (size_t)(k - level + key_level);
  const size_t key_limbs = (size_t)key_level + 1 + K;
  const size_t src = perm ? perm[i] : i;
  u64 h0 = 0, l0 = 0, h1 = 0, l1 = 0;
  for (int t = 0; t < beta; ++t) {
    const u64 x = digits[((size_t)t * E + k) * n + src];
    const size_t ko = ((size_t)t * key_limbs + kk) * n + i;
    mac128(h0, l0, x, kb[ko]);
    mac128(h1, l1, x, ka[ko]);
  }
  u0[(size_t)k * n + i] = reduce128(h0, l0, m);
  u1[(size_t)k * n + i] = reduce128(h1, l1, m);
}
}  // namespace

void key_inner_product(const GpuContext& c, const u64* digits, int level, const DeviceSwitchKey& key,
                       const uint32_t* perm, u64* u0, u64* u1) {
  const int K = c.num_p(), E = level + 1 + K, beta = (level + c.alpha()) / c.alpha();
  if (level > key.level || beta > key.beta) throw std::invalid_argument("key switch: the key's level is below the ciphertext's");
  kip_kernel<<<grid_for(c, E), kThreads, 0, c.stream()>>>(digits, key.b.data(), key.a.data(), perm, u0, u1, c.n(),
                                                           level, key.level, E, K, beta, c.limb_map(level, true),
                                                           c.dev_moduli());
  HG_LAUNCHED("key inner product");
}

void moddown(const GpuContext& c, const u64* u, int level, u64* out, const u64* add_to) {
  const size_t n = c.n();
  const int K = c.num_p();
  const int* ext = c.limb_map(level, true);
  DeviceBuffer pc = c.alloc((size_t)K * n), conv = c.alloc((size_t)(level + 1) * n);
  HG_CHECK(cudaMemcpyAsync(pc.data(), u + (size_t)(level + 1) * n, (size_t)K * n * sizeof(u64),
                           cudaMemcpyDeviceToDevice, c.stream()));
  ntt_inverse(c, pc.data(), K, ext + level + 1, K);
  base_convert(c, c.moddown_converter(), pc.data(), conv.data(), c.limb_map(level, false), level + 1);
  ntt_forward(c, conv.data(), level + 1, c.limb_map(level, false), level + 1);
  sub_mul_kernel<<<grid_for(c, level + 1), kThreads, 0, c.stream()>>>(u, conv.data(), c.dev_p_inv_mod_q(), add_to,
                                                                      out, n, c.dev_moduli());
  HG_LAUNCHED("ModDown");
}

namespace {
// w = (u_l - conv_l) P^-1 mod q_l, one limb
__global__ void moddown_last_kernel(const u64* ul, u64* w, size_t n, DevModulus ql, u64 pinv, u64 pinvp) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  w[i] = mul_shoup(sub_mod(ul[i], w[i], ql.q), pinv, pinvp, ql.q);
}
// r_i += P * centred(y mod q_l) mod q_i
__global__ void fold_kernel(u64* r, const u64* y, u64 ql, const u64* pmod, size_t n, const DevModulus* mods) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int k = blockIdx.y;
  const DevModulus m = mods[k];
  const size_t o = (size_t)k * n + i;
  r[o] = add_mod(r[o], mul_shoup(centred_lift(y[i], ql, m), pmod[2 * k], pmod[2 * k + 1], m.q), m.q);
}
}  // namespace

void moddown_rescale(const GpuContext& c, const u64* u, int l, u64* out) {
  const size_t n = c.n();
  const int K = c.num_p();
  const int* ext = c.limb_map(l, true);
  DeviceBuffer low = c.alloc((size_t)(K + 1) * n), tmp = c.alloc((size_t)(l + 1) * n);
  HG_CHECK(cudaMemcpyAsync(low.data(), u + (size_t)(l + 1) * n, (size_t)K * n * sizeof(u64), cudaMemcpyDeviceToDevice,
                           c.stream()));
  HG_CHECK(cudaMemcpyAsync(low.data() + (size_t)K * n, u + (size_t)l * n, n * sizeof(u64), cudaMemcpyDeviceToDevice,
                           c.stream()));
  ntt_inverse(c, low.data(), K, ext + l + 1, K);
  ntt_inverse(c, low.data() + (size_t)K * n, 1, ext + l, 1);
  base_convert(c, c.moddown_converter(), low.data(), tmp.data(), c.limb_map(l, false), l + 1);
  u64* wl = tmp.data() + (size_t)l * n;
  const u64 pi = c.p_inv_mod_q(l), pip = shoup_companion(pi, c.q(l));
  moddown_last_kernel<<<(unsigned)((n + kThreads - 1) / kThreads), kThreads, 0, c.stream()>>>(
      low.data() + (size_t)K * n, wl, n, DevModulus{c.q(l), 0, 0}, pi, pip);
  HG_LAUNCHED("ModDown-rescale (q_l limb)");
  fold_kernel<<<grid_for(c, l), kThreads, 0, c.stream()>>>(tmp.data(), wl, c.q(l), c.dev_p_mod_q(), n, c.dev_moduli());
  HG_LAUNCHED("ModDown-rescale (fold)");
  ntt_forward(c, tmp.data(), l, c.limb_map(l - 1, false), l);
  sub_mul_kernel<<<grid_for(c, l), kThreads, 0, c.stream()>>>(u, tmp.data(), c.dev_pq_inv_mod_q() + 2 * (size_t)l * c.num_q(),
                                                              nullptr, out, n, c.dev_moduli());
  HG_LAUNCHED("ModDown-rescale");
}

}  // namespace hemlp::cuda
