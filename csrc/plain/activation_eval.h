// Plaintext evaluation of fitted activation polynomials for the compiler's degree search and its exact plaintext
// passes (hemlp.compiler.activations, hemlp.compiler.poly_table). Every path (scalar, AVX2, AVX-512) performs each
// element's IEEE operations in the order the numpy recurrences they replace do, with no fused multiply-adds, so
// the results are bit-identical to those recurrences and to one another.
#pragma once
#include <cstddef>
#include <cstdint>

namespace hemlp::plain {

// out[i] = sum_k c[k] T_k(u[i]) by Clenshaw's recurrence (nc >= 3): b_k = ((2u) b_{k+1} - b_{k+2}) + c_k down to
// k = 1, then p = (u b_1 - b_2) + c_0.
void chebval_clenshaw(const double* u, size_t n, const double* c, size_t nc, double* out);

// Linear interpolation in a uniform table of `points` cells (points + 1 nodes): for each x,
//   f = (x - lo) * scale, i = clamp(floor(f), 0, points - 1), f -= i,
//   out = gain * (t[i] + (t[i + 1] - t[i]) * f)            (in float64, then rounded once to Out)
// Returns true when some x lies outside [dom_lo, dom_hi] or is NaN: those outputs are unspecified and the caller
// evaluates them exactly.
template <class In, class Out>
bool table_lookup(const double* table, size_t points, double lo, double scale, double gain, double dom_lo,
                  double dom_hi, const In* x, size_t n, Out* out);

}  // namespace hemlp::plain
