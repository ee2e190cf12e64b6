// MSRLWE ("shared-a") matrices (docs/design/pcmm-and-planning.md §2.3): the k chunks of a row share one uniform a-part,
// each under its own secret s_j:  b_j = -a s_j + e_j + m_j.  Stacked rows satisfy
// A [Toep(s_0) | ... | Toep(s_{k-1})] + B = M + E, so a PCMM costs one GEMM on the a-parts
// (N columns) plus one on the b-parts (kN columns): about one plaintext GEMM for large k, and
// exactly one when U*A is precomputed (a-parts expanded from seeds the server knows ahead).
#pragma once
#include <vector>

#include "ckks/encryptor.h"
#include "ckks/objects.h"
#include "pcmm/modgemm.h"

namespace hemlp::pcmm {

struct MultiSecretKey {
  uint64_t param_hash = 0;
  uint64_t key_id = 0;
  std::vector<std::vector<int8_t>> coeffs;  // k ternary secrets
  std::vector<Poly> ntt_qp;                 // each over Q_L ∪ P, NTT form

  MultiSecretKey() = default;
  MultiSecretKey(const MultiSecretKey&) = default;
  MultiSecretKey(MultiSecretKey&&) = default;
  MultiSecretKey& operator=(const MultiSecretKey&) = delete;  // nothing assigns keys; a copy would skip the wipe
  MultiSecretKey& operator=(MultiSecretKey&&) = delete;
  ~MultiSecretKey() { wipe(coeffs); wipe(ntt_qp); }
};

struct MsCiphertext {
  uint64_t param_hash = 0;
  uint64_t key_id = 0;  // the multi-secret key's id
  int level = 0;
  double scale = 1;
  int slots = 0;
  Encoding encoding = Encoding::Slot;
  Poly a;               // (level+1) limbs, NTT
  std::vector<Poly> b;  // k polynomials
  bool seeded = false;
  Seed seed{};
};

MultiSecretKey multi_secret_key(const Context& ctx, int k);
// Row seed for a session: the a-part of row i is expanded from AES-CTR(session_seed, i), so a
// server given the session seed ahead of the data can precompute U*A.
Seed row_seed(const Seed& session_seed, uint64_t row);
MsCiphertext ms_encrypt(const Context& ctx, const std::vector<Plaintext>& pts, const MultiSecretKey& key,
                        const Seed& a_seed);
std::vector<Plaintext> ms_decrypt(const Context& ctx, const MsCiphertext& ct, const MultiSecretKey& key,
                                  const DecryptNoise& noise);
// The a-part a row seed expands to (what the server precomputes from).
Poly ms_a_from_seed(const Context& ctx, const Seed& seed, int level);

// out rows r: a' = K sum_i U_ri a_i, b'_j = K sum_i U_ri b_ij. With `precomputed_a` (d1 polys,
// = K U A at this level) the a-part GEMM is skipped.
std::vector<MsCiphertext> pcmm_msrlwe(const Context& ctx, const ModGemmPlan& plan,
                                      const std::vector<const MsCiphertext*>& rows, int64_t K, double factor,
                                      const std::vector<Poly>* precomputed_a);
// K U A for a-parts given as polys (the offline half of the precomputed path).
std::vector<Poly> pcmm_a_parts(const Context& ctx, const ModGemmPlan& plan, const std::vector<const Poly*>& a,
                               int level, int64_t K);

// Keys switching s_j -> s (one per chunk), and the conversion of one MSRLWE row into k RLWE
// ciphertexts under s: one ModUp of the shared a, k inner products and ModDowns.
std::vector<SwitchKey> ms_conversion_keys(const Context& ctx, const SecretKey& sk, const MultiSecretKey& key);
std::vector<Ciphertext> ms_to_rlwe(const Context& ctx, const MsCiphertext& ct, const std::vector<SwitchKey>& keys);

}  // namespace hemlp::pcmm

namespace hemlp::pcmm {
// Per-polynomial rescale (level - 1, scale / q_level) and plaintext addition to chunk j.
MsCiphertext ms_rescale(const Context& ctx, const MsCiphertext& ct);
MsCiphertext ms_add_plain(const Context& ctx, const MsCiphertext& ct, size_t chunk, const Plaintext& pt);
}  // namespace hemlp::pcmm

namespace hemlp::pcmm {
// RLWE -> MSRLWE (docs/design/pcmm-and-planning.md §2.7 [R]): k RLWE ciphertexts under s become one MSRLWE row under
// (s_0..s_{k-1}) whose chunks share a*. Key for input i, digit l, output secret j:
//   beta_{i,l,j} = -alpha_{i,l} s_j + e + [i == j] P Qtilde_l s,   alpha_{i,l} shared over j,
// then a* = ModDown(sum_{i,l} c^_{i,l} alpha_{i,l}), b*_j = c0_j + ModDown(sum_{i,l} c^_{i,l} beta_{i,l,j})
// with c^_{i,l} = ModUp(digit_l(c1_i)). Keys: k digits-sets of alpha and k^2 of beta.
struct MsConversionKey {
  uint64_t param_hash = 0;
  uint64_t key_id = 0;     // the RLWE secret's id
  uint64_t ms_key_id = 0;  // the multi-secret key's id
  int k = 0, digits = 0;
  std::vector<Poly> alpha;  // [i * digits + l], over Q_L ∪ P
  std::vector<Poly> beta;   // [(i * digits + l) * k + j]
};
MsConversionKey rlwe_to_ms_key(const Context& ctx, const SecretKey& sk, const MultiSecretKey& msk);
MsCiphertext rlwe_to_ms(const Context& ctx, const std::vector<const Ciphertext*>& cts, const MsConversionKey& key);
}  // namespace hemlp::pcmm
