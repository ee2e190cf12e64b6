#include "ckks/scratch.h"

namespace hemlp {

namespace {
// Removes free[i] (order does not matter) and returns it.
ScratchPoly take(std::vector<ScratchPoly>& free, size_t i) {
  ScratchPoly b = std::move(free[i]);
  if (i + 1 != free.size()) free[i] = std::move(free.back());
  free.pop_back();
  return b;
}
}  // namespace

ScratchPoly ScratchPool::acquire(size_t count) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    size_t best = free_.size();  // the smallest buffer that fits
    for (size_t i = 0; i < free_.size(); ++i)
      if (free_[i].capacity() >= count && (best == free_.size() || free_[i].capacity() < free_[best].capacity()))
        best = i;
    if (best != free_.size()) {
      bytes_ -= free_[best].capacity() * sizeof(uint64_t);
      return take(free_, best);
    }
  }
  ScratchPoly b;  // nothing fits: a new buffer, allocated outside the lock
  b.reserve(count);
  return b;
}

void ScratchPool::release(ScratchPoly&& buf) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  bytes_ += buf.capacity() * sizeof(uint64_t);
  free_.push_back(std::move(buf));  // never reallocates: reserved for kMaxBuffers + 1
  trim();
}

void ScratchPool::trim() noexcept {
  while (!free_.empty() && (bytes_ > max_bytes_ || free_.size() > kMaxBuffers)) {
    size_t smallest = 0;
    for (size_t i = 1; i < free_.size(); ++i)
      if (free_[i].capacity() < free_[smallest].capacity()) smallest = i;
    bytes_ -= free_[smallest].capacity() * sizeof(uint64_t);
    take(free_, smallest);  // freed here
  }
}

size_t ScratchPool::max_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return max_bytes_;
}

void ScratchPool::set_max_bytes(size_t max_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  max_bytes_ = max_bytes;
  trim();
}

size_t ScratchPool::retained_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

size_t ScratchPool::retained_buffers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return free_.size();
}

void ScratchPool::clear() {
  std::vector<ScratchPoly> gone;  // freed after the lock is dropped
  gone.reserve(kMaxBuffers + 1);
  std::lock_guard<std::mutex> lock(mu_);
  gone.swap(free_);
  bytes_ = 0;
}

}  // namespace hemlp
