#include "ckks/shared_key_file.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include "ckks/errors.h"
#include "ckks/keygen.h"
#include "ckks/sampler.h"

namespace hemlp {

namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "key files hold the key switch's own (little-endian) words");

constexpr char kMagic[8] = {'H', 'E', 'M', 'L', 'P', 'K', 'E', 'Y'};
constexpr size_t kPage = 4096;
constexpr uint32_t kKindSwitch = 1, kKindArray = 2, kKindMulti = 3;  // a multi-part key: boot/ms_lintrans.h
constexpr uint32_t kFlagA = 1;  // the a-part is held (else it is drawn from the seeds on use)
// bounds a corrupted header cannot exceed (the header hash is checked before the records are read, so these only
// bound the work of hashing and allocating for a forged one)
constexpr uint64_t kMaxRecords = 1u << 24, kMaxParts = 4096;

struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint8_t param_hash[32];  // SHA-256 of the parameter set (Params::hash_hex)
  uint64_t key_id;
  uint64_t n;
  uint64_t num_records;
  uint64_t table_bytes;
  uint64_t aux_bytes;
  uint64_t meta_bytes;
  uint64_t data_offset;  // page-aligned
  uint64_t file_bytes;
  uint8_t content_hash[32];  // SHA-256 of [data_offset, file_bytes)
  uint8_t header_hash[32];   // SHA-256 of [0, data_offset), this field zeroed
  uint8_t reserved[80];
};
static_assert(sizeof(FileHeader) == 256, "the header is 256 bytes");

struct RecordEntry {
  uint32_t kind;
  uint32_t group;
  uint64_t key_id;
  uint64_t galois;
  int32_t level;    // -1 for an array
  uint32_t parts;   // b-polynomials per digit
  uint32_t digits;  // num_digits(level); 1 for an array
  uint32_t rows;    // limbs of each polynomial
  uint32_t flags;
  uint32_t seeds;    // 0 or digits
  uint32_t offsets;  // 0 or digits lists of rows * kSeedSegments
  uint32_t reserved;
  uint64_t aux_offset;   // from the start of the aux area: seeds, then offsets
  uint64_t data_offset;  // from the start of the data: b[part][digit], then a[digit]
};
static_assert(sizeof(RecordEntry) == 72, "a record entry is 72 bytes");

class Sha256 {
 public:
  Sha256() : c_(EVP_MD_CTX_new()) {
    if (c_ == nullptr || EVP_DigestInit_ex(c_, EVP_sha256(), nullptr) != 1) {
      EVP_MD_CTX_free(c_);
      throw std::runtime_error("SHA-256 initialisation failed");
    }
  }
  ~Sha256() { EVP_MD_CTX_free(c_); }
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* p, size_t len) {
    if (len && EVP_DigestUpdate(c_, p, len) != 1) throw std::runtime_error("SHA-256 update failed");
  }
  std::array<uint8_t, 32> digest() {
    std::array<uint8_t, 32> out{};
    unsigned int len = 0;
    if (EVP_DigestFinal_ex(c_, out.data(), &len) != 1 || len != 32) throw std::runtime_error("SHA-256 failed");
    return out;
  }

 private:
  EVP_MD_CTX* c_;
};

std::array<uint8_t, 32> param_hash_bytes(const Context& ctx) {
  const std::string hex = ctx.params().hash_hex();
  std::array<uint8_t, 32> out{};
  for (size_t i = 0; i < 32 && 2 * i + 1 < hex.size(); ++i)
    out[i] = (uint8_t)std::stoul(hex.substr(2 * i, 2), nullptr, 16);
  return out;
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// x * y + z, false on overflow
bool mul_add(uint64_t x, uint64_t y, uint64_t z, uint64_t& out) {
  uint64_t m;
  return !__builtin_mul_overflow(x, y, &m) && !__builtin_add_overflow(m, z, &out);
}

std::array<uint8_t, 32> header_hash(const uint8_t* head, size_t data_offset) {
  FileHeader h;
  std::memcpy(&h, head, sizeof h);
  std::memset(h.header_hash, 0, sizeof h.header_hash);
  Sha256 sha;
  sha.update(&h, sizeof h);
  sha.update(head + sizeof h, data_offset - sizeof h);
  return sha.digest();
}

[[noreturn]] void os_fail(const std::string& what) { throw std::system_error(errno, std::generic_category(), what); }

void pwrite_all(int fd, const void* p, size_t len, uint64_t off, const std::string& path) {
  const char* c = static_cast<const char*>(p);
  while (len > 0) {
    const ssize_t w = ::pwrite(fd, c, std::min(len, (size_t)1 << 30), (off_t)off);
    if (w < 0) {
      if (errno == EINTR) continue;
      os_fail("writing the shared key file " + path);
    }
    c += w;
    off += (uint64_t)w;
    len -= (size_t)w;
  }
}

}  // namespace

