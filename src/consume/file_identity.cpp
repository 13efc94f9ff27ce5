// The identity of a file of the log and finding it again after rotation (file_identity.h,
// docs/consumers.md, "Log rotation").

#include "consume/file_identity.h"

#include <dirent.h>
#include <fcntl.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <string_view>
#include <tuple>
#include <vector>

#include "outpost/error.h"

namespace outpost::consume::file_log {
namespace {

// The fingerprint covers the file's first line, at most this much of it: enough to tell two
// files of the log apart (each line holds a unique event id), cheap to read again.
constexpr std::size_t kFingerprintBytes = 1024;

std::uint64_t fnv1a(const char* p, std::size_t n) {
  std::uint64_t h = 14695981039346656037ull;
  for (std::size_t i = 0; i < n; ++i) {
    h ^= static_cast<unsigned char>(p[i]);
    h *= 1099511628211ull;
  }
  return h;
}

struct DirEntry {
  std::string path, name;
  struct stat st {};
};

// The regular files of `dir` (following symlinks, as opening them would).
std::vector<DirEntry> list_dir(const std::string& dir) {
  std::vector<DirEntry> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) {
    if (errno == ENOENT) return out;
    throw ConnectionError("file", "cannot list '" + dir + "': " + std::strerror(errno));
  }
  while (const dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    DirEntry entry{dir + "/" + name, name, {}};
    if (::stat(entry.path.c_str(), &entry.st) == 0 && S_ISREG(entry.st.st_mode))
      out.push_back(std::move(entry));
  }
  ::closedir(d);
  return out;
}

bool compressed(std::string_view name) {
  for (std::string_view ext : {".gz", ".bz2", ".xz", ".zst", ".lz4", ".lzo", ".Z", ".zip"})
    if (name.ends_with(ext)) return true;
  return false;
}

// Whether `name` is a rotated name of the log file `base` as logrotate makes them: `LOG.N`
// (numbered; a larger N is older) or `LOG-SUFFIX` (dateext). Sets the order among files of one
// birth time: -N for numbered names, 0 otherwise.
bool rotated_name(const std::string& name, const std::string& base, std::int64_t& order) {
  if (name.size() <= base.size() + 1 || !name.starts_with(base)) return false;
  char sep = name[base.size()];
  std::string_view rest = std::string_view(name).substr(base.size() + 1);
  if (sep == '-') {
    order = 0;
    return std::isdigit(static_cast<unsigned char>(rest.front())) != 0;
  }
  if (sep != '.') return false;
  std::int64_t n = 0;
  auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), n);
  if (ec != std::errc() || p != rest.data() + rest.size()) return false;
  order = -n;
  return true;
}

// The birth time of the file at `path` (ns since the epoch); 0 where the file system keeps none.
std::int64_t birth_ns(const std::string& path) {
  struct statx sx {};
  if (::statx(AT_FDCWD, path.c_str(), 0, STATX_BTIME, &sx) != 0 || !(sx.stx_mask & STATX_BTIME))
    return 0;
  return static_cast<std::int64_t>(sx.stx_btime.tv_sec) * 1'000'000'000 + sx.stx_btime.tv_nsec;
}

}  // namespace

ssize_t pread_full(int fd, char* buf, std::size_t n, std::int64_t at) {
  for (;;) {
    ssize_t got = ::pread(fd, buf, n, at);
    if (got >= 0 || errno != EINTR) return got;
  }
}

// The fingerprint of the file's first line (with its '\n'), or of its first kFingerprintBytes
// when that line is longer; none while the file has neither.
std::optional<std::uint64_t> fingerprint(int fd) {
  char buf[kFingerprintBytes];
  ssize_t n = pread_full(fd, buf, sizeof buf, 0);
  if (n <= 0) return std::nullopt;
  const auto got = static_cast<std::size_t>(n);
  if (const void* nl = std::memchr(buf, '\n', got))
    return fnv1a(buf, static_cast<std::size_t>(static_cast<const char*>(nl) - buf) + 1);
  if (got == sizeof buf) return fnv1a(buf, got);
  return std::nullopt;
}

Checkpoint parse_position(const std::string& position) {
  Checkpoint cp;
  if (position.empty()) return cp;
  auto bad = [&] {
    return ConfigError("file source: checkpoint '" + position +
                       "' is neither a byte offset nor OFFSET@DEVICE:INODE:BIRTH:FINGERPRINT");
  };
  const char* p = position.data();
  const char* end = p + position.size();
  auto [q, ec] = std::from_chars(p, end, cp.offset);
  if (ec != std::errc() || cp.offset < 0) throw bad();
  if (q == end) return cp;
  if (*q != '@') throw bad();
  Identity id;
  unsigned long long dev = 0, ino = 0;
  auto r1 = std::from_chars(q + 1, end, dev);
  if (r1.ec != std::errc() || r1.ptr == end || *r1.ptr != ':') throw bad();
  auto r2 = std::from_chars(r1.ptr + 1, end, ino);
  if (r2.ec != std::errc() || r2.ptr == end || *r2.ptr != ':') throw bad();
  auto r3 = std::from_chars(r2.ptr + 1, end, id.birth);
  if (r3.ec != std::errc() || r3.ptr == end || *r3.ptr != ':' || id.birth < 0) throw bad();
  if (r3.ptr + 1 != end) {
    std::uint64_t fp = 0;
    auto r4 = std::from_chars(r3.ptr + 1, end, fp, 16);
    if (r4.ec != std::errc() || r4.ptr != end) throw bad();
    id.fp = fp;
  }
  id.dev = static_cast<dev_t>(dev);
  id.ino = static_cast<ino_t>(ino);
  cp.id = id;
  return cp;
}

