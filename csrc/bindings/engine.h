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

// The decryption noise the bindings pass to the core: mode none (0), standard (1) or flood (2); standard with
// sigma = 0 uses the fresh-encryption bound, so the native entry points never decrypt exactly by default. The mode
// is checked: a Python integer converts to any value of the enum.
inline DecryptNoise decrypt_noise(const Engine& e, DecryptNoise::Mode mode, uint64_t sigma) {
  if ((int)mode < 0 || (int)mode > 2)
    fail(ErrorKind::Parameter, "decryption noise mode must be 0 (none), 1 (standard) or 2 (flood)");
  DecryptNoise d;
  d.mode = mode;
  d.sigma = sigma;
  if (d.mode == DecryptNoise::Mode::Standard && sigma == 0) d.sigma = fresh_noise_bound(e.ctx.params());
  if (d.mode == DecryptNoise::Mode::Flood && sigma == 0)
    fail(ErrorKind::Parameter, "flood decryption needs sigma from a trusted noise bound (the flood "
                              "specification's bound)");
  return d;
}

}  // namespace hemlp
