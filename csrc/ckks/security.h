// HomomorphicEncryption.org standard, 128-bit classical security, uniform ternary
// secret, sigma = 3.2: the largest log2(QP) (P included) allowed for each ring degree.
// The standard's table stops at N = 2^15; for N = 2^16 we use OpenFHE's current bound 1747
// (its older 1772 admitted Lattigo's N16QP1767 set, which is not 128-bit by the newer estimate).
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
    case 16: return 1747;  // beyond the standard's table: OpenFHE's current uniform-ternary bound
    default: return -1;  // not covered by the table
  }
}

}  // namespace hemlp