struct stat fstat_or_throw(int fd, const std::string& name) {
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    throw ConnectionError("file", "stat '" + name + "': " + std::strerror(errno));
  return st;
}

// Opens `name`; an empty LogFile when it does not exist or is a directory (file_identity.h).
LogFile open_log_file(const std::string& name) {
  LogFile f;
  int fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return f;
    throw ConnectionError("file", "cannot open '" + name + "': " + std::strerror(errno));
  }
  f.fd = Fd(fd);
  struct stat st = fstat_or_throw(fd, name);
  // A directory in the log's place (an operator blocking the path) is no log file: as if none
  // were there yet, so the reader waits for the file instead of taking it for a rotation.
  if (S_ISDIR(st.st_mode)) return LogFile{};
  f.id.dev = st.st_dev;
  f.id.ino = st.st_ino;
  struct statx sx {};
  if (::statx(fd, "", AT_EMPTY_PATH, STATX_BTIME, &sx) == 0 && (sx.stx_mask & STATX_BTIME))
    f.id.birth =
        static_cast<std::int64_t>(sx.stx_btime.tv_sec) * 1'000'000'000 + sx.stx_btime.tv_nsec;
  f.name = name;
  return f;
}

LogFile LogDirectory::find_by_identity(const Identity& id) const {
  for (auto& e : list_dir(dir_)) {
    if (!id.is(e.st)) continue;
    LogFile f = open_log_file(e.path);
    if (!f || !f.id.same_file(id)) continue;          // another file with a reused inode
    if (id.fp && f.identity().fp != id.fp) continue;  // the inode was reused by another file
    return f;
  }
  return {};
}

LogFile LogDirectory::find_copy(std::uint64_t fp, std::int64_t size,
                                const Identity& not_this) const {
  for (auto& e : list_dir(dir_)) {
    if (not_this.is(e.st) || e.st.st_size < size) continue;
    std::int64_t order = 0;
    if (!rotated_name(e.name, base_, order)) continue;
    LogFile f = open_log_file(e.path);
    if (f && f.identity().fp == fp) return f;
  }
  return {};
}

LogFile LogDirectory::next_rotated(LogFile& after, LogFile& current,
                                   const std::vector<Identity>& read) const {
  // Ordered by birth time, then the rotation number (a larger N is older), then the name: a
  // late writer appending to a rotated file changes its modification time, never these
  // (docs/consumers.md, "Log rotation"). Where the file system keeps no birth time, by the
  // rotation number and the name alone.
  struct Candidate {
    const DirEntry* e;
    std::int64_t birth, order;
  };
  auto entries = list_dir(dir_);
  std::int64_t after_order = INT64_MIN;
  std::string after_name;
  std::vector<Candidate> candidates;
  bool births = after.id.birth != 0;
  for (auto& e : entries) {
    std::int64_t order = 0;
    if (compressed(e.name) || !rotated_name(e.name, base_, order)) continue;
    if (after.id.is(e.st)) {
      after_order = order;
      after_name = e.name;
      continue;
    }
    if (current && current.id.is(e.st)) continue;
    std::int64_t birth = birth_ns(e.path);
    Identity id{e.st.st_dev, e.st.st_ino, birth, std::nullopt};
    // A file already read (the one finished by the last rotation, the one before it, ...) is
    // never read again, whatever its place.
    if (std::any_of(read.begin(), read.end(), [&](const Identity& r) { return r.same_file(id); }))
      continue;
    births = births && birth != 0;
    candidates.push_back({&e, birth, order});
  }
  using Key = std::tuple<std::int64_t, std::int64_t, std::string>;
  const Key after_key{births ? after.id.birth : 0, after_order, after_name};
  const DirEntry* best = nullptr;
  Key best_key;
  for (auto& c : candidates) {
    Key key{births ? c.birth : 0, c.order, c.e->name};
    if (key <= after_key || (best && key >= best_key)) continue;
    best = c.e;
    best_key = key;
  }
  if (!best) return {};
  LogFile f = open_log_file(best->path);
  // A copy of `after` (copytruncate) is not a later file.
  if (f && after.identity().fp && f.identity().fp == after.identity().fp) return {};
  return f;
}

}  // namespace outpost::consume::file_log
