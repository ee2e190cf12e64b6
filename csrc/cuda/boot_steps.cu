// Bootstrapping's bottom-of-the-chain steps and the monomial product on the device, the same arithmetic as
// boot/modraise.cpp (dense_to_sparse, mod_raise) and the coefficient shift of he/reinterpret.py (mul_monomial).
#include "cuda/boot_steps.cuh"

namespace hemlp::cuda {

namespace {



// out[r][i] = centred lift of x[i] (mod `from`) reduced mod the modulus of limb r (midx)
__global__ void lift_map_kernel(const u64* x, u64 from, u64* out, size_t n, const int* midx, const DevModulus* mods) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[(size_t)blockIdx.y * n + i] = centred_lift(x[i], from, mods[midx[blockIdx.y]]);
}

// u = c1 * key over {q0, p0}: uq = c1q * kq (mod q0), up = c1p * kp (mod p0)
__global__ void small_product_kernel(const u64* c1q, const u64* c1p, const u64* key, u64* uq, u64* up, size_t n,
                                     DevModulus q0, DevModulus p0) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  uq[i] = mul_mod(c1q[i], key[i], q0);
  up[i] = mul_mod(c1p[i], key[n + i], p0);
}

// uq = (uq - [up]_centred) * p0^-1 mod q0 (coefficient form)
__global__ void small_down_kernel(u64* uq, const u64* up, size_t n, DevModulus q0, u64 p0, u64 p0inv) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  uq[i] = mul_mod(sub_mod(uq[i], centred_lift(up[i], p0, q0), q0.q), p0inv, q0);
}

// u0[k] = c1r[k] B[kk], u1[k] = c1r[k] A[kk] over Q_target ∪ P; the key's limb kk for limb k skips its unused q's
__global__ void big_product_kernel(const u64* c1r, const u64* B, const u64* A, u64* u0, u64* u1, size_t n, int target,
                                   int key_level, const int* midx, const DevModulus* mods) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int k = blockIdx.y;
  const DevModulus m = mods[midx[k]];
  const size_t kk = k <= target ? (size_t)k : (size_t)(key_level + 1 + (k - target - 1));
  const size_t o = (size_t)k * n + i, ko = kk * n + i;
  u0[o] = mul_mod(c1r[o], B[ko], m);
  u1[o] = mul_mod(c1r[o], A[ko], m);
}

// out[(i + k) mod N] = ±in[i] (X^N = -1), every limb, coefficient form
__global__ void monomial_kernel(const u64* in, u64* out, size_t n, size_t k, const DevModulus* mods) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const size_t o = (size_t)blockIdx.y * n;
  const size_t d = i + k;  // k < 2N
  const u64 v = in[o + i];
  const size_t at = d % (2 * n);
  out[o + at % n] = at >= n ? neg_mod(v, mods[blockIdx.y].q) : v;
}

}  // namespace

DeviceEncapsulationKeys::DeviceEncapsulationKeys(const GpuContext& c, int level, const u64* small_b,
                                                 const u64* small_a, const u64* big_b, const u64* big_a)
    : level_(level) {
  const size_t n = c.n(), big = (size_t)(level + 1 + c.num_p()) * n;
  small_b_ = c.alloc(2 * n), small_a_ = c.alloc(2 * n), big_b_ = c.alloc(big), big_a_ = c.alloc(big);
  HG_CHECK(cudaMemcpyAsync(small_b_.data(), small_b, 2 * n * sizeof(u64), cudaMemcpyHostToDevice, c.stream()));
  HG_CHECK(cudaMemcpyAsync(small_a_.data(), small_a, 2 * n * sizeof(u64), cudaMemcpyHostToDevice, c.stream()));
  HG_CHECK(cudaMemcpyAsync(big_b_.data(), big_b, big * sizeof(u64), cudaMemcpyHostToDevice, c.stream()));
  HG_CHECK(cudaMemcpyAsync(big_a_.data(), big_a, big * sizeof(u64), cudaMemcpyHostToDevice, c.stream()));
  c.sync();
}

