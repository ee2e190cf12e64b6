// MLWE format (docs/design/pcmm-and-planning.md §2.2) for matrices with √N <= d3 < N columns: one
// coefficient-encoded RLWE ciphertext holds k = N/d3 rows, interleaved (row k*i + u, column t -> coefficient t*k + u).
// Decimating by Y = X^k (ModDecomp, free) turns it into k rank-k MLWE ciphertexts over R_{d3};
// a PCMM is then one GEMM on the a-parts (N columns) and one on the b-parts (d3 columns), and
// ModPack re-interleaves k output rows into one RLWE ciphertext, key-switching its k a-parts
// from s_v(X^k) to s (k ModPack keys; accumulated over Q P, one ModDown).
#pragma once
#include <vector>

#include "ckks/objects.h"
#include "pcmm/modgemm.h"

namespace hemlp::pcmm {

// Keys s_v(X^k) -> s for v < k, where s_v[t] = s[t*k + v]; usable at ciphertext levels <= level (-1: all).
std::vector<SwitchKey> modpack_keys(const Context& ctx, const SecretKey& sk, int k, int level = -1);

// inputs: d2/k coefficient-encoded RLWE ciphertexts (level l); plan: d1 x d2 with k | d1.
// Returns d1/k RLWE ciphertexts (coefficient encoding, interleaved) encrypting K*U~*M at
// scale in.scale * factor (not rescaled).
std::vector<Ciphertext> pcmm_mlwe(const Context& ctx, const ModGemmPlan& plan,
                                  const std::vector<const Ciphertext*>& inputs, int k, int64_t K, double factor,
                                  const std::vector<SwitchKey>& keys);

}  // namespace hemlp::pcmm
