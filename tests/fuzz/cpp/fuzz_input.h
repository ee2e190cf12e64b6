// Reading a libFuzzer input as a sequence of fields (the harnesses' only parser: short inputs read as zeros).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace hemlp_fuzz {

class Input {
 public:
  Input(const uint8_t* data, size_t size) : d_(data), n_(size) {}
  template <class T>
  T take() {
    T v{};
    const size_t k = n_ - pos_ < sizeof(T) ? n_ - pos_ : sizeof(T);
    std::memcpy(&v, d_ + pos_, k);
    pos_ += k;
    return v;
  }
  size_t left() const { return n_ - pos_; }
  // The rest of the input as 64-bit words (a trailing partial word is dropped).
  std::vector<uint64_t> words() {
    std::vector<uint64_t> w(left() / 8);
    if (!w.empty()) std::memcpy(w.data(), d_ + pos_, w.size() * 8);
    pos_ = n_;
    return w;
  }

 private:
  const uint8_t* d_;
  size_t n_, pos_ = 0;
};

}  // namespace hemlp_fuzz
