// Exact modular GEMM  C = U * X mod q  on top of floating-point DGEMM (docs/design/pcmm-and-planning.md §2.6).
//
// U is a small signed integer matrix (|U_ij| <= 2^bU, e.g. the PCMM weights round(Delta_U * W)),
// X holds residues in [0, q) for an odd q < 2^61 (one RNS limb of a ciphertext stack).
//
// Method (error-free splitting):
//   * centre each residue, x' = x or x - q, so |x'| <= (q-1)/2 < 2^(qbits-1), qbits = bitlen(q);
//   * write x' = sum_{t<T} d_t 2^(w t) with balanced digits d_t in [-2^(w-1), 2^(w-1)); the top digit
//     absorbs the rest and still has |d_{T-1}| <= 2^(w-1) because T = ceil(qbits / w);
//   * U is split the same way into TU = ceil((bU+1)/u) balanced digits of u bits, |digit| <= 2^(u-1);
//     u = bU+1 means "not split" (TU = 1, the digit is U itself, |U| <= 2^bU = 2^(u-1));
//   * one DGEMM per K-block of kb rows: every product and partial sum is an integer of magnitude
//     <= kb * 2^(u-1) * 2^(w-1) < 2^53, hence exactly representable in double whatever summation order
//     or FMA use the BLAS kernel picks;
//   * convert to int64 (exact), accumulate K-blocks lazily in int64, then
//     C = sum_{s,t} (C_{s,t} mod q) * 2^(u s + w t) mod q  with Shoup multiplications.
// The exactness precondition is checked at run time (std::invalid_argument), never assumed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace hemlp::pcmm {

constexpr int kMaxModulusBits = 61;  // q < 2^61
constexpr int kMaxUBits = 62;        // |U| <= 2^62

// One split choice. Inputs are w, u (0 = automatic for both) and kb (0 = largest exact block);
// T, TU, nblk are derived by ModGemmPlan::check_config(), which validates everything.
struct ModGemmConfig {
  int w = 0;        // X digit width in bits, 2 <= w (or w >= qbits, then T = 1)
  int T = 0;        // number of X digits = ceil(qbits / w)
  int u = 0;        // U digit width in bits; u >= bU+1 means U is not split
  int TU = 0;       // number of U digits = ceil((bU+1) / u)
  size_t kb = 0;    // K-block (rows of X per DGEMM), kb * 2^(u-1) * 2^(w-1) < 2^53
  size_t nblk = 0;  // number of K-blocks = ceil(d2 / kb); kb is then balanced to ceil(d2 / nblk)
};

// Picks the cheapest exact split for (d2, bU, q) under a cost model in which DGEMM flops dominate
// (~ T*TU*d2 per output), plus per-K-block conversion and per-output reduction terms. Depends on d2,
// bU, q only, so every plan with the same d2 and bU agrees. Throws std::invalid_argument on bad input.
ModGemmConfig choose_modgemm_config(size_t d2, int bU, uint64_t q);

// Validates cfg for (d2, bU, q) and returns it with every field resolved (see ModGemmConfig).
// Throws std::invalid_argument naming the violated condition (notably kb * 2^(u-1) * 2^(w-1) >= 2^53).
ModGemmConfig check_modgemm_config(size_t d2, int bU, uint64_t q, ModGemmConfig cfg);

// Throws std::invalid_argument unless q is odd and 3 <= q < 2^61.
void check_modulus(uint64_t q);

// Prepared plaintext matrix U (d1 x d2, row-major, signed int64, |U_ij| <= 2^bU), reusable across RNS
// primes and calls. apply() is const and thread-safe: concurrent calls take separate scratch buffers
// from a shared pool, so steady-state calls do not allocate.
class ModGemmPlan {
 public:
  // Throws std::invalid_argument on a null U, d1 or d2 = 0, bU outside [0, 62], or some |U_ij| > 2^bU.
  ModGemmPlan(const int64_t* U, size_t d1, size_t d2, int bU);

  // C (d1 x n, row-major, leading dimension ldc >= n) = U * X mod q, where row r of X (r < d2) is the n
  // words at Xrows[r], each a residue in [0, q). Rows are gathered through pointers, so an im2col view
  // over ciphertext rows needs no copy (rows may repeat). Uses the split choose_modgemm_config() picks.
  // C must not alias X. Threads: the DGEMMs use OpenBLAS's threads, the digit split and the reduction
  // use OpenMP (omp_get_max_threads()). Scratch is O(64 MiB): X is processed in column panels.
  // Throws std::invalid_argument on a bad q, a null pointer, ldc < n, or a residue >= q (in that last
  // case C is left partially written).
  void apply(const uint64_t* const* Xrows, size_t n, uint64_t q, uint64_t* C, size_t ldc) const;
  // Same with an explicit split (tests and tuning); cfg is validated by check_config().
  void apply(const uint64_t* const* Xrows, size_t n, uint64_t q, uint64_t* C, size_t ldc,
             const ModGemmConfig& cfg) const;
  // C = mult * U * X mod q (mult < q) with output row i at Crows[i] (n words each, rows must not overlap X):
  // the factor is folded into the recombination constants 2^(us+wt) mod q, so scaling the product (a PCMM's
  // K) costs nothing, and the rows go straight to their ciphertexts. Same checks and threading as apply().
  void apply_rows(const uint64_t* const* Xrows, size_t n, uint64_t q, uint64_t* const* Crows, uint64_t mult,
                  const ModGemmConfig& cfg) const;
  void apply_rows(const uint64_t* const* Xrows, size_t n, uint64_t q, uint64_t* const* Crows,
                  uint64_t mult = 1) const {
    apply_rows(Xrows, n, q, Crows, mult, config(q));
  }

  ModGemmConfig config(uint64_t q) const { return choose_modgemm_config(d2_, bU_, q); }
  int limb_bits(uint64_t q) const { return config(q).w; }  // the w chosen for this q
  ModGemmConfig check_config(uint64_t q, const ModGemmConfig& cfg) const {
    return check_modgemm_config(d2_, bU_, q, cfg);
  }

  size_t rows() const { return d1_; }
  size_t cols() const { return d2_; }
  int bU() const { return bU_; }

 private:
  // U split into TU balanced u-bit digits, stacked as a (TU*d1) x d2 row-major double matrix; cached.
  std::shared_ptr<const std::vector<double>> split_u(int u, int TU) const;

  size_t d1_, d2_;
  int bU_;
  std::vector<int64_t> U_;
  mutable std::mutex mu_;
  mutable std::map<int, std::shared_ptr<const std::vector<double>>> usplit_;  // keyed by u
};

// Reference: exact __int128 accumulation (U reduced mod q first), for tests. Any int64 U is accepted.
void modgemm_ref(const int64_t* U, size_t d1, size_t d2, const uint64_t* const* Xrows, size_t n,
                 uint64_t q, uint64_t* C, size_t ldc);

// Frees the pooled scratch buffers (otherwise kept so later calls do not allocate).
void modgemm_release_scratch();

}  // namespace hemlp::pcmm