// ---- writing

void SharedKeyWriter::check_key(const Entry& e) const {
  const size_t words = e.rows * ctx_.n();
  const size_t digits = (size_t)ctx_.params().num_digits(e.level);
  auto bad = [&](const char* why) {
    fail(ErrorKind::Parameter, std::string("shared key file: a key of level ") + std::to_string(e.level) + " " + why);
  };
  if (e.b.empty()) bad("has no b-part");
  for (const KeyPolys* bp : e.b) {
    if (bp->size() != digits) bad("has the wrong number of digits");
    for (size_t t = 0; t < digits; ++t)
      if (bp->words(t) != words) bad("has a polynomial of the wrong size");
  }
  if (!e.a->empty()) {
    if (e.a->size() != digits) bad("has the wrong number of a-parts");
    for (size_t t = 0; t < digits; ++t)
      if (e.a->words(t) != words) bad("has an a-part of the wrong size");
  }
  if (!e.seeds->empty() && e.seeds->size() != digits) bad("has the wrong number of seeds");
  if (e.a->empty() && e.seeds->size() != digits) bad("has neither its a-parts nor their seeds");
  if (!e.offsets->empty()) {
    if (e.offsets->size() != digits) bad("has the wrong number of seed offsets");
    for (const auto& o : *e.offsets)
      if (o.size() != e.rows * kSeedSegments) bad("has seed offsets of the wrong size");
  }
}

void SharedKeyWriter::add_switch_key(uint32_t group, const SwitchKey& key) {
  if (key.param_hash != ctx_.hash64())
    fail(ErrorKind::ContextMismatch, "shared key file: a key of another parameter set");
  if (key.key_id != key_id_) fail(ErrorKind::KeyMismatch, "shared key file: a switching key of another key pair");
  if (key.level < 0 || key.level > ctx_.max_level())
    fail(ErrorKind::Parameter, "shared key file: key level outside the chain");
  Entry e;
  e.kind = kKindSwitch;
  e.group = group;
  e.key_id = key.key_id;
  e.galois = key.galois;
  e.level = key.level;
  e.rows = (size_t)key.level + 1 + ctx_.num_p();
  e.b = {&key.b};
  e.a = &key.a;
  e.seeds = &key.a_seeds;
  e.offsets = &key.a_offsets;
  check_key(e);
  entries_.push_back(std::move(e));
}

void SharedKeyWriter::add_multi_key(uint32_t group, uint64_t key_id, uint64_t galois, int level,
                                    const std::vector<KeyPolys>& b, const KeyPolys& a,
                                    const std::vector<Seed>& a_seeds,
                                    const std::vector<std::vector<uint64_t>>& a_offsets) {
  if (level < 0 || level > ctx_.max_level()) fail(ErrorKind::Parameter, "shared key file: key level outside the chain");
  if (b.size() > kMaxParts) fail(ErrorKind::Parameter, "shared key file: too many parts per digit");
  Entry e;
  e.kind = kKindMulti;
  e.group = group;
  e.key_id = key_id;
  e.galois = galois;
  e.level = level;
  e.rows = (size_t)level + 1 + ctx_.num_p();
  for (const KeyPolys& bp : b) e.b.push_back(&bp);
  e.a = &a;
  e.seeds = &a_seeds;
  e.offsets = &a_offsets;
  check_key(e);
  entries_.push_back(std::move(e));
}

