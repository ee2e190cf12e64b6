// The native object behind a Python hemlp.fhe.ckks.Context: context plus its tools, built once.
#pragma once
#include "ckks/encoder.h"
#include "ckks/errors.h"
#include "ckks/encryptor.h"
#include "ckks/evaluator.h"
#include "ckks/keygen.h"

namespace hemlp {

struct Engine {
  Context ctx;
  Encoder encoder;
  KeyGenerator keygen;
  Encryptor encryptor;
  Evaluator eval;
  Engine(const Params& p, SecurityPolicy policy)
      : ctx(p, policy), encoder(ctx), keygen(ctx), encryptor(ctx), eval(ctx) {}
};

// The decryption noise the bindings pass to the core: mode 0 none, 1 standard, 2 flood; standard with
// sigma = 0 uses the fresh-encryption bound, so the native entry points never decrypt exactly by default.
inline DecryptNoise decrypt_noise(const Engine& e, int mode, uint64_t sigma) {
  if (mode < 0 || mode > 2) fail(ErrorKind::Parameter, "decryption noise mode must be 0 (none), 1 (standard) or 2 (flood)");
  DecryptNoise d;
  d.mode = (DecryptNoise::Mode)mode;
  d.sigma = sigma;
  if (d.mode == DecryptNoise::Mode::Standard && sigma == 0) d.sigma = fresh_noise_bound(e.ctx.params());
  if (d.mode == DecryptNoise::Mode::Flood && sigma == 0)
    fail(ErrorKind::Parameter, "flood decryption needs sigma from a trusted noise bound (FloodSpec.bound_log2)");
  return d;
}

}  // namespace hemlp
