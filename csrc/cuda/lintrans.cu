// The BSGS linear transform with double hoisting on the device (the CoeffToSlot / SlotToCoeff levels of
// bootstrapping): the same schedule and arithmetic as NativeLinearTransform::apply_double (boot/lintrans.cpp), so
// the same words. Baby steps stay in Q_l ∪ P as P·rot_b(x) (one ModUp shared by all), each giant group is summed
// in Q_l ∪ P, a giant step brings only c1 down and switches it lazily, the total takes one ModDown (fused with the
// rescale).
#include <algorithm>

#include "cuda/lintrans.cuh"

namespace hemlp::cuda {

namespace {

constexpr int kFold = 16;  // products < 2^124 (q < 2^62): 16 of them fit a 128-bit sum


// dst[k] = src[k] * [P]_{q_k}, limbs 0..level
__global__ void times_p_kernel(const u64* src, u64* dst, const u64* pmod, size_t n, const DevModulus* mods) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int k = blockIdx.y;
  const size_t o = (size_t)k * n + i;
  dst[o] = mul_shoup(src[o], pmod[2 * k], pmod[2 * k + 1], mods[k].q);
}

// x[k][i] += src[k][perm[i]], limbs 0..level
__global__ void add_perm_kernel(u64* x, const u64* src, const uint32_t* perm, size_t n, const DevModulus* mods) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const size_t o = (size_t)blockIdx.y * n;
  x[o + i] = add_mod(x[o + i], src[o + perm[i]], mods[blockIdx.y].q);
}

// o0[k] = sum_t d_t[k] x_t[k], o1[k] = sum_t d_t[k] y_t[k] over the terms with k < lim_t (empty sum: 0)
__global__ void mac_kernel(const u64* const* d, const u64* const* x, const u64* const* y, const int* lim, int terms,
                           u64* o0, u64* o1, size_t n, const int* midx, const DevModulus* mods) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int k = blockIdx.y;
  const DevModulus m = mods[midx[k]];
  const size_t o = (size_t)k * n + i;
  u64 h0 = 0, l0 = 0, h1 = 0, l1 = 0;
  int since = 0;
  for (int t = 0; t < terms; ++t) {
    if (k >= lim[t]) continue;
    if (since == kFold) {
      l0 = reduce128(h0, l0, m), h0 = 0;
      l1 = reduce128(h1, l1, m), h1 = 0;
      since = 1;
    }
    const u64 dv = d[t][o];
    mac128(h0, l0, dv, x[t][o]);
    mac128(h1, l1, dv, y[t][o]);
    ++since;
  }
  o0[o] = reduce128(h0, l0, m);
  o1[o] = reduce128(h1, l1, m);
}

// the giant step's sum: r0 (+)= acc0[perm] + s0, r1 (+)= s1 over every limb of Q_l ∪ P
__global__ void giant_kernel(u64* r0, u64* r1, const u64* acc0, const u64* s0, const u64* s1, const uint32_t* perm,
                             int first, size_t n, const int* midx, const DevModulus* mods) {
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int k = blockIdx.y;
  const u64 q = mods[midx[k]].q;
  const size_t o = (size_t)k * n;
  const u64 v = add_mod(acc0[o + perm[i]], s0[o + i], q);
  if (first) {
    r0[o + i] = v;
    r1[o + i] = s1[o + i];
  } else {
    r0[o + i] = add_mod(r0[o + i], v, q);
    r1[o + i] = add_mod(r1[o + i], s1[o + i], q);
  }
}

}  // namespace

DeviceLinearTransform::DeviceLinearTransform(const GpuContext& c, int level, const u64* diags, int count,
                                             const std::vector<int64_t>& giant,
                                             const std::vector<std::vector<int64_t>>& baby)
    : level_(level) {
  if (giant.size() != baby.size() || giant.empty())
    throw std::invalid_argument("linear transform: one list of baby steps per giant step, at least one group");
  const int di = build_bsgs_groups(giant, baby, baby_steps_, groups_);
  if (di != count) throw std::invalid_argument("linear transform: diagonal count does not match the groups");
  limbs_ = level + 1 + c.num_p();
  diags_ = c.alloc((size_t)count * limbs_ * c.n());
  HG_CHECK(cudaMemcpyAsync(diags_.data(), diags, (size_t)count * limbs_ * c.n() * sizeof(u64), cudaMemcpyHostToDevice,
                           c.stream()));
  c.sync();
}

