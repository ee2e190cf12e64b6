#include "cuda/mlwe.cuh"

#include <stdexcept>

#include "cuda/device_arith.cuh"

namespace hemlp::cuda {
namespace {

// ModDecomp of limb l: row (i, w) of B holds b_w[t] = c0_i[t k + w] (d3 words), row (i, w) of A holds
// a_w[v d3 + t] = c1_i[t k + w - v] with the negacyclic wrap (n words). X: the inputs' coefficient forms, input i's
// part j at ((2 i + j) limbs + l) n.
__global__ void decompose_kernel(const u64* X, int limbs, int l, int k, size_t d3, size_t n, u64 q, u64* A, u64* B) {
  const size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (x >= n) return;
  const size_t row = blockIdx.y, i = row / (size_t)k;
  const long w = (long)(row % (size_t)k);
  const u64* p0 = X + ((2 * i) * (size_t)limbs + (size_t)l) * n;
  const u64* p1 = X + ((2 * i + 1) * (size_t)limbs + (size_t)l) * n;
  const long v = (long)(x / d3), t = (long)(x % d3);
  const long j = t * k + w - v;
  A[row * n + x] = j >= 0 ? p1[j] : neg_mod(p1[j + (long)n], q);
  if (x < d3) B[row * d3 + x] = p0[x * (size_t)k + (size_t)w];
}

// ModPack's interleave of limb l: output row r = k g + w goes to coefficient t k + w of group g; the a-part of
// column block v to AT's polynomial (g, v), the b-part to BT's polynomial g (each limbs x n, limb l).
__global__ void interleave_kernel(const u64* CA, const u64* CB, int limbs, int l, int k, size_t d3, size_t n,
                                  u64* AT, u64* BT) {
  const size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (x >= n) return;
  const size_t r = blockIdx.y, g = r / (size_t)k, w = r % (size_t)k;
  const size_t v = x / d3, t = x % d3;
  AT[((g * (size_t)k + v) * (size_t)limbs + (size_t)l) * n + t * (size_t)k + w] = CA[r * n + x];
  if (x < d3) BT[(g * (size_t)limbs + (size_t)l) * n + x * (size_t)k + w] = CB[r * d3 + x];
}

u64 residue(int64_t K, u64 q) {
  const int64_t m = K % (int64_t)q;
  return m < 0 ? (u64)(m + (int64_t)q) : (u64)m;
}

}  // namespace

void pcmm_mlwe(const GpuContext& c, cublasHandle_t h, const GemmPlan& plan, const std::vector<const u64*>& c0s,
               const std::vector<const u64*>& c1s, int level, int k, int64_t K,
               const std::vector<const DeviceSwitchKey*>& keys, const std::vector<u64*>& out0s,
               const std::vector<u64*>& out1s) {
  const size_t n = c.n(), d1 = plan.rows(), d2 = plan.cols(), cts = c0s.size();
  if (k < 2 || n % (size_t)k) throw std::invalid_argument("MLWE pcmm: k must divide N and be >= 2");
  const size_t d3 = n / (size_t)k, groups = d1 / (size_t)k;
  if (c1s.size() != cts || d2 != cts * (size_t)k || d1 % (size_t)k)
    throw std::invalid_argument("MLWE pcmm: U must be (multiple of k) x (k * number of ciphertexts)");
  if (keys.size() != (size_t)k) throw std::invalid_argument("MLWE pcmm: needs k ModPack keys");
  for (const auto* key : keys)
    if (!key || key->level < level) throw std::invalid_argument("MLWE pcmm: a ModPack key is missing or below the level");
  if (out0s.size() != groups || out1s.size() != groups)
    throw std::invalid_argument("MLWE pcmm: one output ciphertext per k rows of U");
  if (d1 > 65535 || d2 > 65535) throw std::invalid_argument("MLWE pcmm: at most 65535 rows of U and input rows");
  const int limbs = level + 1;
  const size_t wq = (size_t)limbs * n;
  // every input polynomial in coefficient form, one batched inverse NTT
  DeviceBuffer X = c.alloc(2 * cts * wq);
  for (size_t i = 0; i < cts; ++i) {
    HG_CHECK(cudaMemcpyAsync(X.data() + 2 * i * wq, c0s[i], wq * sizeof(u64), cudaMemcpyDeviceToDevice, c.stream()));
    HG_CHECK(cudaMemcpyAsync(X.data() + (2 * i + 1) * wq, c1s[i], wq * sizeof(u64), cudaMemcpyDeviceToDevice,
                             c.stream()));
  }
  ntt_inverse(c, X.data(), (int)(2 * cts) * limbs, c.limb_map(level, false), limbs);
  DeviceBuffer A = c.alloc(d2 * n), B = c.alloc(d2 * d3), CA = c.alloc(d1 * n), CB = c.alloc(d1 * d3);
  DeviceBuffer AT = c.alloc(groups * (size_t)k * wq), BT = c.alloc(groups * wq);
  const dim3 grid_in((unsigned)((n + kThreads - 1) / kThreads), (unsigned)d2);
  const dim3 grid_out((unsigned)((n + kThreads - 1) / kThreads), (unsigned)d1);
  for (int l = 0; l < limbs; ++l) {
    const u64 q = c.q(l), kw = residue(K, q);
    decompose_kernel<<<grid_in, kThreads, 0, c.stream()>>>(X.data(), limbs, l, k, d3, n, q, A.data(), B.data());
    HG_LAUNCHED("MLWE pcmm (decompose)");
    plan.apply(c, h, A.data(), n, q, kw, CA.data());
    plan.apply(c, h, B.data(), d3, q, kw, CB.data());
    interleave_kernel<<<grid_out, kThreads, 0, c.stream()>>>(CA.data(), CB.data(), limbs, l, k, d3, n, AT.data(),
                                                             BT.data());
    HG_LAUNCHED("MLWE pcmm (interleave)");
  }
  ntt_forward(c, AT.data(), (int)(groups * (size_t)k) * limbs, c.limb_map(level, false), limbs);
  ntt_forward(c, BT.data(), (int)groups * limbs, c.limb_map(level, false), limbs);
  // key-switch each a~_v from s_v(X^k) to s, accumulated over Q_l ∪ P; one ModDown per part, b~ added to the first
  const size_t E = (size_t)(limbs + c.num_p()) * n;
  DeviceBuffer acc = c.alloc(2 * E), u = c.alloc(2 * E);
  for (size_t g = 0; g < groups; ++g) {
    for (int v = 0; v < k; ++v) {
      DeviceBuffer D = modup(c, AT.data() + (g * (size_t)k + (size_t)v) * wq, level);
      key_inner_product(c, D.data(), level, *keys[(size_t)v], nullptr, v ? u.data() : acc.data(),
                        v ? u.data() + E : acc.data() + E);
      if (v) {
        add_qp(c, acc.data(), u.data(), level);
        add_qp(c, acc.data() + E, u.data() + E, level);
      }
    }
    HG_CHECK(cudaMemcpyAsync(out0s[g], BT.data() + g * wq, wq * sizeof(u64), cudaMemcpyDeviceToDevice, c.stream()));
    moddown(c, acc.data(), level, out0s[g], out0s[g]);
    moddown(c, acc.data() + E, level, out1s[g], nullptr);
  }
}

}  // namespace hemlp::cuda
