// Negacyclic NTT on the device, the same transform as ring/ntt.h: forward Cooley-Tukey from natural order to
// bit-reversed order (NTT(a)_j = a(psi^(2 brv(j) + 1))), inverse Gentleman-Sande back, scaled by N^-1.
// Stages whose butterflies span more than a tile run one launch each over every limb; the remaining stages of a
// tile (2048 coefficients) run in shared memory in one launch.
#include "cuda/kernels.cuh"

namespace hemlp::cuda {

namespace {

constexpr int kTileLog = 11;  // 2048 coefficients = 16 KiB of shared memory per block

__global__ void fwd_stage(u64* a, int log_n, int m, int t_log, const int* midx, int period, const DevModulus* mods,
                          const u64* w, const u64* wp) {
  const size_t n = (size_t)1 << log_n;
  const size_t b = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= n / 2) return;
  const int limb = blockIdx.y, mi = midx[limb % period];
  const u64 q = mods[mi].q;
  const size_t i = b >> t_log, j = b & (((size_t)1 << t_log) - 1), t = (size_t)1 << t_log;
  const size_t idx = (i << (t_log + 1)) + j;
  u64* p = a + (size_t)limb * n;
  const size_t wi = (size_t)mi * n + m + i;
  const u64 U = p[idx], V = mul_shoup(p[idx + t], w[wi], wp[wi], q);
  p[idx] = add_mod(U, V, q);
  p[idx + t] = sub_mod(U, V, q);
}

// The stages t = tile/2 .. 1 of one tile of `tile` coefficients (blockDim.x = tile / 2).
__global__ void fwd_tail(u64* a, int log_n, int tile_log, const int* midx, int period, const DevModulus* mods,
                         const u64* w, const u64* wp) {
  extern __shared__ u64 s[];
  const size_t n = (size_t)1 << log_n;
  const int tile = 1 << tile_log;
  const int limb = blockIdx.y, mi = midx[limb % period];
  const u64 q = mods[mi].q;
  u64* p = a + (size_t)limb * n + (size_t)blockIdx.x * tile;
  const int b = threadIdx.x;
  s[b] = p[b];
  s[b + tile / 2] = p[b + tile / 2];
  __syncthreads();
  for (int t_log = tile_log - 1; t_log >= 0; --t_log) {
    const int t = 1 << t_log;
    const size_t m = n >> (t_log + 1);                            // groups in this stage over the whole limb
    const int il = b >> t_log, j = b & (t - 1);
    const size_t i = (size_t)blockIdx.x * (tile >> (t_log + 1)) + il;  // the group's index in the limb
    const int idx = (il << (t_log + 1)) + j;
    const size_t wi = (size_t)mi * n + m + i;
    const u64 U = s[idx], V = mul_shoup(s[idx + t], w[wi], wp[wi], q);
    s[idx] = add_mod(U, V, q);
    s[idx + t] = sub_mod(U, V, q);
    __syncthreads();
  }
  p[b] = s[b];
  p[b + tile / 2] = s[b + tile / 2];
}

__global__ void inv_stage(u64* a, int log_n, int m, int t_log, const int* midx, int period, const DevModulus* mods,
                          const u64* iw, const u64* iwp, const u64* ninv, int scale) {
  const size_t n = (size_t)1 << log_n;
  const size_t b = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= n / 2) return;
  const int limb = blockIdx.y, mi = midx[limb % period];
  const u64 q = mods[mi].q;
  const size_t i = b >> t_log, j = b & (((size_t)1 << t_log) - 1), t = (size_t)1 << t_log;
  const size_t idx = (i << (t_log + 1)) + j;
  u64* p = a + (size_t)limb * n;
  const size_t wi = (size_t)mi * n + m + i;
  const u64 U = p[idx], V = p[idx + t];
  u64 x = add_mod(U, V, q), y = mul_shoup(sub_mod(U, V, q), iw[wi], iwp[wi], q);
  if (scale) {
    const u64 ni = ninv[2 * mi], nip = ninv[2 * mi + 1];
    x = mul_shoup(x, ni, nip, q);
    y = mul_shoup(y, ni, nip, q);
  }
  p[idx] = x;
  p[idx + t] = y;
}

