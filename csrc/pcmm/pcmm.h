// Plaintext x ciphertext matrix product reduced to modular GEMMs (Bae-Cheon-Hanrot-Park-Stehle).
// Stacking RLWE ciphertexts row-wise gives A*Toep(s) + B = M + E, so for an integer matrix U,
// (U A, U B) encrypts U M: one exact GEMM per RNS limb and per part, no rotations, no keys.
// k = 1 (RLWE) commutes with the NTT and with the slot encoding, so rows stay in NTT form.
#pragma once
#include <vector>

#include "ckks/objects.h"
#include "pcmm/modgemm.h"

namespace hemlp::pcmm {

// inputs: d2 x c ciphertexts, row-major (row i, chunk j at i*c + j); nullptr is a zero row
// (convolution padding). Output: d1 x c ciphertexts with
//   out[r][j] = K * sum_i U[r][i] * in[i][j]     (every polynomial, every limb, NTT form)
// and scale = in.scale * out_scale_factor (the caller's Delta_U * K). U is the plan's matrix.
// With `rescale`, every output is rescaled (in parallel over ciphertexts); a non-empty `bias`
// (d1 values, slot encoding only) is then added to output row r as a constant.
std::vector<Ciphertext> pcmm_rlwe(const Context& ctx, const ModGemmPlan& plan,
                                  const std::vector<const Ciphertext*>& inputs, size_t chunks, int64_t K,
                                  double out_scale_factor, bool rescale = false,
                                  const std::vector<double>& bias = {});

// One input row of pcmm_rlwe_rows: its two polynomials' memory, limb k of part p at part[p] + k * limb_stride[p]
// (n contiguous residues each; e.g. read-only views of an object store). Both null: a zero row (padding).
struct InputRow {
  const uint64_t* part[2] = {nullptr, nullptr};
  size_t limb_stride[2] = {0, 0};
};

// pcmm_rlwe over rows given by their memory instead of Ciphertext objects: the same arithmetic and threading,
// hence the same bits. `meta` holds the rows' shared metadata (level, scale, slots, encoding, key, parameter
// set; its polynomials are not read); every row must hold meta.level + 1 limbs per part, each residue < q
// (a larger one is refused by the GEMM, ModGemmPlan::apply).
std::vector<Ciphertext> pcmm_rlwe_rows(const Context& ctx, const ModGemmPlan& plan,
                                       const std::vector<InputRow>& inputs, const Ciphertext& meta, size_t chunks,
                                       int64_t K, double out_scale_factor, bool rescale = false,
                                       const std::vector<double>& bias = {});

// The same epilogue on one polynomial part of `count` ciphertexts stored limb-major: limb k of polynomial i
// at in + (k * count + i) * n, level + 1 limbs. Multiplies by K in place, rescales into `out` (level limbs,
// same layout) and, for part 0 with a non-empty `bias` (one value per polynomial), adds bias[i] at the
// rescaled scale (scale / q_level). Bit-identical to pcmm_rlwe's epilogue, because x K, rescale and the
// constant add act on each polynomial alone (the constant on c0 only): a PCMM can be split by part.
void pcmm_epilogue_part(const Context& ctx, uint64_t* in, size_t count, int level, int64_t K, int part,
                        double scale, const std::vector<double>& bias, uint64_t* out);

}  // namespace hemlp::pcmm
