// Homomorphic evaluation of a polynomial given in the Chebyshev (T_i on [-1, 1]) or power basis,
// depth-optimal (ceil(log2(deg + 1)) levels) and landing on an exact target scale.
//
// Algorithm (baby-step / giant-step, Lattigo-style scale targets; the C++ port of hemlp/he/polynomial.py):
//  * powers B_n are built on demand, B_n = B_a B_b with a the largest power of two below n (for Chebyshev,
//    T_n = 2 T_a T_b - T_{a-b}, the correction subtracted before the product's rescale so there is one
//    rounding); a product without a correction is one fused mul_relin_rescale. When a product's natural scale
//    s_a s_b / q_l would fall below half the next prime, one operand is first multiplied by the exact integer
//    k = floor(q_(l-1) / (s_a s_b / q_l)) (free), so that power scales stay near the primes;
//  * p is split recursively as p = L + B_m H (m a power of two): H is evaluated one level higher at the
//    target scale S q_(l+1) / s_m so that the product lands on (l, S); a node whose powers are all available
//    one level up is evaluated directly as one linear combination sum_i round(c_i S q / s_i) B_i (exact
//    integer constants, no encoding), then rescaled.
// Scales above the primes cannot be brought down without a level (the power scales grow as s^n / q^(n-1)),
// so an input scale far above q_top makes the derived targets tiny: that raises ErrorKind::Scale.
#pragma once
#include <vector>

#include "ckks/evaluator.h"

namespace hemlp::boot {

enum class PolyBasis : int { Chebyshev = 0, Power = 1 };

struct PolyEvalStats {
  int ct_mul = 0;     // ciphertext x ciphertext products (relinearised and rescaled)
  int const_mul = 0;  // constant multiplications (linear-combination terms and corrections)
  int rescale = 0;    // standalone rescales (not fused into a product)
};

// Levels a degree-d polynomial consumes: ceil(log2(d + 1)), 0 for a constant.
int poly_depth(int degree);

// p(x) at level `target_level` (<= x.level - poly_depth(deg); pass -1 for that maximum) and scale
// `target_scale` exactly. x: relinearised, slot-encoded. Trailing zero coefficients are ignored; a constant
// polynomial is rejected (add the constant instead). rlk may be null only for degree <= 1 (no product).
Ciphertext evaluate_polynomial(const Context& ctx, const Evaluator& ev, const Ciphertext& x,
                               const std::vector<double>& coeffs, PolyBasis basis, const SwitchKey* rlk,
                               double target_scale, int target_level, PolyEvalStats* stats = nullptr);

}  // namespace hemlp::boot