// The stages t = 1 .. tile/2 of one tile; scaled by N^-1 at the end when they are the last stages.
__global__ void inv_head(u64* a, int log_n, int tile_log, const int* midx, int period, const DevModulus* mods,
                         const u64* iw, const u64* iwp, const u64* ninv, int scale) {
  extern __shared__ u64 s[];
  const size_t n = (size_t)1 << log_n;
  const int tile = 1 << tile_log;
  const int limb = blockIdx.y, mi = midx[limb % period];
  const u64 q = mods[mi].q;
  u64* p = a + (size_t)limb * n + (size_t)blockIdx.x * tile;
  const int b = threadIdx.x;
  s[b] = p[b];
  s[b + tile / 2] = p[b + tile / 2];
  __syncthreads();
  for (int t_log = 0; t_log < tile_log; ++t_log) {
    const int t = 1 << t_log;
    const size_t m = n >> (t_log + 1);
    const int il = b >> t_log, j = b & (t - 1);
    const size_t i = (size_t)blockIdx.x * (tile >> (t_log + 1)) + il;
    const int idx = (il << (t_log + 1)) + j;
    const size_t wi = (size_t)mi * n + m + i;
    const u64 U = s[idx], V = s[idx + t];
    s[idx] = add_mod(U, V, q);
    s[idx + t] = mul_shoup(sub_mod(U, V, q), iw[wi], iwp[wi], q);
    __syncthreads();
  }
  u64 x = s[b], y = s[b + tile / 2];
  if (scale) {
    const u64 ni = ninv[2 * mi], nip = ninv[2 * mi + 1];
    x = mul_shoup(x, ni, nip, q);
    y = mul_shoup(y, ni, nip, q);
  }
  p[b] = x;
  p[b + tile / 2] = y;
}

}  // namespace

void ntt_forward(const GpuContext& c, u64* data, int limbs, const int* midx, int period) {
  if (limbs <= 0) return;
  const int log_n = c.log_n(), tile_log = log_n < kTileLog ? log_n : kTileLog;
  const size_t n = c.n();
  const dim3 grid_g((unsigned)((n / 2 + 255) / 256), (unsigned)limbs);
  int t_log = log_n - 1;
  for (size_t m = 1; t_log >= tile_log; m <<= 1, --t_log)
    fwd_stage<<<grid_g, 256, 0, c.stream()>>>(data, log_n, (int)m, t_log, midx, period, c.dev_moduli(), c.w(),
                                              c.wp());
  const dim3 grid_t((unsigned)(n >> tile_log), (unsigned)limbs);
  fwd_tail<<<grid_t, 1 << (tile_log - 1), (size_t(1) << tile_log) * sizeof(u64), c.stream()>>>(
      data, log_n, tile_log, midx, period, c.dev_moduli(), c.w(), c.wp());
  HG_LAUNCHED("NTT forward");
}

void ntt_inverse(const GpuContext& c, u64* data, int limbs, const int* midx, int period) {
  if (limbs <= 0) return;
  const int log_n = c.log_n(), tile_log = log_n < kTileLog ? log_n : kTileLog;
  const size_t n = c.n();
  const bool head_last = tile_log == log_n;
  const dim3 grid_t((unsigned)(n >> tile_log), (unsigned)limbs);
  inv_head<<<grid_t, 1 << (tile_log - 1), (size_t(1) << tile_log) * sizeof(u64), c.stream()>>>(
      data, log_n, tile_log, midx, period, c.dev_moduli(), c.iw(), c.iwp(), c.n_inv(), head_last ? 1 : 0);
  const dim3 grid_g((unsigned)((n / 2 + 255) / 256), (unsigned)limbs);
  for (int t_log = tile_log; t_log < log_n; ++t_log) {
    const size_t m = n >> (t_log + 1);
    inv_stage<<<grid_g, 256, 0, c.stream()>>>(data, log_n, (int)m, t_log, midx, period, c.dev_moduli(), c.iw(),
                                              c.iwp(), c.n_inv(), t_log == log_n - 1 ? 1 : 0);
  }
  HG_LAUNCHED("NTT inverse");
}

}  // namespace hemlp::cuda
