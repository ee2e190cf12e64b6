#include "ckks/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "ckks/errors.h"

namespace hemlp {

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path, const char* what) {
  auto fail_os = [&](const char* step) {
    fail(ErrorKind::Serialization, std::string("cannot ") + step + " the " + what + " " + path + ": " +
                                       std::strerror(errno));
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_os("open");
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    fail_os("stat");
  }
  const size_t size = (size_t)st.st_size;
  void* base = nullptr;
  if (size > 0) {
    base = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      errno = err;
      fail_os("map");
    }
  }
  ::close(fd);  // the mapping keeps the file
  return std::shared_ptr<const MappedFile>(new MappedFile(static_cast<const uint8_t*>(base), size, path));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace hemlp
