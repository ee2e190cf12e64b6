// A BSGS linear transform resident on the device (lintrans.cu): the encoded diagonals over Q_l ∪ P and the
// group structure of a CPU NativeLinearTransform (boot/lintrans.h), applied with double hoisting.
#pragma once
#include <cstdint>
#include <vector>

#include "boot/bsgs_groups.h"
#include "cuda/kernels.cuh"

namespace hemlp::cuda {

class DeviceLinearTransform {
 public:
  // diags: count diagonals of level + 1 + K limbs each (NTT form, group order, host memory); giant[g] and
  // baby[g][t] the rotation steps of group g and of its t-th diagonal (0: unrotated).
  DeviceLinearTransform(const GpuContext& c, int level, const u64* diags, int count, const std::vector<int64_t>& giant,
                        const std::vector<std::vector<int64_t>>& baby);
  // out (level limbs with rescale, else level + 1) = T·(c0, c1) at `level`; baby_keys[j] rotates by baby_steps()[j],
  // giant_keys[g] by group g's giant step (null for 0).
  void apply(const GpuContext& c, const u64* c0, const u64* c1, const std::vector<const DeviceSwitchKey*>& baby_keys,
             const std::vector<const DeviceSwitchKey*>& giant_keys, bool rescale, u64* out0, u64* out1) const;
  int level() const { return level_; }
  const std::vector<int64_t>& baby_steps() const { return baby_steps_; }
  std::vector<int64_t> giant_steps() const {
    std::vector<int64_t> g;
    for (const auto& grp : groups_) g.push_back(grp.giant);
    return g;
  }

 private:
  using Group = BsgsGroup;
  int level_, limbs_ = 0;
  std::vector<int64_t> baby_steps_;
  std::vector<Group> groups_;
  DeviceBuffer diags_;
};

}  // namespace hemlp::cuda
