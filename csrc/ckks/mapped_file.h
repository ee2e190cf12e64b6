// A whole file mapped read-only (PROT_READ, MAP_SHARED): its pages are the page cache's, so every process that maps
// the same file shares one copy in memory. The mapping lives as long as the last shared_ptr to it, also after the
// file is unlinked or replaced by a rename (the old inode stays until then). A file truncated in place under a live
// mapping would fault its readers (SIGBUS): files meant for mapping are written once and replaced only by rename.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace hemlp {

class MappedFile {
 public:
  // Error(Serialization) naming `what` and the path when the file cannot be opened or mapped.
  static std::shared_ptr<const MappedFile> open(const std::string& path, const char* what);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }  // null for an empty file
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(const uint8_t* data, size_t size, std::string path) : data_(data), size_(size), path_(std::move(path)) {}
  const uint8_t* data_;
  size_t size_;
  std::string path_;
};

}  // namespace hemlp
