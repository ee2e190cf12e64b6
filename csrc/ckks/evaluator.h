// Homomorphic operations. Every operation checks parameters, key pair, level, scale,
// slot count and encoding of its operands and throws a typed hemlp::Error on mismatch.
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
  Ciphertext add_plain(const Ciphertext& a, const Plaintext& p) const;
  Ciphertext sub_plain(const Ciphertext& a, const Plaintext& p) const;
  Ciphertext mul_plain(const Ciphertext& a, const Plaintext& p) const;
  // Multiply by an integer constant (no scale change).
  Ciphertext mul_integer(const Ciphertext& a, int64_t k) const;
  // ct x ct: size 3 unless rlk is given.
  Ciphertext mul(const Ciphertext& a, const Ciphertext& b, const SwitchKey* rlk) const;
  Ciphertext relinearize(const Ciphertext& a, const SwitchKey& rlk) const;
  // rescale(relinearize(a * b)) with the key switch's ModDown and the rescale fused into one
  // division by P q_level (saves level + 1 NTTs per polynomial).
  Ciphertext mul_relin_rescale(const Ciphertext& a, const Ciphertext& b, const SwitchKey& rlk) const;
  // The same for pairs (a[i], b[i]), in parallel over the pairs (a layer's activations: one product per
  // ciphertext; at N = 2^14 the limb-level threads inside one product leave cores idle).
  std::vector<Ciphertext> mul_relin_rescale_many(const std::vector<const Ciphertext*>& a,
                                                 const std::vector<const Ciphertext*>& b, const SwitchKey& rlk) const;
  Ciphertext rescale(const Ciphertext& a) const;
  // Rescale many ciphertexts, in parallel over ciphertexts (at low levels there are too few
  // limbs to keep the threads busy inside one rescale).
  void rescale_many(std::vector<Ciphertext>& cts) const;
  // a + c in every slot, c real (slot encoding: a constant polynomial; no encoding work).
  Ciphertext add_const(const Ciphertext& a, double c) const;

  // The per-polynomial kernels of mul_integer / rescale / add_const (each acts on every polynomial of a
  // ciphertext independently; add_const on c0 only), for callers that hold one polynomial part of many
  // ciphertexts (the Ray runtime splits a PCMM by part). A polynomial at `level` is level + 1 limbs of n
  // residues, limb k at p + k * stride. No checks: the callers validate levels and shapes.
  void mul_integer_poly(uint64_t* p, size_t stride, int level, int64_t k) const;
  // out (level limbs) = rescale of in (level + 1 limbs); in and out must not overlap.
  void rescale_poly(const uint64_t* in, size_t in_stride, int level, uint64_t* out, size_t out_stride) const;
  // Adds round(c * scale) to every residue of p (the constant polynomial's NTT form).
  void add_const_poly(uint64_t* p, size_t stride, int level, double c, double scale) const;
  Ciphertext drop_to_level(const Ciphertext& a, int level) const;
  Ciphertext apply_galois(const Ciphertext& a, uint64_t galois, const GaloisKeys& keys) const;
  std::vector<Ciphertext> apply_galois_hoisted(const Ciphertext& a, const std::vector<uint64_t>& galois,
                                               const GaloisKeys& keys) const;
  // Ciphertext of size 2 in the NTT domain; valid for any encoding.
  static void check_size2(const Ciphertext& a, const char* op);

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
  const SwitchKey& find_key(const GaloisKeys& keys, uint64_t g, const Ciphertext& a) const;
  const Context& ctx_;
};

// Scales equal within 2^-32 relative: far below CKKS noise at any practical scale.
bool scales_match(double a, double b);

}  // namespace hemlp
