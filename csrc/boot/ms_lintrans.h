// Batched (MSRLWE, shared-a) rotations and BSGS linear transforms for batched bootstrapping
// (docs/design/bootstrap.md §3.1): a group (a; b_1..b_k) with b_j + a s_j = m_j + e_j is rotated by one ModUp of the
// shared a, then k+1 key inner products against a Galois key whose a-part alpha is shared by the k
// secrets:  alpha_t uniform,  beta_{t,j} = -alpha_t s_j + e + P Qtilde_t psi_g(s_j),
//   a' = ModDown(sum_t psi(d_t) alpha_t),   b'_j = psi(b_j) + ModDown(sum_t psi(d_t) beta_{t,j}),
// so b'_j + a' s_j = psi(m_j + e_j) + small. Plaintext products by the same diagonal act on all k+1
// polynomials. The linear transform is NativeLinearTransform's double-hoisted schedule on k+1
// polynomials: the a-dependent work (ModUps, the giant steps' ModDown of a) is paid once per group of k.
#pragma once
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "boot/lintrans.h"
#include "ckks/import.h"
#include "ckks/objects.h"
#include "ckks/shared_key_file.h"
#include "pcmm/msrlwe.h"

namespace hemlp {

// A seeded key (alpha empty) holds only the seeds of its shared a-parts: they are uniform, sampled directly in
// NTT form, so each use expands them again (one AES-CTR pass) instead of holding 1 of the k + 1 polynomials
// per digit in memory. The seeds are also what the key serialises to.
// alpha and beta are owned, or borrowed from a shared key file (ckks/key_polys.h).
struct MsSwitchKey {
  uint64_t galois = 0;
  int level = 0;                          // holds Q_level ∪ P, num_digits(level) digits
  KeyPolys alpha;                         // [t]; empty when the key is seeded
  std::vector<Seed> alpha_seeds;          // [t]
  // [t]: seed_segment_offsets of alpha_seeds[t] (a seeded key): the batched key switch draws each (limb, quarter)
  // of alpha in the job that uses it
  std::vector<std::vector<uint64_t>> alpha_offsets;
  std::vector<KeyPolys> beta;             // [j][t]
};

struct MsGaloisKeys {
  uint64_t param_hash = 0;
  uint64_t ms_key_id = 0;
  int k = 0;
  std::map<uint64_t, MsSwitchKey> keys;  // by Galois element
};

// Client side: one shared-alpha key per (Galois element, level) pair; the keys made for a level <=
// seed_max_level hold their alpha parts as seeds only (-1: none).
MsGaloisKeys ms_galois_keys(const Context& ctx, const pcmm::MultiSecretKey& msk,
                            const std::vector<std::pair<uint64_t, int>>& elements, int seed_max_level = -1);
// Bytes held in memory (expanded alpha parts counted only where held).
size_t ms_galois_key_bytes(const MsGaloisKeys& keys);
// Drop the expanded alpha parts of the keys made for a level <= seed_max_level (in place; they keep their seeds).
void seed_ms_galois_keys(const Context& ctx, MsGaloisKeys& keys, int seed_max_level);
// Validated import (the native half of BatchBootstrapKeys.from_bytes): one key per (element, level), its alpha
// parts from seeds (expanded unless the level is <= seed_max_level), its k x digits beta parts checked residue by
// residue. Bad shapes, levels, elements or residues throw Error(Serialization).
struct MsKeyRecord {
  uint64_t galois = 0;
  int level = 0;
  std::vector<Seed> alpha_seeds;                  // [t]
  std::vector<std::vector<PolyView>> beta;        // [j][t]
};
MsGaloisKeys import_ms_galois_keys(const Context& ctx, uint64_t ms_key_id, int k,
                                   const std::vector<MsKeyRecord>& records, int seed_max_level);

// A shared key file's batched Galois keys (ckks/shared_key_file.h): written as records of k parts each, opened
// borrowing the file's mapping (Error Serialization for records that do not form one key set).
void add_ms_galois_keys(SharedKeyWriter& writer, uint32_t group, const MsGaloisKeys& keys);
MsGaloisKeys ms_galois_keys_from_file(const Context& ctx, const SharedKeyFile& file, uint32_t group);

// psi_g applied to every chunk of ct (one hoisted key switch).
// The batched key switch's last step: out.a = round(u[0] / P), out.b[j] = b_add[j] + round(u[1 + j] / P) over Q_level
// (u: k + 1 accumulators over Q_level ∪ P in NTT form; b_add: k polynomials over Q_level). out's metadata is kept.
void ms_moddown_into(const Context& ctx, int level, const std::vector<Poly>& u, const std::vector<Poly>& b_add,
                     pcmm::MsCiphertext& out);

pcmm::MsCiphertext ms_apply_galois(const Context& ctx, const pcmm::MsCiphertext& ct, const MsGaloisKeys& keys,
                                   uint64_t galois);

// T applied to every chunk of ct (T's diagonals must be encoded over Q_l ∪ P), rescaled by q_l when `rescale`.
pcmm::MsCiphertext ms_linear_transform(const NativeLinearTransform& T, const pcmm::MsCiphertext& ct,
                                       const MsGaloisKeys& keys, bool rescale, LinTransCounts* counts = nullptr);

}  // namespace hemlp
