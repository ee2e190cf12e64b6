// Scratch buffers for the key-switching path (ModUp digits, inner-product accumulators, the ModDown and rescale
// temporaries, a rotation's permuted parts). A ScratchPool keeps the buffers that operations release and hands them
// to the next operation, so that a warm rotation or relinearisation neither allocates nor zero-fills its
// temporaries (their pages stay mapped and are often still in cache).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

namespace hemlp {

// std::allocator that leaves new elements uninitialised (resize does not zero-fill): for
// scratch buffers whose every entry is written before it is read.
template <class T>
struct UninitAllocator : std::allocator<T> {
  template <class U>
  struct rebind { using other = UninitAllocator<U>; };
  UninitAllocator() = default;
  template <class U>
  UninitAllocator(const UninitAllocator<U>&) {}
  template <class U>
  void construct(U* p) noexcept { ::new (static_cast<void*>(p)) U; }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) { ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...); }
};
using ScratchPoly = std::vector<uint64_t, UninitAllocator<uint64_t>>;

// A thread-safe free list of scratch buffers (one per Context: its limb sizes). It retains at most max_bytes of
// released buffers and at most kMaxBuffers of them; beyond that the smallest are freed (a large buffer serves any
// request). Must outlive every ScratchBuf taken from it.
class ScratchPool {
 public:
  static constexpr size_t kDefaultMaxBytes = size_t(256) << 20;  // the heap's own trim threshold (module.cpp)
  static constexpr size_t kMaxBuffers = 64;
  explicit ScratchPool(size_t max_bytes = kDefaultMaxBytes) : max_bytes_(max_bytes) {
    free_.reserve(kMaxBuffers + 1);  // release never grows the list (it is noexcept)
  }
  ScratchPool(const ScratchPool&) = delete;
  ScratchPool& operator=(const ScratchPool&) = delete;

  // A buffer of capacity >= count (the smallest pooled one that fits, else a new one); contents unspecified.
  ScratchPoly acquire(size_t count);
  // Returns a buffer to the pool (or frees it when the pool is full).
  void release(ScratchPoly&& buf) noexcept;
  size_t retained_bytes() const;
  size_t retained_buffers() const;
  size_t max_bytes() const;
  // A new bound (0: keep nothing, every buffer freed on release); frees what no longer fits.
  void set_max_bytes(size_t max_bytes);
  void clear();

 private:
  void trim() noexcept;  // frees the smallest buffers until the bounds hold (mu_ held)
  mutable std::mutex mu_;
  std::vector<ScratchPoly> free_;
  size_t bytes_ = 0;
  size_t max_bytes_;
};

// `count` uninitialised uint64 taken from a pool and given back when destroyed (move-only).
class ScratchBuf {
 public:
  ScratchBuf() = default;
  ScratchBuf(ScratchPool& pool, size_t count) : pool_(&pool), buf_(pool.acquire(count)) { buf_.resize(count); }
  ScratchBuf(ScratchBuf&& o) noexcept : pool_(o.pool_), buf_(std::move(o.buf_)) { o.pool_ = nullptr; }
  ScratchBuf& operator=(ScratchBuf&& o) noexcept {
    if (this != &o) {
      give_back();
      pool_ = o.pool_;
      buf_ = std::move(o.buf_);
      o.pool_ = nullptr;
    }
    return *this;
  }
  ScratchBuf(const ScratchBuf&) = delete;
  ScratchBuf& operator=(const ScratchBuf&) = delete;
  ~ScratchBuf() { give_back(); }

  uint64_t* data() { return buf_.data(); }
  const uint64_t* data() const { return buf_.data(); }
  size_t size() const { return buf_.size(); }
  uint64_t* begin() { return buf_.data(); }
  uint64_t* end() { return buf_.data() + buf_.size(); }
  const uint64_t* begin() const { return buf_.data(); }
  const uint64_t* end() const { return buf_.data() + buf_.size(); }
  uint64_t& operator[](size_t i) { return buf_[i]; }
  const uint64_t& operator[](size_t i) const { return buf_[i]; }

 private:
  void give_back() noexcept {
    if (pool_ != nullptr && buf_.capacity() != 0) pool_->release(std::move(buf_));
    buf_ = ScratchPoly();
    pool_ = nullptr;
  }
  ScratchPool* pool_ = nullptr;
  ScratchPoly buf_;
};

}  // namespace hemlp
