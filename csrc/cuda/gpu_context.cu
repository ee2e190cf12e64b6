#include "cuda/gpu_context.cuh"

#include <cstdint>

namespace hemlp::cuda {

void check_cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  throw CudaError(std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

DeviceBuffer::DeviceBuffer(size_t words, cudaStream_t s) : n_(words), s_(s) {
  if (words) check_cuda(cudaMallocAsync((void**)&p_, words * sizeof(u64), s), "cudaMallocAsync");
}

DeviceBuffer::~DeviceBuffer() {
  if (p_) cudaFreeAsync(p_, s_);  // a failure here has nowhere to go; the pool reclaims the memory with the context
}

namespace {

uint32_t brv(uint32_t x, int bits) {
  uint32_t r = 0;
  for (int i = 0; i < bits; ++i) r = (r << 1) | ((x >> i) & 1);
  return r;
}

}  // namespace

GpuContext::GpuContext(int log_n, int num_q, int num_p, int alpha, const u64* moduli, const u64* psi, int device)
    : log_n_(log_n), num_q_(num_q), num_p_(num_p), alpha_(alpha), device_(device), n_((size_t)1 << log_n) {
  if (log_n < 1 || log_n > 17) throw std::invalid_argument("log_n must be in [1, 17]");
  if (num_q < 1 || num_p < 1 || alpha < 1 || alpha > kMaxSources || num_p > kMaxSources)
    throw std::invalid_argument("need >= 1 q and p primes, 1 <= alpha <= 16 and at most 16 p primes");
  const int M = num_q + num_p;
  moduli_.assign(moduli, moduli + M);
  for (int i = 0; i < M; ++i) {
    const u64 q = moduli_[i];
    if (q < 3 || q >= (u64(1) << 62) || !(q & 1)) throw std::invalid_argument("moduli must be odd and below 2^62");
    if (pow_mod_host(psi[i], n_, q) != q - 1) throw std::invalid_argument("psi[i] is not a primitive 2N-th root mod q_i");
  }
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  // keep freed blocks in the pool between operations (the default threshold returns them at every sync)
  cudaMemPool_t pool;
  check_cuda(cudaDeviceGetDefaultMemPool(&pool, device), "cudaDeviceGetDefaultMemPool");
  uint64_t threshold = UINT64_MAX;
  check_cuda(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold), "cudaMemPoolSetAttribute");

  host_mods_.resize(M);
  std::vector<u64> w((size_t)M * n_), wp((size_t)M * n_), iw((size_t)M * n_), iwp((size_t)M * n_), ninv(2 * M);
  std::vector<u64> pw(n_), ipw(n_);
  for (int m = 0; m < M; ++m) {
    const u64 q = moduli_[m];
    host_mods_[m] = make_modulus(q);
    const u64 ps = psi[m] % q, ips = inv_mod_host(ps, q);
    pw[0] = ipw[0] = 1;
    for (size_t i = 1; i < n_; ++i) pw[i] = mul_mod_host(pw[i - 1], ps, q), ipw[i] = mul_mod_host(ipw[i - 1], ips, q);
    for (size_t i = 0; i < n_; ++i) {
      const uint32_t b = brv((uint32_t)i, log_n);
      const size_t o = (size_t)m * n_ + i;
      w[o] = pw[b], wp[o] = shoup_companion(w[o], q);
      iw[o] = ipw[b], iwp[o] = shoup_companion(iw[o], q);
    }
    ninv[2 * m] = inv_mod_host(n_ % q, q);
    ninv[2 * m + 1] = shoup_companion(ninv[2 * m], q);
  }
  mod_ = to_device(host_mods_, stream_);
  w_ = to_device(w, stream_), wp_ = to_device(wp, stream_);
  iw_ = to_device(iw, stream_), iwp_ = to_device(iwp, stream_);
  ninv_ = to_device(ninv, stream_);
  p_mod_q_.resize(num_q);
  p_inv_.resize(num_q);
  for (int i = 0; i < num_q; ++i) {
    u64 prod = 1;
    for (int j = 0; j < num_p; ++j) prod = mul_mod_host(prod, moduli_[num_q + j] % moduli_[i], moduli_[i]);
    p_mod_q_[i] = prod;
    p_inv_[i] = inv_mod_host(prod, moduli_[i]);
  }
  std::vector<u64> pm(2 * num_q), pi(2 * num_q), qi(2 * (size_t)num_q * num_q, 0), pqi(2 * (size_t)num_q * num_q, 0);
  for (int i = 0; i < num_q; ++i) {
    const u64 q = moduli_[i];
    pm[2 * i] = p_mod_q_[i], pm[2 * i + 1] = shoup_companion(p_mod_q_[i], q);
    pi[2 * i] = p_inv_[i], pi[2 * i + 1] = shoup_companion(p_inv_[i], q);
  }
  for (int l = 1; l < num_q; ++l)
    for (int i = 0; i < l; ++i) {
      const u64 q = moduli_[i], a = inv_mod_host(moduli_[l] % q, q), b = inv_mod_host(mul_mod_host(p_mod_q_[i], moduli_[l] % q, q), q);
      const size_t o = 2 * ((size_t)l * num_q + i);
      qi[o] = a, qi[o + 1] = shoup_companion(a, q);
      pqi[o] = b, pqi[o + 1] = shoup_companion(b, q);
    }
  d_pmod_ = to_device(pm, stream_), d_pinv_ = to_device(pi, stream_);
  d_qinv_ = to_device(qi, stream_), d_pqinv_ = to_device(pqi, stream_);
  std::vector<int> ps, qs;
  for (int j = 0; j < num_p; ++j) ps.push_back(num_q + j);
  for (int i = 0; i < num_q; ++i) qs.push_back(i);
  moddown_ = make_converter(ps, qs);
  sync();  // the host tables above must outlive their copies
}

GpuContext::~GpuContext() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    modup_.clear();
    limb_maps_.clear();
    galois_.clear();
  }
  moddown_.reset();
  mod_ = DeviceBuffer(), w_ = DeviceBuffer(), wp_ = DeviceBuffer(), iw_ = DeviceBuffer(), iwp_ = DeviceBuffer();
  ninv_ = DeviceBuffer(), d_pmod_ = DeviceBuffer(), d_pinv_ = DeviceBuffer(), d_qinv_ = DeviceBuffer();
  d_pqinv_ = DeviceBuffer();
  if (stream_) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
}

