// HomomorphicEncryption.org standard, 128-bit classical security, uniform ternary
// secret, sigma = 3.2: the largest log2(QP) (P included) allowed for each ring degree.
#pragma once
#include <cstddef>

namespace hemlp {

inline int max_log_qp_128(int log_n) {
  switch (log_n) {
    case 10: return 27;
    case 11: return 54;
    case 12: return 109;
    case 13: return 218;
    case 14: return 438;
    case 15: return 881;
    case 16: return 1772;
    default: return -1;  // not covered by the table
  }
}

}  // namespace hemlp
