// Homomorphic operations. Every operation checks parameters, key pair, level, scale,
// slot count and encoding of its operands and throws a typed hemlp::Error on mismatch.
//
// Naming (SEAL's): `op(a, ...)` returns a new ciphertext and leaves its operands alone; `op_inplace(a, ...)` writes
// the result into a's own buffers (no new ciphertext; temporaries come from the context's scratch pool) and makes
// every check of `op` before touching a, so that a throw leaves a unchanged. Both give the same bytes.
// Throws (ErrorKind, see ckks/errors.h) shared by most operations:
//   ContextMismatch  an operand or key was made under another parameter set;
//   KeyMismatch      operands or keys come from different secret keys;
//   Level            operands at different levels, a rescale at level 0, a key generated for a lower level;
//   Scale            added operands whose scales differ;
//   Encoding         different slot counts or encodings, or slot-only operations on coefficient encoding;
//   Parameter        a ciphertext with the wrong number of parts (e.g. not relinearised before a rotation);
//   MissingKey       no rotation key for the requested Galois element.
#pragma once
#include <cstddef>
#include <complex>
#include <vector>

#include "ckks/objects.h"

namespace hemlp {

class Evaluator {
 public:
  explicit Evaluator(const Context& ctx) : ctx_(ctx) {}

  // a + b, a - b, -a: new ciphertexts (one copy each). Throws Scale when the scales differ, and what
  // check_compatible throws (another context, level or slot count) when the operands do not match.
  Ciphertext add(const Ciphertext& a, const Ciphertext& b) const;
  Ciphertext sub(const Ciphertext& a, const Ciphertext& b) const;
  Ciphertext negate(const Ciphertext& a) const;
  // The same into a (no allocation unless b has more parts than a); a is left unchanged when they throw.
  void add_inplace(Ciphertext& a, const Ciphertext& b) const;
  void sub_inplace(Ciphertext& a, const Ciphertext& b) const;
  void negate_inplace(Ciphertext& a) const;
  // a + p, a - p (p at a's level and scale). Throws ContextMismatch, Level, Encoding, Scale.
  Ciphertext add_plain(const Ciphertext& a, const Plaintext& p) const;
  Ciphertext sub_plain(const Ciphertext& a, const Plaintext& p) const;
  // a * p slot-wise: p at a's level, any scale; the result's scale is a.scale * p.scale (rescale next to divide by
  // q_level). Throws ContextMismatch, Level (levels differ), Encoding (slot counts or encodings differ).
  Ciphertext mul_plain(const Ciphertext& a, const Plaintext& p) const;
  // The same into a (no allocation); a is left unchanged when it throws.
  void mul_plain_inplace(Ciphertext& a, const Plaintext& p) const;
  // Multiply by an integer constant (no scale change, no checks: any ciphertext of this context).
  Ciphertext mul_integer(const Ciphertext& a, int64_t k) const;
  // ct x ct: size 3 unless rlk is given (then relinearised). a, b: 2 parts each, slot encoding, same level; the
  // scale is a.scale * b.scale. Throws what check_compatible throws, Parameter (not 2 parts), Encoding
  // (coefficient encoding), and with rlk what relinearize throws.
  Ciphertext mul(const Ciphertext& a, const Ciphertext& b, const SwitchKey* rlk) const;
  // 3 parts -> 2 with the relinearisation key (2 parts: returned as is). Throws Parameter (another part count),
  // ContextMismatch, KeyMismatch (a rotation key, or another secret key's), Level (a key for lower levels).
  Ciphertext relinearize(const Ciphertext& a, const SwitchKey& rlk) const;
  // rescale(relinearize(a * b)) with the key switch's ModDown and the rescale fused into one
  // division by P q_level (saves level + 1 NTTs per polynomial).
  Ciphertext mul_relin_rescale(const Ciphertext& a, const Ciphertext& b, const SwitchKey& rlk) const;
  // The same for pairs (a[i], b[i]), in parallel over the pairs (a layer's activations: one product per
  // ciphertext; at N = 2^14 the limb-level threads inside one product leave cores idle).
  std::vector<Ciphertext> mul_relin_rescale_many(const std::vector<const Ciphertext*>& a,
                                                 const std::vector<const Ciphertext*>& b, const SwitchKey& rlk) const;
  // Divides by the top prime q_level: level - 1, scale / q_level, every part rounded exactly. Throws Level at level 0.
  Ciphertext rescale(const Ciphertext& a) const;
  // The same into a (its parts shrink by one limb, keeping their memory); a is left unchanged when it throws.
  void rescale_inplace(Ciphertext& a) const;
  // Rescale many ciphertexts, in parallel over ciphertexts (at low levels there are too few
  // limbs to keep the threads busy inside one rescale). Throws Level (before any work) when one is at level 0.
  void rescale_many(std::vector<Ciphertext>& cts) const;
  // a + c in every slot, c real (slot encoding: a constant polynomial; no encoding work). Throws Encoding for
  // coefficient encoding or a non-finite c.
  Ciphertext add_const(const Ciphertext& a, double c) const;

