// Typed errors; the bindings translate each kind into the matching hemlp.errors class.
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>

namespace hemlp {

enum class ErrorKind {
  Parameter, Insecure, ContextMismatch, KeyMismatch, MissingKey, Level, Scale, Encoding, Shape, Serialization,
  ReadOnly  // a write into a key borrowed read-only from a shared key file
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& msg) : std::runtime_error(msg), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

[[noreturn]] inline void fail(ErrorKind kind, const std::string& msg) { throw Error(kind, msg); }

}  // namespace hemlp
