// The native object behind a Python hemlp.ckks.Context: context plus its tools, built once.
#pragma once
#include "ckks/encoder.h"
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
  explicit Engine(const Params& p) : ctx(p), encoder(ctx), keygen(ctx), encryptor(ctx), eval(ctx) {}
};

}  // namespace hemlp