  // The per-polynomial kernels of mul_integer / rescale / add_const (each acts on every polynomial of a
  // ciphertext independently; add_const on c0 only), for callers that hold one polynomial part of many
  // ciphertexts (the Ray runtime splits a PCMM by part). A polynomial at `level` is level + 1 limbs of n
  // residues, limb k at p + k * stride. No checks: the callers validate levels and shapes.
  void mul_integer_poly(uint64_t* p, size_t stride, int level, int64_t k) const;
  // out (level limbs) = rescale of in (level + 1 limbs); out is in itself (same pointer and stride: in place) or
  // does not overlap it.
  void rescale_poly(const uint64_t* in, size_t in_stride, int level, uint64_t* out, size_t out_stride) const;
  // Adds round(c * scale) to every residue of p (the constant polynomial's NTT form).
  void add_const_poly(uint64_t* p, size_t stride, int level, double c, double scale) const;
  // The limbs 0..level of every part (no scale change). Throws Level unless 0 <= level <= a.level.
  Ciphertext drop_to_level(const Ciphertext& a, int level) const;
  // The automorphism X -> X^galois (a slot rotation, or conjugation) with its key switch; galois = 1 returns a copy.
  // a: relinearised (2 parts), slot encoding. Throws Parameter (not 2 parts), Encoding (coefficient encoding),
  // ContextMismatch / KeyMismatch (keys of another parameter set or secret key), MissingKey (no key for galois),
  // Level (the key was generated for a lower level than a's).
  Ciphertext apply_galois(const Ciphertext& a, uint64_t galois, const GaloisKeys& keys) const;
  // The same into a (its two parts rewritten; the temporaries come from the scratch pool); a is left unchanged
  // when it throws.
  void apply_galois_inplace(Ciphertext& a, uint64_t galois, const GaloisKeys& keys) const;
  // Several automorphisms of one ciphertext sharing one decomposition and ModUp (hoisting); the throws of
  // apply_galois.
  std::vector<Ciphertext> apply_galois_hoisted(const Ciphertext& a, const std::vector<uint64_t>& galois,
                                               const GaloisKeys& keys) const;
  // Throws Parameter unless a has 2 parts (relinearised); `op` names the operation in the message.
  static void check_size2(const Ciphertext& a, const char* op);
  // Throws Level when a is at level 0 (nothing left to rescale by).
  static void check_rescalable(const Ciphertext& a, const char* op);

  // The checks of a binary operation: ContextMismatch, KeyMismatch, Level (levels differ), Encoding (slot counts or
  // encodings differ); check_plain the same for a plaintext operand, plus Scale when scale_must_match.
  void check_compatible(const Ciphertext& a, const Ciphertext& b, const char* op) const;
  void check_plain(const Ciphertext& a, const Plaintext& p, bool scale_must_match, const char* op) const;

  // Constant fast paths (no encoding: a constant's NTT form is that constant in every position).
  // round(c * scale) mod q_k for k = 0..level, computed exactly for any magnitude (the product of two doubles is
  // an exact 106-bit integer times a power of two; rounding is half away from zero). Throws EncodingError for
  // non-finite c or a non-positive / non-finite scale.
  std::vector<u64> const_residues(double c, double scale, int level) const;
  // a * round(c * const_scale): every limb of every polynomial times that integer mod q_k; the scale becomes
  // a.scale * const_scale (the constant's value is c; const_scale only sets its precision). Any encoding.
  Ciphertext mul_const(const Ciphertext& a, double c, double const_scale) const;
  // a + c in every slot with round(c * a.scale) exact at any scale (add_const rounds the product in long
  // double, which is exact only while it stays below 2^64).
  Ciphertext add_const_exact(const Ciphertext& a, double c) const;

 private:
  // r += b (or r -= b): checks first, so a throw leaves r unchanged; b's parts beyond r's are appended.
  void accumulate(Ciphertext& r, const Ciphertext& b, bool subtract, const char* op) const;
  // r *= p, checks done by the caller.
  void mul_plain_into(Ciphertext& r, const Plaintext& p) const;
  // The checks of apply_galois; the key to switch with, or null for the identity (galois = 1).
  const SwitchKey* check_galois(const Ciphertext& a, uint64_t galois, const GaloisKeys& keys, const char* op) const;
  // (out0, out1) = the automorphism of a; out0 / out1 may be a's own parts (written last).
  void galois_into(const Ciphertext& a, uint64_t galois, const SwitchKey& key, Poly& out0, Poly& out1) const;
  const SwitchKey& find_key(const GaloisKeys& keys, uint64_t g, const Ciphertext& a) const;
  const Context& ctx_;
};

// Scales equal within 2^-32 relative: far below CKKS noise at any practical scale.
bool scales_match(double a, double b);

}  // namespace hemlp