void GpuContext::sync() const { check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }


std::unique_ptr<DevConverter> GpuContext::make_converter(const std::vector<int>& src, const std::vector<int>& dst) const {
  auto c = std::make_unique<DevConverter>();
  const int k = (int)src.size(), t = (int)dst.size();
  if (k > kMaxSources) throw std::invalid_argument("base conversion from more than 16 moduli");
  c->k = k, c->t = t, c->dst = dst;
  std::vector<u64> sq(k), inv(k), invp(k), qhat((size_t)t * k), qb((size_t)t * (k + 1));
  for (int i = 0; i < k; ++i) {
    const u64 qi = moduli_[src[i]];
    u64 prod = 1;
    for (int l = 0; l < k; ++l)
      if (l != i) prod = mul_mod_host(prod, moduli_[src[l]] % qi, qi);
    sq[i] = qi, inv[i] = inv_mod_host(prod, qi), invp[i] = shoup_companion(inv[i], qi);
  }
  for (int j = 0; j < t; ++j) {
    const u64 p = moduli_[dst[j]];
    for (int i = 0; i < k; ++i) {
      u64 prod = 1;
      for (int l = 0; l < k; ++l)
        if (l != i) prod = mul_mod_host(prod, moduli_[src[l]] % p, p);
      qhat[(size_t)j * k + i] = prod;
    }
    u64 qbp = 1;
    for (int l = 0; l < k; ++l) qbp = mul_mod_host(qbp, moduli_[src[l]] % p, p);
    for (int cc = 0; cc <= k; ++cc) qb[(size_t)j * (k + 1) + cc] = mul_mod_host((u64)cc, qbp, p);
  }
  c->src_q = to_device(sq, stream_);
  c->qhat_inv = to_device(inv, stream_), c->qhat_inv_p = to_device(invp, stream_);
  c->qhat_mod_p = to_device(qhat, stream_), c->qb_mod_p = to_device(qb, stream_);
  c->dst_dev = to_device(dst, stream_);
  sync();
  return c;
}

const DevConverter& GpuContext::modup_converter(int start, int count) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto key = std::make_pair(start, count);
  auto it = modup_.find(key);
  if (it != modup_.end()) return *it->second;
  std::vector<int> src, dst;
  for (int i = 0; i < count; ++i) src.push_back(start + i);
  for (int m = 0; m < num_moduli(); ++m) dst.push_back(m);
  return *modup_.emplace(key, make_converter(src, dst)).first->second;
}

const int* GpuContext::limb_map(int level, bool ext) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto key = std::make_pair(level, (int)ext);
  auto it = limb_maps_.find(key);
  if (it != limb_maps_.end()) return it->second.as<int>();
  std::vector<int> idx;
  for (int k = 0; k < level + 1 + (ext ? num_p_ : 0); ++k) idx.push_back(qp_index(level, k));
  DeviceBuffer b = to_device(idx, stream_);
  check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  return limb_maps_.emplace(key, std::move(b)).first->second.as<int>();
}

const uint32_t* GpuContext::galois_permutation(uint64_t g) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = galois_.find(g);
  if (it != galois_.end()) return it->second.as<uint32_t>();
  const uint64_t m = 2 * (uint64_t)n_;
  std::vector<uint32_t> perm(n_);
  for (uint64_t j = 0; j < n_; ++j) {
    const uint64_t e = 2 * (uint64_t)brv((uint32_t)j, log_n_) + 1, ge = (g * e) % m;
    perm[j] = brv((uint32_t)((ge - 1) / 2), log_n_);
  }
  DeviceBuffer b = to_device(perm, stream_);
  check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  return galois_.emplace(g, std::move(b)).first->second.as<uint32_t>();
}

}  // namespace hemlp::cuda
