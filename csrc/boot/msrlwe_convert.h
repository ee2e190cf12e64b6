// Conversions between k RLWE ciphertexts and one shared-a MSRLWE ciphertext for batched bootstrapping
// (docs/design/bootstrap.md §3.2), placed at the bottom of the chain where the k² conversion keys are small:
//
//   rlwe_to_ms_sparse: k ciphertexts under s at level 0 -> one MSRLWE (a*; b*_1..b*_k) under k fresh sparse
//     secrets s'_j (Hamming weight h), fused with the dense->sparse encapsulation. Keys over {q0, p0}:
//       alpha_i uniform (i < k),  beta_{i,j} = -alpha_i s'_j + e + [i == j] p0 s,
//     a* = ModDown_p0(sum_i c1^_i alpha_i),  b*_j = c0_j + ModDown_p0(sum_i c1^_i beta_{i,j})
//     (c1^ the centred lift of c1 from q0 to {q0, p0}), so b*_j + a* s'_j = c0_j + c1_j s + small.
//   ms_mod_raise: the centred lift of (a*; b*_j) from q0 to Q_target, fused with the 1-digit switch
//     s'_j -> s_j (dense, independent): A uniform over Q_level ∪ P, B_j = -A s_j + e + P s'_j, so
//     a' = ModDown(a^ A), b'_j = b^*_j + ModDown(a^ B_j) decrypt under s_j to t_j = m_j + e + q0 I_j.
//   Back to RLWE (after the batched CoeffToSlot): pcmm::ms_to_rlwe with k switch keys s_j -> s made at
//     EvalMod's level (back_keys).
// The sparse secrets live only in the {q0, p0} keys and the 1-digit keys; they are wiped after key generation.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ckks/import.h"
#include "ckks/objects.h"
#include "pcmm/msrlwe.h"

namespace hemlp {

struct BatchConversionKeys {
  uint64_t param_hash = 0;
  uint64_t key_id = 0;     // the RLWE secret s the inputs are under
  uint64_t ms_key_id = 0;  // the multi-secret key (dense s_j) the raised MSRLWE ciphertext is under
  uint64_t sparse_id = 0;  // tag of MSRLWE ciphertexts under the sparse s'_j (level 0 only)
  int k = 0;
  int hamming_weight = 0;
  int level = 0;                  // the highest level ms_mod_raise can raise to
  int back_level = 0;             // the level of the MSRLWE -> RLWE keys
  std::vector<Poly> small_alpha;  // k polys over {q0, p0}, NTT
  std::vector<Seed> small_alpha_seeds;  // [i]: small_alpha[i] is expanded from it (uniform, sampled in NTT form)
  std::vector<Poly> small_beta;   // k*k polys, [i * k + j]
  Poly big_a;                     // over Q_level ∪ P, NTT
  Seed big_a_seed{};              // big_a is expanded from it
  std::vector<Poly> big_b;        // k polys over Q_level ∪ P
  std::vector<SwitchKey> back;    // k keys s_j -> s at back_level (seeded ones expand their a-halves on use)
};

// Client side: keys for k inputs under sk, raising under msk (k dense secrets) to `level` (-1: the top),
// converting back at `back_level`. Refuses (Insecure) log2(q0 p0) > 121 on 128-bit parameter sets.
BatchConversionKeys batch_conversion_keys(const Context& ctx, const SecretKey& sk, const pcmm::MultiSecretKey& msk,
                                          int hamming_weight, int level, int back_level);

pcmm::MsCiphertext rlwe_to_ms_sparse(const Context& ctx, const std::vector<const Ciphertext*>& cts,
                                     const BatchConversionKeys& keys);
pcmm::MsCiphertext ms_mod_raise(const Context& ctx, const pcmm::MsCiphertext& ct, const BatchConversionKeys& keys,
                                int target);
std::vector<Ciphertext> ms_to_rlwe_back(const Context& ctx, const pcmm::MsCiphertext& ct,
                                        const BatchConversionKeys& keys);

// Bytes held in memory (a seeded back key's a-halves are not held).
size_t batch_conversion_key_bytes(const BatchConversionKeys& keys);

// Validated import (the native half of BatchBootstrapKeys.from_bytes): the uniform parts from their seeds, every
// other polynomial checked residue by residue (small_beta: k*k arrays of shape (2, N) over {q0, p0}; big_b: k over
// Q_level ∪ P), the back keys already imported (import_switch_key). Throws Error(Serialization) on bad data.
struct BatchConversionRecord {
  uint64_t key_id = 0, ms_key_id = 0, sparse_id = 0;
  int k = 0, hamming_weight = 0, level = 0, back_level = 0;
  std::vector<Seed> small_alpha_seeds;
  std::vector<PolyView> small_beta;
  Seed big_a_seed{};
  std::vector<PolyView> big_b;
};
BatchConversionKeys import_batch_conversion_keys(const Context& ctx, const BatchConversionRecord& r,
                                                 std::vector<SwitchKey> back);

}  // namespace hemlp
