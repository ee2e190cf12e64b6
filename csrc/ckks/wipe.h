// Wiping secret material before its memory goes back to the allocator (the secret key, its NTT form, the
// polynomials derived from it during key generation, decryption noise). explicit_bzero cannot be optimised away.
#pragma once
#include <string.h>

#include <cstddef>
#include <vector>

namespace hemlp {

template <class T, class A>
void wipe(std::vector<T, A>& v) {
  if (!v.empty()) explicit_bzero(v.data(), v.size() * sizeof(T));
}

template <class T, class A>
void wipe(std::vector<std::vector<T, A>>& vs) {
  for (auto& v : vs) wipe(v);
}

}  // namespace hemlp