void SharedKeyWriter::add_array(uint32_t group, const u64* data, size_t rows) {
  if (data == nullptr || rows == 0 || rows > (size_t)ctx_.max_level() + 1 + ctx_.num_p())
    fail(ErrorKind::Parameter, "shared key file: an array must have 1 to L + 1 + K rows of N residues");
  Entry e;
  e.kind = kKindArray;
  e.group = group;
  e.rows = rows;
  e.array = data;
  entries_.push_back(std::move(e));
}

void SharedKeyWriter::write(const std::string& path, const std::string& meta) const {
  const size_t n = ctx_.n();
  // the layout: records, aux and meta after the header, then each record's polynomials from a page boundary
  std::vector<RecordEntry> table(entries_.size());
  std::vector<uint8_t> aux;
  uint64_t data_bytes = 0;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    RecordEntry& r = table[i];
    std::memset(&r, 0, sizeof r);
    r.kind = e.kind;
    r.group = e.group;
    r.key_id = e.key_id;
    r.galois = e.galois;
    r.level = e.level;
    r.rows = (uint32_t)e.rows;
    r.aux_offset = aux.size();
    r.data_offset = align_up(data_bytes, kPage);
    uint64_t polys = 1;
    if (e.kind != kKindArray) {
      r.parts = (uint32_t)e.b.size();
      r.digits = (uint32_t)e.b[0]->size();
      r.flags = e.a->empty() ? 0 : kFlagA;
      r.seeds = (uint32_t)e.seeds->size();
      r.offsets = (uint32_t)e.offsets->size();
      for (const Seed& s : *e.seeds) aux.insert(aux.end(), s.begin(), s.end());
      for (const auto& o : *e.offsets) {
        const uint8_t* p = reinterpret_cast<const uint8_t*>(o.data());
        aux.insert(aux.end(), p, p + o.size() * sizeof(uint64_t));
      }
      polys = (uint64_t)r.parts * r.digits + (r.flags & kFlagA ? r.digits : 0);
    } else {
      r.parts = r.digits = 1;
    }
    data_bytes = r.data_offset + polys * e.rows * n * sizeof(u64);
  }
  FileHeader h;
  std::memset(&h, 0, sizeof h);
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kSharedKeyFileVersion;
  h.header_bytes = sizeof(FileHeader);
  const auto ph = param_hash_bytes(ctx_);
  std::memcpy(h.param_hash, ph.data(), 32);
  h.key_id = key_id_;
  h.n = n;
  h.num_records = table.size();
  h.table_bytes = table.size() * sizeof(RecordEntry);
  h.aux_bytes = aux.size();
  h.meta_bytes = meta.size();
  h.data_offset = align_up(sizeof(FileHeader) + h.table_bytes + h.aux_bytes + h.meta_bytes, kPage);
  h.file_bytes = h.data_offset + data_bytes;
  std::vector<uint8_t> head(h.data_offset, 0);
  size_t at = sizeof(FileHeader);
  std::memcpy(head.data() + at, table.data(), h.table_bytes);
  at += h.table_bytes;
  std::memcpy(head.data() + at, aux.data(), aux.size());
  at += aux.size();
  std::memcpy(head.data() + at, meta.data(), meta.size());

  // a unique temporary file beside the target, renamed over it when complete: readers see all or nothing
  const Seed rnd = os_seed();
  char tag[17];
  std::snprintf(tag, sizeof tag, "%02x%02x%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5],
                rnd[6], rnd[7]);
  const std::string tmp = path + ".tmp" + std::to_string(::getpid()) + "." + tag;
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0400);
  if (fd < 0) os_fail("creating the shared key file " + tmp);
  try {
    static const std::vector<uint8_t> zeros(kPage, 0);
    Sha256 content;
    uint64_t pos = 0;  // within the data
    auto put = [&](const void* p, size_t len) {
      content.update(p, len);
      pwrite_all(fd, p, len, h.data_offset + pos, path);
      pos += len;
    };
    for (size_t i = 0; i < entries_.size(); ++i) {
      const Entry& e = entries_[i];
      const RecordEntry& r = table[i];
      put(zeros.data(), r.data_offset - pos);  // < one page
      const size_t bytes = e.rows * n * sizeof(u64);
      if (e.kind == kKindArray) {
        put(e.array, bytes);
        continue;
      }
      for (const KeyPolys* bp : e.b)
        for (size_t t = 0; t < bp->size(); ++t) put(bp->data(t), bytes);
      if (r.flags & kFlagA)
        for (size_t t = 0; t < e.a->size(); ++t) put(e.a->data(t), bytes);
    }
    const auto ch = content.digest();
    std::memcpy(h.content_hash, ch.data(), 32);
    std::memcpy(head.data(), &h, sizeof h);
    const auto hh = header_hash(head.data(), head.size());
    std::memcpy(head.data() + offsetof(FileHeader, header_hash), hh.data(), 32);
    pwrite_all(fd, head.data(), head.size(), 0, path);
    if (::fsync(fd) != 0) os_fail("syncing the shared key file " + path);
    if (::close(fd) != 0) {
      ::unlink(tmp.c_str());
      os_fail("closing the shared key file " + path);
    }
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    errno = err;
    os_fail("renaming the shared key file into " + path);
  }
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {  // the rename survives a crash
    ::fsync(dfd);
    ::close(dfd);
  }
}

