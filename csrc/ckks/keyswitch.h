// Hybrid (dnum) key switching: decompose into digits of alpha primes, ModUp each digit
// to Q_l ∪ P, inner product with the key, ModDown by P. The ModUp'd digits can be
// computed once and reused for many Galois elements (hoisting).
#pragma once
#include <cstddef>
#include <memory>
#include <new>
#include <utility>
#include <vector>

#include "ckks/objects.h"
#include "ckks/scratch.h"  // ScratchPoly, ScratchBuf (the buffers below come from ctx.scratch())

namespace hemlp {


struct ModUpDigits {
  int level = 0;
  std::vector<ScratchBuf> digits;  // each (level+1+K) limbs, NTT form; from the context's scratch pool
};

ModUpDigits modup(const Context& ctx, const u64* d_ntt, int level);

// The uniform a-parts of a seeded switching key (digits 0..beta-1 over key_limbs limbs of Q_key_level ∪ P, NTT form),
// expanded from their seeds into buffers of the calling thread: reused across uses (no page faults per use); the
// digits are independent AES-CTR streams, expanded in parallel. The pointers stay valid until this thread's next call.
std::vector<const u64*> expand_seeded_parts(const Context& ctx, const std::vector<Seed>& seeds, int beta,
                                            int key_limbs, int key_level);

// Throws ErrorKind::Level unless `key` can switch a ciphertext at `level` (level <= key.level);
// `op` names the operation in the message.
void check_key_level(const SwitchKey& key, int level, const char* op);

// (u0, u1) = sum_t perm(digit_t) * (b_t, a_t) over Q_l ∪ P; perm may be null. Needs
// d.level <= key.level (checked).
void key_inner_product(const Context& ctx, const ModUpDigits& d, const SwitchKey& key,
                       const std::vector<uint32_t>* perm, Poly& u0, Poly& u1);
// The same into pooled buffers (taken from ctx.scratch() unless they already have the size: reused across a
// hoisted set of rotations).
void key_inner_product(const Context& ctx, const ModUpDigits& d, const SwitchKey& key,
                       const std::vector<uint32_t>* perm, ScratchBuf& u0, ScratchBuf& u1);

// out = round(u / P) over Q_l (u has level+1+K limbs, NTT form); out gets level+1 limbs.
// With add_to (level+1 limbs), out = add_to + round(u / P); out may be the same vector as add_to.
void moddown(const Context& ctx, const Poly& u, int level, Poly& out, const u64* add_to = nullptr);
// Several ModDowns at once (one parallel loop per phase): outs[m] = add_to[m] + round(us[m] / P),
// add_to[m] may be null.
void moddown_many(const Context& ctx, int level, const std::vector<const Poly*>& us, const std::vector<Poly*>& outs,
                  const std::vector<const u64*>& add_to);
// The same with the inputs as raw limb arrays (pooled buffers). Another name: a braced list of pointers would also
// match the other overload's iterator-pair constructor.
void moddown_many_raw(const Context& ctx, int level, const std::vector<const u64*>& us, const std::vector<Poly*>& outs,
                      const std::vector<const u64*>& add_to);

// out[j] = round(u[j] / (P q_l)) over Q_{l-1} (u[j]: l+1+K limbs, NTT form; out[j] gets l limbs): the ModDown
// of a Q_l ∪ P accumulator fused with the rescale by q_l, rounded exactly in the q_l step (as a separate
// rescale would), l + 1 NTTs per polynomial cheaper than ModDown then rescale.
void moddown_rescale(const Context& ctx, int l, const u64* const u[2], Poly* out[2]);
void moddown_rescale(const Context& ctx, int l, const Poly* u[2], Poly* out[2]);

// Full key switch of one polynomial (level+1 limbs, NTT): returns (k0, k1) over Q_level.
void key_switch(const Context& ctx, const u64* d_ntt, int level, const SwitchKey& key, Poly& k0, Poly& k1);

}  // namespace hemlp
