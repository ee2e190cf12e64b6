// Native BSGS linear transform on CKKS slots (the CoeffToSlot / SlotToCoeff levels of bootstrapping):
//
//   y = sum_g rot_{r_g}( sum_b diag'_{g,b} ⊙ rot_b(x) ),   diag'_{g,b} = rot_{-r_g}(diag_{r_g + b})
//
// with one digit decomposition + ModUp of c1 shared by every baby step (hoisting). Two schedules:
// - Single hoisting: every baby step is a full rotation (ModDown to Q_l), diagonals multiply over Q_l,
//   every giant step is a full rotation, then one rescale.
// - Double hoisting (Bossuat et al., EC'21): the baby steps stay in Q_l ∪ P as P·rot_b(x) (no ModDown),
//   the diagonals are encoded over Q_l ∪ P, each giant group is accumulated in Q_l ∪ P; a giant step
//   brings only c1 down (one ModDown), key-switches it lazily and permutes c0 in Q_l ∪ P; the sum of
//   the groups takes a single ModDown, fused with the rescale (one division by P·q_l).
// Both give the same plaintext up to key-switching noise. Diagonals encoded over Q_l ∪ P serve both
// schedules (the single one reads their first l + 1 limbs); a Q_l-only encoding serves the single one.
#pragma once
#include <complex>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "boot/bsgs_groups.h"
#include "ckks/encoder.h"
#include "ckks/objects.h"

namespace hemlp {

enum class Hoisting : int { Single = 1, Double = 2 };

// What one evaluation did (tests check the hoisting through these).
struct LinTransCounts {
  int modups = 0;          // digit decompositions + ModUp of one polynomial
  int inner_products = 0;  // key inner products (one per rotation)
  int moddowns = 0;        // polynomials brought from Q_l ∪ P to Q_l (fused rescales included)
  int pmults = 0;          // diagonal × ciphertext products
  int rescales = 0;        // divisions by q_l (fused or not)
};

class NativeLinearTransform {
 public:
  // giant[i]: the rotation r_i (slots) of group i (0: not rotated); baby[i]: its baby rotations in
  // [0, n1); diags: one vector of `slots` complex values per (i, j), in that order, already
  // pre-rotated by -r_i. Encoded at `level` with scale `scale` (q_level normally), over Q_level ∪ P
  // when `qp` (needed by double hoisting), else over Q_level only (single hoisting: |P| limbs less each).
  NativeLinearTransform(const Context& ctx, const Encoder& enc, int slots, int level, double scale,
                        std::vector<int64_t> giant, std::vector<std::vector<int64_t>> baby,
                        const std::vector<std::vector<cplx>>& diags, bool qp = true);

  // The same transform from diagonals already encoded (NTT form, level + 1 (+ |P| when qp) limbs each, in
  // group order), e.g. exported by layout() elsewhere; every residue is checked against its modulus.
  NativeLinearTransform(const Context& ctx, int slots, int level, double scale, std::vector<int64_t> giant,
                        std::vector<std::vector<int64_t>> baby, std::vector<Poly> encoded, bool qp, bool is_complex);

  // The BSGS structure (giant step of each group, the baby step of each of its diagonals, 0 = unrotated) and
  // the encoded diagonals in group order: what another backend needs to run this transform.
  struct Layout {
    std::vector<int64_t> giant;
    std::vector<std::vector<int64_t>> baby;
    const std::vector<Poly>* diagonals = nullptr;
    bool is_complex = false;
  };
  Layout layout() const;

  // y = T·ct, rescaled by q_level when `rescale` (output level - 1, scale ct.scale·scale/q_level).
  Ciphertext apply(const Ciphertext& ct, const GaloisKeys& keys, Hoisting h, bool rescale,
                   LinTransCounts* counts = nullptr) const;

  int level() const { return level_; }
  bool qp() const { return qp_; }
  int slots() const { return slots_; }
  double scale() const { return scale_; }
  size_t nbytes() const;                  // encoded diagonals
  std::vector<int64_t> steps() const;     // rotation steps used (baby and giant, nonzero), sorted

 private:
  friend struct MsLinearTransformAccess;  // boot/ms_lintrans: the batched (MSRLWE) evaluation reads the layout
  using Group = BsgsGroup;
  const Context& ctx_;
  int slots_, level_;
  double scale_;
  bool qp_ = true;
  bool is_complex_ = false;
  std::vector<int64_t> baby_steps_;  // distinct nonzero baby rotations
  std::vector<Group> groups_;
  std::vector<Poly> diag_;  // (level + 1 (+ |P| when qp_)) limbs each, NTT form

  const SwitchKey& key_for(const GaloisKeys& keys, int64_t step, const Ciphertext& ct) const;
  // Throws the typed errors for a bad slot count, level, scale or group structure, or a diagonal count off it.
  static void check_structure(const Context& ctx, int slots, int level, double scale, const std::vector<int64_t>& giant,
                              const std::vector<std::vector<int64_t>>& baby, size_t diagonals);
  Ciphertext apply_single(const Ciphertext& ct, const GaloisKeys& keys, bool rescale, LinTransCounts& c) const;
  Ciphertext apply_double(const Ciphertext& ct, const GaloisKeys& keys, bool rescale, LinTransCounts& c) const;
};

}  // namespace hemlp
