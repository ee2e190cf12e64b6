// The group structure of a BSGS linear transform, shared by the CPU transform (boot/lintrans) and the device one
// (cuda/lintrans): header-only, no dependency beyond the standard library.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

namespace hemlp {

struct BsgsGroup {
  int64_t giant;
  std::vector<int> baby;  // index into the distinct nonzero baby steps (-1: the unrotated input)
  std::vector<int> diag;  // index of the diagonal, numbered in group order
};

// Groups from (giant step, baby steps) lists, with the distinct nonzero baby steps numbered once in `baby_steps`;
// returns the number of diagonals.
inline int build_bsgs_groups(const std::vector<int64_t>& giant, const std::vector<std::vector<int64_t>>& baby,
                             std::vector<int64_t>& baby_steps, std::vector<BsgsGroup>& groups) {
  int di = 0;
  for (size_t g = 0; g < giant.size(); ++g) {
    BsgsGroup grp{giant[g], {}, {}};
    for (int64_t b : baby[g]) {
      int idx = -1;
      if (b != 0) {
        auto it = std::find(baby_steps.begin(), baby_steps.end(), b);
        idx = (int)(it - baby_steps.begin());
        if (it == baby_steps.end()) baby_steps.push_back(b);
      }
      grp.baby.push_back(idx);
      grp.diag.push_back(di++);
    }
    groups.push_back(std::move(grp));
  }
  return di;
}

}  // namespace hemlp
