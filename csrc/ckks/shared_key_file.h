// Node-local shared key files: a key set written once in the form the key switch reads (each digit polynomial's
// limbs as one contiguous run of u64, page-aligned) and mapped read-only by every process on the machine, so the
// page cache holds the machine's one copy of keys that would otherwise be decoded into private memory per process.
//
// Layout (little-endian):
//   FileHeader (256 B) | records (num_records x RecordEntry) | aux (seeds, segment offsets) | meta (the writer's
//   bytes, e.g. JSON) | zeros to a page boundary | data: each record's polynomials from a page boundary
// header_hash (SHA-256 of everything before the data, the field itself zeroed) is checked on every open together
// with the file size, the parameter set and the key id, before any pointer into the data is formed; content_hash
// (SHA-256 of the data) is checked by verify() only: see SharedKeyFile::open for why.
//
// A record is a key with `parts` b-polynomials per digit sharing one a-part (a switching key has 1 part; a batched
// Galois key k, boot/ms_lintrans.h), the a-part held or as seeds (with their segment offsets: a seeded key's
// a-part is drawn inside the key switch's jobs, and the offsets cost one AES pass over the key to recompute), or a
// plain array of rows x N residues (smaller key parts that their loaders import, copying).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ckks/context.h"
#include "ckks/key_polys.h"
#include "ckks/mapped_file.h"
#include "ckks/objects.h"

namespace hemlp {

constexpr uint32_t kSharedKeyFileVersion = 1;

// A record's key, borrowed from the file: b[part][digit], a[digit] (empty when seeded).
struct SharedKeyRecord {
  uint64_t key_id = 0;
  uint64_t galois = 0;
  int level = 0;
  std::vector<KeyPolys> b;
  KeyPolys a;
  std::vector<Seed> a_seeds;
  std::vector<std::vector<uint64_t>> a_offsets;
};

// Collects the keys of one file and writes it. The keys and arrays are referenced, not copied: they must outlive
// write().
class SharedKeyWriter {
 public:
  SharedKeyWriter(const Context& ctx, uint64_t key_id) : ctx_(ctx), key_id_(key_id) {}
  // A switching key of this key pair (relinearisation, rotation, ModPack, conversion).
  void add_switch_key(uint32_t group, const SwitchKey& key);
  // A key of `b.size()` parts over one a-part (a batched Galois key: its multi-secret key's id).
  void add_multi_key(uint32_t group, uint64_t key_id, uint64_t galois, int level, const std::vector<KeyPolys>& b,
                     const KeyPolys& a, const std::vector<Seed>& a_seeds,
                     const std::vector<std::vector<uint64_t>>& a_offsets);
  // rows x N residues at data.
  void add_array(uint32_t group, const u64* data, size_t rows);
  // Writes the file atomically (a temporary file in the same folder, fsync, rename), read-only from its creation
  // (0400: never rewritten in place under the processes mapping it). Throws std::system_error on an OS error.
  void write(const std::string& path, const std::string& meta) const;

 private:
  struct Entry {
    uint32_t kind = 0, group = 0;
    uint64_t key_id = 0, galois = 0;
    int level = -1;
    size_t rows = 0;
    std::vector<const KeyPolys*> b;
    const KeyPolys* a = nullptr;
    const std::vector<Seed>* seeds = nullptr;
    const std::vector<std::vector<uint64_t>>* offsets = nullptr;
    const u64* array = nullptr;
  };
  void check_key(const Entry& e) const;
  const Context& ctx_;
  uint64_t key_id_;
  std::vector<Entry> entries_;
};

// An opened key file: the mapping plus its validated records.
class SharedKeyFile {
 public:
  // Maps `path` and validates it against ctx before forming any pointer into it: size, header hash, parameter set
  // (Error ContextMismatch), key id when expected_key_id != 0 (KeyMismatch), every record's shape and bounds
  // (Serialization). Every error names the fix: write the file again from the uploaded keys.
  //
  // The content hash is not checked here: that is one read of the whole file (GiBs) per process, and it would
  // fault in every page at open instead of on first use. The file is written by the same node's driver, into a
  // private (0700) folder, created read-only and replaced only by rename; the header hash and size checks catch
  // a foreign, truncated or half-written file, and bad residues in the data cannot make a reader leave the
  // mapping (every offset and size was checked), only compute wrong results. verify() checks the content hash
  // where a caller wants it (once per node after writing, or when the folder is shared).
  static std::shared_ptr<SharedKeyFile> open(const Context& ctx, const std::string& path, uint64_t expected_key_id);

  uint64_t key_id() const { return key_id_; }
  const std::string& meta() const { return meta_; }
  size_t size() const { return map_->size(); }
  size_t n() const { return n_; }
  const std::shared_ptr<const MappedFile>& mapping() const { return map_; }
  // Error(Serialization) unless the data's SHA-256 matches the header's.
  void verify() const;

  // The records of `group` in file order (Error Serialization when it holds another kind, MissingKey when none).
  std::vector<SwitchKey> switch_keys(uint32_t group) const;
  GaloisKeys galois_keys(uint32_t group) const;
  std::vector<SharedKeyRecord> multi_keys(uint32_t group) const;
  // (data, rows): rows x N residues each.
  std::vector<std::pair<const u64*, size_t>> arrays(uint32_t group) const;
  bool has_group(uint32_t group) const;

 private:
  struct Parsed {
    uint32_t kind = 0, group = 0, parts = 0, digits = 0, rows = 0;
    uint64_t key_id = 0, galois = 0;
    int level = -1;
    bool has_a = false;
    std::vector<Seed> seeds;
    std::vector<std::vector<uint64_t>> offsets;
    const u64* data = nullptr;
  };
  explicit SharedKeyFile(std::shared_ptr<const MappedFile> map) : map_(std::move(map)) {}
  SharedKeyRecord record(const Parsed& p) const;
  std::vector<const Parsed*> group(uint32_t group, uint32_t kind, const char* what) const;
  std::shared_ptr<const MappedFile> map_;
  uint64_t param_hash_ = 0;  // the context's hash64, stamped on the keys
  size_t n_ = 0;
  uint64_t key_id_ = 0;
  std::string meta_;
  std::vector<Parsed> records_;
  size_t data_offset_ = 0;
  uint8_t content_hash_[32] = {};
};

}  // namespace hemlp
