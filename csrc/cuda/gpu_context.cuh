// The device side of a CKKS context: moduli, NTT twiddles, RNS constants and Galois permutations resident on
// one GPU, a stream and its memory pool. Built from the CPU context's moduli and 2N-th roots (psi), so that
// every device operation computes the same residues as the CPU core (hemlp/gpu checks this bit for bit).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/device_arith.cuh"

namespace hemlp::cuda {

// A CUDA failure, with the call that failed: the C API turns it into an error code and message.
struct CudaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
void check_cuda(cudaError_t e, const char* what);
#define HG_CHECK(call) ::hemlp::cuda::check_cuda((call), #call)
// Checks the last kernel launch.
#define HG_LAUNCHED(what) ::hemlp::cuda::check_cuda(cudaGetLastError(), what)

// Device memory taken from the context's stream-ordered pool (cudaMallocAsync): freed memory stays in the pool
// for the next operation instead of going back to the driver. Sized in 64-bit words.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(size_t words, cudaStream_t s);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept { swap(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept { swap(o); return *this; }
  u64* data() const { return p_; }
  template <class T>
  T* as() const { return reinterpret_cast<T*>(p_); }
  size_t words() const { return n_; }

 private:
  void swap(DeviceBuffer& o) noexcept { std::swap(p_, o.p_); std::swap(n_, o.n_); std::swap(s_, o.s_); }
  u64* p_ = nullptr;
  size_t n_ = 0;
  cudaStream_t s_ = nullptr;
};

// Copies a host vector into a new pool buffer (asynchronously on s; the host vector must outlive the copy:
// callers synchronise before it goes).
template <class T>
DeviceBuffer to_device(const std::vector<T>& v, cudaStream_t s) {
  DeviceBuffer b((v.size() * sizeof(T) + 7) / 8, s);
  if (!v.empty()) check_cuda(cudaMemcpyAsync(b.data(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, s),
                             "cudaMemcpyAsync (constants)");
  return b;
}

// Constants of one fast base conversion (ring/rns.h, centred): from `src` moduli to `dst` moduli.
struct DevConverter {
  int k = 0, t = 0;                  // |source|, |target|
  DeviceBuffer src_q;                // k source moduli (q values)
  DeviceBuffer qhat_inv, qhat_inv_p;  // k: [qhat_i^-1]_{q_i} and its Shoup companion
  DeviceBuffer qhat_mod_p;           // t * k: [qhat_i]_{p_j}
  DeviceBuffer qb_mod_p;             // t * (k + 1): [c Q_B]_{p_j}
  std::vector<int> dst;              // target modulus indices (host)
  DeviceBuffer dst_dev;              // the same on the device (int32)
};

constexpr int kMaxSources = 16;  // base conversions from at most 16 moduli (alpha and K are far below)

class GpuContext {
 public:
  // moduli: q_0..q_L then p_0..p_{K-1}; psi[i]: the primitive 2N-th root of unity of moduli[i] that the CPU
  // core's NTT uses (NTT(a)_j = a(psi^(2 brv(j) + 1))).
  GpuContext(int log_n, int num_q, int num_p, int alpha, const u64* moduli, const u64* psi, int device);
  ~GpuContext();
  GpuContext(const GpuContext&) = delete;
  GpuContext& operator=(const GpuContext&) = delete;

  size_t n() const { return n_; }
  int log_n() const { return log_n_; }
  int max_level() const { return num_q_ - 1; }
  int num_p() const { return num_p_; }
  int alpha() const { return alpha_; }
  int num_moduli() const { return num_q_ + num_p_; }
  int p_index(int j) const { return num_q_ + j; }
  int qp_index(int level, int k) const { return k <= level ? k : p_index(k - level - 1); }
  u64 q(int idx) const { return moduli_[idx]; }
  cudaStream_t stream() const { return stream_; }

  const DevModulus* dev_moduli() const { return (const DevModulus*)mod_.data(); }
  const u64* w() const { return w_.data(); }    // [idx * n + i] = psi^brv(i)
  const u64* wp() const { return wp_.data(); }
  const u64* iw() const { return iw_.data(); }  // psi^-brv(i)
  const u64* iwp() const { return iwp_.data(); }
  const u64* n_inv() const { return ninv_.data(); }  // [2 idx] = N^-1 mod q, [2 idx + 1] its Shoup companion

  // Device array of the modulus index of every limb of a polynomial over Q_level ∪ P (ext) or Q_level.
  const int* limb_map(int level, bool ext) const;
  const DevConverter& modup_converter(int start, int count) const;  // q_start.. -> every modulus
  const DevConverter& moddown_converter() const { return *moddown_; }  // P -> Q_L
  const uint32_t* galois_permutation(uint64_t g) const;  // device copy of ring::galois_ntt_permutation

  // device tables of (value, Shoup companion) pairs: [2 i] for the P tables, [2 (l num_q + i)] for the per-level ones
  const u64* dev_p_mod_q() const { return d_pmod_.data(); }       // [P]_{q_i}
  const u64* dev_p_inv_mod_q() const { return d_pinv_.data(); }   // [P^-1]_{q_i}
  const u64* dev_q_inv_mod_q() const { return d_qinv_.data(); }   // [q_l^-1]_{q_i}, i < l
  const u64* dev_pq_inv_mod_q() const { return d_pqinv_.data(); } // [(P q_l)^-1]_{q_i}, i < l
  int num_q() const { return num_q_; }

  u64 p_mod_q(int i) const { return p_mod_q_[i]; }
  u64 p_inv_mod_q(int i) const { return p_inv_[i]; }
  const DevModulus& host_modulus(int idx) const { return host_mods_[idx]; }  // the host copy of dev_moduli()[idx]

  DeviceBuffer alloc(size_t words) const { return DeviceBuffer(words, stream_); }
  void sync() const;

 private:
  std::unique_ptr<DevConverter> make_converter(const std::vector<int>& src, const std::vector<int>& dst) const;

  int log_n_, num_q_, num_p_, alpha_, device_;
  size_t n_;
  std::vector<u64> moduli_;
  std::vector<DevModulus> host_mods_;
  cudaStream_t stream_ = nullptr;
  DeviceBuffer mod_, w_, wp_, iw_, iwp_, ninv_, d_pmod_, d_pinv_, d_qinv_, d_pqinv_;
  std::vector<u64> p_mod_q_, p_inv_;
  std::unique_ptr<DevConverter> moddown_;
  mutable std::mutex mu_;
  mutable std::map<std::pair<int, int>, std::unique_ptr<DevConverter>> modup_;
  mutable std::map<std::pair<int, int>, DeviceBuffer> limb_maps_;
  mutable std::map<uint64_t, DeviceBuffer> galois_;
};

}  // namespace hemlp::cuda
