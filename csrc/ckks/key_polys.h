// The digit polynomials of an evaluation key, owned or borrowed. Key generation and import own theirs; a key opened
// from a node-local key file (ckks/shared_keys.h) borrows read-only pages of a memory mapping that every process on
// the machine shares, kept alive by `keep`. Readers go through data(t) / words(t) either way, so both kinds run the
// same code; every writer goes through owned(), which refuses a borrowed key: its pages belong to other processes
// too (and are mapped PROT_READ, so a write through a cast pointer would fault instead of corrupting them).
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ckks/context.h"
#include "ckks/errors.h"

namespace hemlp {

class KeyPolys {
 public:
  KeyPolys() = default;
  explicit KeyPolys(std::vector<Poly> own) : own_(std::move(own)) {}
  // Borrowed: polynomial t is ptrs[t][0, words[t]) inside memory that `keep` keeps alive.
  KeyPolys(std::shared_ptr<const void> keep, std::vector<const u64*> ptrs, std::vector<size_t> words)
      : ptrs_(std::move(ptrs)), words_(std::move(words)), keep_(std::move(keep)) {
    if (!keep_ || ptrs_.size() != words_.size()) fail(ErrorKind::Parameter, "KeyPolys: a borrowed set needs its owner");
  }

  bool mapped() const { return keep_ != nullptr; }
  size_t size() const { return mapped() ? ptrs_.size() : own_.size(); }
  bool empty() const { return size() == 0; }
  const u64* data(size_t t) const { return mapped() ? ptrs_[t] : own_[t].data(); }
  size_t words(size_t t) const { return mapped() ? words_[t] : own_[t].size(); }
  size_t total_words() const {
    size_t s = 0;
    for (size_t t = 0; t < size(); ++t) s += words(t);
    return s;
  }
  // What keeps borrowed polynomials alive (null for owned ones).
  const std::shared_ptr<const void>& owner() const { return keep_; }

  // ErrorKind::ReadOnly for a borrowed set; `op` names the writer.
  void check_owned(const char* op) const {
    if (mapped())
      fail(ErrorKind::ReadOnly, std::string(op) + ": this key is memory-mapped read-only from a shared key file "
                                "(other processes use the same pages); change a key loaded with its owning loader "
                                "(EvalKeys.load / from_bytes) instead");
  }
  // The owned polynomials, to change or extend (check_owned first).
  std::vector<Poly>& owned(const char* op) {
    check_owned(op);
    return own_;
  }

 private:
  std::vector<Poly> own_;
  std::vector<const u64*> ptrs_;
  std::vector<size_t> words_;
  std::shared_ptr<const void> keep_;
};

}  // namespace hemlp