void dense_to_sparse(const GpuContext& c, const DeviceEncapsulationKeys& keys, const u64* c0, const u64* c1, u64* out0,
                     u64* out1) {
  const size_t n = c.n();
  const int* q0map = c.limb_map(0, false);
  const int* p0map = c.limb_map(0, true) + 1;  // p_0
  const DevModulus& q0 = c.host_modulus(0);
  const DevModulus& p0 = c.host_modulus(c.p_index(0));
  // c1 in coefficient form over q0, centred-lifted to p0 (a single prime is its own digit: the exact ModUp)
  DeviceBuffer c1q = c.alloc(n), c1p = c.alloc(n), uq = c.alloc(n), up = c.alloc(n), k0 = c.alloc(n);
  HG_CHECK(cudaMemcpyAsync(c1q.data(), c1, n * sizeof(u64), cudaMemcpyDeviceToDevice, c.stream()));
  ntt_inverse(c, c1q.data(), 1, q0map, 1);
  lift_map_kernel<<<grid_for(c, 1), kThreads, 0, c.stream()>>>(c1q.data(), q0.q, c1p.data(), n, p0map,
                                                               c.dev_moduli());
  HG_LAUNCHED("dense_to_sparse (lift)");
  ntt_forward(c, c1p.data(), 1, p0map, 1);
  const u64 p0inv = inv_mod_host(p0.q % q0.q, q0.q);
  const u64* key[2] = {keys.small_b(), keys.small_a()};
  u64* dst[2] = {k0.data(), out1};
  for (int j = 0; j < 2; ++j) {
    small_product_kernel<<<grid_for(c, 1), kThreads, 0, c.stream()>>>(c1, c1p.data(), key[j], uq.data(), up.data(),
                                                                      n, q0, p0);
    ntt_inverse(c, uq.data(), 1, q0map, 1);
    ntt_inverse(c, up.data(), 1, p0map, 1);
    small_down_kernel<<<grid_for(c, 1), kThreads, 0, c.stream()>>>(uq.data(), up.data(), n, q0, p0.q, p0inv);
    HG_LAUNCHED("dense_to_sparse");
    ntt_forward(c, uq.data(), 1, q0map, 1);
    HG_CHECK(cudaMemcpyAsync(dst[j], uq.data(), n * sizeof(u64), cudaMemcpyDeviceToDevice, c.stream()));
  }
  add_q(c, c0, k0.data(), out0, 0);
}

void mod_raise(const GpuContext& c, const DeviceEncapsulationKeys& keys, const u64* c0, const u64* c1, int target,
               u64* out0, u64* out1) {
  if (target < 0 || target > keys.level()) throw std::invalid_argument("mod_raise: target level above the keys' level");
  const size_t n = c.n();
  const int total = target + 1 + c.num_p();
  const int* q0map = c.limb_map(0, false);
  const int* ext = c.limb_map(target, true);
  DeviceBuffer a = c.alloc(2 * n), c0r = c.alloc((size_t)(target + 1) * n), c1r = c.alloc((size_t)total * n);
  HG_CHECK(cudaMemcpyAsync(a.data(), c0, n * sizeof(u64), cudaMemcpyDeviceToDevice, c.stream()));
  HG_CHECK(cudaMemcpyAsync(a.data() + n, c1, n * sizeof(u64), cudaMemcpyDeviceToDevice, c.stream()));
  ntt_inverse(c, a.data(), 2, q0map, 1);
  const u64 q0 = c.q(0);
  lift_map_kernel<<<grid_for(c, total), kThreads, 0, c.stream()>>>(a.data() + n, q0, c1r.data(), n, ext,
                                                                   c.dev_moduli());
  lift_map_kernel<<<grid_for(c, target + 1), kThreads, 0, c.stream()>>>(a.data(), q0, c0r.data(), n, ext,
                                                                        c.dev_moduli());
  HG_LAUNCHED("mod_raise (lift)");
  ntt_forward(c, c1r.data(), total, ext, total);
  ntt_forward(c, c0r.data(), target + 1, ext, target + 1);
  DeviceBuffer u = c.alloc(2 * (size_t)total * n);
  big_product_kernel<<<grid_for(c, total), kThreads, 0, c.stream()>>>(c1r.data(), keys.big_b(), keys.big_a(),
                                                                      u.data(), u.data() + (size_t)total * n, n,
                                                                      target, keys.level(), ext, c.dev_moduli());
  HG_LAUNCHED("mod_raise (key product)");
  moddown(c, u.data(), target, out0, c0r.data());
  moddown(c, u.data() + (size_t)total * n, target, out1, nullptr);
}

void mul_monomial(const GpuContext& c, const u64* in, int level, uint64_t k, u64* out) {
  const size_t n = c.n(), words = (size_t)(level + 1) * n;
  DeviceBuffer t = c.alloc(words);
  HG_CHECK(cudaMemcpyAsync(t.data(), in, words * sizeof(u64), cudaMemcpyDeviceToDevice, c.stream()));
  const int* map = c.limb_map(level, false);
  ntt_inverse(c, t.data(), level + 1, map, level + 1);
  monomial_kernel<<<grid_for(c, level + 1), kThreads, 0, c.stream()>>>(t.data(), out, n, (size_t)(k % (2 * n)),
                                                                       c.dev_moduli());
  HG_LAUNCHED("monomial product");
  ntt_forward(c, out, level + 1, map, level + 1);
}

}  // namespace hemlp::cuda