// ---- reading

std::shared_ptr<SharedKeyFile> SharedKeyFile::open(const Context& ctx, const std::string& path,
                                                   uint64_t expected_key_id) {
  std::shared_ptr<SharedKeyFile> f(new SharedKeyFile(MappedFile::open(path, "shared key file")));
  const std::string fix = "; write it again from the uploaded evaluation keys "
                          "(hemlp.runtime.shared_keys.write_shared_keys)";
  auto bad = [&](const std::string& why) {
    fail(ErrorKind::Serialization, "shared key file " + path + ": " + why + fix);
  };
  const uint8_t* base = f->map_->data();
  const uint64_t size = f->map_->size();
  if (size < sizeof(FileHeader))
    bad("truncated: " + std::to_string(size) + " bytes, shorter than its " + std::to_string(sizeof(FileHeader)) +
        "-byte header");
  FileHeader h;
  std::memcpy(&h, base, sizeof h);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) bad("not a hemlp shared key file (its magic is wrong)");
  if (h.version != kSharedKeyFileVersion)
    bad("format version " + std::to_string(h.version) + "; this hemlp reads version " +
        std::to_string(kSharedKeyFileVersion));
  if (h.header_bytes != sizeof(FileHeader)) bad("the header is corrupted (its size field)");
  if (h.file_bytes != size)
    bad("the header describes " + std::to_string(h.file_bytes) + " bytes but the file has " + std::to_string(size) +
        " (truncated or overwritten)");
  uint64_t head_end = 0;
  if (h.num_records > kMaxRecords || h.table_bytes != h.num_records * sizeof(RecordEntry) ||
      __builtin_add_overflow((uint64_t)sizeof(FileHeader), h.table_bytes, &head_end) ||
      __builtin_add_overflow(head_end, h.aux_bytes, &head_end) ||
      __builtin_add_overflow(head_end, h.meta_bytes, &head_end) || head_end > h.data_offset ||
      h.data_offset > size || h.data_offset % kPage != 0)
    bad("the header is corrupted (its section sizes do not fit the file)");
  const auto hh = header_hash(base, h.data_offset);
  if (std::memcmp(hh.data(), h.header_hash, 32) != 0) bad("the header is corrupted (its SHA-256 does not match)");
  // the header is the writer's: now the checks of what it says
  const auto ph = param_hash_bytes(ctx);
  if (std::memcmp(ph.data(), h.param_hash, 32) != 0)
    fail(ErrorKind::ContextMismatch, "shared key file " + path + " holds keys of another parameter set than this "
                                     "context" + fix + " under this model's context");
  if (h.n != ctx.n()) bad("its ring degree does not match the parameter set");
  if (expected_key_id != 0 && h.key_id != expected_key_id) {
    char got[17], want[17];
    std::snprintf(got, sizeof got, "%016llx", (unsigned long long)h.key_id);
    std::snprintf(want, sizeof want, "%016llx", (unsigned long long)expected_key_id);
    fail(ErrorKind::KeyMismatch, "shared key file " + path + " holds the keys of key pair " + got + ", not " + want +
                                     " (the key pair expected here)" + fix + " of that key pair");
  }
  f->param_hash_ = ctx.hash64();
  f->n_ = ctx.n();
  f->key_id_ = h.key_id;
  f->data_offset_ = h.data_offset;
  std::memcpy(f->content_hash_, h.content_hash, 32);
  const uint8_t* aux = base + sizeof(FileHeader) + h.table_bytes;
  f->meta_.assign(reinterpret_cast<const char*>(aux + h.aux_bytes), h.meta_bytes);
  const uint64_t data_size = size - h.data_offset;
  const int L = ctx.max_level(), K = ctx.num_p();
  const size_t n = ctx.n();
  f->records_.reserve(h.num_records);
  for (uint64_t i = 0; i < h.num_records; ++i) {
    RecordEntry r;
    std::memcpy(&r, base + sizeof(FileHeader) + i * sizeof(RecordEntry), sizeof r);
    const std::string which = "record " + std::to_string(i) + " ";
    uint64_t polys = 1;
    if (r.kind == kKindSwitch || r.kind == kKindMulti) {
      if (r.level < 0 || r.level > L) bad(which + "has a level outside this context's chain");
      if (r.digits != (uint32_t)ctx.params().num_digits(r.level) || r.rows != (uint32_t)(r.level + 1 + K))
        bad(which + "has digit or limb counts that do not match its level");
      if (r.parts < 1 || r.parts > kMaxParts) bad(which + "has an invalid part count");
      if (r.galois != 0 && (r.galois % 2 == 0 || r.galois >= 2 * n)) bad(which + "has an invalid Galois element");
      if (r.kind == kKindSwitch && (r.parts != 1 || r.key_id != h.key_id))
        bad(which + "is a switching key of another key pair or with several parts");
      if ((r.flags & ~kFlagA) != 0 || (r.seeds != 0 && r.seeds != r.digits) ||
          (r.offsets != 0 && r.offsets != r.digits) || (!(r.flags & kFlagA) && r.seeds != r.digits))
        bad(which + "has inconsistent a-part fields");
      polys = (uint64_t)r.parts * r.digits + (r.flags & kFlagA ? r.digits : 0);
    } else if (r.kind == kKindArray) {
      if (r.rows < 1 || r.rows > (uint32_t)(L + 1 + K) || r.parts != 1 || r.digits != 1 || r.flags || r.seeds ||
          r.offsets)
        bad(which + "is an invalid array");
    } else {
      bad(which + "has an unknown kind");
    }
    const uint64_t offset_words = (uint64_t)r.rows * kSeedSegments;
    uint64_t aux_need = 0, aux_end = 0, data_need = 0, data_end = 0;
    if (!mul_add(r.offsets, offset_words * sizeof(uint64_t), (uint64_t)r.seeds * 32, aux_need) ||
        __builtin_add_overflow(r.aux_offset, aux_need, &aux_end) || aux_end > h.aux_bytes)
      bad(which + "points outside the seed area");
    if (!mul_add(polys, (uint64_t)r.rows * n * sizeof(u64), 0, data_need) ||
        __builtin_add_overflow(r.data_offset, data_need, &data_end) || data_end > data_size ||
        r.data_offset % 64 != 0)
      bad(which + "points outside the data");
    Parsed p;
    p.kind = r.kind;
    p.group = r.group;
    p.parts = r.parts;
    p.digits = r.digits;
    p.rows = r.rows;
    p.key_id = r.key_id;
    p.galois = r.galois;
    p.level = r.level;
    p.has_a = r.flags & kFlagA;
    const uint8_t* a = aux + r.aux_offset;
    p.seeds.resize(r.seeds);
    for (auto& s : p.seeds) {
      std::memcpy(s.data(), a, 32);
      a += 32;
    }
    p.offsets.assign(r.offsets, std::vector<uint64_t>(offset_words));
    for (auto& o : p.offsets) {
      std::memcpy(o.data(), a, offset_words * sizeof(uint64_t));
      a += offset_words * sizeof(uint64_t);
    }
    // every bound checked: the one place a pointer into the data is formed
    p.data = reinterpret_cast<const u64*>(base + h.data_offset + r.data_offset);
    f->records_.push_back(std::move(p));
  }
  return f;
}

