// Bootstrapping's bottom-of-the-chain steps on the device (boot_steps.cu): the encapsulation key switch s -> s' at
// level 0 over {q0, p0}, ModRaise fused with the switch back, and the product by a monomial X^k.
#pragma once
#include <cstdint>

#include "cuda/kernels.cuh"

namespace hemlp::cuda {

// The two keys of boot/modraise.h's EncapsulationKeys: small (b, a) over {q0, p0}, big (B, A) over Q_level ∪ P.
class DeviceEncapsulationKeys {
 public:
  DeviceEncapsulationKeys(const GpuContext& c, int level, const u64* small_b, const u64* small_a, const u64* big_b,
                          const u64* big_a);
  int level() const { return level_; }
  const u64* small_b() const { return small_b_.data(); }
  const u64* small_a() const { return small_a_.data(); }
  const u64* big_b() const { return big_b_.data(); }
  const u64* big_a() const { return big_a_.data(); }

 private:
  int level_;
  DeviceBuffer small_b_, small_a_, big_b_, big_a_;
};

// (c0, c1) at level 0 under s -> (out0, out1) at level 0 under s' (boot/modraise.cpp dense_to_sparse).
void dense_to_sparse(const GpuContext& c, const DeviceEncapsulationKeys& keys, const u64* c0, const u64* c1, u64* out0,
                     u64* out1);
// (c0, c1) at level 0 under s' -> level `target` under s (boot/modraise.cpp mod_raise).
void mod_raise(const GpuContext& c, const DeviceEncapsulationKeys& keys, const u64* c0, const u64* c1, int target,
               u64* out0, u64* out1);
// out = in · X^k over level + 1 limbs (NTT form in and out; in and out must not overlap).
void mul_monomial(const GpuContext& c, const u64* in, int level, uint64_t k, u64* out);

}  // namespace hemlp::cuda