void DeviceLinearTransform::apply(const GpuContext& c, const u64* c0, const u64* c1,
                                  const std::vector<const DeviceSwitchKey*>& baby_keys,
                                  const std::vector<const DeviceSwitchKey*>& giant_keys, bool rescale, u64* out0,
                                  u64* out1) const {
  const size_t n = c.n();
  const int l = level_, E = limbs_;
  if (baby_keys.size() != baby_steps_.size() || giant_keys.size() != groups_.size())
    throw std::invalid_argument("linear transform: one key per baby step and one per group");
  for (size_t j = 0; j < baby_keys.size(); ++j)
    if (!baby_keys[j] || baby_keys[j]->level < l) throw std::invalid_argument("linear transform: a baby-step key is missing or below the level");
  for (size_t g = 0; g < groups_.size(); ++g)
    if (groups_[g].giant != 0 && (!giant_keys[g] || giant_keys[g]->level < l))
      throw std::invalid_argument("linear transform: a giant-step key is missing or below the level");
  const int* ext = c.limb_map(l, true);
  const size_t wq = (size_t)(l + 1) * n, we = (size_t)E * n;
  bool use0 = false;
  for (const auto& g : groups_) use0 |= std::count(g.baby.begin(), g.baby.end(), -1) > 0;
  // P·ct over Q_l: the unrotated baby step and c0's share of every rotated one
  DeviceBuffer P0 = c.alloc(wq), P1 = c.alloc(use0 ? wq : 0);
  times_p_kernel<<<grid_for(c, l + 1), kThreads, 0, c.stream()>>>(c0, P0.data(), c.dev_p_mod_q(), n, c.dev_moduli());
  if (use0)
    times_p_kernel<<<grid_for(c, l + 1), kThreads, 0, c.stream()>>>(c1, P1.data(), c.dev_p_mod_q(), n,
                                                                     c.dev_moduli());
  HG_LAUNCHED("linear transform (P·ct)");
  const size_t nb = baby_steps_.size();
  DeviceBuffer X = c.alloc(2 * nb * we);  // baby j: X0 at 2 j we, X1 at (2 j + 1) we
  if (nb) {
    DeviceBuffer D = modup(c, c1, l);
    for (size_t j = 0; j < nb; ++j) {
      const uint32_t* perm = c.galois_permutation(baby_keys[j]->galois);
      u64* x0 = X.data() + 2 * j * we;
      key_inner_product(c, D.data(), l, *baby_keys[j], perm, x0, x0 + we);
      add_perm_kernel<<<grid_for(c, l + 1), kThreads, 0, c.stream()>>>(x0, P0.data(), perm, n, c.dev_moduli());
      HG_LAUNCHED("linear transform (baby step)");
    }
  }
  DeviceBuffer out = c.alloc(2 * we), acc = c.alloc(2 * we);
  bool have_out = false;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const Group& g = groups_[gi];
    std::vector<const u64*> dp, xp, yp;
    std::vector<int> lim;
    for (size_t t = 0; t < g.diag.size(); ++t) {
      const int j = g.baby[t];
      dp.push_back(diags_.data() + (size_t)g.diag[t] * we);
      if (j >= 0) {
        xp.push_back(X.data() + 2 * j * we), yp.push_back(X.data() + (2 * j + 1) * we), lim.push_back(E);
      } else {
        xp.push_back(P0.data()), yp.push_back(P1.data()), lim.push_back(l + 1);  // no P limbs
      }
    }
    const int terms = (int)dp.size();
    DeviceBuffer tab = c.alloc(3 * terms + (terms + 1) / 2 + 1);
    const u64** tp = tab.as<const u64*>();
    HG_CHECK(cudaMemcpyAsync(tp, dp.data(), terms * sizeof(u64*), cudaMemcpyHostToDevice, c.stream()));
    HG_CHECK(cudaMemcpyAsync(tp + terms, xp.data(), terms * sizeof(u64*), cudaMemcpyHostToDevice, c.stream()));
    HG_CHECK(cudaMemcpyAsync(tp + 2 * terms, yp.data(), terms * sizeof(u64*), cudaMemcpyHostToDevice, c.stream()));
    int* lp = (int*)(tp + 3 * terms);
    HG_CHECK(cudaMemcpyAsync(lp, lim.data(), terms * sizeof(int), cudaMemcpyHostToDevice, c.stream()));
    const bool into_out = g.giant == 0 && !have_out;
    u64* s = into_out ? out.data() : acc.data();
    mac_kernel<<<grid_for(c, E), kThreads, 0, c.stream()>>>(tp, tp + terms, tp + 2 * terms, lp, terms, s, s + we, n,
                                                            ext, c.dev_moduli());
    HG_LAUNCHED("linear transform (diagonals)");  // pageable copies: the host tables may go once they return
    if (into_out) {
      have_out = true;
      continue;
    }
    if (g.giant == 0) {
      add_qp(c, out.data(), acc.data(), l);
      add_qp(c, out.data() + we, acc.data() + we, l);
      continue;
    }
    // giant step on (A0, A1) ≈ P·m_g: c1 down to Q_l, ModUp again, lazy key switch under ψ; c0 permuted in Q_l ∪ P
    DeviceBuffer a1 = c.alloc(wq), k = c.alloc(2 * we);
    moddown(c, acc.data() + we, l, a1.data(), nullptr);
    DeviceBuffer dg = modup(c, a1.data(), l);
    const uint32_t* perm = c.galois_permutation(giant_keys[gi]->galois);
    key_inner_product(c, dg.data(), l, *giant_keys[gi], perm, k.data(), k.data() + we);
    giant_kernel<<<grid_for(c, E), kThreads, 0, c.stream()>>>(out.data(), out.data() + we, acc.data(), k.data(),
                                                              k.data() + we, perm, have_out ? 0 : 1, n, ext,
                                                              c.dev_moduli());
    HG_LAUNCHED("linear transform (giant step)");
    have_out = true;
  }
  if (rescale) {
    moddown_rescale(c, out.data(), l, out0);
    moddown_rescale(c, out.data() + we, l, out1);
  } else {
    moddown(c, out.data(), l, out0, nullptr);
    moddown(c, out.data() + we, l, out1, nullptr);
  }
}

}  // namespace hemlp::cuda