void SharedKeyFile::verify() const {
  Sha256 sha;
  sha.update(map_->data() + data_offset_, map_->size() - data_offset_);
  if (std::memcmp(sha.digest().data(), content_hash_, 32) != 0)
    fail(ErrorKind::Serialization, "shared key file " + map_->path() + ": the key data is corrupted (its SHA-256 "
                                   "does not match the header's); write it again from the uploaded evaluation keys "
                                   "(hemlp.runtime.shared_keys.write_shared_keys)");
}

bool SharedKeyFile::has_group(uint32_t g) const {
  for (const Parsed& p : records_)
    if (p.group == g) return true;
  return false;
}

std::vector<const SharedKeyFile::Parsed*> SharedKeyFile::group(uint32_t g, uint32_t kind, const char* what) const {
  std::vector<const Parsed*> out;
  for (const Parsed& p : records_)
    if (p.group == g) {
      if (p.kind != kind)
        fail(ErrorKind::Serialization, "shared key file " + map_->path() + ": the " + what + " group holds a record "
                                       "of another kind; the file is corrupted");
      out.push_back(&p);
    }
  if (out.empty()) fail(ErrorKind::MissingKey, "shared key file " + map_->path() + " holds no " + what);
  return out;
}

SharedKeyRecord SharedKeyFile::record(const Parsed& p) const {
  const size_t words = (size_t)p.rows * n_;
  auto polys = [&](size_t first) {
    std::vector<const u64*> ptrs(p.digits);
    for (size_t t = 0; t < p.digits; ++t) ptrs[t] = p.data + (first + t) * words;
    return KeyPolys(map_, std::move(ptrs), std::vector<size_t>(p.digits, words));
  };
  SharedKeyRecord r;
  r.key_id = p.key_id;
  r.galois = p.galois;
  r.level = p.level;
  for (size_t j = 0; j < p.parts; ++j) r.b.push_back(polys(j * p.digits));
  if (p.has_a) r.a = polys((size_t)p.parts * p.digits);
  r.a_seeds = p.seeds;
  r.a_offsets = p.offsets;
  return r;
}

std::vector<SwitchKey> SharedKeyFile::switch_keys(uint32_t g) const {
  std::vector<SwitchKey> out;
  for (const Parsed* p : group(g, kKindSwitch, "switching keys")) {
    SharedKeyRecord r = record(*p);
    SwitchKey k;
    k.param_hash = param_hash_;
    k.key_id = r.key_id;
    k.galois = r.galois;
    k.level = r.level;
    k.b = std::move(r.b[0]);
    k.a = std::move(r.a);
    k.a_seeds = std::move(r.a_seeds);
    k.a_offsets = std::move(r.a_offsets);
    out.push_back(std::move(k));
  }
  return out;
}

GaloisKeys SharedKeyFile::galois_keys(uint32_t g) const {
  GaloisKeys out;
  out.param_hash = param_hash_;
  out.key_id = key_id_;
  for (SwitchKey& k : switch_keys(g)) {
    if (k.galois == 0 || out.keys.count(k.galois))
      fail(ErrorKind::Serialization, "shared key file " + map_->path() + ": a rotation key set with a "
                                     "relinearisation key or an element twice; the file is corrupted");
    const uint64_t el = k.galois;
    out.keys.emplace(el, std::move(k));
  }
  return out;
}

std::vector<SharedKeyRecord> SharedKeyFile::multi_keys(uint32_t g) const {
  std::vector<SharedKeyRecord> out;
  for (const Parsed* p : group(g, kKindMulti, "batched keys")) out.push_back(record(*p));
  return out;
}

std::vector<std::pair<const u64*, size_t>> SharedKeyFile::arrays(uint32_t g) const {
  std::vector<std::pair<const u64*, size_t>> out;
  for (const Parsed* p : group(g, kKindArray, "arrays")) out.emplace_back(p->data, (size_t)p->rows);
  return out;
}

}  // namespace hemlp
